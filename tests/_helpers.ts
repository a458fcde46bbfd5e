/**
 * Shared test helpers: the pinned upstream MCP servers, a real server process driven by the SDK
 * v2 client over stdio (or spoken to in raw lines) or over Streamable HTTP in either protocol era,
 * the processes and directories a server may leave behind, and runs of command-line processes.
 *
 * @module
 */
import {
  Client,
  type ClientOptions,
  StreamableHTTPClientTransport,
  type StreamableHTTPClientTransportOptions,
} from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { assert, assertEquals, type RunResult } from "./_assert.ts";
import { resolveSettings } from "../src/config/settings.ts";
import { Executor } from "../src/exec/executor.ts";
import type { ExecutionResult } from "../src/exec/result.ts";
import { CHILD_DIR_PREFIX } from "../src/exec/child/process.ts";
import { createLogger, type Logger } from "../src/log.ts";
import type { SaveSkillInput } from "../src/skills/store.ts";
import type { PooledChild } from "../src/exec/child/warm_pool.ts";

/** The repository root. */
export const ROOT = fileURLToPath(new URL("..", import.meta.url));

// The one place the upstream versions are pinned: tests and benchmarks import them, and `.ci/run`
// pre-fetches every `@modelcontextprotocol/...@x.y.z` named in this file.
/** server-everything from npm, as `deno run -A` takes it. */
export const EVERYTHING = "npm:@modelcontextprotocol/server-everything@2026.8.31";
/** server-filesystem from npm. */
export const FILESYSTEM = "npm:@modelcontextprotocol/server-filesystem@2026.8.31";
/** server-memory from npm. */
export const MEMORY = "npm:@modelcontextprotocol/server-memory@2026.8.31";
/** The MCP Inspector CLI, as `npx` takes it. */
export const INSPECTOR = "@modelcontextprotocol/inspector@2.12.0";
/**
 * The MCP conformance suite, as `deno run -A` takes it: its CLI needs Node 22's `fs.globSync`, so
 * it runs under Deno rather than the machine's Node 20.
 */
export const CONFORMANCE = "npm:@modelcontextprotocol/conformance@0.2.0-alpha.12";

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
 * @returns PATH, HOME, DENO_DIR, XDG_CACHE_HOME and NO_COLOR.
 */
