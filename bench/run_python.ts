/**
 * Latency, start-up, refill, memory and throughput of `run_python` with a trivial program
 * (`1 + 1`), measured through a real stdio MCP client (SDK v2) talking to
 * `deno run -A main.ts serve`, plus one in-process measurement of the Python warm pool with the
 * `Executor` API. A naive spawn-per-call baseline and the warm `run_typescript` median are timed
 * in the same process, so that results can be quoted as ratios.
 *
 * ```sh
 * deno run -A bench/run_python.ts [--iterations 40] [--warmup 3] [--pause-ms 1500]
 *   [--first-calls 3] [--refills 12] [--per-caller 8] [--skip-fresh-cache] [--quick] [--json]
 * ```
 *
 * `--quick` measures only the baselines, the refill, the warm calls and the concurrent callers
 * (no first calls, no empty cache, no pool off), for a quick comparison while working.
 *
 * Scenarios (warm-up calls are never counted):
 * - baseline: `deno run --no-config -q tiny.ts` per call, and warm `run_typescript` (`return 1`,
 *   TypeScript pool 2, Python off) as `bench/run_typescript.ts` measures it;
 * - in-process Pyodide: the seed product's shape, one shared Pyodide in a Deno process that runs
 *   every call with `runPythonAsync` (`bench/_inprocess_pyodide_server.ts`: no child, no fresh
 *   interpreter), called like the warm run_python, with the same pause before each call;
 * - refill, in process: `Executor.create()` with a Python pool of 2, then `pool.take()`,
 *   `pool.fill()`, `await pool.settled()`: one replacement child booted from the snapshot; and a
 *   full cycle, `runPython()` → `idle()` (the used child disposed) → `settled()` (pool full);
 * - first call: time from spawning the server to the first `run_python` result, with the
 *   snapshot in the real cache (one server process, `initialize` handshake as 2025-era clients
 *   do it, and the SDK v2 default connect that probes a disposable sibling server first), and
 *   once with an empty cache directory, which makes the server build the snapshot first;
 * - warm: Python pool 2, sequential calls with a pause before each, so that the pool has
 *   refilled and every call takes a pre-started child;
 * - pool off: `CODE_EXECUTOR_PYTHON_WARM_POOL=0`, every call boots a child from the snapshot;
 * - concurrent: 4 callers in parallel on one client, Python pool 2 (the default
 *   `limits.maxConcurrent` is 4);
 * - RSS: VmRSS (and PSS) of each idle pooled child, found by scanning `/proc/<pid>/cmdline` for
 *   `py_host.ts` with a working directory under the server's private TMPDIR.
 *
 * Every server gets a private TMPDIR and HOME (no settings file, no upstream servers) but
 * XDG_CACHE_HOME pointing at the real cache, so that the Pyodide snapshot in
 * `~/.cache/code-executor/pyodide` is reused; `CODE_EXECUTOR_WARM_POOL=0` keeps TypeScript
 * children from competing for the CPU. Progress goes to stderr; stdout gets a markdown report, or
 * JSON with `--json`.
 *
 * @module
 */
import { ratio, repeat, round, sleep, type Stats, stats } from "./_stats.ts";
import {
  loadAverage,
  type MachineReport,
  machineReport,
  machineText,
  residentMb,
  statusMb,
} from "./_machine.ts";
import {
  type CallTiming,
  concurrentCalls,
  connectStdio,
  type StdioServer,
  timeDenoRun,
  timedRefusal,
  timedRun,
} from "./_server.ts";
import { log, parseBenchArgs, printReport, row, runBench, status } from "./_report.ts";
import { cacheHome, ROOT, serverEnv } from "../tests/_env.ts";
import { sandboxPids } from "../tests/_proc.ts";
import { resolveSettings } from "../src/config/settings.ts";
import { Executor } from "../src/exec/executor.ts";
import type { WarmPool } from "../src/exec/child/warm_pool.ts";
import type { PyChild } from "../src/exec/python/child.ts";
import { createLogger } from "../src/log.ts";

const PY_CODE = "1 + 1";
const PY_VALUE = 2;
const TS_CODE = "return 1";
const SETTLE_MS = 2_000;
const CONCURRENCY = 4;
const SNAPSHOT_BUILT = /Built the Pyodide snapshot \S+ \((\d+) bytes\) in (\d+) ms/;
const TARGETS = {
  warmMedianMs: 10,
  /** Issue #17: warm run_python ≤ the in-process Pyodide, and ≤ 1.5× warm run_typescript. */
  warmToTs: 1.5,
  firstCallMs: 1_500,
  refillMs: 400,
  childRssMb: 200,
  throughputPerSec: 8,
};

