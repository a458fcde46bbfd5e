/**
 * What the shared state store (`state.url`) adds to a run (issue 26's "store adds" numbers of the
 * replicas bench; the exports let bench/replicas.ts report them too): two executors in this process, one with the in-process default and one on a real redis-server on
 * loopback (Debian's, started here), both with `privacy.tokenize` and the upstream fixture
 * behind them. Paired rounds alternate between them (which goes first alternates too), each
 * timing `Executor.runTypescript` from the call to its result:
 *
 * - a trivial run that uses none of the store (`return 1`): target ≤ 0.5 ms added at the median;
 * - a run that resolves ten placeholders in one tool call's arguments (given by an earlier run of
 *   the same executor) and calls the fixture: target ≤ 2 ms added at the median.
 *
 * What is added is the median of the paired differences (store − in-process), so that the
 * machine's drift between rounds cancels out. Each sample starts once the executor's used child
 * is gone and its pool refilled. Beside it: how many store operations each kind of run made (the
 * trivial run none), and the store's round trip (a GET of a missing key) in this process, between
 * the rounds: on a loaded machine the added time is mostly the wait for the round trip's answer
 * to be read (the event loop's wake-up), which the round trip's own median shows.
 *
 * ```sh
 * deno run -A bench/store_cost.ts [--rounds 100] [--json]
 * ```
 *
 * Needs redis-server (`apt-get install -y redis-server`).
 *
 * @module
 */
import { join } from "node:path";
import { percentile, round, runPaired } from "./_stats.ts";
import { loadAverage } from "./_machine.ts";
import { log, parseBenchArgs, printReport, row, runBench, status } from "./_report.ts";
import { fixtureServer } from "../tests/_env.ts";
import { RedisServer } from "../tests/_redis.ts";
import { resolveSettings, type Settings } from "../src/config/settings.ts";
import { discoverUpstreams } from "../src/config/upstream.ts";
import { Executor } from "../src/exec/executor.ts";
import { createLogger } from "../src/log.ts";
import { openHub } from "../src/upstream/hub.ts";
import { openSharedState, type SharedState } from "../src/state/shared_state.ts";
import type { Hub } from "../src/upstream/hub.ts";

const ARMS = ["memory", "store"] as const;
type Arm = typeof ARMS[number];
const KEY = "bench-store-cost-secret-of-32-characters";
const TEN = Array.from({ length: 10 }, (_, i) => `person${i}@example.org`);

/** Targets of issue 26: what the store may add at the median, ms. */
export const STORE_TARGETS = { trivial: 0.5, tenPlaceholders: 2 } as const;

/** One kind of run, measured in both arms. */
export interface StoreCostRow {
  /** Store operations per run of the store arm (issued; not all of them awaited). */
  operationsPerRun: number;
  /** Medians of each arm, ms. */
  medianMs: Record<Arm, number>;
  /** Median of the paired differences (store − memory), ms. */
  addedMs: number;
  /** 90th percentile of the paired differences, ms. */
  addedP90Ms: number;
  /** Whether `addedMs` is within the target. */
  met: boolean;
}

/** What {@linkcode measureStoreCost} found. */
export interface StoreCost {
  /** Measured rounds of each kind of run. */
  rounds: number;
  /** `return 1`. */
  trivial: StoreCostRow;
  /** Ten placeholders resolved in one tool call. */
  tenPlaceholders: StoreCostRow;
  /** A GET's round trip to the store from this process, between the rounds: p50 and p90, ms. */
  roundTripMs: { p50: number; p90: number };
  /** Load averages before and after. */
  load: { before: string; after: string };
}

interface ArmState {
  executor: Executor;
  hub: Hub;
  shared: SharedState;
  /** The code of the ten-placeholder run, with this arm's placeholders. */
  tenCode: string;
}

async function startArm(dir: string, arm: Arm, url: string): Promise<ArmState> {
  const home = join(dir, arm);
  await Deno.mkdir(join(home, "tmp"), { recursive: true });
  const callLog = join(home, "calls.log");
  const mcpConfig = join(home, "mcp.json");
  await Deno.writeTextFile(
    mcpConfig,
    JSON.stringify({ mcpServers: { fixture: fixtureServer({ FIXTURE_CALL_LOG: callLog }) } }),
  );
  const settings: Settings = resolveSettings({
    privacy: { tokenize: true },
    approvals: { mode: "off" },
    sandbox: { tempDir: join(home, "tmp") },
    // A loaded machine (load 12 and more) once kept a round trip past the default 1000 ms.
    ...(arm === "store" ? { state: { url, key: KEY, timeoutMs: 5000 } } : {}),
  });
  const logger = createLogger("warn");
  const upstream = await discoverUpstreams({
    configPaths: [mcpConfig],
    env: { HOME: home },
    cwd: home,
  });
  const hub = await openHub(upstream, settings, { log: logger });
  const shared = await openSharedState(settings);
  const executor = await Executor.create(settings, { log: logger, hub, shared });
  const minted = await executor.runTypescript(`return ${JSON.stringify(TEN.join(" "))};`);
  const placeholders = String(minted.returnValue).split(" ");
  if (placeholders.length !== 10 || !placeholders.every((p) => /^<email_\d+>$/.test(p))) {
    throw new Error(`${arm}: the ten values did not become placeholders: ${minted.returnValue}`);
  }
  const tenCode = `await callMCPTool("mcp__fixture__record", { note: ${
    JSON.stringify(placeholders.join(" "))
  } }); return 1;`;
  const check = await executor.runTypescript(tenCode);
  if (!check.ok) throw new Error(`${arm}: ${JSON.stringify(check.error)}`);
  const written = await Deno.readTextFile(callLog);
  if (!written.includes(TEN.join(" "))) {
    throw new Error(`${arm}: the fixture did not get the values: ${written}`);
  }
  return { executor, hub, shared, tenCode };
}

