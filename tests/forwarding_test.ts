/**
 * What forwarding between replicas decides before any request: the internal URL a replica
 * registers (`http.internalUrl`, else its bound address, a wildcard replaced by one others can
 * reach), the replica id it takes without `http.replicaId`, and joining the registry: a live
 * replica with the same id stops the start, a dead one's id is taken over, and leaving removes the
 * record. Then a real replica on a real redis-server forwards to a peer the test plays: without
 * the caller's token, signed for the caller's principal, refused when replayed, its event stream
 * relayed as it comes, a peer that does not answer or refuses connections said so, and each
 * counted in `/metrics`. Forwarding between real replicas runs in tests/replicas*_test.ts.
 *
 * @module
 */
import { assert, assertEquals, assertMatch, assertRejects } from "./_assert.ts";
import { warnUnless } from "./_command.ts";
import { resolveSettings } from "../src/config/settings.ts";
import { createLogger } from "../src/log.ts";
import { defaultReplicaId, internalUrlOf, joinCluster } from "../src/server/forwarding.ts";
import { StateKeys } from "../src/state/keys.ts";
import { MemoryStateStore } from "../src/state/memory_store.ts";
import { ReplicaRegistry } from "../src/state/replicas.ts";
import { REPLICA_TTL_MS } from "../src/state/shared_state.ts";
import { FORWARD_HEADER, verifyForward } from "../src/state/forward.ts";
import { RedisStateStore } from "../src/state/redis_store.ts";
import { freePort, hasRedisServer, REDIS_MISSING, RedisServer } from "./_redis.ts";
import { type HttpServer, startHttpServer } from "./_http_server.ts";
import { clusterEnv, sessionHeaders, STATE_KEY } from "./_replicas.ts";
import { hasPrometheusParser, PARSER_MISSING, scrape, valueOf } from "./_metrics.ts";

function httpSettings(http: Record<string, unknown> = {}) {
  return resolveSettings({ http }).http;
}

Deno.test("internalUrlOf(): the setting, else the bound address; a wildcard becomes an address others reach", () => {
  assertEquals(
    internalUrlOf(httpSettings({ internalUrl: "http://10.1.2.3:9000/mcp" }), 3333).href,
    "http://10.1.2.3:9000/mcp",
  );
  assertEquals(internalUrlOf(httpSettings(), 41234).href, "http://127.0.0.1:41234/mcp");
  assertEquals(
    internalUrlOf(httpSettings({ host: "::1", path: "/x" }), 5).href,
    "http://[::1]:5/x",
  );
  const wildcard = internalUrlOf(httpSettings({ host: "0.0.0.0" }), 3333);
  assert(!["0.0.0.0", "127.0.0.1", "localhost"].includes(wildcard.hostname), wildcard.href);
  assertEquals(wildcard.port, "3333");
});

Deno.test("defaultReplicaId(): a name http.replicaId accepts, different at every start", () => {
  const ids = new Set(Array.from({ length: 20 }, () => defaultReplicaId()));
  assertEquals(ids.size, 20);
  for (const id of ids) assertMatch(id, /^[A-Za-z0-9_-]{1,63}$/);
});

Deno.test({
  name:
    "joinCluster(): a live replica's id stops the start, a dead one's is taken over, leave() removes the record",
  // Each join of a taken id waits one heartbeat to tell a live replica from a dead one.
  fn: async () => {
    const store = new MemoryStateStore();
    const registry = new ReplicaRegistry(store, await StateKeys.derive(), {
      ttlMs: REPLICA_TTL_MS,
    });
    const log = createLogger("silent");
    const first = await joinCluster({
      registry,
      id: "ce-0",
      address: new URL("http://127.0.0.1:1000/mcp"),
      log,
    });
    try {
      const taken = await assertRejects(
        () =>
          joinCluster({ registry, id: "ce-0", address: new URL("http://127.0.0.1:2000/mcp"), log }),
        Error,
      );
      assertMatch(
        taken.message,
        /another live replica is registered as "ce-0" at http:\/\/127\.0\.0\.1:1000\/mcp; give each replica its own http\.replicaId/,
      );
      assertEquals((await registry.find("ce-0"))?.address, "http://127.0.0.1:1000/mcp");
    } finally {
      await first.leave();
    }
    assertEquals(await registry.find("ce-0"), undefined);

    // A record nobody renews any more (its replica was killed): taken over after one heartbeat.
    await registry.beat({ id: "ce-1", address: "http://127.0.0.1:3000/mcp" });
    const second = await joinCluster({
      registry,
      id: "ce-1",
      address: new URL("http://127.0.0.1:4000/mcp"),
      log,
    });
    assertEquals((await registry.find("ce-1"))?.address, "http://127.0.0.1:4000/mcp");
    await second.leave();
    await store.close();
  },
});

