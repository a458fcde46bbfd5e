/**
 * Mixed load through a real stdio MCP client (SDK v2) and `deno task start`: executions
 * alternating between `run_typescript` and `run_python`, a fixed number in flight at once, each
 * making 20 calls to two real upstream MCP servers (server-everything: `echo`, `get-sum`;
 * server-memory: `open_nodes`, `search_nodes`). Every execution works on inputs of its own, so
 * that a lost or mixed-up result shows; `tests/load_test.ts` runs the same workload with
 * assertions.
 *
 * ```sh
 * deno run -A bench/load.ts [--executions 200] [--concurrency 16] [--max-concurrent 4]
 *   [--python-pool 2] [--json]
 * ```
 *
 * The server gets a private HOME, TMPDIR and settings file, the real Deno cache (the npm
 * servers are not downloaded again) and the real XDG_CACHE_HOME (the Pyodide snapshot is not
 * built again). The memory server's graph is seeded once, by one execution, before the load:
 * server-memory reads and rewrites its whole file on every write without a lock, so concurrent
 * writes lose entities (see {@linkcode seedCode}), and the load only reads.
 *
 * Latency is `client.callTool()` wall time, queueing in the server included; executions per
 * second count the measured executions over the wall time of the whole load. The server's VmRSS
 * is read once settled (see {@linkcode settledRss}) after a warm-up of the same shape, at its
 * peak, and settled after the load. Progress goes to stderr; stdout gets a markdown report, or
 * JSON with `--json`; a wrong or lost result makes the exit code 1.
 *
 * @module
 */
import type { Client } from "@modelcontextprotocol/client";
import { join } from "node:path";
import { mean, percentile, round, sleep } from "./_stats.ts";
import {
  loadAverage,
  type MachineReport,
  machineReport,
  machineText,
  residentMb,
} from "./_machine.ts";
import { log, parseBenchArgs, printReport, row, runBench } from "./_report.ts";
import type { ExecutionResult } from "../src/exec/result.ts";
import { EVERYTHING, MEMORY } from "../tests/_pins.ts";
import { npmServer } from "../tests/_env.ts";
import { type ServerHarness, serverPid, startServer } from "../tests/_stdio_server.ts";
/** Upstream tool calls one execution makes. */
export const CALLS_PER_EXECUTION = 20;
const ECHOES = 9;
/**
 * The SDK client gives up on a request after 60 s by default; queued behind 15 others on a busy
 * machine, an execution can take longer than that without anything being wrong.
 */
const CLIENT_TIMEOUT_MS = 600_000;
const SUMS = 9;

/** The two tools under load. */
export type Language = "typescript" | "python";

/** A memory-server entity as `open_nodes` returns it. */
export interface Entity {
  name: string;
  entityType: string;
  observations: string[];
}

/** One execution of the workload: its code and what it must return. */
export interface LoadJob {
  /** Position in the workload; also what makes its inputs unique. */
  index: number;
  /** Which tool runs it. */
  language: Language;
  /** The program. */
  code: string;
  /** The `returnValue` a correct run gives. */
  expected: unknown;
}

/** What one execution returned, as the client saw it. */
export interface LoadOutcome {
  /** The job that ran. */
  job: LoadJob;
  /** `client.callTool()` wall time, in milliseconds. */
  latencyMs: number;
  /** The structured result, or undefined when the call itself failed. */
  result?: ExecutionResult & { isError: boolean };
  /** A protocol or transport error. */
  callError?: string;
}

/** The measured load: every outcome, and the wall time of the whole batch. */
export interface LoadRun {
  /** One per job, in job order. */
  outcomes: LoadOutcome[];
  /** From the first call to the last result. */
  elapsedMs: number;
}

/**
 * The entity that the execution at `index` reads back.
 *
 * @param tag What makes this run's data unique.
 * @param index The execution's index.
 * @returns The entity.
 */
export function entityFor(tag: string, index: number): Entity {
  // "#1;" is not a substring of "#10;", so search_nodes finds exactly one entity.
  return {
    name: `load-${tag}-${index}`,
    entityType: "load",
    observations: [`obs ${tag} #${index};`],
  };
}

/**
 * TypeScript that creates the entities of executions `0 … count - 1` in one call.
 *
 * One call, not one per execution: server-memory 2026.8.31 loads the graph, changes it and writes
 * it back without a lock, so two writes in flight at once lose one of the entities.
 *
 * @param tag What makes this run's data unique.
 * @param count How many entities.
 * @returns The program; it returns the number of entities created.
 */
