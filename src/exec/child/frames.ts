/**
 * Frames from sandbox children: newline-delimited JSON, each line prefixed with the child's
 * nonce. Everything a child writes is untrusted, so reading is strict: size caps, a nonce on
 * every line, and an object on every line.
 *
 * @module
 */

/** A frame as parsed; its fields are unchecked. */
export type Frame = Record<string, unknown> & { t?: unknown };

/** Raised when a child writes something that is not a well-formed frame. */
export class FrameError extends Error {
  /**
   * Creates the error for one bad frame.
   *
   * @param message What was wrong with the bytes.
   * @param tooLarge Whether the frame was well-formed as far as read, only too large.
   */
  constructor(message: string, readonly tooLarge = false) {
    super(message);
    this.name = "FrameError";
  }
}

/**
 * Reads nonce-prefixed JSON lines from a child's stdout.
 *
 * Lines carry the nonce the reader was made with, or the one given to
 * {@linkcode FrameReader.accept} (a Python child's: its controller writes with the first, the
 * Worker of the current run with the second); {@linkcode FrameReader.lastControl} tells which.
 * Calls to {@linkcode FrameReader.next} are served in order, one at a time.
 */
export class FrameReader {
  #reader: ReadableStreamDefaultReader<Uint8Array>;
  #prefix: Uint8Array;
  #second: Uint8Array | undefined;
  #maxBytes: number;
  #chunks: Uint8Array[] = [];
  #buffered = 0;
  #queue: Promise<unknown> = Promise.resolve();
  #done = false;
  /** Size in bytes of the last frame returned, for callers that account for what they hold. */
  lastBytes = 0;
  /** Whether the last frame returned carried the reader's own nonce, not the accepted one. */
  lastControl = true;

  /**
   * Takes the reader of a child's stdout; the stream stays locked to this reader.
   *
   * @param stream The child's stdout.
   * @param nonce The secret every frame starts with.
   * @param maxBytes The largest frame accepted.
   */
  constructor(stream: ReadableStream<Uint8Array>, nonce: string, maxBytes: number) {
    this.#reader = stream.getReader();
    this.#prefix = new TextEncoder().encode(nonce + " ");
    this.#maxBytes = maxBytes;
  }

  /**
   * Returns the next frame, or null at end of stream.
   *
   * @throws {FrameError} On a line without the nonce, invalid JSON or an oversized frame.
   */
  next(): Promise<Frame | null> {
    const result = this.#queue.then(() => this.#readFrame());
    this.#queue = result.catch(() => {});
    return result;
  }

  /**
   * Accepts lines with a second nonce from now on, in place of the one accepted before.
   *
   * @param nonce The nonce, or undefined for the reader's own only.
   */
  accept(nonce: string | undefined): void {
    this.#second = nonce === undefined ? undefined : new TextEncoder().encode(nonce + " ");
  }

  /** Stops reading and releases the stream. */
  async cancel(): Promise<void> {
    this.#done = true;
    await this.#reader.cancel().catch(() => {});
  }

  async #readFrame(): Promise<Frame | null> {
    while (true) {
      const line = this.#takeLine();
      if (line !== undefined) {
        if (line.length === 0) continue;
        this.lastBytes = line.length;
        return this.#parse(line);
      }
      if (this.#done) return null;
      const { value, done } = await this.#reader.read();
      if (done) {
        this.#done = true;
        if (this.#buffered > 0) {
          throw new FrameError("The sandbox wrote bytes to its frame channel that are not a frame");
        }
        return null;
      }
      this.#chunks.push(value);
      this.#buffered += value.length;
    }
  }

