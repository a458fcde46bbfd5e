import { assert, assertEquals, assertRejects } from "./_assert.ts";
import { join } from "node:path";
import { skillEntry } from "@modelcontextprotocol/server/ext/skills";
import { CodeExecutorError } from "../src/errors.ts";
import type { SaveSkillInput } from "../src/skills/store.ts";
import { parseSkillMarkdown } from "../src/skills/front_matter.ts";
import { principalDirName } from "../src/skills/layout.ts";
import { withUserDirs } from "./_fs.ts";
import { ADD, storeIn, tree } from "./_skills.ts";

async function assertSkillError(
  fn: () => Promise<unknown>,
  type: string,
  includes: string,
): Promise<void> {
  const error = await assertRejects(fn, CodeExecutorError);
  assertEquals(error.type, type, error.message);
  assert(error.message.includes(includes), `"${error.message}" should include "${includes}"`);
}

Deno.test("SkillStore.save() writes SKILL.md and skill.ts that get() and the SDK read back", async () => {
  await withUserDirs("skills-store-", async (dirs) => {
    const store = storeIn(dirs);
    const saved = await store.save(ADD);
    assertEquals(saved.version, 1);
    assertEquals(saved.scope, "user");
    assertEquals(saved.dir, join(dirs.home, ".config", "code-executor", "skills", "add-numbers"));
    const got = await store.get("add-numbers");
    assertEquals(got, saved);
    assertEquals((await store.list()).map((r) => r.name), ["add-numbers"]);
    const files = await store.files(got);
    const entry = await skillEntry("add-numbers", files);
    assertEquals(entry.frontmatter.name, "add-numbers");
    assertEquals(entry.frontmatter.description, "Adds two numbers");
    const md = await Deno.readTextFile(join(saved.dir, "SKILL.md"));
    assert(md.includes('return await skills.call("add-numbers", { "a": 1, "b": 1 });'), md);
    assertEquals(await Deno.readTextFile(join(saved.dir, "skill.ts")), ADD.code);
    // A person edits the program in place: the next read sees it, not a remembered copy.
    await Deno.writeTextFile(join(saved.dir, "skill.ts"), "return args.b + args.a;");
    assertEquals((await store.get("add-numbers")).code, "return args.b + args.a;");
    assertEquals((await store.list())[0].code, "return args.b + args.a;");
  });
});

Deno.test("SkillStore.save() of an existing name makes version 2 and keeps name@1", async () => {
  await withUserDirs("skills-store-", async (dirs) => {
    const store = storeIn(dirs);
    await store.save(ADD);
    const second = await store.save({ ...ADD, code: "return args.a + args.b + 0;" });
    assertEquals(second.version, 2);
    assertEquals((await store.get("add-numbers")).version, 2);
    const first = await store.get("add-numbers@1");
    assertEquals([first.version, first.latest, first.code], [1, false, ADD.code]);
    assertEquals((await store.get("add-numbers@2")).latest, true);
    assertEquals((await store.versions("add-numbers")).map((r) => r.version), [1, 2]);
    assertEquals((await store.list()).length, 1);
    await assertSkillError(() => store.get("add-numbers@3"), "SkillNotFound", "add-numbers@3");
    const third = await store.save({ ...ADD, description: "Adds, v3" });
    assertEquals(third.version, 3);
    assertEquals((await store.get("add-numbers@2")).code, "return args.a + args.b + 0;");
    await store.remove("add-numbers");
    await assertSkillError(() => store.get("add-numbers@1"), "SkillNotFound", "add-numbers");
  });
});

