/**
 * 2026-07-28 clients over stdio: a run that needs a person's approval, the client's model
 * (`llm.ask`) or its user (`askUser`) answers with `input_required` and stays parked until the
 * client's retry, then goes on in the same child. A real SDK client negotiates the 2026 era and
 * fulfils the rounds itself (or, for the attacks, the test does them by hand); server-memory and
 * the fixture (whose `record` tool logs each call it receives) show what really reached them.
 *
 * @module
 */
import type { Client } from "@modelcontextprotocol/client";
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import {
  auditApprovals,
  calls,
  choose,
  createEntities,
  memoryText,
  startApprovalServer,
} from "./_approvals.ts";
import { eventually, processStat, sandboxPids } from "./_proc.ts";
import { callRound, type Round } from "./_client.ts";

const MODERN = { versionNegotiation: { mode: "auto" as const } };

Deno.test("a 2026-era client over stdio: approvals, llm.ask and askUser through input_required, in the same child", async (t) => {
  const sampled: string[] = [];
  const server = await startApprovalServer({
    settings: { sampling: { enabled: true } },
    client: { ...MODERN, capabilities: { sampling: {} } },
    setup(client: Client) {
      client.setRequestHandler("sampling/createMessage", (request) => {
        const first = request.params.messages[0].content as { text: string };
        sampled.push(first.text);
        return Promise.resolve({
          role: "assistant",
          model: "client-model",
          content: { type: "text", text: `answer to ${first.text}` },
        }) as never;
      });
    },
  });
  try {
    assertEquals(server.client.getProtocolEra(), "modern");
    await server.runTs(`${createEntities(["Alice", "Bob"])} return 1;`);

    await t.step(
      "approve: the call is made once, and the run goes on in the same child",
      async () => {
        server.answer = choose("approve");
        const result = await server.runTs(`
        const pid = Deno.pid;
        const token = crypto.randomUUID();
        globalThis.kept = token;
        await callMCPTool("mcp__memory__delete_entities", { entityNames: ["Alice"] });
        return { pid, after: Deno.pid, kept: globalThis.kept === token && token.length === 36 };`);
        assertEquals(result.error, undefined, JSON.stringify(result));
        const value = result.returnValue as { pid: number; after: number; kept: boolean };
        assertEquals(value.after, value.pid);
        assertEquals(value.kept, true);
        assertEquals(server.asked.length, 1);
        assertMatch(server.asked[0].message, /"delete_entities" of the MCP server "memory"/);
        assert(!(await memoryText(server)).includes('"name":"Alice"'), "Alice was deleted");
      },
    );

    await t.step(
      "deny: the code catches ApprovalDenied and nothing reaches the server",
      async () => {
        server.asked.length = 0;
        server.answer = choose("deny");
        const result = await server.runTs(`
        const before = 6;
        try {
          await callMCPTool("mcp__fixture__record", { note: "denied" });
          return "made";
        } catch (error) {
          return [error instanceof ApprovalDenied, error.name, before * 7];
        }`);
        assertEquals(result.returnValue, [true, "ApprovalDenied", 42]);
        assertEquals(server.asked.length, 1);
        assertEquals(await calls(server), []);
      },
    );

    await t.step("for the rest of the run: asked once in the run, again in the next", async () => {
      server.asked.length = 0;
      server.answer = choose("approve_run");
      const result = await server.runTs(`
        for (let i = 0; i < 3; i++) await callMCPTool("mcp__fixture__record", { note: "run " + i });
        return "three";`);
      assertEquals(result.returnValue, "three", JSON.stringify(result));
      assertEquals(server.asked.length, 1);
      assertEquals((await calls(server)).length, 3);
      server.answer = choose("approve");
      await server.runTs(`await callMCPTool("mcp__fixture__record", { note: "next" });`);
      assertEquals(server.asked.length, 2);
      assertEquals((await calls(server)).length, 4);
    });

    await t.step("Python: an approved call, the interpreter's variables intact", async () => {
      server.asked.length = 0;
      server.answer = choose("approve");
      const result = await server.runPy(`
kept = [1, 2, 3]
await call_mcp_tool("mcp__memory__delete_entities", {"entityNames": ["Bob"]})
sum(kept)`);
      assertEquals(result.error, undefined, JSON.stringify(result));
      assertEquals(result.returnValue, 6);
      assertEquals(server.asked.length, 1);
      assert(!(await memoryText(server)).includes('"name":"Bob"'), "Bob was deleted");
    });

    await t.step("llm.ask and askUser are answered by the client, in rounds", async () => {
      server.asked.length = 0;
      server.answer = (params) =>
        Promise.resolve({ action: "accept", content: { answer: `yes to ${params.message}` } });
      const result = await server.runTs(`
        const pid = Deno.pid;
        const a = await llm.ask("first question");
        const b = await llm.ask("second question");
        const c = await askUser("Continue?");
        return [a, b, c, Deno.pid === pid];`);
      assertEquals(result.error, undefined, JSON.stringify(result));
      assertEquals(result.returnValue, [
        "answer to first question",
        "answer to second question",
        { action: "accept", content: "yes to Continue?" },
        true,
      ]);
      assertEquals(sampled, ["first question", "second question"]);
      assertEquals(result.sampling?.rounds, 2);
    });

    await t.step("progress reaches the request that waits", async () => {
      server.answer = () => Promise.resolve({ action: "accept", content: { answer: "go" } });
      const seen: string[] = [];
      const result = await server.client.callTool({
        name: "run_typescript",
        arguments: {
          code: `await progress(1, 2, "half"); const a = await askUser("Go?");
            await progress(2, 2, "done"); return a.content;`,
        },
      }, {
        timeout: 120_000,
        onprogress: (p) => void seen.push(String(p.message)),
      });
      assertEquals((result.structuredContent as { returnValue: unknown }).returnValue, "go");
      // Progress sent during the retry ("2/2 done") reaches this handler too, but through the SDK
      // client's own bookkeeping of retried requests: only the first request's is asserted.
      assert(seen.includes("1/2 half"), seen.join());
    });

    await t.step("every decision is audited as made through input_required", async () => {
      const records = await auditApprovals(server);
      const hows = records.map((r) => `${r.decision}:${r.how}`);
      assertEquals(hows, [
        "approved:input-required",
        "denied:input-required",
        "approved:input-required",
        "approved:earlier-in-run",
        "approved:earlier-in-run",
        "approved:input-required",
        "approved:input-required",
      ]);
    });
  } finally {
    await server.close();
  }
});

