/**
 * One Python sandbox: a `deno run` child that may only read the Pyodide package, its memory
 * snapshot and the sandbox's worker modules. Its controller (`sandbox/py_host.ts`) starts a
 * Pyodide Worker per run (or one for a session's runs); the Worker speaks the same frames as the
 * TypeScript runner. A child serves runs one after the other, each in a fresh interpreter, until
 * it retires.
 *
 * @module
 */
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { cancelled, CodeExecutorError, timedOut } from "../../errors.ts";
import type { Logger } from "../../log.ts";
import { type LocalWheel, wheelModules } from "./wheels.ts";
import { fileFlags, hasFileGrants, type PyFileFlags, type PyFileGrants } from "./files.ts";
import type { ExecutionResult } from "../result.ts";
import { pythonPrelude } from "../child/files.ts";
import type { RunLimits } from "../child/execution.ts";
import { HAS_PROC, lowerThreadPriority, threadNames } from "../child/_os.ts";
import { SandboxProcess } from "../child/process.ts";
import { FrameError } from "../child/frames.ts";

/** Modules Python code may import when the admin has not chosen a list. */
export const DEFAULT_PYTHON_IMPORTS: readonly string[] = [
  "asyncio",
  "base64",
  "bisect",
  "collections",
  "copy",
  "csv",
  "dataclasses",
  "datetime",
  "decimal",
  "difflib",
  "enum",
  "fractions",
  "functools",
  "hashlib",
  "heapq",
  "io",
  "itertools",
  "json",
  "math",
  "operator",
  "pprint",
  "queue",
  "random",
  "re",
  "stat",
  "statistics",
  "string",
  // sys.exit(), sys.stderr, sys.version: what code reaches for first. It adds no reach: sys is
  // already an attribute of allowed modules (collections._sys), and the import policy is a guide,
  // the process's permissions the wall.
  "sys",
  "textwrap",
  "time",
  "typing",
  "unicodedata",
  "uuid",
  "zoneinfo",
];

/** Where a Python child's files are and what it may import. */
export interface PyChildOptions {
  /** The `deno` executable. */
  denoPath: string;
  /** Path of `sandbox/py_host.ts` on disk. */
  hostPath: string;
  /** Path of `sandbox/py_worker.ts` on disk. */
  workerPath: string;
  /** Path of `sandbox/py_inbox.ts` on disk. */
  inboxPath: string;
  /** The Pyodide package directory, from `findPyodideDir`. */
  pyodideDir: string;
  /** The memory snapshot, from `ensurePyodideSnapshot`; without it the child boots cold. */
  snapshotPath?: string;
  /** Directory under which the child's private directory is created. */
  tempRoot: string;
  /** Deno's cache directory for children. */
  denoDir: string;
  /** V8 heap limit and RSS watchdog limit, in MB. */
  memoryMb: number;
  /** Keep the interpreter for several runs (globals persist); a fresh one for each run otherwise. */
  session?: boolean;
  /**
   * Runs the child serves, each in a fresh interpreter, before it retires
   * ({@linkcode PyChild.recycle} then says no); 1 by default: single-use.
   */
  maxRuns?: number;
  /** Time after its start at which the child retires, after the run in progress. */
  maxAgeMs?: number;
  /** Top-level modules user code may import, or `"*"`; {@linkcode DEFAULT_PYTHON_IMPORTS} by default. */
  allowedImports?: readonly string[] | "*";
  /**
   * Pure-Python wheels to unpack into site-packages at boot, from `readWheels`; their top-level
   * modules are added to `allowedImports`.
   */
  wheels?: readonly LocalWheel[];
  /** Where to report problems. */
  log: Logger;
  /** Path of `sandbox/py_files.ts` on disk, which mounts `files`. */
  filesPath?: string;
  /** Host paths the run may read, mounted read-only at the same paths (`files.ts`). */
  files?: PyFileGrants;
}

/** Limits of one Python run. */
export interface PyRunLimits extends RunLimits {
  /**
   * Time between the interrupt at `timeoutMs` (KeyboardInterrupt, clean traceback) and SIGKILL,
   * for code that does not check for interrupts (C loops); 500 ms by default.
   */
  graceMs?: number;
  /** A skill's arguments, the global `args` of the code (a skill run as a nested run). */
  args?: Record<string, unknown>;
}