Deno.test("SkillStore: project wins over user, principals see their own plus shared", async () => {
  await withUserDirs("skills-store-", async (dirs) => {
    const user = storeIn(dirs);
    await user.save({ ...ADD, description: "user copy" });
    const project = storeIn(dirs, { saveTo: "project" });
    await project.save({ ...ADD, name: "only-project", description: "project only" });
    await Deno.mkdir(join(dirs.project, ".code-executor", "skills", "add-numbers"));
    await Deno.copyFile(
      join(dirs.home, ".config/code-executor/skills/add-numbers/skill.ts"),
      join(dirs.project, ".code-executor/skills/add-numbers/skill.ts"),
    );
    const md = await Deno.readTextFile(
      join(dirs.home, ".config/code-executor/skills/add-numbers/SKILL.md"),
    );
    await Deno.writeTextFile(
      join(dirs.project, ".code-executor/skills/add-numbers/SKILL.md"),
      md.replace('"user copy"', '"project copy"'),
    );
    assertEquals((await user.get("add-numbers")).description, "project copy");
    assertEquals((await user.get("add-numbers")).scope, "project");
    // A save of a name that exists goes where the name is seen, so it is not shadowed.
    assertEquals((await user.save(ADD)).scope, "project");

    const http = storeIn(dirs, { admins: ["admin"] });
    const own = await http.save({ ...ADD, name: "alice-only" }, "alice");
    assertEquals(own.scope, "principal");
    assert(own.dir.includes(principalDirName("alice")), own.dir);
    const names = async (who: string) => (await http.list(who)).map((r) => `${r.name}:${r.scope}`);
    assertEquals(await names("alice"), [
      "add-numbers:project",
      "alice-only:principal",
      "only-project:project",
    ]);
    assertEquals(await names("bob"), ["add-numbers:project", "only-project:project"]);
    await assertSkillError(() => http.get("alice-only", "bob"), "SkillNotFound", "alice-only");
    await assertSkillError(
      () => http.remove("only-project", "bob"),
      "SkillNotFound",
      "only-project",
    );
    const shared = await http.save({ ...ADD, name: "for-everyone" }, "admin");
    assertEquals(shared.scope, "shared");
    assert((await names("bob")).includes("for-everyone:shared"));
  });
});

Deno.test("SkillStore.save() is refused by skills.save off, and admin lets only admins save", async () => {
  await withUserDirs("skills-store-", async (dirs) => {
    await assertSkillError(
      () => storeIn(dirs, { save: "off" }).save(ADD),
      "SkillSaveDisabled",
      '"off"',
    );
    await assertSkillError(
      () => storeIn(dirs, { save: "off" }).save(ADD, undefined, { admin: true }),
      "SkillSaveDisabled",
      "turned off",
    );
    const adminOnly = storeIn(dirs, { save: "admin", admins: ["root"] });
    await assertSkillError(() => adminOnly.save(ADD), "SkillSaveDisabled", "admin only");
    await assertSkillError(() => adminOnly.save(ADD, "alice"), "SkillSaveDisabled", "admin only");
    assertEquals((await adminOnly.save(ADD, "root")).scope, "shared");
    assertEquals((await adminOnly.save(ADD, undefined, { admin: true })).version, 2);
  });
});

const HOSTILE_NAMES = [
  "../escape",
  "a/b",
  "a\\b",
  "..",
  ".",
  ".versions",
  "bad\u0000name",
  "bad\nname",
  "tab\tname",
  "UpperCase",
  "-leading",
  "trailing-",
  "double--hyphen",
  "",
  "x".repeat(65),
  "save",
  "list",
  "then",
  "class",
  "my-claude-helper",
  "café",
  "name@2",
];

Deno.test("SkillStore.save() refuses hostile names and writes nothing", async () => {
  await withUserDirs("skills-store-", async (dirs) => {
    const store = storeIn(dirs);
    const before = await tree(dirs.root);
    for (const name of HOSTILE_NAMES) {
      await assertSkillError(() => store.save({ ...ADD, name }), "SkillInvalid", "Skill name");
      await assertRejects(() => store.get(name), CodeExecutorError);
    }
    assertEquals(await tree(dirs.root), before);
  });
});

Deno.test("SkillStore.save() keeps injected front matter inside a quoted scalar", async () => {
  await withUserDirs("skills-store-", async (dirs) => {
    const store = storeIn(dirs);
    const description =
      'Adds\nname: other\n---\nmetadata:\n  code-executor-language: "python"\n"quoted" \\ é: {a: 1} # not a comment';
    const saved = await store.save({ ...ADD, description });
    assertEquals(saved.description, description);
    const got = await store.get("add-numbers");
    assertEquals([got.name, got.description, got.language], [
      "add-numbers",
      description,
      "typescript",
    ]);
    const files = await store.files(got);
    const entry = await skillEntry("add-numbers", files);
    assertEquals(entry.frontmatter.name, "add-numbers");
    assertEquals(entry.frontmatter.description, description);
    const md = new TextDecoder().decode(files["SKILL.md"]);
    assertEquals(md.split("\n").filter((line) => line === "---").length, 2, md);
    assertEquals(md.split("\n").filter((line) => line.startsWith("name:")).length, 1, md);
  });
});

