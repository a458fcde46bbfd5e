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
 * file, the server and the key. A client's file that cannot be parsed is skipped and recorded in
 * its {@linkcode ConfigSource}; Code Executor's own file and the files named explicitly stop the
 * program instead, since skipping them would drop every server they hold without a word. Where
 * each file is comes from `paths.ts`; what becomes of each entry, from `server_entry.ts`.
 *
 * @module
 */
import { resolve } from "node:path";
import { canonicalJson, isPlainObject, sha256Hex } from "../_util.ts";
import {
  claudeCodeConfigPath,
  claudeDesktopConfigPath,
  cursorConfigPath,
  cursorProjectConfigPath,
  ownUpstreamConfigPath,
  projectConfigPath,
} from "./paths.ts";
import {
  type BrokenServer,
  classifyServerEntry,
  type ServerEntryOutcome,
  type SkippedServer,
  UpstreamConfigError,
  type UpstreamServerConfig,
} from "./server_entry.ts";
import { parseJsoncText } from "./settings.ts";

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
  /**
   * Why the file was skipped (another client's file only; Code Executor's own and explicit files
   * throw instead). A syntax error reads `Cannot parse FILE:LINE:COLUMN: …` followed by the line
   * and a caret under the place.
   */
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

/**
 * Finds, reads and merges the configured MCP servers.
 *
 * Missing client files are normal; another client's file that cannot be read or parsed is
 * recorded in its {@linkcode ConfigSource} and skipped. Code Executor's own file must parse when
 * it exists; files named explicitly (`MCP_CONFIG_PATH`, `configPaths`) must exist and parse.
 *
 * @param options Where to look.
 * @returns The usable servers, the broken entries and the files looked at.
 * @throws {UpstreamConfigError} When Code Executor's own file is unreadable or invalid, or an
 *   explicitly named file is missing, unreadable or invalid; for the own file, the message ends
 *   with why the program stops.
 * @example
 * ```ts
 * const { servers, broken } = await discoverUpstreams({ configPaths: ["./servers.json"] });
 * ```
 */
export async function discoverUpstreams(options: DiscoverOptions = {}): Promise<UpstreamConfig> {
  const env = options.env ?? Deno.env.toObject();
  const cwd = resolve(options.cwd ?? Deno.cwd());
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
      if (candidate.kind === "code-executor") {
        throw source.found
          ? new UpstreamConfigError(`${error.message}\n${OWN_FILE_FIX}`, { cause: error })
          : error;
      }
      source.error = error.message;
      continue;
    }
    const fromFile = new Map<string, Outcome>();
    for (const section of sections) {
      for (const [name, raw] of Object.entries(section.entries)) {
        fromFile.set(
          name,
          classifyServerEntry(name, raw, { file: candidate.path, where: section.where, env, cwd }),
        );
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

/**
 * The warnings a discovered configuration deserves beyond its broken entries: each client file
 * that was skipped (with its `file:line:column` and caret), and each entry that is Code Executor
 * itself under another name. An entry named `code-executor` is the one `setup` writes into a
 * client, and is left out without a word.
 *
 * @param config The discovered configuration.
 * @returns One message per problem, in the order of the files.
 */
export function configWarnings(config: UpstreamConfig): string[] {
  const warnings = config.sources.flatMap((source) =>
    source.error
      ? [`${source.error}\nSkipped this file: none of its servers is used until it is fixed`]
      : []
  );
  for (const skipped of config.skipped ?? []) {
    if (skipped.reason !== "self" || skipped.name.toLowerCase() === "code-executor") continue;
    warnings.push(
      `Skipped MCP server "${skipped.name}" in ${skipped.source}: it is Code Executor itself (${skipped.detail}), which does not call itself`,
    );
  }
  return warnings;
}

interface CandidateFile {
  path: string;
  kind: ConfigSource["kind"];
  explicit: boolean;
}

type Section = ServerSection;

/**
 * Why a problem in Code Executor's own file stops the program. Another client's file is skipped
 * instead: the file is that client's, and the skip shows in the log, in `doctor` and in the
 * `run_typescript` description.
 */
const OWN_FILE_FIX =
  "Code Executor does not start without the servers of its own file (setup --move put them there): fix the file, then start again";

type Outcome = ServerEntryOutcome;

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

function hashServers(servers: UpstreamServerConfig[]): string {
  const material = servers.map(({ source: _source, ...rest }) => rest);
  return sha256Hex(canonicalJson(material));
}

function byName(a: { name: string }, b: { name: string }): number {
  return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
}