interface ChildMemory {
  pid: number;
  vmRssMb: number;
  rssAnonMb: number;
  rssFileMb: number;
  pssMb: number | null;
}

interface SequentialResult {
  latency: Stats;
  /** The server's own `durationMs` (pool take or spawn → result), excluding MCP and disposal. */
  serverDuration: Stats;
}

interface FirstCallResult {
  /** Starts during which the server had to build the snapshot first (should be 0). */
  snapshotBuilds: number;
  /** Spawn of the server → `connect()` resolved. */
  spawnToConnected: Stats;
  /** Spawn of the server → first `run_python` result. */
  spawnToResult: Stats;
  /** `connect()` resolved → first `run_python` result. */
  connectedToResult: Stats;
  serverDuration: Stats;
}

interface FreshCacheResult {
  spawnToResultMs: number;
  connectedToResultMs: number;
  serverDurationMs: number;
  /** From the server's debug log: the whole snapshot build, process start included. */
  snapshotBuildMs: number | null;
  snapshotBytes: number | null;
}

interface RefillResult {
  /** `pool.take()` → replacement ready (`pool.fill()`, `await pool.settled()`). */
  refill: Stats;
  /**
   * The `bootMs` the children report: Worker start → interpreter ready, inside the child (the
   * Worker reads the snapshot itself, so this includes the read).
   */
  childBoot: Stats;
  fromSnapshot: boolean;
  /** `runPython()` wall time in process (no MCP), and the server's `durationMs`. */
  run: Stats;
  runDuration: Stats;
  /** Result returned → used child disposed (`executor.idle()`). */
  dispose: Stats;
  /** Result returned → pool full again (`idle()`, then `settled()`). */
  resultToFull: Stats;
}

interface Report {
  date: string;
  machine: MachineReport;
  command: string;
  /** The code measured: HEAD and the files that differed from it (other work in progress). */
  code: { commit: string; dirty: string[] };
  options: Options;
  baseline: Stats;
  tsWarm: SequentialResult;
  /** The seed product's shape: one shared in-process Pyodide (`runPythonAsync`), no isolation. */
  inprocess: SequentialResult;
  refill: RefillResult;
  firstCall: { singleSpawn: FirstCallResult; sdkDefaultConnect: FirstCallResult } | null;
  freshCache: FreshCacheResult | null;
  /** A refused `run_python` call: the MCP round trip without any sandbox work. */
  mcpRoundTrip: Stats;
  warm: SequentialResult;
  poolOff: SequentialResult | null;
  concurrent: SequentialResult & { throughputPerSec: number; calls: number; elapsedMs: number };
  memory: {
    idleChildren: ChildMemory[];
    afterChildren: ChildMemory[];
    idleHostMb: number;
    afterHostMb: number;
  };
  ratios: {
    warmToTsWarm: number;
    warmToInprocess: number;
    warmToBaseline: number;
    firstCallToBaseline: number | null;
    refillToBaseline: number;
    poolOffToBaseline: number | null;
  };
  targets: Record<string, { goal: string; actual: string; met: boolean | null }>;
}

interface Options {
  iterations: number;
  warmup: number;
  pauseMs: number;
  firstCalls: number;
  refills: number;
  perCaller: number;
  freshCache: boolean;
  quick: boolean;
}

async function childMemory(pid: number): Promise<ChildMemory> {
  const fields = await statusMb(pid);
  // PSS shares the deno binary's pages between the processes that map them: the fairer cost.
  const rollup = await Deno.readTextFile(`/proc/${pid}/smaps_rollup`).catch(() => "");
  const pss = /^Pss:\s+(\d+)\s+kB/m.exec(rollup);
  return {
    pid,
    vmRssMb: round(fields.VmRSS ?? NaN),
    rssAnonMb: round(fields.RssAnon ?? NaN),
    rssFileMb: round(fields.RssFile ?? NaN),
    pssMb: pss ? round(Number(pss[1]) / 1024) : null,
  };
}

/** Python children of the server whose private TMPDIR is `tempDir`. */
async function pythonChildren(tempDir: string): Promise<number[]> {
  // Children run in a private directory under the server's temp root, our TMPDIR.
  return (await sandboxPids(tempDir, ["py_host.ts"])).sort((a, b) => a - b);
}