Deno.test("parseSkillMarkdown() refuses front matter it did not write", () => {
  const good = [
    "---",
    'name: "a"',
    'description: "d"',
    "metadata:",
    '  code-executor-language: "typescript"',
    '  code-executor-version: "1"',
    '  code-executor-input-schema: "{\\"type\\":\\"object\\"}"',
    "---",
    "",
  ];
  assertEquals(parseSkillMarkdown(good.join("\n"), "x").name, "a");
  const cases: Array<[string, string[]]> = [
    ["plain scalar", good.with(1, "name: a")],
    ["single quotes", good.with(1, "name: 'a'")],
    ["repeated key", [...good.slice(0, 2), 'name: "b"', ...good.slice(2)]],
    ["unknown key", [...good.slice(0, 3), 'allowed-tools: "Bash"', ...good.slice(3)]],
    ["YAML tag", good.with(2, 'description: !!binary "ZA=="')],
    ["anchor", good.with(2, 'description: &x "d"')],
    ["flow mapping", good.with(6, '  code-executor-input-schema: {"type": "object"}')],
    ["trailing text", good.with(1, 'name: "a" # x')],
    ["no closing line", good.slice(0, 7)],
    ["language", good.with(4, '  code-executor-language: "ruby"')],
    ["version", good.with(5, '  code-executor-version: "0"')],
    ["schema not object", good.with(6, '  code-executor-input-schema: "[1]"')],
  ];
  for (const [what, lines] of cases) {
    let thrown: unknown;
    try {
      parseSkillMarkdown(lines.join("\n"), "x");
    } catch (error) {
      thrown = error;
    }
    assert(thrown instanceof CodeExecutorError && thrown.type === "SkillInvalid", what);
  }
});

Deno.test("SkillStore.save() refuses oversize code, description and schema, and non-JSON-Schema", async () => {
  await withUserDirs("skills-store-", async (dirs) => {
    const store = storeIn(dirs, { maxCodeBytes: 1024, maxSchemaBytes: 512 });
    const before = await tree(dirs.root);
    const notSchemas: unknown[] = [
      { type: "array" },
      { properties: {} },
      { type: "object", properties: { a: { type: "nope" } } },
      { type: "object", required: "a" },
      { type: "object", minProperties: -1 },
      { type: "object", $schema: "http://json-schema.org/draft-07/schema#", properties: 5 },
      ["type", "object"],
      "object",
    ];
    // Each change to a valid skill, and what its refusal must name.
    const invalid: Array<[Partial<SaveSkillInput>, string]> = [
      [{ code: "x".repeat(1025) }, "skills.maxCodeBytes"],
      [{ code: "   " }, "code is missing"],
      [{ description: "d".repeat(1025) }, "too long"],
      [{ description: "bell\u0007" }, "control"],
      [{ inputSchema: { type: "object", description: "s".repeat(600) } }, "skills.maxSchemaBytes"],
      ...notSchemas.map((inputSchema): [Partial<SaveSkillInput>, string] => [
        { inputSchema: inputSchema as Record<string, unknown> },
        "inputSchema",
      ]),
      [{ language: "ruby" as "python" }, "language"],
    ];
    for (const [change, includes] of invalid) {
      await assertSkillError(() => store.save({ ...ADD, ...change }), "SkillInvalid", includes);
    }
    assertEquals(await tree(dirs.root), before);
  });
});

