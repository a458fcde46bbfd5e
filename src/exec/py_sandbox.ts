/**
 * One Python sandbox: a `deno run` child that may only read the Pyodide package, its memory
 * snapshot and the worker module. Its controller (`sandbox/py_host.ts`) speaks the same frames
 * as the TypeScript runner; Pyodide runs in a Web Worker inside it.
 *
 * @module
 */
import type { Logger } from "../log.ts";
import type { ExecutionErrorInfo, ExecutionResult } from "./result.ts";
import { FrameReader, OutputCapture } from "./frames.ts";
import { CHILD_DIR_PREFIX, type RunLimits } from "./ts_sandbox.ts";

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
  /** Where to report problems. */
  log: Logger;
}

/** Limits of one Python run. */
export interface PyRunLimits extends RunLimits {
  /**
   * Time between the interrupt at `timeoutMs` (KeyboardInterrupt, clean traceback) and SIGKILL,
   * for code that does not check for interrupts (C loops); 500 ms by default.
   */
  graceMs?: number;
}

/** How the child booted, from its `ready` frame. */
export interface PyBootInfo {
  /** Time from the Worker's start to a usable interpreter, measured in the child. */
  bootMs?: number;
  /** Whether the interpreter came from the memory snapshot. */
  fromSnapshot: boolean;
  /** Why the snapshot was not used, when it was given and failed. */
  snapshotError?: string;
}

const RSS_POLL_MS = 25;
const EXIT_GRACE_MS = 100;
const DEFAULT_GRACE_MS = 500;
const MAX_FRAME_BYTES = 8 * 1024 * 1024;

let snapshotWarned = false;

function randomNonce(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(18));
  return btoa(String.fromCharCode(...bytes)).replace(/[+/=]/g, "x");
}

