/**
 * One run in a sandbox process, with the limits that hold from outside: wall clock (interrupt,
 * then kill), resident memory, output, requests in flight and cancellation. The child's frames are
 * untrusted (see SECURITY.md: every frame is treated as forged), so each is checked and bounded
 * here; the child is only ever stopped, never asked.
 *
 * @module
 */
import {
  cancelled,
  CodeExecutorError,
  errorTypeOf,
  type ExecutionErrorInfo,
  outputTooLarge,
  timedOut,
} from "../../errors.ts";
import type { Logger } from "../../log.ts";
import type { RunHold } from "../run.ts";
import { residentMb } from "./_os.ts";
import {
  type Frame,
  FrameError,
  OutputBudget,
  OutputCapture,
  type OutputWatcher,
} from "./frames.ts";
import { keepParts, type OutputKeeper } from "../output_store.ts";
import type { ExecutionResult, ResultImage } from "../result.ts";
import { type CheckedImage, MAX_IMAGES_PER_RUN, readImage } from "./images.ts";

const RSS_POLL_MS = 25;
const EXIT_GRACE_MS = 100;
/**
 * Requests of one run the host works on at once, and the bytes of their frames: past either, the
 * host reads no more frames until a reply has gone out, so a flood of requests (each up to the
 * frame size limit) holds a bounded amount of the server's memory and work.
 */
const MAX_PENDING_REQUESTS = 32;
const MAX_PENDING_REQUEST_BYTES = 16 * 1024 * 1024;
/** Caps on an error's parts; with the tool-call records they make the result's fixed allowance. */
const MAX_ERROR_MESSAGE_CHARS = 16 * 1024;
const MAX_TRACEBACK_CHARS = 16 * 1024;

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
  /**
   * Where a part past `maxOutputBytes` is kept whole (the run's principal's share of the output
   * store); the result then shows a preview of it and names it. Without it, printing past the cap
   * stops the run and a return value that does not fit fails it.
   */
  keep?: OutputKeeper;
  /**
   * Sees stdout as it is captured: with `privacy.tokenize`, personal data is detected while the
   * run prints rather than after it has ended.
   */
  watchStdout?: OutputWatcher;
  /** Aborting this kills the run (client cancellation, shutdown). */
  signal?: AbortSignal;
  /** Answers the code's requests (tool calls, discovery); without it they fail. */
  onRequest?: (frame: Record<string, unknown>) => Promise<object>;
  /** Stops the run's clock and its process while the host waits for a person. */
  hold?: RunHold;
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

/** What a run needs from the process it runs in (see `SandboxProcess`). */
export interface RunChannel {
  /** The process id, for the memory watchdog. */
  readonly pid: number;
  /** The resident-memory limit, in MB. */
  readonly memoryMb: number;
  /** Where dropped frames are reported. */
  readonly log: Logger;
  /** Resolves with the exit status once the process has exited. */
  readonly status: Promise<Deno.CommandStatus>;
  /** Resolves once all of the process's stderr has been read. */
  readonly stderrDone: Promise<void>;
  /** Whether the process has exited. */
  readonly exited: boolean;
  /** Size in bytes of the last frame read. */
  readonly lastFrameBytes: number;
  /** Sends a frame to the child. */
  send(frame: Record<string, unknown>): Promise<void>;
  /** Reads the next frame, or null at the end of the child's stdout. */
  next(): Promise<Frame | null>;
  /** Kills the child (SIGKILL). */
  kill(): void;
  /** Stops the child (SIGSTOP) while the run is held. */
  pause?(): void;
  /** Continues a child stopped by `pause`. */
  resume?(): void;
  /** Sends the child's stderr to `capture` until called again with undefined. */
  captureStderr(capture: OutputCapture | undefined, onOverflow?: () => void): void;
  /** Resolves when the child's next stderr mark has been read. */
  expectStderrMark(): Promise<void>;
}

