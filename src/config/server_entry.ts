/**
 * One server entry of an MCP config file, turned into an {@linkcode UpstreamServerConfig}: its
 * transport normalised, every `${VAR}` expanded and every key checked, or else a
 * {@linkcode BrokenServer} whose message names the file, the server and the key, or a
 * {@linkcode SkippedServer} (disabled, or Code Executor itself). Finding and reading the files
 * is `upstream.ts`; `setup` classifies entries with the same code.
 *
 * @module
 */
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { isPlainObject, isStringArray } from "../_util.ts";
import { parseJsoncChecked } from "./jsonc_errors.ts";

/** How Code Executor talks to an upstream server. */
export type UpstreamTransport = "stdio" | "http" | "sse";

/** One usable upstream server, with every `${VAR}` expanded. */
export interface UpstreamServerConfig {
  /** The key of the entry in `mcpServers`, verbatim. */
  name: string;
  /** The transport, normalised from `type` (or guessed from `command` / `url`). */
  transport: UpstreamTransport;
  /** Executable of a stdio server. */
  command?: string;
  /** Arguments of a stdio server. */
  args?: string[];
  /** Extra environment variables of a stdio server. */
  env?: Record<string, string>;
  /** Working directory of a stdio server. */
  cwd?: string;
  /** Endpoint of an http or sse server. */
  url?: string;
  /** Extra request headers of an http or sse server. */
  headers?: Record<string, string>;
  /** Per-server tool call timeout, from the entry's `timeoutMs` or `timeout` (milliseconds). */
  timeoutMs?: number;
  /** Absolute path of the file the entry came from. */
  source: string;
}

/** A server entry that could not be used. */
export interface BrokenServer {
  /** The key of the entry in `mcpServers`. */
  name: string;
  /** Absolute path of the file the entry came from. */
  source: string;
  /** Why it cannot be used, naming the file, the server and the key. */
  error: string;
}

/** A server entry that was left out on purpose. */
export interface SkippedServer {
  /** The key of the entry in `mcpServers`. */
  name: string;
  /** Absolute path of the file the entry came from. */
  source: string;
  /** `disabled`: the entry has `"disabled": true`; `self`: the entry is Code Executor itself. */
  reason: "disabled" | "self";
  /** How a `self` entry was recognised, for the warning that names it. */
  detail?: string;
}

/** What became of one server entry. Exactly one of the fields is set. */
export interface ServerEntryOutcome {
  /** The entry is usable. */
  server?: UpstreamServerConfig;
  /** The entry cannot be used. */
  broken?: BrokenServer;
  /** The entry was left out on purpose. */
  skipped?: SkippedServer;
}

/** A problem with an upstream configuration file or entry, naming where it is. */
export class UpstreamConfigError extends Error {
  /**
   * Creates the error; the message is shown to the user as it is.
   *
   * @param message What is wrong and how to fix it.
   * @param options Standard error options.
   */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "UpstreamConfigError";
  }
}

const SELF_NAME = "code-executor";

/** The `name` in the `deno.json` of a Code Executor checkout (and its JSR package). */
const SELF_PACKAGE = "@code-executor/code-executor";

const SELF_MAIN = import.meta.url.startsWith("file:")
  ? fileURLToPath(new URL("../../main.ts", import.meta.url))
  : undefined;

const VARIABLE = /\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g;

const TRANSPORTS: Record<string, UpstreamTransport> = {
  "stdio": "stdio",
  "http": "http",
  "streamable-http": "http",
  "streamablehttp": "http",
  "sse": "sse",
};

/**
 * Expands `${VAR}` and `${VAR:-default}` in a string. As in a POSIX shell, the default is used
 * when the variable is unset or empty; a `$` not followed by `{NAME}` stays as is.
 *
 * @param value The text to expand.
 * @param env The variables.
 * @param where Where the text is, for the error message, e.g.
 *   `"env.TOKEN" of MCP server "github" in /home/u/.mcp.json`.
 * @returns The expanded text.
 * @throws {UpstreamConfigError} When a variable without a default is not set.
 * @example
 * ```ts
 * expandVars("Bearer ${TOKEN:-none}", {}, '"headers.Authorization"'); // "Bearer none"
 * ```
 */
export function expandVars(value: string, env: Record<string, string>, where: string): string {
  return value.replace(VARIABLE, (_match, name: string, fallback: string | undefined) => {
    const current = env[name];
    if (fallback !== undefined) return current ? current : fallback;
    if (current !== undefined) return current;
    throw new UpstreamConfigError(
      `Cannot expand \${${name}} in ${where}: the variable is not set; set it or write \${${name}:-default}`,
    );
  });
}

