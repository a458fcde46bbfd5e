/**
 * What every sandbox child has in common, whatever language it runs: a `deno run` process with a
 * private directory and a cleared environment, nonce-prefixed frames on its stdout, and the
 * limits that hold from outside (timeout, resident memory, output, cancellation).
 *
 * @module
 */
import { join } from "node:path";
import type { Logger } from "../log.ts";
import { dieWithParent } from "../parent_death.ts";
import { FrameError, FrameReader, OutputBudget, OutputCapture } from "./frames.ts";
import type { ExecutionErrorInfo, ExecutionResult } from "./result.ts";

/** The directory prefix of every child's private directory, followed by the host's pid. */
export const CHILD_DIR_PREFIX = "code-executor-";

/**
 * How every sandbox child starts: `deno run` with no prompt, no config or lock file, no npm or
 * remote modules and nothing fetched. No permission is granted here: each kind of child adds
 * exactly the `--allow-*` flags it needs after these.
 */
export const SANDBOX_RUN_FLAGS: readonly string[] = [
  "run",
  "--no-prompt",
  "--no-config",
  "--no-lock",
  "--no-npm",
  "--no-remote",
  "--cached-only",
];

const RSS_POLL_MS = 25;
const EXIT_GRACE_MS = 100;
const MAX_FRAME_BYTES = 8 * 1024 * 1024;
/**
 * Requests of one run the host works on at once, and the bytes of their frames: past either, the
 * host reads no more frames until a reply has gone out, so a flood of requests (each up to
 * MAX_FRAME_BYTES) holds a bounded amount of the server's memory and work.
 */
const MAX_PENDING_REQUESTS = 32;
const MAX_PENDING_REQUEST_BYTES = 16 * 1024 * 1024;
/** Caps on an error's parts; with the tool-call records they make the result's fixed allowance. */
const MAX_ERROR_MESSAGE_CHARS = 16 * 1024;
const MAX_TRACEBACK_CHARS = 16 * 1024;

/** How to start a sandbox process. */
export interface SandboxProcessSpec {
  /** The `deno` executable. */
  denoPath: string;
  /** Directory under which the child's private directory is created. */
  tempRoot: string;
  /** Deno's cache directory for the child. */
  denoDir: string;
  /** Builds the `deno` arguments after {@linkcode SANDBOX_RUN_FLAGS}, once the directory exists. */
  args: (dirs: { dir: string; workspace: string }) => string[];
  /** Variables added to the child's otherwise cleared environment. */
  env?: Record<string, string>;
  /** V8 heap limit and RSS watchdog limit, in MB. */
  memoryMb: number;
  /** Where to report problems. */
  log: Logger;
}

/** Limits of one run. */
export interface RunLimits {
  /** Wall-clock limit; the child is stopped at the deadline. */
  timeoutMs: number;
  /** The limit to name in the timeout error, when it differs (time spent before the run). */
  reportedTimeoutMs?: number;
  /**
   * Cap on what the run sends back: stdout, stderr and the JSON of the return value together.
   * Printing past it stops the run; a return value that does not fit fails it.
   */
  maxOutputBytes: number;
  /** Aborting this kills the run (client cancellation, shutdown). */
  signal?: AbortSignal;
  /** Answers the code's requests (tool calls, discovery); without it they fail. */
  onRequest?: (frame: Record<string, unknown>) => Promise<object>;
}

/** How a language's child is driven through one run. */
export interface ExecuteOptions extends RunLimits {
  /**
   * At the deadline, send `{t:"interrupt"}` and kill only after this many ms (Python raises
   * KeyboardInterrupt with a traceback); without it the child is killed at the deadline.
   */
  interruptGraceMs?: number;
  /** Keep the process after its result (a session); otherwise it is expected to exit. */
  keepAlive?: boolean;
  /**
   * The child writes `\0<nonce>\0` to its stderr just before its result: once that is read,
   * all of its stderr is, and the child can be killed without waiting for it to exit.
   */
  stderrMark?: boolean;
  /** How the language prints, for the error when code writes to stdout directly. */
  printHint: string;
  /** Rewrites error positions to the code's own lines. */
  cleanError?: (error: ExecutionErrorInfo) => ExecutionErrorInfo;
  /** Rewrites captured stderr the same way. */
  cleanStderr?: (text: string) => string;
}

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
 * Checks an error reported by a child, which is untrusted: strings only, bounded sizes.
 *
 * @param raw The `error` field of a result frame.
 * @returns A well-formed error.
 */
