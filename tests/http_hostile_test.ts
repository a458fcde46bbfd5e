/**
 * Hostile HTTP against `serve --http`: DNS rebinding and foreign origins, oversized and slow
 * bodies, a thousand malformed requests of every kind, and a bearer token that must never leave
 * the server (audit log, stderr at debug level, upstream requests). Each test runs the real
 * server process and checks that it keeps serving and leaves nothing behind.
 *
 * @module
 */
import { join } from "node:path";
import { assert, assertEquals, assertMatch, assertReturns } from "./_assert.ts";
import { ROOT, serverEnv } from "./_env.ts";
import { eventually, sandboxPids } from "./_proc.ts";
import { describeRun, runCommand } from "./_command.ts";
import { withTempDir } from "./_fs.ts";
import { startHttpServer } from "./_http_server.ts";
import { callRun, connect, forEachEra } from "./_client.ts";
import { spawnRecordingUpstream } from "./fixtures/http_upstream.ts";
import {
  INITIALIZE,
  junkKinds,
  modernBody,
  rawChunkedPost,
  rawExchange,
  rawPost,
} from "./_raw_http.ts";

const TOKEN = "hostile-token-7f3a9c2e5b8d1f4a6c0e";
const encoder = new TextEncoder();
Deno.test("serve --http refuses a rebinding Host and a foreign Origin with 403", async () => {
  const server = await startHttpServer();
  try {
    const host = server.url.host;
    const refused: Array<[string, Record<string, string>]> = [
      ["a foreign Host", { Host: "evil.example" }],
      ["a foreign Host with the right port", { Host: `evil.example:${server.url.port}` }],
      ["a Host that starts like loopback", { Host: `127.0.0.1.evil.example:${server.url.port}` }],
      ["a foreign Origin", { Host: host, Origin: "http://evil.example" }],
      ["a look-alike Origin", { Host: host, Origin: "http://127.0.0.1.evil.example" }],
      ["the null Origin", { Host: host, Origin: "null" }],
    ];
    for (const [what, headers] of refused) {
      // Refused on the headers alone, so the body is not sent (see rawPost()).
      const response = await rawPost(server.url, headers, INITIALIZE, 0);
      assertEquals(response.status, 403, `${what}: ${response.head}\n${response.body}`);
    }
    // The same request with the bound Host, or a loopback Origin, is served.
    const served: Array<Record<string, string>> = [
      { Host: host },
      { Host: host, Origin: "http://localhost:5173" },
    ];
    for (const headers of served) {
      const response = await rawPost(server.url, headers, INITIALIZE);
      assertEquals(response.status, 200, `${JSON.stringify(headers)}: ${response.head}`);
      assertMatch(response.body, /"protocolVersion":"2025-11-25"/);
    }
  } finally {
    await server.close();
  }
});

Deno.test("serve --http answers a body over http.maxBodyBytes with 413 and a body that never ends with 408", async () => {
  const maxBodyBytes = 64 * 1024;
  const server = await startHttpServer({
    settings: { http: { maxBodyBytes, bodyTimeoutMs: 1_000 } },
  });
  try {
    const client = await connect(server.url, { era: "legacy" });
    try {
      const sessionId = (client.transport as { sessionId?: string }).sessionId!;
      const big = "x".repeat(maxBodyBytes + 1);
      const cases: Array<[string, Record<string, string>, string]> = [
        ["a 2025-era initialize", {}, INITIALIZE.replace('"hostile"', `"${big}"`)],
        [
          "a 2026-era tools/call",
          {
            "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": "tools/call",
            "Mcp-Name": "run_typescript",
          },
          modernBody("tools/call", { name: "run_typescript", arguments: { code: big } }),
        ],
        [
          "a request of an open session",
          { "Mcp-Session-Id": sessionId, "MCP-Protocol-Version": "2025-11-25" },
          JSON.stringify({
            jsonrpc: "2.0",
            id: 5,
            method: "tools/call",
            params: { name: "run_typescript", arguments: { code: big } },
          }),
        ],
      ];
      for (const [what, headers, body] of cases) {
        // The announced length is enough: the server answers before reading the body.
        const response = await rawPost(server.url, headers, body, 0);
        assertEquals(response.status, 413, `${what}: ${response.head}\n${response.body}`);
      }

      // A body sent in chunks, with no length announced, is cut off once past the cap.
      const chunked = await rawChunkedPost(server.url, [
        INITIALIZE.slice(0, -1),
        `,"pad":"${"x".repeat(maxBodyBytes / 2)}`,
        "x".repeat(maxBodyBytes / 2),
      ]);
      assertEquals(chunked.status, 413, `${chunked.head}\n${chunked.body}`);

      // A body that announces more than it sends is given up on after http.bodyTimeoutMs.
      const slow = await rawExchange(
        server.url,
        encoder.encode(
          `POST ${server.url.pathname} HTTP/1.1\r\nHost: ${server.url.host}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 1000\r\nConnection: close\r\n\r\n{"jsonrpc":`,
        ),
      );
      assertEquals(slow.status, 408, `${slow.head}\n${slow.body}`);
      assertMatch(slow.body, /http\.bodyTimeoutMs/);

      // Code just under the cap still runs.
      const code = `// ${"y".repeat(maxBodyBytes - 2_000)}\nreturn "fits";`;
      assertReturns(await callRun(client, "run_typescript", code), "fits");
    } finally {
      await client.close();
    }
  } finally {
    await server.close();
  }
});