async function timed(executor: Executor, code: string): Promise<number> {
  const started = performance.now();
  const result = await executor.runTypescript(code);
  const ms = performance.now() - started;
  if (!result.ok || result.returnValue !== 1) {
    throw new Error(`A measured run failed: ${JSON.stringify(result.error ?? result)}`);
  }
  // The used child is disposed, and the pool refilled, behind the result: not in the next
  // sample's time.
  await executor.idle();
  await (await executor.runtime("typescript").pool()).settled();
  return ms;
}

function summarize(
  samples: Record<Arm, number[]>,
  target: number,
  operations: number,
): StoreCostRow {
  const sorted = (values: number[]) => [...values].sort((a, b) => a - b);
  const added = sorted(samples.store.map((ms, i) => ms - samples.memory[i]));
  const addedMs = round(percentile(added, 0.5), 2);
  return {
    operationsPerRun: round(operations / samples.store.length, 1),
    medianMs: {
      memory: round(percentile(sorted(samples.memory), 0.5), 2),
      store: round(percentile(sorted(samples.store), 0.5), 2),
    },
    addedMs,
    addedP90Ms: round(percentile(added, 0.9), 2),
    met: addedMs <= target,
  };
}

/**
 * Measures what the store adds to a trivial run and to a run that resolves ten placeholders.
 *
 * @param rounds Measured paired rounds of each kind (after 5 warm-up rounds).
 * @returns The medians, the added time and whether the targets are met.
 */
export async function measureStoreCost(rounds: number): Promise<StoreCost> {
  const dir = await Deno.makeTempDir({ prefix: "ce-bench-store-" });
  const redis = new RedisServer();
  const arms: Partial<Record<Arm, ArmState>> = {};
  try {
    await redis.start();
    for (const arm of ARMS) arms[arm] = await startArm(dir, arm, redis.url);
    const ready = arms as Record<Arm, ArmState>;
    const before = await loadAverage();
    log(`store cost: ${rounds} paired rounds of each run (load ${before})`);
    const store = ready.store.shared.store;
    const roundTrips: number[] = [];
    const measure = async (code: (arm: Arm) => string) => {
      const counted = { operations: 0 };
      const samples = await runPaired({
        arms: ARMS,
        rounds,
        warmup: 5,
        sample: async (arm, round) => {
          const before = store.stats.operations;
          const ms = await timed(ready[arm].executor, code(arm));
          if (arm === "store" && round >= 5) counted.operations += store.stats.operations - before;
          if (arm === "store") {
            const started = performance.now();
            await store.get(["ce:bench:none"]);
            roundTrips.push(performance.now() - started);
          }
          return ms;
        },
      });
      return { samples, operations: counted.operations };
    };
    const trivial = await measure(() => "return 1");
    const ten = await measure((arm) => ready[arm].tenCode);
    roundTrips.sort((a, b) => a - b);
    return {
      rounds,
      trivial: summarize(trivial.samples, STORE_TARGETS.trivial, trivial.operations),
      tenPlaceholders: summarize(ten.samples, STORE_TARGETS.tenPlaceholders, ten.operations),
      roundTripMs: {
        p50: round(percentile(roundTrips, 0.5), 2),
        p90: round(percentile(roundTrips, 0.9), 2),
      },
      load: { before, after: await loadAverage() },
    };
  } finally {
    // Each part on its own, so that one that fails to close leaves none of the others running.
    for (const state of Object.values(arms)) {
      await state.executor.close().catch(() => {});
      await state.hub.close().catch(() => {});
      await state.shared.close().catch(() => {});
    }
    await redis.close().catch(() => {});
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

/**
 * The report's markdown.
 *
 * @param cost What was measured.
 * @returns A table.
 */
export function renderStoreCost(cost: StoreCost): string {
  const line = (name: string, r: StoreCostRow, target: number) =>
    row([
      name,
      r.medianMs.memory,
      r.medianMs.store,
      r.addedMs,
      r.addedP90Ms,
      r.operationsPerRun,
      `≤ ${target}`,
      status(r.met),
    ]);
  return [
    `What the store adds (state.url on a loopback redis-server, against the in-process default, in one process; ${cost.rounds} paired rounds each; load ${cost.load.before} → ${cost.load.after}; a store round trip from this process meanwhile: p50 ${cost.roundTripMs.p50} ms, p90 ${cost.roundTripMs.p90} ms):`,
    "",
    row([
      "run",
      "in-process p50 ms",
      "store p50 ms",
      "added p50 ms",
      "added p90 ms",
      "store operations a run",
      "target",
      "status",
    ]),
    row(["---", "---:", "---:", "---:", "---:", "---:", "---:", "---"]),
    line("trivial (`return 1`)", cost.trivial, STORE_TARGETS.trivial),
    line("ten placeholders in one tool call", cost.tenPlaceholders, STORE_TARGETS.tenPlaceholders),
  ].join("\n");
}

if (import.meta.main) {
  await runBench(async (args) => {
    const parsed = parseBenchArgs(
      args,
      "Usage: deno run -A bench/store_cost.ts [--rounds N] [--json]",
      { rounds: { fallback: 100 } },
    );
    if (!parsed) return;
    printReport(parsed.json, await measureStoreCost(parsed.ints.rounds), renderStoreCost);
  });
}