/** Checks an error reported by a child, which is untrusted: strings only, bounded sizes. */
function sanitizeError(raw: unknown): ExecutionErrorInfo {
  const value = (typeof raw === "object" && raw !== null ? raw : {}) as Record<string, unknown>;
  const text = (v: unknown, max: number) => typeof v === "string" ? v.slice(0, max) : undefined;
  const info: ExecutionErrorInfo = {
    type: errorTypeOf(value.type),
    message: text(value.message, MAX_ERROR_MESSAGE_CHARS) ?? "The code failed without a message",
  };
  const traceback = text(value.traceback, MAX_TRACEBACK_CHARS);
  if (traceback) info.traceback = traceback;
  return info;
}

type Reported = { ok: boolean; value?: unknown; error?: ExecutionErrorInfo };

/** One run: created per `exec`, read to its end, then discarded. */
export class Execution {
  #channel: RunChannel;
  #options: ExecuteOptions;
  #budget: OutputBudget;
  #stdout: OutputCapture;
  #stderr: OutputCapture;
  #pending = { requests: 0, bytes: 0, drained: Promise.withResolvers<void>() };
  /** Why the host stopped the run (a limit, a cancel, a crash), if it did. */
  #failure: CodeExecutorError | undefined;
  #timedOut: CodeExecutorError | undefined;
  #result: Reported | undefined;
  /** The return value's JSON when it is kept rather than shown. */
  #keptValue: { text: string; bytes: number } | undefined;
  /** Set once the run is over: a reply that comes later is not sent into a child's next run. */
  #over = false;
  /** Images the code displayed, in order; a kept one has its bytes reserved. */
  #images: Array<{ image: CheckedImage; kept: boolean }> = [];

  /**
   * Prepares one run in a started child, with stdout and stderr drawing on one output budget;
   * nothing is sent until {@linkcode Execution.run}.
   *
   * @param channel The process to run in.
   * @param options Limits and language specifics.
   */
  constructor(channel: RunChannel, options: ExecuteOptions) {
    this.#channel = channel;
    this.#options = options;
    this.#budget = new OutputBudget(options.maxOutputBytes);
    this.#stdout = new OutputCapture(this.#budget, options.keep, options.watchStdout);
    this.#stderr = new OutputCapture(this.#budget, options.keep);
  }

  /**
   * Sends `exec`, relays output and requests until the result, and enforces the limits.
   *
   * @param exec The `exec` frame.
   * @returns The result; limits and crashes are reported in it, never thrown.
   */
  async run(exec: Record<string, unknown>): Promise<ExecutionResult> {
    const started = performance.now();
    const marked = this.#channel.expectStderrMark();
    const release = this.#enforceLimits();
    this.#channel.captureStderr(this.#stderr, () => this.#overflow("stderr"));
    try {
      await this.#channel.send(exec).catch(() => {});
      await this.#readFrames();
      await this.#windDown(marked);
    } finally {
      this.#over = true;
      release();
      this.#channel.captureStderr(undefined);
    }
    try {
      return await this.#outcome(Math.round(performance.now() - started));
    } finally {
      this.#options.keep?.release();
    }
  }