async function gitState(): Promise<Report["code"]> {
  const git = async (...args: string[]) => {
    const output = await new Deno.Command("git", {
      args,
      cwd: ROOT,
      stdout: "piped",
      stderr: "null",
    })
      .output().catch(() => undefined);
    return output?.success ? new TextDecoder().decode(output.stdout) : "";
  };
  const commit = (await git("log", "-1", "--format=%h %s")).trim() || "unknown";
  const dirty = (await git("status", "--porcelain")).split("\n").filter(Boolean)
    .map((line) => line.trim());
  return { commit, dirty };
}

interface ServerOptions {
  /** `CODE_EXECUTOR_PYTHON_WARM_POOL`; Python is off when null. */
  pythonPool: number | null;
  /** `CODE_EXECUTOR_WARM_POOL`. */
  tsPool: number;
  /** `XDG_CACHE_HOME` of the server; the real one by default. */
  cacheHome?: string;
  /** Skip the SDK's `server/discover` probe on a sibling process: one spawn, `initialize`. */
  singleSpawn?: boolean;
  logLevel?: string;
}

interface BenchServer extends StdioServer {
  tempDir: string;
  call(tool: "run_python" | "run_typescript"): Promise<CallTiming>;
  /** A `run_python` call the server refuses before it touches a sandbox. */
  callRefused(): Promise<number>;
}

/** Starts `deno run -A main.ts serve` with a private TMPDIR and HOME and connects a client. */
async function startServer(options: ServerOptions): Promise<BenchServer> {
  const tempDir = await Deno.realPath(await Deno.makeTempDir({ prefix: "ce-bench-py-" }));
  // The server's own modules come from the caller's Deno cache, already compiled; the Pyodide
  // snapshot from the caller's XDG cache unless `cacheHome` says otherwise.
  const env: Record<string, string> = {
    ...serverEnv(tempDir, { home: tempDir, sharedCache: true }),
    XDG_CACHE_HOME: options.cacheHome ?? cacheHome(),
    CODE_EXECUTOR_LOG_LEVEL: options.logLevel ?? "warn",
    CODE_EXECUTOR_WARM_POOL: String(options.tsPool),
    PYTHON_ENABLED: String(options.pythonPool !== null),
    CODE_EXECUTOR_PYTHON_WARM_POOL: String(options.pythonPool ?? 0),
  };
  // The product's default: the pool grows under a burst (tests keep it at its size).
  delete env.CODE_EXECUTOR_PYTHON_WARM_POOL_BURST;
  // The server kills its children on exit; wait for them so that the next scenario starts on an
  // idle machine, and never leave one behind.
  const reapChildren = async () => {
    const deadline = Date.now() + 5_000;
    let left = await pythonChildren(tempDir);
    while (left.length > 0 && Date.now() < deadline) {
      await sleep(50);
      left = await pythonChildren(tempDir);
    }
    for (const child of left) {
      log(`python child ${child} outlived its server; killing it`);
      try {
        Deno.kill(child, "SIGKILL");
      } catch {
        // Gone.
      }
    }
    await Deno.remove(tempDir, { recursive: true }).catch(() => {});
  };
  let server: StdioServer;
  try {
    server = await connectStdio("the server", {
      command: Deno.execPath(),
      args: ["run", "-A", "main.ts", "serve"],
      cwd: ROOT,
      env,
    }, {
      stderrBytes: 65_536,
      connect: options.singleSpawn ? { prior: { kind: "legacy" } } : {},
    });
  } catch (error) {
    await reapChildren();
    throw error;
  }
  return {
    ...server,
    tempDir,
    call: (tool) =>
      tool === "run_python"
        ? timedRun(server, tool, { code: PY_CODE }, PY_VALUE)
        : timedRun(server, tool, { code: TS_CODE }, 1),
    callRefused: () => timedRefusal(server, "run_python", PY_CODE),
    async close() {
      await server.close();
      await reapChildren();
    },
  };
}

/** Waits until the server has `count` Python children, then lets them finish booting. */
async function waitForPool(server: BenchServer, count: number): Promise<void> {
  const deadline = Date.now() + 60_000;
  while ((await pythonChildren(server.tempDir)).length < count) {
    if (Date.now() > deadline) {
      throw new Error(`The server did not start ${count} Python children\n${server.stderr()}`);
    }
    await sleep(100);
  }
  await sleep(SETTLE_MS);
}

