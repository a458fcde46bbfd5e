/**
 * The last lines a stdio upstream wrote to its stderr, kept so that a server that dies during
 * start-up can be shown in its own words (in the log, in `doctor`, in the error the model gets).
 *
 * @module
 */
import { redactText } from "../redact.ts";

/** Options of {@linkcode StderrTail}. */
export interface StderrTailOptions {
  /** How many complete lines are kept; older ones are dropped. Default 20. */
  maxLines?: number;
  /** Characters kept of each line; the rest of a longer line is dropped. Default 300. */
  maxLineChars?: number;
  /** Called with each complete line, already redacted. */
  onLine?: (line: string) => void;
}

/**
 * A bounded tail of a process's stderr: at most `maxLines` lines of at most `maxLineChars`
 * characters, whatever the process writes (a line without an end is cut, not grown).
 */
export class StderrTail {
  #lines: string[] = [];
  #partial = "";
  #decoder = new TextDecoder();
  #maxLines: number;
  #maxLineChars: number;
  #onLine?: (line: string) => void;

  /**
   * Creates an empty tail.
   *
   * @param options Its bounds, and who hears each line.
   */
  constructor(options: StderrTailOptions = {}) {
    this.#maxLines = options.maxLines ?? 20;
    this.#maxLineChars = options.maxLineChars ?? 300;
    this.#onLine = options.onLine;
  }

  /**
   * Takes a chunk of the stream.
   *
   * @param chunk Bytes as they came; a character split between two chunks is put together.
   */
  push(chunk: Uint8Array): void {
    const pieces = (this.#partial + this.#decoder.decode(chunk, { stream: true })).split("\n");
    this.#partial = pieces.pop()!.slice(0, this.#maxLineChars);
    for (const piece of pieces) this.#add(piece);
  }

  #add(raw: string): void {
    const line = raw.replace(/\r$/, "").slice(0, this.#maxLineChars);
    if (!line.trim()) return;
    this.#lines.push(line);
    if (this.#lines.length > this.#maxLines) this.#lines.shift();
    this.#onLine?.(redactText(line));
  }

  /**
   * The lines kept so far, the unfinished last one included, redacted as the audit log is.
   *
   * @returns The lines, oldest first.
   */
  lines(): string[] {
    const all = this.#partial.trim() ? [...this.#lines, this.#partial] : this.#lines;
    // Redacted as one text, so that a private key's block spanning lines is found whole.
    return all.length === 0 ? [] : redactText(all.join("\n")).split("\n");
  }
}