  #stop(error: CodeExecutorError): void {
    this.#failure ??= error;
    this.#channel.kill();
  }

  #overflow(stream: "stdout" | "stderr"): void {
    const capture = stream === "stdout" ? this.#stdout : this.#stderr;
    const keep = this.#options.keep;
    this.#stop(
      capture.stopped === "maxBytes"
        ? outputTooLarge(
          `${stream} passed outputs.maxBytes (${keep?.maxBytes} bytes), the most kept of one output, and its first ${keep?.maxBytes} bytes are kept`,
          "print less (summarize, or write the data to a file) or ask the admin to raise outputs.maxBytes",
        )
        : capture.stopped === "store"
        ? outputTooLarge(
          `${stream} passed limits.maxOutputBytes and outputs.maxTotalBytes has no room left beside the outputs of runs in progress`,
          "print less, or retry when other runs have finished",
        )
        : outputTooLarge(
          `${stream} passed limits.maxOutputBytes (${this.#options.maxOutputBytes} bytes)`,
          "print less (summarize, or return the data) or ask the admin to raise limits.maxOutputBytes",
        ),
    );
  }

  /** Starts the timeout, the memory watchdog and the cancellation; returns their release. */
  #enforceLimits(): () => void {
    const options = this.#options;
    const channel = this.#channel;
    let grace: ReturnType<typeof setTimeout> | undefined;
    const expire = () => {
      const error = this.#timedOut = timedOut(options.reportedTimeoutMs ?? options.timeoutMs);
      if (options.interruptGraceMs === undefined) return this.#stop(error);
      channel.send({ t: "interrupt" }).catch(() => {});
      grace = setTimeout(() => this.#stop(error), options.interruptGraceMs);
    };
    let deadline = performance.now() + options.timeoutMs;
    let timer: ReturnType<typeof setTimeout> | undefined = setTimeout(expire, options.timeoutMs);
    let left: number | undefined;
    const detach = options.hold?.attach({
      stop: () => {
        if (this.#timedOut || timer === undefined) return;
        clearTimeout(timer);
        timer = undefined;
        left = deadline - performance.now();
        channel.pause?.();
      },
      go: () => {
        if (left === undefined) return;
        channel.resume?.();
        deadline = performance.now() + left;
        timer = setTimeout(expire, Math.max(1, left));
        left = undefined;
      },
    });
    const watchdog = setInterval(async () => {
      const mb = await residentMb(channel.pid);
      if (mb !== undefined && mb > channel.memoryMb) {
        this.#stop(
          new CodeExecutorError(
            "MemoryLimitError",
            `Memory limit exceeded: the sandbox used ${
              Math.round(mb)
            } MB, more than limits.memoryMb (${channel.memoryMb} MB); use less memory or ask the admin to raise limits.memoryMb`,
          ),
        );
      }
    }, RSS_POLL_MS);
    const onAbort = () => this.#stop(cancelled(options.signal));
    options.signal?.addEventListener("abort", onAbort);
    if (options.signal?.aborted) onAbort();
    return () => {
      detach?.();
      clearTimeout(timer);
      clearTimeout(grace);
      clearInterval(watchdog);
      options.signal?.removeEventListener("abort", onAbort);
    };
  }

  /** Reads frames until the result, the end of the stream, or a limit. */
  async #readFrames(): Promise<void> {
    const pending = this.#pending;
    while (!this.#failure) {
      while (
        pending.requests >= MAX_PENDING_REQUESTS || pending.bytes >= MAX_PENDING_REQUEST_BYTES
      ) {
        await Promise.race([pending.drained.promise, this.#channel.status]);
        if (this.#channel.exited) break;
      }
      const frame = await this.#channel.next().catch((error: Error) => {
        this.#stop(
          new CodeExecutorError(
            "SandboxProtocolError",
            error instanceof FrameError && error.tooLarge
              ? `${error.message}: a return value or tool arguments this large cannot be sent; return a summary, or write the data to a file and return its path`
              : `${error.message}: sandbox code must print with ${this.#options.printHint}, not write to the process's stdout directly`,
          ),
        );
        return null;
      });
      if (frame === null) return;
      if (frame.t === "out") {
        const stream = frame.s === "stderr" ? "stderr" : "stdout";
        const capture = stream === "stderr" ? this.#stderr : this.#stdout;
        if (typeof frame.d === "string" && !capture.add(frame.d)) this.#overflow(stream);
      } else if (frame.t === "call") {
        if (frame.op === "display") this.#display(frame);
        else this.#answer(frame);
      } else if (frame.t === "result") {
        this.#takeResult(frame);
        return;
      } else {
        this.#channel.log.debug(
          `Dropped a sandbox frame of unknown type ${JSON.stringify(frame.t)}`,
        );
      }
    }
  }

  #answer(frame: Frame): void {
    const id = frame.id;
    if (typeof id !== "number") {
      this.#channel.log.debug(`Dropped a sandbox request without a numeric id: ${typeof id}`);
      return;
    }
    const pending = this.#pending;
    const bytes = this.#channel.lastFrameBytes;
    pending.requests++;
    pending.bytes += bytes;
    const reply = this.#options.onRequest?.(frame) ?? Promise.resolve(
      new CodeExecutorError("ToolCallError", "No MCP servers are available to this execution")
        .toReply(),
    );
    reply.then((body) => {
      if (!this.#over) return this.#channel.send({ t: "reply", id, ...body });
    }).catch(() => {
      // The child is gone; its run is already being reported.
    }).finally(() => {
      pending.requests--;
      pending.bytes -= bytes;
      pending.drained.resolve();
      pending.drained = Promise.withResolvers<void>();
    });
  }

  /**
   * Takes an image the code displayed, checked here (the frame is untrusted): shown while the
   * run's output budget has room for its base64, else kept whole like a long output; one that
   * can be neither stops the run, as printing past the cap does.
   */
  #display(frame: Frame): void {
    const id = frame.id;
    if (typeof id !== "number") {
      this.#channel.log.debug(`Dropped a display request without a numeric id: ${typeof id}`);
      return;
    }
    let reply: object = { ok: true };
    try {
      if (this.#images.length >= MAX_IMAGES_PER_RUN) {
        throw new CodeExecutorError(
          "LimitError",
          `display(data, mimeType): a run shows at most ${MAX_IMAGES_PER_RUN} images; combine them (one chart with several series) or display fewer`,
        );
      }
      const image = readImage(frame.args);
      // What the result carries is the base64, so that is what the output cap counts.
      const size = image.data.length;
      const keep = this.#options.keep;
      if (size <= this.#budget.left) {
        this.#budget.left -= size;
        this.#images.push({ image, kept: false });
      } else if (keep && size <= keep.maxBytes && keep.reserve(size)) {
        this.#images.push({ image, kept: true });
      } else {
        this.#stop(outputTooLarge(
          `an image of ${size} bytes of base64 (${image.mimeType}) passed limits.maxOutputBytes (${this.#options.maxOutputBytes} bytes) and could not be kept (outputs.maxBytes, outputs.maxTotalBytes)`,
          "display a smaller image (fewer pixels, PNG for charts, JPEG for photos) or ask the admin to raise limits.maxOutputBytes",
        ));
        return;
      }
    } catch (error) {
      reply = CodeExecutorError.from(error, "TypeError").toReply();
    }
    this.#channel.send({ t: "reply", id, ...reply }).catch(() => {
      // The child is gone; its run is already being reported.
    });
  }

  #takeResult(frame: Frame): void {
    this.#result = {
      ok: frame.ok === true,
      value: frame.value,
      error: frame.ok === true ? undefined : sanitizeError(frame.error),
    };
    // The value goes back to the client with the printed output, under one cap, or one run could
    // pass the message size clients accept.
    const json = JSON.stringify(frame.value) ?? "";
    const bytes = new TextEncoder().encode(json).length;
    const budget = this.#budget;
    if (bytes <= budget.left) {
      budget.left -= bytes;
      return;
    }
    const keep = this.#options.keep;
    if (frame.ok === true && keep && bytes <= keep.maxBytes && keep.reserve(bytes)) {
      this.#keptValue = { text: json, bytes };
      return;
    }
    const max = this.#options.maxOutputBytes;
    const printed = max - budget.left;
    this.#failure = outputTooLarge(
      `the return value is ${bytes} bytes of JSON${
        printed > 0 ? ` after ${printed} bytes of printed output` : ""
      }, more than limits.maxOutputBytes (${max} bytes) in all`,
      "return a summary, or write the data to a file and return its path",
    );
  }

  /** After the frames: collects the last stderr and stops the child when it is done with. */
  async #windDown(marked: Promise<void>): Promise<void> {
    const channel = this.#channel;
    const options = this.#options;
    const result = this.#result;
    if (result && !this.#failure && options.stderrMark) {
      // Everything written to stderr before the mark has been read once the mark has.
      await Promise.race([marked, channel.stderrDone]);
    } else if (result && !options.keepAlive && !this.#failure) {
      // Let the child exit by itself, so that what it wrote to stderr last is captured.
      let wait: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([channel.status, new Promise((r) => wait = setTimeout(r, EXIT_GRACE_MS))]);
      clearTimeout(wait);
    }
    // With the stderr mark read there is nothing left to wait for. The child then sleeps until
    // dispose() kills it, which the executor does once the response is out: killing it here would
    // tear it down on the CPUs that write the response.
    if (result && !this.#failure && (options.keepAlive || options.stderrMark)) return;
    channel.kill();
    const status = await channel.status;
    await channel.stderrDone;
    if (!result && !this.#failure) this.#failure = this.#crashError(status);
  }

  #crashError(status: Deno.CommandStatus): CodeExecutorError {
    const stderr = this.#stderr.text;
    if (/out of memory|heap limit/i.test(stderr)) {
      return new CodeExecutorError(
        "MemoryLimitError",
        `Memory limit exceeded: the V8 heap passed limits.memoryMb (${this.#channel.memoryMb} MB); use less memory or ask the admin to raise limits.memoryMb`,
      );
    }
    const how = status.signal
      ? `was killed by ${status.signal}`
      : `exited with code ${status.code}`;
    const last = stderr.trim().split("\n").filter((line) => line.trim()).at(-1)?.trim();
    return new CodeExecutorError(
      "SandboxCrash",
      `The sandbox process ${how} before reporting a result${
        last ? `: ${last.slice(0, 500)}` : ""
      }`,
    );
  }

  async #outcome(durationMs: number): Promise<ExecutionResult> {
    const options = this.#options;
    const result = this.#result;
    const timeout = this.#timedOut;
    let error: ExecutionErrorInfo | undefined = this.#failure?.toInfo() ?? result?.error;
    if (timeout && (!this.#failure || this.#failure === timeout)) {
      // Code that stopped at the interrupt keeps its traceback, which points at its line.
      error = timeout.toInfo();
      if (result?.error?.traceback) error.traceback = result.error.traceback;
    }
    const keptValue = error ? undefined : this.#keptValue;
    const shown = await keepParts(options.keep, this.#budget.left, {
      stdout: this.#stdout,
      stderr: this.#stderr,
      returnValue: keptValue,
    }, options.cleanStderr);
    error ??= shown.error?.toInfo();
    const out: ExecutionResult = {
      ok: !error && result?.ok === true,
      stdout: shown.stdout,
      stderr: shown.stderr,
      durationMs,
      toolCalls: [],
    };
    if (!error && !keptValue && result?.value !== undefined) out.returnValue = result.value;
    if (error) out.error = options.cleanError ? options.cleanError(error) : error;
    if (
      this.#stdout.truncated || this.#stderr.truncated || shown.outputs.length > 0 || shown.error
    ) {
      out.truncated = true;
    }
    const images: ResultImage[] = [];
    for (const { image, kept } of this.#images) {
      const { mimeType, bytes, data } = image;
      if (!kept || !options.keep) {
        images.push({ mimeType, bytes, data });
        continue;
      }
      try {
        const output = await options.keep.keep("image", data, data.length, mimeType);
        shown.outputs.push(output);
        images.push({ mimeType, bytes, output: output.id });
      } catch (failure) {
        // As keepParts: no link to an image that is not kept (the shared store), and the run fails.
        const info = CodeExecutorError.from(failure, "StateUnavailable").toInfo();
        out.truncated = true;
        if (!out.error) {
          out.ok = false;
          delete out.returnValue;
          out.error = options.cleanError ? options.cleanError(info) : info;
        }
      }
    }
    if (images.length > 0) out.images = images;
    if (shown.outputs.length > 0) out.outputs = shown.outputs;
    return out;
  }
}
