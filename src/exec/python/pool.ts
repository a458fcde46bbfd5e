/**
 * Python children ready for a run: the warm pool's, which have run nothing yet, and the children
 * kept for the caller (principal) they served, each with a fresh interpreter booted for its next
 * run. A child serves runs of one principal only; the pool's target counts both kinds.
 *
 * @module
 */
import type { Logger } from "../../log.ts";
import type { ChildReaper } from "../child/reaper.ts";
import { type PoolDemand, WarmPool } from "../child/warm_pool.ts";
import type { PyChild } from "./child.ts";

/** A child kept for its principal. */
interface Kept {
  child: PyChild;
  principal: string;
  state: "running" | "recycling" | "ready";
  /** A lease waits for this recycling child (no other may take it). */
  claimed: boolean;
  /** When it became ready, for trimming the longest idle first. */
  since: number;
  /** The wheels' generation it was started with: an older one is not reused. */
  generation: number;
  /** Settles when the recycle does. */
  recycled?: Promise<boolean>;
}

/** What the pool needs to start and dispose of children. */
export interface PyPoolOptions {
  /** Children kept ready (`python.warmPool`). */
  size: number;
  /** Growth under demand (`python.warmPoolBurst`, `python.warmPoolIdleMs`). */
  demand: PoolDemand;
  /** Starts a ready child that has run nothing. */
  spawn: () => Promise<PyChild>;
  /** Disposes used children off the response path. */
  reaper: ChildReaper;
  /** Where to report problems. */
  log: Logger;
}

/**
 * The Python children that are ready for runs. A lease takes, in this order: a child kept for the
 * principal with a fresh interpreter, one of the warm pool's, the principal's child that is
 * still booting its next interpreter, one the warm pool is starting, or none (the caller starts
 * one). After its run, a child boots its next interpreter for the same principal
 * ({@linkcode PyChild.recycle}) or, when it cannot, is disposed of.
 */
export class PyPool {
  #warm: WarmPool<PyChild>;
  #kept = new Set<Kept>();
  #reaper: ChildReaper;
  #generation = 0;
  #closed = false;

