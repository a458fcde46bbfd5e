/**
 * Where files live: the home directory, the XDG base directories, Code Executor's own files, the
 * config files of the MCP clients `setup` knows, the daily sync's scheduler files and Deno's
 * cache. Every part of the program asks here, so that an empty or missing variable means the
 * same thing everywhere: an empty variable counts as unset.
 *
 * Functions that depend on the operating system take it as a parameter (default
 * `Deno.build.os`), so that tests can ask for another system's locations.
 *
 * @module
 */
import { tmpdir } from "node:os";
import { join, sep } from "node:path";
import { envVar } from "../_util.ts";

/** An environment to read variables from; the process's own by default. */
export type Env = Record<string, string | undefined>;

/** An operating system, as `Deno.build.os` names it. */
export type OperatingSystem = typeof Deno.build.os;

function processEnv(): Env {
  return new Proxy({}, {
    get: (_target, name) => typeof name === "string" ? envVar(name) : undefined,
  });
}

/** A variable's value, with an empty string counted as unset. */
function read(env: Env, name: string): string | undefined {
  const value = env[name];
  return value === undefined || value === "" ? undefined : value;
}

function underHome(env: Env, ...parts: string[]): string | undefined {
  const home = homeDir(env);
  return home ? join(home, ...parts) : undefined;
}

/**
 * Returns the user's home directory: `HOME`, else `USERPROFILE` (Windows).
 *
 * @param env The environment; the process's by default.
 * @returns The path, or undefined when neither variable is set.
 */
export function homeDir(env: Env = processEnv()): string | undefined {
  return read(env, "HOME") ?? read(env, "USERPROFILE");
}

/**
 * Returns the base directory for user configuration: `XDG_CONFIG_HOME`, else `~/.config`.
 *
 * @param env The environment; the process's by default.
 * @returns The path, or undefined when no home directory is known.
 */
export function configHome(env: Env = processEnv()): string | undefined {
  return read(env, "XDG_CONFIG_HOME") ?? underHome(env, ".config");
}

/**
 * Returns the base directory for user caches: `XDG_CACHE_HOME`, else `~/.cache`.
 *
 * @param env The environment; the process's by default.
 * @returns The path, or undefined when no home directory is known.
 */
export function cacheHome(env: Env = processEnv()): string | undefined {
  return read(env, "XDG_CACHE_HOME") ?? underHome(env, ".cache");
}

/**
 * Returns the base directory for user data: `XDG_DATA_HOME`, else `~/.local/share`.
 *
 * @param env The environment; the process's by default.
 * @returns The path, or undefined when no home directory is known.
 */
export function dataHome(env: Env = processEnv()): string | undefined {
  return read(env, "XDG_DATA_HOME") ?? underHome(env, ".local", "share");
}

/**
 * Returns the directory where desktop applications keep their settings: `~/Library/Application
 * Support` on macOS, `APPDATA` (else `~\AppData\Roaming`) on Windows, the XDG config home
 * elsewhere. Claude Desktop and VS Code keep their files there.
 *
 * @param env The environment; the process's by default.
 * @param os The operating system; the current one by default.
 * @returns The path, or undefined when the variables it needs are not set.
 */
export function appDataDir(
  env: Env = processEnv(),
  os: OperatingSystem = Deno.build.os,
): string | undefined {
  if (os === "darwin") return underHome(env, "Library", "Application Support");
  if (os === "windows") return read(env, "APPDATA") ?? underHome(env, "AppData", "Roaming");
  return configHome(env);
}

/**
 * Returns Code Executor's cache directory: `$XDG_CACHE_HOME/code-executor`, else
 * `~/.cache/code-executor`, else one under the system's temp directory.
 *
 * @param env The environment; the process's by default.
 * @returns An absolute path.
 */
export function cacheDir(env: Env = processEnv()): string {
  return join(cacheHome(env) ?? join(tmpdir(), ".cache"), "code-executor");
}