async function runSequential(
  server: BenchServer,
  tool: "run_python" | "run_typescript",
  options: { iterations: number; warmup: number; pauseMs: number },
): Promise<SequentialResult> {
  const calls = await repeat(options, async () => {
    if (options.pauseMs > 0) await sleep(options.pauseMs);
    return await server.call(tool);
  });
  return {
    latency: stats(calls.map((call) => call.latencyMs)),
    serverDuration: stats(calls.map((call) => call.serverMs)),
  };
}

async function runTsReference(options: Options): Promise<SequentialResult> {
  const server = await startServer({ pythonPool: null, tsPool: 2 });
  try {
    await server.client.listTools();
    await sleep(SETTLE_MS);
    return await runSequential(server, "run_typescript", { ...options, pauseMs: 250 });
  } finally {
    await server.close();
  }
}

/** The seed product's shape: one shared Pyodide in a server process, called like ours. */
async function runInprocess(options: Options): Promise<SequentialResult> {
  const server = await connectStdio("the in-process Pyodide server", {
    command: Deno.execPath(),
    args: ["run", "-A", "bench/_inprocess_pyodide_server.ts"],
    cwd: ROOT,
    env: { ...Deno.env.toObject(), NO_COLOR: "1" },
  }, { connect: { prior: { kind: "legacy" } } });
  try {
    await server.client.listTools();
    await sleep(SETTLE_MS);
    const calls = await repeat(options, async () => {
      if (options.pauseMs > 0) await sleep(options.pauseMs);
      return await timedRun(server, "run_python", { code: PY_CODE }, PY_VALUE);
    });
    return {
      latency: stats(calls.map((call) => call.latencyMs)),
      serverDuration: stats(calls.map((call) => call.serverMs)),
    };
  } finally {
    await server.close();
  }
}

/** The Python pool through the `Executor` API, in this process. */
async function runRefill(options: Options): Promise<RefillResult> {
  const tempDir = await Deno.realPath(await Deno.makeTempDir({ prefix: "ce-bench-refill-" }));
  const settings = resolveSettings({
    sandbox: { warmPool: 0, tempDir },
    python: { warmPool: 2 },
  });
  const executor = await Executor.create(settings, { log: createLogger("warn") });
  try {
    const pool = await executor.runtime("python").pool() as WarmPool<PyChild>;
    pool.fill();
    await pool.settled();
    await sleep(SETTLE_MS);

    const refills: number[] = [];
    const boots: number[] = [];
    let fromSnapshot = true;
    for (let i = 0; i < options.warmup + options.refills; i++) {
      const started = performance.now();
      const child = pool.take();
      if (!child) throw new Error("The Python pool was empty after it had settled");
      pool.fill();
      await pool.settled();
      const elapsed = performance.now() - started;
      // The first two children were booted at start-up; later ones booted alone.
      if (i >= 2 && child.boot?.bootMs !== undefined) boots.push(child.boot.bootMs);
      fromSnapshot &&= child.boot?.fromSnapshot === true;
      await child.dispose();
      if (i >= options.warmup) refills.push(elapsed);
      await sleep(200);
    }

    const runs: number[] = [];
    const durations: number[] = [];
    const disposals: number[] = [];
    const toFull: number[] = [];
    for (let i = 0; i < options.warmup + options.refills; i++) {
      const started = performance.now();
      const result = await executor.runPython(PY_CODE);
      const returned = performance.now();
      if (!result.ok || result.returnValue !== PY_VALUE) {
        throw new Error(`runPython did not return ${PY_VALUE}: ${JSON.stringify(result)}`);
      }
      await executor.idle();
      const disposed = performance.now();
      await pool.settled();
      const full = performance.now();
      if (pool.idle !== 2) throw new Error(`The Python pool holds ${pool.idle} children, not 2`);
      if (i >= options.warmup) {
        runs.push(returned - started);
        durations.push(result.durationMs);
        disposals.push(disposed - returned);
        toFull.push(full - returned);
      }
      await sleep(500);
    }
    return {
      refill: stats(refills),
      childBoot: stats(boots),
      fromSnapshot,
      run: stats(runs),
      runDuration: stats(durations),
      dispose: stats(disposals),
      resultToFull: stats(toFull),
    };
  } finally {
    await executor.close();
    await Deno.remove(tempDir, { recursive: true }).catch(() => {});
  }
}

