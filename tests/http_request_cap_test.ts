/**
 * `http.maxRequests` counts a request until its response has been sent: an open SSE stream (here
 * the GET streams of two 2025-era sessions) keeps its place until the client drops it, and the
 * health checks are answered whatever the count.
 *
 * @module
 */
import { join } from "node:path";
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { writeSettings } from "./_env.ts";
import { eventually } from "./_proc.ts";
import { withTempDir } from "./_fs.ts";
import { startHttpServer } from "./_http_server.ts";
import { initializeRequest } from "./_client.ts";

const ACCEPT = {
  "content-type": "application/json",
  accept: "application/json, text/event-stream",
};

/** Opens a 2025-era session and its GET stream; the stream stays open until `close()`. */
async function openStream(url: string): Promise<{ status: number; close(): Promise<void> }> {
  const init = await fetch(url, {
    method: "POST",
    headers: ACCEPT,
    body: JSON.stringify(initializeRequest("cap-test")),
  });
  await init.text();
  const id = init.headers.get("mcp-session-id");
  assert(id, `initialize gave no session id (${init.status})`);
  const session = { "mcp-session-id": id, "mcp-protocol-version": "2025-11-25" };
  await (await fetch(url, {
    method: "POST",
    headers: { ...ACCEPT, ...session },
    body: JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }),
  })).text();
  const stream = await fetch(url, { headers: { accept: "text/event-stream", ...session } });
  return {
    status: stream.status,
    close: async () => {
      await stream.body?.cancel();
      await (await fetch(url, { method: "DELETE", headers: session })).body?.cancel();
    },
  };
}

/** A request that needs no session: `tools/list` of the 2026-07-28 era. */
async function listTools(url: string): Promise<{ status: number; text: string }> {
  const response = await fetch(url, {
    method: "POST",
    headers: {
      ...ACCEPT,
      "mcp-protocol-version": "2026-07-28",
      "mcp-method": "tools/list",
    },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 2,
      method: "tools/list",
      params: {
        _meta: {
          "io.modelcontextprotocol/protocolVersion": "2026-07-28",
          "io.modelcontextprotocol/clientInfo": { name: "cap-test", version: "1" },
          "io.modelcontextprotocol/clientCapabilities": {},
        },
      },
    }),
  });
  return { status: response.status, text: await response.text() };
}

Deno.test("an open SSE stream counts against http.maxRequests until the client drops it", async () => {
  await withTempDir("ce-http-cap-", async (tempDir) => {
    const home = join(tempDir, "home");
    await Deno.mkdir(home);
    const config = await writeSettings(tempDir, { http: { maxRequests: 2 } });
    const server = await startHttpServer({
      tempDir,
      home,
      sharedCache: true,
      env: { CODE_EXECUTOR_CONFIG: config },
    });
    try {
      const before = await listTools(server.url.href);
      assertEquals(before.status, 200, before.text);

      const streams = [await openStream(server.url.href), await openStream(server.url.href)];
      assertEquals(streams.map((s) => s.status), [200, 200]);
      try {
        const refused = await listTools(server.url.href);
        assertEquals(refused.status, 503, refused.text.slice(0, 300));
        assertMatch(refused.text, /Too many requests at once \(http\.maxRequests 2\)/);
        const health = await fetch(new URL("/healthz", server.url));
        assertEquals([health.status, await health.json()], [200, { status: "ok" }]);
      } finally {
        for (const stream of streams) await stream.close();
      }
      // Once the streams are gone, their places are free again.
      let last = { status: 0, text: "" };
      const served = await eventually(async () => {
        last = await listTools(server.url.href);
        return last.status === 200;
      }, 10_000);
      assert(served, `still refused after the streams closed: ${last.status} ${last.text}`);
    } finally {
      const status = await server.close();
      assert(status?.success, server.stderr());
    }
  });
});
