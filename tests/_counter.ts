/**
 * A loopback HTTP server that records what reaches it, for tests that a sandbox's or a skill's
 * request was or was not made.
 *
 * @module
 */

/** A started {@linkcode startCounter} server. */
export interface Counter {
  /** The loopback port it listens on. */
  port: number;
  /** The URL of every request it got, in order. */
  requests: string[];
  /** Stops it. */
  close(): Promise<void>;
}

/**
 * Starts a loopback HTTP server that counts the requests it gets and answers each `pong`.
 *
 * @returns The server; close it when done.
 */
export function startCounter(): Counter {
  const requests: string[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (request) => {
    requests.push(request.url);
    return new Response("pong");
  });
  return { port: server.addr.port, requests, close: () => server.shutdown() };
}
