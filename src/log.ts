/**
 * Logging to stderr. The server's stdout carries protocol frames only, so nothing in this
 * project writes anywhere else.
 *
 * Writing never blocks: a synchronous write to a pipe that nobody reads blocks the whole event
 * loop once the pipe's 64 KiB are full (every timeout, kill and answer of the server stops with
 * it, as it did for stdout). Lines go into a bounded queue that an asynchronous writer drains;
 * when the reader falls behind by more than the queue holds, new lines are dropped and counted,
 * and a line saying how many were lost is written once the reader catches up.
 *
 * @module
 */
import { envVar } from "./_util.ts";

/** Log levels, most verbose first. */
export type LogLevel = "debug" | "info" | "warn" | "error" | "silent";

const ORDER: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 99 };
const encoder = new TextEncoder();

/** Bytes of log lines held while stderr is not being read; later lines are dropped. */
export const MAX_QUEUED_LOG_BYTES = 1024 * 1024;

/** A leveled logger that writes one line per message to stderr. */
export interface Logger {
  /** Logs detail useful when debugging. */
  debug(message: string): void;
  /** Logs a normal event. */
  info(message: string): void;
  /** Logs a problem that does not stop the server. */
  warn(message: string): void;
  /** Logs a failure. */
  error(message: string): void;
}

/** The queue in front of stderr, shared by every logger of the process. */
class StderrQueue {
  #lines: Uint8Array[] = [];
  #bytes = 0;
  #dropped = 0;
  #draining: Promise<void> | undefined;
  #broken = false;

  push(line: string): void {
    if (this.#broken) return;
    const bytes = encoder.encode(line);
    if (this.#bytes + bytes.length > MAX_QUEUED_LOG_BYTES) {
      this.#dropped++;
      return;
    }
    this.#lines.push(bytes);
    this.#bytes += bytes.length;
    this.#draining ??= this.#drain();
  }

  async #drain(): Promise<void> {
    // Yield first, so that #draining is set before the loop can end.
    await Promise.resolve();
    try {
      while (this.#lines.length > 0 && !this.#broken) {
        const { batch, queuedBytes } = this.#take();
        try {
          for (let offset = 0; offset < batch.length;) {
            offset += await Deno.stderr.write(batch.subarray(offset));
          }
          // Counted until written: the batch in flight is memory held as much as the queue is.
          this.#bytes -= queuedBytes;
        } catch {
          // stderr is gone (the client closed it): there is nowhere left to report to.
          this.#broken = true;
          this.#lines = [];
          this.#bytes = 0;
        }
      }
    } finally {
      // In the same step as the last look at the queue, so that a line pushed after it starts a
      // new drain. Cleared in a .finally() callback, a few microtasks later, a line pushed in
      // between waited for the next one (seen: serve --http's "ready on" held until SIGTERM).
      this.#draining = undefined;
    }
  }

  /** Moves the queue into one batch; its bytes stay counted until the caller has written it. */
  #take(): { batch: Uint8Array; queuedBytes: number } {
    let lines = this.#lines;
    const queuedBytes = this.#bytes;
    if (this.#dropped > 0) {
      const notice = encoder.encode(
        `[code-executor] warn: ${this.#dropped} log lines were dropped: stderr was not read fast enough\n`,
      );
      lines = [notice, ...lines];
      this.#dropped = 0;
    }
    const batch = new Uint8Array(lines.reduce((sum, line) => sum + line.length, 0));
    let offset = 0;
    for (const line of lines) {
      batch.set(line, offset);
      offset += line.length;
    }
    this.#lines = [];
    return { batch, queuedBytes };
  }

  /** Resolves once the queue is empty, or after `timeoutMs` if stderr is not being read. */
  async flush(timeoutMs: number): Promise<void> {
    if (!this.#draining) return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<void>((resolve) => timer = setTimeout(resolve, timeoutMs));
    const idle = (async () => {
      while (this.#draining) await this.#draining;
    })();
    try {
      await Promise.race([idle, late]);
    } finally {
      clearTimeout(timer);
    }
  }
}

const queue = new StderrQueue();

function levelFromEnv(): LogLevel {
  const raw = envVar("CODE_EXECUTOR_LOG_LEVEL");
  return raw && raw in ORDER ? raw as LogLevel : "info";
}

/**
 * Creates a logger that writes `[code-executor] level: message` lines to stderr, without ever
 * blocking the event loop.
 *
 * @param level The lowest level written; `CODE_EXECUTOR_LOG_LEVEL` or `info` when omitted.
 * @returns The logger.
 */
export function createLogger(level: LogLevel = levelFromEnv()): Logger {
  const write = (at: LogLevel, message: string) => {
    if (ORDER[at] < ORDER[level]) return;
    queue.push(`[code-executor] ${at}: ${message}\n`);
  };
  return {
    debug: (m) => write("debug", m),
    info: (m) => write("info", m),
    warn: (m) => write("warn", m),
    error: (m) => write("error", m),
  };
}

/**
 * Waits until the log lines queued so far are written, for a process about to exit.
 *
 * @param timeoutMs The longest wait: a stderr that nobody reads must not hold the exit.
 */
export async function flushLogs(timeoutMs = 1_000): Promise<void> {
  await queue.flush(timeoutMs);
}
