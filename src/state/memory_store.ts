/**
 * The in-process {@linkcode StateStore}: the embedded default for one machine (no `state.url`),
 * with the semantics of the Redis one, so that the records over it behave the same on both (one
 * contract test runs against each). Everything is synchronous underneath, so every operation is
 * atomic; expired keys are dropped when touched, and all of them every 1024 writes, so memory is
 * bounded by what is live.
 *
 * @module
 */
import type {
  BudgetKey,
  BudgetUse,
  LeaseOptions,
  Scored,
  SetOptions,
  StateStore,
  StoreStats,
  WindowOptions,
} from "./store.ts";

interface Budget {
  /** Reservations: holder → bytes. */
  reserved: Map<string, number>;
  /** Reservation leases: holder → expiry. */
  leases: Map<string, number>;
  /** Kept entries, oldest first: entry → [bytes, expiry]. */
  kept: Map<string, [number, number]>;
  keptBytes: number;
  reservedBytes: number;
}

type Value =
  | { kind: "bytes"; bytes: Uint8Array }
  | { kind: "counter"; n: number }
  | { kind: "sorted"; members: Map<string, number> }
  | { kind: "budget"; budget: Budget };

interface Slot {
  value: Value;
  /** Ms since the epoch; Infinity for no expiry. */
  expires: number;
}

const SWEEP_EVERY = 1024;

/** A {@linkcode StateStore} in this process's memory. */
export class MemoryStateStore implements StateStore {
  /** Always `memory`. */
  readonly kind = "memory";
  /** Always `memory`. */
  readonly where = "memory";
  /** Operations so far (none fail). */
  readonly stats: StoreStats = { operations: 0, failures: 0 };
  #slots = new Map<string, Slot>();
  #writes = 0;
  #closed = false;