export function homeEnv(
  home: string,
  options: { sharedCache?: boolean } = {},
): Record<string, string> {
  return {
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
 * An `mcp.json` entry that runs an npm MCP server with `deno run -A`.
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
    args: ["run", "-A", pkg, ...(options.args ?? [])],
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

/** A running `deno task start` with a connected client. */
export interface ServerHarness {
  /** The connected SDK client. */
  client: Client;
  /** The temp directory the server creates workspaces in. */
  tempDir: string;
  /** The private HOME it was started with, if any. */
  home?: string;
  /** Calls run_typescript and returns its structured result. */
  runTs(code: string, extra?: Record<string, unknown>): Promise<RunResult>;
  /** Calls run_python and returns its structured result. */
  runPy(code: string, extra?: Record<string, unknown>): Promise<RunResult>;
  /** Closes the client (which ends the server) and removes the temp directory. */
  close(): Promise<void>;
}

/** Options for {@linkcode startServer}. */
export interface StartServerOptions extends ServerEnvOptions {
  /** Extra environment variables for the server. */
  env?: Record<string, string>;
  /** Settings written to a temporary CODE_EXECUTOR_CONFIG file. */
  settings?: Record<string, unknown>;
  /** Upstream servers, written to an `mcp.json` (in `home`, else the temp directory) for `--config`. */
  upstream?: Record<string, unknown>;
  /** Extra command-line arguments after `deno task start`. */
  args?: string[];
  /** The client's options: the capabilities it declares (sampling, elicitation), its era. */
  client?: ClientOptions;
  /** Called before connecting, to register the client's request handlers. */
  setup?: (client: Client) => void;
  /** The client's stdio line limit (the SDK's default is 10 MiB). */
  maxBufferSize?: number;
}

/**
 * Starts the server exactly as the README says (`deno task start`) with a private temp
 * directory, and connects an SDK client to it.
 *
 * @param options Environment, HOME, settings and upstream servers.
 * @returns The harness.
 */
export async function startServer(options: StartServerOptions = {}): Promise<ServerHarness> {
  const tempDir = await Deno.makeTempDir({ prefix: "ce-test-" });
  const env = { ...serverEnv(tempDir, options), ...options.env };
  const args = [...(options.args ?? [])];
  try {
    if (options.settings) env.CODE_EXECUTOR_CONFIG = await writeSettings(tempDir, options.settings);
    if (options.upstream) {
      args.unshift("--config", await writeMcpConfig(options.home ?? tempDir, options.upstream));
    }
  } catch (error) {
    await Deno.remove(tempDir, { recursive: true }).catch(() => {});
    throw error;
  }
  const transport = new StdioClientTransport({
    command: Deno.execPath(),
    args: ["task", "--quiet", "start", ...args],
    cwd: ROOT,
    env,
    stderr: "pipe",
    ...(options.maxBufferSize ? { maxBufferSize: options.maxBufferSize } : {}),
  });
  const stderrChunks: string[] = [];
  transport.stderr?.on(
    "data",
    (chunk: Uint8Array) => stderrChunks.push(new TextDecoder().decode(chunk)),
  );
  const client = new Client(
    { name: "code-executor-tests", version: "1.0.0" },
    options.client,
  );
  options.setup?.(client);
  try {
    await client.connect(transport);
  } catch (error) {
    await Deno.remove(tempDir, { recursive: true }).catch(() => {});
    throw new Error(
      `Cannot start the server: ${(error as Error).message}\n${stderrChunks.join("")}`,
    );
  }
  const run = async (name: string, code: string, extra: Record<string, unknown> = {}) => {
    const result = await client.callTool({ name, arguments: { code, ...extra } });
    return {
      ...(result.structuredContent as unknown as ExecutionResult),
      isError: result.isError === true,
    };
  };
  return {
    client,
    tempDir,
    home: options.home,
    runTs: (code, extra) => run("run_typescript", code, extra),
    runPy: (code, extra) => run("run_python", code, extra),
    async close() {
      await client.close();
      await Deno.remove(tempDir, { recursive: true }).catch(() => {});
    },
  };
}

/**
 * Records every message the client receives and every error it reports, ahead of its own
 * handling, so that a test can check that nothing forged reached it.
 *
 * @param client A connected client.
 * @returns The lists, filled as messages arrive.
 * @throws {Error} When the client has no transport.
 */
export function recordInbound(
  client: Client,
): { inbound: Array<Record<string, unknown>>; errors: string[] } {
  const inbound: Array<Record<string, unknown>> = [];
  const errors: string[] = [];
  const transport = client.transport;
  assert(transport, "the client has no transport");
  const deliver = transport.onmessage;
  transport.onmessage = (message, extra) => {
    inbound.push(message as unknown as Record<string, unknown>);
    deliver?.(message, extra);
  };
  client.onerror = (error) => errors.push(error.message);
  return { inbound, errors };
}

/**
 * JSON-RPC lines that sandbox code tries to smuggle onto the server's stdout: 200 tool results,
 * a log notification and a request, each carrying `marker`.
 *
 * @param marker What to search the client's inbound traffic for.
 * @returns One message per line, without newlines.
 */
export function forgedJsonRpcLines(marker: string): string[] {
  const response = (id: number) =>
    JSON.stringify({
      jsonrpc: "2.0",
      id,
      result: {
        content: [{ type: "text", text: marker }],
        structuredContent: {
          ok: true,
          stdout: marker,
          stderr: "",
          returnValue: marker,
          durationMs: 1,
          toolCalls: [],
        },
        isError: false,
      },
    });
  return [
    ...Array.from({ length: 200 }, (_, id) => response(id)),
    JSON.stringify({
      jsonrpc: "2.0",
      method: "notifications/message",
      params: { level: "error", data: marker },
    }),
    JSON.stringify({ jsonrpc: "2.0", id: marker, method: "ping" }),
  ];
}

/** A `main.ts serve` process with pipes, for clients that misbehave at the byte level. */
export interface RawServe {
  /** The process. */
  child: Deno.ChildProcess;
  /** Its stdin. */
  writer: WritableStreamDefaultWriter<Uint8Array>;
  /** Everything it writes to stderr, once it has exited. */
  stderr: Promise<string>;
  /** Writes one message as a JSON line. */
  send(message: unknown): Promise<void>;
}

/**
 * Spawns `deno run -A main.ts serve` with a cleared environment and pipes; its stdout is left to
 * the caller (to read, or on purpose not to).
 *
 * @param tempDir The server's TMPDIR.
 * @param options Its HOME, and more variables.
 * @returns The process and its stdin.
 */
export function spawnServe(
  tempDir: string,
  options: ServerEnvOptions & { env?: Record<string, string> } = {},
): RawServe {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "main.ts", "serve"],
    cwd: ROOT,
    clearEnv: true,
    env: { ...serverEnv(tempDir, options), ...options.env },
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  const encoder = new TextEncoder();
  return {
    child,
    writer,
    stderr: new Response(child.stderr).text(),
    send: (message) => writer.write(encoder.encode(JSON.stringify(message) + "\n")),
  };
}

/** A `main.ts serve --http --port 0` process, listening. */
export interface HttpServe {
  /** The MCP endpoint's URL, with the port the server picked. */
  url: URL;
  /** The process. */
  child: Deno.ChildProcess;
  /** Its TMPDIR (sandbox directories, `audit.jsonl`, the settings file). */
  tempDir: string;
  /** What it has written to stderr so far (info level: one line per request). */
  stderr(): string;
  /**
   * Sends SIGTERM, waits for the exit (SIGKILL after 20 s), checks that no sandbox, upstream
   * server or workspace of it is left, and removes the temp directory.
   *
   * @returns The exit status.
   * @throws {AssertionError} When something of the server outlives it.
   */
  stop(): Promise<Deno.CommandStatus | undefined>;
}

/** Options for {@linkcode spawnHttpServe}. */
export interface SpawnHttpServeOptions extends ServerEnvOptions {
  /** More environment variables (`CODE_EXECUTOR_HTTP_TOKEN`, …). */
  env?: Record<string, string>;
  /** Settings written to a CODE_EXECUTOR_CONFIG file in the temp directory. */
  settings?: Record<string, unknown>;
  /** Upstream servers, written to an `mcp.json` in the temp directory for `--config`. */
  upstream?: Record<string, unknown>;
  /** The TMPDIR to use (the caller's, kept after stop); a new one, removed by stop, if omitted. */
  tempDir?: string;
  /**
   * A command to start the server under, ending in one that execs its arguments (the `deno`
   * executable and its own), e.g. `unshare --mount sh -c '…; exec "$@"' sh`.
   */
  wrapper?: string[];
}

/**
 * Spawns `deno run -A main.ts serve --http --port 0` with a cleared environment, a private TMPDIR
 * and logs at info level, and waits for its `ready on http://…` line.
 *
 * @param options Environment, settings and upstream servers.
 * @returns The listening server; stop it when done.
 * @throws {Error} With the server's stderr, when it exits (or is silent for 60 s) before it is
 *   ready.
 */
export async function spawnHttpServe(options: SpawnHttpServeOptions = {}): Promise<HttpServe> {
  const own = options.tempDir === undefined;
  const tempDir = options.tempDir ??
    await Deno.realPath(await Deno.makeTempDir({ prefix: "ce-http-" }));
  const env: Record<string, string> = {
    ...serverEnv(tempDir, options),
    CODE_EXECUTOR_LOG_LEVEL: "info",
    ...options.env,
  };
  const args = ["run", "-A", "main.ts", "serve", "--http", "--port", "0"];
  try {
    if (options.settings) env.CODE_EXECUTOR_CONFIG = await writeSettings(tempDir, options.settings);
    if (options.upstream) args.push("--config", await writeMcpConfig(tempDir, options.upstream));
  } catch (error) {
    if (own) await Deno.remove(tempDir, { recursive: true }).catch(() => {});
    throw error;
  }
  const [command, ...wrapperArgs] = [...(options.wrapper ?? []), Deno.execPath()];
  const child = new Deno.Command(command, {
    args: [...wrapperArgs, ...args],
    cwd: ROOT,
    clearEnv: true,
    env,
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const chunks: string[] = [];
  let onChunk = () => {};
  const drained = child.stderr.pipeThrough(new TextDecoderStream()).pipeTo(
    new WritableStream({
      write(chunk) {
        chunks.push(chunk);
        onChunk();
      },
    }),
  );
  const stderr = () => chunks.join("");
  const ready = new Promise<URL | undefined>((resolve) => {
    const timer = setTimeout(() => resolve(undefined), 60_000);
    onChunk = () => {
      const match = stderr().match(/ready on (http:\/\/\S+)/);
      if (match) {
        clearTimeout(timer);
        resolve(new URL(match[1]));
      }
    };
    child.status.then(() => {
      clearTimeout(timer);
      resolve(undefined);
    });
  });
  const url = await ready;
  const stop = async (): Promise<Deno.CommandStatus | undefined> => {
    try {
      child.kill("SIGTERM");
    } catch {
      // It has exited already.
    }
    const status = await exitOrKill(child, 20_000);
    await drained;
    try {
      const gone = await eventually(
        async () =>
          (await sandboxPids(tempDir)).length === 0 &&
          (await pidsWithEnv(`TMPDIR=${tempDir}`)).length === 0 &&
          (await sandboxDirs(tempDir)).length === 0,
        10_000,
      );
      assert(
        gone,
        `left after the server stopped: sandboxes ${await sandboxPids(
          tempDir,
        )}, processes ${await pidsWithEnv(
          `TMPDIR=${tempDir}`,
        )}, workspaces ${await sandboxDirs(tempDir)}`,
      );
    } finally {
      if (own) await Deno.remove(tempDir, { recursive: true }).catch(() => {});
    }
    return status;
  };
  if (!url) {
    await stop().catch(() => {});
    throw new Error(`The HTTP server did not become ready:\n${stderr()}`);
  }
  return { url, child, tempDir, stderr, stop };
}

/** Options for {@linkcode connectHttp}. */
export interface ConnectHttpOptions {
  /** The protocol era: `legacy` (2025-11-25, initialize and a session) or `modern` (2026-07-28). */
  era?: "legacy" | "modern";
  /** Sent as `Authorization: Bearer <token>` on every request. */
  token?: string;
  /** Or an OAuth provider that finds the authorization server from the 401 and gets a token. */
  authProvider?: StreamableHTTPClientTransportOptions["authProvider"];
}

/**
 * Connects an SDK v2 client to an HTTP endpoint in one protocol era.
 *
 * @param url The MCP endpoint.
 * @param options The era and the credentials.
 * @returns The connected client; close it when done.
 */
export async function connectHttp(url: URL, options: ConnectHttpOptions = {}): Promise<Client> {
  const transport = new StreamableHTTPClientTransport(url, {
    ...(options.token
      ? { requestInit: { headers: { authorization: `Bearer ${options.token}` } } }
      : {}),
    ...(options.authProvider ? { authProvider: options.authProvider } : {}),
  });
  const client = new Client(
    { name: "code-executor-tests", version: "1.0.0" },
    options.era === "modern" ? { versionNegotiation: { mode: "auto" } } : {},
  );
  await client.connect(transport);
  return client;
}

/**
 * Calls run_typescript through a connected client.
 *
 * @param client The client.
 * @param code The code.
 * @returns The structured result, with `isError`.
 */
export async function callRunTypescript(client: Client, code: string): Promise<RunResult> {
  const result = await client.callTool({ name: "run_typescript", arguments: { code } });
  return {
    ...(result.structuredContent as unknown as ExecutionResult),
    isError: result.isError === true,
  };
}

/**
 * Waits for a child process to exit, and kills it when it does not in time.
 *
 * @param child The process.
 * @param timeoutMs How long it may take.
 * @returns Its status, or undefined when it had to be killed.
 */
export async function exitOrKill(
  child: Deno.ChildProcess,
  timeoutMs = 10_000,
): Promise<Deno.CommandStatus | undefined> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const status = await Promise.race([
    child.status,
    new Promise<undefined>((resolve) => timer = setTimeout(() => resolve(undefined), timeoutMs)),
  ]);
  clearTimeout(timer);
  if (!status) child.kill("SIGKILL");
  return status;
}

/**
 * The `initialize` request a 2025-era client sends first.
 *
 * @param clientName The client's name.
 * @param id The request id.
 * @returns The request.
 */
export function initializeRequest(clientName: string, id = 1): Record<string, unknown> {
  return {
    jsonrpc: "2.0",
    id,
    method: "initialize",
    params: {
      protocolVersion: "2025-11-25",
      capabilities: {},
      clientInfo: { name: clientName, version: "1" },
    },
  };
}

/**
 * POSTs an `initialize` to an HTTP endpoint, as a client that has not started a session would.
 *
 * @param url The MCP endpoint.
 * @param clientName The client's name in `clientInfo`.
 * @param authorization The `Authorization` header, or none.
 * @returns The raw response.
 */
export async function postInitialize(
  url: URL,
  clientName: string,
  authorization?: string,
): Promise<Response> {
  return await fetch(url, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      ...(authorization === undefined ? {} : { authorization }),
    },
    body: JSON.stringify(initializeRequest(clientName)),
  });
}

