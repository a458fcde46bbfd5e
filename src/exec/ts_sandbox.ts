/**
 * One TypeScript sandbox: a `deno run` child with deny-by-default permissions, a private
 * workspace as its cwd, and frames over its stdin and stdout.
 *
 * @module
 */
import { join } from "node:path";
import type { Logger } from "../log.ts";
import type { ExecutionErrorInfo, ExecutionResult } from "./result.ts";
import { FrameReader, OutputCapture } from "./frames.ts";
import type { WrappedSource } from "./ts_source.ts";

/** What a child may do beyond its own workspace, and where it lives. */
export interface TsChildOptions {
  /** The `deno` executable. */
  denoPath: string;
  /** Path of `sandbox/ts_runner.ts` on disk. */
  runnerPath: string;
  /** Directory under which the child's private directory is created. */
  tempRoot: string;
  /** Deno's cache directory for children, prepared by {@linkcode prepareDenoDir}. */
  denoDir: string;
  /** Load the module loader before the code arrives (for children that wait in the pool). */
  preload?: boolean;
  /** V8 heap limit and RSS watchdog limit, in MB. */
  memoryMb: number;
  /** Hosts for `--allow-net`; empty for none. */
  net?: string[];
  /** Extra paths for `--allow-read`, already checked against `ALLOWED_PROJECTS`. */
  read?: string[];
  /** Extra paths for `--allow-write`, already checked against `ALLOWED_PROJECTS`. */
  write?: string[];
  /** Where to report problems. */
  log: Logger;
}

/** Limits of one run. */
export interface RunLimits {
  /** Wall-clock limit; the child is SIGKILLed at the deadline. */
  timeoutMs: number;
  /** The limit to name in the timeout error, when it differs (time spent before the run). */
  reportedTimeoutMs?: number;
  /** Cap per captured stream; reaching it stops the run. */
  maxOutputBytes: number;
  /** Aborting this kills the run (client cancellation, shutdown). */
  signal?: AbortSignal;
  /** Answers the code's requests (tool calls, discovery); without it they fail. */
  onRequest?: (frame: Record<string, unknown>) => Promise<object>;
}

const RSS_POLL_MS = 25;
const EXIT_GRACE_MS = 100;
const MAX_FRAME_BYTES = 8 * 1024 * 1024;

/**
 * Removes what Deno cached of sandbox code. Deno caches the JavaScript it emits for every
 * TypeScript module under `gen/data/` for `data:` modules, which would keep the model's code on
 * disk; the cache only saves work for code that runs twice, so it is emptied after each run.
 * (A plain file in its place would stop the writes, but Deno then spends ~150 ms retrying.)
 *
 * @param denoDir The `DENO_DIR` of the sandbox children.
 */
export async function scrubEmitCache(denoDir: string): Promise<void> {
  await Deno.remove(join(denoDir, "gen", "data"), { recursive: true }).catch(() => {});
}

/** The directory prefix of every child's private directory, followed by the host's pid. */
export const CHILD_DIR_PREFIX = "code-executor-";

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

const DATA_URL_POSITION = /data:application\/typescript;base64,[A-Za-z0-9+/=.]*:(\d+):(\d+)/g;

/**
 * Rewrites a stack trace or error message from the child so that it names `code.ts` with the
 * model's own line numbers, and drops the runner's frames.
 *
 * @param text Text from the child.
 * @param lineOffset Lines the wrapper added above the model's code.
 * @returns The cleaned text.
 */
export function cleanTrace(text: string, lineOffset: number): string {
  const line = (n: string) => Math.max(1, Number(n) - lineOffset);
  return text
    .replace(DATA_URL_POSITION, (_m, n, col) => `code.ts:${line(n)}:${col}`)
    .replace(/data:application\/typescript;base64,[A-Za-z0-9+/=.]*/g, "code.ts")
    .split("\n")
    .filter((text) => !/ts_runner\.ts|\bext:/.test(text))
    // The parser's code frame ("2 | const x =") numbers the wrapped module's lines.
    .map((text) => text.replace(/^(\s*)(\d+)( \| )/, (_m, pad, n, bar) => `${pad}${line(n)}${bar}`))
    .join("\n");
}

/**
 * Cleans an error from the child: model line numbers, and the real name of a parse error,
 * which the module loader reports as a TypeError.
 *
 * @param error The error as reported.
 * @param lineOffset Lines the wrapper added above the model's code.
 * @returns The error to report.
 */
export function cleanError(error: ExecutionErrorInfo, lineOffset: number): ExecutionErrorInfo {
  let { type, message } = error;
  const parse = /^(SyntaxError): ([\s\S]*)$/.exec(message);
  if (type === "TypeError" && parse) [, type, message] = parse;
  const out: ExecutionErrorInfo = { type, message: cleanTrace(message, lineOffset) };
  if (error.traceback) {
    out.traceback = cleanTrace(error.traceback, lineOffset).replace(
      /^TypeError: SyntaxError:/,
      "SyntaxError:",
    );
  }
  return out;
}

/**
 * A TypeScript sandbox child, used for one execution and then disposed.
 *
 * @example
 * ```ts
 * const child = await TsChild.spawn(options);
 * try {
 *   const result = await child.run(wrapTypescript("return 1 + 1"), limits);
 * } finally {
 *   await child.dispose();
 * }
 * ```
 */
export class TsChild {
  #process: Deno.ChildProcess;
  #dir: string;
  #log: Logger;
  #memoryMb: number;
  #frames: FrameReader;
  #stdin: WritableStreamDefaultWriter<Uint8Array>;
  #status: Promise<Deno.CommandStatus>;
  #exited = false;
  #used = false;
  #disposed = false;
  #stderr: OutputCapture | undefined;
  #onStderrOverflow: (() => void) | undefined;
  #stderrDone: Promise<void>;
  #ready: Promise<boolean>;

