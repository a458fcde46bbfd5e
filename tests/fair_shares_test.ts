/**
 * Fair shares of every global cap (issue 23, class 3): with default per-principal shares (half of
 * each cap), one principal that fills what it can of `http.maxSessions`, `python.maxSessions`,
 * `http.maxRequests` (slow bodies on its open session, which the global cap exempts) or
 * `limits.maxConcurrent` (runs parked for an MRTR retry) leaves room for another principal, who
 * is served at once.
 *
 * @module
 */
import type { Client } from "@modelcontextprotocol/client";
import { assert, assertEquals, assertMatch, describeResult } from "./_assert.ts";
import {
  callRun,
  connect,
  type HttpServer,
  initializeRequest,
  postInitialize,
  startHttpServer,
  withTempDir,
} from "./_helpers.ts";
import { manualClient } from "./_client.ts";
import { writeTokensFile } from "./_http_server.ts";

async function initialize(server: HttpServer, token: string): Promise<Response> {
  const response = await postInitialize(server.url, "fair-shares", `Bearer ${token}`);
  await response.body?.cancel();
  return response;
}

/**
 * Runs `fn` against a `serve --http` whose tokens file names alice and bob, with `http` settings
 * beside `tokensFile` and the other `settings` of the cap under test; the server is closed after.
 */
async function withAliceAndBob(
  prefix: string,
  settings: { http?: Record<string, unknown>; [section: string]: unknown },
  fn: (server: HttpServer, tokens: Record<"alice" | "bob", string>) => Promise<void>,
): Promise<void> {
  await withTempDir(prefix, async (dir) => {
    const { tokensFile, tokens } = await writeTokensFile(dir, ["alice", "bob"]);
    const server = await startHttpServer({
      settings: { ...settings, http: { tokensFile, ...settings.http } },
    });
    try {
      await fn(server, tokens);
    } finally {
      await server.close();
    }
  });
}

Deno.test("http.maxSessions: one principal's initializes leave sessions for another", async () => {
  await withAliceAndBob(
    "ce-fair-sessions-",
    { http: { maxSessions: 6 } },
    async (server, tokens) => {
      const statuses: number[] = [];
      for (let i = 0; i < 8; i++) statuses.push((await initialize(server, tokens.alice)).status);
      assertEquals(statuses, [200, 200, 200, 503, 503, 503, 503, 503]);
      const refused = await postInitialize(server.url, "fair-shares", `Bearer ${tokens.alice}`);
      assertMatch((await refused.json()).error.message, /http\.principalMaxSessions 3/);
      assertEquals((await initialize(server, tokens.bob)).status, 200);
    },
  );
});

Deno.test("python.maxSessions: one principal's sessions leave sessions for another", async () => {
  await withAliceAndBob("ce-fair-py-", { python: { maxSessions: 2 } }, async (server, tokens) => {
    const clients: Client[] = [];
    try {
      const alice = await connect(server.url, { token: tokens.alice });
      clients.push(alice);
      const bob = await connect(server.url, { token: tokens.bob });
      clients.push(bob);
      const first = await callRun(alice, "run_python", "1", { session: "a" });
      assertEquals(first.returnValue, 1, describeResult(first));
      const second = await callRun(alice, "run_python", "2", { session: "b" });
      assertEquals(second.error?.type, "SessionLimitError", describeResult(second));
      assertMatch(second.error!.message, /python\.principalMaxSessions/);
      const other = await callRun(bob, "run_python", "3", { session: "a" });
      assertEquals(other.returnValue, 3, describeResult(other));
    } finally {
      for (const client of clients) await client.close().catch(() => {});
    }
  });
});

