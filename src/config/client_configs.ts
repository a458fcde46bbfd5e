/**
 * The MCP clients `setup` knows: where each keeps its servers, what is in those files, how to
 * start Code Executor from them, and which servers can move behind Code Executor.
 *
 * Parsing and classifying entries is {@linkcode readServerSections} of `upstream.ts` and
 * {@linkcode classifyServerEntry} of `server_entry.ts`, the same code `serve` discovers servers
 * with.
 *
 * @module
 */
import { resolve } from "node:path";
import { isPlainObject } from "../_util.ts";
import { redactText } from "../redact.ts";
import {
  claudeCodeConfigPath,
  claudeDesktopConfigPath,
  cursorConfigPath,
  cursorProjectConfigPath,
  homeDir,
  ownUpstreamConfigPath,
  projectConfigPath,
  vscodeProjectConfigPath,
  vscodeUserConfigPath,
  windsurfConfigPath,
} from "./paths.ts";
import type { LaunchCommand } from "./self_launch.ts";
import { classifyServerEntry, UpstreamConfigError } from "./server_entry.ts";
import { readServerSections, serversKeyOf } from "./upstream.ts";

/**
 * A client config `setup` can write the `code-executor` entry into. `cursor` is Cursor's
 * user-level file and `cursor-project` the project's; `vscode` is the project's file and
 * `vscode-user` VS Code's user-level one; `project` is the project's `.mcp.json`.
 */
export type ClientId =
  | "claude-code"
  | "cursor"
  | "cursor-project"
  | "claude-desktop"
  | "vscode"
  | "vscode-user"
  | "project"
  | "windsurf";

/** Every client, in the order `setup` shows them. */
export const CLIENT_IDS: readonly ClientId[] = [
  "claude-code",
  "claude-desktop",
  "cursor",
  "cursor-project",
  "vscode",
  "vscode-user",
  "windsurf",
  "project",
];

/** A client's config file. */
export interface ClientConfig {
  /** The client, or `code-executor` for Code Executor's own upstream file. */
  id: ClientId | "code-executor";
  /** A name for people, telling the client's files apart. */
  label: string;
  /** The application that reads the file, for messages (`VS Code` for both of its files). */
  app: string;
  /** Absolute path of the file, which may not exist. */
  path: string;
  /** The key of the object of servers: `servers` for VS Code, `mcpServers` elsewhere. */
  key: "mcpServers" | "servers";
  /** Whether the file belongs to a project (created world-readable, to be committed). */
  project: boolean;
}

/** How a server entry stands. */
export type EntryState = "usable" | "broken" | "self" | "disabled";

/** One server entry found in a client config. */
export interface ScannedServer {
  /** The entry's key. */
  name: string;
  /** The entry as written. */
  raw: unknown;
  /** JSON path of the object the entry is in. */
  section: string[];
  /** Whether discovery can use it, or why not. */
  state: EntryState;
  /** Why a broken entry is broken. */
  error?: string;
  /** `${VAR}` references (without a default) whose variable is not set here; they stay as is. */
  missing?: string[];
  /** `stdio`, `http` or `sse` for a usable entry. */
  transport?: string;
}

/** What was found in one client config. */
export interface ScannedConfig {
  /** The client and its file. */
  client: ClientConfig;
  /** Whether the file exists. */
  found: boolean;
  /** The file's text, when it exists. */
  text?: string;
  /** Why the file could not be read or parsed. */
  error?: string;
  /** The entries, in file order (top-level section first). */
  servers: ScannedServer[];
}

/** Where to look: the environment (for `HOME` and friends), the project and the OS. */
export interface ClientConfigOptions {
  /** Environment with `HOME`, `APPDATA`, `XDG_CONFIG_HOME`; defaults to the process's. */
  env?: Record<string, string>;
  /** The project directory (`.mcp.json`, `.vscode/mcp.json`, `.cursor/mcp.json`); the cwd. */
  cwd?: string;
  /** Whose Claude Desktop and VS Code locations to use; defaults to `Deno.build.os`. */
  os?: typeof Deno.build.os;
}

