/**
 * Where a fresh Python interpreter's boot goes, stage by stage (issue 27): `--boots` Workers, one
 * after another, each boots Pyodide from the memory snapshot as a sandbox child's Worker does
 * (`bench/_py_boot_worker.ts`, the module compiled once here) and reports when each stage of
 * Pyodide's loader ended. Also the process's CPU time per boot (all threads: V8 compiles and
 * collects garbage on others), which is what bounds fresh interpreters a second on 2 cores.
 *
 * Run it with the children's tiering flag, as `deno task bench:py-boot` does:
 * deno run -A --v8-flags=--wasm-tiering-budget=4000000 bench/py_boot.ts [--boots 20]
 *   [--warmup 3] [--json]
 *
 * @module
 */
import { join } from "node:path";
import { pyodideDir, snapshotPath } from "../tests/_pyodide.ts";
import { cpuMs, type MachineReport, machineReport, machineText } from "./_machine.ts";
import { log, printReport, row, runBenchWithOptions } from "./_report.ts";
import { round, type Stats, stats } from "./_stats.ts";

interface Report {
  machine: MachineReport;
  boots: number;
  /** Each stage's own time (from the end of the one before), in the order reached. */
  stages: Array<{ stage: string; stats: Stats }>;
  wall: Stats;
  cpu: Stats;
}

const WORKER_START = "Worker started (isolate, Deno runtime, the Worker's file)";

/** Boots one Worker; resolves with its stages' end times and its wall time. */
async function bootOnce(
  module: WebAssembly.Module,
  indexUrl: string,
): Promise<{ marks: Record<string, number>; wallMs: number }> {
  const started = performance.now();
  const worker = new Worker(new URL("./_py_boot_worker.ts", import.meta.url).href, {
    type: "module",
  });
  try {
    const reply = await new Promise<{ marks?: Record<string, number>; error?: string }>(
      (resolve) => {
        worker.onmessage = (event) => resolve(event.data);
        worker.onerror = (event) => {
          event.preventDefault();
          resolve({ error: event.message });
        };
        worker.postMessage({ indexUrl, snapshotPath, module });
      },
    );
    if (!reply.marks) throw new Error(`A boot failed: ${reply.error}`);
    return { marks: reply.marks, wallMs: performance.now() - started };
  } finally {
    worker.terminate();
  }
}

function render(report: Report): string {
  return [
    "## A fresh interpreter's boot, stage by stage",
    "",
    machineText(report.machine),
    "",
    `${report.boots} boots from the memory snapshot, one after another, in one process.`,
    "",
    row(["stage", "median ms", "p95 ms"]),
    row(["---", "---:", "---:"]),
    ...report.stages.map(({ stage, stats }) => row([stage, stats.medianMs, stats.p95Ms])),
    row(["**total, `new Worker` → ready**", report.wall.medianMs, report.wall.p95Ms]),
    row(["process CPU per boot (all threads)", report.cpu.medianMs, report.cpu.p95Ms]),
    "",
  ].join("\n");
}

await runBenchWithOptions(
  "bench/py_boot.ts",
  { boots: { fallback: 20 }, warmup: { fallback: 3, min: 0 } },
  async ({ ints, json, loadBefore }) => {
    if (!snapshotPath) throw new Error("No memory snapshot: the boot to measure needs one");
    const indexUrl = new URL(`file://${join(pyodideDir, "pyodide.mjs")}`).href;
    const module = await WebAssembly.compile(
      await Deno.readFile(join(pyodideDir, "pyodide.asm.wasm")),
    );
    const durations = new Map<string, number[]>();
    const walls: number[] = [];
    const cpus: number[] = [];
    for (let i = 0; i < ints.warmup + ints.boots; i++) {
      const cpuBefore = await cpuMs("self");
      const { marks, wallMs } = await bootOnce(module, indexUrl);
      const cpu = await cpuMs("self") - cpuBefore;
      if (i < ints.warmup) continue;
      const ends = Object.entries(marks);
      const stages: Array<[string, number]> = [[WORKER_START, wallMs - ends.at(-1)![1]]];
      ends.forEach(([stage, end], at) => stages.push([stage, end - (ends[at - 1]?.[1] ?? 0)]));
      for (const [stage, ms] of stages) durations.set(stage, [...durations.get(stage) ?? [], ms]);
      walls.push(wallMs);
      cpus.push(cpu);
      log(`boot ${i + 1 - ints.warmup}/${ints.boots}: ${round(wallMs)} ms, CPU ${cpu} ms`);
    }
    const report: Report = {
      machine: await machineReport(loadBefore),
      boots: ints.boots,
      stages: [...durations].map(([stage, samples]) => ({ stage, stats: stats(samples, 1) })),
      wall: stats(walls, 1),
      cpu: stats(cpus, 0),
    };
    printReport(json, report, render);
  },
);
