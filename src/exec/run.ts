/**
 * One run's own types: what a caller of the executor chooses for it (its limits within the
 * admin's, its tools, its permissions, its client and its principal), the {@linkcode RunHold}
 * that pauses it while a person or a client is asked, and the {@linkcode RunContext} its
 * requests are served in, built once when it starts.
 *
 * @module
 */
import type { Logger } from "../log.ts";
import type { Metrics } from "../metrics.ts";
import type { AuditLog } from "../policy/audit.ts";
import type { RequestedPermissions } from "../policy/permissions.ts";
import type { StdoutTokenizer } from "../privacy/stream.ts";
import type { RunTokenizer } from "../privacy/tokenizer.ts";
import type { ClientChannel } from "../sampling/channel.ts";
import type { SkillLanguage, SkillRecord, SkillStore } from "../skills/store.ts";
import type { SharedState } from "../state/shared_state.ts";
import type { Hub } from "../upstream/hub.ts";
import type { AdmittedLimits } from "./admission.ts";
import type { OutputKeeper } from "./output_store.ts";
import type { Lease } from "./runtime.ts";

/**
 * Holds a run while the host waits for a person (an approval): its deadline stops counting and
 * its process is stopped (SIGSTOP), so that the wait neither counts against `timeoutMs` nor
 * gives the code time to work unmetered. Holds nest; the run goes on when the last ends. A run
 * that calls a skill in the other language has two processes under one hold: the caller's and the
 * nested run's, so a hold stops every attached target.
 */
export class RunHold {
  #holds = 0;
  #targets = new Set<{ stop(): void; go(): void }>();
  #heldMs = 0;
  #since = 0;

