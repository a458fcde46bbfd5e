/**
 * The plumbing of the HTTP endpoint: a body read once (parsed when it is JSON), a deadline raced,
 * an event stream followed until it has been sent, and `Deno.serve` with its errors said in terms
 * of the settings.
 *
 * @module
 */
import { readRequestBody } from "@modelcontextprotocol/server";

/** A request's body, read once. */
export interface ReadBody {
  /** Over the limit: nothing was kept. */
  tooLarge?: boolean;
  /** The JSON of the body, when it is JSON. */
  parsed?: unknown;
  /** The body's text, as read. */
  text?: string;
  /** A copy of the request with its body, for a body that is not JSON (the SDK answers it). */
  request?: Request;
}

/**
 * Reads a POST's body once. JSON is returned parsed; anything else is put back into a copy of
 * the request, so that the SDK gives its usual answer (406, 415 or 400, in its order).
 */
export async function readBody(request: Request, maxBytes: number): Promise<ReadBody> {
  if (request.method !== "POST") return {};
  const read = await readRequestBody(request, maxBytes);
  if (read.tooLarge) return { tooLarge: true };
  try {
    if (read.text.length > 0) return { parsed: JSON.parse(read.text), text: read.text };
  } catch {
    // Not JSON: the SDK says so below.
  }
  return {
    text: read.text,
    request: new Request(request.url, {
      method: request.method,
      headers: request.headers,
      body: read.text,
      signal: request.signal,
    }),
  };
}

/** Races a promise against a deadline; undefined when the deadline comes first. */
export async function within<T>(work: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([
      work,
      new Promise<undefined>((r) => timer = setTimeout(() => r(undefined), ms)),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The same response, calling `done` once when its event stream has been sent in full, has failed
 * or was cancelled (the client went away); at once for any other response, whose body is whole
 * already (and keeps its Content-Length).
 */
export function untilSent(response: Response, done: () => void): Response {
  const type = response.headers.get("content-type") ?? "";
  if (!response.body || !type.startsWith("text/event-stream")) {
    done();
    return response;
  }
  let pending = true;
  const finish = () => {
    if (pending) {
      pending = false;
      done();
    }
  };
  const reader = response.body.getReader();
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const { value, done: ended } = await reader.read();
        if (ended) {
          finish();
          controller.close();
        } else {
          controller.enqueue(value);
        }
      } catch (error) {
        finish();
        controller.error(error);
      }
    },
    async cancel(reason) {
      finish();
      await reader.cancel(reason);
    },
  });
  return new Response(body, {
    status: response.status,
    statusText: response.statusText,
    headers: response.headers,
  });
}

/**
 * `Deno.serve`, with the errors of a taken or forbidden address said in terms of the settings.
 *
 * @throws {TypeError} When the address cannot be bound.
 */
export function listen(
  options: Deno.ServeTcpOptions,
  handler: Deno.ServeHandler<Deno.NetAddr>,
): Deno.HttpServer<Deno.NetAddr> {
  try {
    return Deno.serve(options, handler);
  } catch (error) {
    const where = `${options.hostname}:${options.port}`;
    if (error instanceof Deno.errors.AddrInUse) {
      throw new TypeError(
        `Cannot listen on ${where}: the port is in use; pick another with --port, http.port or CODE_EXECUTOR_HTTP_PORT (0 picks a free one), or stop what holds it (code-executor doctor says what)`,
        { cause: error },
      );
    }
    if (
      error instanceof Deno.errors.AddrNotAvailable || error instanceof Deno.errors.PermissionDenied
    ) {
      throw new TypeError(
        `Cannot listen on ${where}: ${
          (error as Error).message
        }; check --host / http.host (CODE_EXECUTOR_HTTP_HOST), or use a port above 1023`,
        { cause: error },
      );
    }
    throw error;
  }
}