async function firstCall(
  options: Omit<ServerOptions, "pythonPool" | "tsPool">,
): Promise<{
  spawnToConnected: number;
  spawnToResult: number;
  serverMs: number;
  stderr: string;
  builtSnapshot: boolean;
}> {
  const server = await startServer({ ...options, pythonPool: 2, tsPool: 0 });
  try {
    const { serverMs } = await server.call("run_python");
    const resultAt = performance.now();
    return {
      spawnToConnected: server.connectedAt - server.spawnedAt,
      spawnToResult: resultAt - server.spawnedAt,
      serverMs,
      stderr: server.stderr(),
      builtSnapshot: SNAPSHOT_BUILT.test(server.stderr()),
    };
  } finally {
    await server.close();
  }
}

async function runFirstCalls(count: number, singleSpawn: boolean): Promise<FirstCallResult> {
  const connected: number[] = [];
  const results: number[] = [];
  const afterConnect: number[] = [];
  const durations: number[] = [];
  let snapshotBuilds = 0;
  for (let i = 0; i < count; i++) {
    // Debug logging tells whether the server found the snapshot or had to build it.
    const run = await firstCall({ singleSpawn, logLevel: "debug" });
    if (run.builtSnapshot) snapshotBuilds++;
    connected.push(run.spawnToConnected);
    results.push(run.spawnToResult);
    afterConnect.push(run.spawnToResult - run.spawnToConnected);
    durations.push(run.serverMs);
    // Let the machine go idle again: the next start should not compete with this one's exit.
    await sleep(SETTLE_MS);
  }
  return {
    snapshotBuilds,
    spawnToConnected: stats(connected),
    spawnToResult: stats(results),
    connectedToResult: stats(afterConnect),
    serverDuration: stats(durations),
  };
}

async function runFreshCache(): Promise<FreshCacheResult> {
  const cacheHome = await Deno.makeTempDir({ prefix: "ce-bench-cache-" });
  try {
    const run = await firstCall({ singleSpawn: true, cacheHome, logLevel: "debug" });
    const built = SNAPSHOT_BUILT.exec(run.stderr);
    return {
      spawnToResultMs: round(run.spawnToResult),
      connectedToResultMs: round(run.spawnToResult - run.spawnToConnected),
      serverDurationMs: run.serverMs,
      snapshotBuildMs: built ? Number(built[2]) : null,
      snapshotBytes: built ? Number(built[1]) : null,
    };
  } finally {
    await Deno.remove(cacheHome, { recursive: true }).catch(() => {});
  }
}

async function runWarm(options: Options): Promise<{
  warm: SequentialResult;
  mcpRoundTrip: Stats;
  memory: Report["memory"];
}> {
  const server = await startServer({ pythonPool: 2, tsPool: 0, singleSpawn: true });
  try {
    await server.client.listTools();
    await waitForPool(server, 2);
    const idleChildren = await Promise.all(
      (await pythonChildren(server.tempDir)).map(childMemory),
    );
    const idleHostMb = round(await residentMb(server.pid));
    const refused = await repeat(options, () => server.callRefused());
    const warm = await runSequential(server, "run_python", options);
    await sleep(options.pauseMs + SETTLE_MS);
    const afterChildren = await Promise.all(
      (await pythonChildren(server.tempDir)).map(childMemory),
    );
    return {
      warm,
      mcpRoundTrip: stats(refused),
      memory: {
        idleChildren,
        afterChildren,
        idleHostMb,
        afterHostMb: round(await residentMb(server.pid)),
      },
    };
  } finally {
    await server.close();
  }
}

async function runPoolOff(options: Options): Promise<SequentialResult> {
  const server = await startServer({ pythonPool: 0, tsPool: 0, singleSpawn: true });
  try {
    await server.client.listTools();
    await sleep(SETTLE_MS);
    const iterations = Math.max(5, Math.ceil(options.iterations / 4));
    return await runSequential(server, "run_python", {
      iterations,
      warmup: Math.min(options.warmup, 2),
      pauseMs: 200,
    });
  } finally {
    await server.close();
  }
}