  /**
   * Creates an empty pool; {@linkcode PyPool.fill} starts its children.
   *
   * @param options Size, demand, how to start children and where used ones go.
   */
  constructor(options: PyPoolOptions) {
    this.#reaper = options.reaper;
    this.#warm = new WarmPool(options.size, options.spawn, options.log, options.demand, {
      // A child in a run comes back with a fresh interpreter, or is retired and the pool refilled
      // then: starting a spare while it runs would be a second child for one caller.
      ready: () => this.#kept.size,
      trim: (keep) => this.#trim(keep),
    });
  }

  /** Interpreters ready for a run now: the warm pool's and the kept children's. */
  get idle(): number {
    return this.#warm.idle + [...this.#kept].filter((kept) => kept.state === "ready").length;
  }

  /** How many interpreters the pool keeps ready now: its size, or more during a burst. */
  get target(): number {
    return this.#warm.target;
  }

  /** Children kept for their principal, in any state. */
  get kept(): number {
    return this.#kept.size;
  }

  /** Starts children in the background until the pool is full. */
  fill(): void {
    this.#warm.fill();
  }

  /**
   * Hands out a child that has run nothing yet, if the warm pool has one idle (benchmarks).
   *
   * @returns The child, or undefined.
   */
  take(): PyChild | undefined {
    return this.#warm.take();
  }

  /**
   * Leases a ready child for a run of `principal`.
   *
   * @param principal Who runs.
   * @param signal Ends a wait for a child that is booting.
   * @returns The child, or undefined when none is coming or `signal` ended the wait (the caller
   *   starts one and calls {@linkcode PyPool.adopt}, or gives up). Either way, the caller calls
   *   {@linkcode PyPool.release} or {@linkcode PyPool.returned} once, after the run.
   */
  async lease(principal: string, signal: AbortSignal): Promise<PyChild | undefined> {
    while (!signal.aborted) {
      const ready = this.#find(principal, "ready");
      if (ready) {
        ready.state = "running";
        this.#warm.served();
        return ready.child;
      }
      const idle = this.#warm.take();
      if (idle) {
        this.#warm.served();
        return this.#bind(idle, principal).child;
      }
      // The principal's own child, booting its next interpreter, is the one coming soonest.
      const recycling = this.#find(principal, "recycling", false);
      if (!recycling) break;
      recycling.claimed = true;
      try {
        await untilSettledOrAborted(recycling.recycled, signal);
      } finally {
        recycling.claimed = false;
      }
    }
    if (signal.aborted) {
      this.#warm.served();
      return undefined;
    }
    const pooled = await this.#warm.takeOrWait(signal);
    return pooled ? this.#bind(pooled, principal).child : undefined;
  }

  /** Ends a lease that got no child to release (its start failed, or its wait ended). */
  returned(): void {
    this.#warm.returned();
  }

  /**
   * Counts a child started for a run (none was ready) as the principal's.
   *
   * @param child The child.
   * @param principal Who runs in it.
   */
  adopt(child: PyChild, principal: string): void {
    this.#bind(child, principal);
  }

  /**
   * After a run: the child boots its next interpreter and stays the principal's, or is disposed
   * of when it cannot serve another run.
   *
   * @param child The child the run had.
   */
  release(child: PyChild): void {
    this.#warm.returned();
    const kept = [...this.#kept].find((entry) => entry.child === child);
    // Booting its next interpreter only to dispose of it would be a boot for nothing.
    const others = this.#kept.size - (kept ? 1 : 0);
    const wanted = others + this.#warm.idle + this.#warm.starting < this.#warm.target;
    if (!kept || !wanted || this.#closed || kept.generation !== this.#generation) {
      if (kept) this.#kept.delete(kept);
      this.#retire(child);
      return;
    }
    kept.state = "recycling";
    kept.recycled = child.recycle().then(
      (ok) => ok && !this.#closed && kept.generation === this.#generation,
      () => false,
    ).then((ok) => {
      if (!ok) {
        this.#kept.delete(kept);
        this.#retire(child);
      } else {
        kept.state = "ready";
        kept.since = performance.now();
        this.#trim(Math.max(0, this.#warm.target - this.#warm.idle - this.#warm.starting));
      }
      return ok;
    });
  }

  /**
   * Replaces every child started so far (the wheels changed): idle ones are disposed of, those
   * in use are after their run.
   */
  drain(): void {
    this.#generation++;
    for (const kept of [...this.#kept]) {
      if (kept.state !== "ready") continue;
      this.#kept.delete(kept);
      this.#retire(kept.child);
    }
    this.#warm.drain();
  }

  /** Waits until no child is booting (tests and benchmarks). */
  async settled(): Promise<void> {
    while (true) {
      await this.#warm.settled();
      const recycling = [...this.#kept].filter((kept) => kept.state === "recycling");
      if (recycling.length === 0) return;
      await Promise.all(recycling.map((kept) => kept.recycled));
    }
  }

  /**
   * Disposes of every idle and kept child, and of those booting their next interpreter, and
   * stops refilling; children in a run are the reaper's.
   */
  async close(): Promise<void> {
    this.#closed = true;
    const kept = [...this.#kept].filter((entry) => entry.state !== "running");
    for (const entry of kept) this.#kept.delete(entry);
    await Promise.all([
      this.#warm.close(),
      ...kept.map((entry) => entry.child.dispose()),
      ...kept.map((entry) => entry.recycled),
    ]);
  }

  #bind(child: PyChild, principal: string): Kept {
    const kept: Kept = {
      child,
      principal,
      state: "running",
      claimed: false,
      since: performance.now(),
      generation: this.#generation,
    };
    this.#kept.add(kept);
    return kept;
  }

  #find(principal: string, state: Kept["state"], claimed?: boolean): Kept | undefined {
    for (const kept of this.#kept) {
      if (kept.principal !== principal || kept.state !== state) continue;
      if (claimed !== undefined && kept.claimed !== claimed) continue;
      if (kept.generation === this.#generation) return kept;
    }
    return undefined;
  }

  /** Disposes of ready kept children until at most `keep` are kept, the longest idle first. */
  #trim(keep: number): void {
    const ready = [...this.#kept].filter((kept) => kept.state === "ready")
      .sort((a, b) => a.since - b.since);
    for (const kept of ready.slice(0, Math.max(0, this.#kept.size - keep))) {
      this.#kept.delete(kept);
      this.#retire(kept.child);
    }
  }

  #retire(child: PyChild): void {
    if (this.#closed) void child.dispose();
    else this.#reaper.retire(child, () => this.#warm.fill());
  }
}

async function untilSettledOrAborted(
  settles: Promise<unknown> | undefined,
  signal: AbortSignal,
): Promise<void> {
  const aborted = Promise.withResolvers<void>();
  const onAbort = () => aborted.resolve();
  signal.addEventListener("abort", onAbort, { once: true });
  try {
    await Promise.race([settles, aborted.promise]);
  } finally {
    signal.removeEventListener("abort", onAbort);
  }
}
