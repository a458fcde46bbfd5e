/**
 * Executions: policy checks, a concurrency limit with a bounded queue, the warm pool, and the
 * sandbox children. Everything that decides what code may do lives on this side.
 *
 * @module
 */
import { basename, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { tmpdir } from "node:os";
import type { Settings } from "../config/settings.ts";
import type { Logger } from "../log.ts";
import {
  type GrantedPermissions,
  isDefaultProfile,
  narrowPermissions,
  type RequestedPermissions,
} from "../policy/permissions.ts";
import { type AuditLog, sha256Hex } from "../policy/audit.ts";
import { RateLimiter, ToolPolicy } from "../policy/tool_policy.ts";
import type { ClientChannel } from "../sampling/channel.ts";
import { createProviderBackend } from "../sampling/providers.ts";
import { ClientSession } from "../sampling/session.ts";
import type { SamplingBackend } from "../sampling/types.ts";
import { ExecutionRefusedError, type ExecutionResult } from "./result.ts";
import type { Hub } from "../upstream/hub.ts";
import { ToolBridge } from "./tool_bridge.ts";
import { PyChild, type PyChildOptions } from "./py_sandbox.ts";
import { readWheels } from "./py_wheels.ts";
import { ensurePyodideSnapshot, findPyodideDir } from "./pyodide.ts";
import { CHILD_DIR_PREFIX, type RunLimits } from "./sandbox_process.ts";
import { SessionStore } from "./sessions.ts";
import { scrubEmitCache, TsChild, type TsChildOptions } from "./ts_sandbox.ts";
import { wrapTypescript } from "./ts_source.ts";
import { WarmPool } from "./warm_pool.ts";

type BaseChildOptions = Omit<TsChildOptions, "net" | "read" | "write">;

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
}

/**
 * Finds the `deno` executable for sandbox children.
 *
 * @param configured `sandbox.denoPath` from the settings.
 * @returns The path or command name to run.
 */
export function findDeno(configured?: string): string {
  if (configured) return configured;
  const self = Deno.execPath();
  return /^deno(\.exe)?$/i.test(basename(self)) ? self : "deno";
}

/**
 * Returns the runner's path on disk. Inside a compiled binary the runner is embedded, so it is
 * copied to a cache directory first, where a child `deno` can load it.
 *
 * @param name The file under `sandbox/`.
 * @param cacheDir Where to copy an embedded runner.
 * @returns An absolute path.
 */
export async function sandboxFile(name: string, cacheDir: string): Promise<string> {
  const url = new URL(`../../sandbox/${name}`, import.meta.url);
  const path = fileURLToPath(url);
  if (!/deno-compile-/.test(path)) return path;
  const text = await Deno.readTextFile(url);
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  const hash = [...new Uint8Array(digest).slice(0, 8)].map((b) => b.toString(16).padStart(2, "0"))
    .join("");
  const target = join(cacheDir, `${hash}-${name}`);
  await Deno.mkdir(dirname(target), { recursive: true });
  await Deno.writeTextFile(target, text);
  return target;
}

/** Returns the platform's user cache directory for this program. */
export function cacheDir(): string {
  const env = (name: string) => {
    try {
      return Deno.env.get(name);
    } catch {
      return undefined;
    }
  };
  const base = env("XDG_CACHE_HOME") ??
    join(env("HOME") ?? env("USERPROFILE") ?? tmpdir(), ".cache");
  return join(base, "code-executor");
}

/**
 * Removes private directories left by a host that died without cleaning up (SIGKILL).
 *
 * @param tempRoot The directory children are created in.
 * @param log Where removals are reported.
 */
export async function removeStaleDirs(tempRoot: string, log: Logger): Promise<void> {
  if (Deno.build.os !== "linux") return;
  try {
    for await (const entry of Deno.readDir(tempRoot)) {
      const match = new RegExp(`^${CHILD_DIR_PREFIX}(\\d+)-`).exec(entry.name);
      if (!match || !entry.isDirectory || Number(match[1]) === Deno.pid) continue;
      const alive = await Deno.stat(`/proc/${match[1]}`).then(() => true, () => false);
      if (alive) continue;
      await Deno.remove(join(tempRoot, entry.name), { recursive: true }).catch(() => {});
      log.debug(`Removed stale sandbox directory ${entry.name}`);
    }
  } catch {
    // An unreadable temp root only means nothing is cleaned.
  }
}

