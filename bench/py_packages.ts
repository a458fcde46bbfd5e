/**
 * What importing a `python.packages` wheel costs a warm `run_python` call, through a real stdio
 * MCP client talking to `deno run -A main.ts serve`. The wheel is the one tests/py_packages_test.ts
 * builds from `tests/fixtures/py_package/`. Two servers, their calls interleaved round by round
 * (`runPaired`) so that both see the same load: one with the wheel in `python.packages` (imported
 * into the snapshot), one with the same wheel in `python.wheelDirs` (unpacked after boot, imported
 * by the run).
 *
 * ```sh
 * deno run -A bench/py_packages.ts [--rounds 20] [--warmup 3] [--pause-ms 500] [--json]
 * ```
 *
 * Arms (each a warm call, the pool refilled before it):
 * - `plain`: `1` on the `python.packages` server;
 * - `imported`: `import visitstats` and a call, on the `python.packages` server;
 * - `plainDirs`: `1` on the `python.wheelDirs` server;
 * - `importedDirs`: the same import and call on the `python.wheelDirs` server.
 *
 * @module
 */
import { join } from "node:path";
import { buildWheel, wheelFileName } from "../src/codegen/wheel.ts";
import { ROOT, serverEnv, writeSettings } from "../tests/_env.ts";
import { type MachineReport, machineReport, machineText } from "./_machine.ts";
import { type BenchStart, printReport, runBenchWithOptions } from "./_report.ts";
import {
  armRows,
  type ArmStats,
  connectInTempDir,
  PAIRED_RUN_ARGS,
  pairedTimedRuns,
  type StdioServer,
  timedRun,
} from "./_server.ts";
import { sleep } from "./_stats.ts";

const ARMS = ["plain", "imported", "plainDirs", "importedDirs"] as const;
type Arm = typeof ARMS[number];

const IMPORT = 'import visitstats\nvisitstats.total("day,visits\\n1,12\\n2,30\\n")';
const CODE: Record<Arm, { code: string; expected: number }> = {
  plain: { code: "42", expected: 42 },
  imported: { code: IMPORT, expected: 42 },
  plainDirs: { code: "42", expected: 42 },
  importedDirs: { code: IMPORT, expected: 42 },
};

interface Report {
  machine: MachineReport;
  rounds: number;
  wheelBytes: number;
  arms: Record<Arm, ArmStats>;
}

async function fixtureWheel(): Promise<Uint8Array> {
  const fixture = join(ROOT, "tests", "fixtures", "py_package");
  const files: Record<string, string> = {};
  for (const file of ["visitstats/__init__.py", "visitstats/later.py"]) {
    files[file] = await Deno.readTextFile(join(fixture, file));
  }
  return buildWheel(files, { distribution: "visitstats", version: "1.0.0" });
}

function startServer(name: string, python: Record<string, unknown>): Promise<StdioServer> {
  return connectInTempDir(name, `ce-bench-pypkg-${name}-`, async (tempDir) => ({
    ...serverEnv(tempDir),
    CODE_EXECUTOR_PYTHON_WARM_POOL: "2",
    CODE_EXECUTOR_CONFIG: await writeSettings(tempDir, { python }),
  }));
}

async function main(
  { ints: { rounds, warmup, pauseMs }, json, loadBefore }: BenchStart<keyof typeof PAIRED_RUN_ARGS>,
): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "ce-bench-pypkg-wheel-" });
  const wheel = await fixtureWheel();
  const path = join(dir, wheelFileName("visitstats", "1.0.0"));
  await Deno.writeFile(path, wheel);
  const packages = await startServer("packages", { packages: [path] });
  const dirs = await startServer("wheelDirs", { wheelDirs: [dir] });
  try {
    // The first call of each waits for its snapshot (the packages server's may be built now).
    for (const server of [packages, dirs]) {
      await timedRun(server, "run_python", { code: IMPORT, timeoutMs: 180_000 }, 42);
    }
    await sleep(2_000);
    const arms = await pairedTimedRuns({
      arms: ARMS,
      rounds,
      warmup,
      pauseMs,
      run: (arm) =>
        timedRun(arm.endsWith("Dirs") ? dirs : packages, "run_python", {
          code: CODE[arm].code,
        }, CODE[arm].expected),
    });
    printReport(json, {
      machine: await machineReport(loadBefore),
      rounds,
      wheelBytes: wheel.length,
      arms,
    }, render);
  } finally {
    await packages.close();
    await dirs.close();
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

function render(report: Report): string {
  const { arms } = report;
  return [
    `# python.packages: ${report.rounds} interleaved rounds, warm pool 2`,
    "",
    machineText(report.machine),
    "",
    ...armRows(ARMS, arms),
    "",
    `Wheel: ${report.wheelBytes} bytes (tests/fixtures/py_package).`,
  ].join("\n");
}

if (import.meta.main) await runBenchWithOptions("bench/py_packages.ts", PAIRED_RUN_ARGS, main);