  #live(key: string, now = Date.now()): Slot | undefined {
    const slot = this.#slots.get(key);
    if (slot && slot.expires <= now) {
      this.#slots.delete(key);
      return undefined;
    }
    return slot;
  }

  #write(key: string, value: Value, expires: number): void {
    this.#slots.set(key, { value, expires });
    if (++this.#writes % SWEEP_EVERY === 0) {
      const now = Date.now();
      for (const [k, slot] of this.#slots) if (slot.expires <= now) this.#slots.delete(k);
    }
  }

  #op(): void {
    if (this.#closed) throw new Error("The in-process state store is closed");
    this.stats.operations++;
  }

  #sorted(key: string): Map<string, number> | undefined {
    const slot = this.#live(key);
    return slot?.value.kind === "sorted" ? slot.value.members : undefined;
  }

  /** The values of some keys. */
  get(keys: string[]): Promise<Array<Uint8Array | undefined>> {
    this.#op();
    return Promise.resolve(keys.map((key) => {
      const slot = this.#live(key);
      return slot?.value.kind === "bytes" ? slot.value.bytes : undefined;
    }));
  }

  /** Sets a value with an expiry. */
  set(key: string, value: Uint8Array, options: SetOptions): Promise<boolean> {
    this.#op();
    if (options.ifAbsent && this.#live(key)) return Promise.resolve(false);
    this.#write(key, { kind: "bytes", bytes: value.slice() }, Date.now() + options.ttlMs);
    return Promise.resolve(true);
  }

  /** Gets and deletes a value. */
  take(key: string): Promise<Uint8Array | undefined> {
    this.#op();
    const slot = this.#live(key);
    if (slot?.value.kind !== "bytes") return Promise.resolve(undefined);
    this.#slots.delete(key);
    return Promise.resolve(slot.value.bytes);
  }

  /** Deletes keys. */
  delete(keys: string[]): Promise<void> {
    this.#op();
    for (const key of keys) this.#slots.delete(key);
    return Promise.resolve();
  }

  /** Renews the expiry of the keys that exist. */
  expire(keys: string[], ttlMs: number): Promise<void> {
    this.#op();
    const now = Date.now();
    for (const key of keys) {
      const slot = this.#live(key, now);
      if (slot) slot.expires = now + ttlMs;
    }
    return Promise.resolve();
  }

  /** Adds one to a counter. */
  increment(key: string): Promise<number> {
    this.#op();
    const slot = this.#live(key);
    const n = (slot?.value.kind === "counter" ? slot.value.n : 0) + 1;
    this.#write(key, { kind: "counter", n }, Infinity);
    return Promise.resolve(n);
  }

  /** Reads a counter. */
  counter(key: string): Promise<number> {
    this.#op();
    const slot = this.#live(key);
    return Promise.resolve(slot?.value.kind === "counter" ? slot.value.n : 0);
  }

  /** Adds or re-scores members of a sorted set. */
  sortedAdd(key: string, members: Scored[], ttlMs?: number): Promise<number> {
    this.#op();
    const slot = this.#live(key);
    const set = slot?.value.kind === "sorted" ? slot.value.members : new Map<string, number>();
    for (const [member, score] of members) set.set(member, score);
    const expires = ttlMs !== undefined ? Date.now() + ttlMs : slot?.expires ?? Infinity;
    this.#write(key, { kind: "sorted", members: set }, expires);
    return Promise.resolve(set.size);
  }

  /** Removes members of a sorted set. */
  sortedRemove(key: string, members: string[]): Promise<void> {
    this.#op();
    const set = this.#sorted(key);
    for (const member of members) set?.delete(member);
    if (set?.size === 0) this.#slots.delete(key);
    return Promise.resolve();
  }

  /** Members with `min <= score <= max`, lowest first. */
  sortedRange(key: string, min: number, max: number): Promise<Scored[]> {
    this.#op();
    return Promise.resolve(ordered(this.#sorted(key)).filter(([, s]) => s >= min && s <= max));
  }

  /** Removes and returns the lowest-scored members. */
  sortedPop(key: string, count: number): Promise<Scored[]> {
    this.#op();
    const set = this.#sorted(key);
    const popped = ordered(set).slice(0, count);
    for (const [member] of popped) set!.delete(member);
    if (set?.size === 0) this.#slots.delete(key);
    return Promise.resolve(popped);
  }

  /** Removes the members scored below `score`. */
  sortedTrim(key: string, score: number): Promise<number> {
    this.#op();
    const set = this.#sorted(key);
    if (!set) return Promise.resolve(0);
    for (const [member, s] of set) if (s < score) set.delete(member);
    if (set.size === 0) this.#slots.delete(key);
    return Promise.resolve(set.size);
  }

  /** Counts one take in a sliding window. */
  windowTake(key: string, options: WindowOptions): Promise<number | undefined> {
    this.#op();
    const now = Date.now();
    const set = this.#sorted(key) ?? new Map<string, number>();
    for (const [member, at] of set) if (at <= now - options.windowMs) set.delete(member);
    if (set.size >= options.limit) {
      const oldest = Math.min(...set.values());
      return Promise.resolve(options.windowMs - (now - oldest));
    }
    set.set(crypto.randomUUID(), now);
    this.#write(key, { kind: "sorted", members: set }, now + options.windowMs);
    return Promise.resolve(undefined);
  }

  /** Takes or renews a lease if fewer than `max` are held. */
  leaseTake(key: string, options: LeaseOptions): Promise<boolean> {
    this.#op();
    const now = Date.now();
    const set = this.#sorted(key) ?? new Map<string, number>();
    for (const [holder, expires] of set) if (expires <= now) set.delete(holder);
    if (!set.has(options.holder) && set.size >= options.max) return Promise.resolve(false);
    set.set(options.holder, now + options.ttlMs);
    this.#write(key, { kind: "sorted", members: set }, now + options.ttlMs);
    return Promise.resolve(true);
  }

  /** Renews a held lease. */
  leaseRenew(key: string, holder: string, ttlMs: number): Promise<boolean> {
    this.#op();
    const now = Date.now();
    const slot = this.#live(key, now);
    const set = slot?.value.kind === "sorted" ? slot.value.members : undefined;
    const expires = set?.get(holder);
    if (!set || expires === undefined || expires <= now) return Promise.resolve(false);
    set.set(holder, now + ttlMs);
    slot!.expires = Math.max(slot!.expires, now + ttlMs);
    return Promise.resolve(true);
  }

  /** Gives a lease back. */
  leaseDrop(key: string, holder: string): Promise<void> {
    this.#op();
    this.#sorted(key)?.delete(holder);
    return Promise.resolve();
  }

  #budget(budget: BudgetKey, now: number): Budget {
    const slot = this.#live(budget.key, now);
    let b: Budget;
    if (slot?.value.kind === "budget") b = slot.value.budget;
    else {
      b = {
        reserved: new Map(),
        leases: new Map(),
        kept: new Map(),
        keptBytes: 0,
        reservedBytes: 0,
      };
      this.#write(budget.key, { kind: "budget", budget: b }, Infinity);
    }
    for (const [holder, expires] of b.leases) {
      if (expires > now) continue;
      b.reservedBytes -= b.reserved.get(holder) ?? 0;
      b.reserved.delete(holder);
      b.leases.delete(holder);
    }
    for (const [entry, [bytes, expires]] of b.kept) {
      if (expires > now) continue;
      b.keptBytes -= bytes;
      b.kept.delete(entry);
    }
    return b;
  }

  /** Reserves bytes, evicting the oldest kept entries for room. */
  budgetReserve(
    budget: BudgetKey,
    options: { holder: string; bytes: number; max: number; leaseMs: number },
  ): Promise<boolean> {
    this.#op();
    const now = Date.now();
    const b = this.#budget(budget, now);
    if (b.reservedBytes + options.bytes > options.max) return Promise.resolve(false);
    for (const [entry, [bytes]] of b.kept) {
      if (b.keptBytes + b.reservedBytes + options.bytes <= options.max) break;
      b.kept.delete(entry);
      b.keptBytes -= bytes;
      for (const prefix of budget.entryPrefixes) this.#slots.delete(prefix + entry);
    }
    b.reserved.set(options.holder, (b.reserved.get(options.holder) ?? 0) + options.bytes);
    b.leases.set(options.holder, now + options.leaseMs);
    b.reservedBytes += options.bytes;
    return Promise.resolve(true);
  }

  /** Turns reserved bytes into a kept entry. */
  budgetKeep(
    budget: BudgetKey,
    options: { holder: string; entry: string; bytes: number; ttlMs: number },
  ): Promise<number> {
    this.#op();
    const now = Date.now();
    const b = this.#budget(budget, now);
    release(b, options.holder, options.bytes);
    const expires = now + options.ttlMs;
    b.kept.set(options.entry, [options.bytes, expires]);
    b.keptBytes += options.bytes;
    return Promise.resolve(expires);
  }

  /** Gives back reserved bytes. */
  budgetRelease(budget: BudgetKey, holder: string, bytes?: number): Promise<void> {
    this.#op();
    release(this.#budget(budget, Date.now()), holder, bytes);
    return Promise.resolve();
  }

  /** What the budget holds. */
  budgetUse(budget: BudgetKey): Promise<BudgetUse> {
    this.#op();
    const b = this.#budget(budget, Date.now());
    return Promise.resolve({ kept: b.keptBytes, reserved: b.reservedBytes });
  }

  /** Drops everything. */
  close(): Promise<void> {
    this.#closed = true;
    this.#slots.clear();
    return Promise.resolve();
  }
}

function ordered(set: Map<string, number> | undefined): Scored[] {
  // Ties in member order, as Redis orders equal scores.
  return set ? [...set].sort((a, b) => a[1] - b[1] || (a[0] < b[0] ? -1 : 1)) : [];
}

function release(b: Budget, holder: string, bytes?: number): void {
  const have = b.reserved.get(holder) ?? 0;
  const given = Math.min(have, bytes ?? have);
  b.reservedBytes -= given;
  if (have - given > 0) b.reserved.set(holder, have - given);
  else {
    b.reserved.delete(holder);
    b.leases.delete(holder);
  }
}