class Slots {
  #free: number;
  #maxQueued: number;
  #waiting: Array<() => void> = [];

  constructor(max: number, maxQueued: number) {
    this.#free = max;
    this.#maxQueued = maxQueued;
  }

  async acquire(signal?: AbortSignal): Promise<() => void> {
    if (this.#free > 0) {
      this.#free--;
      return this.#releaser();
    }
    if (this.#waiting.length >= this.#maxQueued) {
      throw new ExecutionRefusedError(
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
        reject(new ExecutionRefusedError("Cancelled", "The execution was cancelled while queued"));
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#waiting.push(grant);
    });
    return this.#releaser();
  }

  #releaser(): () => void {
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

/** A child borrowed for one run, and what to do with it afterwards. */
interface Lease {
  run(limits: RunLimits): Promise<ExecutionResult>;
  done(): void;
}

/** How long a run may still take, and its cancellation. */
interface Deadline {
  timeoutMs: number;
  signal: AbortSignal;
}

/** Resolves with `work`, or rejects with a refusal at the deadline or on abort. */
function withinDeadline<T>(work: Promise<T>, deadline: Deadline): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const done = () => {
      clearTimeout(timer);
      deadline.signal.removeEventListener("abort", onAbort);
    };
    const timer = setTimeout(() => {
      done();
      reject(
        new ExecutionRefusedError(
          "TimeoutError",
          `Execution timed out after ${deadline.timeoutMs} ms while Python was starting for the first time (building its memory snapshot); retry in a few seconds`,
        ),
      );
    }, deadline.timeoutMs);
    const onAbort = () => {
      done();
      reject(new ExecutionRefusedError("Cancelled", "The execution was cancelled"));
    };
    deadline.signal.addEventListener("abort", onAbort, { once: true });
    work.then((value) => {
      done();
      resolve(value);
    }, (error) => {
      done();
      reject(error);
    });
  });
}

/** What Python children are started from, found once. */
interface PythonRuntime {
  base: Omit<PyChildOptions, "session">;
  pool: WarmPool<PyChild>;
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
  #audit: AuditLog | undefined;
  #fallback: SamplingBackend | undefined;
  #slots: Slots;
  #starts: RateLimiter;
  #pool: WarmPool<TsChild>;
  #base: BaseChildOptions;
  #python: Promise<PythonRuntime> | undefined;
  #sessions: SessionStore<PyChild>;
  #active = new Set<{ dispose(): Promise<void> }>();
  #disposing = new Set<Promise<unknown>>();
  #closing = new AbortController();

  private constructor(settings: Settings, options: ExecutorOptions, base: BaseChildOptions) {
    this.#settings = settings;
    this.#log = options.log;
    this.#hub = options.hub;
    this.#audit = options.audit;
    const provider = settings.sampling.provider;
    this.#fallback = provider ? createProviderBackend(provider) : undefined;
    const log = options.log;
    this.#base = base;
    this.#slots = new Slots(settings.limits.maxConcurrent, settings.limits.maxQueued);
    this.#starts = new RateLimiter(settings.limits.executionsPerMinute);
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
    const tempRoot = settings.sandbox.tempDir ?? tmpdir();
    await removeStaleDirs(tempRoot, options.log);
    const denoDir = join(cacheDir(), "deno");
    await scrubEmitCache(denoDir);
    const base: BaseChildOptions = {
      denoPath: findDeno(settings.sandbox.denoPath),
      denoDir,
      runnerPath: await sandboxFile("ts_runner.ts", join(cacheDir(), "sandbox")),
      tempRoot,
      memoryMb: settings.limits.memoryMb,
      log: options.log,
    };
    const executor = new Executor(settings, options, base);
    executor.#pool.fill();
    if (settings.python.enabled && settings.python.warmPool > 0) {
      executor.#pythonRuntime().then((py) => py.pool.fill(), () => {});
    }
    return executor;
  }

