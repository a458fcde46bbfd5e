/**
 * The admin's tool policy end to end: `tools.deny`, `tools.maxCallsPerExecution` and
 * `tools.callsPerMinutePerServer` enforced on real calls to server-everything (from npm) through
 * a real server (`deno task start --config …`), whatever the run's own `allowedTools` says. The
 * rules themselves are unit-tested in `tool_policy_test.ts`.
 *
 * @module
 */
import {
  assert,
  assertEquals,
  assertFails,
  describeResult as describe,
  returnValueOf,
} from "./_assert.ts";
import { EVERYTHING } from "./_pins.ts";
import { npmServer } from "./_env.ts";
import { withTempDir } from "./_fs.ts";
import { closeAndCheck, startServer } from "./_stdio_server.ts";
import { resultText } from "./_client.ts";

Deno.test("run_typescript refuses a tool in the admin's tools.deny even when allowedTools names it", async () => {
  await withTempDir("ce-upstream-home-", async (home) => {
    const server = await startServer({
      home,
      upstream: { everything: npmServer(EVERYTHING) },
      settings: { tools: { deny: ["mcp__everything__echo"] } },
    });
    try {
      const refused = await server.runTs(
        'return await callMCPTool("mcp__everything__echo", { message: "denied" });',
        { allowedTools: ["mcp__everything__*"] },
      );
      assertFails(
        refused,
        "ToolPolicyError",
        /^Cannot call tool "mcp__everything__echo": the admin's tools\.deny rule "mcp__everything__echo" refuses it$/,
      );
      const viaProxy = await server.runTs('return await tools.everything.echo({ message: "x" });');
      assertFails(viaProxy, "ToolPolicyError", /tools\.deny/);

      const allowed = await server.runTs([
        'const names = (await discoverMCPTools({ server: "everything" })).map((t) => t.name);',
        'const sum = await callMCPTool("mcp__everything__get-sum", { a: 2, b: 3 });',
        'return { hidden: !names.includes("mcp__everything__echo"), listed: names.length, sum };',
      ].join("\n"));
      const value = returnValueOf<{ hidden: boolean; listed: number; sum: string }>(allowed);
      assertEquals(value.hidden, true, "discoverMCPTools lists a denied tool");
      assert(value.listed > 0, describe(allowed));
      assertEquals(value.sum, "The sum of 2 and 3 is 5.");

      // search_tools must not advertise what every run would refuse.
      const search = await server.client.callTool({
        name: "search_tools",
        arguments: { query: "echo", detail: "names" },
      });
      const names = resultText(search).split("\n");
      assert(
        !names.includes("mcp__everything__echo"),
        `search_tools lists a denied tool: ${names}`,
      );
    } finally {
      await closeAndCheck(server);
    }
  });
});

Deno.test("run_typescript enforces tools.maxCallsPerExecution and tools.callsPerMinutePerServer", async () => {
  await withTempDir("ce-upstream-home-", async (home) => {
    const server = await startServer({
      home,
      upstream: { everything: npmServer(EVERYTHING) },
      settings: { tools: { maxCallsPerExecution: 3, callsPerMinutePerServer: 5 } },
    });
    try {
      const echo = 'await callMCPTool("mcp__everything__echo", { message: "x" });';
      const capped = await server.runTs(`${echo}\n${echo}\n${echo}\n${echo}`);
      assertFails(capped, "ToolPolicyError", /made 3 tool calls \(tools\.maxCallsPerExecution\)/);
      assertEquals(capped.toolCalls.map((c) => c.ok), [true, true, true, false]);

      // Three calls were made in the first run; the limit of five per minute stops the sixth.
      const limited = await server.runTs(`${echo}\n${echo}\n${echo}`);
      assertFails(
        limited,
        "RateLimitError",
        /server "everything" allows 5 calls per minute \(tools\.callsPerMinutePerServer\); retry in \d+ s/,
      );
      assertEquals(limited.toolCalls.map((c) => c.ok), [true, true, false]);
    } finally {
      await closeAndCheck(server);
    }
  });
});
