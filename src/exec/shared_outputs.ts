/**
 * One run's kept outputs in the shared state store (`state.url`), so that any replica reads them
 * for their principal and `outputs.maxTotalBytes` holds across the cluster
 * (`src/state/kept_store.ts`).
 *
 * A capture reserves as it reads a frame, and cannot wait for the store: the bytes are taken at
 * once and reserved in the store behind it, several frames' at a time. Once the store refuses
 * (no room left, cluster-wide) or cannot be reached, the run's next reservation fails, so the run
 * is stopped as a run past its cap always was; and the result keeps nothing until every byte it
 * keeps is reserved, so that what a result names is counted. What one run holds locally before
 * that is bounded as on one machine (`outputs.maxBytes` a part).
 *
 * @module
 */
import { CodeExecutorError, outputTooLarge } from "../errors.ts";
import type { KeptStore } from "../state/kept_store.ts";
import {
  answerReadOutput,
  type KeptOutput,
  type OutputKeeper,
  type OutputPart,
  OutputStore,
  type OutputStoreOptions,
  RunOutputs,
} from "./output_store.ts";

/**
 * The kept outputs as runs and clients reach them: in this process (`OutputStore`), or with
 * `state.url` in the shared store, which every replica reads.
 */
export class KeptOutputs {
  readonly #local: OutputStore;
  readonly #shared: KeptStore | undefined;
  readonly #forClient: (text: string, principal: string) => Promise<string>;

  /**
   * Chooses where outputs are kept.
   *
   * @param options `outputs.*` and `limits.previewChars`.
   * @param shared The shared store's outputs, when replicas share a store of their own.
   * @param forClient Text on its way to a principal's client, with personal data as their
   *   placeholders (`privacy.tokenize`).
   */
  constructor(
    options: OutputStoreOptions,
    shared: KeptStore | undefined,
    forClient: (text: string, principal: string) => Promise<string>,
  ) {
    this.#local = new OutputStore(options);
    this.#shared = shared;
    this.#forClient = forClient;
  }

  /**
   * A run's keeper: what it keeps, bound to its principal.
   *
   * @param principal Who may read it.
   * @param timeoutMs The run's timeout: a shared reservation outlives it by a minute, so that a
   *   dead replica's bytes come back.
   * @returns The keeper.
   */
  forRun(principal: string, timeoutMs: number): OutputKeeper {
    return this.#shared
      ? new SharedRunOutputs(this.#shared, {
        principal,
        leaseMs: timeoutMs + 60_000,
        previewChars: this.#local.previewChars,
      })
      : new RunOutputs(this.#local, principal);
  }

  /**
   * The outputs a principal may read (`resources/list`).
   *
   * @param principal Who asks.
   * @returns Their descriptions, oldest first.
   * @throws {CodeExecutorError} `StateUnavailable`.
   */
  async list(principal: string): Promise<KeptOutput[]> {
    return this.#shared ? await this.#shared.list(principal) : this.#local.list(principal);
  }

  /**
   * Reads a kept output for a client (`resources/read`): with `privacy.tokenize`, its personal
   * data is replaced by the principal's placeholders, as in the result that named it; a kept
   * output holds what the code printed, which may carry real values (`privacy.rawServers`).
   *
   * @param idOrUri Its id or URI.
   * @param principal Who asks.
   * @returns The output and its text.
   * @throws {CodeExecutorError} `OutputNotFound` or `OutputAccessDenied`; `StateUnavailable`.
   */
  async read(idOrUri: string, principal: string): Promise<KeptOutput & { text: string }> {
    const output = this.#shared
      ? await this.#shared.read(idOrUri, principal)
      : this.#local.read(idOrUri, principal);
    // An image's base64 is not text: a placeholder in it would break the image.
    if (output.part === "image") return output;
    return { ...output, text: await this.#forClient(output.text, principal) };
  }

  /** Stops this process's expiry timer. */
  close(): void {
    this.#local.close();
  }
}

/** Options of {@linkcode SharedRunOutputs}. */
export interface SharedRunOutputsOptions {
  /** Who may read what the run keeps. */
  principal: string;
  /**
   * How long the run's reservations live in the store unless it reserves again: what a dead
   * replica's runs hold is given back then.
   */
  leaseMs: number;
  /** Characters a result shows of its kept parts together (`limits.previewChars`). */
  previewChars: number;
}

/** The outputs of one run, kept in the shared state store. */
export class SharedRunOutputs implements OutputKeeper {
  readonly #kept: KeptStore;
  readonly #options: SharedRunOutputsOptions;
  /** The run's name in the store's byte budget. */
  readonly #holder = crypto.randomUUID();
  /** Bytes taken and not kept. */
  #reserved = 0;
  /** Bytes taken and not yet reserved in the store. */
  #unsent = 0;
  #sending: Promise<void> | undefined;
  /** Why the store refused, or could not be asked: nothing more is kept then. */
  #failure: CodeExecutorError | undefined;
  /** Whether the store holds any reservation of this run. */
  #inStore = false;

