/**
 * What `privacy.tokenize` adds to a run: the host-side tokenization of 1 MB of output
 * (`tokenizeResult`, as the executor calls it once the run has ended), on the ordinary corpus of
 * tests/fixtures (text with numbers, dates, ids and addresses in the documentation ranges, almost
 * no personal data) and on a mix of it with the labelled personal data (one line in four holds a
 * value). The fixtures repeat to make a megabyte, so their values repeat as a log's do; the
 * `-distinct` corpora draw new digits in every repetition, so that no number is seen twice (the
 * slower case: nothing the detector learnt about a value serves again).
 * Each row gives the wall time of 30 tokenizations (after at least 10 and 3 s of them to warm up:
 * a server tokenizes every run) and `cpuMs`, this thread's CPU time per sample over the same 30
 * (everything a sample times, below): on a loaded machine the first waits for a CPU and the
 * second does not. Each row also
 * gives `scanMedianMs`, the median of one plain pass over the text counting its digits, timed
 * just before each tokenization, and `timesScan`, the median of tokenization / that pass: this
 * machine's speed drifts by up to 2x over seconds (a noisy neighbour), and the ratio does not.
 * With `--baseline DIR` (the root of another checkout, e.g. `git worktree add /tmp/base e7d50cc`),
 * each sample also tokenizes the text with that checkout's detector and vault, right after, and
 * the row gives its median and the median of the paired ratios (now / baseline).
 * Each sample also times the end of a run that printed the text flat out (in frames of 2 KiB,
 * with no quiet moment to detect it while it printed), as the server has it: the text is then
 * detected half on the host's detection thread and half on this one (`StdoutTokenizer`); the row
 * gives its median (`threadEndMedianMs`) and the median of its paired ratios to the tokenization
 * of the whole text on this thread alone (`timesWhole`).
 * Goal (issue #15): at most 20 ms for 1 MB.
 * `deno run -A bench/privacy.ts [--baseline DIR] [corpus...]`
 *
 * @module
 */
import { repeat, stats } from "./_stats.ts";
import { loadAverage } from "./_machine.ts";
import { log } from "./_report.ts";
import { detectOptions, detectorFor } from "../src/privacy/redaction.ts";
import { DetectorThread } from "../src/privacy/thread.ts";
import { RunTokenizer } from "../src/privacy/tokenizer.ts";
import { PlaceholderVault } from "../src/privacy/vault.ts";
import { tokenizeResult } from "../src/exec/result.ts";
import { resolveSettings } from "../src/config/settings.ts";

const FIXTURES = new URL("../tests/fixtures/", import.meta.url);
const MB = 1024 * 1024;

/** A fixed sequence of pseudo-random digits, the same in every run of the bench. */
function digits(seed: number): () => string {
  let state = seed;
  return () => {
    state = (state * 1103515245 + 12345) & 0x7fffffff;
    return String(state % 10);
  };
}

/**
 * The text's lines repeated up to `size` characters, cut at a line end so that no value is split
 * at the edge, and joined as the executor's output capture joins what a run prints (one flat
 * string: a sliced or concatenated one is slower to read character by character).
 */
function output(text: string, size: number, distinct: boolean): string {
  const lines = text.split(/(?<=\n)/);
  const next = digits(15);
  const parts: string[] = [];
  let length = 0;
  for (let i = 0;; i++) {
    let line = lines[i % lines.length];
    if (distinct && i >= lines.length) line = line.replace(/\d/g, next);
    if (length + line.length > size) break;
    parts.push(line);
    length += line.length;
  }
  return parts.join("");
}

const ordinary = await Deno.readTextFile(new URL("privacy_ordinary.txt", FIXTURES));
const labelled = (await Deno.readTextFile(new URL("privacy_labelled.jsonl", FIXTURES)))
  .trimEnd().split("\n").map((l) => (JSON.parse(l) as { line: string }).line);
const ordinaryLines = ordinary.trimEnd().split("\n");
const mixed =
  ordinaryLines.flatMap((line, i) => i % 3 === 0 ? [line, labelled[i % labelled.length]] : [line])
    .join("\n") + "\n";

const corpora: Array<[string, () => string]> = [
  ["ordinary", () => output(ordinary, MB, false)],
  ["mixed", () => output(mixed, MB, false)],
  // limits.maxOutputBytes' default: the most a run returns unless the admin raises it.
  ["mixed-100KiB", () => output(mixed, 100 * 1024, false)],
  ["ordinary-distinct", () => output(ordinary, MB, true)],
  ["mixed-distinct", () => output(mixed, MB, true)],
];

/**
 * The CPU time this thread has used, in milliseconds (Linux; 10 ms ticks), undefined elsewhere.
 * On a loaded machine the wall time of a tokenization waits for a CPU; its CPU time is what it
 * adds to a run on a machine with a CPU free.
 */
function threadCpuMs(): number | undefined {
  try {
    const stat = Deno.readTextFileSync("/proc/thread-self/stat");
    const [utime, stime] = stat.slice(stat.lastIndexOf(")") + 2).split(" ").slice(11, 13);
    return (Number(utime) + Number(stime)) * 10;
  } catch {
    return undefined;
  }
}

