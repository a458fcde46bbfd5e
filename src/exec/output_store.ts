/**
 * Outputs kept past their cap: when a run's stdout, stderr or return value does not fit in
 * `limits.maxOutputBytes`, the result carries a preview and a link, and the whole text is kept
 * here for its principal (`resources/read`, `readOutput(id)` in a later run).
 *
 * The store is in the host's memory, not on disk: a kept output then dies with the host on every
 * path (SIGKILL included) and is never readable by another local user or process, and its bound
 * is a number the admin sets (`outputs.maxTotalBytes`), counted in UTF-8 bytes, which is at least
 * what V8 holds for the text. Bytes of runs in progress are reserved as they arrive, so what is
 * kept and what is on its way together never pass the cap: the oldest kept outputs are dropped to
 * make room, and a run that still finds no room is stopped as a run past its cap always was.
 *
 * @module
 */
import { CodeExecutorError } from "../errors.ts";
import { utf8Head } from "./child/frames.ts";

/** The scheme and path of a kept output's URI; the id follows. */
export const OUTPUT_URI_PREFIX = "code-executor://output/";

/** Which part of a result was kept (an image: its base64). */
export type OutputPart = "stdout" | "stderr" | "returnValue" | "image";

/** A kept output as a result names it. */
export interface KeptOutput {
  /** The id to pass to `readOutput` / `read_output`. */
  id: string;
  /** `code-executor://output/<id>`, for `resources/read`. */
  uri: string;
  /** The part of the result it holds (the return value as its JSON text). */
  part: OutputPart;
  /** Its size in UTF-8 bytes. */
  bytes: number;
  /** When it is dropped (ISO 8601), unless the total cap drops it sooner. */
  expiresAt: string;
  /** An image's type (`image/png`); only for the part `image`. */
  mimeType?: string;
}

/** The bounds of an {@linkcode OutputStore} (the `outputs` settings). */
export interface OutputStoreOptions {
  /** The largest output kept; 0 keeps nothing (a run past its cap is stopped). */
  maxBytes: number;
  /** What all kept outputs, and those of runs in progress, may hold together. */
  maxTotalBytes: number;
  /** How long an output is kept. */
  ttlMs: number;
  /** Characters a result shows of its kept parts together (`limits.previewChars`); no bound when unset. */
  previewChars?: number;
}

interface Entry extends KeptOutput {
  principal: string;
  text: string;
  expires: number;
}

/** Kept outputs of every principal, bounded in total size and in age. */
export class OutputStore {
  readonly #options: OutputStoreOptions;
  /** In insertion order, which is age order: eviction takes the first. */
  #entries = new Map<string, Entry>();
  #keptBytes = 0;
  #reservedBytes = 0;
  #timer: ReturnType<typeof setTimeout> | undefined;

  /**
   * Creates an empty store.
   *
   * @param options Its bounds.
   */
  constructor(options: OutputStoreOptions) {
    this.#options = options;
  }

