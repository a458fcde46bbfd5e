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
 * own variance does not blur.
 *
 * ```sh
 * deno run -A bench/privacy_run.ts [--iterations 25] [--warmup 5] [--pause-ms 100]
 * ```
 *
 * @module
 */
import { join } from "node:path";
import {
  connectStdio,
  loadAverage,
  log,
  parseBenchArgs,
  round,
  sleep,
  stats,
  type StdioServer,
} from "./_common.ts";
import { ROOT, serverEnv } from "../tests/_helpers.ts";

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

async function start(name: string, tokenize: boolean): Promise<Server> {
  const tempDir = await Deno.makeTempDir({ prefix: "ce-bench-privacy-" });
  const settings = join(tempDir, "settings.jsonc");
  await Deno.writeTextFile(
    settings,
    JSON.stringify({
      privacy: { tokenize },
      limits: { maxOutputBytes: 2 * MB },
      approvals: { mode: "off" },
    }),
  );
  const env = {
    ...serverEnv(tempDir, { home: tempDir }),
    CODE_EXECUTOR_CONFIG: settings,
    CODE_EXECUTOR_WARM_POOL: "1",
    PYTHON_ENABLED: "false",
  };
  try {
    const stdio = await connectStdio(name, {
      command: Deno.execPath(),
      args: ["run", "-A", "main.ts", "serve"],
      cwd: ROOT,
      env,
    });
    return { name, stdio, tempDir };
  } catch (error) {
    await Deno.remove(tempDir, { recursive: true }).catch(() => {});
    throw error;
  }
}

/** One call's wall time, the run's own (`durationMs`), and the part of the call after the run. */
interface Timing {
  wallMs: number;
  runMs: number;
  afterRunMs: number;
}

async function timed(server: Server, code: string, expected: number): Promise<Timing> {
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
  return { wallMs: ms, runMs, afterRunMs: ms - runMs };
}

const parsed = parseBenchArgs(
  Deno.args,
  "Usage: deno run -A bench/privacy_run.ts [--iterations 25] [--warmup 5] [--pause-ms 100]",
  {
    iterations: { fallback: 25 },
    warmup: { fallback: 5, min: 0 },
    pauseMs: { fallback: 100, min: 0 },
  },
);
if (!parsed) Deno.exit(0);
const args = parsed.ints;
log(`load before: ${await loadAverage()}`);
const plain = await start("the server without tokenize", false);
const tokenizing = await start("the server with tokenize", true);
try {
  const corpora = [["ordinary", ordinary, false], ["mixed", mixed, false], [
    "mixed-paced",
    mixed,
    true,
  ]] as const;
  for (const [corpus, lines, paced] of corpora) {
    const code = program([...lines], paced);
    const expected = printed([...lines]);
    const samples: Record<"plain" | "tokenize", Timing[]> = { plain: [], tokenize: [] };
    const load = await loadAverage();
    for (let i = 0; i < args.warmup + args.iterations; i++) {
      // Alternate which server goes first, so that neither always runs right after the other.
      const order = i % 2 ? [tokenizing, plain] : [plain, tokenizing];
      for (const server of order) {
        await sleep(args.pauseMs);
        const timing = await timed(server, code, expected);
        if (i >= args.warmup) samples[server === plain ? "plain" : "tokenize"].push(timing);
      }
    }
    const wall = (name: "plain" | "tokenize") => stats(samples[name].map((t) => t.wallMs));
    const run = (name: "plain" | "tokenize") => stats(samples[name].map((t) => t.runMs));
    const after = (name: "plain" | "tokenize") => stats(samples[name].map((t) => t.afterRunMs));
    // The runs' own time varies far more than tokenizing takes on a loaded machine; the part of a
    // call after the run's end (the executor's durationMs) is where whole-text detection waited.
    console.log(JSON.stringify({
      corpus,
      chars: expected,
      load,
      plainMedianMs: wall("plain").medianMs,
      tokenizeMedianMs: wall("tokenize").medianMs,
      addedMs: round(wall("tokenize").medianMs - wall("plain").medianMs, 2),
      plainRunMedianMs: run("plain").medianMs,
      tokenizeRunMedianMs: run("tokenize").medianMs,
      plainAfterRunMedianMs: after("plain").medianMs,
      tokenizeAfterRunMedianMs: after("tokenize").medianMs,
      addedAfterRunMs: round(after("tokenize").medianMs - after("plain").medianMs, 2),
      plain: wall("plain"),
      tokenize: wall("tokenize"),
    }));
  }
} finally {
  for (const server of [plain, tokenizing]) {
    await server.stdio.close();
    await Deno.remove(server.tempDir, { recursive: true }).catch(() => {});
  }
}
log(`load after: ${await loadAverage()}`);
