/**
 * What every sandbox child has in common, whatever language it runs: a `deno run` process with a
 * private directory and a cleared environment, that dies with the server, speaks nonce-prefixed
 * frames on its stdout, and is killed from outside. One run in it is an {@linkcode Execution}.
 *
 * @module
 */
import { join } from "node:path";
import type { Logger } from "../../log.ts";
import { dieWithParent } from "../../parent_death.ts";
import { stopOrContinue } from "./_os.ts";
import { type ExecuteOptions, Execution, type RunChannel } from "./execution.ts";
import { FrameReader, type OutputCapture } from "./frames.ts";
import type { ExecutionResult } from "../result.ts";

/** The directory prefix of every child's private directory, followed by the host's pid. */
export const CHILD_DIR_PREFIX = "code-executor-";

/**
 * How every sandbox child starts: `deno run` with no prompt, no config or lock file, no npm or
 * remote modules and nothing fetched. No permission is granted here: each kind of child adds
 * exactly the `--allow-*` flags it needs after these. The one exception is `--no-npm`, left out
 * for TypeScript children that offer `sandbox.npmPackages` ({@linkcode SandboxProcessSpec.npm}).
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

const MAX_FRAME_BYTES = 8 * 1024 * 1024;

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
  /**
   * Let the child load npm packages, from its `DENO_DIR`'s cache only (`--no-npm` is left out;
   * `--cached-only` still holds, so nothing is fetched): TypeScript children when
   * `sandbox.npmPackages` names some.
   */
  npm?: boolean;
  /** V8 heap limit and RSS watchdog limit, in MB. */
  memoryMb: number;
  /** Where to report problems. */
  log: Logger;
}

function randomNonce(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(18));
  return btoa(String.fromCharCode(...bytes)).replace(/[+/=]/g, "x");
}

/** A started sandbox process; the language-specific children are built on it. */
export class SandboxProcess implements RunChannel {
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
        ...(spec.npm ? SANDBOX_RUN_FLAGS.filter((flag) => flag !== "--no-npm") : SANDBOX_RUN_FLAGS),
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
        // Every mark in the chunk: one the code forged may arrive together with the real one,
        // which must not then pass as the code's own text.
        for (let at = text.indexOf(mark); at >= 0; at = text.indexOf(mark)) {
          this.#deliverStderr(text.slice(0, at));
          this.#marked.resolve();
          text = text.slice(at + mark.length);
        }
        // Hold back what may be the start of a mark split across chunks.
        const zero = text.lastIndexOf("\0");
        if (zero >= 0 && mark.startsWith(text.slice(zero))) {
          held = text.slice(zero);
          text = text.slice(0, zero);
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
    if (!this.#exited) stopOrContinue(this.#process, signal);
  }

  /** The resident-memory limit, in MB. */
  get memoryMb(): number {
    return this.#memoryMb;
  }

  /** Where the process's problems are reported. */
  get log(): Logger {
    return this.#log;
  }

  /** Resolves with the exit status once the process has exited. */
  get status(): Promise<Deno.CommandStatus> {
    return this.#status;
  }

  /** Resolves once all of the process's stderr has been read. */
  get stderrDone(): Promise<void> {
    return this.#stderrDone;
  }

  /** Size in bytes of the last frame read. */
  get lastFrameBytes(): number {
    return this.#frames.lastBytes;
  }

  /**
   * Accepts frames with a second nonce from now on (a Python child's: the one its current
   * Worker writes with), in place of the one accepted before.
   *
   * @param nonce The nonce, or undefined for the process's own only.
   */
  acceptFrames(nonce: string | undefined): void {
    this.#frames.accept(nonce);
  }

  /** Whether the last frame read carried the process's own nonce (written by trusted code). */
  get lastFrameControl(): boolean {
    return this.#frames.lastControl;
  }

  /**
   * Sends the process's stderr to `capture` (a run's), or to the debug log when undefined.
   *
   * @param capture Where stderr goes during a run.
   * @param onOverflow Called when the capture is full.
   */
  captureStderr(capture: OutputCapture | undefined, onOverflow?: () => void): void {
    this.#stderr = capture;
    this.#onStderrOverflow = capture ? onOverflow : undefined;
  }

  /**
   * Starts waiting for the next stderr mark, which the child writes just before its result.
   *
   * @returns Resolves once the mark has been read.
   */
  expectStderrMark(): Promise<void> {
    this.#marked = Promise.withResolvers<void>();
    return this.#marked.promise;
  }

  /**
   * Runs one execution: sends `exec`, relays output and requests, and enforces the limits.
   *
   * @param exec The `exec` frame.
   * @param options Limits and language specifics.
   * @returns The result; limits and crashes are reported in it, never thrown.
   */
  execute(exec: Record<string, unknown>, options: ExecuteOptions): Promise<ExecutionResult> {
    return new Execution(this, options).run(exec);
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