export function seedCode(tag: string, count: number): string {
  const entities = Array.from({ length: count }, (_, index) => entityFor(tag, index));
  return [
    `const entities = ${JSON.stringify(entities)};`,
    'const created = await callMCPTool("mcp__memory__create_entities", { entities });',
    "return created.entities.length;",
  ].join("\n");
}

/**
 * Builds the workload: executions alternating between TypeScript and Python, each making
 * {@linkcode CALLS_PER_EXECUTION} tool calls on inputs of its own.
 *
 * @param tag What makes this run's data unique.
 * @param options Which indices (`first` … `first + count - 1`) and a number mixed into the sums.
 * @returns The jobs.
 */
export function loadJobs(
  tag: string,
  options: { count: number; first?: number; salt?: number },
): LoadJob[] {
  const first = options.first ?? 0;
  const salt = options.salt ?? 0;
  return Array.from({ length: options.count }, (_, offset) => {
    const index = first + offset;
    const language: Language = index % 2 === 0 ? "typescript" : "python";
    const entity = entityFor(tag, index);
    const input = {
      index,
      messages: Array.from({ length: ECHOES }, (_, k) => `${tag}/${language}/${index}/${k}`),
      pairs: Array.from({ length: SUMS }, (_, k) => [index * 100 + k, salt + k]),
      name: entity.name,
      query: entity.observations[0],
    };
    const graph = { entities: [entity], relations: [] };
    const expected = {
      index,
      echoes: input.messages.map((message) => `Echo: ${message}`),
      sums: input.pairs.map(([a, b]) => `The sum of ${a} and ${b} is ${a + b}.`),
      opened: graph,
      found: graph,
    };
    // Strings, integers and lists only: the JSON is a Python literal too.
    const literal = JSON.stringify(input);
    const code = language === "typescript"
      ? [
        `const input = ${literal};`,
        "const echoes = [];",
        "for (const message of input.messages) {",
        '  echoes.push(await callMCPTool("mcp__everything__echo", { message }));',
        "}",
        "const sums = [];",
        "for (const [a, b] of input.pairs) {",
        '  sums.push(await callMCPTool("mcp__everything__get-sum", { a, b }));',
        "}",
        'const opened = await callMCPTool("mcp__memory__open_nodes", { names: [input.name] });',
        'const found = await callMCPTool("mcp__memory__search_nodes", { query: input.query });',
        "return { index: input.index, echoes, sums, opened, found };",
      ].join("\n")
      : [
        `data = ${literal}`,
        "echoes = []",
        'for message in data["messages"]:',
        '    echoes.append(await call_mcp_tool("mcp__everything__echo", {"message": message}))',
        "sums = []",
        'for a, b in data["pairs"]:',
        '    sums.append(await call_mcp_tool("mcp__everything__get-sum", {"a": a, "b": b}))',
        'opened = await call_mcp_tool("mcp__memory__open_nodes", {"names": [data["name"]]})',
        'found = await call_mcp_tool("mcp__memory__search_nodes", {"query": data["query"]})',
        '{"index": data["index"], "echoes": echoes, "sums": sums, "opened": opened, "found": found}',
      ].join("\n");
    return { index, language, code, expected };
  });
}

/** Options for {@linkcode startLoadServer}. */
export interface LoadServerOptions {
  /** `CODE_EXECUTOR_WARM_POOL`; the settings' default when omitted. */
  tsPool?: number;
  /** `CODE_EXECUTOR_PYTHON_WARM_POOL`. */
  pythonPool: number;
  /** `limits.maxConcurrent`; the settings' default when omitted. */
  maxConcurrent?: number;
}

/**
 * Starts the server the workload runs on (`deno task start`): a private HOME, the real Deno cache
 * (the npm servers are not downloaded again) and the real XDG cache (the Pyodide snapshot is not
 * built again), with server-everything and server-memory run from `home`, so that they never
 * touch the project's deno.json, lock file or node_modules.
 *
 * @param home The private HOME; the upstream config and the memory file go there too.
 * @param options Warm pools and concurrency.
 * @returns The harness.
 */