/** Where the time of the last {@linkcode PyChild.recycle} went, for benchmarks. */
export interface PyRecycleTimes {
  /** Recycle called → the last run's Worker seen gone. */
  workerGoneMs: number;
  /** `next` sent → the next interpreter's `ready` read. */
  readyMs: number;
  /** Worker start → interpreter ready, measured in the child. */
  bootMs?: number;
}

/** How the child booted, from its `ready` frame. */
export interface PyBootInfo {
  /** Time from the Worker's start to a usable interpreter, measured in the child. */
  bootMs?: number;
  /** Whether the interpreter came from the memory snapshot. */
  fromSnapshot: boolean;
  /** Why the snapshot was not used, when it was given and failed. */
  snapshotError?: string;
  /** Wheels that could not be unpacked, and why; the child runs without them. */
  wheelErrors?: string[];
}

const DEFAULT_GRACE_MS = 500;

/**
 * V8 flags of a Python child. A fresh child's first run paid 20-35 ms for V8 tiering up the
 * interpreter's hot Wasm functions while it ran. With a third of the default tiering budget
 * (13,000,000), the `1 + 1` the worker runs before `ready` triggers that work instead: a fresh
 * child's first one-liner then takes ~5 ms, at about the same boot time and CPU, and compute
 * reaches full speed sooner. (A budget of 1,000,000 or a larger warm-up costs ~30% more CPU
 * per boot; `--liftoff-only` makes compute 2.5x slower.)
 */
const PY_V8_FLAGS = "--wasm-tiering-budget=4000000";

let snapshotWarned = false;
const wheelWarned = new Set<string>();

/** A wheel as the `init` frame carries it, and the modules it adds to the allowed imports. */
interface WheelFrame {
  name: string;
  data: string;
  modules: string[];
}

/** Every child of a runtime gets the same wheels: encode each once. */
const wheelFrames = new WeakMap<Uint8Array, WheelFrame>();

function wheelFrame(wheel: LocalWheel): WheelFrame {
  let frame = wheelFrames.get(wheel.bytes);
  if (!frame || frame.name !== wheel.name) {
    let modules: string[];
    try {
      modules = wheelModules(wheel.bytes);
    } catch (error) {
      throw new SyntaxError(`Cannot use the wheel ${wheel.name}: ${(error as Error).message}`);
    }
    frame = { name: wheel.name, data: wheel.bytes.toBase64(), modules };
    wheelFrames.set(wheel.bytes, frame);
  }
  return frame;
}

function withWheelModules(
  allowed: readonly string[] | "*",
  wheels: readonly WheelFrame[],
): readonly string[] | "*" {
  if (allowed === "*" || wheels.length === 0) return allowed;
  return [...new Set([...allowed, ...wheels.flatMap((wheel) => wheel.modules)])];
}

/**
 * Errors after which a child is not given another run: the host stopped the run (a limit, a
 * cancel) or the child did something it should not (a crash, a malformed frame).
 */
const RETIRING_ERRORS: ReadonlySet<string> = new Set([
  "TimeoutError",
  "MemoryLimitError",
  "OutputLimitError",
  "Cancelled",
  "SandboxCrash",
  "SandboxProtocolError",
  "SandboxError",
  "SandboxStartError",
]);

/**
 * How long a run's Worker may take to be gone after its result. It closes itself once its
 * result is written; one that is still there after this ran on (code that forged the result, or
 * a Worker it started), and the child retires.
 */
const WORKER_EXIT_MS = 2_000;
/** How long the next interpreter of a child may take to boot. */
const RECYCLE_BOOT_MS = 60_000;
/** Deno names a Worker's thread `worker-<id>`, ids counted from 1 in each process. */
const WORKER_THREAD = /^worker-(\d+)$/;

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * A Python sandbox child. It runs once and is disposed, serves several runs of one caller one
 * after the other (`maxRuns`), each in an interpreter booted for it, or keeps one interpreter
 * for a session's runs (`session: true`).
 *
 * @example
 * ```ts
 * const child = await PyChild.spawn(options);
 * try {
 *   const result = await child.run("sum(range(10))", { timeoutMs: 5_000, maxOutputBytes: 65536 });
 * } finally {
 *   await child.dispose();
 * }
 * ```
 */
