/**
 * Nothing a caller controls blocks the event loop (issue 23, class 5): a skill whose input schema
 * has a pattern that backtracks (`^(a+)+$`) is checked by RE2 in linear time, so `/healthz` and
 * another principal's run are answered while its call is checked; a pattern RE2 cannot run and a
 * schema whose `$ref`s expand exponentially (nested `anyOf` over shared definitions) are refused
 * when the skill is saved. Two principals over HTTP.
 *
 * @module
 */
import type { Client } from "@modelcontextprotocol/client";
import { join } from "node:path";
import { assertEquals, assertMatch, describeResult } from "./_assert.ts";
import { callRun, startHttpServer, withTempDir } from "./_helpers.ts";
import { writeTokensFile } from "./_http_server.ts";
import { connectEach } from "./_client.ts";

/** Saves a skill with `inputSchema` through a run of `client`'s. */
function save(
  client: Client,
  name: string,
  inputSchema: Record<string, unknown>,
): ReturnType<typeof callRun> {
  return callRun(
    client,
    "run_typescript",
    `return await skills.save(${
      JSON.stringify({ name, description: "Checks its argument", inputSchema, code: "return 1;" })
    });`,
  );
}

/** 30 levels, each an anyOf of the next level twice: 2^30 paths to the last one. */
function exponentialSchema(): Record<string, unknown> {
  const defs: Record<string, unknown> = { d30: { type: "string", minLength: 5 } };
  for (let i = 0; i < 30; i++) {
    defs[`d${i}`] = { anyOf: [{ $ref: `#/$defs/d${i + 1}` }, { $ref: `#/$defs/d${i + 1}` }] };
  }
  return { type: "object", properties: { s: { $ref: "#/$defs/d0" } }, $defs: defs };
}

Deno.test("a skill's pathological schema blocks neither /healthz nor another principal, and costly ones are refused at save", async () => {
  await withTempDir("ce-schemas-", async (dir) => {
    const { tokensFile, tokens: { alice, bob } } = await writeTokensFile(dir, ["alice", "bob"]);
    const server = await startHttpServer({
      settings: {
        http: { tokensFile },
        skills: {
          projectDir: join(dir, "project-skills"),
          userDir: join(dir, "user-skills"),
          principalsDir: join(dir, "principal-skills"),
        },
      },
    });
    const clients: Client[] = [];
    try {
      const [asAlice, asBob] = await connectEach(server.url, [alice, bob], clients);

      const backref = await save(asAlice, "backref", {
        type: "object",
        properties: { s: { type: "string", pattern: "(a)\\1" } },
      });
      assertEquals(backref.error?.type, "SkillInvalid", describeResult(backref));
      assertMatch(backref.error!.message, /not one RE2 can run/);
      const costly = await save(asAlice, "costly", exponentialSchema());
      assertEquals(costly.error?.type, "SkillInvalid", describeResult(costly));
      assertMatch(costly.error!.message, /expands to more than \d+ nodes/);

      const saved = await save(asAlice, "nested", {
        type: "object",
        properties: { s: { type: "string", pattern: "^(a+)+$" } },
        required: ["s"],
      });
      assertEquals(saved.ok, true, describeResult(saved));
      // With a backtracking matcher this argument takes 2^60 steps; RE2 answers at once.
      const call = callRun(
        asAlice,
        "run_typescript",
        `return await skills.nested({ s: ${JSON.stringify("a".repeat(60) + "!")} });`,
      );
      const health = await fetch(new URL("/healthz", server.url), {
        signal: AbortSignal.timeout(60_000),
      });
      assertEquals(health.status, 200);
      await health.body?.cancel();
      const other = await callRun(asBob, "run_typescript", "return 'bob';");
      assertEquals(other.returnValue, "bob", describeResult(other));
      const checked = await call;
      assertEquals(checked.error?.type, "ToolValidationError", describeResult(checked));
    } finally {
      for (const client of clients) await client.close().catch(() => {});
      await server.close();
    }
  });
});
