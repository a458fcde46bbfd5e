/**
 * Executions: a run is admitted (admission.ts), given a sandbox child (a warm one when it can),
 * connected to its tool bridge and client session, and recorded (run_audit.ts). Everything that
 * decides what code may do lives on this side.
 *
 * About 560 lines, over the ~450 the project aims at: this is the one place where a run's parts
 * meet (admission, the lease of a child, the client session, the approval gate, the tool bridge,
 * the skills and their nested runs, kept outputs, privacy, parked runs, the audit record). Each
 * part lives in a module of its own; what stays here is their wiring, which reads best in one
 * piece.
 *
 * @module
 */
import type { Settings } from "../config/settings.ts";
import type { Logger } from "../log.ts";
import {
  type GrantedPermissions,
  isDefaultProfile,
  narrowPermissions,
} from "../policy/permissions.ts";
import { explainDenied } from "../policy/denied_access.ts";
import type { AuditLog } from "../policy/audit.ts";
import { ToolPolicy } from "../policy/tool_policy.ts";
import { ApprovalPolicy, PendingApprovals } from "../policy/approvals.ts";
import { createProviderBackend } from "../sampling/providers.ts";
import { HostPrivacy } from "../privacy/host.ts";
import type { StdoutTokenizer } from "../privacy/stream.ts";
import { type RunTokenizer, tokenizedProgress } from "../privacy/tokenizer.ts";
import { ClientSession } from "../sampling/session.ts";
import type { SamplingBackend } from "../sampling/types.ts";
import type { Hub } from "../upstream/hub.ts";
import { Admission } from "./admission.ts";
import { ApprovalGate, approverFor } from "./approvals.ts";
import { RunHold } from "./execution.ts";
import { ParkedRuns } from "./parked_runs.ts";
import {
  type Deadline,
  type PythonRuntime,
  pythonWithin,
  startPythonRuntime,
  takePooledChild,
} from "./py_runtime.ts";
import { PyChild } from "./py_sandbox.ts";
import { type ExecutionResult, tokenizeResult } from "./result.ts";
import { recordRun } from "./run_audit.ts";
import { type KeptOutput, OutputStore, RunOutputs } from "./output_store.ts";
import { removeStaleDirs, sandboxLocations } from "./runtime_files.ts";
import type { RunLimits } from "./sandbox_process.ts";
import { SessionStore } from "./sessions.ts";
import { runRequests } from "./skill_bridge.ts";
import type { SkillLanguage, SkillStore } from "../skills/store.ts";
import { ToolBridge } from "./tool_bridge.ts";
import { sealChildDenoDir, TsChild, type TsChildOptions } from "./ts_sandbox.ts";
import { wrapTypescript } from "./ts_source.ts";
import { WarmPool } from "./warm_pool.ts";
import {
  type ExecutorOptions,
  LOCAL_PRINCIPAL,
  type PythonRunOptions,
  type RunOptions,
} from "./run_options.ts";
import { CodeExecutorError } from "../errors.ts";

type BaseChildOptions = Omit<TsChildOptions, "net" | "read" | "write">;

/** The default profile: a child's own workspace and nothing else. */
const NO_GRANTS: GrantedPermissions = { net: [], read: [], write: [], deny: [] };

/**
 * How long the disposal of a run's child waits after the result: the response still has to reach
 * the client (the server's write, the client's read and checks, 1-3 ms). A macrotask later was
 * too soon: the killed child's teardown ran beside the response and slowed a warm call by ~1.5 ms
 * on 2 CPUs.
 */
const RETIRE_AFTER_MS = 10;

export { LOCAL_PRINCIPAL } from "./run_options.ts";
export type { ExecutorOptions, PythonRunOptions, RunOptions } from "./run_options.ts";

