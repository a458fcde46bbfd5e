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
import {
  callRun,
  describeRun,
  eventually,
  exitOrKill,
  homeEnv,
  httpClient,
  ROOT,
  runCommand,
  sandboxPids,
  serverEnv,
  startHttpServer,
  withTempDir,
} from "./_helpers.ts";

const TOKEN = "hostile-token-7f3a9c2e5b8d1f4a6c0e";
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** What a raw HTTP/1.1 exchange returned. */
interface RawResponse {
  status: number;
  head: string;
  body: string;
}

/**
 * Sends bytes exactly as given on a new connection and reads the response (until its announced
 * end, or until the server closes the connection), so that a test controls every header (`Host`
 * included) and the framing.
 */
async function rawExchange(url: URL, request: Uint8Array): Promise<RawResponse> {
  const conn = await Deno.connect({ hostname: url.hostname, port: Number(url.port) });
  // A server that never answers fails the test instead of hanging it.
  const timer = setTimeout(() => conn.close(), 30_000);
  try {
    for (let offset = 0; offset < request.length;) {
      offset += await conn.write(request.subarray(offset));
    }
    const chunks: Uint8Array[] = [];
    const buffer = new Uint8Array(64 * 1024);
    while (true) {
      const n = await conn.read(buffer);
      if (n === null) break;
      chunks.push(buffer.slice(0, n));
      const text = decoder.decode(concat(chunks));
      const end = text.indexOf("\r\n\r\n");
      const head = text.slice(0, end);
      const length = /\r\ncontent-length: (\d+)/i.exec(head);
      if (end >= 0 && length && encoder.encode(text).length >= end + 4 + Number(length[1])) break;
      if (
        end >= 0 && /\r\ntransfer-encoding: chunked/i.test(head) && text.endsWith("\r\n0\r\n\r\n")
      ) {
        break;
      }
    }
    const text = decoder.decode(concat(chunks));
    const end = text.indexOf("\r\n\r\n");
    return {
      status: Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0),
      head: text.slice(0, end),
      body: text.slice(end + 4),
    };
  } finally {
    clearTimeout(timer);
    try {
      conn.close();
    } catch {
      // Closed by the timer.
    }
  }
}

function concat(chunks: Uint8Array[]): Uint8Array {
  const all = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  let offset = 0;
  for (const chunk of chunks) {
    all.set(chunk, offset);
    offset += chunk.length;
  }
  return all;
}

/**
 * A raw HTTP/1.1 POST to the endpoint with these headers (the endpoint's Host unless they name
 * one) and body. With `sendBytes`, only that much of the body is sent after the headers, which
 * still announce all of it: a server that answers before reading a body closes the connection
 * with the rest unread, and the reset that follows can destroy its answer in transit.
 */
function rawPost(
  url: URL,
  headers: Record<string, string>,
  body: string,
  sendBytes?: number,
): Promise<RawResponse> {
  const bytes = encoder.encode(body);
  const lines = [
    `POST ${url.pathname} HTTP/1.1`,
    ...Object.entries({
      "Host": url.host,
      "Content-Type": "application/json",
      "Accept": "application/json, text/event-stream",
      "Content-Length": String(bytes.length),
      "Connection": "close",
      ...headers,
    }).map(([name, value]) => `${name}: ${value}`),
  ];
  const head = encoder.encode(lines.join("\r\n") + "\r\n\r\n");
  return rawExchange(url, concat([head, bytes.subarray(0, sendBytes ?? bytes.length)]));
}

/** A raw chunked POST whose chunks are sent, but not the end of the body. */
function rawChunkedPost(url: URL, chunks: string[]): Promise<RawResponse> {
  const head = [
    `POST ${url.pathname} HTTP/1.1`,
    `Host: ${url.host}`,
    "Content-Type: application/json",
    "Accept: application/json, text/event-stream",
    "Transfer-Encoding: chunked",
    "Connection: close",
  ].join("\r\n") + "\r\n\r\n";
  const body = chunks.map((chunk) => `${encoder.encode(chunk).length.toString(16)}\r\n${chunk}\r\n`)
    .join("");
  return rawExchange(url, encoder.encode(head + body));
}

const INITIALIZE = JSON.stringify({
  jsonrpc: "2.0",
  id: 1,
  method: "initialize",
  params: {
    protocolVersion: "2025-11-25",
    capabilities: {},
    clientInfo: { name: "hostile", version: "1" },
  },
});

/** A 2026-07-28 request body: the protocol envelope in `_meta`. */
function modernBody(method: string, params: Record<string, unknown> = {}): string {
  return JSON.stringify({
    jsonrpc: "2.0",
    id: 1,
    method,
    params: {
      ...params,
      _meta: {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": { name: "hostile", version: "1" },
        "io.modelcontextprotocol/clientCapabilities": {},
      },
    },
  });
}

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
    const client = await httpClient(server.url, { era: "legacy" });
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

/** One kind of junk request: how to send it. */
type Junk = (url: URL) => Promise<{ status: number }>;