Deno.test("SkillStore refuses symlinks planted in a skills root and writes nothing outside it", async () => {
  await withUserDirs("skills-store-", async (dirs) => {
    const store = storeIn(dirs);
    const root = join(dirs.home, ".config", "code-executor", "skills");
    const outside = join(dirs.root, "outside");
    await Deno.mkdir(outside);
    await Deno.writeTextFile(join(outside, "secret.txt"), "secret");
    const seed = await store.save(ADD);
    // 1. A skill directory that is a symlink to a directory outside.
    await Deno.mkdir(join(outside, "evil-dir"));
    await Deno.copyFile(join(seed.dir, "SKILL.md"), join(outside, "evil-dir", "SKILL.md"));
    await Deno.copyFile(join(seed.dir, "skill.ts"), join(outside, "evil-dir", "skill.ts"));
    await Deno.symlink(join(outside, "evil-dir"), join(root, "linked-skill"));
    // 2. A SKILL.md that is a symlink to a file outside.
    await Deno.mkdir(join(root, "linked-md"));
    await Deno.symlink(join(outside, "secret.txt"), join(root, "linked-md", "SKILL.md"));
    await Deno.writeTextFile(join(root, "linked-md", "skill.ts"), "return 1");
    // 3. The program a symlink.
    await Deno.mkdir(join(root, "linked-code"));
    const md = (await Deno.readTextFile(join(seed.dir, "SKILL.md"))).replace(
      '"add-numbers"',
      '"linked-code"',
    );
    await Deno.writeTextFile(join(root, "linked-code", "SKILL.md"), md);
    await Deno.symlink(join(outside, "secret.txt"), join(root, "linked-code", "skill.ts"));
    // 4. `.versions` a symlink to a directory outside.
    await Deno.mkdir(join(outside, "versions"));
    await Deno.symlink(join(outside, "versions"), join(root, ".versions"));

    const before = await tree(dirs.root);
    assertEquals((await store.list()).map((r) => r.name), ["add-numbers"]);
    await assertSkillError(() => store.get("linked-skill"), "SkillInvalid", "symlink");
    await assertSkillError(() => store.get("linked-md"), "SkillInvalid", "symlink");
    await assertSkillError(() => store.get("linked-code"), "SkillInvalid", "symlink");
    await assertSkillError(
      () => store.save({ ...ADD, name: "linked-skill" }),
      "SkillInvalid",
      "symlink",
    );
    await assertSkillError(() => store.save(ADD), "SkillInvalid", "symlink");
    await assertSkillError(() => store.get("add-numbers@7"), "SkillInvalid", "symlink");
    await assertSkillError(() => store.remove("linked-skill"), "SkillInvalid", "symlink");
    await assertSkillError(() => store.remove("add-numbers"), "SkillInvalid", "symlink");
    assertEquals(await tree(dirs.root), before);
    assertEquals([...(await tree(outside)).keys()].sort(), [
      "evil-dir/",
      "evil-dir/SKILL.md",
      "evil-dir/skill.ts",
      "secret.txt",
      "versions/",
    ]);
  });
});

Deno.test("SkillStore refuses a skills root that is a symlink", async () => {
  await withUserDirs("skills-store-", async (dirs) => {
    const outside = join(dirs.root, "outside");
    await Deno.mkdir(outside);
    await Deno.mkdir(join(dirs.project, ".code-executor"));
    await Deno.symlink(outside, join(dirs.project, ".code-executor", "skills"));
    const store = storeIn(dirs, { saveTo: "project" });
    await assertSkillError(() => store.save(ADD), "SkillInvalid", "symlink");
    assertEquals([...(await tree(outside)).keys()], []);
  });
});

Deno.test("SkillStore.save() from two stores on one root at once gives every save its own version", async () => {
  await withUserDirs("skills-store-", async (dirs) => {
    // Two stores stand for two server processes: the root's flock orders their saves.
    const a = storeIn(dirs);
    const b = storeIn(dirs);
    const saves = Array.from(
      { length: 10 },
      (_, i) => (i % 2 ? a : b).save({ ...ADD, code: `return ${i};` }),
    );
    const versions = (await Promise.all(saves)).map((r) => r.version).sort((x, y) => x - y);
    assertEquals(versions, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    // A save that died half way left its temporary directory: the next save clears it.
    const root = join(dirs.home, ".config", "code-executor", "skills");
    await Deno.mkdir(join(root, ".tmp-dead"));
    await Deno.writeTextFile(join(root, ".tmp-dead", "SKILL.md"), "half");
    await Deno.symlink(join(dirs.root, "home"), join(root, ".tmp-link"));
    await a.save({ ...ADD, code: "return 10;" });
    assertEquals(
      [...Deno.readDirSync(root)].map((e) => e.name).filter((n) => n.startsWith(".tmp")),
      [],
    );
    assert(Deno.statSync(join(dirs.root, "home")).isDirectory);
    versions.push(11);
    const stored = await a.versions("add-numbers");
    assertEquals(stored.map((r) => r.version), versions);
    assertEquals(new Set(stored.map((r) => r.code)).size, 11);
  });
});

Deno.test("SkillStore skips a hand-edited skill whose front matter names another skill", async () => {
  await withUserDirs("skills-store-", async (dirs) => {
    const store = storeIn(dirs);
    const saved = await store.save(ADD);
    const md = join(saved.dir, "SKILL.md");
    await Deno.writeTextFile(
      md,
      (await Deno.readTextFile(md)).replace('name: "add-numbers"', 'name: "other"'),
    );
    assertEquals(await store.list(), []);
    await assertSkillError(() => store.get("add-numbers"), "SkillInvalid", "the two must be equal");
    await assertSkillError(() => store.save(ADD), "SkillInvalid", "the two must be equal");
  });
});
