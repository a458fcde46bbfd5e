/**
 * `code-executor skills list | show | rm | export | import`, run as the user runs it: `main.ts` in a
 * subprocess with a private HOME and a project directory as its working directory. Hostile
 * directories are imported for real and refused, and nothing is written anywhere.
 *
 * @module
 */
import { join } from "node:path";
import { assert, assertEquals } from "./_assert.ts";
import { denoDir, ROOT } from "./_env.ts";
import { withUserDirs } from "./_fs.ts";
import { ADD, storeIn as store, tree as treeUnder } from "./_skills.ts";

interface Dirs {
  root: string;
  home: string;
  project: string;
}

async function cli(
  dirs: Dirs,
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  const output = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      "--config",
      join(ROOT, "deno.json"),
      join(ROOT, "main.ts"),
      "skills",
      ...args,
    ],
    cwd: dirs.project,
    clearEnv: true,
    env: {
      PATH: Deno.env.get("PATH") ?? "",
      HOME: dirs.home,
      DENO_DIR: denoDir(),
      NO_COLOR: "1",
      ...env,
    },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const decode = (bytes: Uint8Array) => new TextDecoder().decode(bytes);
  return { code: output.code, stdout: decode(output.stdout), stderr: decode(output.stderr) };
}

/** The tree the CLI's runs leave, without the Deno cache they fill under `home/`. */
const tree = (root: string) => treeUnder(root, { skip: "home/.cache" });

Deno.test("code-executor skills list, show, export, import and rm", async () => {
  await withUserDirs("skills-cli-", async (dirs) => {
    const empty = await cli(dirs, ["list"]);
    assertEquals(empty.code, 0, empty.stderr);
    assert(empty.stdout.startsWith("No saved skills"), empty.stdout);
    await store(dirs).save(ADD);
    await store(dirs).save({ ...ADD, code: "return args.a + args.b; // v2" });
    await store(dirs).save({
      ...ADD,
      name: "shout",
      language: "python",
      code: "args['t'].upper()",
    });

    const list = await cli(dirs, ["list"]);
    assertEquals(list.code, 0, list.stderr);
    assertEquals(list.stdout.trim().split("\n"), [
      "add-numbers@2  typescript  user  Adds two numbers",
      "shout@1  python  user  Adds two numbers",
    ]);
    const show = await cli(dirs, ["show", "add-numbers@1", "--json"]);
    assertEquals(show.code, 0, show.stderr);
    const shown = JSON.parse(show.stdout);
    assertEquals([shown.version, shown.latest, shown.code, shown.versions], [
      1,
      false,
      ADD.code,
      [1, 2],
    ]);

    const out = join(dirs.root, "exported");
    const exported = await cli(dirs, ["export", "add-numbers@1", out]);
    assertEquals(exported.code, 0, exported.stderr);
    const v1 = join(dirs.home, ".config/code-executor/skills/.versions/add-numbers/1");
    for (const file of ["SKILL.md", "skill.ts"]) {
      assertEquals(
        await Deno.readTextFile(join(out, "add-numbers", file)),
        await Deno.readTextFile(join(v1, file)),
      );
    }
    const again = await cli(dirs, ["export", "add-numbers@1", out]);
    assertEquals(again.code, 1);
    assert(again.stderr.includes("it exists"), again.stderr);

    const imported = await cli(dirs, ["import", join(out, "add-numbers")]);
    assertEquals(imported.code, 0, imported.stderr);
    assert(imported.stdout.includes("as add-numbers@3"), imported.stdout);
    assertEquals((await store(dirs).get("add-numbers")).code, ADD.code);

    const removed = await cli(dirs, ["rm", "add-numbers"]);
    assertEquals(removed.code, 0, removed.stderr);
    assertEquals(removed.stdout.trim(), "Removed add-numbers (3 versions)");
    const missing = await cli(dirs, ["show", "add-numbers"]);
    assertEquals(missing.code, 1);
    assert(missing.stderr.includes("SkillNotFound"), missing.stderr);
    const bad = await cli(dirs, ["show", "../etc/passwd"]);
    assertEquals(bad.code, 1);
    assert(bad.stderr.includes("SkillInvalid"), bad.stderr);
  });
});