/**
 * Malformed requests of every kind, with the 4xx each must get. `sessionId` is an open 2025-era
 * session of the token's principal, for junk sent within a session.
 */
function junkKinds(
  token: string,
  sessionId: string,
  maxBodyBytes: number,
): Array<[string, number, Junk]> {
  const json = { "Content-Type": "application/json" };
  const accept = { "Accept": "application/json, text/event-stream" };
  const auth = { "Authorization": `Bearer ${token}` };
  const base = { ...json, ...accept, ...auth };
  const inSession = { ...base, "Mcp-Session-Id": sessionId, "MCP-Protocol-Version": "2025-11-25" };
  const modern = {
    ...base,
    "MCP-Protocol-Version": "2026-07-28",
    "Mcp-Method": "tools/list",
  };
  const ping = JSON.stringify({ jsonrpc: "2.0", id: 7, method: "ping" });
  const send = (init: RequestInit, path?: string): Junk => async (url) => {
    const response = await fetch(path ? new URL(path, url) : url, init);
    await response.body?.cancel();
    return response;
  };
  const post = (headers: Record<string, string>, body: BodyInit, path?: string) =>
    send({ method: "POST", headers, body }, path);
  return [
    ["malformed JSON", 400, post(base, '{"jsonrpc":"2.0","id":1,"method":')],
    ["JSON that is not JSON-RPC", 400, post(base, '{"hello":"world"}')],
    ["a batch of junk", 400, post(base, "[1,2,3]")],
    ["an empty body", 400, post(base, "")],
    ["invalid UTF-8", 400, post(base, new Uint8Array([0x7b, 0xff, 0xfe, 0xc3, 0x28, 0x7d]))],
    ["a text/plain initialize", 415, post({ ...base, "Content-Type": "text/plain" }, INITIALIZE)],
    [
      "a form-encoded initialize",
      415,
      post({ ...base, "Content-Type": "application/x-www-form-urlencoded" }, INITIALIZE),
    ],
    [
      "an initialize that accepts only JSON",
      406,
      post({ ...base, "Accept": "application/json" }, INITIALIZE),
    ],
    [
      "an initialize that accepts only HTML",
      406,
      post({ ...base, "Accept": "text/html" }, INITIALIZE),
    ],
    [
      "a notification without a session",
      400,
      post(base, '{"jsonrpc":"2.0","method":"notifications/initialized"}'),
    ],
    ["a response without a session", 400, post(base, '{"jsonrpc":"2.0","id":3,"result":{}}')],
    ["a ping without a session", 400, post(base, ping)],
    ["an unknown session", 404, post({ ...base, "Mcp-Session-Id": crypto.randomUUID() }, ping)],
    [
      "a session id that is not one",
      404,
      post({ ...base, "Mcp-Session-Id": "../../etc/passwd" }, ping),
    ],
    [
      "a session request with a wrong protocol version",
      400,
      post({ ...inSession, "MCP-Protocol-Version": "1999-01-01" }, ping),
    ],
    ["a session request with malformed JSON", 400, post(inSession, "{nope")],
    [
      "a session request in text/plain",
      415,
      post({ ...inSession, "Content-Type": "text/plain" }, ping),
    ],
    [
      "a session request that accepts only JSON",
      406,
      post({ ...inSession, "Accept": "application/json" }, ping),
    ],
    ["a second initialize in a session", 400, post(inSession, INITIALIZE)],
    [
      "GET without a session",
      400,
      send({ method: "GET", headers: { ...auth, "Accept": "text/event-stream" } }),
    ],
    [
      "GET of an unknown session",
      404,
      send({
        method: "GET",
        headers: { ...auth, "Accept": "text/event-stream", "Mcp-Session-Id": crypto.randomUUID() },
      }),
    ],
    ["DELETE without a session", 400, send({ method: "DELETE", headers: auth })],
    [
      "DELETE of an unknown session",
      404,
      send({ method: "DELETE", headers: { ...auth, "Mcp-Session-Id": crypto.randomUUID() } }),
    ],
    ["PUT", 405, send({ method: "PUT", headers: base, body: INITIALIZE })],
    ["a 2026 request without its headers", 400, post(base, modernBody("tools/list"))],
    [
      "a 2026 request with a 2025 version header",
      400,
      post({ ...modern, "MCP-Protocol-Version": "2025-11-25" }, modernBody("tools/list")),
    ],
    [
      "a 2026 request with an unknown version",
      400,
      post(
        { ...modern, "MCP-Protocol-Version": "1999-01-01" },
        modernBody("tools/list").replace("2026-07-28", "1999-01-01"),
      ),
    ],
    [
      "a 2026 request whose Mcp-Method disagrees",
      400,
      post({ ...modern, "Mcp-Method": "tools/call" }, modernBody("tools/list")),
    ],
    [
      "a 2026 request in text/plain",
      415,
      post({ ...modern, "Content-Type": "text/plain" }, modernBody("tools/list")),
    ],
    [
      "a 2026 initialize",
      404,
      post({ ...modern, "Mcp-Method": "initialize" }, modernBody("initialize")),
    ],
    ["no token", 401, post({ ...json, ...accept }, INITIALIZE)],
    ["a wrong token", 401, post({ ...base, "Authorization": `Bearer ${token}x` }, INITIALIZE)],
    ["Basic auth", 401, post({ ...base, "Authorization": "Basic Zm9vOmJhcg==" }, INITIALIZE)],
    ["an empty bearer", 401, post({ ...base, "Authorization": "Bearer " }, INITIALIZE)],
    ["a wrong path", 404, post(base, INITIALIZE, "/mcp/../admin")],
    ["a foreign Origin", 403, post({ ...base, "Origin": "http://evil.example" }, INITIALIZE)],
    [
      "a body over the cap",
      413,
      // Announced, not sent: see rawPost().
      (url) =>
        rawPost(url, auth, INITIALIZE.replace('"hostile"', `"${"z".repeat(maxBodyBytes)}"`), 0),
    ],
    ["a 200 KB header", 400, post({ ...base, "X-Junk": "h".repeat(200_000) }, INITIALIZE)],
  ];
}

