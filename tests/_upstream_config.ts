/**
 * What the tests of `discoverUpstreams()` share: where each client keeps its file in a user's
 * temporary HOME and project, discovery from them, and lookups in its result.
 *
 * @module
 */
import { join } from "node:path";
import { assert } from "./_assert.ts";
import { type UserDirs, writeFileWithParents } from "./_fs.ts";
import type { UpstreamServerConfig } from "../src/config/server_entry.ts";
import {
  type DiscoverOptions,
  discoverUpstreams,
  type UpstreamConfig,
} from "../src/config/upstream.ts";

/** Where each client config lives for these user directories, and the files a test passes. */
export function paths(dirs: UserDirs) {
  return {
    desktop: join(dirs.home, ".config", "Claude", "claude_desktop_config.json"),
    claude: join(dirs.home, ".claude.json"),
    cursor: join(dirs.home, ".cursor", "mcp.json"),
    cursorProject: join(dirs.project, ".cursor", "mcp.json"),
    project: join(dirs.project, ".mcp.json"),
    own: join(dirs.home, ".config", "code-executor", "mcp.json"),
    envFile: join(dirs.root, "env-config.jsonc"),
    cli1: join(dirs.root, "cli-1.json"),
    cli2: join(dirs.root, "cli-2.jsonc"),
  };
}

/** Discovers from the user directories on Linux, with HOME and more variables in `env`. */
export function discover(
  dirs: UserDirs,
  env: Record<string, string> = {},
  options: DiscoverOptions = {},
): Promise<UpstreamConfig> {
  return discoverUpstreams({
    env: { HOME: dirs.home, ...env },
    cwd: dirs.project,
    os: "linux",
    ...options,
  });
}

/** The discovered server of that name; fails the test when there is none. */
export function server(config: UpstreamConfig, name: string): UpstreamServerConfig {
  const found = config.servers.find((s) => s.name === name);
  assert(found, `expected server "${name}" in ${config.servers.map((s) => s.name).join(", ")}`);
  return found;
}

/** The error of the broken server of that name; fails the test when there is none. */
export function brokenError(config: UpstreamConfig, name: string): string {
  const found = config.broken.find((b) => b.name === name);
  assert(found, `expected broken server "${name}"`);
  return found.error;
}

/** A stdio entry of `command` without arguments, as JSON. */
export function stdio(command: string): string {
  return JSON.stringify({ command, args: [] });
}

/**
 * Writes a config file whose `mcpServers` are the given entries.
 *
 * @param path The config file (its directories are made).
 * @param mcpServers The entries by server name.
 * @returns The path written.
 */
export function writeServers(path: string, mcpServers: Record<string, unknown>): Promise<string> {
  return writeFileWithParents(path, JSON.stringify({ mcpServers }));
}

/** Escapes text for use inside a regular expression. */
export function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