  /**
   * Binds a run to the shared outputs.
   *
   * @param kept The shared outputs.
   * @param options The principal, the reservations' lease and the preview's size.
   */
  constructor(kept: KeptStore, options: SharedRunOutputsOptions) {
    this.#kept = kept;
    this.#options = options;
  }

  /** The largest output kept. */
  get maxBytes(): number {
    return this.#kept.maxBytes;
  }

  /** Characters a result shows of its kept parts together. */
  get previewChars(): number {
    return this.#options.previewChars;
  }

  /**
   * Takes room for bytes this run may keep; they are reserved in the store behind it.
   *
   * @param bytes How many.
   * @returns False once the store has refused or failed an earlier reservation of this run.
   */
  reserve(bytes: number): boolean {
    if (this.#failure) return false;
    this.#reserved += bytes;
    this.#unsent += bytes;
    this.#sending ??= this.#send();
    return true;
  }

  async #send(): Promise<void> {
    this.#inStore = true;
    try {
      while (this.#unsent > 0 && !this.#failure) {
        const bytes = this.#unsent;
        this.#unsent = 0;
        if (!await this.#kept.reserve(this.#holder, bytes, this.#options.leaseMs)) {
          this.#failure = outputTooLarge(
            "a part passed limits.maxOutputBytes and outputs.maxTotalBytes has no room left, across the replicas, beside the outputs of runs in progress",
            "print less, or retry when other runs have finished",
          );
        }
      }
    } catch (error) {
      this.#failure = CodeExecutorError.from(error, "StateUnavailable");
    } finally {
      this.#sending = undefined;
    }
  }

  /** Waits until every byte taken so far has been reserved in the store (or refused). */
  async #sent(): Promise<void> {
    while (this.#sending) await this.#sending;
  }

  /**
   * Keeps one part whose bytes this run took, once they are reserved in the store.
   *
   * @param part Which part.
   * @param text Its whole text.
   * @param bytes Its UTF-8 size.
   * @param mimeType An image's type, for the part `image`.
   * @returns How the result names it.
   * @throws {CodeExecutorError} `OutputLimitError` when the store had no room for it,
   *   `StateUnavailable` when the store could not be used.
   */
  async keep(
    part: OutputPart,
    text: string,
    bytes: number,
    mimeType?: string,
  ): Promise<KeptOutput> {
    await this.#sent();
    if (this.#failure) throw this.#failure;
    const entry = await this.#kept.keep({
      holder: this.#holder,
      principal: this.#options.principal,
      part,
      text,
      bytes,
      ...(mimeType ? { mimeType } : {}),
    });
    this.#reserved -= bytes;
    return entry;
  }

  /**
   * Answers `readOutput(id)` / `read_output(id)` from the run's code: the whole text of an output
   * of the same principal, kept through any replica.
   *
   * @param frame The request frame (untrusted): the id, or the URI, in `name`.
   * @returns The reply: the text, or an error the code can catch.
   */
  answer(frame: Record<string, unknown>): Promise<object> {
    return answerReadOutput(
      frame,
      async (name) => (await this.#kept.read(name, this.#options.principal)).text,
    );
  }

  /**
   * Gives back what was reserved and not kept, behind the run (a store that cannot be reached
   * gives it back when the reservation's lease ends).
   */
  release(): void {
    if (!this.#inStore || this.#reserved === 0) return;
    this.#reserved = 0;
    const holder = this.#holder;
    this.#sent().then(() => this.#kept.release(holder)).catch(() => {});
  }
}