Deno.test("serve --http answers 1,000 junk requests with a 4xx each and keeps serving", async () => {
  const maxBodyBytes = 256 * 1024;
  const server = await startHttpServer({
    env: { CODE_EXECUTOR_HTTP_TOKEN: TOKEN },
    settings: { http: { maxBodyBytes } },
  });
  try {
    const owner = await httpClient(server.url, { era: "legacy", token: TOKEN });
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
      for (const era of ["legacy", "modern"] as const) {
        const client = await httpClient(server.url, { era, token: TOKEN });
        try {
          assertReturns(await callRun(client, "run_typescript", `return "${era}"`), era);
        } finally {
          await client.close();
        }
      }
      const health = await fetch(new URL("/healthz", server.url));
      assertEquals(await health.json(), { status: "ok" });
    } finally {
      await owner.close();
    }
    assert(
      !/\] error: /.test(server.stderr),
      server.stderr.split("\n").filter((l) => /\] error: /.test(l)).join("\n"),
    );
  } finally {
    await server.close();
  }
});

/** Starts the recording upstream fixture; its requests go to `headersFile`. */
async function startRecordingUpstream(
  home: string,
  headersFile: string,
): Promise<{ url: string; close(): Promise<void> }> {
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      "--config",
      join(ROOT, "deno.json"),
      join(ROOT, "tests", "fixtures", "http_upstream_fixture.ts"),
    ],
    cwd: home,
    clearEnv: true,
    env: { ...homeEnv(home), FIXTURE_HEADERS_FILE: headersFile },
    stdin: "null",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const close = async () => {
    try {
      child.kill("SIGTERM");
    } catch {
      // Already gone.
    }
    await exitOrKill(child, 5_000);
  };
  const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let seen = "";
  try {
    while (!/listening on (\S+)\n/.test(seen)) {
      const { value, done } = await lines.read();
      if (done) throw new Error(`the recording upstream exited: ${seen}`);
      seen += value;
    }
  } catch (error) {
    await close();
    throw error;
  } finally {
    lines.releaseLock();
    await child.stdout.cancel().catch(() => {});
  }
  return { url: /listening on (\S+)\n/.exec(seen)![1], close };
}

Deno.test("serve --http never lets the bearer token out: not to the audit log, the debug log or an upstream server", async () => {
  await withTempDir("ce-http-token-", async (dir) => {
    const headersFile = join(dir, "upstream-requests.jsonl");
    const upstream = await startRecordingUpstream(dir, headersFile);
    try {
      const server = await startHttpServer({
        env: { CODE_EXECUTOR_HTTP_TOKEN: TOKEN, CODE_EXECUTOR_LOG_LEVEL: "debug" },
        upstream: { recorder: { type: "http", url: upstream.url } },
      });
      let stderr = "";
      let audit = "";
      try {
        for (const era of ["legacy", "modern"] as const) {
          const client = await httpClient(server.url, { era, token: TOKEN });
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
        stderr = server.stderr;
      }
      assert(!audit.includes(TOKEN), "the token is in the audit log");
      assertMatch(stderr, /\] debug: /);
      assertMatch(stderr, /principal=default/);
      assert(
        !stderr.includes(TOKEN),
        stderr.split("\n").filter((l) => l.includes(TOKEN)).join("\n"),
      );

      const requests = (await Deno.readTextFile(headersFile)).trim().split("\n").map((line) =>
        JSON.parse(line) as { method: string; path: string; headers: Array<[string, string]> }
      );
      assert(requests.filter((r) => r.method === "POST").length >= 4, JSON.stringify(requests));
      for (const request of requests) {
        assert(!request.path.includes(TOKEN), `the token is in an upstream URL: ${request.path}`);
        for (const [name, value] of request.headers) {
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
    assertMatch(server.stderr, /\(auth: bearer\)/);
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
    const client = await httpClient(server.url, { era: "legacy" });
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

      const late = await httpClient(server.url, { era: "legacy" }).then(
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
          httpClient(server.url, { era: "modern" }).then(async (late) => {
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