  /** The largest output kept; 0 when keeping is off. */
  get maxBytes(): number {
    return this.#options.maxBytes > 0 && this.#options.maxTotalBytes > 0
      ? Math.min(this.#options.maxBytes, this.#options.maxTotalBytes)
      : 0;
  }

  /** Characters a result shows of its kept parts together. */
  get previewChars(): number {
    return this.#options.previewChars ?? Infinity;
  }

  /** Bytes held: kept outputs plus reservations of runs in progress (never past the total cap). */
  get usedBytes(): number {
    return this.#keptBytes + this.#reservedBytes;
  }

  /**
   * Reserves room for bytes a run is about to keep, dropping the oldest kept outputs as needed.
   *
   * @param bytes How many.
   * @returns False when even an empty store cannot hold them beside other runs' reservations.
   */
  reserve(bytes: number): boolean {
    this.#sweep();
    const max = this.#options.maxTotalBytes;
    if (this.#reservedBytes + bytes > max) return false;
    for (const entry of this.#entries.values()) {
      if (this.#keptBytes + this.#reservedBytes + bytes <= max) break;
      this.#drop(entry);
    }
    this.#reservedBytes += bytes;
    return true;
  }

  /**
   * Gives back reserved bytes.
   *
   * @param bytes How many.
   */
  release(bytes: number): void {
    this.#reservedBytes = Math.max(0, this.#reservedBytes - bytes);
  }

  /**
   * Keeps a text whose bytes were reserved, for one principal.
   *
   * @param principal Who may read it.
   * @param part Which part of the result it is.
   * @param text The whole text.
   * @param bytes Its UTF-8 size, as reserved.
   * @param mimeType An image's type, for the part `image`.
   * @returns How the result names it.
   */
  keep(
    principal: string,
    part: OutputPart,
    text: string,
    bytes: number,
    mimeType?: string,
  ): KeptOutput {
    this.release(bytes);
    const id = crypto.randomUUID();
    const expires = Date.now() + this.#options.ttlMs;
    const entry: Entry = {
      id,
      uri: OUTPUT_URI_PREFIX + id,
      part,
      bytes,
      expiresAt: new Date(expires).toISOString(),
      ...(mimeType ? { mimeType } : {}),
      principal,
      text,
      expires,
    };
    this.#entries.set(id, entry);
    this.#keptBytes += bytes;
    this.#schedule();
    const { principal: _p, text: _t, expires: _e, ...kept } = entry;
    return kept;
  }

  /**
   * Returns a kept output to its principal.
   *
   * @param idOrUri The id, or `code-executor://output/<id>`.
   * @param principal Who asks.
   * @returns The output and its whole text.
   * @throws {CodeExecutorError} `OutputNotFound` when there is no such output (never kept,
   *   expired or dropped for room), `OutputAccessDenied` when it is another principal's.
   */
  read(idOrUri: string, principal: string): KeptOutput & { text: string } {
    this.#sweep();
    const id = idOrUri.startsWith(OUTPUT_URI_PREFIX)
      ? idOrUri.slice(OUTPUT_URI_PREFIX.length)
      : idOrUri;
    const entry = this.#entries.get(id);
    if (!entry) {
      throw new CodeExecutorError(
        "OutputNotFound",
        `No kept output "${
          id.slice(0, 100)
        }": outputs are kept for outputs.ttlMs (${this.#options.ttlMs} ms) and the oldest are dropped past outputs.maxTotalBytes; run the code again to produce it`,
      );
    }
    if (entry.principal !== principal) {
      throw new CodeExecutorError(
        "OutputAccessDenied",
        `Output "${id}" belongs to another principal: only the principal whose run produced it can read it`,
      );
    }
    const { principal: _p, expires: _e, ...output } = entry;
    return output;
  }

  /**
   * Lists the outputs one principal may read, oldest first.
   *
   * @param principal Who asks.
   * @returns Their descriptions, without the text.
   */
  list(principal: string): KeptOutput[] {
    this.#sweep();
    return [...this.#entries.values()].filter((entry) => entry.principal === principal)
      .map(({ principal: _p, text: _t, expires: _e, ...kept }) => kept);
  }

  /** Drops every kept output and stops the expiry timer (shutdown). */
  close(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#entries.clear();
    this.#keptBytes = 0;
  }

  #drop(entry: Entry): void {
    this.#entries.delete(entry.id);
    this.#keptBytes -= entry.bytes;
  }

  #sweep(): void {
    const now = Date.now();
    // Every entry lives ttlMs, so insertion order is expiry order.
    for (const entry of this.#entries.values()) {
      if (entry.expires > now) break;
      this.#drop(entry);
    }
  }

  /** Frees expired text even when nobody asks: one unref'd timer, for the oldest entry. */
  #schedule(): void {
    if (this.#timer !== undefined) return;
    const first = this.#entries.values().next().value;
    if (!first) return;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#sweep();
      this.#schedule();
    }, Math.max(0, first.expires - Date.now()) + 1);
    Deno.unrefTimer(this.#timer);
  }
}

/**
 * What one run keeps its outputs in: {@linkcode RunOutputs} in this process, or the shared state
 * store's (`state.url`, src/exec/shared_outputs.ts). The captures of a run reserve as they read
 * (synchronously: a frame is not held up), the result keeps what passed the cap.
 */
export interface OutputKeeper {
  /** The largest output kept. */
  readonly maxBytes: number;
  /** Characters a result shows of its kept parts together. */
  readonly previewChars: number;
  /**
   * Reserves room for bytes this run may keep.
   *
   * @returns False when there is no room for them.
   */
  reserve(bytes: number): boolean;
  /**
   * Keeps one part whose bytes this run reserved (an image with its type); fails when it cannot
   * be kept after all.
   */
  keep(
    part: OutputPart,
    text: string,
    bytes: number,
    mimeType?: string,
  ): KeptOutput | Promise<KeptOutput>;
  /** Answers `readOutput(id)` from the run's code (untrusted frame). */
  answer(frame: Record<string, unknown>): Promise<object>;
  /** Gives back what was reserved and not kept. */
  release(): void;
}

/** The outputs of one run: its reservations, released on every path, and what it kept. */
export class RunOutputs implements OutputKeeper {
  readonly #store: OutputStore;
  readonly #principal: string;
  #reserved = 0;