async function residentMb(pid: number): Promise<number | undefined> {
  try {
    const statm = await Deno.readTextFile(`/proc/${pid}/statm`);
    return (Number(statm.split(" ")[1]) * 4096) / (1024 * 1024);
  } catch {
    return undefined;
  }
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
  #process: Deno.ChildProcess;
  #dir: string;
  #log: Logger;
  #memoryMb: number;
  #session: boolean;
  #frames: FrameReader;
  #stdin: WritableStreamDefaultWriter<Uint8Array>;
  #status: Promise<Deno.CommandStatus>;
  #exited = false;
  #used = false;
  #running = false;
  #disposed = false;
  #stderr: OutputCapture | undefined;
  #onStderrOverflow: (() => void) | undefined;
  #stderrDone: Promise<void>;
  #ready: Promise<boolean>;
  #boot: PyBootInfo | undefined;
  #fatal: string | undefined;

  private constructor(process: Deno.ChildProcess, dir: string, opts: PyChildOptions) {
    const nonce = randomNonce();
    this.#process = process;
    this.#dir = dir;
    this.#log = opts.log;
    this.#memoryMb = opts.memoryMb;
    this.#session = opts.session === true;
    this.#frames = new FrameReader(process.stdout, nonce, MAX_FRAME_BYTES);
    this.#stdin = process.stdin.getWriter();
    this.#status = process.status.then((status) => {
      this.#exited = true;
      return status;
    });
    this.#stderrDone = this.#pumpStderr();
    this.#ready = this.#frames.next().then((frame) => this.#onBoot(frame), () => false);
    this.#send({
      t: "init",
      nonce,
      indexDir: opts.pyodideDir,
      workerPath: opts.workerPath,
      snapshotPath: opts.snapshotPath,
      session: this.#session,
      allowedImports: opts.allowedImports ?? DEFAULT_PYTHON_IMPORTS,
    }).catch(() => {});
  }

  /**
   * Starts a child. It boots Pyodide and waits for code; {@linkcode PyChild.ready} tells when.
   *
   * @param opts Locations, limits and mode.
   * @returns The started child.
   * @throws {Deno.errors.NotFound} When the `deno` executable cannot be found.
   */
  static async spawn(opts: PyChildOptions): Promise<PyChild> {
    const dir = await Deno.makeTempDir({
      dir: opts.tempRoot,
      prefix: `${CHILD_DIR_PREFIX}${Deno.pid}-`,
    });
    try {
      const read = [opts.pyodideDir, opts.workerPath];
      if (opts.snapshotPath) read.push(opts.snapshotPath);
      const process = new Deno.Command(opts.denoPath, {
        args: [
          "run",
          "--unstable-worker-options",
          "--no-prompt",
          "--no-config",
          "--no-lock",
          "--no-npm",
          "--no-remote",
          "--cached-only",
          `--allow-read=${read.join(",")}`,
          `--v8-flags=--max-old-space-size=${opts.memoryMb}`,
          opts.hostPath,
        ],
        cwd: dir,
        clearEnv: true,
        env: { DENO_DIR: opts.denoDir, NO_COLOR: "1", DENO_NO_UPDATE_CHECK: "1" },
        stdin: "piped",
        stdout: "piped",
        stderr: "piped",
      }).spawn();
      return new PyChild(process, dir, opts);
    } catch (error) {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
      throw error;
    }
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
    return this.#exited;
  }

  #onBoot(frame: Record<string, unknown> | null): boolean {
    if (frame?.t === "fatal") {
      this.#fatal = typeof frame.message === "string" ? frame.message.slice(0, 2000) : undefined;
      this.#log.warn(`Python sandbox ${this.pid} did not start: ${this.#fatal ?? "no reason"}`);
      return false;
    }
    if (frame?.t !== "ready") return false;
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
    return true;
  }

  async #send(frame: Record<string, unknown>): Promise<void> {
    await this.#stdin.write(new TextEncoder().encode(JSON.stringify(frame) + "\n"));
  }

  async #pumpStderr(): Promise<void> {
    const decoder = new TextDecoder();
    try {
      for await (const chunk of this.#process.stderr) {
        const text = decoder.decode(chunk, { stream: true });
        if (this.#stderr) {
          if (!this.#stderr.add(text)) this.#onStderrOverflow?.();
        } else this.#log.debug(`python sandbox ${this.#process.pid} stderr: ${text.trimEnd()}`);
      }
    } catch {
      // The pipe closes when the child dies; nothing more to read.
    }
  }

  #kill(): void {
    if (this.#exited) return;
    try {
      this.#process.kill("SIGKILL");
    } catch {
      // Already gone.
    }
  }

  /**
   * Runs Python code. The value of the last expression becomes `returnValue`; top-level
   * `await` works. A child without `session` runs once.
   *
   * At `timeoutMs` the child is asked to interrupt the code (KeyboardInterrupt, reported as a
   * `TimeoutError` with the code's traceback); code that does not stop within `graceMs` is
   * killed.
   *
   * @param code The model's Python source.
   * @param limits Time, output and cancellation.
   * @returns The result; limits and crashes are reported in it, never thrown.
   * @throws {Error} When the child is busy, or was used and is not a session.
   */
  async run(code: string, limits: PyRunLimits): Promise<ExecutionResult> {
    if (this.#running) throw new Error("Cannot run Python code: the sandbox child is busy");
    if (this.#used && !this.#session) {
      throw new Error("Cannot run code in a sandbox child twice: it is single-use");
    }
    this.#used = true;
    this.#running = true;
    try {
      return await this.#run(code, limits);
    } finally {
      this.#running = false;
    }
  }

  async #run(code: string, limits: PyRunLimits): Promise<ExecutionResult> {
    const started = performance.now();
    const stdout = new OutputCapture(limits.maxOutputBytes);
    const stderr = new OutputCapture(limits.maxOutputBytes);
    this.#stderr = stderr;
    let failure: ExecutionErrorInfo | undefined;
    let timedOut: ExecutionErrorInfo | undefined;
    let result: { ok: boolean; value?: unknown; error?: ExecutionErrorInfo } | undefined;

    const stop = (error: ExecutionErrorInfo) => {
      failure ??= error;
      this.#kill();
    };
    let grace: ReturnType<typeof setTimeout> | undefined;
    const timer = setTimeout(() => {
      timedOut = {
        type: "TimeoutError",
        message: `Execution timed out after ${
          limits.reportedTimeoutMs ?? limits.timeoutMs
        } ms: pass a larger timeoutMs (up to the admin's limits.maxTimeoutMs) or do less work per run`,
      };
      this.#send({ t: "interrupt" }).catch(() => {});
      const timeout = timedOut;
      grace = setTimeout(() => stop(timeout), limits.graceMs ?? DEFAULT_GRACE_MS);
    }, limits.timeoutMs);
    const watchdog = setInterval(async () => {
      const mb = await residentMb(this.#process.pid);
      if (mb !== undefined && mb > this.#memoryMb) {
        stop({
          type: "MemoryLimitError",
          message: `Memory limit exceeded: the sandbox used ${
            Math.round(mb)
          } MB, more than limits.memoryMb (${this.#memoryMb} MB); use less memory or ask the admin to raise limits.memoryMb`,
        });
      }
    }, RSS_POLL_MS);
    const onAbort = () => stop({ type: "Cancelled", message: "The execution was cancelled" });
    limits.signal?.addEventListener("abort", onAbort);
    if (limits.signal?.aborted) onAbort();

    const overflow = (stream: string) =>
      stop({
        type: "OutputLimitError",
        message:
          `Output limit exceeded: ${stream} passed limits.maxOutputBytes (${limits.maxOutputBytes} bytes); print less (summarize, or return the data) or ask the admin to raise limits.maxOutputBytes`,
      });
    this.#onStderrOverflow = () => overflow("stderr");

    try {
      if (!(await this.#ready)) {
        stop({
          type: "SandboxCrash",
          message: `The Python sandbox did not start${this.#fatal ? `: ${this.#fatal}` : ""}`,
        });
      } else {
        await this.#send({ t: "exec", source: code }).catch(() => {});
        while (!failure) {
          const frame = await this.#frames.next().catch((error: Error) => {
            stop({
              type: "SandboxProtocolError",
              message:
                `${error.message}: sandbox code must print with print(), not write to the process's stdout directly`,
            });
            return null;
          });
          if (frame === null) break;
          if (frame.t === "out") {
            const capture = frame.s === "stderr" ? stderr : stdout;
            if (typeof frame.d === "string" && !capture.add(frame.d)) {
              overflow(frame.s === "stderr" ? "stderr" : "stdout");
            }
          } else if (frame.t === "call") {
            this.#answer(frame, limits);
          } else if (frame.t === "result") {
            result = {
              ok: frame.ok === true,
              value: frame.value,
              error: frame.ok === true ? undefined : sanitizeError(frame.error),
            };
            break;
          }
        }
      }
      if (result && !this.#session) {
        let wait: ReturnType<typeof setTimeout> | undefined;
        await Promise.race([
          this.#status,
          new Promise((r) => wait = setTimeout(r, EXIT_GRACE_MS)),
        ]);
        clearTimeout(wait);
      }
      if (!result || !this.#session || failure) {
        this.#kill();
        const status = await this.#status;
        await this.#stderrDone;
        if (!result && !failure) failure = this.#crashError(status, stderr.text);
      }
    } finally {
      clearTimeout(timer);
      clearTimeout(grace);
      clearInterval(watchdog);
      limits.signal?.removeEventListener("abort", onAbort);
      this.#stderr = undefined;
      this.#onStderrOverflow = undefined;
    }

    let error = failure ?? result?.error;
    if (timedOut && (!failure || failure === timedOut)) {
      // The code stopped at the interrupt: keep its traceback, which points at the line.
      error = { ...timedOut };
      if (result?.error?.traceback) error.traceback = result.error.traceback;
    }
    const out: ExecutionResult = {
      ok: !error && result?.ok === true,
      stdout: stdout.text,
      stderr: stderr.text,
      durationMs: Math.round(performance.now() - started),
      toolCalls: [],
    };
    if (!error && result?.value !== undefined) out.returnValue = result.value;
    if (error) out.error = error;
    if (stdout.truncated || stderr.truncated) out.truncated = true;
    return out;
  }

  #answer(frame: Record<string, unknown>, limits: RunLimits): void {
    const id = frame.id;
    if (typeof id !== "number") return;
    const reply = limits.onRequest ? limits.onRequest(frame) : Promise.resolve({
      ok: false,
      error: { type: "ToolCallError", message: "No MCP servers are available to this execution" },
    });
    reply.then((body) => this.#send({ t: "reply", id, ...body })).catch(() => {
      // The child is gone; its run is already being reported.
    });
  }

  #crashError(status: Deno.CommandStatus, stderr: string): ExecutionErrorInfo {
    if (/out of memory|heap limit/i.test(stderr)) {
      return {
        type: "MemoryLimitError",
        message:
          `Memory limit exceeded: the V8 heap passed limits.memoryMb (${this.#memoryMb} MB); use less memory or ask the admin to raise limits.memoryMb`,
      };
    }
    const how = status.signal
      ? `was killed by ${status.signal}`
      : `exited with code ${status.code}`;
    const last = stderr.trim().split("\n").filter((line) => line.trim()).at(-1)?.trim();
    return {
      type: "SandboxCrash",
      message: `The sandbox process ${how} before reporting a result${
        last ? `: ${last.slice(0, 500)}` : ""
      }`,
    };
  }

  /** Kills the child if it is still running and removes its private directory. */
  async dispose(): Promise<void> {
    if (this.#disposed) return;
    this.#disposed = true;
    this.#kill();
    await this.#status.catch(() => {});
    await this.#stdin.close().catch(() => {});
    await this.#frames.cancel();
    await this.#stderrDone;
    await Deno.remove(this.#dir, { recursive: true }).catch((error) => {
      if (!(error instanceof Deno.errors.NotFound)) {
        this.#log.warn(`Cannot remove sandbox directory ${this.#dir}: ${error.message}`);
      }
    });
  }
}

function sanitizeError(raw: unknown): ExecutionErrorInfo {
  const value = (typeof raw === "object" && raw !== null ? raw : {}) as Record<string, unknown>;
  const text = (v: unknown, max: number) => typeof v === "string" ? v.slice(0, max) : undefined;
  const info: ExecutionErrorInfo = {
    type: text(value.type, 100) ?? "Error",
    message: text(value.message, 64 * 1024) ?? "The code failed without a message",
  };
  const traceback = text(value.traceback, 64 * 1024);
  if (traceback) info.traceback = traceback;
  return info;
}