export function sanitizeError(raw: unknown): ExecutionErrorInfo {
  const value = (typeof raw === "object" && raw !== null ? raw : {}) as Record<string, unknown>;
  const text = (v: unknown, max: number) => typeof v === "string" ? v.slice(0, max) : undefined;
  const info: ExecutionErrorInfo = {
    type: text(value.type, 100) ?? "Error",
    message: text(value.message, MAX_ERROR_MESSAGE_CHARS) ?? "The code failed without a message",
  };
  const traceback = text(value.traceback, MAX_TRACEBACK_CHARS);
  if (traceback) info.traceback = traceback;
  return info;
}

/** A started sandbox process; the language-specific children are built on it. */
export class SandboxProcess {
  #process: Deno.ChildProcess;
  #dir: string;
  #log: Logger;
  #memoryMb: number;
  #frames: FrameReader;
  #stdin: WritableStreamDefaultWriter<Uint8Array>;
  #status: Promise<Deno.CommandStatus>;
  #exited = false;
  #disposed = false;
  #stderr: OutputCapture | undefined;
  #onStderrOverflow: (() => void) | undefined;
  #stderrDone: Promise<void>;
  #stderrMark: string;
  #marked = Promise.withResolvers<void>();
  /** The secret every frame from the child starts with; send it in the `init` frame. */
  readonly nonce: string;

