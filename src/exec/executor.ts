/**
 * Executions: a run is admitted (admission.ts), given a child by its language's runtime
 * (runtime.ts), served by its requests' bridges (requests/), and recorded (run_audit.ts).
 * Everything that decides what code may do lives on this side.
 *
 * @module
 */
import type { Settings } from "../config/settings.ts";
import { CodeExecutorError } from "../errors.ts";
import type { Logger } from "../log.ts";
import type { Metrics } from "../metrics.ts";
import { explainDenied } from "../policy/denied_access.ts";
import type { PendingCalls } from "../policy/approvals.ts";
import { narrowPermissions } from "../policy/permissions.ts";
import { LOCAL_PRINCIPAL } from "../principals.ts";
import { HostPrivacy } from "../privacy/host.ts";
import type { SkillLanguage, SkillStore } from "../skills/store.ts";
import { Admission } from "./admission.ts";
import { removeStaleDirs, sandboxLocations } from "./child/files.ts";
import { ChildReaper } from "./child/reaper.ts";
import { startRuntimes } from "./languages.ts";
import { ParkedRuns } from "./parked_runs.ts";
import { type RequestServices, requestServices, serveRequests } from "./requests/router.ts";
import { type ExecutionResult, failedInServer, tokenizeResult, withheld } from "./result.ts";
import {
  type ExecutorOptions,
  InFlight,
  type PythonRunOptions,
  type RunContext,
  RunHold,
  type RunOptions,
  type RunStart,
} from "./run.ts";
import { recordRun } from "./run_audit.ts";
import { type LanguageRuntime, type Lease, skillRuns } from "./runtime.ts";
import { KeptOutputs } from "./shared_outputs.ts";

/**
 * Runs code in sandbox children under the admin's settings: TypeScript in Deno children,
 * Python in Pyodide children, both through the same policy, limits and tool bridge.
 *
 * @example
 * ```ts
 * const executor = await Executor.create(settings, { log });
 * const result = await executor.runTypescript("return 6 * 7", { timeoutMs: 5_000 });
 * await executor.close();
 * ```
 */
export class Executor {
  #settings: Settings;
  #log: Logger;
  #privacy: HostPrivacy;
  #admission: Admission;
  #services: RequestServices;
  #parked: ParkedRuns;
  #outputs: KeptOutputs;
  #runtimes!: Record<SkillLanguage, LanguageRuntime>;
  #reaper: ChildReaper;
  #metrics: Metrics | undefined;
  #closing = new AbortController();
  #inFlight = new InFlight();

