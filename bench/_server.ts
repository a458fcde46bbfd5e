/**
 * The servers a benchmark measures: a stdio MCP server with a connected SDK v2 client, timed
 * calls of its run tools (one at a time, refused, or from concurrent callers), and the
 * spawn-per-call baseline of a bare `deno run`.
 *
 * @module
 */
import { Client } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { join } from "node:path";
import { ROOT } from "../tests/_env.ts";
import { processTree, reap } from "./_machine.ts";
import { type IntOption, log, row } from "./_report.ts";
import { repeat, runPaired, sleep, type Stats, stats } from "./_stats.ts";

export interface StdioServer {
  /** The connected client. */
  client: Client;
  /** The process the transport started. */
  pid: number;
  /** `performance.now()` just before the transport spawned the process. */
  spawnedAt: number;
  /** `performance.now()` once `connect()` resolved. */
  connectedAt: number;
  /** The last bytes the process wrote to stderr. */
  stderr(): string;
  /** Closes the client, then waits for the process and its descendants (SIGKILL after 5 s). */
  close(): Promise<void>;
}

/** Options for {@linkcode connectStdio}. */
export interface ConnectStdioOptions {
  /** How much of stderr to keep. */
  stderrBytes?: number;
  /** The options of `client.connect()` (`{ prior: { kind: "legacy" } }`: one spawn). */
  connect?: Parameters<Client["connect"]>[1];
  /** Registers the close, before connecting, with a clean-up that also runs on a signal. */
  cleanup?: { defer(step: () => Promise<void>): void };
}

/**
 * Starts a stdio MCP server and connects an SDK v2 client to it.
 *
 * @param name What progress lines and errors call it.
 * @param params The command, its arguments, environment and working directory.
 * @param options stderr kept, connect options, clean-up.
 * @returns The connection.
 * @throws {Error} When the client cannot connect; the error carries the server's stderr.
 */
export async function connectStdio(
  name: string,
  params: { command: string; args: string[]; env: Record<string, string>; cwd: string },
  options: ConnectStdioOptions = {},
): Promise<StdioServer> {
  const transport = new StdioClientTransport({ ...params, stderr: "pipe" });
  const keep = options.stderrBytes ?? 8192;
  let tail = "";
  const decoder = new TextDecoder();
  transport.stderr?.on("data", (chunk: Uint8Array) => {
    tail = (tail + decoder.decode(chunk, { stream: true })).slice(-keep);
  });
  const client = new Client({ name: "code-executor-bench", version: "1.0.0" });
  let closing: Promise<void> | undefined;
  const close = () =>
    closing ??= (async () => {
      // Take the tree first: once the parent has gone, its orphans can no longer be found.
      const pid = transport.pid;
      const tree = pid === null ? new Map<number, string>() : await processTree(pid);
      await client.close().catch(() => {});
      const killed = await reap(tree, 5_000);
      if (killed > 0) log(`${name}: ${killed} process(es) did not exit after close; killed`);
    })();
  options.cleanup?.defer(close);
  const spawnedAt = performance.now();
  try {
    await client.connect(transport, options.connect);
  } catch (error) {
    await close();
    throw new Error(`Cannot connect to ${name}: ${(error as Error).message}\n${tail}`, {
      cause: error,
    });
  }
  const connectedAt = performance.now();
  const pid = transport.pid;
  if (pid === null) {
    await close();
    throw new Error(`The stdio transport of ${name} has no process`);
  }
  return { client, pid, spawnedAt, connectedAt, stderr: () => tail, close };
}

/** How {@linkcode connectCodeExecutor} starts the server. */
export interface CodeExecutorLaunch {
  /** The server's environment. */
  env: Record<string, string>;
  /** An MCP config file, passed as `--config`: the upstream servers; none when omitted. */
  mcpConfig?: string;
  /** The checkout whose `main.ts serve` runs: this one when omitted (another for a baseline). */
  root?: string;
}

/**
 * Starts a checkout's server, `deno run -A main.ts serve`, and connects an SDK v2 client to it.
 *
 * @param name What progress lines and errors call it.
 * @param launch Its environment, MCP config and checkout.
 * @param options stderr kept, connect options, clean-up.
 * @returns The connection.
 * @throws {Error} When the client cannot connect; the error carries the server's stderr.
 */
export function connectCodeExecutor(
  name: string,
  launch: CodeExecutorLaunch,
  options: ConnectStdioOptions = {},
): Promise<StdioServer> {
  const config = launch.mcpConfig === undefined ? [] : ["--config", launch.mcpConfig];
  return connectStdio(name, {
    command: Deno.execPath(),
    args: ["run", "-A", "main.ts", "serve", ...config],
    env: launch.env,
    cwd: launch.root ?? ROOT,
  }, options);
}