const LABELS: Record<ClientId | "code-executor", string> = {
  "claude-code": "Claude Code",
  "claude-desktop": "Claude Desktop",
  "cursor": "Cursor",
  "cursor-project": "Cursor (project)",
  "vscode": "VS Code",
  "vscode-user": "VS Code (user)",
  "windsurf": "Windsurf",
  "project": "Project .mcp.json",
  "code-executor": "Code Executor",
};

const APPS: Partial<Record<ClientId | "code-executor", string>> = {
  "cursor-project": "Cursor",
  "vscode-user": "VS Code",
};

const PROJECT_FILES: ReadonlySet<ClientId | "code-executor"> = new Set([
  "cursor-project",
  "vscode",
  "project",
]);

/** Variables VS Code fills in itself; they mean nothing to Code Executor. */
const VSCODE_VARIABLES: ReadonlySet<string> = new Set([
  "userHome",
  "workspaceFolder",
  "workspaceFolderBasename",
  "cwd",
  "pathSeparator",
  "/",
  "file",
  "fileDirname",
  "execPath",
]);

/**
 * Variables Cursor fills in itself in both of its files (its docs: "Config interpolation"). A
 * project's `.cursor/mcp.json` often points at `${workspaceFolder}`, which means nothing once the
 * entry has moved to a user-level file.
 */
const CURSOR_VARIABLES: ReadonlySet<string> = new Set([
  "userHome",
  "workspaceFolder",
  "workspaceFolderBasename",
  "pathSeparator",
  "/",
]);

const CLIENT_VARIABLES: Partial<Record<ClientId | "code-executor", ReadonlySet<string>>> = {
  "vscode": VSCODE_VARIABLES,
  "vscode-user": VSCODE_VARIABLES,
  "cursor": CURSOR_VARIABLES,
  "cursor-project": CURSOR_VARIABLES,
};

/**
 * Lists every client config file `setup` knows, plus Code Executor's own upstream file (last).
 * The locations come from `paths.ts`, where discovery finds the files it reads too.
 *
 * @param options Environment, project directory and operating system.
 * @returns One entry per client.
 * @throws {TypeError} When no home directory is known (`HOME` or `USERPROFILE`).
 */
export function clientConfigs(options: ClientConfigOptions = {}): ClientConfig[] {
  const env = options.env ?? Deno.env.toObject();
  const cwd = resolve(options.cwd ?? Deno.cwd());
  const os = options.os ?? Deno.build.os;
  if (!homeDir(env)) {
    throw new TypeError(
      "Cannot find the client configs: HOME is not set; set HOME (or USERPROFILE)",
    );
  }
  // With a home directory every location is known: the ones under APPDATA fall back to it.
  const paths: Record<ClientId | "code-executor", string | undefined> = {
    "claude-code": claudeCodeConfigPath(env),
    "claude-desktop": claudeDesktopConfigPath(env, os),
    "cursor": cursorConfigPath(env),
    "cursor-project": cursorProjectConfigPath(cwd),
    "vscode": vscodeProjectConfigPath(cwd),
    "vscode-user": vscodeUserConfigPath(env, os),
    "windsurf": windsurfConfigPath(env),
    "project": projectConfigPath(cwd),
    "code-executor": ownUpstreamConfigPath(env),
  };
  return [...CLIENT_IDS, "code-executor" as const].map((id) => ({
    id,
    label: LABELS[id],
    app: APPS[id] ?? LABELS[id],
    path: paths[id]!,
    key: serversKeyOf(id),
    project: PROJECT_FILES.has(id),
  }));
}

/**
 * Reads one client config and classifies its entries the way discovery would. For Claude Code
 * only the top-level `mcpServers` is listed: the per-project entries belong to their project,
 * and `setup` leaves them there.
 *
 * @param client The client and its file.
 * @param options Environment (for `${VAR}`) and project directory.
 * @returns What the file holds; a missing file is `found: false`, a broken one has `error`.
 */
