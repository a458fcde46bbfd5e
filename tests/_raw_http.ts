/**
 * Raw and malformed HTTP for the hostile tests of `serve --http`: HTTP/1.1 written byte for byte
 * (any `Host`, any framing, a body announced but not sent), and a catalogue of junk requests,
 * each with the 4xx it must get.
 *
 * @module
 */

import { Buffer } from "node:buffer";
import { initializeRequest } from "./_client.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** What a raw HTTP/1.1 exchange returned. */
export interface RawResponse {
  /** The status code; 0 when no status line arrived. */
  status: number;
  /** The status line and the headers. */
  head: string;
  /** The body as sent (chunk framing included). */
  body: string;
}

/**
 * Sends bytes exactly as given on a new connection and reads the response (until its announced
 * end, or until the server closes the connection), so that a test controls every header (`Host`
 * included) and the framing.
 */
export async function rawExchange(url: URL, request: Uint8Array): Promise<RawResponse> {
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
      const text = decoder.decode(Buffer.concat(chunks));
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
    const text = decoder.decode(Buffer.concat(chunks));
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

/**
 * A raw HTTP/1.1 POST to the endpoint with these headers (the endpoint's Host unless they name
 * one) and body. With `sendBytes`, only that much of the body is sent after the headers, which
 * still announce all of it: a server that answers before reading a body closes the connection
 * with the rest unread, and the reset that follows can destroy its answer in transit.
 */
export function rawPost(
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
  return rawExchange(url, Buffer.concat([head, bytes.subarray(0, sendBytes ?? bytes.length)]));
}

/** A raw chunked POST whose chunks are sent, but not the end of the body. */
export function rawChunkedPost(url: URL, chunks: string[]): Promise<RawResponse> {
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

/** A 2025-era `initialize` request body. */
export const INITIALIZE = JSON.stringify(initializeRequest("hostile"));

/** A 2026-07-28 request body: the protocol envelope in `_meta`. */
export function modernBody(method: string, params: Record<string, unknown> = {}): string {
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

/** One kind of junk request: sends it to the endpoint and returns the status it got. */
export type Junk = (url: URL) => Promise<{ status: number }>;

/**
 * Malformed requests of every kind, with the 4xx each must get.
 *
 * @param token A valid bearer token, so that the junk reaches the protocol layers.
 * @param sessionId An open 2025-era session of the token's principal, for junk sent within it.
 * @param maxBodyBytes The server's http.maxBodyBytes.
 * @returns Name, expected status and sender of each kind.
 */
export function junkKinds(
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