Deno.test("serve --http answers 1,000 junk requests with a 4xx each and keeps serving", async () => {
  const maxBodyBytes = 256 * 1024;
  const server = await startHttpServer({
    env: { CODE_EXECUTOR_HTTP_TOKEN: TOKEN },
    settings: { http: { maxBodyBytes } },
  });
  try {
    const owner = await connect(server.url, { era: "legacy", token: TOKEN });
    try {
      const sessionId = (owner.transport as { sessionId?: string }).sessionId!;
      const kinds = junkKinds(TOKEN, sessionId, maxBodyBytes);
      const statuses = new Map<string, Set<number | string>>();
      let next = 0;
      const worker = async () => {
        while (next < 1_000) {
          const [name, , junk] = kinds[next++ % kinds.length];
          const status = await junk(server.url).then((r) => r.status, (e: Error) => e.message);
          statuses.set(name, (statuses.get(name) ?? new Set()).add(status));
        }
      };
      await Promise.all(Array.from({ length: 8 }, worker));
      assertEquals(
        kinds.map(([name]) => `${name}: ${[...statuses.get(name) ?? []].join(", ")}`),
        kinds.map(([name, status]) => `${name}: ${status}`),
      );

      // The session the junk was sent into still works, and so do new clients of both eras.
      assertReturns(await callRun(owner, "run_typescript", "return 'owner'"), "owner");
      await forEachEra(server.url, { token: TOKEN }, async (client, era) => {
        assertReturns(await callRun(client, "run_typescript", `return "${era}"`), era);
      });
      const health = await fetch(new URL("/healthz", server.url));
      assertEquals(await health.json(), { status: "ok" });
    } finally {
      await owner.close();
    }
    assert(
      !/\] error: /.test(server.stderr()),
      server.stderr().split("\n").filter((l) => /\] error: /.test(l)).join("\n"),
    );
  } finally {
    await server.close();
  }
});

Deno.test("serve --http never lets the bearer token out: not to the audit log, the debug log or an upstream server", async () => {
  await withTempDir("ce-http-token-", async (dir) => {
    const headersFile = join(dir, "upstream-requests.jsonl");
    const upstream = await spawnRecordingUpstream({ home: dir, headersFile });
    try {
      const server = await startHttpServer({
        env: { CODE_EXECUTOR_HTTP_TOKEN: TOKEN, CODE_EXECUTOR_LOG_LEVEL: "debug" },
        upstream: { recorder: { type: "http", url: upstream.url.href } },
      });
      let stderr = "";
      let audit = "";
      try {
        for (const era of ["legacy", "modern"] as const) {
          const client = await connect(server.url, { era, token: TOKEN });
          try {
            const ts = await callRun(
              client,
              "run_typescript",
              `return await callMCPTool("mcp__recorder__echo", { message: "${era} ts" });`,
            );
            assertReturns(ts, `echo: ${era} ts`);
            const py = await callRun(
              client,
              "run_python",
              `await tools.recorder.echo(message="${era} py")`,
            );
            assertReturns(py, `echo: ${era} py`);
            // A failing run and a refused call are logged and audited too.
            const failing = await callRun(client, "run_typescript", "throw new Error('boom')");
            assertEquals(failing.isError, true);
          } finally {
            await client.close();
          }
        }
        // The token where it does not belong: in the query string, a session id, a wrong path.
        for (
          const [path, headers] of [
            [`/mcp?access_token=${TOKEN}`, {}],
            ["/mcp", { "Mcp-Session-Id": TOKEN }],
            [`/${TOKEN}`, {}],
            ["/mcp", { "Authorization": `Bearer ${TOKEN}-but-longer` }],
          ] as Array<[string, Record<string, string>]>
        ) {
          const response = await fetch(new URL(path, server.url), {
            method: "POST",
            headers: {
              "Authorization": `Bearer ${TOKEN}`,
              "Content-Type": "application/json",
              "Accept": "application/json, text/event-stream",
              ...headers,
            },
            body: INITIALIZE,
          });
          await response.body?.cancel();
        }
        const audited = await eventually(async () => {
          audit = await Deno.readTextFile(server.auditPath).catch(() => "");
          return audit.split("\n").filter((l) => l.includes('"kind":"execution"')).length === 6;
        }, 10_000);
        assert(audited, `expected 6 execution records:\n${audit}`);
      } finally {
        await server.close();
        stderr = server.stderr();
      }
      assert(!audit.includes(TOKEN), "the token is in the audit log");
      assertMatch(stderr, /\] debug: /);
      assertMatch(stderr, /principal=http:default/);
      assert(
        !stderr.includes(TOKEN),
        stderr.split("\n").filter((l) => l.includes(TOKEN)).join("\n"),
      );

      const requests = await upstream.requests();
      assert(requests.filter((r) => r.method === "POST").length >= 4, JSON.stringify(requests));
      for (const request of requests) {
        assert(!request.path.includes(TOKEN), `the token is in an upstream URL: ${request.path}`);
        for (const [name, value] of Object.entries(request.headers)) {
          assert(name !== "authorization", `an upstream request carries ${name}: ${value}`);
          assert(!value.includes(TOKEN), `the token is in an upstream header ${name}`);
        }
      }
    } finally {
      await upstream.close();
    }
  });
});

