/**
 * What `privacy.tokenize` adds to a run: the host-side tokenization of 1 MB of output
 * (`tokenizeResult`, as the executor calls it), on the ordinary corpus of tests/fixtures (text
 * with numbers, dates, ids and addresses in the documentation ranges, almost no personal data)
 * and on a mix of it with the labelled personal data (one line in four holds a value).
 * Goal (issue #15): at most 20 ms for 1 MB. `deno run -A bench/privacy.ts`
 *
 * @module
 */
import { loadAverage, log, repeat, stats } from "./_common.ts";
import { detectorFor } from "../src/privacy/redaction.ts";
import { RunTokenizer } from "../src/privacy/tokenizer.ts";
import { PlaceholderVault } from "../src/privacy/vault.ts";
import { tokenizeResult } from "../src/exec/result.ts";
import { resolveSettings } from "../src/config/settings.ts";

const FIXTURES = new URL("../tests/fixtures/", import.meta.url);
const MB = 1024 * 1024;

function oneMegabyte(text: string): string {
  // Cut at a line end, so that no value is split at the edge.
  const long = text.repeat(Math.ceil(MB / text.length) + 1).slice(0, MB);
  return long.slice(0, long.lastIndexOf("\n") + 1);
}

const ordinary = await Deno.readTextFile(new URL("privacy_ordinary.txt", FIXTURES));
const labelled = (await Deno.readTextFile(new URL("privacy_labelled.jsonl", FIXTURES)))
  .trimEnd().split("\n").map((l) => (JSON.parse(l) as { line: string }).line);
const ordinaryLines = ordinary.trimEnd().split("\n");
const mixed =
  ordinaryLines.flatMap((line, i) => i % 3 === 0 ? [line, labelled[i % labelled.length]] : [line])
    .join("\n") + "\n";

const settings = resolveSettings({ privacy: { tokenize: true } }, "bench").privacy;
log(`load before: ${await loadAverage()}`);
for (
  const [name, text] of [
    ["ordinary", oneMegabyte(ordinary)],
    ["mixed", oneMegabyte(mixed)],
    // limits.maxOutputBytes' default: the most a run returns unless the admin raises it.
    ["mixed-100KiB", oneMegabyte(mixed).slice(0, 100 * 1024)],
  ]
    .filter(([name]) => !Deno.args.length || Deno.args.includes(name))
) {
  const samples = await repeat({ warmup: 3, iterations: 15 }, () => {
    // A fresh vault each time: every value is new, the slower case.
    const tokenizer = new RunTokenizer({
      vault: new PlaceholderVault(settings),
      principal: "bench",
      detector: detectorFor(settings),
      rawServers: [],
    });
    const started = performance.now();
    const out = tokenizeResult(
      { ok: true, stdout: text, stderr: "", durationMs: 0, toolCalls: [] },
      tokenizer,
    );
    const ms = performance.now() - started;
    if (out.stdout.length === 0) throw new Error("unreachable");
    return Promise.resolve(ms);
  });
  console.log(JSON.stringify({ corpus: name, bytes: text.length, ...stats(samples) }));
}
log(`load after: ${await loadAverage()}`);