/** A child borrowed for one run, and what to do with it afterwards. */
interface Lease {
  run(limits: RunLimits): Promise<ExecutionResult>;
  done(): void;
}

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
  #hub: Hub | undefined;
  #skills: SkillStore | undefined;
  #audit: AuditLog | undefined;
  #fallback: SamplingBackend | undefined;
  #privacy: HostPrivacy;
  #admission: Admission;
  #approvalPolicy: ApprovalPolicy;
  #pending: PendingApprovals;
  #parked: ParkedRuns;
  #pool: WarmPool<TsChild>;
  #base: BaseChildOptions;
  #cacheDir: string;
  #pythonDenoDir: string;
  #python: Promise<PythonRuntime> | undefined;
  #sessions: SessionStore<PyChild>;
  #outputs: OutputStore;
  #active = new Set<{ dispose(): Promise<void> }>();
  #disposing = new Set<Promise<unknown>>();
  #closing = new AbortController();
  #running = 0;
  #settled: Array<() => void> = [];

  private constructor(
    settings: Settings,
    options: ExecutorOptions,
    base: BaseChildOptions,
    cacheDir: string,
    pythonDenoDir: string,
  ) {
    this.#pythonDenoDir = pythonDenoDir;
    this.#settings = settings;
    // First: an invalid `privacy` setting fails the start before any child is spawned.
    this.#privacy = new HostPrivacy(settings.privacy, settings.limits.maxOutputBytes, options.log);
    this.#log = options.log;
    this.#hub = options.hub;
    this.#skills = options.skills;
    this.#audit = options.audit;
    const provider = settings.sampling.provider;
    this.#fallback = provider ? createProviderBackend(provider) : undefined;
    const log = options.log;
    this.#base = base;
    this.#cacheDir = cacheDir;
    this.#admission = new Admission(settings);
    this.#approvalPolicy = new ApprovalPolicy(settings.approvals);
    this.#pending = new PendingApprovals(options.audit);
    this.#outputs = new OutputStore({
      ...settings.outputs,
      previewChars: settings.limits.previewChars,
    });
    this.#parked = new ParkedRuns(settings.approvals.stateKey, settings.http.replicaId);
    this.#pool = new WarmPool(settings.sandbox.warmPool, () => this.#spawn({ preload: true }), log);
    this.#sessions = new SessionStore({
      ttlMs: settings.python.sessionTtlMs,
      max: settings.python.maxSessions,
      settingPrefix: "python",
      log,
    });
  }

  /**
   * Creates an executor and starts its warm pools (Python's once its snapshot is ready).
   *
   * @param settings The admin's settings.
   * @param options The logger and the upstream hub.
   * @returns The executor.
   */
  static async create(settings: Settings, options: ExecutorOptions): Promise<Executor> {
    const { denoPath, denoDir, tsDenoDir, runnerPath, tempRoot, cacheDir } = await sandboxLocations(
      settings,
    );
    await removeStaleDirs(tempRoot, options.log);
    await sealChildDenoDir(tsDenoDir, true);
    await sealChildDenoDir(denoDir, false);
    const base: BaseChildOptions = {
      denoPath,
      denoDir: tsDenoDir,
      runnerPath,
      tempRoot,
      memoryMb: settings.limits.memoryMb,
      log: options.log,
    };
    const executor = new Executor(settings, options, base, cacheDir, denoDir);
    executor.#pool.fill();
    // Not awaited: until the thread is ready, runs detect their stdout on this thread alone.
    executor.#privacy.start();
    if (settings.python.enabled && settings.python.warmPool > 0) {
      executor.#pythonRuntime().then((py) => py.pool.fill(), () => {});
    }
    return executor;
  }

  /** The settings in force. */
  get settings(): Settings {
    return this.#settings;
  }

  /** The skills the in-sandbox `skills` API saves, lists and calls; none when not given. */
  get skills(): SkillStore | undefined {
    return this.#skills;
  }

  /** Calls refused for want of a person, and their one-time approvals (`approve_pending_calls`). */
  get pendingApprovals(): PendingApprovals {
    return this.#pending;
  }

  /** Outputs kept past their cap, for `resources/read`. */
  get outputs(): OutputStore {
    return this.#outputs;
  }

  /**
   * Reads a kept output for a client (`resources/read`): with `privacy.tokenize`, its personal
   * data is replaced by the principal's placeholders, as in the result that named it; a kept
   * output holds what the code printed, which may carry real values (`privacy.rawServers`).
   *
   * @param idOrUri The output's id or URI.
   * @param principal Who asks.
   * @returns The output and its text.
   * @throws {CodeExecutorError} `OutputNotFound` or `OutputAccessDenied`.
   */
  readOutputForClient(idOrUri: string, principal: string): KeptOutput & { text: string } {
    const output = this.#outputs.read(idOrUri, principal);
    return { ...output, text: this.#privacy.forClient(output.text, principal) };
  }

  /** Runs of 2026-07-28 clients parked until the client's retry (`input_required`). */
  get parkedRuns(): ParkedRuns {
    return this.#parked;
  }

  /** The TypeScript warm pool, for benchmarks and tests. */
  get pool(): WarmPool<TsChild> {
    return this.#pool;
  }

  /** The Python warm pool once Pyodide is located, for benchmarks and tests. */
  async pythonPool(): Promise<WarmPool<PyChild>> {
    return (await this.#pythonRuntime()).pool;
  }

  async #spawn(extra: Pick<TsChildOptions, "preload">): Promise<TsChild> {
    const child = await TsChild.spawn({ ...this.#base, ...extra });
    if (!(await child.ready)) {
      await child.dispose();
      throw new Error(
        `The sandbox runner did not start (deno at "${this.#base.denoPath}"); set sandbox.denoPath or DENO_PATH to a working Deno ${Deno.version.deno}`,
      );
    }
    return child;
  }

  /** Locates Pyodide and its snapshot once; a failure is reported by every run_python. */
  #pythonRuntime(): Promise<PythonRuntime> {
    this.#python ??= startPythonRuntime({
      settings: this.#settings,
      denoPath: this.#base.denoPath,
      denoDir: this.#pythonDenoDir,
      tempRoot: this.#base.tempRoot,
      cacheDir: this.#cacheDir,
      log: this.#log,
      closing: this.#closing.signal,
    });
    // A start cut short by close() (a normal exit, or a fatal error of the server's own start) is
    // no news about Python: only a failure while the server runs is.
    this.#python.catch((error) => {
      if (!this.#closing.signal.aborted) {
        this.#log.warn(`Python is unavailable: ${(error as Error).message}`);
      }
    });
    return this.#python;
  }

  /**
   * Runs TypeScript in a fresh sandbox child.
   *
   * @param code The model's TypeScript; a top-level `return` becomes `returnValue`.
   * @param options Timeout, permissions, allowed tools and cancellation.
   * @returns The result; failures are reported in it with `ok: false`.
   */
  runTypescript(code: string, options: RunOptions = {}): Promise<ExecutionResult> {
    return this.#run("typescript", code, options, (granted) => this.#leaseTs(code, granted));
  }

  /**
   * Runs Python in a fresh Pyodide interpreter, or in the session's interpreter.
   *
   * @param code The model's Python; the last expression becomes `returnValue`.
   * @param options Timeout, session, allowed tools and cancellation.
   * @returns The result; failures are reported in it with `ok: false`.
   */
  runPython(code: string, options: PythonRunOptions = {}): Promise<ExecutionResult> {
    return this.#run(
      "python",
      code,
      options,
      (_granted, deadline) =>
        this.#leasePy(code, {
          session: options.session,
          principal: options.principal ?? LOCAL_PRINCIPAL,
          deadline,
        }),
    );
  }

  async #run(
    language: "typescript" | "python",
    code: string,
    options: PythonRunOptions & RunOptions,
    lease: (granted: GrantedPermissions, deadline: Deadline) => Promise<Lease>,
  ): Promise<ExecutionResult> {
    const executionId = crypto.randomUUID();
    const tokenizer = this.#privacy.tokenizer(options.principal ?? LOCAL_PRINCIPAL);
    // Personal data in stdout is detected in the run's quiet moments, so that the end of a run
    // that printed while it worked waits for its last lines only (issue #15).
    const stdout = tokenizer?.stream(this.#settings.limits.maxOutputBytes);
    this.#running++;
    let result: ExecutionResult;
    try {
      result = await this.#guard(() =>
        this.#execute(code, options, lease, { executionId, tokenizer, stdout, language })
      );
    } finally {
      stdout?.stop();
      if (--this.#running === 0) { for (const resolve of this.#settled.splice(0)) resolve(); }
    }
    const denied = result.error &&
      await explainDenied(result.error, {
        language,
        requested: options.permissions,
        settings: this.#settings,
      });
    if (denied) result = { ...result, error: denied };
    if (tokenizer) result = await tokenizeResult(result, tokenizer, stdout);
    if (this.#audit) {
      recordRun(this.#audit, {
        executionId,
        language,
        code,
        includeCode: this.#settings.audit.includeCode,
        // The values the code itself holds are written down as the placeholders the model sees.
        ...(tokenizer && this.#settings.audit.includeCode
          ? { recordedCode: tokenizer.text(code) }
          : {}),
        principal: options.principal ?? LOCAL_PRINCIPAL,
        session: options.session,
        allowedTools: options.allowedTools ?? this.#settings.tools.allow,
        deniedTools: this.#settings.tools.deny,
        result,
      });
    }
    return result;
  }

  async #guard(run: () => Promise<ExecutionResult>): Promise<ExecutionResult> {
    try {
      return await run();
    } catch (error) {
      if (error instanceof CodeExecutorError) return error.toResult();
      this.#log.error(`Execution failed inside the server: ${(error as Error).stack ?? error}`);
      return new CodeExecutorError(
        "SandboxStartError",
        `Cannot run the code: ${
          (error as Error).message
        }; check sandbox.denoPath (DENO_PATH) and the server log`,
        { cause: error },
      ).toResult();
    }
  }

  async #execute(
    code: string,
    options: RunOptions,
    lease: (granted: GrantedPermissions, deadline: Deadline) => Promise<Lease>,
    run: {
      executionId: string;
      tokenizer?: RunTokenizer;
      stdout?: StdoutTokenizer;
      language: SkillLanguage;
    },
  ): Promise<ExecutionResult> {
    const { executionId, tokenizer } = run;
    if (this.#closing.signal.aborted) {
      throw new CodeExecutorError("ShuttingDown", "The server is shutting down");
    }
    const { timeoutMs, caps } = this.#admission.check(code, options);
    const granted = await narrowPermissions(options.permissions, this.#settings);
    const policy = new ToolPolicy(this.#settings.tools, options.allowedTools);
    const signal = options.signal
      ? AbortSignal.any([options.signal, this.#closing.signal])
      : this.#closing.signal;
    const principal = options.principal ?? LOCAL_PRINCIPAL;
    const skills = this.#skills;
    const release = await this.#admission.enter(principal, signal);
    const outputs = new RunOutputs(this.#outputs, principal);
    let leased: Lease | undefined;
    const ended = new AbortController();
    const hold = options.hold ?? new RunHold();
    try {
      const started = performance.now();
      leased = await lease(granted, { timeoutMs, signal });
      const runSignal = AbortSignal.any([signal, ended.signal]);
      const client = new ClientSession({
        settings: this.#settings.sampling,
        caps,
        // progress() messages reach the client, and through it maybe the model.
        channel: tokenizer && options.client?.progress
          ? { ...options.client, progress: tokenizedProgress(options.client.progress, tokenizer) }
          : options.client,
        fallback: this.#fallback,
        audit: this.#audit,
        executionId,
        signal: runSignal,
        elicitationTimeoutMs: timeoutMs,
        scrubPersonalData: this.#privacy.scrubSampling,
      });
      const gate = this.#approvalPolicy.mode === "off" ? undefined : new ApprovalGate({
        policy: this.#approvalPolicy,
        approver: approverFor(options.client, this.#pending, this.#approvalPolicy.timeoutMs),
        hold,
        audit: this.#audit,
        principal: options.principal ?? LOCAL_PRINCIPAL,
        executionId,
        signal: runSignal,
      });
      const bridge = new ToolBridge(
        this.#hub,
        policy,
        this.#settings,
        runSignal,
        client,
        gate,
        tokenizer,
        skills ? () => skills.list(principal) : undefined,
      );
      const result = await leased.run({
        hold,
        timeoutMs: Math.max(1, timeoutMs - Math.round(performance.now() - started)),
        reportedTimeoutMs: timeoutMs,
        maxOutputBytes: this.#settings.limits.maxOutputBytes,
        keep: this.#outputs.maxBytes > 0 ? outputs : undefined,
        watchStdout: run.stdout,
        signal,
        onRequest: runRequests({
          bridge,
          outputs,
          hold,
          signal: runSignal,
          timeoutMs,
          remainingMs: () => timeoutMs - (performance.now() - started) + hold.heldMs,
          maxOutputBytes: this.#settings.limits.maxOutputBytes,
          store: skills,
          principal: principal === LOCAL_PRINCIPAL ? undefined : principal,
          // A Python caller has no grants (its child reaches nothing): its TypeScript skills
          // get none either.
          lease: (skill, args, timeoutMs) =>
            skill.language === "typescript"
              ? this.#leaseTs(skill.code, run.language === "typescript" ? granted : NO_GRANTS, args)
              : this.#leasePy(skill.code, {
                principal,
                deadline: { timeoutMs, signal: runSignal },
                args,
              }),
        }, { language: run.language, depth: 0 }),
      });
      result.durationMs = Math.round(performance.now() - started);
      result.toolCalls = bridge.records;
      if (bridge.omitted > 0) result.toolCallsOmitted = bridge.omitted;
      const sampling = client.totals;
      if (sampling.rounds > 0) result.sampling = sampling;
      return result;
    } finally {
      ended.abort();
      outputs.release();
      release();
      leased?.done();
    }
  }

  async #leaseTs(
    code: string,
    granted: GrantedPermissions,
    args?: Record<string, unknown>,
  ): Promise<Lease> {
    const pooled = isDefaultProfile(granted) ? this.#pool.take() : undefined;
    const child = pooled ?? await TsChild.spawn({ ...this.#base, ...granted });
    this.#active.add(child);
    // A skill's body (a nested run) gets its arguments, and the `skills` of its level.
    const wrapped = args ? wrapTypescript(code, { params: "args, skills" }) : wrapTypescript(code);
    return {
      run: (limits) => child.run(wrapped, { ...limits, args }),
      done: () =>
        this.#retire(child, async () => {
          // Pooled children do not write to the emit cache (see TsChild.spawn).
          if (!pooled) await sealChildDenoDir(this.#base.denoDir, true);
          this.#pool.fill();
        }),
    };
  }

  async #leasePy(
    code: string,
    run: {
      session?: string;
      principal: string;
      deadline: Deadline;
      args?: Record<string, unknown>;
    },
  ): Promise<Lease> {
    const { session, principal, deadline, args } = run;
    const python = await pythonWithin(this.#pythonRuntime(), deadline);
    // Wheels that `sync` regenerated reach this run's child without a restart.
    await python.refreshWheels();
    const graceMs = this.#settings.python.interruptGraceMs;
    if (session !== undefined) {
      return {
        run: (limits) =>
          this.#sessions.use(
            { id: session, owner: principal },
            () => PyChild.spawn({ ...python.base, session: true }),
            (child) => child.run(code, { ...limits, graceMs }),
          ),
        done: () => {},
      };
    }
    let child: PyChild;
    try {
      child = await takePooledChild(python.pool, deadline) ?? await PyChild.spawn(python.base);
    } catch (error) {
      python.pool.returned();
      throw error;
    }
    this.#active.add(child);
    return {
      run: (limits) => child.run(code, { ...limits, graceMs, args }),
      done: () => {
        python.pool.returned();
        this.#retire(child, () => python.pool.fill());
      },
    };
  }

  /**
   * Disposes a used child off the response path, once the response is out (a used TypeScript
   * child sleeps until then), so that the kill and the teardown do not compete with it for the
   * CPUs. {@linkcode Executor.close} waits for it.
   */
  #retire(child: { dispose(): Promise<void> }, after: () => unknown): void {
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

  /** Runs in progress, queued ones included. */
  get running(): number {
    return this.#running;
  }

  /**
   * Waits until no run is in progress, for a drain.
   *
   * @param timeoutMs The longest wait.
   * @returns Whether every run finished in time.
   */
  async settle(timeoutMs: number): Promise<boolean> {
    if (this.#running === 0) return true;
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

  /** Waits until every used child has been disposed (for tests and benchmarks). */
  async idle(): Promise<void> {
    while (this.#disposing.size > 0) await Promise.all(this.#disposing);
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
    const python = await this.#python?.catch(() => undefined);
    await Promise.all([
      this.#pool.close(),
      python?.pool.close(),
      this.#sessions.close(),
      ...[...this.#active].map((child) => child.dispose()),
    ]);
    await this.idle();
    this.#outputs.close();
  }
}
