/**
 * An approval claim copied exactly as the refusal message shows it is accepted (issue 23, class
 * 7): with `privacy.tokenize`, the refusal's text reaches the client with placeholders, and the
 * claim it gives (`{"calls":[{"id","call"}]}`) is accepted as shown; the call then goes through
 * once, for its principal only. Two principals over HTTP.
 *
 * @module
 */
import type { Client } from "@modelcontextprotocol/client";
import { join } from "node:path";
import { assert, assertEquals, assertMatch, describeResult } from "./_assert.ts";
import { callRun, connect, fixtureServer, startHttpServer, withTempDir } from "./_helpers.ts";
import { writeTokensFile } from "./_http_server.ts";

const CODE =
  `return await callMCPTool("mcp__fixture__record", { note: "mail jane.doe@example.org" });`;

Deno.test("an approval claim copied as the refusal shows it is accepted, with placeholders in it", async () => {
  await withTempDir("ce-claims-", async (dir) => {
    const { tokensFile, tokens: { alice, bob } } = await writeTokensFile(dir, ["alice", "bob"]);
    const callLog = join(dir, "calls.log");
    await Deno.writeTextFile(callLog, "");
    const server = await startHttpServer({
      settings: {
        http: { tokensFile },
        approvals: { require: ["mcp__fixture__rec*"] },
        privacy: { tokenize: true },
      },
      upstream: { fixture: fixtureServer({ FIXTURE_CALL_LOG: callLog }) },
    });
    const clients: Client[] = [];
    const calls = async () => (await Deno.readTextFile(callLog)).split("\n").filter(Boolean);
    try {
      const asAlice = await connect(server.url, { token: alice });
      clients.push(asAlice);
      const asBob = await connect(server.url, { token: bob });
      clients.push(asBob);
      const refused = await callRun(asAlice, "run_typescript", CODE);
      assertEquals(refused.error?.type, "ApprovalDenied", describeResult(refused));
      const message = refused.error!.message;
      assertMatch(message, /<email_1>/);
      assert(!message.includes("jane.doe@example.org"), message);
      const claim = JSON.parse(/approve_pending_calls with (\{.*?\}\]\}) —/.exec(message)![1]);

      // Another principal cannot use it; the claim as shown is accepted for its own.
      const approve = (client: Client) =>
        client.callTool({ name: "approve_pending_calls", arguments: claim });
      // Bob's own refusal offers him the tool; Alice's claim is no use to him.
      assertEquals((await callRun(asBob, "run_typescript", CODE)).error?.type, "ApprovalDenied");
      const stolen = await approve(asBob);
      assertMatch(JSON.stringify(stolen.content), /no such pending call/);
      assertEquals(stolen.isError, true, JSON.stringify(stolen));
      const approved = await approve(asAlice);
      assertEquals(approved.isError, false, JSON.stringify(approved));
      assertMatch(JSON.stringify(approved.content), /approved once/);

      const ran = await callRun(asAlice, "run_typescript", CODE);
      assertEquals(ran.ok, true, describeResult(ran));
      assertEquals((await calls()).length, 1);
    } finally {
      for (const client of clients) await client.close().catch(() => {});
      await server.close();
    }
  });
});