export async function scanClientConfig(
  client: ClientConfig,
  options: ClientConfigOptions = {},
): Promise<ScannedConfig> {
  const env = options.env ?? Deno.env.toObject();
  const cwd = resolve(options.cwd ?? Deno.cwd());
  let text: string;
  try {
    text = await Deno.readTextFile(client.path);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return { client, found: false, servers: [] };
    return { client, found: true, error: (error as Error).message, servers: [] };
  }
  const scanned: ScannedConfig = { client, found: true, text, servers: [] };
  let sections;
  try {
    sections = readServerSections(text, client.path, { kind: client.id, cwd });
  } catch (error) {
    if (!(error instanceof UpstreamConfigError)) throw error;
    scanned.error = error.message;
    return scanned;
  }
  const top = sections.find((s) => s.path.length === 1);
  for (const [name, raw] of Object.entries(top?.entries ?? {})) {
    let outcome = classifyServerEntry(name, raw, { file: client.path, env, cwd });
    const server: ScannedServer = { name, raw, section: [client.key], state: "usable" };
    const missing = unsetVariables(raw, env);
    if (outcome.broken && missing.length > 0) {
      // An unset variable is not a broken entry: it is expanded where Code Executor runs, which
      // may have it. Check the rest of the entry with every variable set.
      const filled = { ...env, ...Object.fromEntries(missing.map((v) => [v, "set"])) };
      outcome = classifyServerEntry(name, raw, { file: client.path, env: filled, cwd });
      server.missing = missing;
    }
    if (outcome.server) server.transport = outcome.server.transport;
    else if (outcome.broken) {
      server.state = "broken";
      server.error = outcome.broken.error;
    } else server.state = outcome.skipped?.reason ?? "broken";
    scanned.servers.push(server);
  }
  return scanned;
}

/**
 * Returns the `code-executor` entry for a client's config: a stdio server started with
 * `launch`. Claude Code and VS Code (both files) get an explicit `"type": "stdio"`, as their own
 * tools write.
 *
 * @param client Which client.
 * @param launch How to start Code Executor.
 * @returns The entry.
 */
export function selfEntry(
  client: ClientId,
  launch: LaunchCommand,
): Record<string, unknown> {
  const typed = client === "claude-code" || isVsCode(client);
  return {
    ...(typed ? { type: "stdio" } : {}),
    command: launch.command,
    args: launch.args,
    ...(launch.env ? { env: launch.env } : {}),
  };
}

/** The variable that holds the bearer token of `serve --http`, there and in a client's entry. */
export const HTTP_TOKEN_VARIABLE = "CODE_EXECUTOR_HTTP_TOKEN";

/**
 * Returns the `code-executor` entry that connects a client to a running `serve --http` at `url`.
 * Its `Authorization` header names {@linkcode HTTP_TOKEN_VARIABLE} in the client's own syntax,
 * so that no token is written into the file: `${VAR}` for Claude Code (`~/.claude.json` and a
 * project's `.mcp.json`), `${env:VAR}` for VS Code, Cursor and Windsurf. The variable must be set
 * where the client runs. Claude Code and VS Code get `"type": "http"`; Cursor tells a remote
 * entry by its `url`, Windsurf by its `serverUrl`.
 *
 * @param client Which client.
 * @param url The MCP endpoint, e.g. `http://127.0.0.1:3333/mcp`.
 * @returns The entry.
 * @throws {TypeError} For Claude Desktop, which does not connect to HTTP servers named in its
 *   config and expands no variables there: the entry would have to hold the token itself.
 * @example
 * ```ts
 * selfHttpEntry("cursor", "http://127.0.0.1:3333/mcp");
 * // { url: "http://127.0.0.1:3333/mcp",
 * //   headers: { Authorization: "Bearer ${env:CODE_EXECUTOR_HTTP_TOKEN}" } }
 * ```
 */
export function selfHttpEntry(client: ClientId, url: string): Record<string, unknown> {
  const plain = { Authorization: `Bearer \${${HTTP_TOKEN_VARIABLE}}` };
  const prefixed = { Authorization: `Bearer \${env:${HTTP_TOKEN_VARIABLE}}` };
  switch (client) {
    case "claude-code":
    case "project":
      return { type: "http", url, headers: plain };
    case "vscode":
    case "vscode-user":
      return { type: "http", url, headers: prefixed };
    case "cursor":
    case "cursor-project":
      return { url, headers: prefixed };
    case "windsurf":
      return { serverUrl: url, headers: prefixed };
    case "claude-desktop":
      throw new TypeError(
        `Cannot write an HTTP entry for Claude Desktop: it does not connect to HTTP servers listed in claude_desktop_config.json and expands no \${VAR} there, so the entry would have to hold the token itself. Run setup without --http (Claude Desktop then starts Code Executor on stdio), or bridge with mcp-remote by hand (docs/http.md, "Claude Desktop")`,
      );
  }
}

