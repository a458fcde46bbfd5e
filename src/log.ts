/**
 * Logging to stderr. The server's stdout carries protocol frames only, so nothing in this
 * project writes anywhere else.
 *
 * @module
 */

/** Log levels, most verbose first. */
export type LogLevel = "debug" | "info" | "warn" | "error" | "silent";

const ORDER: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 99 };
const encoder = new TextEncoder();

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

function levelFromEnv(): LogLevel {
  let raw: string | undefined;
  try {
    raw = Deno.env.get("CODE_EXECUTOR_LOG_LEVEL");
  } catch {
    raw = undefined;
  }
  return raw && raw in ORDER ? raw as LogLevel : "info";
}

/**
 * Creates a logger that writes `[code-executor] level: message` lines to stderr.
 *
 * @param level The lowest level written; `CODE_EXECUTOR_LOG_LEVEL` or `info` when omitted.
 * @returns The logger.
 */
export function createLogger(level: LogLevel = levelFromEnv()): Logger {
  const write = (at: LogLevel, message: string) => {
    if (ORDER[at] < ORDER[level]) return;
    try {
      Deno.stderr.writeSync(encoder.encode(`[code-executor] ${at}: ${message}\n`));
    } catch {
      // stderr is gone (the client closed it); there is nowhere left to report to.
    }
  };
  return {
    debug: (m) => write("debug", m),
    info: (m) => write("info", m),
    warn: (m) => write("warn", m),
    error: (m) => write("error", m),
  };
}
