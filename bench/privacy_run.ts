/**
 * What `privacy.tokenize` adds to a whole run (issue #15: "Tokenizing 1 MB of output adds ≤ 20 ms
 * to a run"): two servers, one with `privacy.tokenize` and one without, both with
 * `limits.maxOutputBytes` at 2 MiB, run the same `run_typescript` program, which prints 1 MB of the
 * ordinary corpus of tests/fixtures (or of the mixed one, one line in four with personal data; both
 * made as bench/privacy.ts makes them) 32 lines a `console.log`, at once or (`mixed-paced`) with
 * a pause every 512 lines. Calls alternate between the two servers, so that both see the same
 * machine load; each row gives the median wall time of the calls (through a real stdio MCP
 * client) on each server and the difference, which is what tokenizing adds to a run, then the medians of the run's own time (the result's `durationMs`,
 * which detection while the run prints may lengthen) and of the part of each call after the
 * run's end (wall time less `durationMs`, where detection after the run waits), which the runs'
 * own variance does not blur, and the mean CPU time of each server's process (all its threads)
 * per call, whose difference is what tokenizing costs the host wherever it runs.
 *
 * With `--baseline DIR` (the root of another checkout, e.g. `git worktree add /tmp/base 6558690`),
 * a third server started from there with `privacy.tokenize` takes its turn in every round, and
 * each row gives its numbers too.
 *
 * ```sh
 * deno run -A bench/privacy_run.ts [--iterations 25] [--warmup 5] [--pause-ms 100] [--baseline DIR]
 * ```
 *
 * @module
 */
import { round, runPaired, sleep, stats } from "./_stats.ts";
import { cpuMs, loadAverage } from "./_machine.ts";
import { connectCodeExecutor, type StdioServer } from "./_server.ts";
import { log, parseBenchArgs } from "./_report.ts";
import { ROOT, serverEnv, writeSettings } from "../tests/_env.ts";

const FIXTURES = new URL("../tests/fixtures/", import.meta.url);
const MB = 1024 * 1024;

const ordinary = (await Deno.readTextFile(new URL("privacy_ordinary.txt", FIXTURES)))
  .trimEnd().split("\n");
const labelled = (await Deno.readTextFile(new URL("privacy_labelled.jsonl", FIXTURES)))
  .trimEnd().split("\n").map((l) => (JSON.parse(l) as { line: string }).line);
const mixed = ordinary.flatMap((line, i) =>
  i % 3 === 0 ? [line, labelled[i % labelled.length]] : [line]
);

/**
 * Lines printed by one `console.log`: a line each makes ~20,000 frames a megabyte, and their cost
 * (0.5-2 s a run on this VM, measured) buries the tokenization's in noise.
 */
const LINES_PER_PRINT = 32;

/**
 * The `-paced` corpus: a program that works while it prints (here it waits 5 ms every 512 lines,
 * ~32 KB), which leaves the host time between frames to detect what has arrived. Without pauses
 * the host reads frames as fast as it can and detection while the run prints is on that path.
 */
const PACE_LINES = 512;
const PACE_MS = 5;

/**
 * A program that prints the lines over and over, {@linkcode LINES_PER_PRINT} a `console.log`, up
 * to 1 MB (cut at a line end, as bench/privacy.ts cuts its corpus), and returns how many
 * characters it printed.
 */
function program(lines: string[], paced: boolean): string {
  const pause = paced
    ? `if (i % ${PACE_LINES} < ${LINES_PER_PRINT}) await new Promise((r) => setTimeout(r, ${PACE_MS}));`
    : "";
  return `const lines = ${JSON.stringify(lines)};
let size = 0;
let block = [];
for (let i = 0;; i++) {
  const line = lines[i % lines.length];
  if (size + line.length + 1 > ${MB}) break;
  block.push(line);
  size += line.length + 1;
  if (block.length === ${LINES_PER_PRINT}) {
    console.log(block.join("\\n"));
    block = [];
    ${pause}
  }
}
if (block.length > 0) console.log(block.join("\\n"));
return size;`;
}

/** The characters the program prints, which its return value must equal. */
function printed(lines: string[]): number {
  let size = 0;
  for (let i = 0;; i++) {
    const line = lines[i % lines.length];
    if (size + line.length + 1 > MB) return size;
    size += line.length + 1;
  }
}

interface Server {
  name: string;
  stdio: StdioServer;
  tempDir: string;
}

async function start(name: string, tokenize: boolean, root = ROOT): Promise<Server> {
  const tempDir = await Deno.makeTempDir({ prefix: "ce-bench-privacy-" });
  const env = {
    ...serverEnv(tempDir, { home: tempDir }),
    CODE_EXECUTOR_CONFIG: await writeSettings(tempDir, {
      privacy: { tokenize },
      limits: { maxOutputBytes: 2 * MB },
      approvals: { mode: "off" },
    }),
    CODE_EXECUTOR_WARM_POOL: "1",
    PYTHON_ENABLED: "false",
  };
  try {
    const stdio = await connectCodeExecutor(name, { env, root });
    return { name, stdio, tempDir };
  } catch (error) {
    await Deno.remove(tempDir, { recursive: true }).catch(() => {});
    throw error;
  }
}