/** Why a server entry must stay in its client's config. */
export type MoveBlockReason =
  /** It is Code Executor itself. */
  | "self"
  /** It has `"disabled": true`. */
  | "disabled"
  /** Discovery could not use it. */
  | "broken"
  /** It uses variables only its client fills in (`${input:…}`, `${workspaceFolder}`, …). */
  | "client-variable"
  /** It holds a literal secret. */
  | "secret";

/** Why a server entry must not move into Code Executor's own config. */
export interface MoveBlocker {
  /** The kind of reason. */
  reason: MoveBlockReason;
  /** The reason for people, naming the key, and what to do about it where something can be. */
  message: string;
}

/**
 * Says why a server entry must not move into Code Executor's own config, or returns undefined
 * when it may. It must not when it holds a literal secret (an API key, a token, a password:
 * whatever the audit log's redactor would hide) outside a `${VAR}` reference, because moving
 * would copy the secret into a new file; nor when it uses variables only the client can fill in
 * (VS Code's `${input:…}`, `${workspaceFolder}` in VS Code and Cursor, …).
 *
 * @param server The entry.
 * @param client The client it is in.
 * @returns The reason, or undefined.
 */
export function moveBlocker(server: ScannedServer, client: ClientConfig): MoveBlocker | undefined {
  if (server.state === "self") return { reason: "self", message: "it is Code Executor itself" };
  if (server.state === "disabled") return { reason: "disabled", message: "it is disabled" };
  if (server.state === "broken") {
    return { reason: "broken", message: server.error ?? "it is not usable" };
  }
  for (const [key, value] of stringLeaves(server.raw, "")) {
    for (const match of value.matchAll(/\$\{([^}]*)\}/g)) {
      const inner = match[1];
      const foreign = /:(?!-)/.test(inner) ||
        CLIENT_VARIABLES[client.id]?.has(inner) === true;
      if (foreign) {
        return {
          reason: "client-variable",
          message: `"${key}" uses \${${inner}}, which only ${client.app} can fill in`,
        };
      }
    }
    const literal = value.replace(/\$\{[^}]*\}/g, "");
    const name = key.split(".").pop() ?? key;
    if (redactText(`${name}=${literal}`) !== `${name}=${literal}`) {
      const variable = /^env\.[A-Za-z_][A-Za-z0-9_]*$/.test(key)
        ? name
        : `${server.name}_${name}`.toUpperCase().replace(/[^A-Z0-9_]/g, "_");
      return {
        reason: "secret",
        message: `"${key}" holds a literal secret, which moving would copy to a new file; it ` +
          `stays in ${client.path}. To move it, write "\${${variable}}" there instead, export ` +
          `${variable} where Code Executor runs, and run setup again`,
      };
    }
  }
  return undefined;
}

function isVsCode(id: ClientId): boolean {
  return id === "vscode" || id === "vscode-user";
}

function unsetVariables(raw: unknown, env: Record<string, string>): string[] {
  const names = new Set<string>();
  for (const [, value] of stringLeaves(raw, "")) {
    for (const match of value.matchAll(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g)) {
      if (env[match[1]] === undefined) names.add(match[1]);
    }
  }
  return [...names].sort();
}

function stringLeaves(value: unknown, prefix: string): Array<[string, string]> {
  if (typeof value === "string") return [[prefix, value]];
  if (Array.isArray(value)) {
    return value.flatMap((item, i) => stringLeaves(item, `${prefix}[${i}]`));
  }
  if (isPlainObject(value)) {
    return Object.entries(value).flatMap(([k, v]) =>
      stringLeaves(v, prefix ? `${prefix}.${k}` : k)
    );
  }
  return [];
}