Deno.test("serve --http refuses to listen on 0.0.0.0 without auth and names CODE_EXECUTOR_HTTP_TOKEN", async () => {
  await withTempDir("ce-http-wildcard-", async (dir) => {
    const run = await runCommand(
      Deno.execPath(),
      ["run", "-A", "main.ts", "serve", "--http", "--host", "0.0.0.0", "--port", "0"],
      {
        cwd: ROOT,
        clearEnv: true,
        env: {
          ...serverEnv(dir, { home: dir, sharedCache: true }),
          CODE_EXECUTOR_LOG_LEVEL: "info",
        },
        timeoutMs: 60_000,
      },
    );
    assert(run.code !== 0, describeRun(run));
    assertMatch(run.stderr, /CODE_EXECUTOR_HTTP_TOKEN/, describeRun(run));
    assertMatch(run.stderr, /0\.0\.0\.0/, describeRun(run));
    assert(!/ready on/.test(run.stderr), describeRun(run));
  });

  // With a token, the same command starts.
  const server = await startHttpServer({
    args: ["--host", "0.0.0.0"],
    env: { CODE_EXECUTOR_HTTP_TOKEN: TOKEN },
  });
  try {
    assertMatch(server.stderr(), /\(auth: bearer\)/);
    const health = await fetch(`http://127.0.0.1:${server.url.port}/healthz`);
    assertEquals(health.status, 200);
    await health.body?.cancel();
  } finally {
    await server.close();
  }
});

Deno.test("serve --http counts open event streams against http.maxRequests, and still serves probes and open sessions", async () => {
  const server = await startHttpServer({
    settings: { http: { maxRequests: 3 }, sandbox: { warmPool: 0 } },
  });
  try {
    // A 2025-era client holds its GET stream open, and each tool call's answer is a stream that
    // stays open for the whole run: three requests in flight.
    const client = await connect(server.url, { era: "legacy" });
    const abort = new AbortController();
    try {
      const calls = [1, 2].map(() =>
        callRun(client, "run_typescript", "await new Promise(() => setInterval(() => {}, 1000));", {
          timeoutMs: 120_000,
        }, { signal: abort.signal }).catch((error: Error) => error)
      );
      const running = await eventually(
        async () => (await sandboxPids(server.tempDir)).length === 2,
        30_000,
      );
      assert(running, "the two runs did not start");

      const late = await connect(server.url, { era: "legacy" }).then(
        async (other) => {
          await other.close();
          return "connected";
        },
        (error: Error) => error.message,
      );
      assertMatch(late, /Too many requests at once \(http\.maxRequests 3\)/);
      const modern = await fetch(server.url, {
        method: "POST",
        headers: {
          "Content-Type": "application/json",
          "Accept": "application/json, text/event-stream",
          "MCP-Protocol-Version": "2026-07-28",
          "Mcp-Method": "tools/list",
        },
        body: modernBody("tools/list"),
      });
      assertEquals(modern.status, 503);
      assertMatch(await modern.text(), /http\.maxRequests/);
      for (const probe of ["/healthz", "/readyz"]) {
        const response = await fetch(new URL(probe, server.url));
        assertEquals(response.status, 200, probe);
        await response.body?.cancel();
      }
      // The open session is still served, its cancellations included.
      await client.ping();
      abort.abort();
      const ended = await Promise.all(calls);
      assert(ended.every((outcome) => outcome instanceof Error), JSON.stringify(ended));
      const gone = await eventually(
        async () => (await sandboxPids(server.tempDir)).length === 0,
        10_000,
      );
      assert(gone, "the cancelled runs' children still run");

      // Their streams have closed: there is room again.
      const room = await eventually(
        () =>
          connect(server.url, { era: "modern" }).then(async (late) => {
            await late.close();
            return true;
          }, () => false),
        10_000,
      );
      assert(room, "new clients are still refused after the runs ended");
    } finally {
      abort.abort();
      await client.close();
    }
  } finally {
    await server.close();
  }
});
