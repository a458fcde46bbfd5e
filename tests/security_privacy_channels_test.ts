/**
 * Personal data leaves only as placeholders, through every channel (issue 23, class 2). With
 * `privacy.tokenize`, code that holds a real value (here: in its own source) tries to pass it out
 * through the name of an error it raises (a TypeScript `name`, a Python exception class), a tool
 * name in `toolCalls`, and a skill's description; and a skill holding a value that was written by
 * hand into the shared directory is served to no one (`skills/list`, `resources/list`,
 * `resources/read`, `search_tools`). Two principals over HTTP.
 *
 * @module
 */
import type { Client } from "@modelcontextprotocol/client";
import { SkillsClient } from "@modelcontextprotocol/client/ext/skills";
import { join } from "node:path";
import { SettingsSchema } from "../src/config/settings.ts";
import { SkillStore } from "../src/skills/store.ts";
import { assert, assertEquals, assertRejects, describeResult } from "./_assert.ts";
import { callRun, fixtureServer, startHttpServer, withTempDir } from "./_helpers.ts";
import { writeTokensFile } from "./_http_server.ts";
import { connectEach } from "./_client.ts";

const EMAIL = "jane.doe@example.org";

function assertNoValue(what: string, value: unknown): void {
  const text = JSON.stringify(value);
  assert(!text.includes(EMAIL), `${what} carries the real value: ${text.slice(0, 600)}`);
}

Deno.test("privacy.tokenize: error names, tool-call names and skills carry no real value to any client", async () => {
  await withTempDir("ce-privacy-channels-", async (dir) => {
    const { tokensFile, tokens: { alice, bob } } = await writeTokensFile(dir, ["alice", "bob"]);
    const skills = {
      projectDir: join(dir, "project-skills"),
      userDir: join(dir, "user-skills"),
      sharedDir: join(dir, "shared-skills"),
      principalsDir: join(dir, "principal-skills"),
    };
    // Written by hand into the shared directory (no privacy check): a value in its description.
    const admin = new SkillStore(
      SettingsSchema.parse({ skills: { ...skills, admins: ["root"] } }).skills,
      { listCacheMs: 0 },
    );
    await admin.save(
      {
        name: "mail-jane",
        description: `Mails ${EMAIL} the report`,
        language: "typescript",
        code: "return 1;",
      },
      "http:root",
    );
    await admin.save(
      {
        name: "plain",
        description: "Adds nothing",
        language: "typescript",
        code: "return 2;",
      },
      "http:root",
    );
    const server = await startHttpServer({
      settings: { http: { tokensFile }, privacy: { tokenize: true }, skills },
      upstream: { fixture: fixtureServer({}) },
    });
    const clients: Client[] = [];
    try {
      const [asAlice, asBob] = await connectEach(server.url, [alice, bob], clients);

      const named = await callRun(
        asAlice,
        "run_typescript",
        `class Leak extends Error { name = ${JSON.stringify(EMAIL)}; }\nthrow new Leak("boom");`,
      );
      assertEquals(named.ok, false, describeResult(named));
      assertEquals(named.error?.type, "<email_1>", describeResult(named));
      assertNoValue("a TypeScript error's name", named);

      const python = await callRun(
        asAlice,
        "run_python",
        `raise type(${JSON.stringify(EMAIL)}, (Exception,), {})("boom")`,
      );
      assertEquals(python.ok, false, describeResult(python));
      assertNoValue("a Python exception class", python);

      const called = await callRun(
        asAlice,
        "run_typescript",
        `await callMCPTool(${JSON.stringify(`mcp__nope__${EMAIL}`)}, {}).catch(() => {});`,
      );
      assertEquals(called.toolCalls.length, 1, describeResult(called));
      assertNoValue("toolCalls", called);

      const saved = await callRun(
        asAlice,
        "run_typescript",
        `return await skills.save(${
          JSON.stringify({ name: "leak", description: `Writes to ${EMAIL}`, code: "return 1;" })
        });`,
      );
      assertEquals(saved.error?.type, "SkillInvalid", describeResult(saved));
      assertNoValue("a refused save", saved);

      for (const client of [asAlice, asBob]) {
        const listing = await new SkillsClient(client).list();
        assertEquals(listing.skills.map((s) => s.frontmatter.name), ["plain"]);
        assertNoValue("skills/list", listing);
        const resources = await client.listResources();
        assertNoValue("resources/list", resources);
        await assertRejects(() => client.readResource({ uri: "skill://mail-jane/SKILL.md" }));
        await assertRejects(() => client.readResource({ uri: "skill://mail-jane/skill.ts" }));
        for (const detail of ["names", "signatures", "schemas"]) {
          const search = await client.callTool({
            name: "search_tools",
            arguments: { query: "", limit: 100, detail },
          });
          assertNoValue(`search_tools ${detail}`, search);
        }
      }
      // In the sandbox too: the skill is not found.
      const hidden = await callRun(
        asBob,
        "run_typescript",
        "return await skills.call('mail-jane', {});",
      );
      assertEquals(hidden.ok, false, describeResult(hidden));
      assertNoValue("a call of the hidden skill", hidden);
      const audit = await Deno.readTextFile(join(server.tempDir, "audit.jsonl"));
      assert(!audit.includes(EMAIL), "the audit log holds the value");
    } finally {
      for (const client of clients) await client.close().catch(() => {});
      await server.close();
    }
  });
});
