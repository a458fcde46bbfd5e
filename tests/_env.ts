/**
 * What a process under test starts with: the repository root, the caches it shares with this
 * process, a private HOME and TMPDIR, and the settings and `mcp.json` files it is given.
 *
 * @module
 */
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { THIRD_PARTY_CONFIG } from "./_third_party.ts";

/** The repository root. */
export const ROOT = fileURLToPath(new URL("..", import.meta.url));

/** `tests/fixtures/upstream_fixture.ts`: an MCP server whose tools and faults a test chooses. */
export const FIXTURE = join(ROOT, "tests", "fixtures", "upstream_fixture.ts");

/** The caller's XDG cache base (`XDG_CACHE_HOME`, else `~/.cache`); empty counts as unset. */
export function cacheHome(): string {
  return Deno.env.get("XDG_CACHE_HOME") || join(Deno.env.get("HOME") || "/root", ".cache");
}

/**
 * The Deno cache this process uses; servers and children under test share it so that npm
 * packages are not downloaded again.
 */
export function denoDir(): string {
  return Deno.env.get("DENO_DIR") || join(cacheHome(), "deno");
}

/**
 * The environment of a process run with a private HOME, so that no user configuration leaks in,
 * and the caller's Deno cache.
 *
 * @param home The private HOME.
 * @param options `sharedCache`: keep the caller's XDG_CACHE_HOME (the sandboxes' Deno cache and
 *   the Pyodide snapshot) rather than a fresh one under `home`.
 * @returns PATH, HOME, DENO_DIR, XDG_CACHE_HOME and NO_COLOR, and the caller's CAs and proxy
 *   ({@linkcode networkEnv}: on a fresh machine the process may have npm packages to fetch).
 */
export function homeEnv(
  home: string,
  options: { sharedCache?: boolean } = {},
): Record<string, string> {
  return {
    ...networkEnv(),
    PATH: Deno.env.get("PATH") ?? "",
    HOME: home,
    DENO_DIR: denoDir(),
    XDG_CACHE_HOME: options.sharedCache ? cacheHome() : join(home, ".cache"),
    NO_COLOR: "1",
  };
}

/** Options for {@linkcode serverEnv}. */
export interface ServerEnvOptions {
  /** A private HOME for the server; without it the server shares the caller's HOME and caches. */
  home?: string;
  /** With `home`: keep the caller's XDG_CACHE_HOME, as {@linkcode homeEnv} does. */
  sharedCache?: boolean;
}

/**
 * The environment of a `main.ts serve` under test, with its own TMPDIR (where its sandboxes put
 * their directories).
 *
 * @param tempDir The server's TMPDIR.
 * @param options Its HOME.
 * @returns The variables.
 */
export function serverEnv(tempDir: string, options: ServerEnvOptions = {}): Record<string, string> {
  const home = options.home ?? Deno.env.get("HOME") ?? tempDir;
  return {
    ...homeEnv(home, { sharedCache: options.home === undefined || options.sharedCache }),
    TMPDIR: tempDir,
    // Tests that count sandbox children or their directories expect TypeScript ones only, and a
    // Python pool (where a test asks for one) that keeps its size; tests of its growth opt in.
    CODE_EXECUTOR_PYTHON_WARM_POOL: "0",
    CODE_EXECUTOR_PYTHON_WARM_POOL_BURST: "0",
    // Keep test runs out of the real ~/.code-executor/audit.jsonl.
    AUDIT_LOG_PATH: join(tempDir, "audit.jsonl"),
    CODE_EXECUTOR_LOG_LEVEL: "warn",
  };
}

/**
 * An `mcp.json` entry that runs an npm MCP server with `deno run -A` under
 * {@linkcode THIRD_PARTY_CONFIG}, so that its packages go to that lock and not the project's.
 *
 * @param pkg The package, e.g. {@linkcode EVERYTHING}.
 * @param options Arguments after the package, and the server's environment.
 * @returns The entry.
 */
export function npmServer(
  pkg: string,
  options: { args?: string[]; env?: Record<string, string> } = {},
): Record<string, unknown> {
  return {
    command: Deno.execPath(),
    args: ["run", "-A", "--config", THIRD_PARTY_CONFIG, pkg, ...(options.args ?? [])],
    ...(options.env ? { env: options.env } : {}),
  };
}

/**
 * An `mcp.json` entry that runs {@linkcode FIXTURE}.
 *
 * @param env The fixture's environment (`FIXTURE_PID_FILE`, `FIXTURE_MODE`, …).
 * @param extra More keys of the entry (`timeout`).
 * @returns The entry.
 */
export function fixtureServer(
  env: Record<string, string>,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    command: Deno.execPath(),
    args: ["run", "-A", "--config", join(ROOT, "deno.json"), FIXTURE],
    env,
    ...extra,
  };
}

/**
 * An `mcp.json` entry that runs {@linkcode FIXTURE} with its fault tools (`crash`, `hang`,
 * `babble`, `flood`, …) and writes its pid to `pidFile`.
 *
 * @param pidFile Where the fixture writes its pid (and `<pidFile>.hang` once a call hangs).
 * @param env More of its environment (`FIXTURE_MODE`).
 * @param extra More keys of the entry (`timeout`).
 * @returns The entry.
 */
export function faultyFixtureServer(
  pidFile: string,
  env: Record<string, string> = {},
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return fixtureServer({ FIXTURE_PID_FILE: pidFile, FIXTURE_FAULTS: "1", ...env }, extra);
}

/**
 * Writes an `mcp.json` naming the given upstream servers.
 *
 * @param dir Where the file goes.
 * @param servers Name → entry.
 * @returns The file's path.
 */
export async function writeMcpConfig(
  dir: string,
  servers: Record<string, unknown>,
): Promise<string> {
  const file = join(dir, "mcp.json");
  await Deno.writeTextFile(file, JSON.stringify({ mcpServers: servers }, null, 2));
  return file;
}

/**
 * Writes a settings file for CODE_EXECUTOR_CONFIG.
 *
 * @param dir Where the file goes.
 * @param settings The settings.
 * @returns The file's path.
 */
export async function writeSettings(
  dir: string,
  settings: Record<string, unknown>,
): Promise<string> {
  const file = join(dir, "settings.jsonc");
  await Deno.writeTextFile(file, JSON.stringify(settings));
  return file;
}

/**
 * What a download from npm needs from the caller's environment: its CAs and proxy, if any.
 *
 * @returns The variables that are set.
 */
export function networkEnv(): Record<string, string> {
  const names = [
    "DENO_CERT",
    "NODE_EXTRA_CA_CERTS",
    "DENO_TLS_CA_STORE",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NPM_CONFIG_REGISTRY",
  ];
  for (const proxy of ["HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"]) {
    names.push(proxy, proxy.toLowerCase());
  }
  const env: Record<string, string> = {};
  for (const name of names) {
    const value = Deno.env.get(name);
    if (value !== undefined) env[name] = value;
  }
  return env;
}