  private constructor(settings: Settings, options: ExecutorOptions) {
    this.#settings = settings;
    // The in-process records are today's classes, with no round trip; the store's are used only
    // when replicas share one.
    const shared = options.shared?.store.kind === "memory" ? undefined : options.shared;
    // First: an invalid `privacy` setting fails the start before any child is spawned.
    this.#privacy = new HostPrivacy(
      settings.privacy,
      settings.limits.maxOutputBytes,
      options.log,
      shared?.vault,
    );
    this.#log = options.log;
    this.#admission = new Admission(settings, shared);
    this.#services = requestServices(settings, options, {
      scrubPersonalData: this.#privacy.scrubSampling,
      pending: shared?.approvals,
    });
    this.#outputs = new KeptOutputs(
      { ...settings.outputs, previewChars: settings.limits.previewChars },
      shared?.outputs,
      (text, principal) => this.#privacy.forClient(text, principal),
    );
    this.#parked = new ParkedRuns(
      settings.approvals.stateKey ?? options.shared?.keys.requestState,
      settings.http.replicaId,
      settings.limits.maxParkedMs,
    );
    this.#reaper = new ChildReaper(options.log);
    this.#metrics = options.metrics;
  }

  /**
   * Creates an executor and starts its warm pools (Python's once its snapshot is ready).
   *
   * @param settings The admin's settings.
   * @param options The logger and the upstream hub.
   * @returns The executor.
   */
  static async create(settings: Settings, options: ExecutorOptions): Promise<Executor> {
    const locations = await sandboxLocations(settings);
    await removeStaleDirs(locations.tempRoot, options.log);
    const executor = new Executor(settings, options);
    executor.#runtimes = await startRuntimes({
      settings,
      locations,
      log: options.log,
      closing: executor.#closing.signal,
      reaper: executor.#reaper,
    }, { warm: options.warmPools !== false });
    // Not awaited: until the thread is ready, runs detect their stdout on this thread alone.
    executor.#privacy.start();
    return executor;
  }

  /** The settings in force. */
  get settings(): Settings {
    return this.#settings;
  }

  /** The skills the in-sandbox `skills` API saves, lists and calls; none when not given. */
  get skills(): SkillStore | undefined {
    return this.#services.skills;
  }

  /**
   * Calls refused for want of a person, and their one-time approvals (`approve_pending_calls`):
   * this process's, or the shared store's.
   */
  get pendingCalls(): PendingCalls {
    return this.#services.pending;
  }

  /** The kept outputs (`code-executor://output/<id>`), read for their principal. */
  get outputs(): KeptOutputs {
    return this.#outputs;
  }

  /**
   * Text on its way to a client that came from runs or their saves (`search_tools` output): with
   * `privacy.tokenize`, its personal data becomes the principal's placeholders.
   *
   * @param text The text.
   * @param principal Who reads it.
   * @returns The text to send.
   * @throws {CodeExecutorError} `StateUnavailable` when the shared store's placeholders cannot
   *   be used (nothing may be sent then).
   */
  tokenizeForClient(text: string, principal: string): Promise<string> {
    return this.#privacy.forClient(text, principal);
  }

  /** Runs of 2026-07-28 clients parked until the client's retry (`input_required`). */
  get parkedRuns(): ParkedRuns {
    return this.#parked;
  }

  /**
   * A language's runtime, for `prepare`, benchmarks and tests; runs go through
   * {@linkcode Executor.runTypescript} and {@linkcode Executor.runPython}.
   *
   * @param language The language.
   * @returns Its runtime.
   */
  runtime(language: SkillLanguage): LanguageRuntime {
    return this.#runtimes[language];
  }

  /**
   * Runs TypeScript in a fresh sandbox child.
   *
   * @param code The model's TypeScript; a top-level `return` becomes `returnValue`.
   * @param options Timeout, permissions, allowed tools and cancellation.
   * @returns The result; failures are reported in it with `ok: false`.
   */
  runTypescript(code: string, options: RunOptions = {}): Promise<ExecutionResult> {
    return this.#run("typescript", code, options);
  }

  /**
   * Runs Python in a fresh Pyodide interpreter, or in the session's interpreter.
   *
   * @param code The model's Python; the last expression becomes `returnValue`.
   * @param options Timeout, session, allowed tools and cancellation.
   * @returns The result; failures are reported in it with `ok: false`.
   */
  runPython(code: string, options: PythonRunOptions = {}): Promise<ExecutionResult> {
    return this.#run("python", code, options);
  }

  async #run(
    language: SkillLanguage,
    code: string,
    options: PythonRunOptions & RunOptions,
  ): Promise<ExecutionResult> {
    const called = performance.now();
    const principal = options.principal ?? LOCAL_PRINCIPAL;
    const tokenizer = this.#privacy.tokenizer(principal);
    const run: RunStart = {
      language,
      code,
      options,
      executionId: crypto.randomUUID(),
      principal,
      tokenizer,
      // Personal data in stdout is detected in the run's quiet moments, so that the end of a run
      // that printed while it worked waits for its last lines only (issue #15).
      stdout: tokenizer?.stream(this.#settings.limits.maxOutputBytes),
    };
    this.#inFlight.enter();
    let result: ExecutionResult;
    try {
      result = await this.#execute(run).catch((error) => failedInServer(error, this.#log));
    } finally {
      run.stdout?.stop();
      this.#inFlight.leave();
    }
    const denied = result.error &&
      await explainDenied(result.error, {
        language: run.language,
        requested: options.permissions,
        settings: this.#settings,
      });
    if (denied) result = { ...result, error: denied };
    if (tokenizer) {
      result = await tokenizeResult(result, tokenizer, run.stdout)
        .catch((error) => withheld(result, error));
    }
    const audit = this.#services.audit;
    if (audit) {
      const { session, allowedTools } = options;
      await recordRun(audit, { ...run, session, allowedTools, settings: this.#settings, result });
    }
    this.#metrics?.runEnded(language, result.error?.type, (performance.now() - called) / 1000);
    return result;
  }

  async #execute(run: RunStart): Promise<ExecutionResult> {
    if (this.#closing.signal.aborted) {
      throw new CodeExecutorError("ShuttingDown", "The server is shutting down");
    }
    const { options, principal, language } = run;
    const limits = this.#admission.check(run.code, options);
    const timeoutMs = limits.timeoutMs;
    const granted = await narrowPermissions(options.permissions, this.#settings);
    const signal = options.signal
      ? AbortSignal.any([options.signal, this.#closing.signal])
      : this.#closing.signal;
    const release = await this.#admission.enter(principal, signal);
    const outputs = this.#outputs.forRun(principal, timeoutMs);
    const ended = new AbortController();
    const hold = options.hold ?? new RunHold();
    let leased: Lease | undefined;
    try {
      const started = performance.now();
      leased = await this.#runtimes[language].lease({
        code: run.code,
        granted,
        deadline: { timeoutMs, signal },
        principal,
        session: options.session,
      });
      const requestSignal = AbortSignal.any([signal, ended.signal]);
      const context: RunContext = {
        executionId: run.executionId,
        language,
        principal,
        signal: requestSignal,
        limits,
        hold,
        client: options.client,
        allowedTools: options.allowedTools,
        tokenizer: run.tokenizer,
        outputs,
        remainingMs: () => timeoutMs - (performance.now() - started) + hold.heldMs,
        ...skillRuns(this.#runtimes, { language, granted, principal, signal: requestSignal }),
      };
      const served = serveRequests(this.#services, context);
      const result = await leased.run({
        hold,
        timeoutMs: Math.max(1, timeoutMs - Math.round(performance.now() - started)),
        reportedTimeoutMs: timeoutMs,
        maxOutputBytes: this.#settings.limits.maxOutputBytes,
        keep: outputs.maxBytes > 0 ? outputs : undefined,
        watchStdout: run.stdout,
        signal,
        onRequest: served.onRequest,
      });
      result.durationMs = Math.round(performance.now() - started);
      return served.report(result);
    } finally {
      ended.abort();
      outputs.release();
      release();
      leased?.done();
    }
  }

  /** Runs in progress, queued ones included. */
  get running(): number {
    return this.#inFlight.count;
  }

  /** Runs waiting for a slot (`limits.maxConcurrent`). */
  get queued(): number {
    return this.#admission.queued;
  }

  /**
   * Waits until no run is in progress, for a drain.
   *
   * @param timeoutMs The longest wait.
   * @returns Whether every run finished in time.
   */
  settle(timeoutMs: number): Promise<boolean> {
    return this.#inFlight.settle(timeoutMs);
  }

  /** Waits until every used child has been disposed (for tests and benchmarks). */
  idle(): Promise<void> {
    return this.#reaper.idle();
  }

  /** Kills every running, idle and session child and removes their directories. */
  async close(): Promise<void> {
    this.#parked.close();
    // First, so that a close that fails below leaves no thread to keep the process alive; a run
    // still ending detects what it had sent the thread on this one.
    this.#privacy.close();
    this.#closing.abort(
      new CodeExecutorError(
        "ShuttingDown",
        "The server is shutting down: the run was stopped before it finished; retry once the server is back",
      ),
    );
    await Promise.all([
      ...Object.values(this.#runtimes).map((runtime) => runtime.close()),
      this.#reaper.close(),
    ]);
    this.#outputs.close();
  }
}