  #takeLine(): Uint8Array | undefined {
    let seen = 0;
    for (let c = 0; c < this.#chunks.length; c++) {
      const newline = this.#chunks[c].indexOf(10);
      if (newline < 0) {
        seen += this.#chunks[c].length;
        continue;
      }
      const length = seen + newline;
      if (length > this.#maxBytes) throw this.#oversized();
      const line = new Uint8Array(length);
      let offset = 0;
      for (let k = 0; k < c; k++) {
        line.set(this.#chunks[k], offset);
        offset += this.#chunks[k].length;
      }
      line.set(this.#chunks[c].subarray(0, newline), offset);
      const rest = this.#chunks[c].subarray(newline + 1);
      this.#chunks = rest.length ? [rest, ...this.#chunks.slice(c + 1)] : this.#chunks.slice(c + 1);
      this.#buffered -= length + 1;
      return line;
    }
    if (this.#buffered > this.#maxBytes) throw this.#oversized();
    return undefined;
  }

  #oversized(): FrameError {
    return new FrameError(`The sandbox sent a frame larger than ${this.#maxBytes} bytes`, true);
  }

  #parse(line: Uint8Array): Frame {
    const starts = (prefix: Uint8Array | undefined) =>
      prefix !== undefined && line.length >= prefix.length &&
      prefix.every((byte, i) => line[i] === byte);
    const control = starts(this.#prefix);
    const prefix = control ? this.#prefix : this.#second;
    if (!control && !starts(prefix)) {
      throw new FrameError("The sandbox wrote raw bytes to its frame channel");
    }
    this.lastControl = control;
    let value: unknown;
    try {
      value = JSON.parse(
        new TextDecoder("utf-8", { fatal: true }).decode(line.subarray(prefix!.length)),
      );
    } catch {
      throw new FrameError("The sandbox sent a frame that is not valid JSON");
    }
    if (typeof value !== "object" || value === null || Array.isArray(value)) {
      throw new FrameError("The sandbox sent a frame that is not a JSON object");
    }
    return value as Frame;
  }
}

const encoder = new TextEncoder();

/** Bytes that several captures of one run draw from, so that their sum stays under a cap. */
export class OutputBudget {
  /** Bytes not used yet. */
  left: number;

  /**
   * Creates a budget with all of its bytes left.
   *
   * @param maxBytes The cap for everything drawn from this budget, in UTF-8 bytes.
   */
  constructor(maxBytes: number) {
    this.left = maxBytes;
  }
}

/** Room to keep an output past the run's cap (a run's share of the output store). */
export interface OutputReserve {
  /** The largest output kept. */
  readonly maxBytes: number;
  /**
   * Reserves room for more bytes of a kept output.
   *
   * @returns False when there is no room.
   */
  reserve(bytes: number): boolean;
}

/**
 * Sees each piece of text a capture takes, in order, as it takes it: with `privacy.tokenize`,
 * the run's stdout tokenizer, which detects personal data while the run prints.
 */
export interface OutputWatcher {
  /**
   * Takes the next piece of captured text.
   *
   * @param text The piece, as captured (cut at the cap when it was).
   */
  push(text: string): void;
}

/** Why a capture stopped taking text. */
export type CaptureStop =
  /** The run's cap, with nothing to keep the rest in. */
  | "cap"
  /** The largest output kept (`outputs.maxBytes`). */
  | "maxBytes"
  /** The store had no room (`outputs.maxTotalBytes`). */
  | "store";

/**
 * Returns the longest head of a text that is at most `maxBytes` in UTF-8, cut on a character.
 *
 * @param text The text.
 * @param maxBytes The most bytes.
 * @returns The head.
 */
export function utf8Head(text: string, maxBytes: number): string {
  let chars = Math.min(text.length, maxBytes);
  // Do not leave half of a surrogate pair at the end.
  if (chars < text.length && /[\uD800-\uDBFF]/.test(text[chars - 1] ?? "")) chars--;
  const head = text.slice(0, chars);
  const bytes = encoder.encode(head);
  if (bytes.length <= maxBytes) return head;
  let end = maxBytes;
  while (end > 0 && (bytes[end] & 0xc0) === 0x80) end--;
  return new TextDecoder().decode(bytes.subarray(0, end));
}

/**
 * Accumulates one output stream up to a byte cap, or up to what a shared budget has left. With a
 * reserve, a stream that passes what the budget has left is kept whole instead (up to the
 * reserve's `maxBytes`), and gives its share of the budget back: the result shows a preview of it.
 */
export class OutputCapture {
  #parts: string[] = [];
  #budget: OutputBudget;
  #reserve: OutputReserve | undefined;
  #watcher: OutputWatcher | undefined;
  #bytes = 0;
  #kept = false;
  #truncated = false;
  #stop: CaptureStop | undefined;

  /**
   * Creates an empty capture.
   *
   * @param limit The cap in UTF-8 bytes, or a budget shared with other captures.
   * @param reserve Where a stream past the budget is kept whole; without it, it is cut.
   * @param watcher Sees the text as it is captured.
   */
  constructor(limit: number | OutputBudget, reserve?: OutputReserve, watcher?: OutputWatcher) {
    this.#budget = typeof limit === "number" ? new OutputBudget(limit) : limit;
    this.#reserve = reserve;
    this.#watcher = watcher;
  }

  /**
   * Appends text, keeping what fits under the cap.
   *
   * @param text The text to add.
   * @returns False once the cap has been passed (the run is to be stopped).
   */
  add(text: string): boolean {
    if (this.#truncated) return false;
    const bytes = encoder.encode(text);
    if (!this.#kept && bytes.length <= this.#budget.left) {
      this.#take(text);
      this.#budget.left -= bytes.length;
      this.#bytes += bytes.length;
      return true;
    }
    if (this.#reserve && this.#keepMore(text, bytes)) return true;
    if (this.#kept) return false;
    this.#stop ??= "cap";
    const room = this.#budget.left;
    // Cut on a character boundary: drop continuation bytes at the cut.
    let end = room;
    while (end > 0 && (bytes[end] & 0xc0) === 0x80) end--;
    this.#take(new TextDecoder().decode(bytes.subarray(0, end)));
    this.#budget.left -= end;
    this.#bytes += end;
    this.#truncated = true;
    return false;
  }

  /** Keeps text past the budget; false when it cannot (then the capture is cut). */
  #keepMore(text: string, bytes: Uint8Array): boolean {
    const reserve = this.#reserve!;
    const fit = Math.max(0, Math.min(bytes.length, reserve.maxBytes - this.#bytes));
    // The first time, the text captured so far is kept too.
    const need = fit + (this.#kept ? 0 : this.#bytes);
    if (need > 0 && !reserve.reserve(need)) {
      // Not kept yet: the caller cuts it at the budget, as without a reserve.
      this.#stop = "store";
      if (this.#kept) this.#truncated = true;
      return false;
    }
    if (!this.#kept) {
      this.#kept = true;
      this.#budget.left += this.#bytes;
    }
    this.#bytes += fit;
    if (fit === bytes.length) {
      this.#take(text);
      return true;
    }
    this.#take(utf8Head(text, fit));
    this.#stop = "maxBytes";
    this.#truncated = true;
    return false;
  }

  #take(text: string): void {
    this.#parts.push(text);
    this.#watcher?.push(text);
  }

  /** The captured text (all of it when kept). */
  get text(): string {
    if (this.#parts.length > 1) this.#parts = [this.#parts.join("")];
    return this.#parts[0] ?? "";
  }

  /** Its size in UTF-8 bytes. */
  get bytes(): number {
    return this.#bytes;
  }

  /** Whether anything was cut. */
  get truncated(): boolean {
    return this.#truncated;
  }

  /** Whether the stream passed the budget and is kept whole (its bytes are reserved). */
  get kept(): boolean {
    return this.#kept;
  }

  /** Why the capture stopped taking text, once it has. */
  get stopped(): CaptureStop | undefined {
    return this.#stop;
  }
}