/**
 * Every file under a directory (`.cache` directories aside), by relative path, with its text.
 *
 * @param root The directory.
 * @returns The files.
 */
export async function snapshotFiles(root: string): Promise<Map<string, string>> {
  const files = new Map<string, string>();
  const walk = async (dir: string) => {
    for await (const entry of Deno.readDir(dir)) {
      const path = join(dir, entry.name);
      if (entry.isDirectory) {
        if (entry.name !== ".cache") await walk(path);
      } else files.set(relative(root, path), await Deno.readTextFile(path));
    }
  };
  await walk(root);
  return files;
}

/** A process as `/proc/<pid>/stat` shows it. */
export interface ProcessStat {
  /** Its state: `R` running, `S` sleeping, `T` stopped, `Z` exited but not collected, … */
  state: string;
  /** The CPU time it has used, user plus system over all its threads, in clock ticks. */
  cpuTicks: number;
}

/**
 * Reads a process's state and the CPU time it has used.
 *
 * @param pid The process.
 * @returns Its state and CPU time.
 * @throws {Deno.errors.NotFound} When the process has left the process table.
 */
export async function processStat(pid: number): Promise<ProcessStat> {
  const stat = await Deno.readTextFile(`/proc/${pid}/stat`);
  // The command name (field 2) is in parentheses and may hold spaces: count after it.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return { state: fields[0], cpuTicks: Number(fields[11]) + Number(fields[12]) };
}