export function startLoadServer(home: string, options: LoadServerOptions): Promise<ServerHarness> {
  const env: Record<string, string> = {
    CODE_EXECUTOR_PYTHON_WARM_POOL: String(options.pythonPool),
  };
  if (options.tsPool !== undefined) env.CODE_EXECUTOR_WARM_POOL = String(options.tsPool);
  return startServer({
    home,
    sharedCache: true,
    upstream: {
      everything: { ...npmServer(EVERYTHING), cwd: home },
      memory: {
        ...npmServer(MEMORY, { env: { MEMORY_FILE_PATH: join(home, "memory.jsonl") } }),
        cwd: home,
      },
    },
    env,
    ...(options.maxConcurrent === undefined
      ? {}
      : { settings: { limits: { maxConcurrent: options.maxConcurrent } } }),
  });
}

/** Options of {@linkcode runJob} and {@linkcode runLoad}. */
export interface RunJobOptions {
  /** The run's `timeoutMs`; the server's `limits.timeoutMs` when omitted. */
  timeoutMs?: number;
}

/**
 * Runs one job through the client.
 *
 * @param client The connected client.
 * @param job The job.
 * @param options The run's timeout.
 * @returns The outcome; a protocol error is reported in it, not thrown.
 */
export async function runJob(
  client: Client,
  job: LoadJob,
  options: RunJobOptions = {},
): Promise<LoadOutcome> {
  const started = performance.now();
  try {
    const result = await client.callTool({
      name: job.language === "typescript" ? "run_typescript" : "run_python",
      arguments: {
        code: job.code,
        ...(options.timeoutMs === undefined ? {} : { timeoutMs: options.timeoutMs }),
      },
    }, { timeout: CLIENT_TIMEOUT_MS });
    return {
      job,
      latencyMs: performance.now() - started,
      result: {
        ...(result.structuredContent as unknown as ExecutionResult),
        isError: result.isError === true,
      },
    };
  } catch (error) {
    return { job, latencyMs: performance.now() - started, callError: (error as Error).message };
  }
}

/**
 * Runs the jobs with `concurrency` callers sharing one client, each taking the next job when its
 * last one returns.
 *
 * @param client The connected client.
 * @param jobs The workload.
 * @param concurrency Callers in flight at once.
 * @param options The runs' timeout.
 * @returns Every outcome, in job order, and the wall time.
 */
export async function runLoad(
  client: Client,
  jobs: LoadJob[],
  concurrency: number,
  options: RunJobOptions = {},
): Promise<LoadRun> {
  const outcomes: LoadOutcome[] = new Array(jobs.length);
  let next = 0;
  const caller = async () => {
    while (next < jobs.length) {
      const position = next++;
      outcomes[position] = await runJob(client, jobs[position], options);
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: Math.min(concurrency, jobs.length) }, caller));
  return { outcomes, elapsedMs: performance.now() - started };
}

/**
 * Says what is wrong with an outcome: a failed call, a failed run, a wrong value or a tool call
 * count other than {@linkcode CALLS_PER_EXECUTION}.
 *
 * @param outcome The outcome.
 * @returns A description, or undefined when the run returned what its inputs call for.
 */
export function outcomeProblem(outcome: LoadOutcome): string | undefined {
  const { job, result } = outcome;
  const label = `${job.language} #${job.index}`;
  if (!result) return `${label}: the call failed: ${outcome.callError}`;
  if (result.isError || !result.ok) {
    return `${label}: ${result.error?.type}: ${result.error?.message} (stderr ${
      JSON.stringify(result.stderr?.slice(0, 300))
    })`;
  }
  if (JSON.stringify(result.returnValue) !== JSON.stringify(job.expected)) {
    return `${label}: returned ${JSON.stringify(result.returnValue)?.slice(0, 400)}, expected ${
      JSON.stringify(job.expected).slice(0, 400)
    }`;
  }
  const calls = result.toolCalls ?? [];
  if (calls.length !== CALLS_PER_EXECUTION || calls.some((call) => !call.ok)) {
    return `${label}: tool calls ${JSON.stringify(calls.map((call) => [call.name, call.ok]))}`;
  }
  return undefined;
}

/** What {@linkcode settledRss} saw. */
export interface SettledRss {
  /** RSS when the wait began, in MB. */
  firstMb: number;
  /** The highest reading, in MB. */
  peakMb: number;
  /** RSS at the end, in MB. */
  settledMb: number;
  /** Whether RSS dropped (V8's memory reducer ran) before the time was up. */
  dropped: boolean;
  /** How long it took, in milliseconds. */
  waitedMs: number;
}

