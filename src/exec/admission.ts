/**
 * Admission control: what a run must pass before a sandbox is given to it (code size, timeout,
 * LLM caps, executions per minute), and the concurrency limit with its bounded queue.
 *
 * @module
 */
import type { Settings } from "../config/settings.ts";
import { RateLimiter } from "../policy/tool_policy.ts";
import { cancelled, CodeExecutorError } from "../errors.ts";
import { principalShare } from "../principals.ts";

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

/**
 * Decides whether a run may start and when: the admin's limits on one run, the rate of
 * executions, and how many run at once (the rest wait in a bounded queue).
 */
export class Admission {
  #settings: Settings;
  #slots: FairSlots;
  #starts: RateLimiter;
  #principalStarts: RateLimiter;

  /**
   * Sets up the slots, queue and rate window from the admin's limits; nothing runs yet.
   *
   * @param settings The admin's settings (`limits`, `sampling`).
   */
  constructor(settings: Settings) {
    this.#settings = settings;
    const limits = settings.limits;
    this.#slots = new FairSlots(
      limits.maxConcurrent,
      limits.maxQueued,
      limits.principalMaxConcurrent,
    );
    this.#starts = new RateLimiter(limits.executionsPerMinute);
    this.#principalStarts = new RateLimiter(limits.principalExecutionsPerMinute);
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
   * then waits for a free slot.
   *
   * @param principal Who runs: `local` on stdio, the token's principal over HTTP.
   * @param signal Aborting it leaves the queue.
   * @returns The slot; call it to release.
   * @throws {CodeExecutorError} Over a rate, with the principal's queue full, or when cancelled.
   */
  async enter(principal: string, signal?: AbortSignal): Promise<Release> {
    const own = this.#principalStarts.take(principal);
    if (own !== undefined) {
      throw new CodeExecutorError(
        "RateLimitError",
        `Too many executions: the admin allows ${this.#settings.limits.principalExecutionsPerMinute} per minute per caller (limits.principalExecutionsPerMinute); retry in ${
          Math.ceil(own / 1000)
        } s`,
      );
    }
    const wait = this.#starts.take("executions");
    if (wait !== undefined) {
      throw new CodeExecutorError(
        "RateLimitError",
        `Too many executions: the admin allows ${this.#settings.limits.executionsPerMinute} per minute (limits.executionsPerMinute); retry in ${
          Math.ceil(wait / 1000)
        } s`,
      );
    }
    return await this.#slots.acquire(principal, signal);
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