/**
 * Returns Code Executor's configuration directory: `$XDG_CONFIG_HOME/code-executor`, else
 * `~/.config/code-executor`. It holds the settings file and the upstream servers file.
 *
 * @param env The environment; the process's by default.
 * @returns The path, or undefined when no home directory is known.
 */
export function ownConfigDir(env: Env = processEnv()): string | undefined {
  const base = configHome(env);
  return base ? join(base, "code-executor") : undefined;
}

/**
 * Returns the user's settings file, `~/.config/code-executor/config.jsonc`.
 *
 * @param env The environment; the process's by default.
 * @returns The path, or undefined when no home directory is known.
 */
export function userSettingsPath(env: Env = processEnv()): string | undefined {
  const dir = ownConfigDir(env);
  return dir ? join(dir, "config.jsonc") : undefined;
}

/**
 * Returns a project's settings file, `.code-executor.jsonc` in the project directory.
 *
 * @param cwd The project directory.
 * @returns The path.
 */
export function projectSettingsPath(cwd: string): string {
  return join(cwd, ".code-executor.jsonc");
}

/**
 * Returns Code Executor's own upstream config file, `~/.config/code-executor/mcp.json`, next to
 * the settings file. `setup --move` writes the servers it moves there; `serve` reads it.
 *
 * @param env The environment; the process's by default.
 * @returns The path, or undefined when no home directory is known.
 */
export function ownUpstreamConfigPath(env: Env = processEnv()): string | undefined {
  const dir = ownConfigDir(env);
  return dir ? join(dir, "mcp.json") : undefined;
}

/**
 * Returns Code Executor's directory in the home, `~/.code-executor`, which holds the audit log
 * and the generated wrappers. Without a home directory it is relative to the working directory,
 * so that those still have somewhere to go.
 *
 * @param env The environment; the process's by default.
 * @returns The path.
 */
export function homeDataDir(env: Env = processEnv()): string {
  return join(homeDir(env) ?? ".", ".code-executor");
}

/**
 * Returns the default audit log file, `~/.code-executor/audit.jsonl`.
 *
 * @param env The environment; the process's by default.
 * @returns The path.
 */
export function defaultAuditPath(env: Env = processEnv()): string {
  return join(homeDataDir(env), "audit.jsonl");
}

/**
 * Returns the default output directory of the wrappers, `~/.code-executor/wrappers`.
 *
 * @param env The environment; the process's by default.
 * @returns The path.
 */
export function defaultWrappersDir(env: Env = processEnv()): string {
  return join(homeDataDir(env), "wrappers");
}

/**
 * Returns Claude Code's config file, `~/.claude.json` (on every operating system).
 *
 * @param env The environment; the process's by default.
 * @returns The path, or undefined when no home directory is known.
 */
export function claudeCodeConfigPath(env: Env = processEnv()): string | undefined {
  return underHome(env, ".claude.json");
}

/**
 * Returns Claude Desktop's config file, `claude_desktop_config.json` in its folder of the
 * application data directory ({@linkcode appDataDir}).
 *
 * @param env The environment; the process's by default.
 * @param os The operating system; the current one by default.
 * @returns The path, or undefined when the variables it needs are not set.
 */
export function claudeDesktopConfigPath(
  env: Env = processEnv(),
  os: OperatingSystem = Deno.build.os,
): string | undefined {
  const base = appDataDir(env, os);
  return base ? join(base, "Claude", "claude_desktop_config.json") : undefined;
}

/**
 * Returns Cursor's user-level config file, `~/.cursor/mcp.json` (on every operating system).
 *
 * @param env The environment; the process's by default.
 * @returns The path, or undefined when no home directory is known.
 */
export function cursorConfigPath(env: Env = processEnv()): string | undefined {
  return underHome(env, ".cursor", "mcp.json");
}

/**
 * Returns Cursor's per-project config file, `.cursor/mcp.json` in the project directory.
 *
 * @param cwd The project directory.
 * @returns The path.
 */
export function cursorProjectConfigPath(cwd: string): string {
  return join(cwd, ".cursor", "mcp.json");
}

/**
 * Returns VS Code's per-project config file, `.vscode/mcp.json` in the project directory.
 *
 * @param cwd The project directory.
 * @returns The path.
 */
