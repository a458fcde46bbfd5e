/**
 * Tokenizing stdout while a run prints (`privacy.tokenize`), end to end: the real server, driven
 * by a real SDK client over stdio, runs TypeScript and Python code that prints well past the 64 KiB
 * that are detected at once, and the model must see exactly what tokenizing the whole output
 * after the run gives: the same placeholders, numbered the same, and nothing of a value that the
 * output cap cut in two beyond what whole-text tokenization leaves.
 *
 * @module
 */
import { assert, assertEquals } from "./_assert.ts";
import { type ServerHarness, startServer } from "./_stdio_server.ts";
import { PersonalDataDetector } from "../src/privacy/detect.ts";
import { RunTokenizer } from "../src/privacy/tokenizer.ts";
import { PlaceholderVault } from "../src/privacy/vault.ts";
import { utf8Head } from "../src/exec/child/frames.ts";

const FIXTURES = new URL("./fixtures/", import.meta.url);
const CAP = 256 * 1024;
const SETTINGS = {
  privacy: { tokenize: true },
  approvals: { mode: "off" },
  // A kept stdout's preview is then the cap's first bytes, not limits.previewChars' characters.
  limits: { maxOutputBytes: CAP, previewChars: CAP },
  // The code holds the values too: recorded, it would take placeholder numbers before the output.
  audit: { includeCode: false },
};

const ordinary = (await Deno.readTextFile(new URL("privacy_ordinary.txt", FIXTURES)))
  .trimEnd().split("\n");
const labelled = (await Deno.readTextFile(new URL("privacy_labelled.jsonl", FIXTURES)))
  .trimEnd().split("\n").map((l) =>
    JSON.parse(l) as { category: string; value: string; line: string }
  );
/** Ordinary lines with a line of personal data (emails, phones, cards, …) after every third. */
const LINES = ordinary.flatMap((line, i) =>
  i % 3 === 0 ? [line, labelled[i % labelled.length].line] : [line]
);

/** What printing the lines over and over, one print each, up to `upTo` characters, prints. */
function printed(upTo: number): string {
  const parts: string[] = [];
  let size = 0;
  for (let i = 0;; i++) {
    const line = LINES[i % LINES.length];
    if (size + line.length + 1 > upTo) return parts.join("");
    parts.push(line + "\n");
    size += line.length + 1;
  }
}

/** Prints the lines up to `upTo` characters, then `tail`, then 200 lines more. */
function typescript(upTo: number, tail = "", returns = true): string {
  return `const lines = ${JSON.stringify(LINES)};
let size = 0;
for (let i = 0;; i++) {
  const line = lines[i % lines.length];
  if (size + line.length + 1 > ${upTo}) break;
  console.log(line);
  size += line.length + 1;
}
console.log(${JSON.stringify(tail)});
for (let i = 0; i < 200; i++) console.log(lines[i]);
${returns ? "return size;" : ""}`;
}

function python(upTo: number): string {
  return `import json
lines = json.loads(${JSON.stringify(JSON.stringify(LINES))})
size = 0
i = 0
while True:
    line = lines[i % len(lines)]
    if size + len(line) + 1 > ${upTo}:
        break
    print(line)
    size += len(line) + 1
    i += 1
size`;
}

/** The host's tokenization of the whole text, with a vault that sees the same runs in order. */
const expected = new RunTokenizer({
  vault: new PlaceholderVault({ ttlMs: 60 * 60_000, maxValuesPerPrincipal: 10_000 }),
  principal: "local",
  detector: new PersonalDataDetector(),
  rawServers: [],
});

async function assertTokenizedAsWhole(stdout: string, raw: string): Promise<void> {
  const whole = await expected.text(raw);
  assertEquals(stdout.length, whole.length, "the shown stdout's length");
  assertEquals(stdout, whole);
  for (const kind of ["email", "phone", "card"]) {
    assert(stdout.includes(`<${kind}_`), `no ${kind} placeholder in the output`);
  }
}

Deno.test("privacy.tokenize detects stdout while TypeScript and Python runs print, with the placeholders and numbers of whole-text tokenization", async (t) => {
  const server: ServerHarness = await startServer({ settings: SETTINGS });
  try {
    await t.step("a TypeScript run printing 200 KB", async () => {
      const upTo = 200_000;
      const raw = printed(upTo) + "\n" + LINES.slice(0, 200).map((l) => l + "\n").join("");
      const result = await server.runTs(typescript(upTo));
      assertEquals(result.error, undefined);
      assertEquals(result.returnValue, printed(upTo).length);
      await assertTokenizedAsWhole(result.stdout, raw);
    });

    await t.step(
      "a Python run printing 150 KB, its values numbered after the first run's",
      async () => {
        const upTo = 150_000;
        const result = await server.runPy(python(upTo));
        assertEquals(result.error, undefined);
        assertEquals(result.returnValue, printed(upTo).length);
        await assertTokenizedAsWhole(result.stdout, printed(upTo));
      },
    );

    for (const [kind, value] of [["email", "jane.doe@example.org"], ["phone", "+1 415-555-2671"]]) {
      for (const inside of [1, Math.floor(value.length / 2), value.length - 1]) {
        await t.step(
          `a run cut at the cap ${inside} characters into ${kind} ${value}`,
          async () => {
            // Lines up to a little before the cap, then a line whose value straddles it. Nothing
            // is returned, so the preview of the kept stdout is the cap's first bytes.
            const head = printed(CAP - 2000);
            const headBytes = new TextEncoder().encode(head).length;
            const pad = "x".repeat(CAP - headBytes - "contact ".length - inside);
            const tail = `${pad}contact ${value} today`;
            const result = await server.runTs(typescript(CAP - 2000, tail, false));
            assertEquals(result.truncated, true);
            const raw = utf8Head(head + tail, CAP);
            assert(raw.endsWith(value.slice(0, inside)), raw.slice(-40));
            await assertTokenizedAsWhole(result.stdout, raw);
            // Nothing of the cut value beyond what whole-text tokenization leaves (it is no match).
            assert(!result.stdout.includes(value), result.stdout.slice(-60));
          },
        );
      }
    }
  } finally {
    await server.close();
  }
});