/** Opens a POST whose body never finishes: the request stays in flight until `close()`. */
async function slowPost(
  server: HttpServer,
  headers: Record<string, string>,
): Promise<{ status: Promise<number>; close(): void }> {
  const conn = await Deno.connect({ hostname: server.url.hostname, port: Number(server.url.port) });
  const lines = [
    `POST ${server.url.pathname} HTTP/1.1`,
    `Host: ${server.url.host}`,
    "Content-Type: application/json",
    "Accept: application/json, text/event-stream",
    "Content-Length: 100000",
    ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`),
  ];
  await conn.write(new TextEncoder().encode(`${lines.join("\r\n")}\r\n\r\n{"jsonrpc"`));
  const status = (async () => {
    const buffer = new Uint8Array(4096);
    const n = await conn.read(buffer).catch(() => null);
    if (n === null) return 0;
    return Number(/^HTTP\/1\.1 (\d{3})/.exec(new TextDecoder().decode(buffer.slice(0, n)))?.[1]);
  })();
  let closed = false;
  return {
    status,
    close() {
      if (closed) return;
      closed = true;
      conn.close();
    },
  };
}

Deno.test("http.maxRequests: slow bodies on one principal's open session leave requests for another", async () => {
  await withAliceAndBob(
    "ce-fair-requests-",
    { http: { maxRequests: 6 } },
    async (server, tokens) => {
      const slow: Array<{ status: Promise<number>; close(): void }> = [];
      try {
        const opened = await fetch(server.url, {
          method: "POST",
          headers: {
            "content-type": "application/json",
            accept: "application/json, text/event-stream",
            authorization: `Bearer ${tokens.alice}`,
          },
          body: JSON.stringify(initializeRequest("fair-shares")),
        });
        await opened.body?.cancel();
        const session = opened.headers.get("mcp-session-id")!;
        assert(session, "no session id");
        // Enough to fill the whole cap; her share is 3, and the rest are refused at once.
        for (let i = 0; i < 6; i++) {
          slow.push(
            await slowPost(server, {
              authorization: `Bearer ${tokens.alice}`,
              "mcp-session-id": session,
              "mcp-protocol-version": "2025-11-25",
            }),
          );
        }
        assertEquals(await Promise.all(slow.slice(3).map((request) => request.status)), [
          503,
          503,
          503,
        ]);
        // Bob is served while Alice's three are still in flight.
        assertEquals((await initialize(server, tokens.bob)).status, 200);
        for (const request of slow.slice(0, 3)) {
          const pending = await Promise.race([request.status, Promise.resolve("pending")]);
          assertEquals(pending, "pending", "a slow request of Alice's ended before Bob was served");
        }
      } finally {
        for (const request of slow) request.close();
        await Promise.all(slow.map((request) => request.status));
      }
    },
  );
});

Deno.test("limits.maxConcurrent: one principal's parked runs leave slots for another", async () => {
  await withAliceAndBob(
    "ce-fair-slots-",
    { limits: { maxConcurrent: 4 } },
    async (server, tokens) => {
      const clients: Client[] = [];
      try {
        const alice = await manualClient(server.url, { token: tokens.alice, name: "fair-shares" });
        clients.push(alice.client);
        const ASK = `return await askUser("Go on?");`;
        const park = (retry: Record<string, unknown> = {}) =>
          alice.call(ASK, { timeoutMs: 60_000 }, retry);
        // Alice's share is 2: two runs park, the next two wait in her queue.
        const parked = [await park(), await park()];
        for (const round of parked) assertEquals(round.resultType, "input_required");
        const queued = [park(), park()];

        const bob = await connect(server.url, { token: tokens.bob });
        clients.push(bob);
        const ran = await callRun(bob, "run_typescript", "return 'bob';");
        assertEquals(ran.returnValue, "bob", describeResult(ran));

        // Alice's runs were still parked when Bob's ran: each retry resumes its own run.
        for (const round of parked) {
          const key = Object.keys(round.inputRequests!)[0];
          const done = await park({
            inputResponses: { [key]: { action: "accept", content: { answer: "yes" } } },
            requestState: round.requestState,
          });
          assertEquals(
            (done.structuredContent?.returnValue as { action?: string })?.action,
            "accept",
            JSON.stringify(done),
          );
        }
        // Her queued runs got the freed slots and parked in turn.
        for (const round of await Promise.all(queued)) {
          assertEquals(round.resultType, "input_required");
        }
      } finally {
        for (const client of clients) await client.close().catch(() => {});
      }
    },
  );
});
