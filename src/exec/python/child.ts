/**
 * One Python sandbox: a `deno run` child that may only read the Pyodide package, its memory
 * snapshot and the worker module. Its controller (`sandbox/py_host.ts`) speaks the same frames
 * as the TypeScript runner; Pyodide runs in a Web Worker inside it.
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
import { lowerThreadPriority } from "../child/_os.ts";
import { SandboxProcess } from "../child/process.ts";

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
  /** Keep the interpreter for several runs (globals persist); one run otherwise. */
  session?: boolean;
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
 * A Python sandbox child. Used for one run and then disposed, or for several runs with
 * `session: true`.
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
  #used = false;
  #running = false;
  #ready: Promise<boolean>;
  #boot: PyBootInfo | undefined;
  #fatal: string | undefined;

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
    this.#ready = process.next().then((frame) => this.#onBoot(frame), () => false);
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
    const read = [opts.pyodideDir, opts.workerPath];
    if (opts.snapshotPath) read.push(opts.snapshotPath);
    const files = hasFileGrants(opts.files) ? fileFlags(opts.files, opts.filesPath) : undefined;
    if (files) read.push(...files.read);
    const process = await SandboxProcess.start({
      ...opts,
      args: () => [
        "--unstable-worker-options",
        `--allow-read=${read.join(",")}`,
        ...(files?.args ?? []),
        `--v8-flags=--max-old-space-size=${opts.memoryMb},${PY_V8_FLAGS}`,
        opts.hostPath,
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

  /** How the child booted; undefined until {@linkcode PyChild.ready} resolves true. */
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

  /** Why the child could not boot, from its `fatal` frame; undefined otherwise. */
  get fatal(): string | undefined {
    return this.#fatal;
  }

  #onBoot(frame: Record<string, unknown> | null): boolean {
    if (frame?.t === "fatal") {
      this.#fatal = typeof frame.message === "string" ? frame.message.slice(0, 2000) : undefined;
      this.#log.warn(`Python sandbox ${this.pid} did not start: ${this.#fatal ?? "no reason"}`);
      return false;
    }
    if (frame?.t !== "ready") return false;
    lowerCompilerThreads(this.pid);
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
    return true;
  }

  /**
   * Runs Python code. The value of the last expression, or of the name a last assignment binds,
   * becomes `returnValue`; top-level `await` works. A child without `session` runs once.
   *
   * At `timeoutMs` the child is asked to interrupt the code (KeyboardInterrupt, reported as a
   * `TimeoutError` with the code's traceback); code that does not stop within `graceMs` is
   * killed.
   *
   * Work the code scheduled and did not finish (asyncio tasks, `call_soon` / `call_later`
   * callbacks) is cancelled when the run ends. A session's child is then stopped (SIGSTOP) until
   * its next run (SIGCONT), so it uses no CPU in between; on Windows it is not stopped.
   *
   * @param code The model's Python source.
   * @param limits Time, output, requests and cancellation.
   * @returns The result; limits and crashes are reported in it, never thrown.
   * @throws {Error} When the child is busy, or was used and is not a session.
   */
  async run(code: string, limits: PyRunLimits): Promise<ExecutionResult> {
    if (this.#running) throw new Error("Cannot run Python code: the sandbox child is busy");
    if (this.#used && !this.#session) {
      throw new Error("Cannot run code in a sandbox child twice: it is single-use");
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
        return await this.#process.execute({ t: "exec", source: code, args }, {
          ...rest,
          timeoutMs: Math.max(1, limits.timeoutMs - Math.round(performance.now() - started)),
          // The message names the limit the caller set, not what was left of it after the wait.
          reportedTimeoutMs: limits.reportedTimeoutMs ?? limits.timeoutMs,
          interruptGraceMs: limits.graceMs ?? DEFAULT_GRACE_MS,
          keepAlive: this.#session,
          stderrMark: true,
          printHint: "print()",
        });
      } finally {
        // The result and the stderr mark have been read, so nothing the host waits for is lost.
        // The runner cancels what the code scheduled, but JavaScript reached through the js
        // bridge can schedule more: stopped, the child runs none of it until the next exec.
        if (this.#session) this.#process.pause();
      }
    } finally {
      this.#running = false;
    }
  }

  /** Kills the child if it is still running and removes its private directory. */
  dispose(): Promise<void> {
    return this.#process.dispose();
  }
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
