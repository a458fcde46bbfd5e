/**
 * Why an upstream server could not be connected, in words that name the fix: a stdio server that
 * died during start-up in its own words (the last lines of its stderr) with a command that runs
 * it by hand, an HTTP server by its URL and the cause (refused, DNS, TLS, 401, …) rather than
 * `fetch failed`. Free of the SDK: errors are read by their messages, causes and `status`.
 *
 * @module
 */
import type { UpstreamServerConfig } from "../config/server_entry.ts";
import { redactText } from "../redact.ts";

/**
 * Quotes one word for a POSIX shell: bare when it holds only characters no shell treats
 * specially, else in single quotes (a `'` inside written `'\''`).
 *
 * @param word The word.
 * @returns The word as a shell reads it back.
 * @example
 * ```ts
 * shellQuote("/tmp/my dir/server.js"); // "'/tmp/my dir/server.js'"
 * ```
 */
export function shellQuote(word: string): string {
  if (/^[A-Za-z0-9_@%+=:,./-]+$/.test(word)) return word;
  return `'${word.replaceAll("'", `'\\''`)}'`;
}

/**
 * The shell command that starts a stdio server as Code Executor does: its directory, the
 * variables its entry sets, the command and its arguments, each quoted, so that pasting the line
 * runs the same thing. Secret-looking values are redacted (the line goes into logs and to the
 * model), and then say `[REDACTED]` where the entry's value goes.
 *
 * @param config The server's entry.
 * @returns One line for a POSIX shell.
 */
export function handCommand(config: UpstreamServerConfig): string {
  const words = [config.command ?? "", ...(config.args ?? [])].map((w) =>
    shellQuote(redactText(w))
  );
  const env = Object.entries(config.env ?? {}).map(([name, value]) => {
    const redacted = redactText(`${name}=${value}`);
    const at = redacted.indexOf("=");
    return `${redacted.slice(0, at)}=${shellQuote(redacted.slice(at + 1))}`;
  });
  const cd = config.cwd ? `cd ${shellQuote(config.cwd)} && ` : "";
  return cd + [...env, ...words].join(" ");
}

/**
 * Says why connecting to an upstream server failed.
 *
 * @param error What the connection attempt threw.
 * @param config The server's entry.
 * @param stderr For a stdio server, the last lines it wrote to stderr (redacted).
 * @returns What failed on the first line; for a stdio server that died, the last lines it wrote
 *   to stderr (indented) and the command that runs it by hand on the lines after.
 */
export function describeConnectError(
  error: Error,
  config: UpstreamServerConfig,
  stderr: string[] = [],
): string {
  const message = error.message || String(error);
  if (config.transport !== "stdio") return describeHttpError(error, config);
  if (/ENOENT|NotFound|not found|No such file/i.test(message)) {
    return `command "${config.command}" was not found (check "command" in ${config.source})`;
  }
  const own = stderr.map((line) => `\n  ${line}`).join("");
  if (/Connection closed|closed/i.test(message)) {
    // The first line stands alone in doctor's table; the server's words and the command follow.
    return stderr.length > 0
      ? `the process exited during start-up; the last lines it wrote to stderr:${own}\nRun it by hand to see more: ${
        handCommand(config)
      }`
      : `the process exited during start-up, writing nothing to stderr\nRun it by hand to see why: ${
        handCommand(config)
      }`;
  }
  return `${message}${own}`;
}

/** The HTTP statuses that say what to change in the entry, and which key. */
const STATUS_CAUSE: Record<number, [string, string]> = {
  401: ["it answered 401 Unauthorized: the token is missing or wrong", "headers"],
  403: ["it answered 403 Forbidden: the token is not allowed there", "headers"],
  404: ["it answered 404 Not Found: the path is not an MCP endpoint", "url"],
  405: ["it answered 405 Method Not Allowed: not an MCP endpoint, or the wrong type", "type"],
};

/**
 * Says why an HTTP or SSE server could not be reached: its URL, then the cause found in the
 * error's message, its `cause` chain or its HTTP status, then the key of the entry to check.
 *
 * @param error What the connection attempt threw.
 * @param config The server's entry.
 * @returns One line, redacted (a URL may hold a password or a token).
 */
export function describeHttpError(error: Error, config: UpstreamServerConfig): string {
  const messages: string[] = [];
  let status: number | undefined;
  for (let e: unknown = error, depth = 0; e instanceof Error && depth < 8; depth++) {
    if (e.message) messages.push(e.message);
    const candidate = (e as { status?: unknown; code?: unknown }).status ??
      (e as { code?: unknown }).code;
    if (status === undefined && typeof candidate === "number") status = candidate;
    e = e.cause;
  }
  const all = messages.join(" / ");
  status ??= Number(/\b(?:status(?: code)?|HTTP) \(?(\d{3})\b/i.exec(all)?.[1]) || undefined;
  const url = config.url ?? "";
  let host = url;
  try {
    host = new URL(url).host;
  } catch {
    // The entry's URL was checked when it was read; keep it as it is.
  }
  const [cause, key] = (status ? STATUS_CAUSE[status] : undefined) ??
    (/connection refused|ECONNREFUSED|os error 111/i.test(all)
      ? [`the connection was refused: nothing listens on ${host} (is the server running?)`, "url"]
      : /dns error|failed to lookup|ENOTFOUND|EAI_AGAIN|name or service not known|nodename nor servname/i
          .test(all)
      ? ["the host name does not resolve (DNS)", "url"]
      : /certificate|tls|ssl|handshake|corrupt message|InvalidContentType/i.test(all)
      ? [
        `the TLS connection failed (${
          innermost(messages)
        }): an https URL for a server that speaks plain http, or a certificate this machine does not trust`,
        "url",
      ]
      : /timed out|os error 110|ETIMEDOUT/i.test(all)
      ? [`the connection timed out (${innermost(messages)})`, "url"]
      : status
      ? [`it answered HTTP ${status} (${innermost(messages)})`, "url"]
      : [innermost(messages), "url"]);
  return redactText(
    `cannot reach ${url}: ${cause}; check "${key}" of MCP server "${config.name}" in ${config.source}`,
  );
}

/**
 * The most specific message: the deepest cause, unless it says less than the one above it,
 * without the request's URL (named already) and Deno's `client error (Connect)` wrapping.
 */
function innermost(messages: string[]): string {
  const last = messages.at(-1) ?? "unknown error";
  const chosen = last === "fetch failed" && messages.length > 1 ? messages.at(-2)! : last;
  return chosen.replace(/^error sending request for url \([^)]*\): /, "")
    .replace(/^client error \(Connect\): /, "");
}