  private constructor(
    process: Deno.ChildProcess,
    dir: string,
    nonce: string,
    opts: TsChildOptions,
  ) {
    this.#process = process;
    this.#dir = dir;
    this.#log = opts.log;
    this.#memoryMb = opts.memoryMb;
    this.#frames = new FrameReader(process.stdout, nonce, MAX_FRAME_BYTES);
    this.#stdin = process.stdin.getWriter();
    this.#status = process.status.then((status) => {
      this.#exited = true;
      return status;
    });
    this.#stderrDone = this.#pumpStderr();
    this.#ready = this.#frames.next().then((frame) => frame?.t === "ready", () => false);
    this.#send({ t: "init", nonce, preload: opts.preload === true }).catch(() => {});
  }

  /**
   * Starts a child. It loads the runner and waits for code.
   *
   * @param opts Permissions and locations.
   * @returns The started child.
   * @throws {Deno.errors.NotFound} When the `deno` executable cannot be found.
   */
  static async spawn(opts: TsChildOptions): Promise<TsChild> {
    const dir = await Deno.makeTempDir({
      dir: opts.tempRoot,
      prefix: `${CHILD_DIR_PREFIX}${Deno.pid}-`,
    });
    try {
      const workspace = join(dir, "ws");
      await Deno.mkdir(workspace, { mode: 0o700 });
      const read = [workspace, ...(opts.read ?? [])];
      const write = [workspace, ...(opts.write ?? [])];
      const args = [
        "run",
        "--no-prompt",
        "--no-config",
        "--no-lock",
        "--no-npm",
        "--no-remote",
        "--cached-only",
        "--no-code-cache",
        `--allow-read=${read.join(",")}`,
        `--allow-write=${write.join(",")}`,
        `--v8-flags=--max-old-space-size=${opts.memoryMb}`,
      ];
      if (opts.net && opts.net.length > 0) args.push(`--allow-net=${opts.net.join(",")}`);
      args.push(opts.runnerPath);
      const process = new Deno.Command(opts.denoPath, {
        args,
        cwd: workspace,
        clearEnv: true,
        env: { DENO_DIR: opts.denoDir, NO_COLOR: "1", DENO_NO_UPDATE_CHECK: "1" },
        stdin: "piped",
        stdout: "piped",
        stderr: "piped",
      }).spawn();
      return new TsChild(process, dir, randomNonce(), opts);
    } catch (error) {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
      throw error;
    }
  }

  /** The child's process id. */
  get pid(): number {
    return this.#process.pid;
  }

  /** Resolves true once the runner has loaded, false if it died first. */
  get ready(): Promise<boolean> {
    return this.#ready;
  }

  /** Whether the child process has exited. */
  get exited(): boolean {
    return this.#exited;
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
        } else this.#log.debug(`sandbox ${this.#process.pid} stderr: ${text.trimEnd()}`);
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
   * Runs wrapped code once. A child runs at most one execution.
   *
   * @param wrapped Output of `wrapTypescript`.
   * @param limits Time, output and cancellation.
   * @returns The result; limits and crashes are reported in it, never thrown.
   */
  async run(wrapped: WrappedSource, limits: RunLimits): Promise<ExecutionResult> {
    if (this.#used) throw new Error("Cannot run code in a sandbox child twice: it is single-use");
    this.#used = true;
    const started = performance.now();
    const stdout = new OutputCapture(limits.maxOutputBytes);
    const stderr = new OutputCapture(limits.maxOutputBytes);
    this.#stderr = stderr;
    let failure: ExecutionErrorInfo | undefined;
    let result: { ok: boolean; value?: unknown; error?: ExecutionErrorInfo } | undefined;

    const stop = (error: ExecutionErrorInfo) => {
      failure ??= error;
      this.#kill();
    };
    const timer = setTimeout(() =>
      stop({
        type: "TimeoutError",
        message: `Execution timed out after ${
          limits.reportedTimeoutMs ?? limits.timeoutMs
        } ms: pass a larger timeoutMs (up to the admin's limits.maxTimeoutMs) or do less work per run`,
      }), limits.timeoutMs);
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
      await this.#send({ t: "exec", source: wrapped.source }).catch(() => {});
      while (true) {
        const frame = await this.#frames.next().catch((error: Error) => {
          stop({
            type: "SandboxProtocolError",
            message:
              `${error.message}: sandbox code must print with console.log, not write to the process's stdout directly`,
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
      if (result) {
        let grace: ReturnType<typeof setTimeout> | undefined;
        await Promise.race([
          this.#status,
          new Promise((r) => grace = setTimeout(r, EXIT_GRACE_MS)),
        ]);
        clearTimeout(grace);
      }
      this.#kill();
      const status = await this.#status;
      await this.#stderrDone;
      if (!result && !failure) failure = this.#crashError(status, stderr.text);
    } finally {
      clearTimeout(timer);
      clearInterval(watchdog);
      limits.signal?.removeEventListener("abort", onAbort);
      this.#stderr = undefined;
      this.#onStderrOverflow = undefined;
    }

    const error = failure ?? result?.error;
    const out: ExecutionResult = {
      ok: !error && result?.ok === true,
      stdout: stdout.text,
      stderr: cleanTrace(stderr.text, wrapped.lineOffset),
      durationMs: Math.round(performance.now() - started),
      toolCalls: [],
    };
    if (!error && result?.value !== undefined) out.returnValue = result.value;
    if (error) {
      out.error = cleanError(error, wrapped.lineOffset);
    }
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
