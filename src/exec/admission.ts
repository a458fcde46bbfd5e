/**
 * Admission control: what a run must pass before a sandbox is given to it (code size, timeout,
 * LLM caps, executions per minute), and the concurrency limit with its bounded queue.
 *
 * With the shared state store (`state.url`), executions per minute are counted across the
 * replicas, and an HTTP principal's `limits.principalMaxConcurrent` (when the admin set it) holds
 * across them as a lease per run: a run waits, queued, for its place there before it takes a
 * slot here. A limit that is set is never assumed: while the store cannot count it, runs are
 * refused with `StateUnavailable`; limits that are not set need no store.
 *
 * @module
 */
import type { Settings } from "../config/settings.ts";
import { RateLimiter } from "../policy/tool_policy.ts";
import { cancelled, CodeExecutorError } from "../errors.ts";
import { isHttpPrincipal, principalShare } from "../principals.ts";
import type { ConcurrencyShare, SharedRate, ShareHold } from "../state/limits.ts";

/** What a caller asked for, as far as admission is concerned. */
export interface AdmissionRequest {
  /** The wall-clock limit asked for; `limits.timeoutMs` when omitted. */
  timeoutMs?: number;
  /** Lower LLM caps asked for. */
  sampling?: { maxRounds?: number; maxTokens?: number };
}

/** The limits a run was admitted with. */
export interface AdmittedLimits {
  /** Its wall-clock limit. */
  timeoutMs: number;
  /** Its LLM caps: the admin's, lowered by the caller. */
  caps: { maxRounds: number; maxTokens: number };
}

/** A slot held by a running execution; release it when the run ends. */
export type Release = () => void;

interface Waiter {
  principal: string;
  seq: number;
  grant: () => void;
}

/**
 * Concurrency slots shared by every principal, with a bounded queue per principal. A slot that
 * frees goes to the waiting principal with the fewest runs (the longest-waiting among equals), and
 * no HTTP principal holds more than its share (`limits.principalMaxConcurrent`, half the slots by
 * default): a run parked for a client's retry or held for a person keeps its slot for minutes, so
 * one caller's runs could otherwise hold every slot while another waits.
 */
class FairSlots {
  #free: number;
  #maxQueued: number;
  #max: number;
  #principalMax: number;
  #running = new Map<string, number>();
  #waiting: Waiter[] = [];
  #seq = 0;

  constructor(max: number, maxQueued: number, principalMax: number) {
    this.#free = max;
    this.#maxQueued = maxQueued;
    this.#max = max;
    this.#principalMax = principalMax;
  }

  /** A principal's share: its parked and held runs keep their slots, so they count in it. */
  #share(principal: string): number {
    return principalShare(principal, this.#max, this.#principalMax);
  }

  #runs(principal: string): number {
    return this.#running.get(principal) ?? 0;
  }

  /** Runs waiting for a slot. */
  get waiting(): number {
    return this.#waiting.length;
  }

  async acquire(principal: string, signal?: AbortSignal): Promise<Release> {
    if (this.#free > 0 && this.#runs(principal) < this.#share(principal)) {
      return this.#start(principal);
    }
    const queued = this.#waiting.filter((w) => w.principal === principal).length;
    if (queued >= this.#maxQueued) {
      throw new CodeExecutorError(
        "QueueFullError",
        `Too many executions: ${queued} of yours are already queued (limits.maxQueued); retry when earlier runs finish, or ask the admin to raise limits.maxConcurrent`,
      );
    }
    await new Promise<void>((resolve, reject) => {
      const waiter: Waiter = {
        principal,
        seq: this.#seq++,
        grant: () => {
          signal?.removeEventListener("abort", onAbort);
          resolve();
        },
      };
      const onAbort = () => {
        this.#waiting = this.#waiting.filter((w) => w !== waiter);
        reject(cancelled(signal, { during: "while queued" }));
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#waiting.push(waiter);
    });
    return this.#releaser(principal);
  }

  #start(principal: string): Release {
    this.#free--;
    this.#running.set(principal, this.#runs(principal) + 1);
    return this.#releaser(principal);
  }

  #releaser(principal: string): Release {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const runs = this.#runs(principal) - 1;
      if (runs > 0) this.#running.set(principal, runs);
      else this.#running.delete(principal);
      this.#free++;
      this.#grantNext();
    };
  }

  /** Gives free slots to waiters: fewest runs first, then the longest waiting. */
  #grantNext(): void {
    while (this.#free > 0) {
      let next: Waiter | undefined;
      for (const waiter of this.#waiting) {
        const runs = this.#runs(waiter.principal);
        if (runs >= this.#share(waiter.principal)) continue;
        if (!next || runs < this.#runs(next.principal)) next = waiter;
      }
      if (!next) return;
      this.#waiting = this.#waiting.filter((w) => w !== next);
      this.#start(next.principal);
      next.grant();
    }
  }
}

