/**
 * The last lines a stdio upstream wrote to its stderr, kept so that a server that dies during
 * start-up can be shown in its own words (in the log, in `doctor`, in the error the model gets).
 *
 * @module
 */
import { redactText } from "../redact.ts";

/** Terminal escape sequences: CSI (`ESC [ … final`), OSC (`ESC ] … BEL` or `ESC \\`), and the rest. */
// deno-lint-ignore no-control-regex
const ESCAPES = /\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-_])?/g;

/** Control characters but tab, and the marks that reorder or hide text (bidi overrides, zero-width). */
// deno-lint-ignore no-control-regex
const HIDDEN = /[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]/g;

/**
 * A line as plain text: a server's stderr reaches a terminal (`doctor`, the log) and the model, so
 * its escape sequences (clear the screen, set the title) and hidden marks are dropped.
 */
function inert(line: string): string {
  return line.replace(ESCAPES, "").replace(HIDDEN, "");
}

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
    const line = inert(raw.replace(/\r$/, "")).slice(0, this.#maxLineChars);
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
    const partial = inert(this.#partial);
    const all = partial.trim() ? [...this.#lines, partial] : this.#lines;
    // Redacted as one text, so that a private key's block spanning lines is found whole.
    return all.length === 0 ? [] : redactText(all.join("\n")).split("\n");
  }
}