export function vscodeProjectConfigPath(cwd: string): string {
  return join(cwd, ".vscode", "mcp.json");
}

/**
 * Returns VS Code's user-level config file: `Code/User/mcp.json` in the application data
 * directory (`~/.config/Code/User/mcp.json` on Linux, `~/Library/Application Support/Code/User/
 * mcp.json` on macOS, `%APPDATA%\Code\User\mcp.json` on Windows).
 *
 * @param env The environment; the process's by default.
 * @param os The operating system; the current one by default.
 * @returns The path, or undefined when the variables it needs are not set.
 */
export function vscodeUserConfigPath(
  env: Env = processEnv(),
  os: OperatingSystem = Deno.build.os,
): string | undefined {
  const base = appDataDir(env, os);
  return base ? join(base, "Code", "User", "mcp.json") : undefined;
}

/**
 * Returns Windsurf's config file, `~/.codeium/windsurf/mcp_config.json` (on every operating
 * system).
 *
 * @param env The environment; the process's by default.
 * @returns The path, or undefined when no home directory is known.
 */
export function windsurfConfigPath(env: Env = processEnv()): string | undefined {
  return underHome(env, ".codeium", "windsurf", "mcp_config.json");
}

/**
 * Returns a project's shared MCP config file, `.mcp.json` in the project directory.
 *
 * @param cwd The project directory.
 * @returns The path.
 */
export function projectConfigPath(cwd: string): string {
  return join(cwd, ".mcp.json");
}

/**
 * Returns the directory of systemd user units, `$XDG_CONFIG_HOME/systemd/user`.
 *
 * @param env The environment; the process's by default.
 * @returns The path, or undefined when no home directory is known.
 */
export function systemdUserDir(env: Env = processEnv()): string | undefined {
  const base = configHome(env);
  return base ? join(base, "systemd", "user") : undefined;
}

/**
 * Returns the directory of the user's launchd agents on macOS, `~/Library/LaunchAgents`.
 *
 * @param env The environment; the process's by default.
 * @returns The path, or undefined when no home directory is known.
 */
export function launchAgentsDir(env: Env = processEnv()): string | undefined {
  return underHome(env, "Library", "LaunchAgents");
}

/**
 * Returns the directory of the user's logs on macOS, `~/Library/Logs`.
 *
 * @param env The environment; the process's by default.
 * @returns The path, or undefined when no home directory is known.
 */
export function macLogsDir(env: Env = processEnv()): string | undefined {
  return underHome(env, "Library", "Logs");
}

/**
 * Returns Deno's cache directory, where `npm:` packages are stored when a project has no
 * `node_modules` directory: `DENO_DIR`, else `~/Library/Caches/deno` on macOS,
 * `%LOCALAPPDATA%\deno` on Windows, `$XDG_CACHE_HOME/deno` (`~/.cache/deno`) elsewhere.
 *
 * @param env The environment; the process's by default.
 * @param os The operating system; the current one by default.
 * @returns The path, or undefined when the variables it needs are not set.
 */
export function denoCacheDir(
  env: Env = processEnv(),
  os: OperatingSystem = Deno.build.os,
): string | undefined {
  const configured = read(env, "DENO_DIR");
  if (configured) return configured;
  if (os === "darwin") return underHome(env, "Library", "Caches", "deno");
  if (os === "windows") {
    const local = read(env, "LOCALAPPDATA");
    return local ? join(local, "deno") : undefined;
  }
  const base = cacheHome(env);
  return base ? join(base, "deno") : undefined;
}

/**
 * Shortens a path under the home directory to `~/…`, for showing it to a person.
 *
 * @param path An absolute path.
 * @param env The environment; the process's by default.
 * @returns The path with the home directory written as `~`, or the path as given.
 */
export function tildePath(path: string, env: Env = processEnv()): string {
  const home = homeDir(env);
  if (!home) return path;
  const under = path === home || path.startsWith(home + sep) || path.startsWith(home + "/");
  return under ? "~" + path.slice(home.length) : path;
}
