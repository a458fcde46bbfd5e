/**
 * Python's runtime: Pyodide located, its memory snapshot built once, the admin's wheels read, the
 * pool of Python children that boot from them, and the named sessions. A run leases a child of
 * its principal's with a fresh interpreter, a warm one, one booted for it, or its session's.
 *
 * @module
 */
import { join } from "node:path";
import { cancelled, CodeExecutorError, timedOut } from "../../errors.ts";
import { principalShare } from "../../principals.ts";
import { sealChildDenoDir } from "../child/deno_dir.ts";
import { sandboxFile } from "../child/files.ts";
import {
  checkPreparedRun,
  type Deadline,
  type LanguageRuntime,
  type Lease,
  type LeaseRequest,
  PREPARE_RUN_LIMITS,
  type RuntimeContext,
} from "../runtime.ts";
import { PyChild, type PyChildOptions } from "./child.ts";
import { PyPool } from "./pool.ts";
import { ensurePyodideSnapshot, findPyodideDir } from "./pyodide.ts";
import { SessionStore } from "./sessions.ts";
import { readWheels, wheelDirsSignature, WheelWatch } from "./wheels.ts";
import { checkSessionGrants, grantsKey, hasFileGrants, pythonFileGrants } from "./files.ts";

/** What Python children are started from, found once. */
interface PythonStart {
  /**
   * The options every Python child is spawned with. Replaced (with the new wheels) when
   * {@linkcode PythonStart.refreshWheels} finds that `python.wheelDirs` changed.
   */
  readonly base: Omit<PyChildOptions, "session">;
  /** Children ready for a run: booted ahead of need, or kept for the principal they served. */
  pool: PyPool;
  /**
   * Picks up wheels that changed in `python.wheelDirs` since they were read (`code-executor
   * sync` regenerates its wrapper wheels there): when the files' names, sizes or times differ, it
   * reads them again, updates {@linkcode PythonStart.base} and replaces the warm pool's
   * children. It looks at most once a second; call it before a child is leased. Sessions keep
   * the interpreter they started with. A failure is logged, and the earlier wheels stay.
   */
  refreshWheels(): Promise<void>;
  /** Why the memory snapshot could not be built, when it could not. */
  snapshotError?: string;
}

function snapshotDir(context: RuntimeContext): string {
  return join(context.locations.cacheDir, "pyodide");
}

/**
 * Locates Pyodide, builds its snapshot if need be (~10 s the first time) and creates the pool.
 *
 * @throws {Error} When Pyodide cannot be found.
 */