/**
 * Starts this checkout's server in a temporary directory of its own, which its close removes.
 *
 * @param name What progress lines and errors call it.
 * @param prefix The temporary directory's name prefix.
 * @param env The server's environment, given the directory (its TMPDIR, settings, …).
 * @returns The connection; `close()` also removes the directory.
 * @throws {Error} When the client cannot connect (the directory is removed first).
 */
export async function connectInTempDir(
  name: string,
  prefix: string,
  env: (tempDir: string) => Promise<Record<string, string>>,
): Promise<StdioServer> {
  const tempDir = await Deno.makeTempDir({ prefix });
  const remove = () => Deno.remove(tempDir, { recursive: true }).catch(() => {});
  let server: StdioServer;
  try {
    server = await connectCodeExecutor(name, { env: await env(tempDir) });
  } catch (error) {
    await remove();
    throw error;
  }
  return {
    ...server,
    close: async () => {
      await server.close();
      await remove();
    },
  };
}

/** What an MCP call cost. */
export interface CallTiming {
  /** `client.callTool()` wall time. */
  latencyMs: number;
  /** The server's own `durationMs`; NaN when it does not say. */
  serverMs: number;
}

/** The structured content of a `run_*` result, as far as the benchmarks read it. */
export interface CallOutcome {
  ok?: boolean;
  returnValue?: unknown;
  durationMs?: number;
  error?: { type?: string; message?: string };
}

/**
 * Calls a `run_*` tool and checks that it returned the expected value.
 *
 * @param server The connection.
 * @param tool `run_typescript` or `run_python`.
 * @param args The tool's arguments.
 * @param expected The `returnValue` a correct run gives.
 * @returns Its latency and the server's `durationMs`.
 * @throws {Error} When the run failed or returned something else; with the server's stderr.
 */
export async function timedRun(
  server: StdioServer,
  tool: string,
  args: Record<string, unknown>,
  expected: unknown,
): Promise<CallTiming> {
  const started = performance.now();
  const result = await server.client.callTool({ name: tool, arguments: args });
  const latencyMs = performance.now() - started;
  const outcome = (result.structuredContent ?? {}) as CallOutcome;
  if (result.isError || outcome.ok !== true || outcome.returnValue !== expected) {
    throw new Error(
      `${tool} did not return ${expected}: ${
        outcome.error ? `${outcome.error.type}: ${outcome.error.message}` : JSON.stringify(result)
      }\n${server.stderr()}`,
    );
  }
  return { latencyMs, serverMs: outcome.durationMs ?? NaN };
}

/** One arm's timed runs: the client's latency and the server's own `durationMs`. */
export interface ArmStats {
  /** `client.callTool()` wall time. */
  latency: Stats;
  /** The server's `durationMs`. */
  server: Stats;
}

/**
 * The command-line options of a benchmark that compares arms with {@linkcode pairedTimedRuns}
 * (`--rounds`, `--warmup`, `--pause-ms`), with their defaults.
 */
export const PAIRED_RUN_ARGS = {
  rounds: { fallback: 20 },
  warmup: { fallback: 3, min: 0 },
  pauseMs: { fallback: 500, min: 0 },
} as const satisfies Record<string, IntOption>;

/** Options for {@linkcode pairedTimedRuns}. */
export interface PairedTimedRunsOptions<A extends string> {
  /** The arms compared. */
  arms: readonly A[];
  /** Measured rounds. */
  rounds: number;
  /** Rounds before them, not counted. */
  warmup: number;
  /** The pause before each run, so that a warm pool has refilled. */
  pauseMs: number;
  /** One timed run of an arm ({@linkcode timedRun}). */
  run: (arm: A) => Promise<CallTiming>;
}

/**
 * Times runs of every arm in interleaved rounds (`runPaired`), a pause before each, with a
 * progress line a round.
 *
 * @param options The arms, rounds, pause and how to time one run.
 * @returns Each arm's latency and server time.
 */
