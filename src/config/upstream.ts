/**
 * Discovery of the MCP servers the user has configured, which Code Executor connects to as a
 * client.
 *
 * Sources are merged by server name, later sources winning (the whole entry is replaced):
 * Claude Desktop, `~/.claude.json` (top level, then the current project), `~/.cursor/mcp.json`,
 * the project's `.cursor/mcp.json`, the project's `.mcp.json`, Code Executor's own
 * `~/.config/code-executor/mcp.json` (where `setup --move` puts the servers it takes out of a
 * client), `MCP_CONFIG_PATH`, then each `--config PATH`. One unusable entry never affects the
 * others: it is reported in {@linkcode UpstreamConfig.broken} with a message that names the
 * file, the server and the key. Where each file is comes from `paths.ts`.
 *
 * @module
 */
import { basename, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { canonicalJson, isPlainObject, isStringArray, sha256Hex } from "../_util.ts";
import {
  claudeCodeConfigPath,
  claudeDesktopConfigPath,
  cursorConfigPath,
  cursorProjectConfigPath,
  ownUpstreamConfigPath,
  projectConfigPath,
} from "./paths.ts";
import { parseJsoncText } from "./settings.ts";

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
}

/**
 * Which client or option a config file belongs to: `cursor` is Cursor's user-level file and
 * `cursor-project` the project's `.cursor/mcp.json`; `vscode` is the project's `.vscode/mcp.json`
 * and `vscode-user` VS Code's user-level file; `project` is the project's `.mcp.json`;
 * `code-executor` is Code Executor's own upstream file, `env` is `MCP_CONFIG_PATH` and `cli` a
 * `--config PATH`. `vscode`, `vscode-user` and `windsurf` files are read by `setup` only, not by
 * discovery.
 */
export type ConfigKind =
  | "claude-desktop"
  | "claude-code"
  | "cursor"
  | "cursor-project"
  | "project"
  | "vscode"
  | "vscode-user"
  | "windsurf"
  | "code-executor"
  | "env"
  | "cli";

/** A client config file at its default location. */
export interface ClientConfigFile {
  /** Which client the file belongs to. */
  kind: ConfigKind;
  /** Absolute path of the file, which may not exist. */
  path: string;
}

/** One object of server entries inside a config file. */
export interface ServerSection {
  /** The raw entries, by server name. */
  entries: Record<string, unknown>;
  /** Where the object is, as a JSON path (`["mcpServers"]`, `["projects", dir, "mcpServers"]`). */
  path: string[];
  /** Where the object is, for messages: the file, and the project key when there is one. */
  where: string;
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

/** One configuration file that was looked at. */
export interface ConfigSource {
  /** Absolute path of the file. */
  path: string;
  /** Which client or option the file belongs to. */
  kind: ConfigKind;
  /** Whether the file exists. */
  found: boolean;
  /** Usable servers defined in the file (before later files override them). */
  servers: number;
  /** Why the file was skipped (client files only; explicit files throw instead). */
  error?: string;
}

/** The merged upstream configuration. */
export interface UpstreamConfig {
  /** Usable servers, sorted by name. */
  servers: UpstreamServerConfig[];
  /** Unusable entries, sorted by name. */
  broken: BrokenServer[];
  /** Entries left out on purpose (disabled, or Code Executor itself), sorted by name. */
  skipped?: SkippedServer[];
  /** Every file looked at, in precedence order (lowest first). */
  sources: ConfigSource[];
  /** sha256 hex of the servers (without `source`); changes whenever a server's config does. */
  hash: string;
}

/** Options for {@linkcode discoverUpstreams}. */
export interface DiscoverOptions {
  /** Environment for `HOME`, `APPDATA`, `XDG_CONFIG_HOME`, `MCP_CONFIG_PATH` and `${VAR}`. */
  env?: Record<string, string>;
  /** Project directory (`.mcp.json`, the `~/.claude.json` project entry); defaults to the cwd. */
  cwd?: string;
  /** Which Claude Desktop location to use; defaults to `Deno.build.os`. */
  os?: typeof Deno.build.os;
  /** Files from `--config PATH`, in order; each must exist. */
  configPaths?: string[];
  /** Read the files of {@linkcode defaultConfigFiles}; defaults to true. */
  includeClientConfigs?: boolean;
}

/** A problem with an upstream configuration file or entry, naming where it is. */
export class UpstreamConfigError extends Error {
  /**
   * @param message What is wrong and how to fix it.
   * @param options Standard error options.
   */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "UpstreamConfigError";
  }
}

const SELF_NAME = "code-executor";

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

/**
 * Finds, reads and merges the configured MCP servers.
 *
 * Missing client files are normal; a client file that cannot be parsed is recorded in its
 * {@linkcode ConfigSource} and skipped. Files named explicitly (`MCP_CONFIG_PATH`,
 * `configPaths`) must exist and parse.
 *
 * @param options Where to look.
 * @returns The usable servers, the broken entries and the files looked at.
 * @throws {UpstreamConfigError} When an explicitly named file is missing, unreadable or invalid.
 * @example
 * ```ts
 * const { servers, broken } = await discoverUpstreams({ configPaths: ["./servers.json"] });
 * ```
 */
