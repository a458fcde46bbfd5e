/**
 * 2026-07-28 clients over `serve --http`, where every request gets a new MCP server: the parked
 * run lives in the executor, so the retry (a new HTTP request) resumes it in the same child. Two
 * principals (http.tokensFile): one cannot resume the other's run with its `requestState`.
 * server-memory and the fixture (its `record` tool logs each call) show what reached them.
 *
 * @module
 */
import type { Client } from "@modelcontextprotocol/client";
import { join } from "node:path";
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { MEMORY } from "./_pins.ts";
import { fixtureServer, npmServer } from "./_env.ts";
import { eventually, sandboxPids } from "./_proc.ts";
import { startHttpServer, writeTokensFile } from "./_http_server.ts";
import { callRun, connect, manualClient } from "./_client.ts";

Deno.test("2026-era clients over HTTP: approvals, llm.ask and askUser through input_required; a parked run is its principal's", async () => {
  const dir = await Deno.makeTempDir({ prefix: "ce-mrtr-http-" });
  const memoryFile = join(dir, "memory.jsonl");
  const callLog = join(dir, "calls.log");
  await Deno.writeTextFile(callLog, "");
  const { tokensFile, tokens: { alice, bob } } = await writeTokensFile(dir, ["alice", "bob"]);
  const server = await startHttpServer({
    settings: {
      http: { tokensFile },
      approvals: { require: ["mcp__fixture__rec*"] },
      sampling: { enabled: true },
    },
    upstream: {
      memory: npmServer(MEMORY, { env: { MEMORY_FILE_PATH: memoryFile } }),
      fixture: fixtureServer({ FIXTURE_CALL_LOG: callLog }),
    },
  });
  const clients: Client[] = [];
  const memory = () => Deno.readTextFile(memoryFile).catch(() => "");
  const calls = async () => (await Deno.readTextFile(callLog)).split("\n").filter(Boolean);
  let decision = "approve";
  const asked: string[] = [];
  try {
    const auto = await connect(server.url, {
      era: "modern",
      token: alice,
      capabilities: { sampling: {}, elicitation: { form: {} } },
      setup(client) {
        client.setRequestHandler("elicitation/create", (request) => {
          const message = (request.params as { message: string }).message;
          asked.push(message);
          const content = message.startsWith("Code run by the model")
            ? { decision }
            : { answer: "blue" };
          return Promise.resolve({ action: "accept", content }) as never;
        });
        client.setRequestHandler("sampling/createMessage", (request) => {
          const first = request.params.messages[0].content as { text: string };
          return Promise.resolve({
            role: "assistant",
            model: "client-model",
            content: { type: "text", text: `answer to ${first.text}` },
          }) as never;
        });
      },
    });
    clients.push(auto);
    const create = await callRun(
      auto,
      "run_typescript",
      `await callMCPTool("mcp__memory__create_entities", { entities: [{ name: "Alice", entityType: "p", observations: [] }] }); return 1;`,
    );
    assertEquals(create.returnValue, 1, JSON.stringify(create));

    // approve: the call is made, and the run goes on in the same child with its variables.
    const approved = await callRun(
      auto,
      "run_typescript",
      `const pid = Deno.pid; globalThis.kept = "before";
      await callMCPTool("mcp__memory__delete_entities", { entityNames: ["Alice"] });
      return [Deno.pid === pid, globalThis.kept];`,
    );
    assertEquals(approved.returnValue, [true, "before"], JSON.stringify(approved));
    assertEquals(asked.length, 1);
    assert(!(await memory()).includes('"name":"Alice"'), "Alice was deleted");

    // deny: ApprovalDenied in the code, no call.
    decision = "deny";
    const denied = await callRun(
      auto,
      "run_typescript",
      `try { await callMCPTool("mcp__fixture__record", { note: "no" }); return "made"; }
      catch (error) { return error.name; }`,
    );
    assertEquals(denied.returnValue, "ApprovalDenied");
    assertEquals(await calls(), []);

    // for the rest of the run: asked once for three calls.
    decision = "approve_run";
    asked.length = 0;
    const forRun = await callRun(
      auto,
      "run_typescript",
      `for (let i = 0; i < 3; i++) await callMCPTool("mcp__fixture__record", { note: "r" + i });
      return "three";`,
    );
    assertEquals(forRun.returnValue, "three", JSON.stringify(forRun));
    assertEquals(asked.length, 1);
    assertEquals((await calls()).length, 3);

    // llm.ask and askUser.
    const llm = await callRun(
      auto,
      "run_typescript",
      `return [await llm.ask("colour?"), await askUser("Favourite colour?")];`,
    );
    assertEquals(llm.returnValue, ["answer to colour?", { action: "accept", content: "blue" }]);

    // Bob cannot resume Alice's parked run with her requestState.
    const manual = async (token: string) => {
      const { client, call } = await manualClient(server.url, { token });
      clients.push(client);
      return (code: string, retry: Record<string, unknown> = {}) => call(code, {}, retry);
    };
    const asAlice = await manual(alice);
    const asBob = await manual(bob);
    const CODE = `globalThis.n = 1; await callMCPTool("mcp__fixture__record", { note: "alice" });
      return globalThis.n + 1;`;
    const first = await asAlice(CODE);
    assertEquals(first.resultType, "input_required", JSON.stringify(first));
    const answers = {
      inputResponses: Object.fromEntries(
        Object.keys(first.inputRequests!).map((
          key,
        ) => [key, { action: "accept", content: { decision: "approve" } }]),
      ),
      requestState: first.requestState,
    };
    const stolen = await asBob(CODE, answers);
    assertEquals(stolen.structuredContent?.error?.type, "RequestStateRefused");
    assertMatch(stolen.structuredContent!.error!.message, /another principal/);
    assertEquals((await calls()).length, 3, "Bob's retry resumed nothing");
    const resumed = await asAlice(CODE, answers);
    assertEquals(resumed.structuredContent?.returnValue, 2, JSON.stringify(resumed));
    assertEquals((await calls()).length, 4);
  } finally {
    for (const client of clients) await client.close().catch(() => {});
    await server.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("replicas: a retry that reaches another replica is refused naming both, and the parked run still resumes on its own; an aborted request cancels its run", async () => {
  const dir = await Deno.makeTempDir({ prefix: "ce-mrtr-replicas-" });
  const callLog = join(dir, "calls.log");
  await Deno.writeTextFile(callLog, "");
  const key = "k".repeat(16) + crypto.randomUUID();
  const replica = (name: string) =>
    startHttpServer({
      env: { CODE_EXECUTOR_APPROVALS_STATE_KEY: key },
      settings: {
        http: { replicaId: name },
        approvals: { require: ["mcp__fixture__rec*"] },
        sandbox: { warmPool: 0 },
      },
      upstream: { fixture: fixtureServer({ FIXTURE_CALL_LOG: callLog }) },
    });
  const servers = [await replica("ce-0")];
  const clients: Client[] = [];
  try {
    servers.push(await replica("ce-1"));
    const manual = async (url: URL) => {
      const { client, call } = await manualClient(url);
      clients.push(client);
      return (code: string, retry: Record<string, unknown> = {}) => call(code, {}, retry);
    };
    const [at0, at1] = [await manual(servers[0].url), await manual(servers[1].url)];
    const CODE = `await callMCPTool("mcp__fixture__record", { note: "r" }); return "made";`;
    const first = await at0(CODE);
    assertEquals(first.resultType, "input_required", JSON.stringify(first));
    const retry = {
      inputResponses: Object.fromEntries(
        Object.keys(first.inputRequests!).map((
          k,
        ) => [k, { action: "accept", content: { decision: "approve" } }]),
      ),
      requestState: first.requestState,
    };
    const elsewhere = await at1(CODE, retry);
    assertEquals(elsewhere.structuredContent?.error?.type, "RequestStateRefused");
    assertMatch(
      elsewhere.structuredContent!.error!.message,
      /parked on replica "ce-0" and this is replica "ce-1"/,
    );
    assertEquals(await Deno.readTextFile(callLog), "", "nothing ran");
    const home = await at0(CODE, retry);
    assertEquals(home.structuredContent?.returnValue, "made", JSON.stringify(home));

    // A client that aborts its request cancels the run, as on the ordinary path (no warm pool:
    // the only sandbox child is the run's).
    const abort = new AbortController();
    const spinning = clients[0].callTool(
      { name: "run_typescript", arguments: { code: "while (true) {}", timeoutMs: 100_000 } },
      { signal: abort.signal, timeout: 120_000 },
    ).catch((error) => error);
    assert(
      await eventually(async () => (await sandboxPids(servers[0].tempDir)).length === 1, 30_000),
      "the run's child started",
    );
    abort.abort();
    await spinning;
    assert(
      await eventually(async () => (await sandboxPids(servers[0].tempDir)).length === 0, 30_000),
      "the cancelled run's child was killed",
    );
  } finally {
    for (const client of clients) await client.close().catch(() => {});
    for (const server of servers) await server.close();
    await Deno.remove(dir, { recursive: true });
  }
});
