/**
 * The Python runtime of an executor: Pyodide located, its memory snapshot built once, the admin's
 * wheels read, and the warm pool of Python children that boot from them.
 *
 * @module
 */
import { join } from "node:path";
import type { Settings } from "../../config/settings.ts";
import type { Logger } from "../../log.ts";
import { PyChild, type PyChildOptions } from "./child.ts";
import { type LocalWheel, readWheels, wheelDirsSignature } from "./wheels.ts";
import { ensurePyodideSnapshot, findPyodideDir } from "./pyodide.ts";
import { sandboxFile } from "../child/files.ts";
import { WarmPool } from "../child/warm_pool.ts";
import { abortError, CodeExecutorError } from "../../errors.ts";

/** What Python children are started from, found once. */
export interface PythonRuntime {
  /**
   * The options every Python child of this runtime is spawned with. Replaced (with the new
   * wheels) when {@linkcode PythonRuntime.refreshWheels} finds that `python.wheelDirs` changed.
   */
  readonly base: Omit<PyChildOptions, "session">;
  /** Single-use children booted ahead of need. */
  pool: WarmPool<PyChild>;
  /**
   * Picks up wheels that changed in `python.wheelDirs` since they were read (`code-executor
   * sync` regenerates its wrapper wheels there): when the files' names, sizes or times differ, it
   * reads them again, updates {@linkcode PythonRuntime.base} and replaces the warm pool's
   * children. It looks at most once a second; call it before a child is leased. Sessions keep
   * the interpreter they started with. A failure is logged, and the earlier wheels stay.
   */
  refreshWheels(): Promise<void>;
}

/** What {@linkcode startPythonRuntime} needs from the executor. */
export interface PythonRuntimeOptions {
  /** The admin's settings (`python`, `limits`). */
  settings: Settings;
  /** The `deno` executable of sandbox children. */
  denoPath: string;
  /** Deno's cache directory for children. */
  denoDir: string;
  /** Where children's private directories are made. */
  tempRoot: string;
  /** Code Executor's cache directory (runner copies, the snapshot). */
  cacheDir: string;
  /** Where to report problems. */
  log: Logger;
  /** Aborted when the server shuts down: no child is booted after that. */
  closing: AbortSignal;
}

/**
 * Locates Pyodide, builds its snapshot if need be (~10 s the first time) and creates the pool.
 *
 * @param options Locations, settings and the shutdown signal.
 * @returns The runtime.
 * @throws {Error} When Pyodide cannot be found or its snapshot cannot be built.
 */
