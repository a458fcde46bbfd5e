/**
 * Kept outputs (`code-executor://output/<id>`) in a {@linkcode StateStore}, readable through any
 * replica: what `OutputStore` (src/exec/output_store.ts) keeps in its Map, with its bounds
 * (`outputs.maxBytes`, `outputs.maxTotalBytes`, `outputs.ttlMs`) counted across the cluster by
 * one byte budget (`StateStore.budget*`): bytes of runs in progress are reserved as they arrive,
 * each run's reservation a lease that a dead replica's runs stop renewing, and the oldest kept
 * outputs are evicted for room, as on one machine.
 *
 * In the store, an output is named by a keyed HMAC of its id (the id is what a reader must know)
 * and sealed with its key's name as associated data: `h:` its header (id, part, size, expiry,
 * an image's type, the principal's HMAC) and `t:` its text, so that listing reads no text. Each principal's
 * outputs are listed in `p:<HMAC(principal)>`.
 *
 * @module
 */
import { CodeExecutorError } from "../errors.ts";
import type { StateKeys } from "./keys.ts";
import type { BudgetKey, BudgetUse, StateStore } from "./store.ts";

/** The scheme and path of a kept output's URI (`OUTPUT_URI_PREFIX` of src/exec/output_store.ts). */
const URI_PREFIX = "code-executor://output/";

/** The bounds of a {@linkcode KeptStore} (the `outputs` settings). */
export interface KeptStoreOptions {
  /** The largest output kept; 0 keeps nothing. */
  maxBytes: number;
  /** What all kept outputs, and those of runs in progress, may hold together, cluster-wide. */
  maxTotalBytes: number;
  /** How long an output is kept. */
  ttlMs: number;
}

/** A kept output as a result names it (the shape of `KeptOutput` in src/exec/output_store.ts). */
export interface KeptEntry {
  /** The id to pass to `readOutput`. */
  id: string;
  /** `code-executor://output/<id>`. */
  uri: string;
  /** The part of the result it holds (an image: its base64). */
  part: "stdout" | "stderr" | "returnValue" | "image";
  /** Its size in UTF-8 bytes. */
  bytes: number;
  /** When it is dropped (ISO 8601), unless the total cap drops it sooner. */
  expiresAt: string;
  /** An image's type (`image/png`); only for the part `image`. */
  mimeType?: string;
}

/** Options of {@linkcode KeptStore.keep}. */
export interface KeepOptions {
  /** The run whose reservation the bytes come from. */
  holder: string;
  /** Who may read it. */
  principal: string;
  /** Which part of the result it is. */
  part: KeptEntry["part"];
  /** The whole text. */
  text: string;
  /** Its UTF-8 size, as reserved. */
  bytes: number;
  /** An image's type, for the part `image`. */
  mimeType?: string;
}

interface Header extends KeptEntry {
  /** The principal's HMAC. */
  p: string;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const HEADER = "ce:o:h:";
const TEXT = "ce:o:t:";
const BUDGET: BudgetKey = { key: "ce:o:b", entryPrefixes: [HEADER, TEXT] };

/** Kept outputs of every principal, shared by the replicas of one store. */
export class KeptStore {
  readonly #store: StateStore;
  readonly #keys: StateKeys;
  readonly #options: KeptStoreOptions;

  /**
   * Binds the outputs to a store.
   *
   * @param store Where they are kept.
   * @param keys The keys that seal them and name them.
   * @param options Their bounds.
   */
  constructor(store: StateStore, keys: StateKeys, options: KeptStoreOptions) {
    this.#store = store;
    this.#keys = keys;
    this.#options = options;
  }

  /** The largest output kept; 0 when keeping is off. */
  get maxBytes(): number {
    const { maxBytes, maxTotalBytes } = this.#options;
    return maxBytes > 0 && maxTotalBytes > 0 ? Math.min(maxBytes, maxTotalBytes) : 0;
  }

