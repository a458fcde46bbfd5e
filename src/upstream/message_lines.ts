/**
 * The reader of a stdio upstream server's output: newline-delimited JSON-RPC messages, split in
 * linear time and bounded in size. The pool puts it in place of the SDK's own reader.
 *
 * @module
 */
import { deserializeMessage, type JSONRPCMessage } from "@modelcontextprotocol/client";

/** A stdio server sent a message larger than the pool reads; its connection was dropped. */
export class UpstreamMessageTooLarge extends Error {
  /**
   * Names the server and the limit its message passed.
   *
   * @param server The server name.
   * @param limit The size that was passed, in bytes.
   */
  constructor(readonly server: string, readonly limit: number) {
    super(`"${server}" sent a message larger than ${limit} bytes`);
    this.name = "UpstreamMessageTooLarge";
  }
}

/**
 * Splits a stdio server's output into messages, in place of the SDK's ReadBuffer: that one
 * copies and rescans everything buffered on every chunk, which holds the host's event loop for
 * seconds on a message of a few MB (quadratic), and it has a fixed 10 MiB cap.
 */
export class MessageLines {
  #lines: Uint8Array[] = [];
  #pending: Uint8Array[] = [];
  #pendingBytes = 0;
  #decoder = new TextDecoder();

  /**
   * Creates an empty reader for one connection.
   *
   * @param server The server name, for the error.
   * @param maxBytes The longest line kept, in bytes.
   */
  constructor(readonly server: string, readonly maxBytes: number) {}

  /**
   * Takes a chunk of output; every complete line is kept for {@linkcode MessageLines.readMessage}.
   *
   * @param chunk Bytes as they arrived.
   * @throws {UpstreamMessageTooLarge} When the line being read passes `maxBytes`; everything
   * buffered is dropped.
   */
  append(chunk: Uint8Array): void {
    let start = 0;
    while (true) {
      const newline = chunk.indexOf(10, start);
      const end = newline < 0 ? chunk.length : newline;
      if (this.#pendingBytes + end - start > this.maxBytes) {
        this.clear();
        throw new UpstreamMessageTooLarge(this.server, this.maxBytes);
      }
      if (end > start) {
        this.#pending.push(chunk.subarray(start, end));
        this.#pendingBytes += end - start;
      }
      if (newline < 0) return;
      const line = new Uint8Array(this.#pendingBytes);
      let offset = 0;
      for (const piece of this.#pending) {
        line.set(piece, offset);
        offset += piece.length;
      }
      this.#lines.push(line);
      this.#pending = [];
      this.#pendingBytes = 0;
      start = newline + 1;
    }
  }

  /**
   * Returns the next complete message, skipping lines that are not JSON.
   *
   * @returns The message, or null when no complete one is buffered.
   * @throws {Error} When a line is JSON but not a JSON-RPC message (the SDK reports it).
   * @internal It returns the MCP SDK's type, which `deno doc --lint` takes for a private one
   * (denoland/deno#27364); the SDK documents it.
   */
  readMessage(): JSONRPCMessage | null {
    while (this.#lines.length > 0) {
      const text = this.#decoder.decode(this.#lines.shift()).replace(/\r$/, "");
      try {
        return deserializeMessage(text);
      } catch (error) {
        // Like the SDK: a line that is not JSON is skipped; one that is not JSON-RPC is reported.
        if (error instanceof SyntaxError) continue;
        throw error;
      }
    }
    return null;
  }

  /** Drops everything buffered, complete lines and the partial one. */
  clear(): void {
    this.#lines = [];
    this.#pending = [];
    this.#pendingBytes = 0;
  }
}