  /**
   * Binds a run to the store and to the principal who may read what it keeps.
   *
   * @param store The store.
   * @param principal The run's principal.
   */
  constructor(store: OutputStore, principal: string) {
    this.#store = store;
    this.#principal = principal;
  }

  /** The largest output kept. */
  get maxBytes(): number {
    return this.#store.maxBytes;
  }

  /** Characters a result shows of its kept parts together. */
  get previewChars(): number {
    return this.#store.previewChars;
  }

  /**
   * Reserves room for bytes this run may keep.
   *
   * @param bytes How many.
   * @returns False when the store has no room for them.
   */
  reserve(bytes: number): boolean {
    if (!this.#store.reserve(bytes)) return false;
    this.#reserved += bytes;
    return true;
  }

  /**
   * Keeps one part whose bytes this run reserved.
   *
   * @param part Which part.
   * @param text Its whole text.
   * @param bytes Its UTF-8 size.
   * @param mimeType An image's type, for the part `image`.
   * @returns How the result names it.
   */
  keep(part: OutputPart, text: string, bytes: number, mimeType?: string): KeptOutput {
    this.#reserved -= bytes;
    return this.#store.keep(this.#principal, part, text, bytes, mimeType);
  }

  /**
   * Answers `readOutput(id)` / `read_output(id)` from the run's code: the whole text of an output
   * of the same principal.
   *
   * @param frame The request frame (untrusted): the id, or the URI, in `name`.
   * @returns The reply: the text, or an error the code can catch.
   */
  answer(frame: Record<string, unknown>): Promise<object> {
    return answerReadOutput(frame, (name) => this.#store.read(name, this.#principal).text);
  }

  /** Gives back what was reserved and not kept. */
  release(): void {
    this.#store.release(this.#reserved);
    this.#reserved = 0;
  }
}

/**
 * Answers `readOutput(id)` / `read_output(id)` from a run's code.
 *
 * @param frame The request frame (untrusted): the id, or the URI, in `name`.
 * @param read The whole text of the principal's output of that name.
 * @returns The reply: the text, or an error the code can catch.
 */
export async function answerReadOutput(
  frame: Record<string, unknown>,
  read: (name: string) => string | Promise<string>,
): Promise<object> {
  try {
    const name = frame.name;
    if (typeof name !== "string" || name.length === 0 || name.length > 200) {
      throw new CodeExecutorError(
        "TypeError",
        "readOutput(id) takes the id (or URI) of a kept output, a string",
      );
    }
    return { ok: true, value: await read(name) };
  } catch (error) {
    return CodeExecutorError.from(error, "StateUnavailable").toReply();
  }
}

/** A captured stream as {@linkcode keepParts} needs it (an `OutputCapture`). */
export interface CapturedPart {
  /** All of its text when kept, else what was captured. */
  readonly text: string;
  /** Its UTF-8 size. */
  readonly bytes: number;
  /** Whether it passed the cap and its bytes are reserved. */
  readonly kept: boolean;
}

/** What a result shows of a run's output, and what it kept. */
export interface ShownParts {
  /** The stdout to show: whole, or a preview of a kept one. */
  stdout: string;
  /** The stderr to show. */
  stderr: string;
  /** The parts kept whole. */
  outputs: KeptOutput[];
  /** Why a part past the cap could not be kept after all (the shared store): the run fails. */
  error?: CodeExecutorError;
}

/**
 * Keeps the parts of a run that passed its cap, and cuts their previews so that everything shown
 * stays under the cap: parts that fit are shown whole, and the kept streams share what is left
 * (the smaller one first, so neither takes the other's room), and at most the store's
 * `previewChars` between them. A kept return value is not shown.
 *
 * @param keep The run's outputs; without it nothing is kept.
 * @param room What the run's output budget has left once the parts shown whole are counted (a kept
 *   stream gives its share back).
 * @param parts The two streams and a kept return value's JSON.
 * @param cleanStderr Rewrites stderr (the code's own line numbers), before it is shown or kept.
 * @returns What the result shows and names; with `error` and no outputs when one part could not
 *   be kept (the previews are shown all the same).
 */
export async function keepParts(
  keep: OutputKeeper | undefined,
  room: number,
  parts: {
    stdout: CapturedPart;
    stderr: CapturedPart;
    returnValue?: { text: string; bytes: number };
  },
  cleanStderr?: (text: string) => string,
): Promise<ShownParts> {
  parts = { ...parts, stderr: cleaned(parts.stderr, cleanStderr) };
  const { stdout, stderr, returnValue } = parts;
  const shown: ShownParts = { stdout: stdout.text, stderr: stderr.text, outputs: [] };
  if (!keep || (!stdout.kept && !stderr.kept && !returnValue)) return shown;
  const streams = (["stdout", "stderr"] as const).filter((name) => parts[name].kept)
    .sort((a, b) => parts[a].bytes - parts[b].bytes);
  let chars = keep.previewChars;
  streams.forEach((name, index) => {
    const share = streams.length - index;
    const head = utf8Head(parts[name].text, Math.max(0, Math.floor(room / share)));
    const preview = charHead(head, Math.floor(chars / share));
    room -= new TextEncoder().encode(preview).length;
    chars -= preview.length;
    shown[name] = preview;
  });
  try {
    for (const name of ["stdout", "stderr"] as const) {
      const part = parts[name];
      if (part.kept) shown.outputs.push(await keep.keep(name, part.text, part.bytes));
    }
    if (returnValue) {
      shown.outputs.push(await keep.keep("returnValue", returnValue.text, returnValue.bytes));
    }
  } catch (error) {
    // A link to an output that is not kept must not be shown; those kept before it expire.
    return { ...shown, outputs: [], error: CodeExecutorError.from(error, "StateUnavailable") };
  }
  return shown;
}

/** The first `chars` UTF-16 units of a text, without half of a surrogate pair at the end. */
function charHead(text: string, chars: number): string {
  if (text.length <= chars) return text;
  const code = text.charCodeAt(chars - 1);
  return text.slice(0, code >= 0xd800 && code <= 0xdbff ? chars - 1 : chars);
}

/**
 * A stream with its cleaning applied. A kept one takes the cleaned text only when it is no larger
 * than the bytes it reserved (cleaning shortens: `data:` URLs become `code.ts`); the rest of the
 * reservation is released with the run's.
 */
function cleaned(part: CapturedPart, clean?: (text: string) => string): CapturedPart {
  if (!clean) return part;
  const text = clean(part.text);
  if (text === part.text) return part;
  if (!part.kept) return { text, bytes: part.bytes, kept: false };
  const bytes = new TextEncoder().encode(text).length;
  return bytes <= part.bytes ? { text, bytes, kept: true } : part;
}