/**
 * Reads a Deno process's RSS once V8 has given back what a burst of work grew. After a burst,
 * RSS holds still, then drops by 20–40% at once when V8's memory reducer collects the heap,
 * 5–20 s later on a 2-core machine; nothing the process is asked to do brings that forward.
 * Waits for such a drop (10% below the highest reading), or until the time is up.
 *
 * @param pid The process.
 * @param timeoutMs How long to wait for the drop.
 * @returns The readings.
 * @throws {Error} When the process has gone.
 */
export async function settledRss(pid: number, timeoutMs = 30_000): Promise<SettledRss> {
  const started = Date.now();
  const firstMb = await residentMb(pid);
  let peakMb = firstMb;
  let dropped = false;
  while (!dropped && Date.now() - started < timeoutMs) {
    await sleep(500);
    const nowMb = await residentMb(pid);
    peakMb = Math.max(peakMb, nowMb);
    dropped = nowMb < peakMb * 0.9;
  }
  // The reducer may run a second collection right after the first.
  if (dropped) await sleep(1_000);
  return {
    firstMb,
    peakMb,
    settledMb: await residentMb(pid),
    dropped,
    waitedMs: Date.now() - started,
  };
}

/** Nearest-rank latency percentiles, in milliseconds. */
export interface LatencyStats {
  n: number;
  p50Ms: number;
  p99Ms: number;
  minMs: number;
  maxMs: number;
  meanMs: number;
}

/**
 * Summarizes latencies with nearest-rank percentiles.
 *
 * @param samples Latencies in milliseconds.
 * @returns The summary.
 * @throws {RangeError} When there are no samples.
 */
export function latencyStats(samples: number[]): LatencyStats {
  if (samples.length === 0) throw new RangeError("Cannot summarize an empty sample");
  const sorted = [...samples].sort((a, b) => a - b);
  return {
    n: sorted.length,
    p50Ms: round(percentile(sorted, 0.5)),
    p99Ms: round(percentile(sorted, 0.99)),
    minMs: round(sorted[0]),
    maxMs: round(sorted[sorted.length - 1]),
    meanMs: round(mean(sorted)),
  };
}

interface BenchOptions {
  executions: number;
  concurrency: number;
  maxConcurrent: number;
  pythonPool: number;
}

interface Report {
  date: string;
  machine: MachineReport;
  command: string;
  options: BenchOptions & { warmup: number; callsPerExecution: number };
  elapsedMs: number;
  executionsPerSec: number;
  toolCallsPerSec: number;
  failures: number;
  latency: { typescript: LatencyStats; python: LatencyStats; overall: LatencyStats };
  /** The server's own `durationMs` (slot acquired → result), which excludes queueing. */
  serverDuration: { typescript: LatencyStats; python: LatencyStats };
  /**
   * VmRSS of the server: settled after the warm-up, highest during or after the load, and
   * settled after it (once V8's memory reducer has run, `afterWaitedMs` later).
   */
  hostRssMb: { baseline: number; peak: number; after: number; afterWaitedMs: number };
}

/**
 * Executions (half of each language) run before the measured load, at its concurrency: they
 * connect the upstream servers and bring the host to the size it keeps under this load.
 */
export const WARMUP_EXECUTIONS = 16;