export async function pairedTimedRuns<A extends string>(
  options: PairedTimedRunsOptions<A>,
): Promise<Record<A, ArmStats>> {
  const { arms, rounds } = options;
  const samples = await runPaired({
    arms,
    rounds,
    warmup: options.warmup,
    sample: async (arm) => {
      await sleep(options.pauseMs);
      return await options.run(arm);
    },
    onRound: (round, taken) =>
      log(
        `round ${round + 1}/${rounds}: ${
          arms.map((arm) => `${arm} ${taken[arm].latencyMs.toFixed(1)} ms`).join(", ")
        }`,
      ),
  });
  return Object.fromEntries(arms.map((arm) => [arm, {
    latency: stats(samples[arm].map((s) => s.latencyMs)),
    server: stats(samples[arm].map((s) => s.serverMs)),
  }])) as Record<A, ArmStats>;
}

/**
 * The markdown table of {@linkcode pairedTimedRuns}: each arm's medians and p95s.
 *
 * @param arms The arms, in the table's order.
 * @param timed Their stats.
 * @returns The table's lines.
 */
export function armRows<A extends string>(
  arms: readonly A[],
  timed: Record<A, ArmStats>,
): string[] {
  return [
    row(["arm", "latency median ms", "p95", "server durationMs median", "p95"]),
    row(["---", "---", "---", "---", "---"]),
    ...arms.map((arm) =>
      row([
        arm,
        timed[arm].latency.medianMs,
        timed[arm].latency.p95Ms,
        timed[arm].server.medianMs,
        timed[arm].server.p95Ms,
      ])
    ),
  ];
}

/** Above the default limits.maxTimeoutMs, so that a call asking for it is refused at once. */
const REFUSED_TIMEOUT_MS = 2_000_000_000;

/**
 * Calls a `run_*` tool with a `timeoutMs` the server must refuse before any sandbox work: the
 * latency is the MCP round trip (client, stdio, schema validation) on its own.
 *
 * @param server The connection.
 * @param tool `run_typescript` or `run_python`.
 * @param code The code, which never runs.
 * @returns The latency.
 * @throws {Error} When the server ran the call.
 */
export async function timedRefusal(
  server: StdioServer,
  tool: string,
  code: string,
): Promise<number> {
  const started = performance.now();
  const result = await server.client.callTool({
    name: tool,
    arguments: { code, timeoutMs: REFUSED_TIMEOUT_MS },
  });
  const latencyMs = performance.now() - started;
  if (!result.isError) throw new Error("The server ran a call it should have refused");
  return latencyMs;
}

/**
 * Runs `callers` loops at once, each making `calls` sequential calls.
 *
 * @param callers Loops in flight at once.
 * @param calls Calls per loop.
 * @param call One call.
 * @returns Every call's timing, and the wall time from the first call to the last result.
 */
export async function concurrentCalls(
  callers: number,
  calls: number,
  call: () => Promise<CallTiming>,
): Promise<{ latencies: number[]; serverTimes: number[]; elapsedMs: number }> {
  const latencies: number[] = [];
  const serverTimes: number[] = [];
  const loop = async () => {
    for (let i = 0; i < calls; i++) {
      const { latencyMs, serverMs } = await call();
      latencies.push(latencyMs);
      serverTimes.push(serverMs);
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: callers }, loop));
  return { latencies, serverTimes, elapsedMs: performance.now() - started };
}

/**
 * A bare `deno run --no-config -q tiny.ts`, ready to time one call at a time: the floor of any
 * spawn-per-call design.
 *
 * @returns `run()`, which times one run (and throws when the script fails), and `close()`,
 * which removes the script.
 */
export async function bareDenoRun(): Promise<{ run(): Promise<number>; close(): Promise<void> }> {
  const dir = await Deno.makeTempDir({ prefix: "ce-bench-bare-" });
  const script = join(dir, "tiny.ts");
  await Deno.writeTextFile(script, "const one: number = 1;\nif (one !== 1) Deno.exit(1);\n");
  const command = new Deno.Command(Deno.execPath(), {
    args: ["run", "--no-config", "-q", script],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  });
  return {
    async run() {
      const started = performance.now();
      const output = await command.output();
      const elapsed = performance.now() - started;
      if (!output.success) {
        throw new Error(
          `The bare deno run failed with code ${output.code}: ${
            new TextDecoder().decode(output.stderr)
          }`,
        );
      }
      return elapsed;
    },
    close: () => Deno.remove(dir, { recursive: true }).catch(() => {}),
  };
}

/**
 * Times {@linkcode bareDenoRun} per call.
 *
 * @param iterations Measured runs.
 * @param warmup Runs before them, not counted.
 * @returns The summary.
 * @throws {Error} When the script fails.
 */
export async function timeDenoRun(iterations: number, warmup: number): Promise<Stats> {
  const bare = await bareDenoRun();
  try {
    return stats(await repeat({ iterations, warmup }, () => bare.run()));
  } finally {
    await bare.close();
  }
}
