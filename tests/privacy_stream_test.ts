/**
 * `StdoutTokenizer`: personal data detected in a run's stdout while it arrives, in chunks, must
 * be exactly what detecting the shown text whole finds, however the text is cut into frames and
 * however the shown text is cut (the cap, a preview).
 *
 * @module
 */
import { assert, assertEquals } from "./_assert.ts";
import { PersonalDataDetector, type PersonalDataMatch } from "../src/privacy/detect.ts";
import { StdoutTokenizer } from "../src/privacy/stream.ts";
import { DetectorThread } from "../src/privacy/thread.ts";
import { HostPrivacy } from "../src/privacy/host.ts";
import { SHARE_CHARS } from "../src/privacy/stream.ts";
import { resolveSettings } from "../src/config/settings.ts";
import { RunTokenizer } from "../src/privacy/tokenizer.ts";
import { PlaceholderVault } from "../src/privacy/vault.ts";
import { OutputCapture, utf8Head } from "../src/exec/child/frames.ts";

const FIXTURES = new URL("./fixtures/", import.meta.url);
const detector = new PersonalDataDetector();

const ordinary = (await Deno.readTextFile(new URL("privacy_ordinary.txt", FIXTURES)))
  .trimEnd().split("\n");
const labelled = (await Deno.readTextFile(new URL("privacy_labelled.jsonl", FIXTURES)))
  .trimEnd().split("\n").map((l) => (JSON.parse(l) as { line: string }).line);
/**
 * Both fixtures, one labelled line (personal data) after every other ordinary one, three times:
 * several batches of what is detected at once.
 */
const corpus = (
  ordinary.flatMap((line, i) => [line, labelled[i % labelled.length]].slice(0, 1 + i % 2))
    .concat(labelled).join("\n") + "\n"
).repeat(3);

/** A seeded generator, so that a failure can be run again. */
function random(seed: number): (below: number) => number {
  let state = seed;
  return (below) => {
    state = (state * 1103515245 + 12345) & 0x7fffffff;
    return state % below;
  };
}

function stream(maxChars = Infinity, thread?: DetectorThread, host = detector): StdoutTokenizer {
  return new StdoutTokenizer({
    detector: host,
    maxChars,
    tokenize: () => {
      throw new Error("unused");
    },
    thread,
  });
}

/** A started detection thread, closed after `use`. */
async function withThread(use: (thread: DetectorThread) => Promise<void>): Promise<void> {
  const thread = new DetectorThread({});
  try {
    assert(await thread.start(), "the thread is ready");
    await use(thread);
  } finally {
    thread.close();
  }
}

/** The host's detector, counting the characters it detects. */
function counting(): { detector: PersonalDataDetector; chars: () => number } {
  let chars = 0;
  const host = {
    find(text: string) {
      chars += text.length;
      return detector.find(text);
    },
  } as PersonalDataDetector;
  return { detector: host, chars: () => chars };
}

/**
 * Pushes the text in pieces of random lengths (frames), from a character to 100 KiB, with quiet
 * moments (detection of the lines pending) after a random tenth of them.
 */
function pushRandomly(scanner: StdoutTokenizer, text: string, next: (below: number) => number) {
  for (let at = 0; at < text.length;) {
    const size = next(4) === 0 ? 1 + next(100 * 1024) : 1 + next(200);
    scanner.push(text.slice(at, at + size));
    if (next(10) === 0) scanner.detectPending();
    at += size;
  }
}

function same(actual: PersonalDataMatch[], text: string, message: string): void {
  assertEquals(actual, detector.find(text), message);
}

Deno.test("StdoutTokenizer.matches() equals whole-text detection for random chunkings of the fixtures", async () => {
  assert(corpus.length > 3 * 64 * 1024, `${corpus.length} characters`);
  const values = detector.find(corpus).length;
  assert(values > 500, `${values} values in the corpus`);
  for (let seed = 1; seed <= 12; seed++) {
    const next = random(seed);
    const scanner = stream();
    pushRandomly(scanner, corpus, next);
    same(await scanner.matches(corpus), corpus, `seed ${seed}`);
  }
});

Deno.test("StdoutTokenizer.matches() equals whole-text detection of a shown text cut anywhere (the cap, a preview)", async () => {
  for (let seed = 1; seed <= 12; seed++) {
    const next = random(100 + seed);
    const scanner = stream();
    pushRandomly(scanner, corpus, next);
    // A preview is a UTF-8 head of what was captured: any prefix, mid-line or not.
    const shown = utf8Head(corpus, next(corpus.length));
    same(await scanner.matches(shown), shown, `seed ${seed}, ${shown.length} characters shown`);
  }
});

Deno.test("StdoutTokenizer stops detecting at maxChars and still matches a shown text cut there", async () => {
  for (const maxChars of [70_000, 140_000, 200_001]) {
    const scanner = stream(maxChars);
    pushRandomly(scanner, corpus, random(maxChars));
    const shown = corpus.slice(0, maxChars);
    same(await scanner.matches(shown), shown, `maxChars ${maxChars}`);
  }
});

