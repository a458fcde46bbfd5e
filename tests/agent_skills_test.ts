/**
 * Saved skills as MCP Agent Skills (SEP-2640) through the SDK's own host side, `SkillsClient`:
 * over stdio and over `serve --http` with two principals, the entries' digests and sizes are
 * those of the files on disk, every file reads back verified, and a principal never sees another's
 * skills.
 *
 * @module
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { createHash } from "node:crypto";
import type { Client } from "@modelcontextprotocol/client";
import { SkillsClient } from "@modelcontextprotocol/client/ext/skills";
import { SettingsSchema } from "../src/config/settings.ts";
import { type SaveSkillInput, SkillStore } from "../src/skills/store.ts";
import { assert, assertEquals, assertRejects } from "./_assert.ts";
import { withUserDirs } from "./_fs.ts";
import { ADD } from "./_skills.ts";
import { startServer } from "./_stdio_server.ts";
import { startHttpServer } from "./_http_server.ts";
import { callRun, connect } from "./_client.ts";

const SHOUT: SaveSkillInput = {
  name: "shout",
  description: "Upper-cases a text\nname: injected",
  language: "python",
  inputSchema: { type: "object", properties: { text: { type: "string" } } },
  code: "args['text'].upper()",
};

function skillsSettings(
  dirs: { project: string; home: string },
  extra: Record<string, unknown> = {},
) {
  return {
    projectDir: join(dirs.project, ".code-executor", "skills"),
    principalsDir: join(dirs.home, "principals"),
    ...extra,
  };
}

function storeFor(dirs: { project: string; home: string }, extra: Record<string, unknown> = {}) {
  return new SkillStore(
    SettingsSchema.parse({ skills: skillsSettings(dirs, extra) }).skills,
    { env: { HOME: dirs.home }, listCacheMs: 0 },
  );
}

function digest(bytes: Uint8Array): string {
  return "sha256:" + createHash("sha256").update(bytes).digest("hex");
}

/** Lists through SkillsClient and checks every entry against the files on disk. */
async function listAndVerify(client: Client, dirOf: (name: string) => string): Promise<string[]> {
  const skills = new SkillsClient(client);
  assert(skills.supported, "the server does not declare the skills extension");
  const listing = await skills.list();
  assertEquals(listing.invalid, []);
  for (const entry of listing.skills) {
    const name = entry.frontmatter.name;
    assertEquals(entry.uri, `skill://${name}/SKILL.md`);
    assert(Array.isArray(entry.resources), "resources must be listed");
    const files = entry.resources as Array<{ uri: string; digest: string; size: number }>;
    const onDisk = [...Deno.readDirSync(dirOf(name))].map((e) => e.name).sort();
    assertEquals(files.map((f) => f.uri.slice(`skill://${name}/`.length)).sort(), onDisk);
    for (const file of files) {
      const bytes = await Deno.readFile(
        join(dirOf(name), file.uri.slice(`skill://${name}/`.length)),
      );
      assertEquals([file.digest, file.size], [digest(bytes), bytes.length], file.uri);
      const read = await skills.read(entry, file.uri);
      assert(read.verified, `${file.uri} not verified`);
      assertEquals(read.bytes, bytes);
    }
    const manifest = await skills.read(entry);
    assertEquals(manifest.frontmatter?.name, name);
    assert(manifest.body?.includes(`skills.call("${name}"`), manifest.body);
    assertEquals((await skills.get(entry.uri)).skill, entry);
  }
  return listing.skills.map((s) => s.frontmatter.name).sort();
}