const REDIS = warnUnless(await hasRedisServer(), REDIS_MISSING);
const PARSER = warnUnless(await hasPrometheusParser(), PARSER_MISSING);
const TOKEN = "forwarding-test-token-0123456789";

/** A replica's peer played by the test: registered in the store, answering as it is told. */
interface FakePeer {
  /** What it received, in order. */
  received: Array<{ method: string; headers: Headers; body: string }>;
  /** The next answer. */
  answer: (request: Request) => Response | Promise<Response>;
  /** An answer that never comes: held until the sender goes away or the peer closes. */
  hold: (request: Request) => Promise<Response>;
  close(): Promise<void>;
}

function fakePeer(): { peer: FakePeer; url: URL } {
  // shutdown() waits for every request in flight, so a held one must end first.
  const held = new Set<() => void>();
  const peer: FakePeer = {
    received: [],
    answer: () => new Response(null, { status: 202 }),
    hold: (request) =>
      new Promise<Response>((resolve) => {
        const end = () => {
          held.delete(end);
          resolve(new Response(null, { status: 503 }));
        };
        held.add(end);
        request.signal.addEventListener("abort", end, { once: true });
      }),
    close: async () => {
      for (const end of [...held]) end();
      await server.shutdown();
    },
  };
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, async (r) => {
    peer.received.push({ method: r.method, headers: r.headers, body: await r.text() });
    return await peer.answer(r);
  });
  return { peer, url: new URL(`http://127.0.0.1:${server.addr.port}/mcp`) };
}

function legacyRequest(url: URL, sessionId: string, token = TOKEN, extra: HeadersInit = {}) {
  return fetch(url, {
    method: "POST",
    headers: { ...sessionHeaders(sessionId, token), ...extra },
    body: JSON.stringify({ jsonrpc: "2.0", id: 7, method: "tools/list" }),
  });
}