async function runConcurrent(options: Options): Promise<Report["concurrent"]> {
  const server = await startServer({ pythonPool: 2, tsPool: 0, singleSpawn: true });
  try {
    await server.client.listTools();
    await waitForPool(server, 2);
    // One concurrent round to warm up, then let the pool refill before measuring.
    await concurrentCalls(CONCURRENCY, 1, () => server.call("run_python"));
    await sleep(options.pauseMs + SETTLE_MS);
    const { latencies, serverTimes, elapsedMs } = await concurrentCalls(
      CONCURRENCY,
      options.perCaller,
      () => server.call("run_python"),
    );
    return {
      latency: stats(latencies),
      serverDuration: stats(serverTimes),
      throughputPerSec: round(latencies.length / (elapsedMs / 1000), 2),
      calls: latencies.length,
      elapsedMs: round(elapsedMs),
    };
  } finally {
    await server.close();
  }
}

function firstCallRows(
  firstCall: NonNullable<Report["firstCall"]>,
  statRow: (name: string, s: Stats) => string,
): string[] {
  return [
    row(["first call after server start", "n", "median ms", "p95 ms", "min ms", "max ms"]),
    row(["---", "---:", "---:", "---:", "---:", "---:"]),
    statRow("one spawn + initialize: spawn → first result", firstCall.singleSpawn.spawnToResult),
    statRow("– spawn → connected", firstCall.singleSpawn.spawnToConnected),
    statRow("– connected → first result", firstCall.singleSpawn.connectedToResult),
    statRow("– server durationMs", firstCall.singleSpawn.serverDuration),
    statRow(
      "SDK v2 default connect (sibling probe): spawn → first result",
      firstCall.sdkDefaultConnect.spawnToResult,
    ),
    statRow("– spawn → connected", firstCall.sdkDefaultConnect.spawnToConnected),
    statRow("– connected → first result", firstCall.sdkDefaultConnect.connectedToResult),
    statRow("– server durationMs", firstCall.sdkDefaultConnect.serverDuration),
    "",
    ...[firstCall.singleSpawn, firstCall.sdkDefaultConnect]
      .filter((f) => f.snapshotBuilds > 0)
      .map((f) => `**Warning**: ${f.snapshotBuilds} server starts built the snapshot first.\n`),
  ];
}

