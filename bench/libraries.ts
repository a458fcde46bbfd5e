/**
 * What npm packages (`sandbox.npmPackages`) and `display()` cost, through a real stdio MCP client
 * talking to `deno run -A main.ts serve`: two servers, one without packages and one with, whose
 * warm calls are interleaved round by round (`runPaired`) so that both see the same load.
 *
 * ```sh
 * deno run -A bench/libraries.ts [--rounds 20] [--warmup 3] [--pause-ms 500] [--json]
 * ```
 *
 * Arms (each a warm `run_typescript` call, the pool refilled before it):
 * - `plain`: `return 1` on the server without packages;
 * - `packages`: `return 1` on the server with packages (children without `--no-npm`, with the
 *   import map): what offering packages costs a run that imports none;
 * - `csv`: `csv-parse/sync` imported and a CSV parsed;
 * - `dateIndex`: date-fns imported from its index (its ~250 modules) and `format` called;
 * - `dateSubpath`: `date-fns/format` imported alone and called;
 * - `display`: a 4 KiB PNG displayed (`image` content), on the server with packages.
 *
 * Also: each server's start (spawn to connected; the one with packages runs `deno cache` on a
 * filled cache), and `NpmPackages.ensureCached` alone on a filled cache.
 *
 * @module
 */
import { join } from "node:path";
import { cacheDir } from "../src/config/paths.ts";
import { NpmPackages } from "../src/exec/typescript/npm_packages.ts";
import { createLogger } from "../src/log.ts";
import { serverEnv } from "../tests/_env.ts";
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
import { repeat, sleep, type Stats, stats } from "./_stats.ts";

const PACKAGES = ["csv-parse@7.0.3", "date-fns@4.4.0", "fast-png@8.0.0"];
const ARMS = ["plain", "packages", "csv", "dateIndex", "dateSubpath", "display"] as const;
type Arm = typeof ARMS[number];

/** A 4 KiB PNG of noise, made once in a child of the packages server and displayed by each run. */
const MAKE_PNG = `import { encode } from "fast-png";
const data = crypto.getRandomValues(new Uint8Array(32 * 32 * 4));
return encode({ width: 32, height: 32, data, channels: 4 }).toBase64();`;

const CODE: Record<Arm, (png: string) => string> = {
  plain: () => "return 1",
  packages: () => "return 1",
  csv: () => 'import { parse } from "csv-parse/sync";\nreturn parse("a\\n1\\n").length - 1;',
  dateIndex: () =>
    'import { format } from "date-fns";\nreturn format(new Date(0), "yyyy") ? 1 : 0;',
  dateSubpath: () =>
    'import { format } from "date-fns/format";\nreturn format(new Date(0), "yyyy") ? 1 : 0;',
  display: (png) => `await display(${JSON.stringify(png)}, "image/png");\nreturn 1;`,
};

interface Report {
  machine: MachineReport;
  rounds: number;
  startMs: { plain: number; packages: number };
  ensureCachedMs: Stats;
  arms: Record<Arm, ArmStats>;
  pngBytes: number;
}

function startServer(name: string, packages: string[]): Promise<StdioServer> {
  return connectInTempDir(name, `ce-bench-lib-${name}-`, (tempDir) =>
    Promise.resolve({
      ...serverEnv(tempDir),
      CODE_EXECUTOR_WARM_POOL: "2",
      ...(packages.length ? { CODE_EXECUTOR_NPM_PACKAGES: packages.join(" ") } : {}),
    }));
}

async function main(
  { ints: { rounds, warmup, pauseMs }, json, loadBefore }: BenchStart<keyof typeof PAIRED_RUN_ARGS>,
): Promise<void> {
  const packages = new NpmPackages(PACKAGES);
  const denoDir = join(cacheDir(), "deno-ts");
  const quiet = createLogger("error");
  // The first call fills the cache if it must; the measured ones find it full.
  await packages.ensureCached({ denoPath: Deno.execPath(), denoDir, log: quiet });
  const cached = await repeat(
    { iterations: 10, warmup: 1 },
    () => packages.ensureCached({ denoPath: Deno.execPath(), denoDir, log: quiet }),
  );

  const plain = await startServer("plain", []);
  const withPackages = await startServer("packages", PACKAGES);
  try {
    const startMs = {
      plain: Math.round(plain.connectedAt - plain.spawnedAt),
      packages: Math.round(withPackages.connectedAt - withPackages.spawnedAt),
    };
    const made = await withPackages.client.callTool({
      name: "run_typescript",
      arguments: { code: MAKE_PNG },
    });
    const png = (made.structuredContent as { returnValue: string }).returnValue;
    await sleep(2_000);
    const arms = await pairedTimedRuns({
      arms: ARMS,
      rounds,
      warmup,
      pauseMs,
      run: (arm) =>
        timedRun(arm === "plain" ? plain : withPackages, "run_typescript", {
          code: CODE[arm](png),
        }, 1),
    });
    const report: Report = {
      machine: await machineReport(loadBefore),
      rounds,
      startMs,
      ensureCachedMs: stats(cached),
      arms,
      pngBytes: Uint8Array.fromBase64(png).length,
    };
    printReport(json, report, render);
  } finally {
    await plain.close();
    await withPackages.close();
  }
}

function render(report: Report): string {
  const { arms } = report;
  return [
    `# npm packages and display(): ${report.rounds} interleaved rounds, warm pool 2`,
    "",
    machineText(report.machine),
    "",
    ...armRows(ARMS, arms),
    "",
    `PNG displayed: ${report.pngBytes} bytes.`,
    `Server start, spawn to connected: ${report.startMs.plain} ms without packages, ${report.startMs.packages} ms with ${PACKAGES.length}.`,
    `ensureCached on a filled cache (deno cache, offline): median ${report.ensureCachedMs.medianMs} ms, p95 ${report.ensureCachedMs.p95Ms} ms.`,
  ].join("\n");
}

if (import.meta.main) await runBenchWithOptions("bench/libraries.ts", PAIRED_RUN_ARGS, main);