async function bench(options: BenchOptions, command: string): Promise<Report> {
  const loadBefore = await loadAverage();
  const home = await Deno.makeTempDir({ prefix: "ce-bench-load-" });
  try {
    const server = await startLoadServer(home, {
      pythonPool: options.pythonPool,
      maxConcurrent: options.maxConcurrent,
    });
    try {
      const tag = crypto.randomUUID().slice(0, 8);
      const warmupCount = WARMUP_EXECUTIONS;
      const total = options.executions + warmupCount;
      const seeded = await server.runTs(seedCode(tag, total));
      if (seeded.isError || seeded.returnValue !== total) {
        throw new Error(`Cannot seed the memory server: ${JSON.stringify(seeded.error)}`);
      }
      const salt = 1 + Math.floor(Math.random() * 1_000_000);
      const warmup = loadJobs(tag, { count: warmupCount, first: options.executions, salt });
      log(`warm-up: ${warmupCount} executions`);
      for (const outcome of (await runLoad(server.client, warmup, options.concurrency)).outcomes) {
        const problem = outcomeProblem(outcome);
        if (problem) throw new Error(`Warm-up failed: ${problem}`);
      }
      const pid = await serverPid(server);
      const baseline = (await settledRss(pid)).settledMb;
      let peak = baseline;
      const sampler = setInterval(async () => {
        peak = Math.max(peak, await residentMb(pid).catch(() => 0));
      }, 250);
      const jobs = loadJobs(tag, { count: options.executions, salt });
      log(`load: ${jobs.length} executions, ${options.concurrency} at a time`);
      let run: LoadRun;
      try {
        run = await runLoad(server.client, jobs, options.concurrency);
      } finally {
        clearInterval(sampler);
      }
      const failures = run.outcomes.map(outcomeProblem).filter((p) => p !== undefined);
      for (const problem of failures.slice(0, 5)) log(`wrong result: ${problem}`);
      const after = await settledRss(pid);
      const of = (language?: Language) =>
        run.outcomes.filter((o) => language === undefined || o.job.language === language);
      const durations = (language: Language) =>
        latencyStats(of(language).map((o) => o.result?.durationMs ?? NaN).filter(Number.isFinite));
      return {
        date: new Date().toISOString(),
        machine: await machineReport(loadBefore),
        command,
        options: { ...options, warmup: warmupCount, callsPerExecution: CALLS_PER_EXECUTION },
        elapsedMs: round(run.elapsedMs),
        executionsPerSec: round(jobs.length / (run.elapsedMs / 1000), 2),
        toolCallsPerSec: round(jobs.length * CALLS_PER_EXECUTION / (run.elapsedMs / 1000)),
        failures: failures.length,
        latency: {
          typescript: latencyStats(of("typescript").map((o) => o.latencyMs)),
          python: latencyStats(of("python").map((o) => o.latencyMs)),
          overall: latencyStats(of().map((o) => o.latencyMs)),
        },
        serverDuration: { typescript: durations("typescript"), python: durations("python") },
        hostRssMb: {
          baseline: round(baseline),
          peak: round(Math.max(peak, after.peakMb)),
          after: round(after.settledMb),
          afterWaitedMs: after.waitedMs,
        },
      };
    } finally {
      await server.close();
    }
  } finally {
    await Deno.remove(home, { recursive: true }).catch(() => {});
  }
}

function renderMarkdown(report: Report): string {
  const { options } = report;
  const latencyRow = (name: string, s: LatencyStats, server?: LatencyStats) =>
    row([name, s.n, s.p50Ms, s.p99Ms, s.minMs, s.maxMs, server ? server.p50Ms : ""]);
  return [
    `# Mixed load benchmark (${report.date})`,
    "",
    `Machine: ${machineText(report.machine)}`,
    "",
    `Command: \`${report.command}\``,
    "",
    `${options.executions} executions (half run_typescript, half run_python), ` +
    `${options.concurrency} callers on one client, ${options.callsPerExecution} upstream tool ` +
    `calls each; limits.maxConcurrent ${options.maxConcurrent}, Python warm pool ` +
    `${options.pythonPool}, TypeScript warm pool 2; ${options.warmup} warm-up executions first, ` +
    "not counted.",
    "",
    row(["", "n", "p50 ms", "p99 ms", "min ms", "max ms", "server durationMs p50"]),
    row(["---", "---:", "---:", "---:", "---:", "---:", "---:"]),
    latencyRow("run_typescript", report.latency.typescript, report.serverDuration.typescript),
    latencyRow("run_python", report.latency.python, report.serverDuration.python),
    latencyRow("overall", report.latency.overall),
    "",
    `Throughput: ${report.executionsPerSec} executions/s (${report.toolCallsPerSec} tool calls/s), ` +
    `${round(report.elapsedMs / 1000)} s in all; wrong or lost results: ${report.failures}.`,
    "",
    `Host RSS: ${report.hostRssMb.baseline} MB before the load (settled after the warm-up), ` +
    `${report.hostRssMb.peak} MB at its peak, ${report.hostRssMb.after} MB settled ` +
    `${round(report.hostRssMb.afterWaitedMs / 1000)} s after it.`,
    "",
  ].join("\n");
}

async function main(args: string[]): Promise<void> {
  const parsed = parseBenchArgs(
    args,
    "Usage: deno run -A bench/load.ts [--executions N] [--concurrency N] [--max-concurrent N] [--python-pool N] [--json]",
    {
      executions: { fallback: 200 },
      concurrency: { fallback: 16 },
      maxConcurrent: { fallback: 4 },
      pythonPool: { fallback: 2, min: 0 },
    },
  );
  if (!parsed) return;
  const options: BenchOptions = parsed.ints;
  const report = await bench(options, ["deno run -A bench/load.ts", ...args].join(" "));
  printReport(parsed.json, report, renderMarkdown);
  if (report.failures > 0) Deno.exitCode = 1;
}

if (import.meta.main) await runBench(main);