interface EntryContext {
  env: Record<string, string>;
  cwd: string;
  selfMains: string[];
}

/**
 * Decides what becomes of one server entry: usable (with every `${VAR}` expanded), broken (with
 * a message naming the file, the server and the key) or skipped (disabled, or Code Executor
 * itself). Discovery and `setup` both decide through here, so they never disagree.
 *
 * @param name The entry's key.
 * @param raw The entry as parsed.
 * @param options The file and section it is in, the variables and the project directory.
 * @returns The outcome.
 */
export function classifyServerEntry(
  name: string,
  raw: unknown,
  options: { file: string; where?: string; env: Record<string, string>; cwd: string },
): ServerEntryOutcome {
  return resolveEntry(name, raw, options.file, options.where ?? options.file, {
    env: options.env,
    cwd: resolve(options.cwd),
    selfMains: selfMainPaths(),
  });
}

function resolveEntry(
  name: string,
  raw: unknown,
  file: string,
  where: string,
  context: EntryContext,
): ServerEntryOutcome {
  const skip = (reason: SkippedServer["reason"], detail?: string): ServerEntryOutcome => ({
    skipped: { name, source: file, reason, ...(detail ? { detail } : {}) },
  });
  if (name.toLowerCase() === SELF_NAME) return skip("self", `it is named ${SELF_NAME}`);
  if (!isPlainObject(raw)) {
    return {
      broken: {
        name,
        source: file,
        error: `Invalid MCP server "${name}" in ${where}: the entry must be an object`,
      },
    };
  }
  if (raw.disabled === true) return skip("disabled");
  const named = selfMention(raw.command, raw.args);
  if (named) return skip("self", named);
  let server: UpstreamServerConfig;
  try {
    server = buildServer(name, raw, file, where, context.env);
  } catch (error) {
    if (!(error instanceof UpstreamConfigError)) throw error;
    return { broken: { name, source: file, error: error.message } };
  }
  const self = pointsAtSelf(server, context);
  if (self) return skip("self", self);
  return { server };
}

function buildServer(
  name: string,
  raw: Record<string, unknown>,
  file: string,
  where: string,
  env: Record<string, string>,
): UpstreamServerConfig {
  const invalid = (key: string, detail: string): UpstreamConfigError =>
    new UpstreamConfigError(`Invalid MCP server "${name}" in ${where}: "${key}" ${detail}`);
  const expand = (value: string, key: string): string =>
    expandVars(value, env, `"${key}" of MCP server "${name}" in ${where}`);

  const transport = transportOf(raw, name, where, invalid);
  const server: UpstreamServerConfig = { name, transport, source: file };

  if (transport === "stdio") {
    if (typeof raw.command !== "string" || raw.command.trim() === "") {
      throw invalid("command", "must be a non-empty string");
    }
    server.command = expand(raw.command, "command");
    if (raw.args !== undefined) {
      if (!isStringArray(raw.args)) throw invalid("args", "must be an array of strings");
      server.args = raw.args.map((arg, i) => expand(arg, `args[${i}]`));
    }
    if (raw.env !== undefined) {
      server.env = stringRecord(raw.env, "env", invalid, expand);
    }
    if (raw.cwd !== undefined) {
      if (typeof raw.cwd !== "string") throw invalid("cwd", "must be a string");
      server.cwd = expand(raw.cwd, "cwd");
    }
  } else {
    if (typeof raw.url !== "string" || raw.url.trim() === "") {
      throw invalid("url", "must be an http or https URL");
    }
    const url = expand(raw.url, "url");
    let protocol: string;
    try {
      protocol = new URL(url).protocol;
    } catch {
      throw invalid("url", "must be an absolute http or https URL");
    }
    if (protocol !== "http:" && protocol !== "https:") {
      throw invalid("url", `must be an http or https URL, not ${protocol}`);
    }
    server.url = url;
    if (raw.headers !== undefined) {
      server.headers = stringRecord(raw.headers, "headers", invalid, expand);
    }
  }

  const timeoutKey = raw.timeoutMs !== undefined ? "timeoutMs" : "timeout";
  const timeout = raw[timeoutKey];
  if (timeout !== undefined) {
    if (typeof timeout !== "number" || !Number.isFinite(timeout) || timeout <= 0) {
      throw invalid(timeoutKey, "must be a positive number of milliseconds");
    }
    server.timeoutMs = timeout;
  }
  return server;
}

