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
 * - MCP round trip: a `run_typescript` call that the server refuses before any sandbox work,
 *   measured in a block before the warm calls and again interleaved with them (one refused call,
 *   a pause, then the warm call), so that the ratio warm / floor of issue #17 sees the same load;
 * - warm: warm pool on (`CODE_EXECUTOR_WARM_POOL=2`), sequential calls with a pause before each
 *   call so that the background refill has finished and every call takes a pre-started child;
 * - cold: warm pool off (`CODE_EXECUTOR_WARM_POOL=0`), sequential calls, each spawns a child
 *   (`--cold-pause-ms` apart, so that one call's clean-up does not overlap the next call), each
 *   preceded by a bare `deno run` of the baseline's script for the ratio cold / bare of issue #17;
 * - concurrent: 8 parallel `callTool` loops on one client, warm pool on (the server runs
 *   `limits.maxConcurrent` at once and queues the rest, so latency includes queueing);
 * - host RSS (VmRSS of the server process) once idle after start-up, and after the calls.
 *
 * Progress goes to stderr; stdout gets a markdown report, or JSON with `--json`.
 *
 * @module
 */
import { fileURLToPath } from "node:url";
import { ratio, repeat, round, sleep, type Stats, stats } from "./_stats.ts";
import {
  childPids,
  loadAverage,
  type MachineReport,
  machineReport,
  machineText,
  residentMb,
} from "./_machine.ts";
import {
  bareDenoRun,
  type CallTiming,
  concurrentCalls,
  connectStdio,
  type StdioServer,
  timeDenoRun,
  timedRefusal,
  timedRun,
} from "./_server.ts";
import { log, parseBenchArgs, printReport, row, runBench, status } from "./_report.ts";
import { ROOT, serverEnv } from "../tests/_env.ts";

const NAIVE_SERVER = fileURLToPath(new URL("./_naive_server.ts", import.meta.url));
const CODE = "return 1";
const SETTLE_MS = 2_000;
const CONCURRENCY = 8;
const TARGETS = { warmMedianMs: 8, coldMedianMs: 20, idleRssMb: 120 };

interface ScenarioResult {
  latency: Stats;
  /** The naive spawn-per-call server, its calls interleaved with these (sequential scenarios). */
  naive?: Stats;
  /** What was timed just before each of our calls: the MCP floor (warm), a bare `deno run` (cold). */
  beside?: Stats;
  /** The server's own `durationMs` (pool take or spawn → result), excluding MCP and disposal. */
  serverDuration: Stats;
  throughputPerSec?: number;
  idleRssMb: number;
  idleChildrenRssMb: number;
  afterRssMb: number;
}

interface Report {
  date: string;
  machine: MachineReport;
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
  /** Issue #17's ratios, each against its baseline measured call by call beside our calls. */
  floorRatios: { warmOverFloor: number; coldOverBare: number };
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

interface BenchServer {
  client: StdioServer["client"];
  pid: number;
  /** One `run_typescript` of CODE; `serverMs` is NaN for the naive server. */
  call(): Promise<CallTiming>;
  /** A `run_typescript` call the server refuses before it touches a sandbox. */
  callRefused(): Promise<number>;
  close(): Promise<void>;
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
  const env = {
    ...serverEnv(tempDir, { home: tempDir }),
    CODE_EXECUTOR_WARM_POOL: String(warmPool === "naive" ? 0 : warmPool),
    // Python would build its snapshot and boot its own pool in the background of this run.
    PYTHON_ENABLED: "false",
  };
  let server: StdioServer;
  try {
    server = await connectStdio(warmPool === "naive" ? "the naive server" : "the server", {
      command: Deno.execPath(),
      args: warmPool === "naive" ? ["run", "-A", NAIVE_SERVER] : ["run", "-A", "main.ts", "serve"],
      cwd: ROOT,
      env,
    });
  } catch (error) {
    await Deno.remove(tempDir, { recursive: true }).catch(() => {});
    throw error;
  }
  return {
    client: server.client,
    pid: server.pid,
    async call() {
      if (warmPool !== "naive") return await timedRun(server, "run_typescript", { code: CODE }, 1);
      const started = performance.now();
      const result = await server.client.callTool({
        name: "run_typescript",
        arguments: { code: CODE },
      });
      const latencyMs = performance.now() - started;
      const text = (result.content as Array<{ text?: string }> | undefined)?.[0]?.text;
      if (result.isError || text?.trim() !== "1") {
        throw new Error(`The naive server did not print 1: ${JSON.stringify(result)}`);
      }
      return { latencyMs, serverMs: NaN };
    },
    callRefused: () => timedRefusal(server, "run_typescript", CODE),
    async close() {
      await server.close();
      await Deno.remove(tempDir, { recursive: true }).catch(() => {});
    },
  };
}

async function childrenRssMb(pid: number): Promise<number> {
  let total = 0;
  for (const child of await childPids(pid)) total += await residentMb(child).catch(() => 0);
  return total;
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
  beside?: (server: BenchServer) => Promise<number>,
): Promise<ScenarioResult> {
  const server = await startServer(warmPool);
  try {
    const idle = await idleRss(server);
    if (onRoundTrip) {
      onRoundTrip(stats(await repeat(options, () => server.callRefused())));
      await sleep(options.pauseMs);
    }
    const naiveLatencies: number[] = [];
    const besideLatencies: number[] = [];
    const calls = await repeat(options, async (measured) => {
      if (beside) {
        if (options.pauseMs > 0) await sleep(options.pauseMs);
        const ms = await beside(server);
        if (measured) besideLatencies.push(ms);
      }
      if (options.pauseMs > 0) await sleep(options.pauseMs);
      const timing = await server.call();
      if (naive) {
        if (options.pauseMs > 0) await sleep(options.pauseMs);
        const naiveCall = await naive.call();
        if (measured) naiveLatencies.push(naiveCall.latencyMs);
      }
      return timing;
    });
    const latencies = calls.map((call) => call.latencyMs);
    const serverTimes = calls.map((call) => call.serverMs);
    await sleep(SETTLE_MS / 2);
    return {
      latency: stats(latencies),
      ...(naive ? { naive: stats(naiveLatencies) } : {}),
      ...(beside ? { beside: stats(besideLatencies) } : {}),
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
    // One concurrent round to warm up, then let the pool refill before measuring.
    await concurrentCalls(CONCURRENCY, 1, () => server.call());
    await sleep(Math.max(options.pauseMs, 500));
    const { latencies, serverTimes, elapsedMs } = await concurrentCalls(
      CONCURRENCY,
      perCaller,
      () => server.call(),
    );
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

function renderMarkdown(report: Report): string {
  const { baseline, mcpRoundTrip, warm, cold, concurrent, ratios, ratiosToNaive, targets } = report;
  const lines = [
    `# run_typescript benchmark (${report.date})`,
    "",
    `Machine: ${machineText(report.machine)}`,
    "",
    `Command: \`${report.command}\``,
    "",
    `Code: \`${CODE}\`; ${report.options.iterations} measured calls per scenario after ` +
    `${report.options.warmup} warm-up calls; warm scenario pauses ${report.options.pauseMs} ms ` +
    "before each call so the pool has refilled, cold " +
    `${report.options.coldPauseMs} ms. Each call of ours is followed, after the same pause, by ` +
    "a call to the naive spawn-per-call server (`bench/_naive_server.ts`): compare ours / naive. " +
    "Each warm call is preceded, after the same pause, by a refused call (the MCP floor), each " +
    "cold call by a bare `deno run` of the baseline's script: issue #17's ratios.",
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
      ["MCP round trip, interleaved with warm", warm.beside!],
      ["bare `deno run`, interleaved with cold", cold.beside!],
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
      status(targets.warmMedian.met),
    ]),
    row([
      "cold median",
      `≤ ${targets.coldMedian.targetMs} ms`,
      `${targets.coldMedian.actualMs} ms`,
      status(targets.coldMedian.met),
    ]),
    row([
      "idle host RSS",
      `≤ ${targets.idleRss.targetMb} MB`,
      `${targets.idleRss.actualMb} MB`,
      status(targets.idleRss.met),
    ]),
    ...([
      ["warm median / MCP floor after the same pause (issue #17)", warm, warm.beside!, 3],
      ["warm median / MCP floor back to back (issue #17)", warm, mcpRoundTrip, 3],
      ["cold median / bare `deno run`, interleaved (issue #17)", cold, cold.beside!, 1.3],
      ["cold median / bare `deno run`, earlier block (issue #17)", cold, baseline, 1.3],
    ] as const).map(([name, ours, base, goal]) => {
      const r = ratio(ours.latency.medianMs, base.medianMs);
      return row([
        name,
        `≤ ${goal}×`,
        `${r.toFixed(2)}× (${ours.latency.medianMs} / ${base.medianMs} ms)`,
        status(r <= goal),
      ]);
    }),
    "",
  ];
  return lines.join("\n");
}

async function main(args: string[]): Promise<void> {
  const parsed = parseBenchArgs(
    args,
    "Usage: deno run -A bench/run_typescript.ts [--iterations N] [--warmup N] [--pause-ms MS] [--cold-pause-ms MS] [--json]",
    {
      iterations: { fallback: 60 },
      warmup: { fallback: 5, min: 0 },
      pauseMs: { fallback: 250, min: 0 },
      coldPauseMs: { fallback: 50, min: 0 },
    },
  );
  if (!parsed) return;
  const options = { ...parsed.ints, concurrency: CONCURRENCY };

  const loadBefore = await loadAverage();
  log(`baseline: ${options.iterations} × deno run --no-config -q tiny.ts`);
  const baseline = await timeDenoRun(options.iterations, options.warmup);
  log("naive spawn-per-call server: starting");
  const naive = await startServer("naive");
  let warm: ScenarioResult;
  let cold: ScenarioResult;
  let mcpRoundTrip: Stats | undefined;
  try {
    log(
      `warm pool on: ${options.iterations} sequential calls, ${options.pauseMs} ms apart, each followed by a naive call`,
    );
    warm = await runSequential(
      2,
      options,
      naive,
      (roundTrip) => mcpRoundTrip = roundTrip,
      (server) => server.callRefused(),
    );
    if (!mcpRoundTrip) throw new Error("The MCP round trip was not measured");
    log(
      `warm pool off: ${options.iterations} sequential calls, ${options.coldPauseMs} ms apart, each preceded by a bare deno run and followed by a naive call`,
    );
    const bare = await bareDenoRun();
    try {
      cold = await runSequential(
        0,
        { ...options, pauseMs: options.coldPauseMs },
        naive,
        undefined,
        () => bare.run(),
      );
    } finally {
      await bare.close();
    }
  } finally {
    await naive.close();
  }
  log(`${CONCURRENCY} concurrent callers`);
  const concurrent = await runConcurrent(options);

  const report: Report = {
    date: new Date().toISOString(),
    machine: await machineReport(loadBefore),
    command: ["deno run -A bench/run_typescript.ts", ...args].join(" "),
    options,
    baseline,
    mcpRoundTrip,
    floorRatios: {
      warmOverFloor: ratio(warm.latency.medianMs, warm.beside!.medianMs),
      coldOverBare: ratio(cold.latency.medianMs, cold.beside!.medianMs),
    },
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
  printReport(parsed.json, report, renderMarkdown);
}

if (import.meta.main) await runBench(main);