export async function startPythonRuntime(options: PythonRuntimeOptions): Promise<PythonRuntime> {
  const { settings, log, closing } = options;
  const python = settings.python;
  const sandboxDir = join(options.cacheDir, "sandbox");
  const hostPath = await sandboxFile("py_host.ts", sandboxDir);
  const workerPath = await sandboxFile("py_worker.ts", sandboxDir);
  const pyodideDir = await findPyodideDir();
  // Taken before the read: a wheel rewritten meanwhile is then read again at the next check.
  const signature = await wheelDirsSignature(python.wheelDirs);
  const wheels = await readWheels(python.wheelDirs, { log });
  const snapshotPath = await ensurePyodideSnapshot({
    denoPath: options.denoPath,
    hostPath,
    workerPath,
    pyodideDir,
    cacheDir: join(options.cacheDir, "pyodide"),
    denoDir: options.denoDir,
    log,
    signal: closing,
  });
  if (closing.aborted) throw new Error("The server is shutting down");
  let base: Omit<PyChildOptions, "session"> = {
    denoPath: options.denoPath,
    hostPath,
    workerPath,
    pyodideDir,
    snapshotPath,
    tempRoot: options.tempRoot,
    denoDir: options.denoDir,
    memoryMb: python.memoryMb,
    allowedImports: python.allowedImports,
    wheels,
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
  const pool = new WarmPool(
    python.warmPool,
    () => {
      if (serial-- <= 0) return boot();
      const next = booting.then(() => {
        if (closing.aborted) throw new Error("The server is shutting down");
        return boot();
      });
      booting = next.catch(() => {});
      return next;
    },
    log,
    { burst: python.warmPoolBurst, idleMs: python.warmPoolIdleMs },
  );
  const watch = new WheelWatch(python.wheelDirs, signature, log, (wheels) => {
    base = { ...base, wheels };
    pool.drain();
  });
  return {
    get base() {
      return base;
    },
    pool,
    refreshWheels: () => closing.aborted ? Promise.resolve() : watch.check(),
  };
}

/** How often {@linkcode WheelWatch} looks at the wheel directories, at most. */
const WHEEL_CHECK_MS = 1_000;

/**
 * Notices when the wheels of `python.wheelDirs` change and reads them again. Looking costs a
 * directory listing and a stat per wheel; it happens when a run starts, at most once a second.
 */
class WheelWatch {
  #dirs: readonly string[];
  #signature: string;
  #log: Logger;
  #changed: (wheels: LocalWheel[]) => void;
  #checkedAt = performance.now();
  #checking: Promise<void> | undefined;

  constructor(
    dirs: readonly string[],
    signature: string,
    log: Logger,
    changed: (wheels: LocalWheel[]) => void,
  ) {
    this.#dirs = dirs;
    this.#signature = signature;
    this.#log = log;
    this.#changed = changed;
  }

  /** Reads the wheels again if they changed; concurrent callers share one look. */
  check(): Promise<void> {
    if (this.#dirs.length === 0) return Promise.resolve();
    if (this.#checking) return this.#checking;
    if (performance.now() - this.#checkedAt < WHEEL_CHECK_MS) return Promise.resolve();
    this.#checking = this.#look().finally(() => {
      this.#checkedAt = performance.now();
      this.#checking = undefined;
    });
    return this.#checking;
  }

  async #look(): Promise<void> {
    const signature = await wheelDirsSignature(this.#dirs);
    if (signature === this.#signature) return;
    // Whatever the outcome, this state of the files is dealt with: a failure is not retried
    // (and logged) every second, and the next change is picked up.
    this.#signature = signature;
    let wheels: LocalWheel[];
    try {
      wheels = await readWheels(this.#dirs, { log: this.#log });
    } catch (error) {
      this.#log.warn(
        `Python sandboxes keep the wheels they had: the changed python.wheelDirs cannot be used: ${
          (error as Error).message
        }`,
      );
      return;
    }
    this.#log.info(
      `python.wheelDirs changed: new Python sandboxes get ${wheels.length} wheel(s) (${
        wheels.map((wheel) => wheel.name).join(", ") || "none"
      }); open sessions keep theirs`,
    );
    this.#changed(wheels);
  }
}

/** How long a run may still take, and its cancellation. */
export interface Deadline {
  /** Milliseconds left. */
  timeoutMs: number;
  /** Aborted when the run is cancelled. */
  signal: AbortSignal;
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
export function pythonWithin(
  runtime: Promise<PythonRuntime>,
  deadline: Deadline,
): Promise<PythonRuntime> {
  return new Promise<PythonRuntime>((resolve, reject) => {
    const done = () => {
      clearTimeout(timer);
      deadline.signal.removeEventListener("abort", onAbort);
    };
    const timer = setTimeout(() => {
      done();
      reject(
        new CodeExecutorError(
          "TimeoutError",
          `Execution timed out after ${deadline.timeoutMs} ms while Python was starting for the first time (building its memory snapshot); retry in a few seconds`,
        ),
      );
    }, deadline.timeoutMs);
    const onAbort = () => {
      done();
      reject(abortError(deadline.signal, "The execution was cancelled"));
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
 * Takes a warm child from the pool, waiting for one that is booting when the pool is empty (after
 * start-up, during refills): a head start rather than booting one more on the same CPUs.
 *
 * @param pool The Python warm pool.
 * @param deadline The run's time and cancellation.
 * @returns A warm child, or undefined when none is coming (the caller spawns one).
 * @throws {CodeExecutorError} `Cancelled` on cancel, `TimeoutError` at the deadline.
 */
export async function takePooledChild(
  pool: WarmPool<PyChild>,
  deadline: Deadline,
): Promise<PyChild | undefined> {
  const expired = new AbortController();
  const timer = setTimeout(() => expired.abort(), deadline.timeoutMs);
  let pooled: PyChild | undefined;
  try {
    pooled = await pool.takeOrWait(AbortSignal.any([deadline.signal, expired.signal]));
  } finally {
    clearTimeout(timer);
  }
  if (!pooled && deadline.signal.aborted) {
    throw abortError(deadline.signal, "The execution was cancelled");
  }
  if (!pooled && expired.signal.aborted) {
    throw new CodeExecutorError(
      "TimeoutError",
      `Execution timed out after ${deadline.timeoutMs} ms while a Python sandbox was starting: retry, or pass a larger timeoutMs`,
    );
  }
  return pooled;
}