/**
 * One call's wall time, the run's own (`durationMs`), the part of the call after the run, and the
 * server process's CPU time during the call.
 */
interface Timing {
  wallMs: number;
  runMs: number;
  afterRunMs: number;
  cpuMs: number;
}

async function timed(server: Server, code: string, expected: number): Promise<Timing> {
  const cpuBefore = await cpuMs(server.stdio.pid);
  const started = performance.now();
  const result = await server.stdio.client.callTool({
    name: "run_typescript",
    arguments: { code },
  });
  const ms = performance.now() - started;
  const out = (result.structuredContent ?? {}) as {
    ok?: boolean;
    returnValue?: unknown;
    stdout?: string;
    durationMs?: number;
    error?: { type: string; message: string };
  };
  if (result.isError || out.ok !== true || out.returnValue !== expected || !out.stdout) {
    throw new Error(
      `${server.name}: the run did not print ${expected} characters: ${
        out.error ? `${out.error.type}: ${out.error.message}` : JSON.stringify(out).slice(0, 500)
      }\n${server.stdio.stderr()}`,
    );
  }
  const runMs = out.durationMs ?? NaN;
  const cpu = await cpuMs(server.stdio.pid) - cpuBefore;
  return { wallMs: ms, runMs, afterRunMs: ms - runMs, cpuMs: cpu };
}

const argv = [...Deno.args];
const at = argv.indexOf("--baseline");
const baselineDir = at >= 0 ? argv.splice(at, 2)[1] : undefined;
const parsed = parseBenchArgs(
  argv,
  "Usage: deno run -A bench/privacy_run.ts [--iterations 25] [--warmup 5] [--pause-ms 100] [--baseline DIR]",
  {
    iterations: { fallback: 25 },
    warmup: { fallback: 5, min: 0 },
    pauseMs: { fallback: 100, min: 0 },
  },
);
if (!parsed) Deno.exit(0);
const args = parsed.ints;
log(`load before: ${await loadAverage()}`);
const servers: Server[] = [];
try {
  servers.push(await start("plain", false));
  servers.push(await start("tokenize", true));
  if (baselineDir) servers.push(await start("baseline", true, baselineDir));
  const corpora = [["ordinary", ordinary, false], ["mixed", mixed, false], [
    "mixed-paced",
    mixed,
    true,
  ]] as const;
  for (const [corpus, lines, paced] of corpora) {
    const code = program([...lines], paced);
    const expected = printed([...lines]);
    const load = await loadAverage();
    // Rotate which server goes first, so that none always runs right after another.
    const byName = await runPaired({
      arms: servers.map((server) => server.name),
      rounds: args.iterations,
      warmup: args.warmup,
      sample: async (name) => {
        await sleep(args.pauseMs);
        return await timed(servers.find((server) => server.name === name)!, code, expected);
      },
    });
    const samples = new Map<Server, Timing[]>(
      servers.map((server) => [server, byName[server.name]]),
    );
    const median = (server: Server, of: (t: Timing) => number) =>
      stats(samples.get(server)!.map(of)).medianMs;
    const mean = (server: Server, of: (t: Timing) => number) => {
      const all = samples.get(server)!.map(of);
      return round(all.reduce((sum, x) => sum + x, 0) / all.length, 1);
    };
    // The runs' own time varies far more than tokenizing takes on a loaded machine; the part of a
    // call after the run's end (the executor's durationMs) is where whole-text detection waited.
    // CPU time is counted in ticks of 10 ms: its mean over the calls is what is compared.
    const [plain, ...tokenizing] = servers;
    const row = (server: Server) => ({
      wallMs: median(server, (t) => t.wallMs),
      runMs: median(server, (t) => t.runMs),
      afterRunMs: median(server, (t) => t.afterRunMs),
      cpuMs: mean(server, (t) => t.cpuMs),
    });
    const base = row(plain);
    // Each round's difference, which the machine's drift in speed (up to 2× over minutes here)
    // does not reach the way it reaches the medians of many rounds.
    const paired = (server: Server) => {
      const mine = samples.get(server)!;
      return stats(samples.get(plain)!.map((t, i) => mine[i].wallMs - t.wallMs)).medianMs;
    };
    const added = (server: Server) => {
      const r = row(server);
      return {
        ...r,
        addedMs: round(r.wallMs - base.wallMs, 2),
        pairedAddedMs: paired(server),
        addedRunMs: round(r.runMs - base.runMs, 2),
        addedAfterRunMs: round(r.afterRunMs - base.afterRunMs, 2),
        addedCpuMs: round(r.cpuMs - base.cpuMs, 1),
        wall: stats(samples.get(server)!.map((t) => t.wallMs)),
      };
    };
    console.log(JSON.stringify({
      corpus,
      chars: expected,
      load,
      plain: { ...base, wall: stats(samples.get(plain)!.map((t) => t.wallMs)) },
      ...Object.fromEntries(tokenizing.map((server) => [server.name, added(server)])),
    }));
  }
} finally {
  for (const server of servers) {
    await server.stdio.close();
    await Deno.remove(server.tempDir, { recursive: true }).catch(() => {});
  }
}
log(`load after: ${await loadAverage()}`);
