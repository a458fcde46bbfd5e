/**
 * A real `main.ts serve` on stdio: started as the README says (`deno task start`) with an SDK v2
 * client connected, or spawned with raw pipes for clients that misbehave at the byte level; and
 * the check that nothing of it outlives its close.
 *
 * @module
 */
import { Client, type ClientOptions } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { assert, type RunResult } from "./_assert.ts";
import { callRun } from "./_client.ts";
import { ROOT, serverEnv, type ServerEnvOptions, writeMcpConfig, writeSettings } from "./_env.ts";
import { eventually, livePids, pidsWithEnv, sandboxDirs, sandboxPids } from "./_proc.ts";

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
  return {
    client,
    tempDir,
    home: options.home,
    runTs: (code, extra) => callRun(client, "run_typescript", code, extra),
    runPy: (code, extra) => callRun(client, "run_python", code, extra),
    async close() {
      await client.close();
      await Deno.remove(tempDir, { recursive: true }).catch(() => {});
    },
  };
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
