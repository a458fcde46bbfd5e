/**
 * Latency, compute, throughput, refill and memory of `run_python`, measured through a real stdio
 * MCP client (SDK v2) talking to `deno run -A main.ts serve`, against the seed product's shape
 * (one shared in-process Pyodide), plus an in-process look at a Python child booting its next
 * interpreter, phase by phase and with its CPU. Every target of issue 27 is one line of the
 * report's table, with the load average when its scenario started.
 *
 * ```sh
 * deno run -A bench/run_python.ts [--iterations 30] [--warmup 3] [--pause-ms 1000]
 *   [--first-calls 3] [--recycles 20] [--per-caller 8] [--skip-fresh-cache] [--quick] [--json]
 * ```
 *
 * `--quick` measures only the paired calls, the recycle, back-to-back and concurrent calls and
 * the idle tree (no first calls, no empty cache, no pool off, no TypeScript reference).
 *
 * Scenarios (warm-up calls are never counted):
 * - baseline: `deno run --no-config -q tiny.ts` per call, and warm `run_typescript` (`return 1`,
 *   TypeScript pool 2, Python off);
 * - paired calls, in interleaved rounds (`runPaired`, each arm a call after a pause of
 *   `--pause-ms`): `1 + 1`, `print(1)` and a 200k-iteration loop on our server (product
 *   defaults), and `1 + 1` and the loop on `bench/_inprocess_pyodide_server.ts` (one shared Pyodide
 *   that runs every call with `runPythonAsync`: no child, no fresh interpreter). The in-process
 *   server cannot run `print` (its stdout is the protocol);
 * - recycle, in process: a `PyChild` with many runs, `1 + 1` then `recycle()`, `--recycles` times:
 *   result → the next interpreter ready, its phases (`PyChild.recycleTimes`) and the child's CPU
 *   (utime + stime of all its threads) per fresh interpreter;
 * - refill, in process: `Executor.create()` with the defaults, `runPython()` → `idle()` →
 *   `settled()`: result → an interpreter ready again; and a new child booted from the snapshot
 *   (spawn → ready);
 * - first call: time from spawning the server to the first `run_python` result, with the
 *   snapshot in the real cache, and once with an empty cache directory (the snapshot is built);
 * - back-to-back: `--iterations` sequential `1 + 1` calls without a pause (product defaults);
 * - pool off: `CODE_EXECUTOR_PYTHON_WARM_POOL=0`, every call boots a child;
 * - concurrent: 4 callers in parallel on one client (product defaults; `limits.maxConcurrent` is
 *   4), each call printing a token of its own and returning whether its interpreter was fresh;
 *   every result is checked, and the host's RSS before and after;
 * - memory: VmRSS (and PSS) of each idle Python child, and of the whole idle tree (the server and
 *   every child it started) with the product defaults, before and after the calls.
 *
 * Every server gets a private TMPDIR and HOME (no settings file, no upstream servers) but
 * XDG_CACHE_HOME pointing at the real cache, so that the Pyodide snapshot in
 * `~/.cache/code-executor/pyodide` is reused. Progress goes to stderr; stdout gets a markdown
 * report, or JSON with `--json`.
 *
 * @module
 */
import { ratio, repeat, round, runPaired, sleep, type Stats, stats } from "./_stats.ts";
import {
  cpuMs,
  loadAverage,
  type MachineReport,
  machineReport,
  machineText,
  processTree,
  residentMb,
  statusMb,
} from "./_machine.ts";
import {
  type CallOutcome,
  type CallTiming,
  connectStdio,
  type StdioServer,
  timeDenoRun,
  timedRefusal,
  timedRun,
} from "./_server.ts";
import { log, parseBenchArgs, printReport, row, runBench, status } from "./_report.ts";
import { cacheHome, ROOT, serverEnv } from "../tests/_env.ts";
import { sandboxPids } from "../tests/_proc.ts";
import { LIMITS, withPyChild } from "../tests/_pyodide.ts";
import { resolveSettings } from "../src/config/settings.ts";
import { Executor } from "../src/exec/executor.ts";
import type { PyPool } from "../src/exec/python/pool.ts";
import { createLogger } from "../src/log.ts";

const TRIVIAL = { code: "1 + 1", value: 2 };
const PRINT = { code: "print(1)", value: undefined };
const LOOP_N = 200_000;
const LOOP = {
  code: `s = 0\nfor i in range(${LOOP_N}):\n    s += i * i % 7\ns`,
  value: Array.from({ length: LOOP_N }, (_, i) => (i * i) % 7).reduce((a, b) => a + b, 0),
};
const TS_CODE = "return 1";
const SETTLE_MS = 2_000;
const CONCURRENCY = 4;
const SNAPSHOT_BUILT = /Built the Pyodide snapshot \S+ \((\d+) bytes\) in (\d+) ms/;
const TARGETS = {
  throughputPerSec: 5,
  refillMs: 300,
  printToTrivial: 1.5,
  loopToInprocess: 1.2,
  backToBackP95Ms: 100,
  idleTreeMb: 350,
  childRssMb: 200,
  firstCallMs: 1_500,
  hostRssGrowth: 1.2,
};

