/**
 * `serve --http` end to end: the real server process (`main.ts serve --http --port 0`) driven by
 * real SDK v2 clients over Streamable HTTP in both protocol eras (2025-era sessions and
 * 2026-07-28 stateless requests), calling real upstream servers from npm and the fixture.
 *
 * @module
 */
import type { Client } from "@modelcontextprotocol/client";
import { join } from "node:path";
import {
  assert,
  assertEquals,
  assertFails,
  assertMatch,
  assertReturns,
  describeResult as describe,
  type RunResult,
} from "./_assert.ts";
import { EVERYTHING, MEMORY } from "./_pins.ts";
import { fixtureServer, npmServer } from "./_env.ts";
import { eventually, sandboxPids, waitForExit } from "./_proc.ts";
import { withTempDir } from "./_fs.ts";
import { startHttpServer } from "./_http_server.ts";
import { callRun, connect, resultText } from "./_client.ts";

const ERAS = ["legacy", "modern"] as const;

Deno.test("serve --http: both eras list the tools, search them and run TypeScript and Python that call upstream servers", async (t) => {
  await withTempDir("ce-http-home-", async (home) => {
    const server = await startHttpServer({
      home,
      upstream: {
        everything: npmServer(EVERYTHING),
        memory: npmServer(MEMORY, { env: { MEMORY_FILE_PATH: join(home, "memory.jsonl") } }),
        fixture: fixtureServer({}),
      },
    });
    try {
      for (const era of ERAS) {
        const client = await connect(server.url, { era });
        try {
          await t.step(`${era}: tools/list offers the three tools`, async () => {
            const { tools } = await client.listTools();
            assertEquals(tools.map((tool) => tool.name), [
              "run_typescript",
              "run_python",
              "search_tools",
            ]);
          });

          await t.step(`${era}: search_tools finds upstream tools with signatures`, async () => {
            const found = resultText(
              await client.callTool({ name: "search_tools", arguments: { query: "sum" } }),
            );
            assertMatch(found, /mcp__everything__get-sum/);
            assertMatch(found, /tools\.everything\.getSum\(/);
          });

          await t.step(`${era}: run_typescript calls everything and the fixture`, async () => {
            const result = await callRun(
              client,
              "run_typescript",
              [
                'const sum = await callMCPTool("mcp__everything__get-sum", { a: 2, b: 3 });',
                'const thing = await tools.fixture.getThingV2({ id: "7" });',
                `console.log("era ${era}");`,
                "return { sum, thing };",
              ].join("\n"),
            );
            assertReturns(result, { sum: "The sum of 2 and 3 is 5.", thing: "thing 7" }, {
              stdout: `era ${era}\n`,
            });
            assertEquals(result.toolCalls.map((call) => [call.name, call.ok]), [
              ["mcp__everything__get-sum", true],
              ["mcp__fixture__Get-Thing.v2", true],
            ]);
          });

          await t.step(`${era}: run_python calls memory and everything`, async () => {
            const result = await callRun(
              client,
              "run_python",
              [
                `await call_mcp_tool("mcp__memory__create_entities", {"entities": [{"name": "${era}", "entityType": "era", "observations": ["over HTTP"]}]})`,
                "graph = await tools.memory.read_graph()",
                'total = await call_mcp_tool("mcp__everything__get-sum", {"a": 20, "b": 22})',
                `[e["name"] for e in graph["entities"]], total`,
              ].join("\n"),
            );
            assertEquals(result.isError, false, describe(result));
            const [names, total] = result.returnValue as [string[], string];
            assert(names.includes(era), describe(result));
            assertEquals(total, "The sum of 20 and 22 is 42.");
          });
        } finally {
          await client.close();
        }
      }
    } finally {
      await server.close();
    }
  });
});

Deno.test("serve --http: a 2025-era session answers llm.ask() through sampling and askUser() through elicitation, and gets progress", async () => {
  const server = await startHttpServer({ settings: { sampling: { enabled: true } } });
  const sampled: string[] = [];
  const asked: string[] = [];
  try {
    const client = await connect(server.url, {
      era: "legacy",
      capabilities: { sampling: {}, elicitation: { form: {} } },
      setup(client: Client) {
        client.setRequestHandler("sampling/createMessage", (request) => {
          const last = request.params.messages.at(-1)?.content as { text?: string };
          sampled.push(last.text ?? "");
          return Promise.resolve({
            model: "http-test-model",
            role: "assistant" as const,
            content: { type: "text" as const, text: `answer to ${last.text}` },
            stopReason: "endTurn",
          });
        });
        client.setRequestHandler("elicitation/create", (request) => {
          asked.push(request.params.message);
          return Promise.resolve({ action: "accept" as const, content: { name: "Ada" } });
        });
      },
    });
    try {
      const progress: Array<[number, number | undefined, string | undefined]> = [];
      const ts = await callRun(
        client,
        "run_typescript",
        [
          'const text = await llm.ask("What is 2+2?", { maxTokens: 20 });',
          'progress(1, 2, "asked the model");',
          'const who = await askUser("Who are you?", { type: "object", properties: { name: { type: "string" } } });',
          "return { text, who };",
        ].join("\n"),
        {},
        { onprogress: (p) => progress.push([p.progress, p.total, p.message]) },
      );
      assertReturns(ts, {
        text: "answer to What is 2+2?",
        who: { action: "accept", content: { name: "Ada" } },
      });
      assertEquals(ts.sampling?.rounds, 1);
      // The server numbers the notifications itself and says what each reports.
      assertEquals(progress.map(([, , message]) => message), [
        "LLM round 1 of at most 10",
        "1/2 asked the model",
      ]);

      const py = await callRun(
        client,
        "run_python",
        [
          'text = await llm.ask("And in Python?")',
          'who = await ask_user("Still you?", {"type": "object", "properties": {"name": {"type": "string"}}})',
          '[text, who["content"]["name"]]',
        ].join("\n"),
      );
      assertReturns(py, ["answer to And in Python?", "Ada"]);
      assertEquals(sampled, ["What is 2+2?", "And in Python?"]);
      assertEquals(asked, ["Who are you?", "Still you?"]);
    } finally {
      await client.close();
    }
  } finally {
    await server.close();
  }
});

/**
 * Starts `while (true) {}` through `client` (with `signal` on the request), waits for its sandbox
 * child, and returns the child's pid and the call, which settles with its result or error.
 */
// Generous: a CI run once saw a child outlive 10 s at a load average of 38 on 2 cores (other
// suites running beside it), and not again under 4 busy loops. A child that is never killed
// outlives this by far: its run's timeoutMs is 120 s.
const KILLED_WITHIN_MS = 30_000;

async function startSpinning(
  client: Client,
  tempDir: string,
  signal?: AbortSignal,
): Promise<{ pid: number; call: Promise<{ result?: RunResult; error?: Error }> }> {
  const call = callRun(client, "run_typescript", "while (true) {}", { timeoutMs: 120_000 }, {
    signal,
  }).then((result) => ({ result }), (error: Error) => ({ error }));
  let pids: number[] = [];
  const started = await eventually(async () => {
    pids = await sandboxPids(tempDir);
    return pids.length === 1;
  }, 30_000);
  assert(started, `no single sandbox child for the run: ${pids}`);
  return { pid: pids[0], call };
}

Deno.test("serve --http: a client that goes away cancels its run and the sandbox child is killed", async (t) => {
  // No warm pool: the only sandbox child is the run's.
  const server = await startHttpServer({ settings: { sandbox: { warmPool: 0 } } });
  /** Aborts a spinning run's request: the client sees an error, the child dies, the next run works. */
  async function abortKillsChild(era: "modern" | "legacy", next: number): Promise<void> {
    const client = await connect(server.url, { era });
    try {
      const abort = new AbortController();
      const { pid, call } = await startSpinning(client, server.tempDir, abort.signal);
      abort.abort();
      const ended = await call;
      assert(
        ended.error,
        `the aborted call did not fail on the client: ${JSON.stringify(ended)}`,
      );
      assert(
        await waitForExit(pid, KILLED_WITHIN_MS),
        `sandbox child ${pid} still runs; server log:\n${server.stderr().slice(-3000)}`,
      );
      assertReturns(await callRun(client, "run_typescript", `return ${next}`), next);
    } finally {
      await client.close();
    }
  }
  try {
    await t.step("modern: aborting the request closes its stream", async () => {
      await abortKillsChild("modern", 1);
    });

    await t.step("legacy: aborting the request (notifications/cancelled)", async () => {
      await abortKillsChild("legacy", 2);
    });

    await t.step("legacy: closing the transport drops the call's stream", async () => {
      const client = await connect(server.url, { era: "legacy" });
      const { pid, call } = await startSpinning(client, server.tempDir);
      await client.close();
      await call;
      assert(
        await waitForExit(pid, KILLED_WITHIN_MS),
        `sandbox child ${pid} still runs; server log:\n${server.stderr().slice(-3000)}`,
      );
    });

    await t.step("the server keeps serving new sessions", async () => {
      const client = await connect(server.url, { era: "legacy" });
      try {
        assertReturns(await callRun(client, "run_typescript", "return 3"), 3);
      } finally {
        await client.close();
      }
      let left: number[] = [];
      const none = await eventually(async () => {
        left = await sandboxPids(server.tempDir);
        return left.length === 0;
      }, KILLED_WITHIN_MS);
      assert(none, `sandbox children left: ${left}`);
    });
  } finally {
    await server.close();
  }
});

const ALICE = "alice-token-0123456789abcdef";
const BOB = "bob-token-0123456789abcdef";

async function auditLines(path: string): Promise<Array<Record<string, unknown>>> {
  const text = await Deno.readTextFile(path).catch(() => "");
  return text.split("\n").filter(Boolean).map((line) => JSON.parse(line));
}

Deno.test("serve --http: a principal cannot use another principal's Python session or HTTP session, and the audit log names each", async () => {
  await withTempDir("ce-http-tokens-", async (dir) => {
    const tokensFile = join(dir, "tokens");
    await Deno.writeTextFile(tokensFile, `# principal token\nalice ${ALICE}\nbob ${BOB}\n`, {
      mode: 0o600,
    });
    await Deno.chmod(tokensFile, 0o600);
    const server = await startHttpServer({ settings: { http: { tokensFile } } });
    try {
      const alice = await connect(server.url, { era: "legacy", token: ALICE });
      const aliceModern = await connect(server.url, { era: "modern", token: ALICE });
      const bob = await connect(server.url, { era: "legacy", token: BOB });
      try {
        assertReturns(await callRun(alice, "run_python", "x = 41\nx", { session: "s" }), 41);
        assertReturns(await callRun(aliceModern, "run_python", "x + 1", { session: "s" }), 42);

        const seen = await callRun(bob, "run_python", "x", { session: "s" });
        assertFails(seen, "NameError", /name 'x' is not defined/);
        assertReturns(await callRun(bob, "run_python", "x = 'bob'\nx", { session: "s" }), "bob");
        assertReturns(await callRun(alice, "run_python", "x", { session: "s" }), 41);

        // Alice's MCP session id is unknown to Bob, and known to Alice.
        const sessionId = (alice.transport as { sessionId?: string }).sessionId;
        assert(sessionId, "the legacy client has no session id");
        const ping = (token: string) =>
          fetch(server.url, {
            method: "POST",
            headers: {
              "Authorization": `Bearer ${token}`,
              "Content-Type": "application/json",
              "Accept": "application/json, text/event-stream",
              "Mcp-Session-Id": sessionId,
              "MCP-Protocol-Version": "2025-11-25",
            },
            body: JSON.stringify({ jsonrpc: "2.0", id: 99, method: "ping" }),
          });
        const asBob = await ping(BOB);
        assertEquals(asBob.status, 404, await asBob.text());
        const asAlice = await ping(ALICE);
        assertEquals(asAlice.status, 200);
        await asAlice.body?.cancel();
      } finally {
        await Promise.all([alice.close(), aliceModern.close(), bob.close()]);
      }

      let lines: Array<Record<string, unknown>> = [];
      const recorded = await eventually(async () => {
        lines = (await auditLines(server.auditPath)).filter((l) => l.kind === "execution");
        return lines.length === 5;
      }, 10_000);
      assert(recorded, `expected 5 execution records: ${JSON.stringify(lines)}`);
      assertEquals(lines.map((l) => [l.principal, l.session, l.outcome]), [
        ["http:alice", "s", "ok"],
        ["http:alice", "s", "ok"],
        ["http:bob", "s", "error"],
        ["http:bob", "s", "ok"],
        ["http:alice", "s", "ok"],
      ]);
      const raw = await Deno.readTextFile(server.auditPath);
      assert(!raw.includes(ALICE) && !raw.includes(BOB), "a token is in the audit log");
    } finally {
      await server.close();
    }
  });
});

Deno.test("serve --http: /healthz answers without auth and says nothing; /readyz waits for the upstream catalog", async () => {
  await withTempDir("ce-http-ready-", async (dir) => {
    const gate = join(dir, "gate");
    const fixture = fixtureServer({});
    // The upstream server starts only once the test opens the gate, so /readyz is not ready
    // until then, whatever the timing.
    const gated = {
      command: "sh",
      args: [
        "-c",
        `while [ ! -e "$0" ]; do sleep 0.05; done; exec "$@"`,
        gate,
        fixture.command as string,
        ...fixture.args as string[],
      ],
    };
    const token = "health-token-0123456789abcdef";
    const server = await startHttpServer({
      env: { CODE_EXECUTOR_HTTP_TOKEN: token },
      upstream: { gated },
    });
    try {
      const base = new URL("/", server.url);
      const health = await fetch(new URL("/healthz", base));
      assertEquals(health.status, 200);
      const body = await health.text();
      assertEquals(JSON.parse(body), { status: "ok" });
      assert(!/code-executor|\d+\.\d+\.\d+|alice|default|local/i.test(body), body);

      const mcp = await fetch(server.url, { method: "POST", body: "{}" });
      assertEquals(mcp.status, 401);
      assertMatch(mcp.headers.get("www-authenticate") ?? "", /^Bearer/);
      await mcp.body?.cancel();

      const notReady = await fetch(new URL("/readyz", base));
      assertEquals(notReady.status, 503);
      assertEquals(await notReady.json(), { ready: false });

      await Deno.writeTextFile(gate, "");
      let last = 0;
      const ready = await eventually(async () => {
        const response = await fetch(new URL("/readyz", base));
        last = response.status;
        await response.body?.cancel();
        return last === 200;
      }, 60_000);
      assert(ready, `/readyz stayed ${last}`);
    } finally {
      await server.close();
    }
  });
});