  /**
   * Reserves room for bytes a run is about to keep, evicting the oldest kept outputs as needed.
   *
   * @param holder The run (a random id of it).
   * @param bytes How many.
   * @param leaseMs How long the run's reservations live unless it reserves again (what is left
   *   of its deadline, and a margin): a run whose replica died gives its bytes back then.
   * @returns False when the reservations of all runs alone leave no room.
   */
  reserve(holder: string, bytes: number, leaseMs: number): Promise<boolean> {
    return this.#store.budgetReserve(BUDGET, {
      holder,
      bytes,
      max: this.#options.maxTotalBytes,
      leaseMs,
    });
  }

  /**
   * Gives back reserved bytes.
   *
   * @param holder The run.
   * @param bytes How many; all the run holds when absent.
   */
  release(holder: string, bytes?: number): Promise<void> {
    return this.#store.budgetRelease(BUDGET, holder, bytes);
  }

  /**
   * Keeps a text whose bytes the run reserved.
   *
   * @param options The run, the principal, the part and the text.
   * @returns How the result names it.
   */
  async keep(options: KeepOptions): Promise<KeptEntry> {
    const id = crypto.randomUUID();
    const name = await this.#keys.index("output", id);
    const p = await this.#keys.index("principal", options.principal);
    const { ttlMs } = this.#options;
    const expires = await this.#store.budgetKeep(BUDGET, {
      holder: options.holder,
      entry: name,
      bytes: options.bytes,
      ttlMs,
    });
    const header: Header = {
      id,
      uri: URI_PREFIX + id,
      part: options.part,
      bytes: options.bytes,
      expiresAt: new Date(expires).toISOString(),
      ...(options.mimeType ? { mimeType: options.mimeType } : {}),
      p,
    };
    const [sealedHeader, sealedText] = await Promise.all([
      this.#keys.seal(encoder.encode(JSON.stringify(header)), HEADER + name),
      this.#keys.seal(encoder.encode(options.text), TEXT + name),
    ]);
    await Promise.all([
      this.#store.set(HEADER + name, sealedHeader, { ttlMs }),
      this.#store.set(TEXT + name, sealedText, { ttlMs }),
      this.#store.sortedAdd(`ce:o:p:${p}`, [[name, expires]], ttlMs),
    ]);
    const { p: _p, ...entry } = header;
    return entry;
  }

  /**
   * Returns a kept output to its principal.
   *
   * @param idOrUri The id, or `code-executor://output/<id>`.
   * @param principal Who asks.
   * @returns The output and its whole text.
   * @throws {CodeExecutorError} `OutputNotFound` (never kept, expired, dropped for room, or lost
   *   with a restarted store), `OutputAccessDenied` (another principal's), `StateUnavailable`.
   */
  async read(idOrUri: string, principal: string): Promise<KeptEntry & { text: string }> {
    const id = idOrUri.startsWith(URI_PREFIX) ? idOrUri.slice(URI_PREFIX.length) : idOrUri;
    const name = await this.#keys.index("output", id);
    const [sealedHeader, sealedText] = await this.#store.get([HEADER + name, TEXT + name]);
    const header = sealedHeader && await this.#header(sealedHeader, name);
    const text = sealedText && await this.#keys.open(sealedText, TEXT + name);
    if (!header || !text || header.id !== id) {
      throw new CodeExecutorError(
        "OutputNotFound",
        `No kept output "${
          id.slice(0, 100)
        }": it expired (outputs are kept for outputs.ttlMs, ${this.#options.ttlMs} ms), was dropped past outputs.maxTotalBytes, or was lost when the shared state store restarted; run the code again to produce it`,
      );
    }
    if (header.p !== await this.#keys.index("principal", principal)) {
      throw new CodeExecutorError(
        "OutputAccessDenied",
        `Output "${id}" belongs to another principal: only the principal whose run produced it can read it`,
      );
    }
    const { p: _p, ...entry } = header;
    return { ...entry, text: decoder.decode(text) };
  }

  /**
   * Lists the outputs one principal may read, oldest first.
   *
   * @param principal Who asks.
   * @returns Their descriptions, without the text.
   */
  async list(principal: string): Promise<KeptEntry[]> {
    const p = await this.#keys.index("principal", principal);
    const index = `ce:o:p:${p}`;
    await this.#store.sortedTrim(index, Date.now());
    const names = (await this.#store.sortedRange(index, Date.now(), Infinity)).map(([n]) => n);
    const sealed = await this.#store.get(names.map((name) => HEADER + name));
    const headers = await Promise.all(
      sealed.map((blob, i) => blob ? this.#header(blob, names[i]) : undefined),
    );
    return headers.filter((h): h is Header => h !== undefined && h.p === p)
      .map(({ p: _p, ...entry }) => entry);
  }

  /** What the cluster's kept outputs and reservations hold. */
  use(): Promise<BudgetUse> {
    return this.#store.budgetUse(BUDGET);
  }

  async #header(sealed: Uint8Array, name: string): Promise<Header | undefined> {
    const plain = await this.#keys.open(sealed, HEADER + name);
    return plain ? JSON.parse(decoder.decode(plain)) as Header : undefined;
  }
}