/**
 * Measures the CPU time processes use over the next while.
 *
 * @param pids The processes.
 * @param ms How long to watch them.
 * @returns The clock ticks each used in that time, in order.
 */
export async function cpuTicksOver(pids: number[], ms: number): Promise<number[]> {
  const ticks = (pid: number) => processStat(pid).then((stat) => stat.cpuTicks, () => 0);
  const start = await Promise.all(pids.map(ticks));
  await new Promise((resolve) => setTimeout(resolve, ms));
  const end = await Promise.all(pids.map(ticks));
  // A process that ended in the window reads 0: count only what it used before.
  return end.map((used, i) => Math.max(0, used - start[i]));
}

/**
 * Whether a process is running: it exists and is not a zombie (which has exited; only its parent
 * has not collected it yet).
 *
 * @param pid The process.
 * @returns Whether it runs.
 */
export function isAlive(pid: number): Promise<boolean> {
  return processStat(pid).then((stat) => stat.state !== "Z", () => false);
}

/**
 * Keeps the processes that still run.
 *
 * @param pids The processes.
 * @returns Those of them that {@linkcode isAlive} finds running, in order.
 */
export async function livePids(pids: number[]): Promise<number[]> {
  const alive = await Promise.all(pids.map(isAlive));
  return pids.filter((_, i) => alive[i]);
}

/**
 * Whether a process has left the process table: it exited and its parent collected it.
 *
 * @param pid The process.
 * @returns Whether it is gone.
 */
