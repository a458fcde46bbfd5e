/**
 * Used children on their way out: each is disposed a moment after its run's result, once the
 * response is out, and every child still leased is killed when the executor closes.
 *
 * @module
 */
import type { Logger } from "../../log.ts";

/** What the reaper needs of a child. */
export interface ReapedChild {
  /** Kills the child and removes its files. */
  dispose(): Promise<void>;
}

/**
 * How long the disposal of a run's child waits after the result: the response still has to reach
 * the client (the server's write, the client's read and checks, 1-3 ms). A macrotask later was
 * too soon: the killed child's teardown ran beside the response and slowed a warm call by ~1.5 ms
 * on 2 CPUs.
 */
const RETIRE_AFTER_MS = 10;

/** The children leased to runs, and the disposals of used ones. */
export class ChildReaper {
  #log: Logger;
  #active = new Set<ReapedChild>();
  #disposing = new Set<Promise<unknown>>();

  /**
   * Creates a reaper with nothing to reap.
   *
   * @param log Where a failed disposal is reported.
   */
  constructor(log: Logger) {
    this.#log = log;
  }

  /**
   * Counts a child as leased: {@linkcode ChildReaper.close} kills it if it is still out.
   *
   * @param child The leased child.
   */
  track(child: ReapedChild): void {
    this.#active.add(child);
  }

  /**
   * Disposes a used child off the response path, once the response is out (a used TypeScript
   * child sleeps until then), so that the kill and the teardown do not compete with it for the
   * CPUs. {@linkcode ChildReaper.idle} waits for it.
   *
   * @param child The used child.
   * @param after What to do once it is gone (refill a pool).
   */
  retire(child: ReapedChild, after: () => unknown): void {
    const job = new Promise<void>((resolve) => setTimeout(resolve, RETIRE_AFTER_MS))
      .then(() => child.dispose())
      .then(after)
      .catch((error) => this.#log.warn(`Cannot clean up a sandbox: ${(error as Error).message}`))
      .finally(() => {
        this.#active.delete(child);
        this.#disposing.delete(job);
      });
    this.#disposing.add(job);
  }

  /** Waits until every used child has been disposed. */
  async idle(): Promise<void> {
    while (this.#disposing.size > 0) await Promise.all(this.#disposing);
  }

  /** Kills every child still leased, then waits for the disposals. */
  async close(): Promise<void> {
    await Promise.all([...this.#active].map((child) => child.dispose()));
    await this.idle();
  }
}