Deno.test("code-executor skills import refuses hostile directories and writes nothing", async () => {
  await withUserDirs("skills-cli-", async (dirs) => {
    await store(dirs).save(ADD);
    const out = join(dirs.root, "exported");
    assertEquals((await cli(dirs, ["export", "add-numbers", out])).code, 0);
    const good = join(out, "add-numbers");
    const md = await Deno.readTextFile(join(good, "SKILL.md"));
    const outside = join(dirs.root, "secret.txt");
    await Deno.writeTextFile(outside, "secret");

    const cases: Array<[string, (dir: string) => Promise<void>, string]> = [
      ["SKILL.md a symlink", async (dir) => {
        await Deno.remove(join(dir, "SKILL.md"));
        await Deno.symlink(outside, join(dir, "SKILL.md"));
      }, "symlink"],
      ["skill.ts a symlink", async (dir) => {
        await Deno.remove(join(dir, "skill.ts"));
        await Deno.symlink(outside, join(dir, "skill.ts"));
      }, "symlink"],
      ["an extra file", (dir) => Deno.writeTextFile(join(dir, "run.sh"), "rm -rf /"), "run.sh"],
      ["a name with ..", (dir) =>
        Deno.writeTextFile(
          join(dir, "SKILL.md"),
          md.replace('name: "add-numbers"', 'name: "../../escape"'),
        ), "Skill name"],
      [
        "a reserved name",
        (dir) =>
          Deno.writeTextFile(
            join(dir, "SKILL.md"),
            md.replace('name: "add-numbers"', 'name: "save"'),
          ),
        "reserved",
      ],
      [
        "a plain YAML key",
        (dir) =>
          Deno.writeTextFile(
            join(dir, "SKILL.md"),
            md.replace('name: "add-numbers"', "name: add-numbers"),
          ),
        "double-quoted",
      ],
      ["an injected key", (dir) =>
        Deno.writeTextFile(
          join(dir, "SKILL.md"),
          md.replace(
            'description: "Adds two numbers"',
            'description: "Adds"\nallowed-tools: "Bash"',
          ),
        ), "unknown key"],
      [
        "oversize code",
        (dir) => Deno.writeTextFile(join(dir, "skill.ts"), "x".repeat(300_000)),
        "300000 bytes",
      ],
      ["a schema that is not JSON Schema", (dir) =>
        Deno.writeTextFile(
          join(dir, "SKILL.md"),
          md.replace(
            /code-executor-input-schema: ".*"/,
            'code-executor-input-schema: "{\\"type\\":\\"object\\",\\"required\\":5}"',
          ),
        ), "not JSON Schema"],
      ["the directory a symlink", async (dir) => {
        const real = dir + "-real";
        await Deno.rename(dir, real);
        await Deno.symlink(real, dir);
      }, "symlink"],
    ];
    for (const [what, spoil, expected] of cases) {
      const dir = join(dirs.root, `hostile-${cases.findIndex((c) => c[0] === what)}`);
      await Deno.mkdir(dir);
      await Deno.copyFile(join(good, "SKILL.md"), join(dir, "SKILL.md"));
      await Deno.copyFile(join(good, "skill.ts"), join(dir, "skill.ts"));
      await spoil(dir);
      const before = await tree(dirs.root);
      const result = await cli(dirs, ["import", dir]);
      assertEquals(result.code, 1, `${what}: ${result.stdout}${result.stderr}`);
      assert(result.stderr.includes("SkillInvalid"), `${what}: ${result.stderr}`);
      assert(result.stderr.includes(expected), `${what}: ${result.stderr}`);
      assertEquals(await tree(dirs.root), before, what);
    }
    assertEquals((await store(dirs).versions("add-numbers")).length, 1);
  });
});

Deno.test("code-executor skills import follows skills.save: refused when off, allowed when admin", async () => {
  await withUserDirs("skills-cli-", async (dirs) => {
    await store(dirs).save(ADD);
    const out = join(dirs.root, "exported");
    assertEquals((await cli(dirs, ["export", "add-numbers", out])).code, 0);
    const off = await cli(dirs, ["import", join(out, "add-numbers")], {
      CODE_EXECUTOR_SKILLS_SAVE: "off",
    });
    assertEquals(off.code, 1);
    assert(off.stderr.includes("SkillSaveDisabled"), off.stderr);
    const admin = await cli(dirs, ["import", join(out, "add-numbers")], {
      CODE_EXECUTOR_SKILLS_SAVE: "admin",
    });
    assertEquals(admin.code, 0, admin.stderr);
    assertEquals((await store(dirs).get("add-numbers")).version, 2);
  });
});