Deno.test("StdoutTokenizer keeps a dotted quad after 'version' and a line end a version when the chunk starts there", async () => {
  const head = "x".repeat(65 * 1024) + "\nupgraded to release version\n";
  const text = head + "83.12.45.7 installed\nhost 83.12.45.8 up\n";
  // The whole text: the first quad is a version, the second an address.
  assertEquals(detector.find(text).map((m) => m.value), ["83.12.45.8"]);
  const scanner = stream();
  scanner.push(head);
  scanner.detectPending(); // the next chunk starts after "version\n"
  scanner.push(text.slice(head.length));
  same(await scanner.matches(text), text, "version at a chunk boundary");
  // The same with the boundary as the shown text's last line end.
  const shown = text.slice(0, head.length + 5);
  same(await scanner.matches(shown), shown, "version before the tail");
});

Deno.test("StdoutTokenizer matches whole-text detection with CRLF line ends", async () => {
  const text = corpus.replaceAll("\n", "\r\n");
  for (let seed = 1; seed <= 4; seed++) {
    const scanner = stream();
    pushRandomly(scanner, text, random(200 + seed));
    same(await scanner.matches(text), text, `seed ${seed}`);
  }
});

Deno.test("StdoutTokenizer matches whole-text detection when the shown text ends inside a value", async () => {
  const filler = "ordinary line 1.2.3 ok\n".repeat(1000);
  for (const value of ["jane.doe@example.org", "+1 415-555-2671", "4111 1111 1111 1111"]) {
    const text = `${filler}contact ${value} today\n${filler}`;
    const at = text.indexOf(value);
    for (let cut = at; cut <= at + value.length; cut++) {
      const scanner = stream();
      pushRandomly(scanner, text, random(cut));
      same(
        await scanner.matches(text.slice(0, cut)),
        text.slice(0, cut),
        `${value} cut at ${cut - at}`,
      );
    }
  }
});

Deno.test("StdoutTokenizer detects the shown text whole when it does not start with what was pushed", async () => {
  const scanner = stream();
  scanner.push(corpus);
  const shown = "jane.doe@example.org\n" + corpus;
  same(await scanner.matches(shown), shown, "a different text");
});

Deno.test("RunTokenizer.stream() gives the same placeholders, numbered the same, as RunTokenizer.text()", async () => {
  const tokenizer = () =>
    new RunTokenizer({
      vault: new PlaceholderVault({ ttlMs: 60_000, maxValuesPerPrincipal: 10_000 }),
      principal: "local",
      detector,
      rawServers: [],
    });
  const whole = await tokenizer().text(corpus);
  const stdout = tokenizer().stream(1024 * 1024);
  pushRandomly(stdout, corpus, random(7));
  const streamed = await stdout.finish(corpus);
  assert(/<email_12>/.test(whole) && /<phone_3>/.test(whole), whole.slice(0, 500));
  assertEquals(streamed, whole);
});

Deno.test("StdoutTokenizer takes a long line in many frames and detects it once it ends", async () => {
  const text = "x".repeat(200_000) + " jane.doe@example.org\n" + corpus.slice(0, 30_000);
  const scanner = stream();
  for (let at = 0; at < text.length; at += 100) scanner.push(text.slice(at, at + 100));
  same(await scanner.matches(text), text, "a long line");
});

Deno.test("StdoutTokenizer detects the lines pending once stdout is quiet, and stop() ends the wait", async () => {
  const scanner = stream();
  scanner.push("mail jane.doe@example.org\nand a half line");
  assertEquals(scanner.detectedChars, 0);
  await new Promise((resolve) => setTimeout(resolve, 50));
  assertEquals(scanner.detectedChars, "mail jane.doe@example.org\n".length);
  const text = "mail jane.doe@example.org\nand a half line ends\n";
  scanner.push(" ends\n");
  // The run ends before stdout is quiet: nothing is left waiting (the test's sanitizer checks).
  same(await scanner.matches(text), text, "after a quiet moment");
});

Deno.test("StdoutTokenizer detects a long quiet backlog a slice at a time, and equals whole-text detection", async () => {
  const scanner = stream();
  const text = corpus.slice(0, corpus.lastIndexOf("\n", 300_000) + 1);
  scanner.push(text + "a half line");
  await new Promise((resolve) => setTimeout(resolve, 300));
  assertEquals(scanner.detectedChars, text.length);
  same(await scanner.matches(text), text, "a backlog detected in slices");
});

Deno.test("StdoutTokenizer survives a detector that throws in a quiet moment, and detects the shown text whole", async () => {
  let calls = 0;
  const flaky = {
    find(text: string) {
      // The first call is the quiet moment's; later ones are the run's end.
      if (calls++ === 0) throw new Error("detector failed");
      return detector.find(text);
    },
  } as PersonalDataDetector;
  const scanner = new StdoutTokenizer({
    detector: flaky,
    maxChars: Infinity,
    tokenize: () => "",
  });
  const text = "mail jane.doe@example.org\n";
  scanner.push(text);
  // A throw in the timer would end this test process; it is caught and remembered.
  await new Promise((resolve) => setTimeout(resolve, 50));
  assertEquals(scanner.detectedChars, 0);
  scanner.push("more " + text);
  const shown = text + "more " + text;
  same(await scanner.matches(shown), shown, "detected whole after the failure");
  assertEquals(calls, 2);
});