function transportOf(
  raw: Record<string, unknown>,
  name: string,
  where: string,
  invalid: (key: string, detail: string) => UpstreamConfigError,
): UpstreamTransport {
  if (raw.type === undefined) {
    if (raw.command !== undefined) return "stdio";
    if (raw.url !== undefined) return "http";
    throw new UpstreamConfigError(
      `Invalid MCP server "${name}" in ${where}: it needs "command" (stdio) or "url" (http, sse)`,
    );
  }
  const transport = typeof raw.type === "string" ? TRANSPORTS[raw.type.toLowerCase()] : undefined;
  if (!transport) {
    throw invalid("type", 'must be "stdio", "http" (or "streamable-http") or "sse"');
  }
  return transport;
}

function stringRecord(
  value: unknown,
  key: string,
  invalid: (key: string, detail: string) => UpstreamConfigError,
  expand: (value: string, key: string) => string,
): Record<string, string> {
  if (!isPlainObject(value)) throw invalid(key, "must be an object of strings");
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(value)) {
    if (typeof v !== "string") throw invalid(`${key}.${k}`, "must be a string");
    out[k] = expand(v, `${key}.${k}`);
  }
  return out;
}

/**
 * Whether a command or an argument names Code Executor: this package's specifier, a bare package
 * name that starts with `code-executor` (what npx runs), a program called `code-executor`, or a
 * `main.ts` under a directory of that name. A path that merely holds the name (a server's data
 * directory, `/home/you/code-executor-notes`) is not one.
 */
function mentionsSelf(value: unknown): boolean {
  if (typeof value !== "string") return false;
  const text = value.toLowerCase();
  if (text.includes(SELF_PACKAGE)) return true;
  if (!/[\\/]/.test(text)) return text.startsWith(SELF_NAME);
  const parts = text.split(/[\\/]+/);
  const last = parts.at(-1)!.replace(/\.(exe|cmd|bat|ps1)$/, "");
  if (last === SELF_NAME) return true;
  return /^main\.[jt]s$/.test(last) && parts.slice(0, -1).some((part) => part.includes(SELF_NAME));
}

/** Says which of the command and its arguments names Code Executor, if one does. */
function selfMention(command: unknown, args: unknown): string | undefined {
  if (mentionsSelf(command)) return `its command ${JSON.stringify(command)} is Code Executor`;
  const arg = Array.isArray(args) ? args.find(mentionsSelf) : undefined;
  return arg === undefined ? undefined : `its argument ${JSON.stringify(arg)} is Code Executor`;
}

/**
 * Whether a `main.ts` is that of a Code Executor checkout: its `deno.json` names the package.
 * Another clone of the repository started with `deno run main.ts serve` is this server under
 * another name as much as this checkout is.
 */
function isCheckoutMain(path: string): boolean {
  for (const name of ["deno.json", "deno.jsonc"]) {
    const file = join(dirname(path), name);
    try {
      // A checkout's deno.json is a few KiB; anything much larger is not one, and is not read.
      if (Deno.statSync(file).size > 256 * 1024) return false;
      const { value } = parseJsoncChecked(Deno.readTextFileSync(file));
      return isPlainObject(value) && value.name === SELF_PACKAGE;
    } catch {
      // No such file here: try the other name.
    }
  }
  return false;
}

function selfMainPaths(): string[] {
  if (!SELF_MAIN) return [];
  const paths = [SELF_MAIN];
  try {
    paths.push(Deno.realPathSync(SELF_MAIN));
  } catch {
    // The module may run from a location that is not on disk; its URL is all there is.
  }
  return paths;
}

/** Says how an entry, with its variables expanded, starts Code Executor, if it does. */
function pointsAtSelf(server: UpstreamServerConfig, context: EntryContext): string | undefined {
  if (server.transport !== "stdio") return undefined;
  const named = selfMention(server.command, server.args);
  if (named) return named;
  const base = server.cwd ? resolve(context.cwd, server.cwd) : context.cwd;
  for (const arg of server.args ?? []) {
    let path: string;
    try {
      path = arg.startsWith("file:") ? fileURLToPath(arg) : resolve(base, arg);
    } catch {
      continue;
    }
    if (basename(path) !== "main.ts") continue;
    const ours = `it runs ${path}, the main.ts of this Code Executor`;
    if (context.selfMains.includes(path)) return ours;
    let real: string;
    try {
      real = Deno.realPathSync(path);
    } catch {
      // A path that does not exist is not anyone's main.ts.
      continue;
    }
    if (context.selfMains.includes(real)) return ours;
    if (isCheckoutMain(real)) return `it runs ${path}, the main.ts of a Code Executor checkout`;
  }
  return undefined;
}
