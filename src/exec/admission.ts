/**
 * Admission control: what a run must pass before a sandbox is given to it (code size, timeout,
 * LLM caps, executions per minute), and the concurrency limit with its bounded queue.
 *
 * @module
 */
import type { Settings } from "../config/settings.ts";
import { RateLimiter } from "../policy/tool_policy.ts";
import { CodeExecutorError } from "../errors.ts";

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

/** Concurrency slots with a bounded queue of waiters. */
class Slots {
  #free: number;
  #maxQueued: number;
  #waiting: Array<() => void> = [];

  constructor(max: number, maxQueued: number) {
    this.#free = max;
    this.#maxQueued = maxQueued;
  }

  async acquire(signal?: AbortSignal): Promise<Release> {
    if (this.#free > 0) {
      this.#free--;
      return this.#releaser();
    }
    if (this.#waiting.length >= this.#maxQueued) {
      throw new CodeExecutorError(
        "QueueFullError",
        `Too many executions: ${this.#waiting.length} are already queued (limits.maxQueued); retry when earlier runs finish, or ask the admin to raise limits.maxConcurrent`,
      );
    }
    await new Promise<void>((resolve, reject) => {
      const grant = () => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      };
      const onAbort = () => {
        this.#waiting = this.#waiting.filter((w) => w !== grant);
        reject(new CodeExecutorError("Cancelled", "The execution was cancelled while queued"));
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#waiting.push(grant);
    });
    return this.#releaser();
  }

  #releaser(): Release {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.#waiting.shift();
      if (next) next();
      else this.#free++;
    };
  }
}

/**
 * Decides whether a run may start and when: the admin's limits on one run, the rate of
 * executions, and how many run at once (the rest wait in a bounded queue).
 */
export class Admission {
  #settings: Settings;
  #slots: Slots;
  #starts: RateLimiter;

  /**
   * Sets up the slots, queue and rate window from the admin's limits; nothing runs yet.
   *
   * @param settings The admin's settings (`limits`, `sampling`).
   */
  constructor(settings: Settings) {
    this.#settings = settings;
    this.#slots = new Slots(settings.limits.maxConcurrent, settings.limits.maxQueued);
    this.#starts = new RateLimiter(settings.limits.executionsPerMinute);
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
   * Takes one start from the executions-per-minute budget, then waits for a free slot.
   *
   * @param signal Aborting it leaves the queue.
   * @returns The slot; call it to release.
   * @throws {CodeExecutorError} Over the rate, with the queue full, or when cancelled.
   */
  async enter(signal?: AbortSignal): Promise<Release> {
    const wait = this.#starts.take("executions");
    if (wait !== undefined) {
      throw new CodeExecutorError(
        "RateLimitError",
        `Too many executions: the admin allows ${this.#settings.limits.executionsPerMinute} per minute (limits.executionsPerMinute); retry in ${
          Math.ceil(wait / 1000)
        } s`,
      );
    }
    return await this.#slots.acquire(signal);
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