Deno.test({
  name:
    "a replica forwards to the owner without the caller's token, signed for the caller's principal once, and relays its events as they come",
  ignore: !REDIS,
  fn: async () => {
    const redis = new RedisServer();
    await redis.start();
    const store = await RedisStateStore.connect({ url: redis.url, timeoutMs: 5_000 });
    const keys = await StateKeys.derive(STATE_KEY);
    const registry = new ReplicaRegistry(store, keys, { ttlMs: REPLICA_TTL_MS });
    const { peer, url: peerUrl } = fakePeer();
    let replica: HttpServer | undefined;
    try {
      replica = await startHttpServer({
        env: {
          CODE_EXECUTOR_HTTP_TOKEN: TOKEN,
          CODE_EXECUTOR_HTTP_REPLICA_ID: "ce-0",
          CODE_EXECUTOR_HTTP_FORWARD_TIMEOUT_MS: "1000",
          ...clusterEnv(redis.url),
        },
      });
      await registry.beat({ id: "ce-peer", address: peerUrl.href });
      const sessionId = `ce-peer.${crypto.randomUUID()}`;

      // The owner's event stream reaches the caller event by event: the second is sent only
      // once the caller has read the first.
      let readFirst!: () => void;
      const firstRead = new Promise<void>((resolve) => readFirst = resolve);
      peer.answer = () => {
        const encoder = new TextEncoder();
        const body = new ReadableStream<Uint8Array>({
          async start(controller) {
            controller.enqueue(encoder.encode('event: message\ndata: {"n":1}\n\n'));
            await firstRead;
            controller.enqueue(encoder.encode('event: message\ndata: {"n":2}\n\n'));
            controller.close();
          },
        });
        return new Response(body, {
          headers: { "content-type": "text/event-stream", "mcp-session-id": sessionId },
        });
      };
      const response = await legacyRequest(replica.url, sessionId);
      assertEquals(response.status, 200);
      assertEquals(response.headers.get("mcp-session-id"), sessionId);
      const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
      let text = "";
      while (!text.includes('{"n":1}')) {
        const part = await reader.read();
        assert(!part.done, `the stream ended before its first event: ${text}`);
        text += part.value;
      }
      assert(!text.includes('{"n":2}'), "the second event came before the first was read");
      readFirst();
      for (let part = await reader.read(); !part.done; part = await reader.read()) {
        text += part.value;
      }
      assertMatch(text, /\{"n":1\}[\s\S]*\{"n":2\}/);

      // What the owner got: no token, the same body, a forward header for the caller's
      // principal from ce-0, which verifies once.
      assertEquals(peer.received.length, 1);
      const [got] = peer.received;
      assertEquals(got.headers.get("authorization"), null);
      assertEquals(got.headers.get("mcp-session-id"), sessionId);
      assertEquals(JSON.parse(got.body), { jsonrpc: "2.0", id: 7, method: "tools/list" });
      const header = got.headers.get(FORWARD_HEADER)!;
      const signed = { method: "POST", path: "/mcp", body: new TextEncoder().encode(got.body) };
      assertEquals(
        await verifyForward(keys, header, signed, { store }),
        { principal: "http:default", from: "ce-0" },
      );

      // The same header replayed at a replica: refused, nothing served.
      const replayed = await fetch(replica.url, {
        method: "POST",
        headers: { ...sessionHeaders(sessionId), [FORWARD_HEADER]: header },
        body: got.body,
      });
      assertEquals(replayed.status, 403);
      assertMatch(await replayed.text(), /already received once \(a replay\)/);
      assertEquals(peer.received.length, 1);

      // An owner that does not answer within http.forwardTimeoutMs: 504, said so, not resent.
      peer.answer = peer.hold;
      const slow = await legacyRequest(replica.url, sessionId);
      assertEquals(slow.status, 504);
      assertMatch(
        await slow.text(),
        /Replica \\"ce-peer\\", which holds the 2025-era session, did not take the forwarded request within 1000 ms \(http.forwardTimeoutMs\): it was withdrawn/,
      );
      assertEquals(peer.received.length, 2);

      // An owner whose address refuses connections is gone: 404, so the client starts over.
      const closed = freePort();
      await registry.beat({ id: "ce-gone", address: `http://127.0.0.1:${closed}/mcp` });
      const gone = await legacyRequest(replica.url, `ce-gone.${crypto.randomUUID()}`);
      assertEquals(gone.status, 404);
      assertMatch(
        await gone.text(),
        /opened on replica \\"ce-gone\\", which is gone \(127\.0\.0\.1:\d+ refuses connections\); initialize a new session/,
      );

      // /metrics counts what this replica sent, by what it reached and how it ended; the
      // replayed forward it received is the sender's to count.
      if (PARSER) {
        const families = await scrape(new URL("/metrics", replica.url), TOKEN);
        const forwarded = (outcome: string) =>
          valueOf(families, "code_executor_forwarded_requests_total", { kind: "session", outcome });
        assertEquals(
          { ok: forwarded("ok"), timeout: forwarded("timeout"), gone: forwarded("owner_gone") },
          { ok: 1, timeout: 1, gone: 1 },
        );
      }
    } finally {
      await replica?.close();
      await peer.close();
      await store.close();
      await redis.close();
    }
  },
});