  /**
   * Connects a running execution (called by it).
   *
   * @param target Stops and restarts its clock and process.
   * @returns Disconnects it again.
   */
  attach(target: { stop(): void; go(): void }): () => void {
    this.#targets.add(target);
    if (this.#holds > 0) target.stop();
    return () => {
      if (this.#targets.delete(target) && this.#holds > 0) target.go();
    };
  }

  /** Milliseconds the run has been held so far, the current hold included. */
  get heldMs(): number {
    return this.#heldMs + (this.#holds > 0 ? performance.now() - this.#since : 0);
  }

  /**
   * Runs `work` with the run held.
   *
   * @param work The wait, for example a question to the client.
   * @returns What `work` returns.
   */
  async during<T>(work: () => Promise<T>): Promise<T> {
    if (this.#holds++ === 0) {
      this.#since = performance.now();
      for (const target of this.#targets) target.stop();
    }
    try {
      return await work();
    } finally {
      if (--this.#holds === 0) {
        this.#heldMs += performance.now() - this.#since;
        for (const target of this.#targets) target.go();
      }
    }
  }
}

/** Options of one run. */
export interface RunOptions {
  /** Wall-clock limit; defaults to `limits.timeoutMs`, at most `limits.maxTimeoutMs`. */
  timeoutMs?: number;
  /** Extra permissions, narrowed against the admin's settings. */
  permissions?: RequestedPermissions;
  /** Globs of upstream tools the code may call, narrowing the admin's `tools.allow`. */
  allowedTools?: string[];
  /** Aborting it cancels the run, queued or running. */
  signal?: AbortSignal;
  /** The MCP client of the tool call: its model, its user, its progress token. */
  client?: ClientChannel;
  /** Lower LLM caps for this run; each at most the admin's `sampling` value. */
  sampling?: { maxRounds?: number; maxTokens?: number };
  /** Who runs: `local` (the default) on stdio, the token's principal over HTTP. */
  principal?: string;
  /** Held while the run waits for a person or a client (a parked run's); a fresh one otherwise. */
  hold?: RunHold;
}

/** Options of a Python run. */
export interface PythonRunOptions extends Omit<RunOptions, "permissions"> {
  /** Keep the interpreter under this id for later runs (globals persist); fresh when omitted. */
  session?: string;
}

/** Options of {@linkcode Executor}. */
export interface ExecutorOptions {
  /** Where to report problems. */
  log: Logger;
  /** Upstream MCP servers the code may call; none when omitted. */
  hub?: Hub;
  /** Where executions and tool calls are recorded; nothing is recorded when omitted. */
  audit?: AuditLog;
  /**
   * Saved skills: the in-sandbox `skills` API saves, lists and calls them, and `searchTools` finds
   * them beside the tools; without it the API fails.
   */
  skills?: SkillStore;
  /**
   * Whether to fill the warm pools at the start (the default); `prepare` starts an executor
   * without them.
   */
  warmPools?: boolean;
  /**
   * What replicas share (`openSharedState`): with a store of its own (`state.url`), placeholders,
   * kept outputs, pending approvals and the limits across replicas are kept there; in-process
   * state, or none, keeps them in this process as on one machine. The executor keys parked runs'
   * `requestState` with its keys unless `approvals.stateKey` is set.
   */
  shared?: SharedState;
  /** Where runs are counted (`/metrics`); nowhere when omitted. */
  metrics?: Metrics;
}

/** One admitted run, as its requests are served: built once, when its child is leased. */
export interface RunContext {
  /** The run's id in the audit log. */
  executionId: string;
  /** The language of the caller's code. */
  language: SkillLanguage;
  /** Who runs. */
  principal: string;
  /** Aborted when the run ends, is cancelled or the server shuts down: its requests stop. */
  signal: AbortSignal;
  /** Its timeout and LLM caps, within the admin's. */
  limits: AdmittedLimits;
  /** Holds the run, and every nested run of it, while a person or a client is asked. */
  hold: RunHold;
  /** The MCP client of the tool call; none for command-line runs. */
  client?: ClientChannel;
  /** Globs of upstream tools the code may call (`RunOptions.allowedTools`). */
  allowedTools?: string[];
  /** Placeholders for personal data (`privacy.tokenize`), bound to the principal. */
  tokenizer?: RunTokenizer;
  /** The principal's share of the kept outputs (`readOutput`). */
  outputs: OutputKeeper;
  /** What is left of the run's time. */
  remainingMs(): number;
  /** Leases a child for a skill in the other language (a nested run), with the caller's grants. */
  lease(skill: SkillRecord, args: Record<string, unknown>, timeoutMs: number): Promise<Lease>;
  /** The reply fields that run a skill's body in a child of the skill's language. */
  inline(skill: SkillRecord): Record<string, unknown>;
}

/** One run as its caller started it. */
export interface RunStart {
  /** Its language. */
  language: SkillLanguage;
  /** The code. */
  code: string;
  /** What its caller asked for. */
  options: PythonRunOptions & RunOptions;
  /** Its id in the audit log. */
  executionId: string;
  /** Who runs it. */
  principal: string;
  /** Placeholders for personal data (`privacy.tokenize`), bound to the run's principal. */
  tokenizer?: RunTokenizer;
  /** Detects personal data in the run's stdout while it prints. */
  stdout?: StdoutTokenizer;
}

/** The runs in progress (queued ones included), and a wait until there are none (a drain). */
export class InFlight {
  #count = 0;
  #settled: Array<() => void> = [];

  /** How many runs are in progress. */
  get count(): number {
    return this.#count;
  }

  /** A run begins. */
  enter(): void {
    this.#count++;
  }

  /** A run has ended; the last one wakes every {@linkcode InFlight.settle}. */
  leave(): void {
    if (--this.#count === 0) { for (const resolve of this.#settled.splice(0)) resolve(); }
  }

  /**
   * Waits until no run is in progress.
   *
   * @param timeoutMs The longest wait.
   * @returns Whether every run finished in time.
   */
  async settle(timeoutMs: number): Promise<boolean> {
    if (this.#count === 0) return true;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const done = new Promise<boolean>((resolve) => this.#settled.push(() => resolve(true)));
    const late = new Promise<boolean>((resolve) =>
      timer = setTimeout(() => resolve(false), timeoutMs)
    );
    try {
      return await Promise.race([done, late]);
    } finally {
      clearTimeout(timer);
    }
  }
}