async function startPython(context: RuntimeContext): Promise<PythonStart> {
  const { settings, log, closing, locations } = context;
  const python = settings.python;
  const sandboxDir = join(locations.cacheDir, "sandbox");
  const hostPath = await sandboxFile("py_host.ts", sandboxDir);
  const workerPath = await sandboxFile("py_worker.ts", sandboxDir);
  const inboxPath = await sandboxFile("py_inbox.ts", sandboxDir);
  const filesPath = await sandboxFile("py_files.ts", sandboxDir);
  const pyodideDir = await findPyodideDir();
  // Taken before the read: a wheel rewritten meanwhile is then read again at the next check.
  const signature = await wheelDirsSignature(python.wheelDirs);
  const wheels = await readWheels(python.wheelDirs, { log });
  const packages = await readWheels(python.packages, { log, setting: "python.packages" });
  let snapshotError: string | undefined;
  const snapshotPath = await ensurePyodideSnapshot({
    denoPath: locations.denoPath,
    hostPath,
    workerPath,
    inboxPath,
    pyodideDir,
    cacheDir: snapshotDir(context),
    denoDir: locations.denoDir,
    // A build that fails is logged, and children boot without it; `prepare` names the reason.
    log: {
      ...log,
      warn: (message) => {
        snapshotError = message.replace(/^Python children will boot [^:]*: /, "");
        log.warn(message);
      },
    },
    signal: closing,
    packages,
  });
  if (closing.aborted) throw new Error("The server is shutting down");
  let base: Omit<PyChildOptions, "session"> = {
    denoPath: locations.denoPath,
    hostPath,
    workerPath,
    inboxPath,
    filesPath,
    pyodideDir,
    snapshotPath,
    tempRoot: locations.tempRoot,
    denoDir: locations.denoDir,
    memoryMb: python.memoryMb,
    maxRuns: python.runsPerChild,
    maxAgeMs: python.childMaxAgeMs,
    allowedImports: python.allowedImports,
    // Every child unpacks the packages too: the snapshot holds their modules, not their files.
    wheels: [...packages, ...wheels],
    log,
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
  // for the first run (two boots side by side on 2 CPUs each take nearly as long as both in a
  // row). Refills boot side by side: under a burst, that keeps every CPU busy.
  let serial = python.warmPool;
  let booting: Promise<unknown> = Promise.resolve();
  const pool = new PyPool({
    size: python.warmPool,
    spawn: () => {
      if (serial-- <= 0) return boot();
      const next = booting.then(() => {
        if (closing.aborted) throw new Error("The server is shutting down");
        return boot();
      });
      booting = next.catch(() => {});
      return next;
    },
    demand: { burst: python.warmPoolBurst, idleMs: python.warmPoolIdleMs },
    reaper: context.reaper,
    log,
  });
  const watch = new WheelWatch({
    dirs: python.wheelDirs,
    signature,
    log,
    changed: (wheels) => {
      base = { ...base, wheels: [...packages, ...wheels] };
      pool.drain();
    },
  });
  return {
    get base() {
      return base;
    },
    pool,
    refreshWheels: () => closing.aborted ? Promise.resolve() : watch.check(),
    snapshotError,
  };
}

/**
 * Waits for the runtime, but not past the run's deadline: the first use may build the snapshot,
 * and the build goes on for the next run.
 *
 * @param runtime The runtime being started.
 * @param deadline The run's time and cancellation.
 * @returns The runtime.
 * @throws {CodeExecutorError} At the deadline, on cancel, or when Python is unavailable.
 */
function pythonWithin(
  runtime: Promise<PythonStart>,
  deadline: Deadline,
): Promise<PythonStart> {
  return new Promise<PythonStart>((resolve, reject) => {
    const done = () => {
      clearTimeout(timer);
      deadline.signal.removeEventListener("abort", onAbort);
    };
    const timer = setTimeout(() => {
      done();
      reject(
        timedOut(deadline.timeoutMs, {
          during: "while Python was starting for the first time (building its memory snapshot)",
          change: "retry in a few seconds",
        }),
      );
    }, deadline.timeoutMs);
    const onAbort = () => {
      done();
      reject(cancelled(deadline.signal));
    };
    deadline.signal.addEventListener("abort", onAbort, { once: true });
    runtime.then((value) => {
      done();
      resolve(value);
    }, (error) => {
      done();
      reject(
        new CodeExecutorError(
          "PythonUnavailable",
          `Python is unavailable: ${(error as Error).message}`,
          { cause: error },
        ),
      );
    });
  });
}

/**
 * Takes a ready child for the principal: one kept for it, a warm one, or one that is booting
 * (after start-up, during refills), rather than booting one more on the same CPUs.
 *
 * @param pool The Python pool.
 * @param principal Who runs.
 * @param deadline The run's time and cancellation.
 * @returns A ready child, or undefined when none is coming (the caller spawns one).
 * @throws {CodeExecutorError} `Cancelled` on cancel, `TimeoutError` at the deadline.
 */
async function takePooledChild(
  pool: PyPool,
  principal: string,
  deadline: Deadline,
): Promise<PyChild | undefined> {
  const expired = new AbortController();
  const timer = setTimeout(() => expired.abort(), deadline.timeoutMs);
  let pooled: PyChild | undefined;
  try {
    pooled = await pool.lease(principal, AbortSignal.any([deadline.signal, expired.signal]));
  } finally {
    clearTimeout(timer);
  }
  if (!pooled && deadline.signal.aborted) {
    throw cancelled(deadline.signal);
  }
  if (!pooled && expired.signal.aborted) {
    throw timedOut(deadline.timeoutMs, {
      during: "while a Python sandbox was starting",
      change: "retry, or pass a larger timeoutMs",
    });
  }
  return pooled;
}

/** Python children: leased warm, booted for a run, or kept for a session. */
export class PythonRuntime implements LanguageRuntime {
  /** The language it runs. */
  readonly language = "python";
  #context: RuntimeContext;
  #started: Promise<PythonStart> | undefined;
  /** The pool, once Python has started. */
  #pool: PyPool | undefined;
  #sessions: SessionStore<PyChild>;
  /** The file grants each session's child was started with ({@linkcode grantsKey}). */
  #sessionGrants = new WeakMap<PyChild, string>();

  private constructor(context: RuntimeContext) {
    this.#context = context;
    const { settings, log } = context;
    this.#sessions = new SessionStore({
      ttlMs: settings.python.sessionTtlMs,
      max: settings.python.maxSessions,
      ownerMax: (owner) =>
        principalShare(owner, settings.python.maxSessions, settings.python.principalMaxSessions),
      settingPrefix: "python",
      log,
    });
  }

  /**
   * Readies the Python children's Deno cache and, with `warm` and a `python.warmPool`, starts
   * Python (its snapshot first) and fills the pool; otherwise Python starts on first use.
   *
   * @param context The executor's settings, locations, log, shutdown and reaper.
   * @param options Whether to fill the warm pool now.
   * @returns The runtime.
   */
  static async create(context: RuntimeContext, options: { warm: boolean }): Promise<PythonRuntime> {
    await sealChildDenoDir(context.locations.denoDir, false);
    const runtime = new PythonRuntime(context);
    const python = context.settings.python;
    if (options.warm && python.enabled && python.warmPool > 0) {
      runtime.#start().then((started) => started.pool.fill(), () => {});
    }
    return runtime;
  }

  /** Locates Pyodide and its snapshot once; a failure is reported by every run_python. */
  #start(): Promise<PythonStart> {
    const context = this.#context;
    if (!this.#started) {
      this.#started = startPython(context);
      this.#started.then((started) => this.#pool = started.pool, () => {});
    }
    // A start cut short by close() (a normal exit, or a fatal error of the server's own start) is
    // no news about Python: only a failure while the server runs is.
    this.#started.catch((error) => {
      if (!context.closing.aborted) {
        context.log.warn(`Python is unavailable: ${(error as Error).message}`);
      }
    });
    return this.#started;
  }

  /**
   * Leases a Python child: the session's, a warm one, or one booted for the run; the first run
   * waits for Python's start-up, up to its deadline.
   *
   * @param request The code, deadline, caller, session and a skill's arguments.
   * @returns The lease.
   * @throws {CodeExecutorError} `PythonUnavailable`, `TimeoutError` or `Cancelled`.
   */
  async lease(request: LeaseRequest): Promise<Lease> {
    const { code, session, principal, deadline, args } = request;
    const python = await pythonWithin(this.#start(), deadline);
    // Wheels that `sync` regenerated reach this run's child without a restart.
    await python.refreshWheels();
    const graceMs = this.#context.settings.python.interruptGraceMs;
    // A run granted files gets a child started with them, and the child is its alone.
    const files = hasFileGrants(request.granted)
      ? await pythonFileGrants(request.granted)
      : undefined;
    if (session !== undefined) {
      const grants = grantsKey(files);
      return {
        run: (limits) =>
          this.#sessions.use(
            { id: session, owner: principal },
            async () => {
              const child = await PyChild.spawn({ ...python.base, session: true, files });
              this.#sessionGrants.set(child, grants);
              return child;
            },
            (child) => {
              checkSessionGrants(session, this.#sessionGrants.get(child) ?? "", grants);
              return child.run(code, { ...limits, graceMs });
            },
          ),
        done: () => {},
      };
    }
    let child: PyChild;
    try {
      if (files) child = await PyChild.spawn({ ...python.base, files });
      else {
        const pooled = await takePooledChild(python.pool, principal, deadline);
        if (pooled) child = pooled;
        else {
          child = await PyChild.spawn(python.base);
          python.pool.adopt(child, principal);
        }
      }
    } catch (error) {
      if (!files) python.pool.returned();
      throw error;
    }
    this.#context.reaper.track(child);
    return {
      run: (limits) => child.run(code, { ...limits, graceMs, args }),
      // A child started with the run's file grants may read them: it serves that run alone. Any
      // other boots its next interpreter for this principal, or is disposed of.
      done: () => files ? this.#context.reaper.retire(child, () => {}) : python.pool.release(child),
    };
  }

  /**
   * A skill's body for the caller's Python child, which compiles it in a namespace of its own.
   *
   * @param code The skill's body.
   * @returns `{source}`.
   */
  inlineSkill(code: string): Record<string, unknown> {
    return { source: code };
  }

  /**
   * Starts Python (building the snapshot), then boots a child from the snapshot and runs code.
   *
   * @returns Where Pyodide and the snapshot are, and how long they took.
   * @throws {Error} When Pyodide is missing, the snapshot cannot be built, or a child booted from
   * it cannot run code.
   */
  async prepare(): Promise<string> {
    const started = performance.now();
    const python = await this.#start();
    const { snapshotPath, pyodideDir } = python.base;
    if (!snapshotPath) {
      throw new Error(
        `Cannot build the Pyodide memory snapshot in ${snapshotDir(this.#context)}: ${
          python.snapshotError ?? "no reason was given"
        }`,
      );
    }
    const readyMs = Math.round(performance.now() - started);
    const child = await PyChild.spawn(python.base);
    try {
      if (!(await child.ready)) {
        throw new Error(`Cannot start a Python sandbox: ${child.fatal ?? "no reason was given"}`);
      }
      if (!child.boot?.fromSnapshot) {
        throw new Error(
          `A Python sandbox booted without the snapshot ${snapshotPath}: ${
            child.boot?.snapshotError ?? "no reason was given"
          }`,
        );
      }
      checkPreparedRun("A Python sandbox", await child.run("6 * 7", PREPARE_RUN_LIMITS));
    } finally {
      await child.dispose();
    }
    const bytes = (await Deno.stat(snapshotPath)).size;
    return `Pyodide in ${pyodideDir}; snapshot ${snapshotPath} (${
      (bytes / 1e6).toFixed(1)
    } MB, ready after ${readyMs} ms); a child booted from it and ran code`;
  }

  /**
   * The pool of ready children, once Pyodide is located.
   *
   * @returns The pool.
   */
  async pool(): Promise<PyPool> {
    return (await this.#start()).pool;
  }

  /**
   * The pool's size now, without starting Python.
   *
   * @returns Interpreters ready for a run (in warm children and in children kept for their
   *   principal), and how many the pool keeps now; zeros before Python has started.
   */
  warmChildren(): { ready: number; target: number } {
    return { ready: this.#pool?.idle ?? 0, target: this.#pool?.target ?? 0 };
  }

  /** Kills the idle pooled children and every session's. */
  async close(): Promise<void> {
    const python = await this.#started?.catch(() => undefined);
    await Promise.all([python?.pool.close(), this.#sessions.close()]);
  }
}
