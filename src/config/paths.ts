/**
 * Where files live: the home directory, the XDG base directories and Code Executor's own cache.
 * Every part of the program asks here, so that an empty or missing variable means the same
 * thing everywhere.
 *
 * @module
 */
import { tmpdir } from "node:os";
import { join } from "node:path";
import { envVar } from "../_util.ts";

/** An environment to read variables from; the process's own by default. */
export type Env = Record<string, string | undefined>;

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
  const home = homeDir(env);
  return read(env, "XDG_CONFIG_HOME") ?? (home ? join(home, ".config") : undefined);
}

/**
 * Returns Code Executor's cache directory: `$XDG_CACHE_HOME/code-executor`, else
 * `~/.cache/code-executor`, else one under the system's temp directory.
 *
 * @param env The environment; the process's by default.
 * @returns An absolute path.
 */
export function cacheDir(env: Env = processEnv()): string {
  const base = read(env, "XDG_CACHE_HOME") ?? join(homeDir(env) ?? tmpdir(), ".cache");
  return join(base, "code-executor");
}