export async function discoverUpstreams(options: DiscoverOptions = {}): Promise<UpstreamConfig> {
  const env = options.env ?? Deno.env.toObject();
  const cwd = resolve(options.cwd ?? Deno.cwd());
  const context: EntryContext = { env, cwd, selfMains: selfMainPaths() };
  const merged = new Map<string, Outcome>();
  const sources: ConfigSource[] = [];

  for (const candidate of candidateFiles(env, cwd, options)) {
    const source: ConfigSource = {
      path: candidate.path,
      kind: candidate.kind,
      found: false,
      servers: 0,
    };
    sources.push(source);
    let sections: Section[];
    try {
      const text = await readConfigFile(candidate);
      if (text === undefined) continue;
      source.found = true;
      sections = extractSections(candidate, text, cwd);
    } catch (error) {
      if (!(error instanceof UpstreamConfigError) || candidate.explicit) throw error;
      source.error = error.message;
      continue;
    }
    const fromFile = new Map<string, Outcome>();
    for (const section of sections) {
      for (const [name, raw] of Object.entries(section.entries)) {
        fromFile.set(name, resolveEntry(name, raw, candidate.path, section.where, context));
      }
    }
    for (const [name, outcome] of fromFile) {
      if (outcome.server) source.servers++;
      merged.set(name, outcome);
    }
  }

  const outcomes = [...merged.values()];
  const servers = outcomes.flatMap((o) => (o.server ? [o.server] : [])).sort(byName);
  const broken = outcomes.flatMap((o) => (o.broken ? [o.broken] : [])).sort(byName);
  const skipped = outcomes.flatMap((o) => (o.skipped ? [o.skipped] : [])).sort(byName);
  return { servers, broken, skipped, sources, hash: hashServers(servers) };
}

interface CandidateFile {
  path: string;
  kind: ConfigSource["kind"];
  explicit: boolean;
}

type Section = ServerSection;

type Outcome = ServerEntryOutcome;

interface EntryContext {
  env: Record<string, string>;
  cwd: string;
  selfMains: string[];
}

/**
 * Returns the config files that discovery reads by default, lowest precedence first: Claude
 * Desktop (the location for `os`), `~/.claude.json`, Cursor's `~/.cursor/mcp.json` then the
 * project's `.cursor/mcp.json` (Cursor lets the project's file win), the project's `.mcp.json`
 * and Code Executor's own upstream file. A path is left out when the variables it needs (`HOME`,
 * `APPDATA`) are not set. VS Code's and Windsurf's files are not read: `setup` scans them, but
 * their entries may use variables that only those clients fill in.
 *
 * @param env The environment to read `HOME`, `USERPROFILE`, `APPDATA` and `XDG_CONFIG_HOME` from.
 * @param options The project directory and the operating system whose locations to use.
 * @returns The files, which may not exist.
 */
export function defaultConfigFiles(
  env: Record<string, string>,
  options: { cwd: string; os?: typeof Deno.build.os },
): ClientConfigFile[] {
  const candidates: Array<[ConfigKind, string | undefined]> = [
    ["claude-desktop", claudeDesktopConfigPath(env, options.os)],
    ["claude-code", claudeCodeConfigPath(env)],
    ["cursor", cursorConfigPath(env)],
    ["cursor-project", cursorProjectConfigPath(options.cwd)],
    ["project", projectConfigPath(options.cwd)],
    ["code-executor", ownUpstreamConfigPath(env)],
  ];
  return candidates.flatMap(([kind, path]) => path ? [{ kind, path }] : []);
}

/**
 * Returns the key of the object of servers in a client's config file: `servers` in VS Code's
 * files, `mcpServers` in everyone else's.
 *
 * @param kind Which client the file belongs to.
 * @returns The key.
 */
export function serversKeyOf(kind: ConfigKind): "mcpServers" | "servers" {
  return kind === "vscode" || kind === "vscode-user" ? "servers" : "mcpServers";
}

function candidateFiles(
  env: Record<string, string>,
  cwd: string,
  options: DiscoverOptions,
): CandidateFile[] {
  const files: CandidateFile[] = [];
  if (options.includeClientConfigs ?? true) {
    for (const file of defaultConfigFiles(env, { cwd, os: options.os })) {
      files.push({ ...file, explicit: false });
    }
  }
  if (env.MCP_CONFIG_PATH) {
    files.push({ path: resolve(cwd, env.MCP_CONFIG_PATH), kind: "env", explicit: true });
  }
  for (const path of options.configPaths ?? []) {
    files.push({ path: resolve(cwd, path), kind: "cli", explicit: true });
  }
  return files;
}

async function readConfigFile(candidate: CandidateFile): Promise<string | undefined> {
  try {
    return await Deno.readTextFile(candidate.path);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound && !candidate.explicit) return undefined;
    const reason = error instanceof Deno.errors.NotFound
      ? "the file does not exist"
      : (error as Error).message;
    throw new UpstreamConfigError(`Cannot read MCP config file ${candidate.path}: ${reason}`, {
      cause: error,
    });
  }
}

