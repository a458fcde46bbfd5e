/**
 * How long the server keeps other clients waiting while it digests an upstream fault: the
 * slowest `tools/list` answer while a run's call meets an upstream that floods its stdout with
 * 12 MiB and no newline, and while one meets a result of 6 and of 10 MiB, over
 * `tools.maxResultBytes` (5 MiB). The faults themselves (a clear error, the next call working, no
 * process left) are tested in `tests/faults_upstream_test.ts`; the wait is a speed, measured here.
 *
 * One server (`main.ts serve`, the real client over stdio) with `tests/fixtures/upstream_fixture.ts`
 * in its fault modes behind it. Each round runs every fault once; a client sends `tools/list`
 * over and over, 20 ms apart, while the faulty call is in flight, and the round keeps the slowest
 * answer. Target: at most 1,000 ms in every round.
 *
 * ```sh
 * deno task bench:faults [--rounds 10] [--json]
 * ```
 *
 * @module
 */
import { join } from "node:path";
import { type Stats, stats } from "./_stats.ts";
import { type MachineReport, machineReport, machineText } from "./_machine.ts";
import { connectCodeExecutor, type StdioServer } from "./_server.ts";
import { type BenchStart, log, printReport, row, runBenchWithOptions, status } from "./_report.ts";
import { faultyFixtureServer, serverEnv, writeMcpConfig, writeSettings } from "../tests/_env.ts";

const MiB = 1024 * 1024;
const TARGET_MS = 1_000;
const FAULTS = {
  "flood, 12 MiB without a newline": { tool: "mcp__garbage__flood", args: { bytes: 12 * MiB } },
  "result of 6 MiB": { tool: "mcp__healthy__big", args: { bytes: 6 * MiB } },
  "result of 10 MiB": { tool: "mcp__healthy__big", args: { bytes: 10 * MiB } },
} as const;
type Fault = keyof typeof FAULTS;

interface Report {
  rounds: number;
  /** The slowest tools/list answer of each round, per fault. */
  worstMs: Record<Fault, Stats>;
  targetMs: number;
  met: boolean;
  machine: MachineReport;
}

/** Runs one faulty call and returns the error name the sandbox caught. */
async function faultyRun(server: StdioServer, fault: Fault): Promise<string> {
  const { tool, args } = FAULTS[fault];
  const result = await server.client.callTool({
    name: "run_typescript",
    arguments: {
      code: `try {
  await callMCPTool(${JSON.stringify(tool)}, ${JSON.stringify(args)});
  return "returned";
} catch (err) {
  return err.name;
}`,
      timeoutMs: 60_000,
    },
  }, { timeout: 120_000 });
  const value = (result.structuredContent as { returnValue?: unknown }).returnValue;
  if (typeof value !== "string" || value === "returned") {
    throw new Error(
      `${fault}: the call did not fail: ${JSON.stringify(result)}\n${server.stderr()}`,
    );
  }
  return value;
}

/** The slowest tools/list answer while `during` is in flight, in ms. */
async function worstLatency(server: StdioServer, during: Promise<unknown>): Promise<number> {
  let settled = false;
  during.then(() => settled = true, () => settled = true);
  let worst = 0;
  while (!settled) {
    const started = performance.now();
    await server.client.listTools();
    worst = Math.max(worst, performance.now() - started);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return worst;
}

function render(report: Report): string {
  return [
    `## Faults: the slowest tools/list while an upstream fault is digested (${report.rounds} rounds)`,
    "",
    row(["fault", "median of rounds, ms", "max, ms", `target ≤ ${report.targetMs} ms`]),
    row(["---", "---:", "---:", "---"]),
    ...Object.entries(report.worstMs).map(([fault, s]) =>
      row([fault, s.medianMs, s.maxMs, status(s.maxMs <= report.targetMs)])
    ),
    "",
    machineText(report.machine),
  ].join("\n");
}

async function main({ ints: { rounds }, json, loadBefore }: BenchStart<"rounds">): Promise<void> {
  const work = await Deno.realPath(await Deno.makeTempDir({ prefix: "ce-bench-faults-" }));
  let server: StdioServer | undefined;
  try {
    const config = await writeMcpConfig(work, {
      healthy: faultyFixtureServer(join(work, "healthy.pid"), {}, { timeout: 30_000 }),
      garbage: faultyFixtureServer(join(work, "garbage.pid"), { FIXTURE_MODE: "garbage" }, {
        timeout: 1_500,
      }),
    });
    const env = {
      ...serverEnv(work),
      CODE_EXECUTOR_CONFIG: await writeSettings(work, { tools: { callTimeoutMs: 2_500 } }),
    };
    server = await connectCodeExecutor("code-executor", { env, mcpConfig: config });
    const faults = Object.keys(FAULTS) as Fault[];
    log("warm-up: one run of each fault");
    for (const fault of faults) await faultyRun(server, fault);
    const worst = Object.fromEntries(faults.map((f) => [f, [] as number[]])) as Record<
      Fault,
      number[]
    >;
    for (let r = 0; r < rounds; r++) {
      for (const fault of faults) {
        worst[fault].push(await worstLatency(server, faultyRun(server, fault)));
      }
      log(
        `round ${r + 1}/${rounds}: ${
          faults.map((f) => `${worst[f].at(-1)!.toFixed(0)} ms`).join(", ")
        }`,
      );
    }
    const worstMs = Object.fromEntries(faults.map((f) => [f, stats(worst[f], 1)])) as Record<
      Fault,
      Stats
    >;
    const report: Report = {
      rounds,
      worstMs,
      targetMs: TARGET_MS,
      met: Object.values(worstMs).every((s) => s.maxMs <= TARGET_MS),
      machine: await machineReport(loadBefore),
    };
    printReport(json, report, render);
  } finally {
    await server?.close();
    await Deno.remove(work, { recursive: true }).catch(() => {});
  }
}

if (import.meta.main) {
  await runBenchWithOptions("bench/faults.ts", { rounds: { fallback: 10 } }, main);
}