function renderMarkdown(report: Report): string {
  const statRow = (name: string, s: Stats, extra: Array<string | number> = []) =>
    row([name, s.n, s.medianMs, s.p95Ms, s.minMs, s.maxMs, ...extra]);
  const { baseline, tsWarm, refill, firstCall, freshCache, warm, poolOff, concurrent } = report;
  const base = baseline.medianMs;
  const r = (value: number) => ratio(value, base).toFixed(2);
  const memoryRow = (name: string, children: ChildMemory[]) =>
    children.map((c) => row([name, c.pid, c.vmRssMb, c.rssAnonMb, c.rssFileMb, c.pssMb ?? "n/a"]));
  const lines = [
    `# run_python benchmark (${report.date})`,
    "",
    `Machine: ${machineText(report.machine)}`,
    "",
    `Command: \`${report.command}\``,
    "",
    `Code: ${report.code.commit}` +
    (report.code.dirty.length
      ? `, plus uncommitted changes in ${report.code.dirty.length} files (${
        report.code.dirty.join(", ")
      })`
      : ", clean tree"),
    "",
    `Program: \`${PY_CODE}\`; warm: ${report.options.iterations} measured calls after ` +
    `${report.options.warmup} warm-up calls, ${report.options.pauseMs} ms pause before each.`,
    "",
    row(["scenario", "n", "median ms", "p95 ms", "min ms", "max ms", "median / baseline"]),
    row(["---", "---:", "---:", "---:", "---:", "---:", "---:"]),
    statRow("baseline: `deno run` per call", baseline, ["1.00"]),
    statRow("run_typescript, warm pool 2 (same run)", tsWarm.latency, [r(tsWarm.latency.medianMs)]),
    statRow("in-process Pyodide, one shared interpreter (same run)", report.inprocess.latency, [
      r(report.inprocess.latency.medianMs),
    ]),
    statRow("– server durationMs", report.inprocess.serverDuration, [""]),
    statRow("MCP round trip only (refused run_python)", report.mcpRoundTrip, [
      r(report.mcpRoundTrip.medianMs),
    ]),
    statRow("run_python, warm pool 2, sequential", warm.latency, [r(warm.latency.medianMs)]),
    statRow("– server durationMs", warm.serverDuration, [""]),
    ...(poolOff
      ? [
        statRow("run_python, pool off (boot per call)", poolOff.latency, [
          r(poolOff.latency.medianMs),
        ]),
        statRow("– server durationMs", poolOff.serverDuration, [""]),
      ]
      : []),
    statRow(
      `run_python, ${CONCURRENCY} concurrent callers, pool 2`,
      concurrent.latency,
      [r(concurrent.latency.medianMs)],
    ),
    statRow("– server durationMs", concurrent.serverDuration, [""]),
    "",
    `Throughput with ${CONCURRENCY} callers: ${concurrent.throughputPerSec} calls/s ` +
    `(${concurrent.calls} calls in ${concurrent.elapsedMs} ms).`,
    "",
    ...(firstCall
      ? firstCallRows(firstCall, statRow)
      : ["First calls not measured (--quick).", ""]),
    freshCache
      ? `Empty cache (snapshot built first): spawn → first result ${freshCache.spawnToResultMs} ms, ` +
        `connected → result ${freshCache.connectedToResultMs} ms, server durationMs ` +
        `${freshCache.serverDurationMs}; snapshot build ${freshCache.snapshotBuildMs ?? "?"} ms ` +
        `(${freshCache.snapshotBytes ?? "?"} bytes).`
      : "Empty-cache start not measured (--skip-fresh-cache).",
    "",
    row(["pool, in process (Executor API)", "n", "median ms", "p95 ms", "min ms", "max ms"]),
    row(["---", "---:", "---:", "---:", "---:", "---:"]),
    statRow("refill: take → replacement ready", refill.refill),
    statRow(
      `– child bootMs (Worker start → ready${refill.fromSnapshot ? ", from snapshot" : ""})`,
      refill.childBoot,
    ),
    statRow("runPython() wall, no MCP", refill.run),
    statRow("– durationMs", refill.runDuration),
    statRow("result → used child disposed", refill.dispose),
    statRow("result → pool full again", refill.resultToFull),
    "",
    row(["idle pooled child", "pid", "VmRSS MB", "RssAnon MB", "RssFile MB", "PSS MB"]),
    row(["---", "---:", "---:", "---:", "---:", "---:"]),
    ...memoryRow("before the calls", report.memory.idleChildren),
    ...memoryRow("after the calls", report.memory.afterChildren),
    "",
    `Host RSS: ${report.memory.idleHostMb} MB idle, ${report.memory.afterHostMb} MB after the calls.`,
    "",
    row(["target", "goal", "measured", "status"]),
    row(["---", "---:", "---:", "---"]),
    ...Object.entries(report.targets).map(([name, t]) =>
      row([name, t.goal, t.actual, status(t.met)])
    ),
    "",
  ];
  return lines.join("\n");
}