/**
 * Parses a config file and returns its objects of server entries: `mcpServers` (`servers` in a
 * VS Code file) and, in `~/.claude.json`, the current project's `mcpServers`.
 *
 * @param text The file's contents (JSONC).
 * @param file The file's path, for messages.
 * @param options Which client the file belongs to, and the project directory.
 * @returns The sections, in precedence order (lowest first).
 * @throws {UpstreamConfigError} When the text does not parse or has the wrong shape.
 */
export function readServerSections(
  text: string,
  file: string,
  options: { kind: ConfigKind; cwd: string },
): ServerSection[] {
  return extractSections({ path: file, kind: options.kind, explicit: false }, text, options.cwd);
}

function extractSections(candidate: CandidateFile, text: string, cwd: string): Section[] {
  const file = candidate.path;
  let value: unknown;
  try {
    value = parseJsoncText(text, file);
  } catch (error) {
    throw new UpstreamConfigError((error as Error).message, { cause: error });
  }
  if (!isPlainObject(value)) {
    throw new UpstreamConfigError(
      `Invalid MCP config file ${file}: the top level must be an object`,
    );
  }
  const sections: Section[] = [];
  const key = serversKeyOf(candidate.kind);
  const top = serversOf(value, file, key);
  if (top) sections.push({ entries: top, path: [key], where: file });
  if (candidate.kind === "claude-code" && isPlainObject(value.projects)) {
    const projects = value.projects;
    // Claude Code keys projects by the directory it was started in; that may be a symlink.
    for (const key of projectKeys(cwd)) {
      const project = projects[key];
      if (project === undefined) continue;
      const where = `${file} (projects["${key}"])`;
      if (!isPlainObject(project)) {
        throw new UpstreamConfigError(
          `Invalid MCP config file ${file}: projects["${key}"] must be an object`,
        );
      }
      const entries = serversOf(project, file, "mcpServers", `projects["${key}"].mcpServers`);
      if (entries) sections.push({ entries, path: ["projects", key, "mcpServers"], where });
    }
  }
  return sections;
}

function serversOf(
  container: Record<string, unknown>,
  file: string,
  key: string,
  label = key,
): Record<string, unknown> | undefined {
  const servers = container[key];
  if (servers === undefined || servers === null) return undefined;
  if (!isPlainObject(servers)) {
    throw new UpstreamConfigError(`Invalid MCP config file ${file}: "${label}" must be an object`);
  }
  return servers;
}

function projectKeys(cwd: string): string[] {
  const keys = [cwd];
  try {
    keys.push(Deno.realPathSync(cwd));
  } catch {
    // A cwd that cannot be resolved only has its own spelling.
  }
  // Claude Code on Windows writes project keys with forward slashes.
  for (const key of [...keys]) keys.push(key.replaceAll("\\", "/"));
  // The exact spelling goes last so that it wins over the realpath's entry.
  return [...new Set(keys)].reverse();
}

/**
 * Decides what becomes of one server entry: usable (with every `${VAR}` expanded), broken (with
 * a message naming the file, the server and the key) or skipped (disabled, or Code Executor
 * itself).
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
): Outcome {
  const skip = (reason: SkippedServer["reason"]): Outcome => ({
    skipped: { name, source: file, reason },
  });
  if (name.toLowerCase() === SELF_NAME) return skip("self");
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
  if (mentionsSelf(raw.command) || (Array.isArray(raw.args) && raw.args.some(mentionsSelf))) {
    return skip("self");
  }
  let server: UpstreamServerConfig;
  try {
    server = buildServer(name, raw, file, where, context.env);
  } catch (error) {
    if (!(error instanceof UpstreamConfigError)) throw error;
    return { broken: { name, source: file, error: error.message } };
  }
  if (pointsAtSelf(server, context)) return skip("self");
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

function mentionsSelf(value: unknown): boolean {
  return typeof value === "string" && value.toLowerCase().includes(SELF_NAME);
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

function pointsAtSelf(server: UpstreamServerConfig, context: EntryContext): boolean {
  if (server.transport !== "stdio") return false;
  if (mentionsSelf(server.command) || (server.args ?? []).some(mentionsSelf)) return true;
  const base = server.cwd ? resolve(context.cwd, server.cwd) : context.cwd;
  for (const arg of server.args ?? []) {
    let path: string;
    try {
      path = arg.startsWith("file:") ? fileURLToPath(arg) : resolve(base, arg);
    } catch {
      continue;
    }
    if (basename(path) !== "main.ts") continue;
    if (context.selfMains.includes(path)) return true;
    try {
      if (context.selfMains.includes(Deno.realPathSync(path))) return true;
    } catch {
      // A path that does not exist is not this repository's main.ts.
    }
  }
  return false;
}

function hashServers(servers: UpstreamServerConfig[]): string {
  const material = servers.map(({ source: _source, ...rest }) => rest);
  return sha256Hex(canonicalJson(material));
}

function byName(a: { name: string }, b: { name: string }): number {
  return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
}
