/**
 * Per-principal limits counted across replicas: executions per minute
 * (`limits.principalExecutionsPerMinute`, `limits.executionsPerMinute`) and the concurrency share
 * (`limits.principalMaxConcurrent`).
 *
 * The rate is the sliding minute of `RateLimiter` (src/policy/tool_policy.ts): at most N starts in
 * any 60 s, refused starts not counted, and the refusal says when the oldest start leaves the
 * window. rate-limiter-flexible (11.4.0) was tried for it under Deno 2.9.6 with ioredis: it
 * imports and shares one count through two clients, but counts a fixed window from the first
 * start, which let 6 starts through within ~1 s with a limit of 3 per second across a window's
 * edge; the sliding window here is one short script (`lua/window_take.lua`).
 *
 * The concurrency share is a set of leases per principal, each renewed while its run goes on: a
 * replica that dies stops renewing, and its runs' leases expire instead of holding the
 * principal's share forever (which counting slots up and down could not tell).
 *
 * @module
 */
import type { StateKeys } from "./keys.ts";
import type { StateStore } from "./store.ts";

/** A sliding one-minute window of starts per key, shared by replicas. */
export class SharedRate {
  readonly #store: StateStore;
  readonly #keys: StateKeys;
  readonly #perMinute: number;
  readonly #scope: string;

  /**
   * Creates a window; nothing is counted yet.
   *
   * @param store Where the starts are counted.
   * @param keys The keys that name what is counted.
   * @param options `perMinute` (0 is unlimited) and `scope`, which keeps two windows over the
   *   same keys apart (`principal`, `server`).
   */
  constructor(store: StateStore, keys: StateKeys, options: { perMinute: number; scope: string }) {
    this.#store = store;
    this.#keys = keys;
    this.#perMinute = options.perMinute;
    this.#scope = options.scope;
  }

  /**
   * Records a start if the window allows it.
   *
   * @param key Whose starts (a principal; the scope's one key for a server-wide limit).
   * @returns Undefined when allowed, else the ms until a start would be allowed.
   * @throws {CodeExecutorError} `StateUnavailable`: no start is allowed without the count.
   */
  async take(key: string): Promise<number | undefined> {
    if (this.#perMinute <= 0) return undefined;
    const name = `ce:l:r:${await this.#keys.index("rate", this.#scope, key)}`;
    return await this.#store.windowTake(name, { limit: this.#perMinute, windowMs: 60_000 });
  }
}

/** A run's place in its principal's share, renewed until it is released. */
export interface ShareHold {
  /** False once a renewal found the lease gone (the store restarted or was away too long). */
  readonly held: boolean;
  /** Gives the place back and stops renewing; safe to call twice. */
  release(): Promise<void>;
}

/** Options of {@linkcode ConcurrencyShare}. */
export interface ConcurrencyShareOptions {
  /** Runs one principal may have at once across replicas; 0 is unlimited. */
  max: number;
  /** How long a lease lives without renewal; it is renewed every third of it. */
  leaseMs: number;
}

/** How many runs each principal has at once across replicas. */
export class ConcurrencyShare {
  readonly #store: StateStore;
  readonly #keys: StateKeys;
  readonly #options: ConcurrencyShareOptions;

  /**
   * Creates the share.
   *
   * @param store Where the leases are.
   * @param keys The keys that name principals.
   * @param options The cap and the lease's life.
   */
  constructor(store: StateStore, keys: StateKeys, options: ConcurrencyShareOptions) {
    this.#store = store;
    this.#keys = keys;
    this.#options = options;
  }

  /**
   * Takes a place for one run if the principal has fewer than `max` runs across replicas; the
   * place is renewed in the background (an unref'd timer) until released.
   *
   * @param principal Who runs.
   * @returns The hold, or undefined when the principal's share is used up.
   * @throws {CodeExecutorError} `StateUnavailable`: no run starts without its place.
   */
  async take(principal: string): Promise<ShareHold | undefined> {
    const { max, leaseMs } = this.#options;
    if (max <= 0) return { held: true, release: () => Promise.resolve() };
    const key = `ce:l:c:${await this.#keys.index("principal", principal)}`;
    const holder = crypto.randomUUID();
    if (!await this.#store.leaseTake(key, { holder, max, ttlMs: leaseMs })) return undefined;
    const store = this.#store;
    let released = false;
    const hold = {
      held: true,
      async release(): Promise<void> {
        if (released) return;
        released = true;
        clearInterval(timer);
        await store.leaseDrop(key, holder);
      },
    };
    const timer = setInterval(() => {
      // A renewal that fails while the store is away is tried again at the next tick; the run
      // it belongs to was admitted and goes on.
      store.leaseRenew(key, holder, leaseMs).then((ok) => {
        if (!ok) hold.held = false;
      }, () => {});
    }, Math.max(10, Math.floor(leaseMs / 3)));
    Deno.unrefTimer(timer);
    return hold;
  }
}