async function main(args: string[]): Promise<void> {
  const parsed = parseBenchArgs(
    args,
    "Usage: deno run -A bench/run_python.ts [--iterations N] [--warmup N] [--pause-ms MS] " +
      "[--first-calls N] [--refills N] [--per-caller N] [--skip-fresh-cache] [--json]",
    {
      iterations: { fallback: 40 },
      warmup: { fallback: 3, min: 0 },
      pauseMs: { fallback: 1_500, min: 0 },
      firstCalls: { fallback: 3 },
      refills: { fallback: 12 },
      perCaller: { fallback: 8 },
    },
    ["skip-fresh-cache", "quick"],
  );
  if (!parsed) return;
  const quick = parsed.flags.has("quick");
  const options: Options = {
    ...parsed.ints,
    freshCache: !parsed.flags.has("skip-fresh-cache") && !quick,
    quick,
  };

  const loadBefore = await loadAverage();
  log(`baseline: ${options.iterations} × deno run --no-config -q tiny.ts`);
  const baseline = await timeDenoRun(options.iterations, options.warmup);
  log(`run_typescript reference: ${options.iterations} warm calls`);
  const tsWarm = await runTsReference(options);
  log(`in-process Pyodide baseline: ${options.iterations} warm calls`);
  const inprocess = await runInprocess(options);
  log(`refill in process: ${options.refills} take/fill/settled and run/idle/settled cycles`);
  const refill = await runRefill(options);
  let firstCall: Report["firstCall"] = null;
  if (!quick) {
    log(`first call: ${options.firstCalls} server starts with one spawn`);
    const singleSpawn = await runFirstCalls(options.firstCalls, true);
    log(`first call: ${options.firstCalls} server starts with the SDK's default connect`);
    firstCall = { singleSpawn, sdkDefaultConnect: await runFirstCalls(options.firstCalls, false) };
  }
  let freshCache: FreshCacheResult | null = null;
  if (options.freshCache) {
    log("first call with an empty cache (snapshot build)");
    freshCache = await runFreshCache();
  }
  log(`warm: ${options.iterations} sequential calls, ${options.pauseMs} ms apart`);
  const { warm, mcpRoundTrip, memory } = await runWarm(options);
  let poolOff: SequentialResult | null = null;
  if (!quick) {
    log("pool off: sequential calls");
    poolOff = await runPoolOff(options);
  }
  log(`${CONCURRENCY} concurrent callers × ${options.perCaller} calls`);
  const concurrent = await runConcurrent(options);

  const allChildren = [...memory.idleChildren, ...memory.afterChildren];
  const maxChildRss = Math.max(...allChildren.map((c) => c.vmRssMb));
  const base = baseline.medianMs;
  const report: Report = {
    date: new Date().toISOString(),
    machine: await machineReport(loadBefore),
    command: ["deno run -A bench/run_python.ts", ...args].join(" "),
    code: await gitState(),
    options,
    baseline,
    tsWarm,
    inprocess,
    refill,
    firstCall,
    freshCache,
    mcpRoundTrip,
    warm,
    poolOff,
    concurrent,
    memory,
    ratios: {
      warmToTsWarm: ratio(warm.latency.medianMs, tsWarm.latency.medianMs),
      warmToInprocess: ratio(warm.latency.medianMs, inprocess.latency.medianMs),
      warmToBaseline: ratio(warm.latency.medianMs, base),
      firstCallToBaseline: firstCall
        ? ratio(firstCall.singleSpawn.spawnToResult.medianMs, base)
        : null,
      refillToBaseline: ratio(refill.refill.medianMs, base),
      poolOffToBaseline: poolOff ? ratio(poolOff.latency.medianMs, base) : null,
    },
    targets: {
      "Python warm median": {
        goal: `≤ ${TARGETS.warmMedianMs} ms`,
        actual: `${warm.latency.medianMs} ms (p95 ${warm.latency.p95Ms})`,
        met: warm.latency.medianMs <= TARGETS.warmMedianMs,
      },
      "Python warm median ≤ in-process Pyodide (same run)": {
        goal: `≤ ${inprocess.latency.medianMs} ms`,
        actual: `${warm.latency.medianMs} ms (${
          ratio(warm.latency.medianMs, inprocess.latency.medianMs)
        }×)`,
        met: warm.latency.medianMs <= inprocess.latency.medianMs,
      },
      [`Python warm median ≤ ${TARGETS.warmToTs}× warm run_typescript (same run)`]: {
        goal: `≤ ${round(TARGETS.warmToTs * tsWarm.latency.medianMs)} ms`,
        actual: `${warm.latency.medianMs} ms (${
          ratio(warm.latency.medianMs, tsWarm.latency.medianMs)
        }×)`,
        met: warm.latency.medianMs <= TARGETS.warmToTs * tsWarm.latency.medianMs,
      },
      ...(firstCall
        ? {
          "first call after start (spawn → result, one spawn)": {
            goal: `≤ ${TARGETS.firstCallMs} ms`,
            actual:
              `${firstCall.singleSpawn.spawnToResult.medianMs} ms (max ${firstCall.singleSpawn.spawnToResult.maxMs})`,
            met: firstCall.singleSpawn.spawnToResult.medianMs <= TARGETS.firstCallMs,
          },
        }
        : {}),
      "pool refill from the snapshot": {
        goal: `≤ ${TARGETS.refillMs} ms`,
        actual: `${refill.refill.medianMs} ms (p95 ${refill.refill.p95Ms})`,
        met: refill.refill.medianMs <= TARGETS.refillMs,
      },
      "RSS per warm child (VmRSS, max)": {
        goal: `≤ ${TARGETS.childRssMb} MB`,
        actual: `${maxChildRss} MB`,
        met: maxChildRss <= TARGETS.childRssMb,
      },
      [`throughput, ${CONCURRENCY} callers`]: {
        goal: `≥ ${TARGETS.throughputPerSec} runs/s`,
        actual: `${concurrent.throughputPerSec} calls/s, median ${concurrent.latency.medianMs} ms`,
        met: concurrent.throughputPerSec >= TARGETS.throughputPerSec,
      },
    },
  };
  printReport(parsed.json, report, renderMarkdown);
}

if (import.meta.main) await runBench(main);