  /** The settings in force. */
  get settings(): Settings {
    return this.#settings;
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
    this.#python ??= (async () => {
      const python = this.#settings.python;
      const sandboxDir = join(cacheDir(), "sandbox");
      const hostPath = await sandboxFile("py_host.ts", sandboxDir);
      const workerPath = await sandboxFile("py_worker.ts", sandboxDir);
      const pyodideDir = await findPyodideDir();
      const wheels = await readWheels(python.wheelDirs, { log: this.#log });
      const snapshotPath = await ensurePyodideSnapshot({
        denoPath: this.#base.denoPath,
        hostPath,
        workerPath,
        pyodideDir,
        cacheDir: join(cacheDir(), "pyodide"),
        denoDir: this.#base.denoDir,
        log: this.#log,
        signal: this.#closing.signal,
      });
      if (this.#closing.signal.aborted) throw new Error("The server is shutting down");
      const base: Omit<PyChildOptions, "session"> = {
        denoPath: this.#base.denoPath,
        hostPath,
        workerPath,
        pyodideDir,
        snapshotPath,
        tempRoot: this.#base.tempRoot,
        denoDir: this.#base.denoDir,
        memoryMb: python.memoryMb,
        allowedImports: python.allowedImports,
        wheels,
        log: this.#log,
      };
      const boot = async () => {
        const child = await PyChild.spawn(base);
        if (!(await child.ready)) {
          await child.dispose();
          throw new Error("The Python sandbox did not start");
        }
        return child;
      };
      // The first fill boots one child at a time, so that the first is ready as early as possible
      // for the first run (two boots side by side on 2 CPUs each take nearly as long as both in
      // a row). Refills boot side by side: under a burst, that keeps every CPU busy.
      let serial = python.warmPool;
      let booting: Promise<unknown> = Promise.resolve();
      const pool = new WarmPool(python.warmPool, () => {
        if (serial-- <= 0) return boot();
        const next = booting.then(() => {
          if (this.#closing.signal.aborted) throw new Error("The server is shutting down");
          return boot();
        });
        booting = next.catch(() => {});
        return next;
      }, this.#log);
      return { base, pool };
    })();
    this.#python.catch((error) =>
      this.#log.warn(`Python is unavailable: ${(error as Error).message}`)
    );
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
      (_granted, deadline) => this.#leasePy(code, options.session, deadline),
    );
  }

  async #run(
    language: "typescript" | "python",
    code: string,
    options: PythonRunOptions & RunOptions,
    lease: (granted: GrantedPermissions, deadline: Deadline) => Promise<Lease>,
  ): Promise<ExecutionResult> {
    const executionId = crypto.randomUUID();
    const result = await this.#guard(() => this.#execute(code, options, lease, executionId));
    if (this.#audit) await this.#record(language, code, options, result, executionId);
    return result;
  }

  async #record(
    language: string,
    code: string,
    options: PythonRunOptions & RunOptions,
    result: ExecutionResult,
    executionId: string,
  ): Promise<void> {
    const audit = this.#audit!;
    const tools = this.#settings.tools;
    const bytes = (text: string) => new TextEncoder().encode(text).length;
    audit.record({
      kind: "execution",
      executionId,
      language,
      ...(options.session ? { session: options.session } : {}),
      codeSha256: await sha256Hex(code),
      ...(this.#settings.audit.includeCode ? { code } : {}),
      allowedTools: options.allowedTools ?? tools.allow,
      deniedTools: tools.deny,
      toolCalls: result.toolCalls.map((c) => ({ name: c.name, ok: c.ok, ms: c.durationMs })),
      outcome: result.ok ? "ok" : "error",
      ...(result.error ? { errorType: result.error.type } : {}),
      durationMs: result.durationMs,
      outputBytes: { stdout: bytes(result.stdout), stderr: bytes(result.stderr) },
      ...(result.sampling ? { sampling: result.sampling } : {}),
    });
    for (const call of result.toolCalls) {
      audit.record({
        kind: "tool_call",
        executionId,
        name: call.name,
        ok: call.ok,
        ms: call.durationMs,
      });
    }
  }

  async #guard(run: () => Promise<ExecutionResult>): Promise<ExecutionResult> {
    try {
      return await run();
    } catch (error) {
      if (error instanceof ExecutionRefusedError) return error.toResult();
      this.#log.error(`Execution failed inside the server: ${(error as Error).stack ?? error}`);
      return new ExecutionRefusedError(
        "SandboxStartError",
        `Cannot run the code: ${
          (error as Error).message
        }; check sandbox.denoPath (DENO_PATH) and the server log`,
      ).toResult();
    }
  }

