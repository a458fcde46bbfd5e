/**
 * The seam between what replicas share and where it is kept: {@linkcode StateStore}, a small set
 * of keyed operations with expiry that the in-process store (`memory_store.ts`, one machine, the
 * default) and Redis or Valkey (`redis_store.ts`, `state.url`) both implement, each atomic where
 * a caller relies on it (a one-shot take, a sliding window, leases, a byte budget). The shared
 * records (`vault_store.ts`, `kept_store.ts`, `pending_store.ts`, `limits.ts`, `replicas.ts`)
 * are written once over it, and seal or HMAC whatever they put there (`keys.ts`).
 *
 * Every operation is bounded in time: a store that does not answer within `state.timeoutMs`, or
 * cannot be reached, fails the operation with `StateUnavailable` at once; nothing waits for it
 * and nothing is retried (a retried increment could count twice).
 *
 * @module
 */
import { CodeExecutorError } from "../errors.ts";

/** Options of {@linkcode StateStore.set}. */
export interface SetOptions {
  /** How long the value lives; `Infinity` for as long as the store keeps it (skills). */
  ttlMs: number;
  /** Set only when the key holds nothing (the first writer wins). */
  ifAbsent?: boolean;
}

/** One member of a sorted set and its score. */
export type Scored = [member: string, score: number];

/** Options of {@linkcode StateStore.windowTake}. */
export interface WindowOptions {
  /** Takes allowed in any window. */
  limit: number;
  /** The window's length. */
  windowMs: number;
}

/** Options of {@linkcode StateStore.leaseTake}. */
export interface LeaseOptions {
  /** Who holds the lease (a random id per holding). */
  holder: string;
  /** Leases held at once under the key. */
  max: number;
  /** How long the lease lives unless renewed. */
  ttlMs: number;
}

/**
 * A byte budget shared by several writers: reservations of work in progress (each a lease) and
 * kept entries (each with an expiry), which together never pass `max`. The budget's own records
 * live under `key`; a kept entry evicted for room is also deleted under each of `entryPrefixes`
 * followed by its id.
 */
export interface BudgetKey {
  /** The budget's records (no spaces). */
  key: string;
  /** The prefixes of the keys a kept entry has (no spaces). */
  entryPrefixes: string[];
}

/** What a budget holds, in bytes. */
export interface BudgetUse {
  /** Bytes of kept entries. */
  kept: number;
  /** Bytes reserved by work in progress. */
  reserved: number;
}

/** Round trips and failures since the store was opened (for `/metrics`). */
export interface StoreStats {
  /** Operations that reached the store. */
  operations: number;
  /** Operations that failed with `StateUnavailable`. */
  failures: number;
}

/**
 * Where replicas keep what they share. Keys are opaque strings chosen by the records over it;
 * values are bytes (sealed by the caller). Missing and expired are the same: undefined.
 */
export interface StateStore {
  /** `memory` (this process) or `redis`. */
  readonly kind: "memory" | "redis";
  /** The store as messages name it: `memory`, or its URL without the password. */
  readonly where: string;
  /** Operations and failures so far. */
  readonly stats: StoreStats;

  /** The values of some keys, in order. */
  get(keys: string[]): Promise<Array<Uint8Array | undefined>>;
  /** Sets a value with an expiry; returns false when `ifAbsent` and the key is taken. */
  set(key: string, value: Uint8Array, options: SetOptions): Promise<boolean>;
  /** Gets and deletes a value at once: of two takers, one gets it. */
  take(key: string): Promise<Uint8Array | undefined>;
  /** Deletes keys (of any kind). */
  delete(keys: string[]): Promise<void>;
  /** Gives the keys that exist a new expiry. */
  expire(keys: string[], ttlMs: number): Promise<void>;
  /** Adds one to a counter that never expires; returns the new value (1 for a new counter). */
  increment(key: string): Promise<number>;
  /** Reads a counter (0 when absent). */
  counter(key: string): Promise<number>;

  /**
   * Adds or re-scores members of a sorted set; the set then lives `ttlMs` when given.
   *
   * @returns The set's size afterwards.
   */
  sortedAdd(key: string, members: Scored[], ttlMs?: number): Promise<number>;
  /** Removes members of a sorted set. */
  sortedRemove(key: string, members: string[]): Promise<void>;
  /** Members with `min <= score <= max`, lowest score first. */
  sortedRange(key: string, min: number, max: number): Promise<Scored[]>;
  /** Removes and returns the lowest-scored members: of two poppers, one gets each. */
  sortedPop(key: string, count: number): Promise<Scored[]>;
  /** Removes the members scored below `score`; returns how many are left. */
  sortedTrim(key: string, score: number): Promise<number>;

  /**
   * Counts one take in a sliding window, atomically.
   *
   * @returns Undefined when taken, else the milliseconds until one would be allowed.
   */
  windowTake(key: string, options: WindowOptions): Promise<number | undefined>;
  /** Takes (or renews) a lease if fewer than `max` are held; expired ones do not count. */
  leaseTake(key: string, options: LeaseOptions): Promise<boolean>;
  /** Renews a held lease; false when it was lost (expired, or the store was restarted). */
  leaseRenew(key: string, holder: string, ttlMs: number): Promise<boolean>;
  /** Gives a lease back. */
  leaseDrop(key: string, holder: string): Promise<void>;

  /**
   * Reserves bytes for a holder, evicting the oldest kept entries for room.
   *
   * @returns False when the reservations of all holders alone leave no room.
   */
  budgetReserve(
    budget: BudgetKey,
    options: { holder: string; bytes: number; max: number; leaseMs: number },
  ): Promise<boolean>;
  /** Turns bytes a holder reserved into a kept entry; returns its expiry (ms since the epoch). */
  budgetKeep(
    budget: BudgetKey,
    options: { holder: string; entry: string; bytes: number; ttlMs: number },
  ): Promise<number>;
  /** Gives back bytes a holder reserved and did not keep (all of them without `bytes`). */
  budgetRelease(budget: BudgetKey, holder: string, bytes?: number): Promise<void>;
  /** What the budget holds now. */
  budgetUse(budget: BudgetKey): Promise<BudgetUse>;

  /** Closes the connection; the store is unusable afterwards. */
  close(): Promise<void>;
}

/**
 * The error of an operation the store could not do.
 *
 * @param where The store, as {@linkcode StateStore.where} names it.
 * @param why What happened (`did not answer within 1000 ms (state.timeoutMs)`).
 * @param cause The client's error.
 * @returns A `StateUnavailable` error that says nothing was done that needed the store.
 */
export function stateUnavailable(where: string, why: string, cause?: unknown): CodeExecutorError {
  return new CodeExecutorError(
    "StateUnavailable",
    `The shared state store ${where} ${why}; what needed it was not done. Retry shortly; if it persists, the admin should check the store and state.url`,
    { cause },
  );
}

/**
 * Names a store URL without its password, for messages and logs.
 *
 * @param url A `redis://` or `rediss://` URL.
 * @returns The URL with `***` for the password (and the query dropped).
 */
export function describeStoreUrl(url: string): string {
  try {
    const parsed = new URL(url);
    const user = parsed.username ? `${parsed.username}${parsed.password ? ":***" : ""}@` : "";
    const password = !parsed.username && parsed.password ? ":***@" : "";
    return `${parsed.protocol}//${user}${password}${parsed.host}${parsed.pathname}`;
  } catch {
    return "(a state.url that is not a URL)";
  }
}