Deno.test("requestState over stdio: tampered, replayed and expired state is refused and resumes nothing; an unanswered run ends (approval, llm.ask)", async () => {
  const server = await startApprovalServer({
    approvals: { timeoutMs: 4_000 },
    settings: { sampling: { enabled: true, requestTimeoutMs: 3_000 } },
    client: { ...MODERN, inputRequired: { autoFulfill: false }, capabilities: { sampling: {} } },
  });
  const call = (code: string, retry: Record<string, unknown> = {}) =>
    callRound(server.client, code, {}, retry);
  const approve = (round: Round) => ({
    inputResponses: Object.fromEntries(
      Object.keys(round.inputRequests!).map((key) => [
        key,
        { action: "accept", content: { decision: "approve" } },
      ]),
    ),
  });
  const stopped = async () => {
    const states = await Promise.all(
      (await sandboxPids(server.tempDir)).map((pid) =>
        processStat(pid).then((s) => s.state, () => "gone")
      ),
    );
    return states.filter((state) => state === "T").length;
  };
  const CODE = `globalThis.n = 41;
    await callMCPTool("mcp__fixture__record", { note: "once" });
    return globalThis.n + 1;`;
  try {
    const first = await call(CODE);
    assertEquals(first.resultType, "input_required", JSON.stringify(first));
    const [key] = Object.keys(first.inputRequests!);
    assertEquals(first.inputRequests![key].method, "elicitation/create");
    assertMatch(first.inputRequests![key].params.message, /"record" of the MCP server "fixture"/);
    const state = first.requestState!;
    assertEquals(await stopped(), 1, "the parked child is held");

    const [v, body, mac] = state.split(".");
    const payload = JSON.parse(atob(body.replaceAll("-", "+").replaceAll("_", "/")));
    const forged = btoa(JSON.stringify({ ...payload, p: "someone-else" }))
      .replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
    for (const bad of [`${v}.${forged}.${mac}`, `${v}.${body}.${mac.slice(0, -2)}AA`, "v1.x.y"]) {
      const refused = await call(CODE, { ...approve(first), requestState: bad });
      assertEquals(refused.isError, true);
      assertEquals(refused.structuredContent?.error?.type, "RequestStateRefused");
      assertMatch(refused.structuredContent!.error!.message, /altered/);
    }
    const otherCall = await call(CODE + " // another", { ...approve(first), requestState: state });
    assertMatch(otherCall.structuredContent!.error!.message, /another tool call/);
    assertEquals(await calls(server), [], "no refused retry resumed the run");
    assertEquals(await stopped(), 1, "the parked child still waits");

    // A retry without the answer is refused, and restarts no timeout (issue 23: empty retries
    // kept a run parked for ever); the state still takes a retry with the answer.
    const again = await call(CODE, { inputResponses: {}, requestState: state });
    assertEquals(
      again.structuredContent?.error?.type,
      "RequestStateRefused",
      JSON.stringify(again),
    );
    assertMatch(again.structuredContent!.error!.message, new RegExp(`answers none .*\\(${key}\\)`));
    const done = await call(CODE, { ...approve(first), requestState: state });
    assertEquals(done.structuredContent?.returnValue, 42, JSON.stringify(done));
    assertEquals((await calls(server)).length, 1);

    const replayed = await call(CODE, { ...approve(first), requestState: state });
    assertEquals(replayed.structuredContent?.error?.type, "RequestStateRefused");
    assertMatch(replayed.structuredContent!.error!.message, /not parked|already used/);
    assertEquals((await calls(server)).length, 1, "the replay made no call");

    // No retry within approvals.timeoutMs: the run is ended, its child killed.
    const parked = await call(CODE);
    assertEquals(parked.resultType, "input_required");
    assertEquals(await stopped(), 1);
    assert(await eventually(async () => (await stopped()) === 0, 20_000), "the child was killed");
    const late = await call(CODE, { ...approve(parked), requestState: parked.requestState });
    assertEquals(late.structuredContent?.error?.type, "RequestStateRefused");
    assertMatch(late.structuredContent!.error!.message, /expired/);
    assertEquals((await calls(server)).length, 1, "the expired state resumed nothing");
    const records = await auditApprovals(server);
    assertEquals(records.map((r) => `${r.decision}:${r.how}`), [
      "approved:input-required",
      "denied:timeout",
    ]);

    // The same for a question to the client's model, within sampling.requestTimeoutMs.
    const asking = await call(`const kept = 1; await llm.ask("never answered"); return kept;`);
    assertEquals(asking.resultType, "input_required", JSON.stringify(asking));
    assertEquals(Object.values(asking.inputRequests!)[0].method, "sampling/createMessage");
    assertEquals(await stopped(), 1);
    assert(await eventually(async () => (await stopped()) === 0, 20_000), "the child was killed");
  } finally {
    await server.close();
  }
});
