/**
 * What it costs to start every child through `setpriv --pdeathsig KILL` (src/parent_death.ts):
 * a child's start with and without it, interleaved in one process, for a trivial program and
 * for `deno eval` (what a sandbox child pays).
 *
 * ```sh
 * deno run -A bench/spawn_guard.ts [--iterations 60] [--json]
 * ```
 *
 * @module
 */
import { dieWithParent, parentDeathHelper } from "../src/parent_death.ts";
import { ratio, type Stats, stats } from "./_stats.ts";
import { loadAverage } from "./_machine.ts";
import { parseBenchArgs, printReport, row, runBench } from "./_report.ts";

interface Pair {
  program: string;
  direct: Stats;
  guarded: Stats;
}

async function timeSpawn(command: string, args: string[]): Promise<number> {
  const started = performance.now();
  await new Deno.Command(command, { args, stdout: "null", stderr: "null" }).output();
  return performance.now() - started;
}

async function measure(program: string, args: string[], iterations: number): Promise<Pair> {
  const guard = dieWithParent(program, args);
  const direct: number[] = [];
  const guarded: number[] = [];
  for (let i = 0; i < iterations; i++) {
    direct.push(await timeSpawn(program, args));
    guarded.push(await timeSpawn(guard.command, guard.args));
  }
  return {
    program: [program, ...args].join(" "),
    direct: stats(direct),
    guarded: stats(guarded),
  };
}

await runBench(async (args) => {
  const parsed = parseBenchArgs(
    args,
    "Usage: deno run -A bench/spawn_guard.ts [--iterations N] [--json]",
    {
      iterations: { fallback: 60 },
    },
  );
  if (!parsed) return;
  const helper = parentDeathHelper();
  if (!helper) {
    throw new Error("setpriv with --pdeathsig is not available here: nothing to compare");
  }
  const before = await loadAverage();
  const n = parsed.ints.iterations;
  const pairs = [
    await measure("/bin/true", [], n),
    await measure(Deno.execPath(), ["eval", "0"], n),
  ];
  const report = {
    helper,
    iterations: n,
    loadBefore: before,
    loadAfter: await loadAverage(),
    pairs,
  };
  printReport(parsed.json, report, (r) =>
    [
      `Spawn cost of ${r.helper} --pdeathsig KILL, ${r.iterations} interleaved starts each (load ${r.loadBefore} → ${r.loadAfter})`,
      "",
      row(["program", "direct median ms", "guarded median ms", "added ms", "guarded / direct"]),
      row(["---", "---:", "---:", "---:", "---:"]),
      ...r.pairs.map((p) =>
        row([
          `\`${p.program.replace(Deno.execPath(), "deno")}\``,
          p.direct.medianMs,
          p.guarded.medianMs,
          (p.guarded.medianMs - p.direct.medianMs).toFixed(2),
          ratio(p.guarded.medianMs, p.direct.medianMs),
        ])
      ),
    ].join("\n"));
});