/** Memory of one process. */
interface ProcessMemory {
  pid: number;
  vmRssMb: number;
  rssAnonMb: number;
  rssFileMb: number;
  pssMb: number | null;
}

/** The sums over a process tree. */
interface TreeMemory {
  processes: number;
  vmRssMb: number;
  pssMb: number;
  members: ProcessMemory[];
}

/** A scenario's samples, with the load average when it started. */
interface Scenario {
  load: string;
  latency: Stats;
  /** The server's own `durationMs`. */
  serverDuration: Stats;
}

interface PairedResult {
  load: string;
  rounds: number;
  arms: Record<Arm, Stats>;
  /** Medians of the per-round ratios. */
  pairedRatios: { warmToInprocess: number; printToTrivial: number; loopToInprocess: number };
}

const ARMS = ["ours", "ours-print", "inprocess", "ours-loop", "inprocess-loop"] as const;
type Arm = typeof ARMS[number];

interface RecycleResult {
  load: string;
  /** Result → the next interpreter ready, from outside. */
  wall: Stats;
  workerGone: Stats;
  ready: Stats;
  /** Worker start → interpreter ready, measured in the child. */
  boot: Stats;
  /** CPU of the child (all its threads) from the result to the next interpreter ready. */
  cpu: Stats;
  /** The run itself, `1 + 1`, in process. */
  run: Stats;
  runs: number;
}

interface RefillResult {
  load: string;
  /** `runPython()` result → an interpreter ready again (`idle()`, `settled()`). */
  resultToReady: Stats;
  /** A new child from the snapshot: spawn → ready. */
  newChild: Stats;
  newChildBoot: Stats;
  fromSnapshot: boolean;
}

interface FirstCallResult {
  load: string;
  snapshotBuilds: number;
  spawnToConnected: Stats;
  spawnToResult: Stats;
  connectedToResult: Stats;
  serverDuration: Stats;
}

interface FreshCacheResult {
  spawnToResultMs: number;
  snapshotBuildMs: number | null;
  snapshotBytes: number | null;
}

interface ConcurrentResult extends Scenario {
  throughputPerSec: number;
  calls: number;
  elapsedMs: number;
  /** Runs whose output was not their own, or whose interpreter was not fresh. */
  wrong: number;
  hostRssBeforeMb: number;
  hostRssAfterMb: number;
}

interface Report {
  date: string;
  machine: MachineReport;
  command: string;
  code: { commit: string; dirty: string[] };
  options: Options;
  baseline: Stats | null;
  tsWarm: Scenario | null;
  mcpRoundTrip: Stats;
  paired: PairedResult;
  recycle: RecycleResult;
  refill: RefillResult;
  firstCall: FirstCallResult | null;
  freshCache: FreshCacheResult | null;
  backToBack: Scenario;
  poolOff: Scenario | null;
  concurrent: ConcurrentResult;
  memory: {
    load: string;
    idleChildren: ProcessMemory[];
    afterChildren: ProcessMemory[];
    idleTree: TreeMemory;
    afterTree: TreeMemory;
  };
  targets: Record<string, { goal: string; actual: string; met: boolean | null; load: string }>;
}

interface Options {
  iterations: number;
  warmup: number;
  pauseMs: number;
  firstCalls: number;
  recycles: number;
  perCaller: number;
  freshCache: boolean;
  quick: boolean;
}