export function processGone(pid: number): Promise<boolean> {
  return Deno.stat(`/proc/${pid}`).then(() => false, () => true);
}

/**
 * Waits until a process no longer runs.
 *
 * @param pid The process.
 * @param timeoutMs How long to wait.
 * @returns Whether it exited in time.
 */
export function waitForExit(pid: number, timeoutMs = 5_000): Promise<boolean> {
  return eventually(async () => !(await isAlive(pid)), timeoutMs);
}

/**
 * Lists live processes (other than this one) whose environment has exactly this `NAME=value`:
 * a server's descendants carry its TMPDIR or HOME.
 *
 * @param entry The `NAME=value` entry.
 * @returns Their pids.
 */
export async function pidsWithEnv(entry: string): Promise<number[]> {
  const pids: number[] = [];
  for await (const dir of Deno.readDir("/proc")) {
    if (!/^\d+$/.test(dir.name) || Number(dir.name) === Deno.pid) continue;
    try {
      const environ = new TextDecoder().decode(await Deno.readFile(`/proc/${dir.name}/environ`));
      if (environ.split("\0").includes(entry) && await isAlive(Number(dir.name))) {
        pids.push(Number(dir.name));
      }
    } catch {
      // The process ended while we looked, or is not ours.
    }
  }
  return pids;
}

/**
 * Finds the `main.ts serve` process of a harness (under `deno task start`, the task runner's
 * child) by the TMPDIR it was started with.
 *
 * @param server The harness.
 * @returns Its pid.
 * @throws {Error} When no running process with that TMPDIR runs `main.ts serve`.
 */
export async function serverPid(server: ServerHarness): Promise<number> {
  for (const pid of await pidsWithEnv(`TMPDIR=${server.tempDir}`)) {
    const args = (await Deno.readTextFile(`/proc/${pid}/cmdline`).catch(() => "")).split("\0");
    if (args.some((arg) => arg.endsWith("main.ts")) && args.includes("serve")) return pid;
  }
  throw new Error(
    `Cannot find the server process: none runs main.ts serve with TMPDIR=${server.tempDir}`,
  );
}

/**
 * Lists live sandbox processes (TypeScript runners and Python hosts) whose command line or working
 * directory names the given marker.
 *
 * @param marker A string the process's command line or working directory must contain.
 * @param runners Which sandbox entry points count.
 * @returns Their pids.
 */
export async function sandboxPids(
  marker: string,
  runners: string[] = ["ts_runner.ts", "py_host.ts"],
): Promise<number[]> {
  const pids: number[] = [];
  for await (const entry of Deno.readDir("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    try {
      const cmdline = await Deno.readTextFile(`/proc/${entry.name}/cmdline`);
      if (!runners.some((r) => cmdline.includes(r))) continue;
      // Python children may only read the Pyodide files, so their command line does not name
      // their directory; their working directory (the private workspace) does.
      const cwd = await Deno.readLink(`/proc/${entry.name}/cwd`).catch(() => "");
      if (cmdline.includes(marker) || cwd.includes(marker)) pids.push(Number(entry.name));
    } catch {
      // The process ended while we looked.
    }
  }
  return pids;
}

/**
 * Lists what is left in a directory.
 *
 * @param dir The directory.
 * @returns Entry names.
 */
export async function leftovers(dir: string): Promise<string[]> {
  const names: string[] = [];
  try {
    for await (const entry of Deno.readDir(dir)) names.push(entry.name);
  } catch {
    // Already removed.
  }
  return names;
}

/**
 * Lists the sandbox children's private directories in a server's temp directory.
 *
 * @param tempDir The temp directory (TMPDIR, or `sandbox.tempDir`).
 * @returns Their names.
 */
export async function sandboxDirs(tempDir: string): Promise<string[]> {
  return (await leftovers(tempDir)).filter((name) => name.startsWith(CHILD_DIR_PREFIX));
}

/**
 * Polls until `check` returns true or the time is up.
 *
 * @param check The condition.
 * @param timeoutMs How long to wait.
 * @returns Whether the condition held.
 */
export async function eventually(
  check: () => Promise<boolean>,
  timeoutMs = 5_000,
): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return await check();
}

/**
 * Asserts that no sandbox process and no sandbox directory of a server is left in its temp
 * directory, waiting up to `timeoutMs` for them to go.
 *
 * @param tempDir The server's temp directory.
 * @param timeoutMs How long they may take.
 * @throws {AssertionError} When something is still there.
 */
export async function assertNoSandboxes(tempDir: string, timeoutMs = 5_000): Promise<void> {
  const gone = await eventually(
    async () =>
      (await sandboxPids(tempDir)).length === 0 && (await sandboxDirs(tempDir)).length === 0,
    timeoutMs,
  );
  assert(
    gone,
    `left behind: pids ${await sandboxPids(tempDir)}, dirs ${await sandboxDirs(tempDir)}`,
  );
}