/** The limits counted in the shared state store (`state.url`). */
export interface SharedLimits {
  /** `limits.principalExecutionsPerMinute`, per principal, across replicas. */
  principalRate: SharedRate;
  /** `limits.executionsPerMinute`, across replicas. */
  serverRate: SharedRate;
  /** `limits.principalMaxConcurrent`, per HTTP principal, across replicas. */
  concurrency: ConcurrencyShare;
}

/** The longest pause between two tries for a place in a principal's share across replicas. */
const SHARE_POLL_MAX_MS = 200;

/**
 * Decides whether a run may start and when: the admin's limits on one run, the rate of
 * executions, and how many run at once (the rest wait in a bounded queue).
 */
export class Admission {
  #settings: Settings;
  #slots: FairSlots;
  #starts: RateLimiter;
  #principalStarts: RateLimiter;
  #shared: SharedLimits | undefined;
  /** Runs per principal waiting for a place in their share across replicas. */
  #waitingShare = new Map<string, number>();

  /**
   * Sets up the slots, queue and rate window from the admin's limits; nothing runs yet.
   *
   * @param settings The admin's settings (`limits`, `sampling`).
   * @param shared The limits counted across replicas (`state.url`); this process's otherwise.
   */
  constructor(settings: Settings, shared?: SharedLimits) {
    this.#settings = settings;
    const limits = settings.limits;
    this.#slots = new FairSlots(
      limits.maxConcurrent,
      limits.maxQueued,
      limits.principalMaxConcurrent,
    );
    this.#starts = new RateLimiter(limits.executionsPerMinute);
    this.#principalStarts = new RateLimiter(limits.principalExecutionsPerMinute);
    this.#shared = shared;
  }

  /**
   * Checks one run against the admin's limits.
   *
   * @param code The code to run.
   * @param request The caller's timeout and LLM caps.
   * @returns The limits the run gets.
   * @throws {CodeExecutorError} When the code or a requested limit is over the admin's.
   */
  check(code: string, request: AdmissionRequest): AdmittedLimits {
    const limits = this.#settings.limits;
    const codeBytes = new TextEncoder().encode(code).length;
    if (codeBytes > limits.maxCodeBytes) {
      throw new CodeExecutorError(
        "CodeTooLarge",
        `Code is ${codeBytes} bytes, more than limits.maxCodeBytes (${limits.maxCodeBytes}); send smaller code and read large data through tools or files`,
      );
    }
    const timeoutMs = request.timeoutMs ?? limits.timeoutMs;
    if (timeoutMs > limits.maxTimeoutMs) {
      throw new CodeExecutorError(
        "LimitError",
        `timeoutMs ${timeoutMs} is above the admin's maximum of ${limits.maxTimeoutMs} ms (limits.maxTimeoutMs); pass a smaller timeoutMs`,
      );
    }
    return { timeoutMs, caps: this.#samplingCaps(request.sampling) };
  }

  /**
   * Takes one start from the executions-per-minute budgets (the server's and the principal's),
   * then waits for a free slot (and, across replicas, for a place in the principal's share).
   *
   * @param principal Who runs: `local` on stdio, the token's principal over HTTP.
   * @param signal Aborting it leaves the queue.
   * @returns The slot; call it to release.
   * @throws {CodeExecutorError} Over a rate, with the principal's queue full, or when cancelled;
   *   `StateUnavailable` when a limit counted across replicas cannot be counted.
   */
  async enter(principal: string, signal?: AbortSignal): Promise<Release> {
    const limits = this.#settings.limits;
    const shared = this.#shared;
    const own = shared
      ? await shared.principalRate.take(principal)
      : this.#principalStarts.take(principal);
    if (own !== undefined) {
      throw new CodeExecutorError(
        "RateLimitError",
        `Too many executions: the admin allows ${limits.principalExecutionsPerMinute} per minute per caller (limits.principalExecutionsPerMinute${
          shared ? ", across the replicas" : ""
        }); retry in ${Math.ceil(own / 1000)} s`,
      );
    }
    const wait = shared
      ? await shared.serverRate.take("executions")
      : this.#starts.take("executions");
    if (wait !== undefined) {
      throw new CodeExecutorError(
        "RateLimitError",
        `Too many executions: the admin allows ${limits.executionsPerMinute} per minute (limits.executionsPerMinute${
          shared ? ", across the replicas" : ""
        }); retry in ${Math.ceil(wait / 1000)} s`,
      );
    }
    const place = shared && isHttpPrincipal(principal) && limits.principalMaxConcurrent > 0
      ? await this.#sharePlace(shared.concurrency, principal, signal)
      : undefined;
    try {
      const release = await this.#slots.acquire(principal, signal);
      if (!place) return release;
      return () => {
        release();
        place.release().catch(() => {});
      };
    } catch (error) {
      place?.release().catch(() => {});
      throw error;
    }
  }

  /** Waits, queued, for a place in the principal's share across replicas. */
  async #sharePlace(
    share: ConcurrencyShare,
    principal: string,
    signal?: AbortSignal,
  ): Promise<ShareHold> {
    const first = await share.take(principal);
    if (first) return first;
    const waiting = this.#waitingShare.get(principal) ?? 0;
    const maxQueued = this.#settings.limits.maxQueued;
    if (waiting >= maxQueued) {
      throw new CodeExecutorError(
        "QueueFullError",
        `Too many executions: ${waiting} of yours are already queued (limits.maxQueued) behind limits.principalMaxConcurrent (${this.#settings.limits.principalMaxConcurrent}, across the replicas); retry when earlier runs finish`,
      );
    }
    this.#waitingShare.set(principal, waiting + 1);
    try {
      // Places free on any replica, so this one asks again, sooner at first.
      for (let pause = 10;; pause = Math.min(pause * 2, SHARE_POLL_MAX_MS)) {
        await sleep(pause, signal);
        const hold = await share.take(principal);
        if (hold) return hold;
      }
    } finally {
      const left = (this.#waitingShare.get(principal) ?? 1) - 1;
      if (left > 0) this.#waitingShare.set(principal, left);
      else this.#waitingShare.delete(principal);
    }
  }

  /** Runs waiting for a slot (`limits.maxConcurrent`), every principal's. */
  get queued(): number {
    return this.#slots.waiting;
  }

  /** The LLM caps of one run: the admin's, lowered (never raised) by the caller. */
  #samplingCaps(asked: AdmissionRequest["sampling"]): AdmittedLimits["caps"] {
    const admin = this.#settings.sampling;
    const caps = { maxRounds: admin.maxRounds, maxTokens: admin.maxTokens };
    for (const key of ["maxRounds", "maxTokens"] as const) {
      const value = asked?.[key];
      if (value === undefined) continue;
      if (!Number.isSafeInteger(value) || value < 1) {
        throw new CodeExecutorError(
          "LimitError",
          `sampling.${key} must be a positive integer, got ${value}`,
        );
      }
      if (value > caps[key]) {
        throw new CodeExecutorError(
          "LimitError",
          `sampling.${key} ${value} is above the admin's maximum of ${
            caps[key]
          } (sampling.${key}); pass a smaller value or leave it out`,
        );
      }
      caps[key] = value;
    }
    return caps;
  }
}

/** Waits `ms`, or rejects with `Cancelled` when the signal aborts. */
function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(cancelled(signal, { during: "while queued" }));
    const onAbort = () => {
      clearTimeout(timer);
      reject(cancelled(signal, { during: "while queued" }));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