async function processMemory(pid: number): Promise<ProcessMemory> {
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

async function treeMemory(pid: number): Promise<TreeMemory> {
  const members: ProcessMemory[] = [];
  for (const each of (await processTree(pid)).keys()) {
    members.push(
      await processMemory(each).catch(() => undefined) ?? {
        pid: each,
        vmRssMb: 0,
        rssAnonMb: 0,
        rssFileMb: 0,
        pssMb: 0,
      },
    );
  }
  return {
    processes: members.length,
    vmRssMb: round(members.reduce((sum, m) => sum + m.vmRssMb, 0)),
    pssMb: round(members.reduce((sum, m) => sum + (m.pssMb ?? 0), 0)),
    members,
  };
}

/** Python children of the server whose private TMPDIR is `tempDir`. */
async function pythonChildren(tempDir: string): Promise<number[]> {
  return (await sandboxPids(tempDir, ["py_host.ts"])).sort((a, b) => a - b);
}

async function gitState(): Promise<Report["code"]> {
  const git = async (...args: string[]) => {
    const output = await new Deno.Command("git", {
      args,
      cwd: ROOT,
      stdout: "piped",
      stderr: "null",
    }).output().catch(() => undefined);
    return output?.success ? new TextDecoder().decode(output.stdout) : "";
  };
  const commit = (await git("log", "-1", "--format=%h %s")).trim() || "unknown";
  const dirty = (await git("status", "--porcelain")).split("\n").filter(Boolean)
    .map((line) => line.trim());
  return { commit, dirty };
}

interface ServerOptions {
  /** `CODE_EXECUTOR_PYTHON_WARM_POOL`; the product's default when undefined; Python off when null. */
  pythonPool?: number | null;
  /** `CODE_EXECUTOR_WARM_POOL`; the product's default when undefined. */
  tsPool?: number;
  /** `XDG_CACHE_HOME` of the server; the real one by default. */
  cacheHome?: string;
  /** Skip the SDK's `server/discover` probe on a sibling process: one spawn, `initialize`. */
  singleSpawn?: boolean;
  logLevel?: string;
}

interface BenchServer extends StdioServer {
  tempDir: string;
  call(program: { code: string; value: unknown }): Promise<CallTiming>;
  /** A `run_python` call the server refuses before it touches a sandbox. */
  callRefused(): Promise<number>;
}

/** Starts `deno run -A main.ts serve` with a private TMPDIR and HOME and connects a client. */
async function startServer(options: ServerOptions): Promise<BenchServer> {
  const tempDir = await Deno.realPath(await Deno.makeTempDir({ prefix: "ce-bench-py-" }));
  const env: Record<string, string> = {
    ...serverEnv(tempDir, { home: tempDir, sharedCache: true }),
    XDG_CACHE_HOME: options.cacheHome ?? cacheHome(),
    CODE_EXECUTOR_LOG_LEVEL: options.logLevel ?? "warn",
    PYTHON_ENABLED: String(options.pythonPool !== null),
  };
  // The product's defaults, unless a scenario says otherwise (tests pin the pools).
  delete env.CODE_EXECUTOR_PYTHON_WARM_POOL;
  delete env.CODE_EXECUTOR_PYTHON_WARM_POOL_BURST;
  if (typeof options.pythonPool === "number") {
    env.CODE_EXECUTOR_PYTHON_WARM_POOL = String(options.pythonPool);
  }
  if (options.tsPool !== undefined) env.CODE_EXECUTOR_WARM_POOL = String(options.tsPool);
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
    call: (program) => timedRun(server, "run_python", { code: program.code }, program.value),
    callRefused: () => timedRefusal(server, "run_python", TRIVIAL.code),
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

async function sequential(
  server: BenchServer,
  program: { code: string; value: unknown },
  options: { iterations: number; warmup: number; pauseMs: number },
): Promise<Scenario> {
  const load = await loadAverage();
  const calls = await repeat(options, async () => {
    if (options.pauseMs > 0) await sleep(options.pauseMs);
    return await server.call(program);
  });
  return {
    load,
    latency: stats(calls.map((call) => call.latencyMs)),
    serverDuration: stats(calls.map((call) => call.serverMs)),
  };
}

async function runTsReference(options: Options): Promise<Scenario> {
  const server = await startServer({ pythonPool: null, tsPool: 2 });
  try {
    await server.client.listTools();
    await sleep(SETTLE_MS);
    const load = await loadAverage();
    const calls = await repeat(options, async () => {
      await sleep(250);
      return await timedRun(server, "run_typescript", { code: TS_CODE }, 1);
    });
    return {
      load,
      latency: stats(calls.map((call) => call.latencyMs)),
      serverDuration: stats(calls.map((call) => call.serverMs)),
    };
  } finally {
    await server.close();
  }
}

function median(values: number[]): number {
  return stats(values, 3).medianMs;
}

/** Our server and the in-process one, called in interleaved rounds. */
async function runPairedCalls(options: Options): Promise<{
  paired: PairedResult;
  mcpRoundTrip: Stats;
}> {
  const ours = await startServer({ singleSpawn: true });
  const inprocess = await connectStdio("the in-process Pyodide server", {
    command: Deno.execPath(),
    args: ["run", "-A", "bench/_inprocess_pyodide_server.ts"],
    cwd: ROOT,
    env: { ...Deno.env.toObject(), NO_COLOR: "1" },
  }, { connect: { prior: { kind: "legacy" } } });
  try {
    await ours.client.listTools();
    await inprocess.client.listTools();
    await waitForPool(ours, 1);
    const mcpRoundTrip = stats(await repeat(options, () => ours.callRefused()));
    const load = await loadAverage();
    const timings = await runPaired({
      arms: ARMS,
      rounds: options.iterations,
      warmup: options.warmup,
      sample: async (arm) => {
        await sleep(options.pauseMs);
        const [server, program] = arm === "ours"
          ? [ours, TRIVIAL]
          : arm === "ours-print"
          ? [ours, PRINT]
          : arm === "ours-loop"
          ? [ours, LOOP]
          : arm === "inprocess"
          ? [inprocess, TRIVIAL]
          : [inprocess, LOOP];
        return (await timedRun(server, "run_python", { code: program.code }, program.value))
          .latencyMs;
      },
    });
    const each = (a: Arm, b: Arm) => timings[a].map((ms, i) => ms / timings[b][i]);
    return {
      paired: {
        load,
        rounds: options.iterations,
        arms: Object.fromEntries(ARMS.map((arm) => [arm, stats(timings[arm])])) as Record<
          Arm,
          Stats
        >,
        pairedRatios: {
          warmToInprocess: median(each("ours", "inprocess")),
          printToTrivial: median(each("ours-print", "ours")),
          loopToInprocess: median(each("ours-loop", "inprocess-loop")),
        },
      },
      mcpRoundTrip,
    };
  } finally {
    await inprocess.close();
    await ours.close();
  }
}

/** One child booting interpreter after interpreter: where the time and the CPU go. */
async function runRecycle(options: Options): Promise<RecycleResult> {
  return await withPyChild({ maxRuns: 1_000_000 }, async (child) => {
    const load = await loadAverage();
    const walls: number[] = [];
    const gone: number[] = [];
    const ready: number[] = [];
    const boots: number[] = [];
    const cpus: number[] = [];
    const runs: number[] = [];
    for (let i = 0; i < options.warmup + options.recycles; i++) {
      const started = performance.now();
      const result = await child.run(TRIVIAL.code, LIMITS);
      const returned = performance.now();
      if (result.returnValue !== TRIVIAL.value) {
        throw new Error(`The child did not return 2: ${JSON.stringify(result)}`);
      }
      const cpuBefore = await cpuMs(child.pid);
      const recycled = performance.now();
      if (!(await child.recycle())) throw new Error("The child did not boot another interpreter");
      const wall = performance.now() - recycled;
      const cpu = await cpuMs(child.pid) - cpuBefore;
      if (i >= options.warmup) {
        const times = child.recycleTimes!;
        runs.push(returned - started);
        walls.push(wall);
        gone.push(times.workerGoneMs);
        ready.push(times.readyMs);
        if (times.bootMs !== undefined) boots.push(times.bootMs);
        cpus.push(cpu);
      }
      await sleep(300);
    }
    return {
      load,
      wall: stats(walls),
      workerGone: stats(gone),
      ready: stats(ready),
      boot: stats(boots),
      cpu: stats(cpus),
      run: stats(runs),
      runs: child.runs,
    };
  });
}

/** The pool through the `Executor` API with the product's defaults, in this process. */
async function runRefill(options: Options): Promise<RefillResult> {
  const tempDir = await Deno.realPath(await Deno.makeTempDir({ prefix: "ce-bench-refill-" }));
  const settings = resolveSettings({ sandbox: { warmPool: 0, tempDir } });
  const executor = await Executor.create(settings, { log: createLogger("warn") });
  let measured: Pick<RefillResult, "load" | "resultToReady">;
  try {
    const pool = await executor.runtime("python").pool() as PyPool;
    pool.fill();
    await pool.settled();
    await sleep(SETTLE_MS);
    const load = await loadAverage();
    const toReady: number[] = [];
    for (let i = 0; i < options.warmup + options.recycles; i++) {
      const result = await executor.runPython(TRIVIAL.code);
      const returned = performance.now();
      if (!result.ok || result.returnValue !== TRIVIAL.value) {
        throw new Error(`runPython did not return 2: ${JSON.stringify(result)}`);
      }
      await executor.idle();
      await pool.settled();
      if (pool.idle < 1) throw new Error(`The Python pool holds ${pool.idle} interpreters, not 1`);
      if (i >= options.warmup) toReady.push(performance.now() - returned);
      await sleep(300);
    }
    measured = { load, resultToReady: stats(toReady) };
  } finally {
    await executor.close();
    await Deno.remove(tempDir, { recursive: true }).catch(() => {});
  }
  const newChild: number[] = [];
  const boots: number[] = [];
  let fromSnapshot = true;
  for (let i = 0; i < Math.max(3, Math.ceil(options.recycles / 4)); i++) {
    const started = performance.now();
    await withPyChild({}, (child) => {
      newChild.push(performance.now() - started);
      if (child.boot?.bootMs !== undefined) boots.push(child.boot.bootMs);
      fromSnapshot &&= child.boot?.fromSnapshot === true;
      return Promise.resolve();
    });
    await sleep(300);
  }
  return {
    ...measured,
    newChild: stats(newChild),
    newChildBoot: boots.length > 0 ? stats(boots) : stats([NaN]),
    fromSnapshot,
  };
}

async function firstCall(options: ServerOptions): Promise<{
  spawnToConnected: number;
  spawnToResult: number;
  serverMs: number;
  stderr: string;
  builtSnapshot: boolean;
}> {
  const server = await startServer(options);
  try {
    const { serverMs } = await server.call(TRIVIAL);
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

async function runFirstCalls(count: number): Promise<FirstCallResult> {
  const load = await loadAverage();
  const connected: number[] = [];
  const results: number[] = [];
  const afterConnect: number[] = [];
  const durations: number[] = [];
  let snapshotBuilds = 0;
  for (let i = 0; i < count; i++) {
    const run = await firstCall({ singleSpawn: true, logLevel: "debug" });
    if (run.builtSnapshot) snapshotBuilds++;
    connected.push(run.spawnToConnected);
    results.push(run.spawnToResult);
    afterConnect.push(run.spawnToResult - run.spawnToConnected);
    durations.push(run.serverMs);
    await sleep(SETTLE_MS);
  }
  return {
    load,
    snapshotBuilds,
    spawnToConnected: stats(connected),
    spawnToResult: stats(results),
    connectedToResult: stats(afterConnect),
    serverDuration: stats(durations),
  };
}

async function runFreshCache(): Promise<FreshCacheResult> {
  const home = await Deno.makeTempDir({ prefix: "ce-bench-cache-" });
  try {
    const run = await firstCall({ singleSpawn: true, cacheHome: home, logLevel: "debug" });
    const built = SNAPSHOT_BUILT.exec(run.stderr);
    return {
      spawnToResultMs: round(run.spawnToResult),
      snapshotBuildMs: built ? Number(built[2]) : null,
      snapshotBytes: built ? Number(built[1]) : null,
    };
  } finally {
    await Deno.remove(home, { recursive: true }).catch(() => {});
  }
}

/** The product's defaults: the idle tree, back-to-back runs, the tree after them. */
async function runDefaults(options: Options): Promise<{
  backToBack: Scenario;
  memory: Report["memory"];
}> {
  const server = await startServer({ singleSpawn: true });
  try {
    await server.client.listTools();
    await waitForPool(server, 1);
    const load = await loadAverage();
    const idleChildren = await Promise.all(
      (await pythonChildren(server.tempDir)).map(processMemory),
    );
    const idleTree = await treeMemory(server.pid);
    const backToBack = await sequential(server, TRIVIAL, { ...options, pauseMs: 0 });
    await server.client.listTools();
    await sleep(options.pauseMs + SETTLE_MS);
    const afterChildren = await Promise.all(
      (await pythonChildren(server.tempDir)).map(processMemory),
    );
    return {
      backToBack,
      memory: {
        load,
        idleChildren,
        afterChildren,
        idleTree,
        afterTree: await treeMemory(server.pid),
      },
    };
  } finally {
    await server.close();
  }
}

async function runPoolOff(options: Options): Promise<Scenario> {
  const server = await startServer({ pythonPool: 0, tsPool: 0, singleSpawn: true });
  try {
    await server.client.listTools();
    await sleep(SETTLE_MS);
    return await sequential(server, TRIVIAL, {
      iterations: Math.max(5, Math.ceil(options.iterations / 4)),
      warmup: Math.min(options.warmup, 2),
      pauseMs: 200,
    });
  } finally {
    await server.close();
  }
}

/** A run that prints its own token and returns whether nothing had run in its interpreter. */
function checkedProgram(token: string): string {
  return `import sys\nfresh = not hasattr(sys, "_bench_seen")\nsys._bench_seen = True\n` +
    `print(${JSON.stringify(token)})\nfresh`;
}

async function runConcurrent(options: Options): Promise<ConcurrentResult> {
  const server = await startServer({ singleSpawn: true });
  try {
    await server.client.listTools();
    await waitForPool(server, 1);
    let wrong = 0;
    let next = 0;
    const call = async (): Promise<CallTiming> => {
      const token = `run-${next++}-${crypto.randomUUID()}`;
      const started = performance.now();
      const result = await server.client.callTool({
        name: "run_python",
        arguments: { code: checkedProgram(token) },
      });
      const latencyMs = performance.now() - started;
      const outcome = (result.structuredContent ?? {}) as CallOutcome & { stdout?: string };
      if (outcome.ok !== true) {
        throw new Error(`A concurrent run failed: ${JSON.stringify(outcome.error)}`);
      }
      if (outcome.returnValue !== true || outcome.stdout !== `${token}\n`) wrong++;
      return { latencyMs, serverMs: outcome.durationMs ?? NaN };
    };
    const rounds = async (calls: number) => {
      const latencies: number[] = [];
      const serverTimes: number[] = [];
      const started = performance.now();
      await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
        for (let i = 0; i < calls; i++) {
          const timing = await call();
          latencies.push(timing.latencyMs);
          serverTimes.push(timing.serverMs);
        }
      }));
      return { latencies, serverTimes, elapsedMs: performance.now() - started };
    };
    // One round to grow the pool under the burst, then let it refill.
    await rounds(1);
    await sleep(options.pauseMs + SETTLE_MS);
    const hostRssBeforeMb = round(await residentMb(server.pid));
    const load = await loadAverage();
    const { latencies, serverTimes, elapsedMs } = await rounds(options.perCaller);
    await sleep(options.pauseMs + SETTLE_MS * 2);
    return {
      load,
      latency: stats(latencies),
      serverDuration: stats(serverTimes),
      throughputPerSec: round(latencies.length / (elapsedMs / 1000), 2),
      calls: latencies.length,
      elapsedMs: round(elapsedMs),
      wrong,
      hostRssBeforeMb,
      hostRssAfterMb: round(await residentMb(server.pid)),
    };
  } finally {
    await server.close();
  }
}

function renderMarkdown(report: Report): string {
  const statRow = (name: string, s: Stats, extra: Array<string | number> = []) =>
    row([name, s.n, s.medianMs, s.p95Ms, s.minMs, s.maxMs, ...extra]);
  const { paired, recycle, refill, concurrent, backToBack, memory } = report;
  const memoryRows = (name: string, members: ProcessMemory[]) =>
    members.map((m) => row([name, m.pid, m.vmRssMb, m.rssAnonMb, m.rssFileMb, m.pssMb ?? "n/a"]));
  const header = row(["scenario", "n", "median ms", "p95 ms", "min ms", "max ms", "load"]);
  const rule = row(["---", "---:", "---:", "---:", "---:", "---:", "---"]);
  return [
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
    row(["target", "goal", "measured", "status", "load at its start"]),
    row(["---", "---:", "---:", "---", "---"]),
    ...Object.entries(report.targets).map(([name, t]) =>
      row([name, t.goal, t.actual, status(t.met), t.load])
    ),
    "",
    `Paired calls: ${paired.rounds} interleaved rounds, ${report.options.pauseMs} ms pause before ` +
    `each call; load ${paired.load}. Medians of the per-round ratios: ours ÷ in-process ` +
    `${paired.pairedRatios.warmToInprocess}×, print(1) ÷ 1 + 1 ${paired.pairedRatios.printToTrivial}×, ` +
    `loop ours ÷ in-process ${paired.pairedRatios.loopToInprocess}×.`,
    "",
    header,
    rule,
    ...(report.baseline ? [statRow("baseline: `deno run` per call", report.baseline)] : []),
    ...(report.tsWarm
      ? [statRow("run_typescript, warm pool 2", report.tsWarm.latency, [report.tsWarm.load])]
      : []),
    statRow("MCP round trip only (refused run_python)", report.mcpRoundTrip, [paired.load]),
    ...ARMS.map((arm) => statRow(`paired: ${arm}`, paired.arms[arm], [paired.load])),
    statRow("back-to-back `1 + 1`, no pause", backToBack.latency, [backToBack.load]),
    statRow("– server durationMs", backToBack.serverDuration),
    ...(report.poolOff
      ? [statRow("pool off (a child per call)", report.poolOff.latency, [report.poolOff.load])]
      : []),
    statRow(`${CONCURRENCY} concurrent callers`, concurrent.latency, [concurrent.load]),
    statRow("– server durationMs", concurrent.serverDuration),
    "",
    `Throughput with ${CONCURRENCY} callers: ${concurrent.throughputPerSec} runs/s ` +
    `(${concurrent.calls} runs in ${concurrent.elapsedMs} ms; ${concurrent.wrong} with output ` +
    `not their own or an interpreter that was not fresh). Host RSS ${concurrent.hostRssBeforeMb} → ` +
    `${concurrent.hostRssAfterMb} MB.`,
    "",
    row([
      "a fresh interpreter (one child, in process)",
      "n",
      "median",
      "p95",
      "min",
      "max",
      "load",
    ]),
    rule,
    statRow("result → next interpreter ready (ms)", recycle.wall, [recycle.load]),
    statRow("– result → the run's Worker gone (ms)", recycle.workerGone),
    statRow("– `next` → `ready` (ms)", recycle.ready),
    statRow("– Worker start → ready, in the child (ms)", recycle.boot),
    statRow("child CPU per fresh interpreter (ms)", recycle.cpu),
    statRow("the run `1 + 1`, no MCP (ms)", recycle.run),
    statRow("executor: result → an interpreter ready (ms)", refill.resultToReady, [refill.load]),
    statRow("a new child from the snapshot (ms)", refill.newChild),
    statRow(
      `– its bootMs${refill.fromSnapshot ? " (from the snapshot)" : ""}`,
      refill.newChildBoot,
    ),
    "",
    ...(report.firstCall
      ? [
        header,
        rule,
        statRow("first call: spawn → first result", report.firstCall.spawnToResult, [
          report.firstCall.load,
        ]),
        statRow("– spawn → connected", report.firstCall.spawnToConnected),
        statRow("– connected → first result", report.firstCall.connectedToResult),
        "",
      ]
      : ["First calls not measured (--quick).", ""]),
    report.freshCache
      ? `Empty cache (snapshot built first): spawn → first result ${report.freshCache.spawnToResultMs} ms; ` +
        `snapshot build ${report.freshCache.snapshotBuildMs ?? "?"} ms ` +
        `(${report.freshCache.snapshotBytes ?? "?"} bytes).`
      : "Empty-cache start not measured.",
    "",
    `Memory with the defaults (load ${memory.load}): idle tree ${memory.idleTree.processes} ` +
    `processes, ${memory.idleTree.vmRssMb} MB VmRSS (${memory.idleTree.pssMb} MB PSS); after the ` +
    `back-to-back runs ${memory.afterTree.processes} processes, ${memory.afterTree.vmRssMb} MB ` +
    `(${memory.afterTree.pssMb} MB PSS).`,
    "",
    row(["process", "pid", "VmRSS MB", "RssAnon MB", "RssFile MB", "PSS MB"]),
    row(["---", "---:", "---:", "---:", "---:", "---:"]),
    ...memoryRows("idle tree", memory.idleTree.members),
    ...memoryRows("Python child, idle", memory.idleChildren),
    ...memoryRows("Python child, after the runs", memory.afterChildren),
    ...memoryRows("tree after the runs", memory.afterTree.members),
    "",
  ].join("\n");
}

async function main(args: string[]): Promise<void> {
  const parsed = parseBenchArgs(
    args,
    "Usage: deno run -A bench/run_python.ts [--iterations N] [--warmup N] [--pause-ms MS] " +
      "[--first-calls N] [--recycles N] [--per-caller N] [--skip-fresh-cache] [--quick] [--json]",
    {
      iterations: { fallback: 30 },
      warmup: { fallback: 3, min: 0 },
      pauseMs: { fallback: 1_000, min: 0 },
      firstCalls: { fallback: 3 },
      recycles: { fallback: 20 },
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
  let baseline: Stats | null = null;
  let tsWarm: Scenario | null = null;
  if (!quick) {
    log(`baseline: ${options.iterations} × deno run --no-config -q tiny.ts`);
    baseline = await timeDenoRun(options.iterations, options.warmup);
    log(`run_typescript reference: ${options.iterations} warm calls`);
    tsWarm = await runTsReference(options);
  }
  log(`paired: ${options.iterations} rounds of ${ARMS.join(", ")}`);
  const { paired, mcpRoundTrip } = await runPairedCalls(options);
  log(`recycle: ${options.recycles} fresh interpreters in one child`);
  const recycle = await runRecycle(options);
  log(`refill: ${options.recycles} runs through the executor, and new children`);
  const refill = await runRefill(options);
  let firstCall: FirstCallResult | null = null;
  if (!quick) {
    log(`first call: ${options.firstCalls} server starts`);
    firstCall = await runFirstCalls(options.firstCalls);
  }
  let freshCache: FreshCacheResult | null = null;
  if (options.freshCache) {
    log("first call with an empty cache (snapshot build)");
    freshCache = await runFreshCache();
  }
  log(`defaults: idle tree, ${options.iterations} back-to-back calls`);
  const { backToBack, memory } = await runDefaults(options);
  let poolOff: Scenario | null = null;
  if (!quick) {
    log("pool off: sequential calls");
    poolOff = await runPoolOff(options);
  }
  log(`${CONCURRENCY} concurrent callers × ${options.perCaller} calls`);
  const concurrent = await runConcurrent(options);

  const children = [...memory.idleChildren, ...memory.afterChildren];
  const maxChildRss = Math.max(...children.map((c) => c.vmRssMb));
  const r = paired.pairedRatios;
  const arms = paired.arms;
  const hostGrowth = ratio(concurrent.hostRssAfterMb, concurrent.hostRssBeforeMb);
  const report: Report = {
    date: new Date().toISOString(),
    machine: await machineReport(loadBefore),
    command: ["deno run -A bench/run_python.ts", ...args].join(" "),
    code: await gitState(),
    options,
    baseline,
    tsWarm,
    mcpRoundTrip,
    paired,
    recycle,
    refill,
    firstCall,
    freshCache,
    backToBack,
    poolOff,
    concurrent,
    memory,
    targets: {
      [`${CONCURRENCY} concurrent callers, every run in a fresh interpreter`]: {
        goal: `≥ ${TARGETS.throughputPerSec} runs/s, 0 wrong`,
        actual:
          `${concurrent.throughputPerSec} runs/s, ${concurrent.wrong} wrong of ${concurrent.calls}`,
        met: concurrent.throughputPerSec >= TARGETS.throughputPerSec && concurrent.wrong === 0,
        load: concurrent.load,
      },
      "a fresh interpreter ready for the next run (executor: result → ready)": {
        goal: `≤ ${TARGETS.refillMs} ms median`,
        actual: `${refill.resultToReady.medianMs} ms (one child: ${recycle.wall.medianMs} ms, ` +
          `CPU ${recycle.cpu.medianMs} ms)`,
        met: refill.resultToReady.medianMs <= TARGETS.refillMs,
        load: refill.load,
      },
      "warm trivial run_python ≤ the in-process Pyodide (paired)": {
        goal: `≤ 1×`,
        actual: `${arms.ours.medianMs} vs ${arms.inprocess.medianMs} ms (${r.warmToInprocess}×)`,
        met: r.warmToInprocess <= 1,
        load: paired.load,
      },
      "print(1) ÷ 1 + 1 (paired)": {
        goal: `≤ ${TARGETS.printToTrivial}×`,
        actual: `${arms["ours-print"].medianMs} vs ${arms.ours.medianMs} ms (${r.printToTrivial}×)`,
        met: r.printToTrivial <= TARGETS.printToTrivial,
        load: paired.load,
      },
      [`${LOOP_N / 1000}k-iteration loop ÷ the in-process Pyodide (paired)`]: {
        goal: `≤ ${TARGETS.loopToInprocess}×`,
        actual: `${arms["ours-loop"].medianMs} vs ${
          arms["inprocess-loop"].medianMs
        } ms (${r.loopToInprocess}×)`,
        met: r.loopToInprocess <= TARGETS.loopToInprocess,
        load: paired.load,
      },
      "back-to-back trivial runs": {
        goal: `p95 ≤ ${TARGETS.backToBackP95Ms} ms`,
        actual: `p95 ${backToBack.latency.p95Ms} ms, median ${backToBack.latency.medianMs}`,
        met: backToBack.latency.p95Ms <= TARGETS.backToBackP95Ms,
        load: backToBack.load,
      },
      "idle process tree with the defaults (VmRSS)": {
        goal: `≤ ${TARGETS.idleTreeMb} MB`,
        actual: `${memory.idleTree.vmRssMb} MB (${memory.idleTree.processes} processes; ` +
          `after the runs ${memory.afterTree.vmRssMb} MB)`,
        met: memory.idleTree.vmRssMb <= TARGETS.idleTreeMb &&
          memory.afterTree.vmRssMb <= TARGETS.idleTreeMb,
        load: memory.load,
      },
      "RSS per warm Python child (VmRSS, max)": {
        goal: `≤ ${TARGETS.childRssMb} MB`,
        actual: `${maxChildRss} MB`,
        met: maxChildRss <= TARGETS.childRssMb,
        load: memory.load,
      },
      ...(firstCall
        ? {
          "first call after start (spawn → result)": {
            goal: `≤ ${TARGETS.firstCallMs} ms`,
            actual: `${firstCall.spawnToResult.medianMs} ms (max ${firstCall.spawnToResult.maxMs})`,
            met: firstCall.spawnToResult.medianMs <= TARGETS.firstCallMs,
            load: firstCall.load,
          },
        }
        : {}),
      "host RSS after the concurrent load": {
        goal: `≤ ${TARGETS.hostRssGrowth}× before`,
        actual: `${concurrent.hostRssBeforeMb} → ${concurrent.hostRssAfterMb} MB (${hostGrowth}×)`,
        met: hostGrowth <= TARGETS.hostRssGrowth,
        load: concurrent.load,
      },
    },
  };
  printReport(parsed.json, report, renderMarkdown);
}

if (import.meta.main) await runBench(main);