  private constructor(process: Deno.ChildProcess, dir: string, spec: SandboxProcessSpec) {
    this.nonce = randomNonce();
    this.#stderrMark = `\0${this.nonce}\0`;
    this.#process = process;
    this.#dir = dir;
    this.#log = spec.log;
    this.#memoryMb = spec.memoryMb;
    this.#frames = new FrameReader(process.stdout, this.nonce, MAX_FRAME_BYTES);
    this.#stdin = process.stdin.getWriter();
    this.#status = process.status.then((status) => {
      this.#exited = true;
      return status;
    });
    this.#stderrDone = this.#pumpStderr();
  }

  /**
   * Creates the private directory (with a `ws` workspace inside) and starts the process in it,
   * with a cleared environment.
   *
   * @param spec What to run.
   * @returns The started process.
   * @throws {Deno.errors.NotFound} When the `deno` executable cannot be found.
   */
  static async start(spec: SandboxProcessSpec): Promise<SandboxProcess> {
    // Two syscalls: done synchronously they cost ~0.1 ms, through the async thread pool 0.4-0.7
    // ms of a cold run's latency.
    const dir = Deno.makeTempDirSync({
      dir: spec.tempRoot,
      prefix: `${CHILD_DIR_PREFIX}${Deno.pid}-`,
    });
    try {
      const workspace = join(dir, "ws");
      Deno.mkdirSync(workspace, { mode: 0o700 });
      const { command, args } = dieWithParent(spec.denoPath, [
        ...SANDBOX_RUN_FLAGS,
        ...spec.args({ dir, workspace }),
      ]);
      const process = new Deno.Command(command, {
        args,
        cwd: workspace,
        clearEnv: true,
        env: { ...spec.env, DENO_DIR: spec.denoDir, NO_COLOR: "1", DENO_NO_UPDATE_CHECK: "1" },
        stdin: "piped",
        stdout: "piped",
        stderr: "piped",
      }).spawn();
      return new SandboxProcess(process, dir, spec);
    } catch (error) {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
      throw error;
    }
  }

  /** The process id. */
  get pid(): number {
    return this.#process.pid;
  }

  /** Whether the process has exited. */
  get exited(): boolean {
    return this.#exited;
  }

  /**
   * Sends a frame to the child's stdin.
   *
   * @param frame The frame.
   */
  async send(frame: Record<string, unknown>): Promise<void> {
    await this.#stdin.write(new TextEncoder().encode(JSON.stringify(frame) + "\n"));
  }

  /**
   * Reads the next frame (for start-up frames such as `ready`).
   *
   * @returns The frame, or null once the child's stdout has ended.
   * @throws {FrameError} On bytes that are not a frame.
   */
  next(): Promise<Record<string, unknown> | null> {
    return this.#frames.next();
  }

  async #pumpStderr(): Promise<void> {
    const decoder = new TextDecoder();
    const mark = this.#stderrMark;
    let held = "";
    try {
      for await (const chunk of this.#process.stderr) {
        let text = held + decoder.decode(chunk, { stream: true });
        held = "";
        const at = text.indexOf(mark);
        if (at >= 0) {
          this.#deliverStderr(text.slice(0, at));
          this.#marked.resolve();
          text = text.slice(at + mark.length);
        } else {
          // Hold back what may be the start of a mark split across chunks.
          const zero = text.lastIndexOf("\0");
          if (zero >= 0 && mark.startsWith(text.slice(zero))) {
            held = text.slice(zero);
            text = text.slice(0, zero);
          }
        }
        this.#deliverStderr(text);
      }
      this.#deliverStderr(held);
    } catch {
      // The pipe closes when the child dies; nothing more to read.
    }
  }

  #deliverStderr(text: string): void {
    if (text === "") return;
    if (this.#stderr) {
      if (!this.#stderr.add(text)) this.#onStderrOverflow?.();
    } else this.#log.debug(`sandbox ${this.#process.pid} stderr: ${text.trimEnd()}`);
  }

  /** Kills the process at once (SIGKILL). */
  kill(): void {
    if (this.#exited) return;
    try {
      this.#process.kill("SIGKILL");
    } catch {
      // Already gone.
    }
  }

  /**
   * Stops the process (SIGSTOP) so that it uses no CPU until {@linkcode SandboxProcess.resume},
   * whatever work its code left scheduled: a session idles this way between its runs. SIGKILL
   * still ends a stopped process. Does nothing on Windows, which has no SIGSTOP.
   */
  pause(): void {
    this.#signal("SIGSTOP");
  }

  /** Continues a process stopped by {@linkcode SandboxProcess.pause} (SIGCONT). */
  resume(): void {
    this.#signal("SIGCONT");
  }

  #signal(signal: "SIGSTOP" | "SIGCONT"): void {
    if (this.#exited || Deno.build.os === "windows") return;
    try {
      this.#process.kill(signal);
    } catch {
      // Already gone.
    }
  }

  /**
   * Runs one execution: sends `exec`, relays output and requests, and enforces the limits.
   *
   * @param exec The `exec` frame.
   * @param options Limits and language specifics.
   * @returns The result; limits and crashes are reported in it, never thrown.
   */
  async execute(exec: Record<string, unknown>, options: ExecuteOptions): Promise<ExecutionResult> {
    const started = performance.now();
    this.#marked = Promise.withResolvers<void>();
    const budget = new OutputBudget(options.maxOutputBytes);
    const stdout = new OutputCapture(budget);
    const stderr = new OutputCapture(budget);
    const pending = { requests: 0, bytes: 0, drained: Promise.withResolvers<void>() };
    this.#stderr = stderr;
    let failure: ExecutionErrorInfo | undefined;
    let timedOut: ExecutionErrorInfo | undefined;
    let result: { ok: boolean; value?: unknown; error?: ExecutionErrorInfo } | undefined;

    const stop = (error: ExecutionErrorInfo) => {
      failure ??= error;
      this.kill();
    };
    let grace: ReturnType<typeof setTimeout> | undefined;
    const timer = setTimeout(() => {
      const error = timedOut = {
        type: "TimeoutError",
        message: `Execution timed out after ${
          options.reportedTimeoutMs ?? options.timeoutMs
        } ms: pass a larger timeoutMs (up to the admin's limits.maxTimeoutMs) or do less work per run`,
      };
      if (options.interruptGraceMs === undefined) return stop(error);
      this.send({ t: "interrupt" }).catch(() => {});
      grace = setTimeout(() => stop(error), options.interruptGraceMs);
    }, options.timeoutMs);
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
    options.signal?.addEventListener("abort", onAbort);
    if (options.signal?.aborted) onAbort();
    const overflow = (stream: string) =>
      stop({
        type: "OutputLimitError",
        message:
          `Output limit exceeded: ${stream} passed limits.maxOutputBytes (${options.maxOutputBytes} bytes); print less (summarize, or return the data) or ask the admin to raise limits.maxOutputBytes`,
      });
    this.#onStderrOverflow = () => overflow("stderr");

    try {
      await this.send(exec).catch(() => {});
      while (!failure) {
        while (
          pending.requests >= MAX_PENDING_REQUESTS ||
          pending.bytes >= MAX_PENDING_REQUEST_BYTES
        ) {
          await Promise.race([pending.drained.promise, this.#status]);
          if (this.#exited) break;
        }
        const frame = await this.#frames.next().catch((error: Error) => {
          stop({
            type: "SandboxProtocolError",
            message: error instanceof FrameError && error.tooLarge
              ? `${error.message}: a return value or tool arguments this large cannot be sent; return a summary, or write the data to a file and return its path`
              : `${error.message}: sandbox code must print with ${options.printHint}, not write to the process's stdout directly`,
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
          const bytes = this.#frames.lastBytes;
          pending.requests++;
          pending.bytes += bytes;
          this.#answer(frame, options).finally(() => {
            pending.requests--;
            pending.bytes -= bytes;
            pending.drained.resolve();
            pending.drained = Promise.withResolvers<void>();
          });
        } else if (frame.t === "result") {
          result = {
            ok: frame.ok === true,
            value: frame.value,
            error: frame.ok === true ? undefined : sanitizeError(frame.error),
          };
          // The value goes back to the client with the printed output, under one cap, or one run
          // could pass the message size clients accept.
          const bytes = new TextEncoder().encode(JSON.stringify(frame.value) ?? "").length;
          if (bytes > budget.left) {
            const printed = options.maxOutputBytes - budget.left;
            failure = {
              type: "OutputLimitError",
              message: `Return value too large: ${bytes} bytes of JSON${
                printed > 0 ? ` after ${printed} bytes of printed output` : ""
              }, more than limits.maxOutputBytes (${options.maxOutputBytes} bytes) in all; return a summary, or write the data to a file and return its path`,
            };
          } else budget.left -= bytes;
          break;
        } else {
          this.#log.debug(`Dropped a sandbox frame of unknown type ${JSON.stringify(frame.t)}`);
        }
      }
      if (result && !failure && options.stderrMark) {
        // Everything written to stderr before the mark has been read once the mark has.
        await Promise.race([this.#marked.promise, this.#stderrDone]);
      } else if (result && !options.keepAlive && !failure) {
        // Let the child exit by itself, so that what it wrote to stderr last is captured.
        let wait: ReturnType<typeof setTimeout> | undefined;
        await Promise.race([this.#status, new Promise((r) => wait = setTimeout(r, EXIT_GRACE_MS))]);
        clearTimeout(wait);
      }
      if (!result || !options.keepAlive || failure) {
        // With the stderr mark read there is nothing left to wait for. The child then sleeps
        // until dispose() kills it, which the executor does once the response is out: killing it
        // here would tear it down on the CPUs that write the response.
        if (!result || failure || !options.stderrMark) {
          this.kill();
          const status = await this.#status;
          await this.#stderrDone;
          if (!result && !failure) failure = this.#crashError(status, stderr.text);
        }
      }
    } finally {
      clearTimeout(timer);
      clearTimeout(grace);
      clearInterval(watchdog);
      options.signal?.removeEventListener("abort", onAbort);
      this.#stderr = undefined;
      this.#onStderrOverflow = undefined;
    }

    let error = failure ?? result?.error;
    if (timedOut && (!failure || failure === timedOut)) {
      // Code that stopped at the interrupt keeps its traceback, which points at its line.
      error = { ...timedOut };
      if (result?.error?.traceback) error.traceback = result.error.traceback;
    }
    const out: ExecutionResult = {
      ok: !error && result?.ok === true,
      stdout: stdout.text,
      stderr: options.cleanStderr ? options.cleanStderr(stderr.text) : stderr.text,
      durationMs: Math.round(performance.now() - started),
      toolCalls: [],
    };
    if (!error && result?.value !== undefined) out.returnValue = result.value;
    if (error) out.error = options.cleanError ? options.cleanError(error) : error;
    if (stdout.truncated || stderr.truncated) out.truncated = true;
    return out;
  }

  #answer(frame: Record<string, unknown>, limits: RunLimits): Promise<void> {
    const id = frame.id;
    if (typeof id !== "number") {
      this.#log.debug(`Dropped a sandbox request without a numeric id: ${typeof id}`);
      return Promise.resolve();
    }
    const reply = limits.onRequest ? limits.onRequest(frame) : Promise.resolve({
      ok: false,
      error: { type: "ToolCallError", message: "No MCP servers are available to this execution" },
    });
    return reply.then((body) => this.send({ t: "reply", id, ...body })).catch(() => {
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

  /** Kills the process if it is still running and removes its private directory. */
  async dispose(): Promise<void> {
    if (this.#disposed) return;
    this.#disposed = true;
    this.kill();
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