Deno.test("skills/list and skills/get over stdio give entries whose digests are the files on disk", async () => {
  await withUserDirs("agent-skills-", async (dirs) => {
    const store = storeFor(dirs);
    await store.save(ADD);
    await store.save({ ...ADD, code: "return args.a + args.b; // v2" });
    await store.save(SHOUT);
    const userRoot = join(dirs.home, ".config", "code-executor", "skills");
    // A symlinked skill is not served.
    await Deno.symlink(join(userRoot, "shout"), join(userRoot, "linked"));
    const server = await startServer({
      home: dirs.home,
      sharedCache: true,
      settings: { skills: skillsSettings(dirs) },
    });
    try {
      const names = await listAndVerify(server.client, (name) => join(userRoot, name));
      assertEquals(names, ["add-numbers", "shout"]);
      const shout = (await new SkillsClient(server.client).get("skill://shout/SKILL.md")).skill;
      assertEquals(shout.frontmatter.description, SHOUT.description);
      const text = await server.client.readResource({ uri: "skill://add-numbers/skill.ts" });
      assertEquals((text.contents[0] as { text: string }).text, "return args.a + args.b; // v2");
      const resources = (await server.client.listResources()).resources.map((r) => r.uri);
      assert(resources.includes("skill://add-numbers/SKILL.md"), `${resources}`);
      await assertRejects(() => server.client.readResource({ uri: "skill://linked/SKILL.md" }));
      await assertRejects(() => new SkillsClient(server.client).get("skill://linked/SKILL.md"));
      await assertRejects(() =>
        server.client.readResource({ uri: "skill://add-numbers/../shout/SKILL.md" })
      );
    } finally {
      await server.close();
    }
  });
});

Deno.test("serve --http serves each principal its own skills plus the shared ones", async () => {
  await withUserDirs("agent-skills-", async (dirs) => {
    const shared = join(dirs.root, "shared");
    const extra = { sharedDir: shared, admins: ["admin"] };
    const dirsOf = dirs;
    const store = storeFor(dirs, extra);
    await store.save({ ...ADD, name: "team-report" }, "admin");
    await store.save({ ...ADD, name: "alice-private" }, "alice");
    const tokensFile = join(dirs.root, "tokens");
    await Deno.writeTextFile(
      tokensFile,
      "alice alice-token-0123456789\nbob bob-token-0123456789\n",
      {
        mode: 0o600,
      },
    );
    const server = await startHttpServer({
      home: dirs.home,
      sharedCache: true,
      settings: { skills: skillsSettings(dirs, extra), http: { tokensFile } },
    });
    const clients: Client[] = [];
    try {
      const connectAs = async (token: string, era: "legacy" | "modern") => {
        const client = await connect(server.url, { token, era });
        clients.push(client);
        return client;
      };
      const dirOf = (who: string) => (name: string) => {
        const dirs = storeFor(dirsOf, extra).roots(who).map((root) => join(root.dir, name));
        return dirs.find((dir) => existsSync(dir))!;
      };
      for (const era of ["legacy", "modern"] as const) {
        const alice = await connectAs("alice-token-0123456789", era);
        const bob = await connectAs("bob-token-0123456789", era);
        assertEquals(await listAndVerify(alice, dirOf("alice")), ["alice-private", "team-report"]);
        assertEquals(await listAndVerify(bob, dirOf("bob")), ["team-report"]);
        await assertRejects(() => bob.readResource({ uri: "skill://alice-private/SKILL.md" }));
        await assertRejects(() => new SkillsClient(bob).get("skill://alice-private/SKILL.md"));
        const search = async (client: Client) => {
          const result = await client.callTool({
            name: "search_tools",
            arguments: { query: "private report", detail: "names" },
          });
          return (result.content as Array<{ text: string }>)[0].text.split("\n").sort();
        };
        assertEquals(await search(alice), ["skill:alice-private@1", "skill:team-report@1"]);
        assertEquals(await search(bob), ["skill:team-report@1"]);
        if (era === "legacy") {
          const code = 'return (await searchTools("private report")).map((h) => h.name).sort();';
          const inCode = await callRun(bob, "run_typescript", code);
          assertEquals(inCode.returnValue, ["skill:team-report@1"], JSON.stringify(inCode.error));
          const alices = await callRun(alice, "run_typescript", code);
          assertEquals(alices.returnValue, ["skill:alice-private@1", "skill:team-report@1"]);
        }
      }
    } finally {
      await Promise.all(clients.map((c) => c.close().catch(() => {})));
      await server.close();
    }
  });
});