/**
 * Closes the client, then checks that nothing of the server outlives it: no sandbox process, no
 * process with its TMPDIR or its private HOME, none of `pids`, no sandbox directory. The harness
 * is closed either way.
 *
 * @param server The harness.
 * @param options `pids`: more processes (upstream servers) that must be gone.
 * @throws {AssertionError} When something is left after 10 s.
 */
export async function closeAndCheck(
  server: ServerHarness,
  options: { pids?: number[] } = {},
): Promise<void> {
  const { tempDir, home } = server;
  const leftBehind = async () => ({
    sandboxes: await sandboxPids(tempDir),
    processesWithTmp: await pidsWithEnv(`TMPDIR=${tempDir}`),
    processesWithHome: home === undefined ? [] : await pidsWithEnv(`HOME=${home}`),
    processes: await livePids(options.pids ?? []),
    workspaces: await sandboxDirs(tempDir),
  });
  let left = {};
  try {
    await server.client.close();
    const clean = await eventually(async () => {
      const now = await leftBehind();
      left = now;
      return Object.values(now).every((list) => list.length === 0);
    }, 10_000);
    assert(clean, `left after shutdown: ${JSON.stringify(left)}`);
  } finally {
    await server.close();
  }
}

/**
 * Runs `fn` with a fresh temporary directory, and removes it afterwards.
 *
 * @param prefix The directory name's prefix.
 * @param fn The test body.
 * @returns What `fn` returns.
 */
