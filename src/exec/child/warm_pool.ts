/**
 * A pool of pre-started, single-use sandbox children.
 *
 * @module
 */
import type { Logger } from "../../log.ts";

/** What the pool needs from a child. */
export interface PooledChild {
  /** Whether the process has died (such a child is discarded). */
  readonly exited: boolean;
  /** Kills the child and removes its files. */
  dispose(): Promise<void>;
}

const RETRY_AFTER_FAILURE_MS = 5_000;

/**
 * Children ready for a run that are kept outside the pool and count toward its target (Python
 * children kept for their caller's next run, each with a fresh interpreter).
 */
export interface PoolOutside {
  /** How many are ready, or will be soon (in a run, or readying for the next). */
  ready(): number;
  /**
   * Disposes of ready ones until at most `keep` are left in any state, the longest idle first:
   * the pool's target went down.
   *
   * @param keep How many may stay.
   */
  trim(keep: number): void;
}

/** How a pool follows demand: it grows under a burst and shrinks back when idle. */
export interface PoolDemand {
  /** Children the pool may keep beyond its size while runs find it empty; 0: it never grows. */
  burst: number;
  /** Time after the last run is over (and no new one) at which the pool shrinks back to its size. */
  idleMs: number;
}

/**
 * Keeps up to `size` children started ahead of need. Each is handed out once; the pool refills
 * in the background. With a {@linkcode PoolDemand}, every {@linkcode WarmPool.takeOrWait} that
 * gets no child (none idle, none starting for it) adds one to the target (at most
 * `size + burst`), so that the next refill boots more children side by side. Once every such
 * caller has said its run is over ({@linkcode WarmPool.returned}) and `idleMs` pass without a
 * new one, the target is `size` again and the extra idle children are disposed.
 */
export class WarmPool<T extends PooledChild> {
  #size: number;
  #target: number;
  #demand: PoolDemand | undefined;
  #idleTimer: ReturnType<typeof setTimeout> | undefined;
  /** Runs that called takeOrWait() and have not called returned() yet. */
  #out = 0;
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
  #outside: PoolOutside | undefined;

  /**
   * Creates an empty pool; children are started by {@linkcode WarmPool.fill}, not here.
   *
   * @param size How many idle children to keep; 0 disables the pool.
   * @param spawn Starts one child.
   * @param log Where spawn failures are reported.
   * @param demand Growth under a burst and shrinking when idle; a fixed size without it.
   * @param outside Children kept ready elsewhere that count toward the target.
   */
  constructor(
    size: number,
    spawn: () => Promise<T>,
    log: Logger,
    demand?: PoolDemand,
    outside?: PoolOutside,
  ) {
    this.#size = size;
    this.#target = size;
    this.#demand = size > 0 && demand && demand.burst > 0 ? demand : undefined;
    this.#spawn = spawn;
    this.#log = log;
    this.#outside = outside;
  }

  /** Number of idle children right now. */
  get idle(): number {
    return this.#idle.length;
  }

  /** Number of children being started right now. */
  get starting(): number {
    return this.#spawning;
  }

  /** How many children the pool keeps now: its size, or more during a burst. */
  get target(): number {
    return this.#target;
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

  /** Grows the target on a miss; any take stops the countdown to the shrink. */
  #follow(missed: boolean): void {
    this.#out++;
    if (missed && !this.#closed) {
      this.#target = Math.min(this.#size + this.#demand!.burst, this.#target + 1);
    }
    clearTimeout(this.#idleTimer);
    this.#idleTimer = undefined;
  }

  /** Back to `size`: idle children beyond it are disposed, oldest first, then those outside. */
  #shrink(): void {
    this.#idleTimer = undefined;
    this.#target = this.#size;
    const outside = this.#outside?.ready() ?? 0;
    const extra = Math.min(this.#idle.length, this.#idle.length + outside - this.#size);
    if (extra > 0) {
      for (const child of this.#idle.splice(0, extra)) this.#retire(child);
    }
    this.#outside?.trim(Math.max(0, this.#size - this.#idle.length));
  }

  #retire(child: T): void {
    const job = child.dispose().catch((error: Error) => {
      this.#log.warn(`Cannot clean up a sandbox child: ${error.message}`);
    }).finally(() => this.#retiring.delete(job));
    this.#retiring.add(job);
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
    const child = await this.#takeOrWait(signal);
    if (this.#demand) this.#follow(child === undefined && !signal?.aborted);
    return child;
  }

  /**
   * Tells the pool that a run got a child from outside it ({@linkcode PoolOutside}): like a take,
   * it stops the countdown to the shrink until {@linkcode WarmPool.returned}.
   */
  served(): void {
    if (this.#demand) this.#follow(false);
  }

  /**
   * Tells the pool that a run which called {@linkcode WarmPool.takeOrWait} or
   * {@linkcode WarmPool.served} is over (whether it got a child or not): when none is left, the
   * countdown to the shrink starts.
   */
  returned(): void {
    if (!this.#demand) return;
    this.#out = Math.max(0, this.#out - 1);
    if (this.#out > 0 || this.#target <= this.#size || this.#closed) return;
    clearTimeout(this.#idleTimer);
    this.#idleTimer = setTimeout(() => this.#shrink(), this.#demand.idleMs);
    Deno.unrefTimer(this.#idleTimer);
  }

  async #takeOrWait(signal?: AbortSignal): Promise<T | undefined> {
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
    while (this.#idle.length + this.#spawning + (this.#outside?.ready() ?? 0) < this.#target) {
      this.#spawning++;
      const generation = this.#generation;
      const job = this.#spawn().then(
        (child) => {
          if (this.#closed || generation !== this.#generation) return child.dispose();
          // Booted for a burst that the pool has since shrunk back from.
          if (this.#idle.length >= this.#target) return child.dispose();
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
    for (const child of this.#idle.splice(0)) this.#retire(child);
    this.fill();
  }

  /** Waits until every started child is idle in the pool (used by benchmarks and tests). */
  async settled(): Promise<void> {
    while (this.#inflight.size > 0) await Promise.all(this.#inflight);
  }

  /** Disposes every idle child and stops refilling. */
  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#idleTimer);
    await Promise.all(this.#inflight);
    const idle = this.#idle.splice(0);
    await Promise.all([...idle.map((child) => child.dispose()), ...this.#retiring]);
  }
}
