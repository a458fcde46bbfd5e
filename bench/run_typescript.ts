/**
 * End-to-end latency of a trivial `run_typescript` call (`return 1`), measured through a real
 * stdio MCP client (SDK v2) talking to `deno run -A main.ts serve`, next to a naive
 * spawn-per-call baseline timed in the same process so that results can be quoted as ratios.
 *
 * ```sh
 * deno run -A bench/run_typescript.ts [--iterations 60] [--warmup 5] [--pause-ms 250]
 *   [--cold-pause-ms 50] [--json]
 * ```
 *
 * Scenarios (warm-up calls are never counted):
 * - baseline: `deno run --no-config -q tiny.ts` per call, awaited with `Deno.Command#output()`;
 * - naive server: `bench/_naive_server.ts`, a spawn-per-call MCP server (one `deno run` of a
 *   `data:` URL per call), driven by the same kind of client and interleaved call by call with
 *   the warm and the cold scenario, so that both see the same machine load: the ratio
 *   ours / naive is the number to compare across machines;
 * - MCP round trip: a `run_typescript` call that the server refuses before any sandbox work;
 * - warm: warm pool on (`CODE_EXECUTOR_WARM_POOL=2`), sequential calls with a pause before each
 *   call so that the background refill has finished and every call takes a pre-started child;
 * - cold: warm pool off (`CODE_EXECUTOR_WARM_POOL=0`), sequential calls, each spawns a child
 *   (`--cold-pause-ms` apart, so that one call's clean-up does not overlap the next call);
 * - concurrent: 8 parallel `callTool` loops on one client, warm pool on (the server runs
 *   `limits.maxConcurrent` at once and queues the rest, so latency includes queueing);
 * - host RSS (VmRSS of the server process) once idle after start-up, and after the calls.
 *
 * Progress goes to stderr; stdout gets a markdown report, or JSON with `--json`.
 *
 * @module
 */
import { Client } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const NAIVE_SERVER = fileURLToPath(new URL("./_naive_server.ts", import.meta.url));
const CODE = "return 1";
const SETTLE_MS = 2_000;
const CONCURRENCY = 8;
// Above the default limits.maxTimeoutMs, so the call is refused before a sandbox is touched:
// its latency is the MCP round trip (client, stdio, schema validation) on its own.
const REFUSED_TIMEOUT_MS = 2_000_000_000;
const TARGETS = { warmMedianMs: 8, coldMedianMs: 20, idleRssMb: 120 };

interface Stats {
  n: number;
  medianMs: number;
  p95Ms: number;
  minMs: number;
  maxMs: number;
}

interface ScenarioResult {
  latency: Stats;
  /** The naive spawn-per-call server, its calls interleaved with these (sequential scenarios). */
  naive?: Stats;
  /** The server's own `durationMs` (pool take or spawn → result), excluding MCP and disposal. */
  serverDuration: Stats;
  throughputPerSec?: number;
  idleRssMb: number;
  idleChildrenRssMb: number;
  afterRssMb: number;
}

interface Report {
  date: string;
  machine: {
    nproc: number;
    cpu: string;
    deno: string;
    v8: string;
    os: string;
    /** `/proc/loadavg` before and after the run: other work on the machine skews the numbers. */
    loadBefore: string;
    loadAfter: string;
  };
  command: string;
  options: {
    iterations: number;
    warmup: number;
    pauseMs: number;
    coldPauseMs: number;
    concurrency: number;
  };
  baseline: Stats;
  /** A refused `run_typescript` call: the MCP round trip without any sandbox work. */
  mcpRoundTrip: Stats;
  warm: ScenarioResult;
  cold: ScenarioResult;
  concurrent: ScenarioResult;
  ratios: { warm: number; cold: number; concurrent: number };
  /** Our median over the median of the naive server's calls interleaved with the scenario. */
  ratiosToNaive: { warm: number; cold: number };
  targets: {
    warmMedian: { targetMs: number; actualMs: number; met: boolean };
    coldMedian: { targetMs: number; actualMs: number; met: boolean };
    idleRss: { targetMb: number; actualMb: number; met: boolean };
  };
}