export async function withTempDir<T>(prefix: string, fn: (dir: string) => Promise<T>): Promise<T> {
  const dir = await Deno.makeTempDir({ prefix });
  try {
    return await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** The directories of a test that plays a user: a HOME and a project under one temp root. */
export interface UserDirs {
  /** The temp root, as its real path. */
  root: string;
  /** `<root>/home`, empty. */
  home: string;
  /** `<root>/project`, empty. */
  project: string;
}

/**
 * Runs `fn` with a fresh temp root holding an empty `home/` and `project/`, and removes it
 * afterwards. The root is its real path, so that paths compare equal where the temp directory is
 * behind a symlink.
 *
 * @param prefix The root's name prefix.
 * @param fn The test body.
 * @returns What `fn` returns.
 */
export async function withUserDirs<T>(
  prefix: string,
  fn: (dirs: UserDirs) => Promise<T>,
): Promise<T> {
  const root = await Deno.realPath(await Deno.makeTempDir({ prefix }));
  const dirs = { root, home: join(root, "home"), project: join(root, "project") };
  try {
    await Deno.mkdir(dirs.home);
    await Deno.mkdir(dirs.project);
    return await fn(dirs);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
}

/**
 * Writes a text file, creating the directories it goes in: a user's config where the client
 * keeps it.
 *
 * @param path The file.
 * @param text Its contents.
 * @param options `mode`: the file's permission bits, set whatever the umask.
 * @returns The path.
 */
export async function writeFileWithParents(
  path: string,
  text: string,
  options: { mode?: number } = {},
): Promise<string> {
  await Deno.mkdir(dirname(path), { recursive: true });
  await Deno.writeTextFile(path, text);
  if (options.mode !== undefined) await Deno.chmod(path, options.mode);
  return path;
}

/**
 * A logger that keeps the warnings it is given and drops the rest, so that a test can check
 * that nothing went wrong, or what did.
 *
 * @returns The logger, and the warnings as they come.
 */
export function captureWarnings(): Logger & { warnings: string[] } {
  const warnings: string[] = [];
  return { warnings, debug() {}, info() {}, warn: (m) => warnings.push(m), error() {} };
}

/**
 * Runs `fn` with an in-process {@linkcode Executor} whose sandboxes live in a fresh temp
 * directory (no warm pools unless `raw` asks for them), then checks that no sandbox directory is
 * left.
 *
 * @param raw Settings, as a settings file would hold them.
 * @param fn The test body; it gets the executor and its temp directory.
 * @param options `log`: the executor's logger (errors only, on the console, by default).
 */
export async function withExecutor(
  raw: Record<string, unknown>,
  fn: (executor: Executor, tempDir: string) => Promise<void>,
  options: { log?: Logger } = {},
): Promise<void> {
  const tempDir = await Deno.realPath(await Deno.makeTempDir({ prefix: "ce-exec-" }));
  const base = raw as { sandbox?: Record<string, unknown>; python?: Record<string, unknown> };
  const settings = resolveSettings({
    ...raw,
    sandbox: { warmPool: 0, ...base.sandbox, tempDir },
    python: { warmPool: 0, warmPoolBurst: 0, ...base.python },
  });
  const executor = await Executor.create(settings, { log: options.log ?? createLogger("error") });
  try {
    await fn(executor, tempDir);
  } finally {
    await executor.close();
    const left = await sandboxDirs(tempDir);
    await Deno.remove(tempDir, { recursive: true });
    assertEquals(left, [], "sandbox directories left behind");
  }
}

/** What a finished command-line process did. */
export interface CommandRun {
  /** Its exit code. */
  code: number;
  /** Its standard output. */
  stdout: string;
  /** Its standard error. */
  stderr: string;
}

/** Options for {@linkcode runCommand}. */
export interface RunCommandOptions {
  /** The working directory; this process's by default. */
  cwd?: string;
  /** Variables to set. */
  env?: Record<string, string>;
  /** Start from an empty environment rather than this process's. */
  clearEnv?: boolean;
  /** Kill the process after this long, so that a hang fails the test instead of the suite. */
  timeoutMs?: number;
}

/**
 * Runs a command with no stdin and waits for it to exit.
 *
 * @param command The executable.
 * @param args Its arguments.
 * @param options Working directory, environment and time limit.
 * @returns Exit code and output.
 */
export async function runCommand(
  command: string,
  args: string[],
  options: RunCommandOptions = {},
): Promise<CommandRun> {
  const abort = new AbortController();
  const timer = options.timeoutMs === undefined
    ? undefined
    : setTimeout(() => abort.abort(), options.timeoutMs);
  try {
    const output = await new Deno.Command(command, {
      args,
      cwd: options.cwd,
      env: options.env,
      clearEnv: options.clearEnv,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
      signal: abort.signal,
    }).output();
    const decoder = new TextDecoder();
    return {
      code: output.code,
      stdout: decoder.decode(output.stdout),
      stderr: decoder.decode(output.stderr),
    };
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Renders a command's run for assertion messages.
 *
 * @param run The run.
 * @returns Exit code, stdout and stderr.
 */
export function describeRun(run: CommandRun): string {
  return `exit code ${run.code}\nstdout:\n${run.stdout}\nstderr:\n${run.stderr}`;
}

/** Options for {@linkcode startHttpServer}. */
export interface StartHttpServerOptions extends ServerEnvOptions {
  /** Settings written to a temporary CODE_EXECUTOR_CONFIG file. */
  settings?: Record<string, unknown>;
  /** Extra environment variables for the server (log level `info` unless this says otherwise). */
  env?: Record<string, string>;
  /** Extra arguments after `serve --http --port 0`. */
  args?: string[];
  /** Upstream servers, written to an `mcp.json` (in `home`, else the temp directory) for `--config`. */
  upstream?: Record<string, unknown>;
  /** How long the server may take to say it is ready. */
  readyTimeoutMs?: number;
}

/** A running `main.ts serve --http`. */
export interface HttpServer {
  /** The MCP endpoint, from the server's "ready on" line. */
  url: URL;
  /** The server's process id. */
  pid: number;
  /** The server's TMPDIR (its sandboxes' directories, `audit.jsonl`). */
  tempDir: string;
  /** Its private HOME (`options.home`, else a directory in `tempDir`). */
  home: string;
  /** The audit log's path. */
  auditPath: string;
  /** Everything the server wrote to stderr so far. */
  readonly stderr: string;
  /** Resolves when the process exits. */
  status: Promise<Deno.CommandStatus>;
  /**
   * Sends SIGTERM (unless the process has exited), waits for it to exit (SIGKILL after
   * `timeoutMs`), checks that it exited with 0 and that no sandbox process, no process with its
   * TMPDIR or HOME and no sandbox directory is left, and removes the temp directory either way.
   *
   * @returns The exit status.
   * @throws {AssertionError} When the server had to be killed, failed or left something behind.
   */
  close(options?: { timeoutMs?: number }): Promise<Deno.CommandStatus>;
}

/**
 * Starts `deno run -A main.ts serve --http --port 0` with a private TMPDIR and HOME (the caller's
 * caches unless `sharedCache` is false), waits for its "ready on http://…" line on stderr and returns its URL.
 *
 * @param options Settings, environment, arguments, upstream servers and HOME.
 * @returns The running server.
 * @throws {Error} When the server exits or says nothing within `readyTimeoutMs`; with its stderr.
 */
export async function startHttpServer(options: StartHttpServerOptions = {}): Promise<HttpServer> {
  const tempDir = await Deno.realPath(await Deno.makeTempDir({ prefix: "ce-http-" }));
  // A private HOME always, so that no user configuration leaks in; the caches stay shared, so
  // that npm servers and the Python snapshot are not fetched or built again.
  const home = options.home ?? join(tempDir, "home");
  if (options.home === undefined) await Deno.mkdir(home);
  const env: Record<string, string> = {
    ...serverEnv(tempDir, { home, sharedCache: options.sharedCache ?? true }),
    CODE_EXECUTOR_LOG_LEVEL: "info",
    ...options.env,
  };
  const args = ["run", "-A", "main.ts", "serve", "--http", "--port", "0", ...(options.args ?? [])];
  try {
    if (options.settings) env.CODE_EXECUTOR_CONFIG = await writeSettings(tempDir, options.settings);
    if (options.upstream) {
      args.push("--config", await writeMcpConfig(home, options.upstream));
    }
  } catch (error) {
    await Deno.remove(tempDir, { recursive: true }).catch(() => {});
    throw error;
  }
  const child = new Deno.Command(Deno.execPath(), {
    args,
    cwd: ROOT,
    clearEnv: true,
    env,
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  let stderr = "";
  let exited = false;
  const status = child.status.finally(() => exited = true);
  const pump = (async () => {
    const decoder = new TextDecoder();
    for await (const chunk of child.stderr) stderr += decoder.decode(chunk, { stream: true });
  })();
  const ready = () => /ready on (http:\/\/\S+)/.exec(stderr)?.[1];
  await eventually(
    () => Promise.resolve(exited || ready() !== undefined),
    options.readyTimeoutMs ?? 60_000,
  );
  const leftBehind = async () => ({
    sandboxes: await sandboxPids(tempDir),
    processesWithTmp: await pidsWithEnv(`TMPDIR=${tempDir}`),
    processesWithHome: await pidsWithEnv(`HOME=${home}`),
    workspaces: await sandboxDirs(tempDir),
  });
  const stop = async (timeoutMs: number) => {
    try {
      if (!exited) child.kill("SIGTERM");
    } catch {
      // It exited just now.
    }
    const ended = await exitOrKill(child, timeoutMs);
    await pump;
    return ended;
  };
  const found = ready();
  if (found === undefined || exited) {
    await stop(5_000);
    await Deno.remove(tempDir, { recursive: true }).catch(() => {});
    throw new Error(`The HTTP server did not get ready:\n${stderr}`);
  }
  return {
    url: new URL(found),
    pid: child.pid,
    tempDir,
    home,
    auditPath: env.AUDIT_LOG_PATH,
    get stderr() {
      return stderr;
    },
    status,
    async close(closeOptions = {}) {
      try {
        const ended = await stop(closeOptions.timeoutMs ?? 30_000);
        assert(ended, `the server did not exit after SIGTERM and was killed:\n${stderr}`);
        assertEquals(ended.code, 0, `the server exited with ${ended.code}:\n${stderr}`);
        let left = {};
        const clean = await eventually(async () => {
          left = await leftBehind();
          return Object.values(left).every((list) => (list as unknown[]).length === 0);
        }, 10_000);
        assert(clean, `left after shutdown: ${JSON.stringify(left)}`);
        return ended;
      } finally {
        await Deno.remove(tempDir, { recursive: true }).catch(() => {});
      }
    },
  };
}

/** Options for {@linkcode httpClient}. */
export interface HttpClientOptions {
  /** `legacy`: the 2025-era handshake and session; `modern`: 2026-07-28, negotiated by probe. */
  era: "legacy" | "modern";
  /** A bearer token, sent as `Authorization: Bearer <token>`. */
  token?: string;
  /** The capabilities the client declares (sampling, elicitation). */
  capabilities?: ClientOptions["capabilities"];
  /** Called before connecting, to register the client's request handlers. */
  setup?: (client: Client) => void;
  /** Headers for every request besides the token's. */
  headers?: Record<string, string>;
}

/**
 * Connects an SDK v2 client to an HTTP endpoint over Streamable HTTP in the chosen era, and
 * checks that the era is the one negotiated.
 *
 * @param url The MCP endpoint.
 * @param options Era, token, capabilities and handlers.
 * @returns The connected client; `client.close()` ends its streams (without DELETE).
 * @throws {AssertionError} When the server negotiated another era.
 */
export async function httpClient(url: URL | string, options: HttpClientOptions): Promise<Client> {
  const headers: Record<string, string> = { ...options.headers };
  if (options.token !== undefined) headers.Authorization = `Bearer ${options.token}`;
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers },
  });
  const client = new Client({ name: "code-executor-http-tests", version: "1.0.0" }, {
    capabilities: options.capabilities,
    ...(options.era === "modern" ? { versionNegotiation: { mode: "auto" as const } } : {}),
  });
  options.setup?.(client);
  await client.connect(transport);
  const era = client.getProtocolEra();
  if (era !== options.era) {
    await client.close();
    throw new Error(`Expected the ${options.era} era, the client negotiated ${era}`);
  }
  return client;
}

/**
 * Calls `run_typescript` or `run_python` and returns its structured result.
 *
 * @param client A connected client.
 * @param tool The tool.
 * @param code The code.
 * @param extra More arguments (`session`, `timeoutMs`).
 * @param requestOptions The request's options: `signal`, `onprogress`, `timeout` (120 s by
 *   default).
 * @returns The result as the client sees it.
 */
export async function callRun(
  client: Client,
  tool: "run_typescript" | "run_python",
  code: string,
  extra: Record<string, unknown> = {},
  requestOptions: Parameters<Client["callTool"]>[1] = {},
): Promise<RunResult> {
  const result = await client.callTool({ name: tool, arguments: { code, ...extra } }, {
    timeout: 120_000,
    ...requestOptions,
  });
  return {
    ...(result.structuredContent as unknown as ExecutionResult),
    isError: result.isError === true,
  };
}

/** A small TypeScript skill the skills tests save: `add-numbers`, `{a, b}` → `a + b`. */
export const ADD: SaveSkillInput = {
  name: "add-numbers",
  description: "Adds two numbers",
  language: "typescript",
  inputSchema: {
    type: "object",
    properties: { a: { type: "number" }, b: { type: "number" } },
    required: ["a", "b"],
  },
  code: "return args.a + args.b;",
};

/** A warm-pool member that is only an object, for tests of what `WarmPool` itself does. */
export class PoolMember implements PooledChild {
  exited = false;
  disposed = false;
  dispose(): Promise<void> {
    this.disposed = true;
    return Promise.resolve();
  }
}
