/**
 * What the tests of the sampling providers' fallback share: a loopback HTTP server that records
 * every request and answers as a provider would (the real APIs are not reachable from here), the
 * backend with a test key, and a request to send.
 *
 * @module
 */
import { createProviderBackend, type ProviderConfig } from "../src/sampling/providers.ts";
import type { SamplingRequest } from "../src/sampling/types.ts";
import { assert, assertRejects } from "./_assert.ts";
import { CodeExecutorError } from "../src/errors.ts";

/** A key that no redaction pattern recognizes: only the backend's own care keeps it out. */
export const KEY = "test-key-8f3e2a9c71d4";

/** One request as the test server saw it. */
export interface Seen {
  method: string;
  path: string;
  headers: Headers;
  body: Record<string, unknown>;
  at: number;
}

/** How the test server answers one request; `closing` resolves when the test is done with it. */
export type Handler = (
  seen: Seen,
  index: number,
  closing: Promise<void>,
) => Response | Promise<Response>;

/**
 * A loopback server that records every request and answers with `handler`. A handler that
 * must never answer awaits `closing`, which resolves when the test is done with the server.
 */
export async function withServer(
  handler: Handler,
  fn: (baseUrl: string, seen: Seen[]) => Promise<void>,
): Promise<void> {
  const seen: Seen[] = [];
  let release!: () => void;
  const closing = new Promise<void>((resolve) => release = resolve);
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    async (request) => {
      const url = new URL(request.url);
      const entry: Seen = {
        method: request.method,
        path: url.pathname + url.search,
        headers: request.headers,
        body: await request.json().catch(() => ({})),
        at: performance.now(),
      };
      seen.push(entry);
      return await handler(entry, seen.length - 1, closing);
    },
  );
  // Should a request never be aborted, answering it after a while fails the test instead of
  // hanging the suite.
  const guard = setTimeout(release, 15_000);
  try {
    await fn(`http://127.0.0.1:${server.addr.port}`, seen);
  } finally {
    clearTimeout(guard);
    release();
    await server.shutdown();
  }
}

/** A JSON response. */
export function json(body: unknown, init: ResponseInit = {}): Response {
  return new Response(JSON.stringify(body), {
    ...init,
    headers: { "content-type": "application/json", ...init.headers },
  });
}

/** The backend with the test key in a private environment. */
export function backend(config: ProviderConfig, env: Record<string, string> = {}) {
  const vars: Record<string, string> = {
    ANTHROPIC_API_KEY: KEY,
    OPENAI_API_KEY: KEY,
    GEMINI_API_KEY: KEY,
    ...env,
  };
  return createProviderBackend(config, { env: (name) => vars[name] });
}

/** A small sampling request: a system prompt and one user message. */
export const REQUEST: SamplingRequest = {
  systemPrompt: "You are terse.",
  messages: [
    { role: "user", content: "Name a colour." },
    { role: "assistant", content: "Red." },
    { role: "user", content: "Another one." },
  ],
  maxTokens: 64,
};

/** Runs `fn`, which must reject with a CodeExecutorError, and returns that error. */
export async function samplingError(fn: () => Promise<unknown>): Promise<CodeExecutorError> {
  const error = await assertRejects(fn, CodeExecutorError);
  assert(!String(error.message).includes(KEY), `the key leaked: ${error.message}`);
  assert(!String(error.stack).includes(KEY), "the key leaked into the stack");
  return error;
}

/** A signal that never aborts. */
export function signal(): AbortSignal {
  return new AbortController().signal;
}
