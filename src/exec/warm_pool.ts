/**
 * A pool of pre-started, single-use sandbox children.
 *
 * @module
 */
import type { Logger } from "../log.ts";

/** What the pool needs from a child. */
export interface PooledChild {
  /** Whether the process has died (such a child is discarded). */
  readonly exited: boolean;
  /** Kills the child and removes its files. */
  dispose(): Promise<void>;
}

const RETRY_AFTER_FAILURE_MS = 5_000;

/**
 * Keeps up to `size` children started ahead of need. Each is handed out once; the pool refills
 * in the background.
 */
export class WarmPool<T extends PooledChild> {
  #size: number;
  #spawn: () => Promise<T>;
  #log: Logger;
  #idle: T[] = [];
  #spawning = 0;
  #closed = false;
  #failedAt = 0;
  #inflight = new Set<Promise<void>>();
  #retiring = new Set<Promise<void>>();
  #generation = 0;
  #waiting = 0;

  /**
   * Creates an empty pool; children are started by {@linkcode WarmPool.fill}, not here.
   *
   * @param size How many idle children to keep; 0 disables the pool.
   * @param spawn Starts one child.
   * @param log Where spawn failures are reported.
   */
  constructor(size: number, spawn: () => Promise<T>, log: Logger) {
    this.#size = size;
    this.#spawn = spawn;
    this.#log = log;
  }

  /** Number of idle children right now. */
  get idle(): number {
    return this.#idle.length;
  }

  /**
   * Hands out an idle child, if there is one. The caller refills the pool with
   * {@linkcode WarmPool.fill} once its run is over, so that starting a new child does not
   * compete for the CPU with the run it is replacing.
   *
   * @returns A child that has not run anything, or undefined.
   */
  take(): T | undefined {
    let child: T | undefined;
    while ((child = this.#idle.shift()) && child.exited) void child.dispose();
    return child;
  }

  /**
   * Hands out an idle child or, when there is none but children are starting, the first one to
   * become idle. A run that arrives while the pool boots (just after start-up, or during a
   * refill) waits for a child that has a head start instead of booting one more on the same
   * CPUs. No more callers wait than children are starting: the others get undefined at once and
   * start their own, so that a burst still uses every CPU.
   *
   * @param signal Ends the wait; a child that arrives later stays in the pool.
   * @returns A child that has not run anything, or undefined when none is idle or starting for
   * this caller, or when `signal` aborts first.
   */
  async takeOrWait(signal?: AbortSignal): Promise<T | undefined> {
    let child = this.take();
    if (child || this.#waiting >= this.#inflight.size) return child;
    this.#waiting++;
    try {
      while (!child && this.#inflight.size > 0 && !signal?.aborted) {
        const aborted = Promise.withResolvers<void>();
        const onAbort = () => aborted.resolve();
        signal?.addEventListener("abort", onAbort, { once: true });
        try {
          await Promise.race([Promise.race(this.#inflight), aborted.promise]);
        } finally {
          signal?.removeEventListener("abort", onAbort);
        }
        if (!signal?.aborted) child = this.take();
      }
    } finally {
      this.#waiting--;
    }
    return child;
  }

  /** Starts children in the background until the pool is full. */
  fill(): void {
    if (this.#closed || Date.now() - this.#failedAt < RETRY_AFTER_FAILURE_MS) return;
    while (this.#idle.length + this.#spawning < this.#size) {
      this.#spawning++;
      const generation = this.#generation;
      const job = this.#spawn().then(
        (child) => {
          if (this.#closed || generation !== this.#generation) return child.dispose();
          this.#idle.push(child);
        },
        (error: Error) => {
          this.#failedAt = Date.now();
          if (!this.#closed) this.#log.warn(`Cannot pre-start a sandbox child: ${error.message}`);
        },
      ).finally(() => {
        this.#spawning--;
        this.#inflight.delete(job);
        // A child started before drain() was discarded: start its replacement.
        if (generation !== this.#generation) this.fill();
      });
      this.#inflight.add(job);
    }
  }

  /**
   * Replaces every child started so far: the idle ones are disposed, those still starting will
   * be, and the pool refills with children that the spawn function starts from now on (after the
   * options it starts them with changed).
   */
  drain(): void {
    this.#generation++;
    for (const child of this.#idle.splice(0)) {
      const job = child.dispose().catch((error: Error) => {
        this.#log.warn(`Cannot clean up a sandbox child: ${error.message}`);
      }).finally(() => this.#retiring.delete(job));
      this.#retiring.add(job);
    }
    this.fill();
  }

  /** Waits until every started child is idle in the pool (used by benchmarks and tests). */
  async settled(): Promise<void> {
    while (this.#inflight.size > 0) await Promise.all(this.#inflight);
  }

  /** Disposes every idle child and stops refilling. */
  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all(this.#inflight);
    const idle = this.#idle.splice(0);
    await Promise.all([...idle.map((child) => child.dispose()), ...this.#retiring]);
  }
}