Deno.test("StdoutTokenizer shares the rest with the detection thread and equals whole-text detection, however the text comes and is cut", async () => {
  await withThread(async (thread) => {
    for (let seed = 1; seed <= 8; seed++) {
      const next = random(seed);
      const scanner = stream(Infinity, thread);
      pushRandomly(scanner, corpus, next);
      const shown = seed % 2 === 0 ? corpus : corpus.slice(0, next(corpus.length));
      same(await scanner.matches(shown), shown, `seed ${seed}, ${shown.length} characters shown`);
    }
  });
});

Deno.test("StdoutTokenizer detects half of a flat-out run's stdout on the thread, the other half on the host", async () => {
  await withThread(async (thread) => {
    const host = counting();
    const scanner = stream(Infinity, thread, host.detector);
    // Frames of 2,000 characters with no quiet moment between them: a program printing flat out.
    for (let at = 0; at < corpus.length; at += 2000) scanner.push(corpus.slice(at, at + 2000));
    same(await scanner.matches(corpus), corpus, "flat out");
    const share = host.chars() / corpus.length;
    assert(
      share > 0.45 && share < 0.55,
      `${host.chars()} of ${corpus.length} detected on the host`,
    );
    // A mismatching shown text is detected whole, shared the same way.
    const other = corpus.replaceAll("a", "b");
    same(await scanner.matches(other), other, "a different text");
  });
});

Deno.test("StdoutTokenizer keeps a dotted quad after 'version' a version when the thread's half ends there", async () => {
  await withThread(async (thread) => {
    const first = "x".repeat(70_000) + "\nrelease version\n";
    const text = first + "83.12.45.7 " + "y".repeat(80_000) + "\nhost 83.12.45.8 up\n";
    // The half is split at the last line end before the middle: right after "version\n".
    assert(
      text.length >= SHARE_CHARS &&
        text.lastIndexOf("\n", (text.length >> 1) - 1) + 1 === first.length,
    );
    const host = counting();
    const scanner = stream(Infinity, thread, host.detector);
    scanner.push(text);
    const found = await scanner.matches(text);
    same(found, text, "version at the split");
    assertEquals(found.map((m) => m.value), ["83.12.45.8"]);
    assertEquals(host.chars(), text.length - first.length + "release version\n".length);
  });
});

Deno.test("StdoutTokenizer detects on the host what a closed thread did not", async () => {
  await withThread(async (thread) => {
    const host = counting();
    const scanner = stream(Infinity, thread, host.detector);
    scanner.push(corpus);
    // The thread is sent the first half, then closed before it answers.
    const matches = scanner.matches(corpus);
    thread.close();
    same(await matches, corpus, "the thread closed with the first half");
    assert(host.chars() >= corpus.length, `${host.chars()} detected on the host`);
    assertEquals(thread.ready, false);
    assertEquals(await thread.find(corpus, 0), undefined);
  });
});

Deno.test("A detection thread whose detector cannot be built says why, is not used, and does not end the host", async () => {
  const reasons: string[] = [];
  const thread = new DetectorThread({ phoneRegion: "ZZ" }, (reason) => reasons.push(reason));
  try {
    assertEquals(await thread.start(), false);
    assertEquals(thread.ready, false);
    assertEquals(await thread.find("mail jane.doe@example.org\n", 0), undefined);
    assertEquals(reasons.length, 1);
    assert(reasons[0].includes('Unknown phone region "ZZ"'), reasons[0]);
  } finally {
    thread.close();
  }
  assertEquals(reasons.length, 1, "closing is not a failure");
});

Deno.test("The host starts a detection thread only with tokenize and an output cap that leaves enough to share", async () => {
  const privacy = (tokenize: boolean) => resolveSettings({ privacy: { tokenize } }, "test").privacy;
  for (
    const [tokenize, cap, started] of [
      [true, 100 * 1024, false], // the default cap
      [true, SHARE_CHARS, false],
      [true, 1024 * 1024, true],
      [false, 1024 * 1024, false],
    ] as const
  ) {
    const host = new HostPrivacy(privacy(tokenize), cap);
    try {
      assertEquals(await host.start(), started, `tokenize ${tokenize}, cap ${cap}`);
    } finally {
      host.close();
    }
  }
});

Deno.test("OutputCapture gives its watcher exactly the text it captures, up to the cap", () => {
  const pieces: string[] = [];
  const capture = new OutputCapture(1000, undefined, { push: (text) => pieces.push(text) });
  let i = 0;
  while (capture.add(`line ${i} jane.doe@example.org\n`)) i++;
  assertEquals(capture.truncated, true);
  assertEquals(pieces.join(""), capture.text);
});