export class PyChild {
  #process: SandboxProcess;
  #log: Logger;
  #session: boolean;
  #maxRuns: number;
  #retireAt: number;
  #runs = 0;
  /** Whether another run may follow: false once one ended badly, or a check failed. */
  #reusable: boolean;
  #used = false;
  #running = false;
  #ready: Promise<boolean>;
  #boot: PyBootInfo | undefined;
  #fatal: string | undefined;
  /** The inbox Worker's thread, which is the only Worker thread between runs. */
  #inboxThread: string | undefined;
  #recycleTimes: PyRecycleTimes | undefined;
  #lastBootMs: number | undefined;

  private constructor(
    process: SandboxProcess,
    opts: PyChildOptions,
    wheels: WheelFrame[],
    prelude: string,
    files: PyFileFlags | undefined,
  ) {
    this.#process = process;
    this.#log = opts.log;
    this.#session = opts.session === true;
    this.#maxRuns = this.#session ? Infinity : Math.max(1, opts.maxRuns ?? 1);
    this.#retireAt = performance.now() + (opts.maxAgeMs ?? Infinity);
    // Only where the host can see that a run's Worker is gone: Linux's /proc.
    // A child with file grants may read them: it serves the run it was started for alone.
    this.#reusable = !this.#session && this.#maxRuns > 1 && HAS_PROC && !files;
    this.#ready = this.#untilBooted().then(async (ok) => {
      if (ok && this.#reusable) await this.#findInbox();
      return ok;
    });
    process.send({
      t: "init",
      nonce: process.nonce,
      indexDir: opts.pyodideDir,
      indexUrl: pathToFileURL(join(opts.pyodideDir, "/")).href,
      workerPath: opts.workerPath,
      workerUrl: pathToFileURL(opts.workerPath).href,
      snapshotPath: opts.snapshotPath,
      session: this.#session,
      allowedImports: withWheelModules(opts.allowedImports ?? DEFAULT_PYTHON_IMPORTS, wheels),
      wheels: wheels.map(({ name, data }) => ({ name, data })),
      // Run only by a Worker that cannot use the snapshot, which only the Worker finds out: 18 KB.
      prelude,
      files: files?.init,
    }).catch(() => {});
  }

  /**
   * Starts a child. It boots Pyodide and waits for code; {@linkcode PyChild.ready} tells when.
   *
   * @param opts Locations, limits and mode.
   * @returns The started child.
   * @throws {Deno.errors.NotFound} When the `deno` executable or `sandbox/py_prelude.py` cannot
   * be found.
   * @throws {SyntaxError} When a wheel is not a zip archive with a `.dist-info` directory.
   */
  static async spawn(opts: PyChildOptions): Promise<PyChild> {
    const wheels = (opts.wheels ?? []).map(wheelFrame);
    const prelude = await pythonPrelude();
    const read = [opts.pyodideDir, opts.workerPath, opts.inboxPath];
    if (opts.snapshotPath) read.push(opts.snapshotPath);
    const files = hasFileGrants(opts.files) ? fileFlags(opts.files, opts.filesPath) : undefined;
    if (files) read.push(...files.read);
    const process = await SandboxProcess.start({
      ...opts,
      // Each interpreter's Worker is a thread of its own, and glibc gives threads arenas of their
      // own, which keep what they freed: 60-90 MB more per child after a few runs, ~20 with two.
      // And glibc keeps what a terminated Worker freed at the top of an arena until its trim
      // threshold, which it raises as large blocks come and go: fixed at 128 KiB, a child that
      // served 30 runs held 133-141 MB instead of 205-212, and an idle one 143-145 instead of
      // 155-164. The price: a trivial run in a fresh interpreter 0-0.25 ms slower (3.22-3.50
      // against 3.22-3.26 ms), the CPU per run and fresh interpreter within the noise.
      env: { MALLOC_ARENA_MAX: "2", MALLOC_TRIM_THRESHOLD_: "131072" },
      args: () => [
        "--unstable-worker-options",
        `--allow-read=${read.join(",")}`,
        ...(files?.args ?? []),
        `--v8-flags=--max-old-space-size=${opts.memoryMb},${PY_V8_FLAGS}`,
        opts.hostPath,
        opts.inboxPath,
      ],
    });
    return new PyChild(process, opts, wheels, prelude, files);
  }

  /** The child's process id. */
  get pid(): number {
    return this.#process.pid;
  }

  /** Resolves true once Pyodide has booted, false if the child failed first. */
  get ready(): Promise<boolean> {
    return this.#ready;
  }

  /** How the child's first interpreter booted; undefined until {@linkcode PyChild.ready} resolves true. */
  get boot(): PyBootInfo | undefined {
    return this.#boot;
  }

  /** Whether the child process has exited. */
  get exited(): boolean {
    return this.#process.exited;
  }

  /** Whether a run is in progress. */
  get busy(): boolean {
    return this.#running;
  }

  /** Runs the child has served. */
  get runs(): number {
    return this.#runs;
  }

  /** Where the time of the last successful {@linkcode PyChild.recycle} went. */
  get recycleTimes(): PyRecycleTimes | undefined {
    return this.#recycleTimes;
  }

  /** Why the child could not boot, from its `fatal` frame; undefined otherwise. */
  get fatal(): string | undefined {
    return this.#fatal;
  }

  /**
   * Waits for the controller's `ready` for the next interpreter: frames of Workers before it
   * (a run's, written after its result) and bytes that are no frame are dropped. Its stderr
   * mark, just before it, says that the stderr written before has been read.
   */
  async #untilBooted(marked?: Promise<void>): Promise<boolean> {
    const process = this.#process;
    while (true) {
      let frame: Record<string, unknown> | null;
      try {
        frame = await process.next();
      } catch (error) {
        // A frame too large stays in the way; any other is dropped with its line.
        if (error instanceof FrameError && !error.tooLarge) continue;
        return false;
      }
      if (frame === null) return false;
      if (!process.lastFrameControl) continue;
      if (frame.t === "ready" && typeof frame.nonce === "string") {
        await Promise.race([marked ?? Promise.resolve(), process.stderrDone]);
        process.acceptFrames(frame.nonce);
        this.#onReady(frame);
        return true;
      }
      if (frame.t === "fatal") {
        this.#fatal = typeof frame.message === "string" ? frame.message.slice(0, 2000) : undefined;
        this.#log.warn(`Python sandbox ${this.pid} did not start: ${this.#fatal ?? "no reason"}`);
      }
      return false;
    }
  }

  #onReady(frame: Record<string, unknown>): void {
    this.#lastBootMs = typeof frame.bootMs === "number" ? frame.bootMs : undefined;
    // The first interpreter's boot describes the child; later ones come from the same files.
    if (this.#boot) return;
    // A child that boots more interpreters needs these threads for it (the boot waits on V8's
    // background compile tasks), and a lowered priority cannot be raised again without
    // privilege: at nice 19 on a loaded machine, later boots took 10-22 s instead of 2-4.
    if (!this.#reusable) lowerCompilerThreads(this.pid);
    this.#boot = {
      bootMs: typeof frame.bootMs === "number" ? frame.bootMs : undefined,
      fromSnapshot: frame.fromSnapshot === true,
    };
    if (typeof frame.snapshotError === "string") {
      this.#boot.snapshotError = frame.snapshotError;
      if (!snapshotWarned) {
        snapshotWarned = true;
        this.#log.warn(`Python sandboxes boot without their snapshot: ${frame.snapshotError}`);
      }
    }
    if (Array.isArray(frame.wheelErrors)) {
      this.#boot.wheelErrors = frame.wheelErrors.slice(0, 20)
        .filter((e): e is string => typeof e === "string").map((e) => e.slice(0, 2000));
      for (const error of this.#boot.wheelErrors) {
        if (wheelWarned.has(error)) continue;
        wheelWarned.add(error);
        this.#log.warn(`Python sandboxes run without a wheel of python.wheelDirs: ${error}`);
      }
    }
  }

  /**
   * Finds the inbox's thread: at the first `ready` the child has two Worker threads, the inbox
   * (started first, so numbered first) and the interpreter's. Anything else, and the child is
   * not reused.
   */
  async #findInbox(): Promise<void> {
    const workers = await this.#workerThreads();
    if (workers?.length === 2) {
      this.#inboxThread = workers.sort((a, b) => workerId(a) - workerId(b))[0];
    } else this.#reusable = false;
  }

  async #workerThreads(): Promise<string[] | undefined> {
    return (await threadNames(this.pid))?.filter((name) => WORKER_THREAD.test(name));
  }

  /**
   * Runs Python code. The value of the last expression, or of the name a last assignment binds,
   * becomes `returnValue`; top-level `await` works. After it, a child that is not a session's
   * needs {@linkcode PyChild.recycle} before it runs again.
   *
   * At `timeoutMs` the child is asked to interrupt the code (KeyboardInterrupt, reported as a
   * `TimeoutError` with the code's traceback); code that does not stop within `graceMs` is
   * killed.
   *
   * Work the code scheduled and did not finish (asyncio tasks, `call_soon` / `call_later`
   * callbacks) is cancelled when the run ends, and the Worker of a run that is not a session's
   * closes itself. A session's child is then stopped (SIGSTOP) until its next run (SIGCONT), so
   * it uses no CPU in between; on Windows it is not stopped.
   *
   * @param code The model's Python source.
   * @param limits Time, output, requests and cancellation.
   * @returns The result; limits and crashes are reported in it, never thrown.
   * @throws {Error} When the child is busy, or has run and was not recycled since.
   */
  async run(code: string, limits: PyRunLimits): Promise<ExecutionResult> {
    if (this.#running) throw new Error("Cannot run Python code: the sandbox child is busy");
    if (this.#used && !this.#session) {
      throw new Error(
        "Cannot run code in a Python sandbox child again before its next interpreter is ready",
      );
    }
    this.#used = true;
    if (this.#process.exited && this.#session) {
      return new CodeExecutorError(
        "SessionEnded",
        "The Python session has ended: an earlier run was stopped (time, memory or output limit) or crashed; start a new session",
      ).toResult();
    }
    this.#running = true;
    const started = performance.now();
    try {
      // The boot counts against the run's time, and a cancel stops the wait.
      const ready = await untilReady(this.#ready, limits.timeoutMs, limits.signal);
      if (ready === "timeout" || ready === "cancelled") {
        this.#process.kill();
        const error = ready === "cancelled" ? cancelled() : timedOut(
          limits.reportedTimeoutMs ?? limits.timeoutMs,
          {
            during: "while the Python sandbox was starting",
            change: "retry, or pass a larger timeoutMs",
          },
        );
        return error.toResult();
      }
      if (!ready) {
        this.#process.kill();
        return new CodeExecutorError(
          "SandboxCrash",
          `The Python sandbox did not start${this.#fatal ? `: ${this.#fatal}` : ""}`,
        ).toResult();
      }
      if (this.#session) this.#process.resume();
      try {
        const { args, ...rest } = limits;
        const result = await this.#process.execute({ t: "exec", source: code, args }, {
          ...rest,
          timeoutMs: Math.max(1, limits.timeoutMs - Math.round(performance.now() - started)),
          // The message names the limit the caller set, not what was left of it after the wait.
          reportedTimeoutMs: limits.reportedTimeoutMs ?? limits.timeoutMs,
          interruptGraceMs: limits.graceMs ?? DEFAULT_GRACE_MS,
          // The child outlives the result: the host disposes of it, or it boots the next
          // interpreter. Python cannot write to the process's stderr, so the result is the end.
          keepAlive: true,
          printHint: "print()",
        });
        this.#runs++;
        if (this.#process.exited || (result.error && RETIRING_ERRORS.has(result.error.type))) {
          this.#reusable = false;
        }
        return result;
      } finally {
        // The result has been read, so nothing the host waits for is lost. The runner cancels
        // what the code scheduled, but JavaScript reached through the js bridge can schedule
        // more: stopped, the child runs none of it until the next exec.
        if (this.#session) this.#process.pause();
      }
    } finally {
      this.#running = false;
    }
  }

  /**
   * Readies a fresh interpreter for the next run, after a run: once the host has seen the last
   * run's Worker gone (no thread of it left, which Linux's `/proc` shows), the controller starts
   * the next Worker. Says no, and the child should be disposed of, when it has served its runs
   * or its time, when the last run ended badly (a limit, a crash, a cancel), when the last
   * run's Worker (or one it started) is still there after `WORKER_EXIT_MS`, or when the boot
   * fails.
   *
   * @returns Whether the child is ready for another run.
   */
  async recycle(): Promise<boolean> {
    if (!this.#used || this.#running || this.#session) return false;
    if (!this.#reusable || this.#process.exited) return false;
    if (this.#runs >= this.#maxRuns || performance.now() >= this.#retireAt) return false;
    const started = performance.now();
    this.#process.acceptFrames(undefined);
    if (!(await this.#workerGone())) {
      this.#reusable = false;
      return false;
    }
    const gone = performance.now();
    const marked = this.#process.expectStderrMark();
    this.#used = false;
    const booted = this.#untilBooted(marked);
    await this.#process.send({ t: "next" }).catch(() => {});
    const timer = Promise.withResolvers<boolean>();
    const timeout = setTimeout(() => timer.resolve(false), RECYCLE_BOOT_MS);
    try {
      if (await Promise.race([booted, timer.promise])) {
        this.#recycleTimes = {
          workerGoneMs: gone - started,
          readyMs: performance.now() - gone,
          bootMs: this.#lastBootMs,
        };
        return true;
      }
    } finally {
      clearTimeout(timeout);
    }
    this.#used = true;
    this.#reusable = false;
    return false;
  }

  /** Waits until the inbox's is the only Worker thread left; false after `WORKER_EXIT_MS`. */
  async #workerGone(): Promise<boolean> {
    const deadline = performance.now() + WORKER_EXIT_MS;
    for (let wait = 1;; wait = Math.min(wait * 2, 25)) {
      const workers = await this.#workerThreads();
      if (workers === undefined) return false;
      if (workers.length === 1 && workers[0] === this.#inboxThread) return true;
      if (performance.now() > deadline) return false;
      await sleep(wait);
    }
  }

  /** Kills the child if it is still running and removes its private directory. */
  dispose(): Promise<void> {
    return this.#process.dispose();
  }
}

function workerId(name: string): number {
  return Number(WORKER_THREAD.exec(name)?.[1] ?? NaN);
}

/**
 * Lowers the priority of a ready child's V8 background threads to nice 19 (only what nothing else
 * wants). A fresh interpreter's first tool calls bring ~3 ms of CPU a call on them (V8's compile
 * work for code running the first time); at the same priority it took the CPU from the host and
 * the upstream server of the very call it was part of: 7.7 ms a Python tool call against 1.6 for
 * TypeScript on a busy 2-core machine. They still use every idle cycle. Done once the child is
 * ready, so that the boot's own compile work is not slowed.
 *
 * @param pid The child's process id.
 */
function lowerCompilerThreads(pid: number): void {
  lowerThreadPriority(pid, { namePrefix: "V8 DefaultWorke", nice: 19 });
}

/** Waits for the boot, at most `ms`, and not past an abort. */
function untilReady(
  ready: Promise<boolean>,
  ms: number,
  signal?: AbortSignal,
): Promise<boolean | "timeout" | "cancelled"> {
  return new Promise((resolve) => {
    const finish = (value: boolean | "timeout" | "cancelled") => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      resolve(value);
    };
    const timer = setTimeout(() => finish("timeout"), ms);
    const onAbort = () => finish("cancelled");
    signal?.addEventListener("abort", onAbort, { once: true });
    if (signal?.aborted) onAbort();
    ready.then(finish, () => finish(false));
  });
}