/** One pass over the text counting its digits: the baseline each tokenization is compared with. */
function countDigits(text: string): number {
  let digits = 0;
  for (let i = 0; i < text.length; i++) if (text.charCodeAt(i) - 48 >>> 0 <= 9) digits++;
  return digits;
}

const settings = resolveSettings({ privacy: { tokenize: true } }, "bench").privacy;
// One detector, as the host has one for all runs; a fresh vault each time: every value is new.
const detector = detectorFor(settings);
const thread = new DetectorThread(detectOptions(settings));
if (!await thread.start()) throw new Error("The detection thread did not start");
/** What a run prints at a time in the flat-out case (a `console.log` of 32 lines). */
const FRAME = 2048;

const args = [...Deno.args];
const at = args.indexOf("--baseline");
const baselineDir = at >= 0 ? args.splice(at, 2)[1] : undefined;
/** Tokenizes a text with another checkout's detector and vault, as its executor would. */
let baseline: ((text: string) => string) | undefined;
if (baselineDir) {
  const root = new URL(`file://${baselineDir.replace(/\/?$/, "/")}src/privacy/`);
  const { detectorFor: baseDetectorFor } = await import(new URL("redaction.ts", root).href);
  const { PlaceholderVault: BaseVault } = await import(new URL("vault.ts", root).href);
  const baseDetector = baseDetectorFor(settings);
  baseline = (text) => new BaseVault(settings).tokenize("bench", text, baseDetector);
}
log(`load before: ${await loadAverage()}`);
for (const [name, make] of corpora.filter(([n]) => !args.length || args.includes(n))) {
  const text = make();
  const load = await loadAverage();
  const tokenize = async () => {
    const tokenizer = new RunTokenizer({
      vault: new PlaceholderVault(settings),
      principal: "bench",
      detector,
      rawServers: [],
    });
    // The same-process baseline: one plain pass over the text (the least any detector does), just
    // before; this machine's speed drifts by up to 2x over seconds, and the ratio does not.
    let scanned = performance.now();
    if (countDigits(text) < 0) throw new Error("unreachable");
    scanned = performance.now() - scanned;
    const started = performance.now();
    const out = await tokenizeResult(
      { ok: true, stdout: text, stderr: "", durationMs: 0, toolCalls: [] },
      tokenizer,
    );
    const ms = performance.now() - started;
    if (out.stdout.length === 0) throw new Error("unreachable");
    const streamed = new RunTokenizer({
      vault: new PlaceholderVault(settings),
      principal: "bench",
      detector,
      rawServers: [],
      thread,
    });
    const stdout = streamed.stream(2 * MB);
    for (let at = 0; at < text.length; at += FRAME) stdout.push(text.slice(at, at + FRAME));
    stdout.stop();
    let end = performance.now();
    const ended = await tokenizeResult(
      { ok: true, stdout: text, stderr: "", durationMs: 0, toolCalls: [] },
      streamed,
      stdout,
    );
    end = performance.now() - end;
    if (ended.stdout !== out.stdout) throw new Error("The run's end tokenized differently");
    let base = NaN;
    if (baseline) {
      base = performance.now();
      if (baseline(text).length === 0) throw new Error("unreachable");
      base = performance.now() - base;
    }
    return { ms, scanned, base, end };
  };
  // A server has tokenized many runs before this one: warm up for 10 tokenizations and 3 s, so
  // that V8's optimizing compiler, a background thread that a loaded machine starves, is done.
  for (let i = 0, started = performance.now(); i < 10 || performance.now() - started < 3000; i++) {
    await tokenize();
  }
  const cpuBefore = threadCpuMs();
  const runs = await repeat({ warmup: 0, iterations: 30 }, tokenize);
  const samples = runs.map((r) => r.ms);
  const scan = stats(runs.map((r) => r.scanned));
  const ratios = runs.map((r) => r.ms / r.scanned).sort((a, b) => a - b);
  const endRatios = runs.map((r) => r.end / r.ms).sort((a, b) => a - b);
  const vsBaseline = baseline
    ? {
      baselineMedianMs: stats(runs.map((r) => r.base)).medianMs,
      timesBaseline: Math.round(
        runs.map((r) => r.ms / r.base).sort((a, b) => a - b)[runs.length >> 1] * 100,
      ) / 100,
    }
    : {};
  const cpuAfter = threadCpuMs();
  const cpuMs = cpuBefore === undefined || cpuAfter === undefined
    ? undefined
    : Math.round((cpuAfter - cpuBefore) / samples.length * 10) / 10;
  console.log(
    JSON.stringify({
      corpus: name,
      bytes: text.length,
      load,
      cpuMs,
      ...stats(samples),
      scanMedianMs: scan.medianMs,
      timesScan: Math.round(ratios[ratios.length >> 1] * 10) / 10,
      threadEndMedianMs: stats(runs.map((r) => r.end)).medianMs,
      timesWhole: Math.round(endRatios[endRatios.length >> 1] * 100) / 100,
      ...vsBaseline,
    }),
  );
}
log(`load after: ${await loadAverage()}`);
thread.close();
