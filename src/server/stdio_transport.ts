/**
 * The stdio transport of `serve`: the SDK's, with its input side replaced so that a bad line
 * costs only that line. The SDK's reader drops lines that are not JSON in silence, reports lines
 * that are not JSON-RPC only to the server (the client waits forever for an answer), and closes
 * the connection (which ends the server) on a line over 10 MiB; it also rescans everything
 * buffered on every chunk. Here lines are split in linear time, a line over the limit is skipped
 * as it streams in, and every line that is not a JSON-RPC message gets a JSON-RPC error.
 *
 * The output side is replaced too: under Deno, the SDK's `process.stdout.write` to a pipe blocks
 * the whole event loop while the pipe is full, so a client that stops reading froze every
 * timeout, kill and shutdown of the server. Here messages are written in order with the
 * asynchronous `Deno.stdout.write`, and a failed write (the client is gone) closes the
 * transport, which ends the server.
 *
 * @module
 */
import { type JSONRPCMessage, parseJSONRPCMessage } from "@modelcontextprotocol/server";
import { StdioServerTransport } from "@modelcontextprotocol/server/stdio";

/** Bytes of an oversized line kept to find its request id. */
const HEAD_BYTES = 4096;

/** Options of {@linkcode LineStdioServerTransport}. */
export interface LineStdioServerTransportOptions {
  /** The longest line read; a longer one is answered with an error. */
  maxLineBytes: number;
  /** What to tell a client whose line was too long (which setting limits what). */
  tooLargeHint: string;
  /** Called once the transport has closed (the client went away). */
  onClosed?: () => void;
}

/** The top-level `id` of a request, if it has one that can be answered. */
function requestId(value: unknown): string | number | undefined {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return undefined;
  const { id, method } = value as Record<string, unknown>;
  // Never answer a response, even a malformed one: its id is one of ours.
  if (method === undefined) return undefined;
  return typeof id === "string" || typeof id === "number" ? id : undefined;
}

/** Finds the top-level `id` of a request in the start of a line too long to parse. */
function requestIdInHead(head: string): string | number | undefined {
  let depth = 0;
  let id: string | number | undefined;
  let method = false;
  for (let i = 0; i < head.length; i++) {
    const c = head[i];
    if (c === "{" || c === "[") depth++;
    else if (c === "}" || c === "]") depth--;
    else if (c === '"') {
      let end = i + 1;
      while (end < head.length && head[end] !== '"') end += head[end] === "\\" ? 2 : 1;
      if (end >= head.length) break;
      if (depth === 1) {
        const key = head.slice(i + 1, end);
        const rest = head.slice(end + 1, end + 300);
        if (key === "method" && /^\s*:/.test(rest)) method = true;
        const value = key === "id" ? /^\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")/.exec(rest) : null;
        if (value && id === undefined) id = JSON.parse(value[1]);
      }
      i = end;
    }
  }
  return method ? id : undefined;
}

/**
 * A stdio server transport that answers every malformed line and survives long ones.
 *
 * @internal It extends the SDK's transport, and `deno doc --lint` takes the MCP SDK's types for
 * private ones (denoland/deno#27364); the SDK documents them.
 */
export class LineStdioServerTransport extends StdioServerTransport {
  #options: LineStdioServerTransportOptions;
  #pending: Uint8Array[] = [];
  #pendingBytes = 0;
  #skipped: { head: Uint8Array; bytes: number } | undefined;
  #decoder = new TextDecoder();
  #encoder = new TextEncoder();
  #writing: Promise<void> = Promise.resolve();
  #closed = false;

  /**
   * Creates the transport; it reads stdin once the server starts it.
   *
   * @param options The line limit, its hint, and the close callback.
   */
  constructor(options: LineStdioServerTransportOptions) {
    super();
    this.#options = options;
    this._ondata = (chunk) => this.#take(chunk);
  }

  /**
   * Closes the transport, once; `onClosed` is called after the SDK's own close.
   *
   * @returns When it is closed.
   */
  override async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await super.close();
    this.#options.onClosed?.();
  }

  /**
   * Writes one message to stdout after those sent before it, without blocking the event loop
   * while the client is not reading. A failed write means the client is gone: it is reported
   * through `onerror` and the transport closes.
   *
   * @param message The message.
   * @returns When the whole message is written.
   * @throws {Error} (rejects) When the transport is closed or the write fails.
   */
  override send(message: JSONRPCMessage): Promise<void> {
    if (this.#closed) return Promise.reject(new Error("The stdio transport is closed"));
    const bytes = this.#encoder.encode(JSON.stringify(message) + "\n");
    const written = this.#writing.then(async () => {
      for (let offset = 0; offset < bytes.length;) {
        offset += await Deno.stdout.write(bytes.subarray(offset));
      }
    });
    this.#writing = written.catch((error: Error) => {
      if (this.#closed) return;
      this.onerror?.(new Error(`Cannot write to stdout: ${error.message}`));
      this.close().catch(() => {});
    });
    return written;
  }

  #take(chunk: Uint8Array): void {
    let start = 0;
    while (true) {
      const newline = chunk.indexOf(10, start);
      this.#collect(chunk.subarray(start, newline < 0 ? chunk.length : newline));
      if (newline < 0) return;
      this.#endLine();
      start = newline + 1;
    }
  }

  #collect(piece: Uint8Array): void {
    if (piece.length === 0) return;
    if (this.#skipped) {
      this.#skipped.bytes += piece.length;
      return;
    }
    if (this.#pendingBytes + piece.length <= this.#options.maxLineBytes) {
      this.#pending.push(piece.slice());
      this.#pendingBytes += piece.length;
      return;
    }
    const head = new Uint8Array(HEAD_BYTES);
    let offset = 0;
    for (const part of [...this.#pending, piece]) {
      if (offset >= HEAD_BYTES) break;
      const take = part.subarray(0, HEAD_BYTES - offset);
      head.set(take, offset);
      offset += take.length;
    }
    this.#skipped = { head: head.subarray(0, offset), bytes: this.#pendingBytes + piece.length };
    this.#pending = [];
    this.#pendingBytes = 0;
  }

  #endLine(): void {
    const skipped = this.#skipped;
    if (skipped) {
      this.#skipped = undefined;
      this.#reject(
        requestIdInHead(this.#decoder.decode(skipped.head)),
        -32600,
        `Request too large: a line of ${skipped.bytes} bytes, more than ${this.#options.maxLineBytes}; ${this.#options.tooLargeHint}`,
      );
      return;
    }
    const line = new Uint8Array(this.#pendingBytes);
    let offset = 0;
    for (const piece of this.#pending) {
      line.set(piece, offset);
      offset += piece.length;
    }
    this.#pending = [];
    this.#pendingBytes = 0;
    const text = this.#decoder.decode(line).replace(/\r$/, "");
    if (text.trim() === "") return;
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      this.#reject(undefined, -32700, "Parse error: the line is not JSON");
      return;
    }
    let message: JSONRPCMessage;
    try {
      message = parseJSONRPCMessage(value);
    } catch {
      this.#reject(requestId(value), -32600, "Invalid request: not a JSON-RPC 2.0 message");
      return;
    }
    this.onmessage?.(message);
  }

  #reject(id: string | number | undefined, code: number, message: string): void {
    this.onerror?.(new Error(message));
    // JSON-RPC 2.0: an error about a request whose id cannot be told carries `"id": null`.
    const error = { jsonrpc: "2.0", id: id ?? null, error: { code, message } };
    this.send(error as JSONRPCMessage).catch(() => {});
  }
}