interface CallOutcome {
  ok?: boolean;
  returnValue?: unknown;
  durationMs?: number;
  error?: { type?: string; message?: string };
}

function log(message: string): void {
  console.error(`[bench] ${message}`);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function round(value: number, digits = 1): number {
  const scale = 10 ** digits;
  return Math.round(value * scale) / scale;
}

function stats(samples: number[]): Stats {
  if (samples.length === 0) throw new RangeError("Cannot summarize an empty sample");
  const sorted = [...samples].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  const median = sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
  // Nearest-rank percentile: the smallest sample with at least 95% of samples at or below it.
  const p95 = sorted[Math.min(sorted.length - 1, Math.ceil(sorted.length * 0.95) - 1)];
  return {
    n: sorted.length,
    medianMs: round(median, 2),
    p95Ms: round(p95, 2),
    minMs: round(sorted[0], 2),
    maxMs: round(sorted[sorted.length - 1], 2),
  };
}

async function residentMb(pid: number): Promise<number> {
  const status = await Deno.readTextFile(`/proc/${pid}/status`);
  const match = /^VmRSS:\s+(\d+)\s+kB/m.exec(status);
  if (!match) throw new Error(`Cannot read VmRSS of process ${pid}: no VmRSS line`);
  return Number(match[1]) / 1024;
}

async function childPids(pid: number): Promise<number[]> {
  const pids: number[] = [];
  for await (const task of Deno.readDir(`/proc/${pid}/task`)) {
    const text = await Deno.readTextFile(`/proc/${pid}/task/${task.name}/children`)
      .catch(() => "");
    pids.push(...text.split(/\s+/).filter(Boolean).map(Number));
  }
  return pids;
}

async function childrenRssMb(pid: number): Promise<number> {
  let total = 0;
  for (const child of await childPids(pid)) total += await residentMb(child).catch(() => 0);
  return total;
}

async function isRunning(pid: number): Promise<boolean> {
  try {
    const status = await Deno.readTextFile(`/proc/${pid}/status`);
    return !/^State:\s+Z/m.test(status);
  } catch {
    return false;
  }
}

async function loadAverage(): Promise<string> {
  const text = await Deno.readTextFile("/proc/loadavg").catch(() => "unknown");
  return text.split(" ").slice(0, 3).join(" ");
}

async function machine(loadBefore: string): Promise<Report["machine"]> {
  const cpuinfo = await Deno.readTextFile("/proc/cpuinfo").catch(() => "");
  return {
    nproc: navigator.hardwareConcurrency,
    cpu: /^model name\s*:\s*(.+)$/m.exec(cpuinfo)?.[1]?.trim() ?? "unknown",
    deno: Deno.version.deno,
    v8: Deno.version.v8,
    os: `${Deno.build.os} ${Deno.osRelease()}`,
    loadBefore,
    loadAfter: await loadAverage(),
  };
}

/** Times `deno run --no-config -q tiny.ts` per call: the floor of any spawn-per-call design. */
async function runBaseline(iterations: number, warmup: number): Promise<Stats> {
  const dir = await Deno.makeTempDir({ prefix: "ce-bench-baseline-" });
  try {
    const script = join(dir, "tiny.ts");
    await Deno.writeTextFile(script, "const one: number = 1;\nif (one !== 1) Deno.exit(1);\n");
    const command = new Deno.Command(Deno.execPath(), {
      args: ["run", "--no-config", "-q", script],
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    });
    const samples: number[] = [];
    for (let i = 0; i < warmup + iterations; i++) {
      const started = performance.now();
      const output = await command.output();
      const elapsed = performance.now() - started;
      if (!output.success) {
        throw new Error(
          `Baseline script failed with code ${output.code}: ${
            new TextDecoder().decode(output.stderr)
          }`,
        );
      }
      if (i >= warmup) samples.push(elapsed);
    }
    return stats(samples);
  } finally {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

interface BenchServer {
  client: Client;
  pid: number;
  /** One `run_typescript` of CODE; `serverMs` is NaN for the naive server. */
  call(): Promise<{ latencyMs: number; serverMs: number }>;
  /** A `run_typescript` call the server refuses before it touches a sandbox. */
  callRefused(): Promise<number>;
  close(): Promise<void>;
}

function callerDenoDir(): string {
  const env = (name: string) => Deno.env.get(name) || undefined;
  const home = env("HOME") ?? "/";
  return env("DENO_DIR") ?? join(env("XDG_CACHE_HOME") ?? join(home, ".cache"), "deno");
}

/**
 * Starts `deno run -A main.ts serve` (or, with "naive", the naive spawn-per-call server) with a
 * private TMPDIR and connects an SDK client.
 */
async function startServer(warmPool: number | "naive"): Promise<BenchServer> {
  const tempDir = await Deno.makeTempDir({ prefix: "ce-bench-" });
  // A private HOME: no user settings, no upstream servers from ~/.claude.json and the like, and
  // a fresh cache for the sandbox children. Deno's own cache stays the caller's, so that the
  // server starts from what is already downloaded and compiled.
  const env: Record<string, string> = {
    PATH: Deno.env.get("PATH") ?? "",
    HOME: tempDir,
    TMPDIR: tempDir,
    DENO_DIR: callerDenoDir(),
    CODE_EXECUTOR_LOG_LEVEL: "warn",
    CODE_EXECUTOR_WARM_POOL: String(warmPool === "naive" ? 0 : warmPool),
    // Python would build its snapshot and boot its own pool in the background of this run.
    PYTHON_ENABLED: "false",
  };
  const transport = new StdioClientTransport({
    command: Deno.execPath(),
    args: warmPool === "naive" ? ["run", "-A", NAIVE_SERVER] : ["run", "-A", "main.ts", "serve"],
    cwd: ROOT,
    env,
    stderr: "pipe",
  });
  let stderrTail = "";
  transport.stderr?.on("data", (chunk: Uint8Array) => {
    stderrTail = (stderrTail + new TextDecoder().decode(chunk)).slice(-8192);
  });
  const client = new Client({ name: "code-executor-bench", version: "1.0.0" });
  let pid: number | null = null;

  const close = async () => {
    await client.close().catch(() => {});
    if (pid !== null) {
      const deadline = Date.now() + 5_000;
      while (await isRunning(pid) && Date.now() < deadline) await sleep(20);
      if (await isRunning(pid)) {
        log(`server ${pid} did not exit after the client closed; killing it`);
        try {
          Deno.kill(pid, "SIGKILL");
        } catch {
          // It exited in the meantime.
        }
      }
    }
    await Deno.remove(tempDir, { recursive: true }).catch(() => {});
  };

  try {
    await client.connect(transport);
    pid = transport.pid;
    if (pid === null) throw new Error("The stdio transport has no server process");
  } catch (error) {
    await close();
    throw new Error(`Cannot start the server: ${(error as Error).message}\n${stderrTail}`, {
      cause: error,
    });
  }

  return {
    client,
    pid,
    async call() {
      const started = performance.now();
      const result = await client.callTool({ name: "run_typescript", arguments: { code: CODE } });
      const latencyMs = performance.now() - started;
      if (warmPool === "naive") {
        const text = (result.content as Array<{ text?: string }> | undefined)?.[0]?.text;
        if (result.isError || text?.trim() !== "1") {
          throw new Error(`The naive server did not print 1: ${JSON.stringify(result)}`);
        }
        return { latencyMs, serverMs: NaN };
      }
      const outcome = (result.structuredContent ?? {}) as CallOutcome;
      if (result.isError || outcome.ok !== true || outcome.returnValue !== 1) {
        throw new Error(
          `run_typescript did not return 1: ${
            outcome.error
              ? `${outcome.error.type}: ${outcome.error.message}`
              : JSON.stringify(result)
          }\n${stderrTail}`,
        );
      }
      return { latencyMs, serverMs: outcome.durationMs ?? NaN };
    },
    async callRefused() {
      const started = performance.now();
      const result = await client.callTool({
        name: "run_typescript",
        arguments: { code: CODE, timeoutMs: REFUSED_TIMEOUT_MS },
      });
      const latencyMs = performance.now() - started;
      if (!result.isError) throw new Error("The server ran a call it should have refused");
      return latencyMs;
    },
    close,
  };
}

async function idleRss(server: BenchServer): Promise<{ host: number; children: number }> {
  await server.client.listTools();
  await sleep(SETTLE_MS);
  return {
    host: await residentMb(server.pid),
    children: await childrenRssMb(server.pid),
  };
}

/**
 * Sequential calls to our server, each followed (after the same pause) by one call to the naive
 * server when it is given, so that both are measured under the same load.
 */
async function runSequential(
  warmPool: number,
  options: { iterations: number; warmup: number; pauseMs: number },
  naive?: BenchServer,
  onRoundTrip?: (roundTrip: Stats) => void,
): Promise<ScenarioResult> {
  const server = await startServer(warmPool);
  try {
    const idle = await idleRss(server);
    if (onRoundTrip) {
      const samples: number[] = [];
      for (let i = 0; i < options.warmup + options.iterations; i++) {
        const latencyMs = await server.callRefused();
        if (i >= options.warmup) samples.push(latencyMs);
      }
      onRoundTrip(stats(samples));
      await sleep(options.pauseMs);
    }
    const latencies: number[] = [];
    const serverTimes: number[] = [];
    const naiveLatencies: number[] = [];
    for (let i = 0; i < options.warmup + options.iterations; i++) {
      if (options.pauseMs > 0) await sleep(options.pauseMs);
      const { latencyMs, serverMs } = await server.call();
      if (i >= options.warmup) {
        latencies.push(latencyMs);
        serverTimes.push(serverMs);
      }
      if (!naive) continue;
      if (options.pauseMs > 0) await sleep(options.pauseMs);
      const naiveCall = await naive.call();
      if (i >= options.warmup) naiveLatencies.push(naiveCall.latencyMs);
    }
    await sleep(SETTLE_MS / 2);
    return {
      latency: stats(latencies),
      ...(naive ? { naive: stats(naiveLatencies) } : {}),
      serverDuration: stats(serverTimes),
      idleRssMb: round(idle.host),
      idleChildrenRssMb: round(idle.children),
      afterRssMb: round(await residentMb(server.pid)),
    };
  } finally {
    await server.close();
  }
}

async function runConcurrent(
  options: { iterations: number; pauseMs: number },
): Promise<ScenarioResult> {
  const server = await startServer(2);
  try {
    const idle = await idleRss(server);
    const perCaller = Math.max(1, Math.ceil(options.iterations / CONCURRENCY));
    const loop = async (calls: number, latencies: number[], serverTimes: number[]) => {
      for (let i = 0; i < calls; i++) {
        const { latencyMs, serverMs } = await server.call();
        latencies.push(latencyMs);
        serverTimes.push(serverMs);
      }
    };
    // One concurrent round to warm up, then let the pool refill before measuring.
    await Promise.all(Array.from({ length: CONCURRENCY }, () => loop(1, [], [])));
    await sleep(Math.max(options.pauseMs, 500));
    const latencies: number[] = [];
    const serverTimes: number[] = [];
    const started = performance.now();
    await Promise.all(
      Array.from({ length: CONCURRENCY }, () => loop(perCaller, latencies, serverTimes)),
    );
    const elapsedMs = performance.now() - started;
    await sleep(SETTLE_MS / 2);
    return {
      latency: stats(latencies),
      serverDuration: stats(serverTimes),
      throughputPerSec: round(latencies.length / (elapsedMs / 1000)),
      idleRssMb: round(idle.host),
      idleChildrenRssMb: round(idle.children),
      afterRssMb: round(await residentMb(server.pid)),
    };
  } finally {
    await server.close();
  }
}

function positiveInt(raw: string | undefined, name: string, fallback: number, min = 1): number {
  if (raw === undefined) return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min) {
    throw new TypeError(`Invalid --${name} "${raw}": expected an integer of at least ${min}`);
  }
  return value;
}

function ratio(value: number, base: number): number {
  return round(value / base, 2);
}

function renderMarkdown(report: Report): string {
  const { baseline, mcpRoundTrip, warm, cold, concurrent, ratios, ratiosToNaive, targets } = report;
  const row = (cells: Array<string | number>) => `| ${cells.join(" | ")} |`;
  const yes = (met: boolean) => (met ? "met" : "**not met**");
  const lines = [
    `# run_typescript benchmark (${report.date})`,
    "",
    `Machine: ${report.machine.nproc} CPUs, ${report.machine.cpu}, ${report.machine.os}, ` +
    `Deno ${report.machine.deno} (V8 ${report.machine.v8}); load average ` +
    `${report.machine.loadBefore} before, ${report.machine.loadAfter} after`,
    "",
    `Command: \`${report.command}\``,
    "",
    `Code: \`${CODE}\`; ${report.options.iterations} measured calls per scenario after ` +
    `${report.options.warmup} warm-up calls; warm scenario pauses ${report.options.pauseMs} ms ` +
    "before each call so the pool has refilled, cold " +
    `${report.options.coldPauseMs} ms. Each call of ours is followed, after the same pause, by ` +
    "a call to the naive spawn-per-call server (`bench/_naive_server.ts`): compare ours / naive.",
    "",
    row([
      "scenario",
      "n",
      "median ms",
      "p95 ms",
      "min ms",
      "median / baseline",
      "median / naive",
      "server durationMs median",
      "throughput calls/s",
    ]),
    row(["---", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:"]),
    ...([
      ["baseline: `deno run` per call", baseline],
      ["naive server, interleaved with warm", warm.naive!],
      ["naive server, interleaved with cold", cold.naive!],
      ["MCP round trip only (refused call, no sandbox)", mcpRoundTrip],
    ] as const).map(([name, s]) =>
      row([
        name,
        s.n,
        s.medianMs,
        s.p95Ms,
        s.minMs,
        ratio(s.medianMs, baseline.medianMs).toFixed(2),
        "",
        "",
        "",
      ])
    ),
    ...([
      ["warm pool on (2), sequential", warm, ratios.warm, ratiosToNaive.warm],
      ["warm pool off, sequential", cold, ratios.cold, ratiosToNaive.cold],
      [`${CONCURRENCY} concurrent callers, warm pool on`, concurrent, ratios.concurrent, undefined],
    ] as const)
      .map(([name, s, r, n]) =>
        row([
          name,
          s.latency.n,
          s.latency.medianMs,
          s.latency.p95Ms,
          s.latency.minMs,
          r.toFixed(2),
          n === undefined ? "" : `**${n.toFixed(2)}**`,
          s.serverDuration.medianMs,
          s.throughputPerSec ?? "",
        ])
      ),
    "",
    row(["server", "idle host RSS MB", "idle children RSS MB", "host RSS MB after calls"]),
    row(["---", "---:", "---:", "---:"]),
    ...([["warm pool on", warm], ["warm pool off", cold], ["concurrent", concurrent]] as const)
      .map(([name, s]) => row([name, s.idleRssMb, s.idleChildrenRssMb, s.afterRssMb])),
    "",
    row(["target", "goal", "measured", "status"]),
    row(["---", "---:", "---:", "---"]),
    row([
      "warm median",
      `≤ ${targets.warmMedian.targetMs} ms`,
      `${targets.warmMedian.actualMs} ms`,
      yes(targets.warmMedian.met),
    ]),
    row([
      "cold median",
      `≤ ${targets.coldMedian.targetMs} ms`,
      `${targets.coldMedian.actualMs} ms`,
      yes(targets.coldMedian.met),
    ]),
    row([
      "idle host RSS",
      `≤ ${targets.idleRss.targetMb} MB`,
      `${targets.idleRss.actualMb} MB`,
      yes(targets.idleRss.met),
    ]),
    "",
  ];
  return lines.join("\n");
}

async function main(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      iterations: { type: "string" },
      warmup: { type: "string" },
      "pause-ms": { type: "string" },
      "cold-pause-ms": { type: "string" },
      json: { type: "boolean" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help) {
    console.log(
      "Usage: deno run -A bench/run_typescript.ts [--iterations N] [--warmup N] [--pause-ms MS] [--cold-pause-ms MS] [--json]",
    );
    return;
  }
  const options = {
    iterations: positiveInt(values.iterations, "iterations", 60),
    warmup: positiveInt(values.warmup, "warmup", 5, 0),
    pauseMs: positiveInt(values["pause-ms"], "pause-ms", 250, 0),
    coldPauseMs: positiveInt(values["cold-pause-ms"], "cold-pause-ms", 50, 0),
    concurrency: CONCURRENCY,
  };

  const loadBefore = await loadAverage();
  log(`baseline: ${options.iterations} × deno run --no-config -q tiny.ts`);
  const baseline = await runBaseline(options.iterations, options.warmup);
  log("naive spawn-per-call server: starting");
  const naive = await startServer("naive");
  let warm: ScenarioResult;
  let cold: ScenarioResult;
  let mcpRoundTrip: Stats | undefined;
  try {
    log(
      `warm pool on: ${options.iterations} sequential calls, ${options.pauseMs} ms apart, each followed by a naive call`,
    );
    warm = await runSequential(2, options, naive, (roundTrip) => mcpRoundTrip = roundTrip);
    if (!mcpRoundTrip) throw new Error("The MCP round trip was not measured");
    log(
      `warm pool off: ${options.iterations} sequential calls, ${options.coldPauseMs} ms apart, each followed by a naive call`,
    );
    cold = await runSequential(0, { ...options, pauseMs: options.coldPauseMs }, naive);
  } finally {
    await naive.close();
  }
  log(`${CONCURRENCY} concurrent callers`);
  const concurrent = await runConcurrent(options);

  const report: Report = {
    date: new Date().toISOString(),
    machine: await machine(loadBefore),
    command: ["deno run -A bench/run_typescript.ts", ...args].join(" "),
    options,
    baseline,
    mcpRoundTrip,
    warm,
    cold,
    concurrent,
    ratios: {
      warm: ratio(warm.latency.medianMs, baseline.medianMs),
      cold: ratio(cold.latency.medianMs, baseline.medianMs),
      concurrent: ratio(concurrent.latency.medianMs, baseline.medianMs),
    },
    ratiosToNaive: {
      warm: ratio(warm.latency.medianMs, warm.naive!.medianMs),
      cold: ratio(cold.latency.medianMs, cold.naive!.medianMs),
    },
    targets: {
      warmMedian: {
        targetMs: TARGETS.warmMedianMs,
        actualMs: warm.latency.medianMs,
        met: warm.latency.medianMs <= TARGETS.warmMedianMs,
      },
      coldMedian: {
        targetMs: TARGETS.coldMedianMs,
        actualMs: cold.latency.medianMs,
        met: cold.latency.medianMs <= TARGETS.coldMedianMs,
      },
      idleRss: {
        targetMb: TARGETS.idleRssMb,
        actualMb: Math.max(warm.idleRssMb, cold.idleRssMb, concurrent.idleRssMb),
        met: Math.max(warm.idleRssMb, cold.idleRssMb, concurrent.idleRssMb) <= TARGETS.idleRssMb,
      },
    },
  };
  console.log(values.json ? JSON.stringify(report, null, 2) : renderMarkdown(report));
}

if (import.meta.main) {
  try {
    await main(Deno.args);
  } catch (error) {
    console.error(`bench: ${(error as Error).stack ?? error}`);
    Deno.exit(1);
  }
}