  async #execute(
    code: string,
    options: RunOptions,
    lease: (granted: GrantedPermissions, deadline: Deadline) => Promise<Lease>,
    executionId: string,
  ): Promise<ExecutionResult> {
    const limits = this.#settings.limits;
    if (this.#closing.signal.aborted) {
      throw new ExecutionRefusedError("ShuttingDown", "The server is shutting down");
    }
    const codeBytes = new TextEncoder().encode(code).length;
    if (codeBytes > limits.maxCodeBytes) {
      throw new ExecutionRefusedError(
        "CodeTooLarge",
        `Code is ${codeBytes} bytes, more than limits.maxCodeBytes (${limits.maxCodeBytes}); send smaller code and read large data through tools or files`,
      );
    }
    const timeoutMs = options.timeoutMs ?? limits.timeoutMs;
    if (timeoutMs > limits.maxTimeoutMs) {
      throw new ExecutionRefusedError(
        "LimitError",
        `timeoutMs ${timeoutMs} is above the admin's maximum of ${limits.maxTimeoutMs} ms (limits.maxTimeoutMs); pass a smaller timeoutMs`,
      );
    }
    const caps = this.#samplingCaps(options.sampling);
    const granted = await narrowPermissions(options.permissions, this.#settings);
    const policy = new ToolPolicy(this.#settings.tools, options.allowedTools);
    const wait = this.#starts.take("executions");
    if (wait !== undefined) {
      throw new ExecutionRefusedError(
        "RateLimitError",
        `Too many executions: the admin allows ${limits.executionsPerMinute} per minute (limits.executionsPerMinute); retry in ${
          Math.ceil(wait / 1000)
        } s`,
      );
    }
    const signal = options.signal
      ? AbortSignal.any([options.signal, this.#closing.signal])
      : this.#closing.signal;
    const release = await this.#slots.acquire(signal);
    let leased: Lease | undefined;
    const ended = new AbortController();
    try {
      const started = performance.now();
      leased = await lease(granted, { timeoutMs, signal });
      const runSignal = AbortSignal.any([signal, ended.signal]);
      const client = new ClientSession({
        settings: this.#settings.sampling,
        caps,
        channel: options.client,
        fallback: this.#fallback,
        audit: this.#audit,
        executionId,
        signal: runSignal,
        elicitationTimeoutMs: timeoutMs,
      });
      const bridge = new ToolBridge(this.#hub, policy, this.#settings, runSignal, client);
      const result = await leased.run({
        timeoutMs: Math.max(1, timeoutMs - Math.round(performance.now() - started)),
        reportedTimeoutMs: timeoutMs,
        maxOutputBytes: limits.maxOutputBytes,
        signal,
        onRequest: (frame) => bridge.handle(frame),
      });
      result.durationMs = Math.round(performance.now() - started);
      result.toolCalls = bridge.records;
      const sampling = client.totals;
      if (sampling.rounds > 0) result.sampling = sampling;
      return result;
    } finally {
      ended.abort();
      release();
      leased?.done();
    }
  }

  /** The LLM caps of one run: the admin's, lowered (never raised) by the caller. */
  #samplingCaps(asked: RunOptions["sampling"]): { maxRounds: number; maxTokens: number } {
    const admin = this.#settings.sampling;
    const caps = { maxRounds: admin.maxRounds, maxTokens: admin.maxTokens };
    for (const key of ["maxRounds", "maxTokens"] as const) {
      const value = asked?.[key];
      if (value === undefined) continue;
      if (!Number.isSafeInteger(value) || value < 1) {
        throw new ExecutionRefusedError(
          "LimitError",
          `sampling.${key} must be a positive integer, got ${value}`,
        );
      }
      if (value > caps[key]) {
        throw new ExecutionRefusedError(
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

  async #leaseTs(code: string, granted: GrantedPermissions): Promise<Lease> {
    const pooled = isDefaultProfile(granted) ? this.#pool.take() : undefined;
    const child = pooled ?? await TsChild.spawn({ ...this.#base, ...granted });
    this.#active.add(child);
    return {
      run: (limits) => child.run(wrapTypescript(code), limits),
      done: () =>
        this.#retire(child, async () => {
          // Pooled children do not write to the emit cache (see TsChild.spawn).
          if (!pooled) await scrubEmitCache(this.#base.denoDir);
          this.#pool.fill();
        }),
    };
  }

  async #leasePy(code: string, session: string | undefined, deadline: Deadline): Promise<Lease> {
    let python: PythonRuntime;
    try {
      // The first use may build the memory snapshot (~10 s): the run does not wait past its own
      // deadline, and the build goes on for the next one.
      python = await withinDeadline(this.#pythonRuntime(), deadline);
    } catch (error) {
      if (error instanceof ExecutionRefusedError) throw error;
      throw new ExecutionRefusedError(
        "PythonUnavailable",
        `Python is unavailable: ${(error as Error).message}`,
      );
    }
    const graceMs = this.#settings.python.interruptGraceMs;
    if (session !== undefined) {
      return {
        run: (limits) =>
          this.#sessions.use(
            session,
            () => PyChild.spawn({ ...python.base, session: true }),
            (child) => child.run(code, { ...limits, graceMs }),
          ),
        done: () => {},
      };
    }
    // A run that finds the pool empty while it boots (after start-up, during refills) waits for
    // the child with a head start rather than booting one more on the same CPUs.
    const expired = new AbortController();
    const timer = setTimeout(() => expired.abort(), deadline.timeoutMs);
    let pooled: PyChild | undefined;
    try {
      pooled = await python.pool.takeOrWait(AbortSignal.any([deadline.signal, expired.signal]));
    } finally {
      clearTimeout(timer);
    }
    if (!pooled && deadline.signal.aborted) {
      throw new ExecutionRefusedError("Cancelled", "The execution was cancelled");
    }
    if (!pooled && expired.signal.aborted) {
      throw new ExecutionRefusedError(
        "TimeoutError",
        `Execution timed out after ${deadline.timeoutMs} ms while a Python sandbox was starting: retry, or pass a larger timeoutMs`,
      );
    }
    const child = pooled ?? await PyChild.spawn(python.base);
    this.#active.add(child);
    return {
      run: (limits) => child.run(code, { ...limits, graceMs }),
      done: () => this.#retire(child, () => python.pool.fill()),
    };
  }

  /**
   * Disposes a used child off the response path: a macrotask later, once the response has been
   * written, so that the kill and the teardown do not compete with it for the CPUs (a used
   * TypeScript child sleeps until then). {@linkcode Executor.close} waits for it.
   */
  #retire(child: { dispose(): Promise<void> }, after: () => unknown): void {
    const job = new Promise<void>((resolve) => setTimeout(resolve, 0))
      .then(() => child.dispose())
      .then(after)
      .catch((error) => this.#log.warn(`Cannot clean up a sandbox: ${(error as Error).message}`))
      .finally(() => {
        this.#active.delete(child);
        this.#disposing.delete(job);
      });
    this.#disposing.add(job);
  }

  /** Waits until every used child has been disposed (for tests and benchmarks). */
  async idle(): Promise<void> {
    while (this.#disposing.size > 0) await Promise.all(this.#disposing);
  }

  /** Kills every running, idle and session child and removes their directories. */
  async close(): Promise<void> {
    this.#closing.abort();
    const python = await this.#python?.catch(() => undefined);
    await Promise.all([
      this.#pool.close(),
      python?.pool.close(),
      this.#sessions.close(),
      ...[...this.#active].map((child) => child.dispose()),
    ]);
    await this.idle();
  }
}
