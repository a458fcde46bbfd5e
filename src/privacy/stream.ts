/**
 * Tokenizing a run's stdout while the run prints (`privacy.tokenize`): the complete lines received
 * so far are detected whenever stdout is quiet for a moment (a program waiting on a tool, on an
 * LLM, on its own work), so that at the end of such a run only its last lines are left to detect.
 * A program that prints flat out leaves no quiet moment, and detecting while its frames arrive
 * would hold it up; at its end, what is left is shared with the host's detection thread
 * (`thread.ts`), which detects the first half while this thread detects the second. The
 * placeholders themselves are given at the end, from the ordered matches, so that their numbers
 * follow the order of appearance as when the text is tokenized whole.
 *
 * @module
 */
import type { DetectMemo, PersonalDataDetector, PersonalDataMatch } from "./detect.ts";
import type { DetectorThread } from "./thread.ts";

/**
 * How long stdout must be quiet before the complete lines pending are detected. Detecting as
 * the frames arrive would hold up the reading of the next ones: a program that prints flat out
 * then waits on a full pipe, and the run got longer by what detection costs (+22 ms ordinary,
 * +50 ms mixed, bench/privacy_run.ts). In the pauses of a program that waits on tools or
 * thinks, the host is idle: detection there costs the run nothing.
 */
const QUIET_MS = 2;
/**
 * The most characters detected at a time in a quiet moment (about half a millisecond): a frame
 * that arrives meanwhile waits at most that long, and the rest waits for the next quiet moment.
 */
const SLICE_CHARS = 32 * 1024;
/**
 * Characters of the text before a chunk that the chunk is detected with. No match spans a
 * newline, and every look-behind of the detector sees a `\n` as the start of the text, except the
 * one that skips a dotted quad after a version word (12 characters, which may cross lines).
 */
const CONTEXT_CHARS = 16;
/**
 * The fewest characters left at a run's end that are shared with the detection thread (about 2
 * ms of detection, of which sharing saves about a third). It is above the default output cap
 * (`limits.maxOutputBytes`, 100 KiB), so that the host only starts the thread, and holds its
 * memory, when the admin raised the cap past it.
 */
export const SHARE_CHARS = 128 * 1024;

/** Options of {@linkcode StdoutTokenizer}. */
export interface StdoutTokenizerOptions {
  /** What counts as personal data; it holds no state between calls. */
  detector: PersonalDataDetector;
  /**
   * The most characters the result can show (`limits.maxOutputBytes`: each UTF-16 unit takes at
   * least one UTF-8 byte), past which detecting is wasted.
   */
  maxChars: number;
  /** Gives the placeholders for a text's matches, in order (from the shared store: async). */
  tokenize: (text: string, matches: readonly PersonalDataMatch[]) => string | Promise<string>;
  /** The host's detection thread, which shares what is left at the end when it is ready. */
  thread?: DetectorThread;
}

/**
 * One run's stdout, its complete lines detected in the run's quiet moments, tokenized at the end.
 *
 * @example
 * ```ts ignore
 * const stdout = tokenizer.stream(maxOutputBytes);
 * stdout.push("mail jane@example.org\n");
 * await stdout.finish(shownStdout); // the same as tokenizer.text(shownStdout)
 * ```
 */
export class StdoutTokenizer {
  #options: StdoutTokenizerOptions;
  /** The text detected so far, in the pieces it was detected in; it ends at a line end. */
  #scanned: string[] = [];
  #scannedChars = 0;
  /** The end of the text detected so far, the context of the next chunk. */
  #context = "";
  /** Text received and not detected yet. */
  #pending = "";
  /** The length of the complete lines at the start of `#pending`. */
  #pendingLines = 0;
  /** Set once the text received reaches `maxChars`. */
  #full = false;
  /** Set when detecting in a quiet moment threw: the shown text is then detected whole. */
  #failed = false;
  /** The matches in the text detected so far, at their offsets in the whole text. */
  #matches: PersonalDataMatch[] = [];
  /** The detector's verdicts on the candidates of this stdout, kept from chunk to chunk. */
  #memo: DetectMemo = { phones: new Map(), ipv4: new Map(), ipv6: new Map() };
  /** When the last piece arrived. */
  #lastPush = 0;
  /** Fires once stdout has been quiet for {@linkcode QUIET_MS}; undefined when not set. */
  #timer: ReturnType<typeof setTimeout> | undefined;

  /**
   * Starts with nothing received.
   *
   * @param options The detector, the most characters shown and how placeholders are given.
   */
  constructor(options: StdoutTokenizerOptions) {
    this.#options = options;
  }

  /**
   * Takes the next piece of stdout, in order; the complete lines pending are detected once
   * stdout has been quiet for a moment ({@linkcode StdoutTokenizer.detectPending}).
   *
   * @param text What the run printed next, as captured.
   */
  push(text: string): void {
    if (this.#full || this.#failed) return;
    const room = this.#options.maxChars - this.#scannedChars - this.#pending.length;
    if (text.length >= room) {
      this.#full = true;
      text = text.slice(0, room);
    }
    // Only the new text is searched for a line end: a long line that arrives in many frames
    // would otherwise be searched again on each.
    const lineEnd = text.lastIndexOf("\n");
    if (lineEnd >= 0) this.#pendingLines = this.#pending.length + lineEnd + 1;
    this.#pending += text;
    this.#lastPush = performance.now();
    if (this.#pendingLines > 0 && this.#timer === undefined) this.#wait(QUIET_MS);
  }

  /**
   * Detects the complete lines received and not detected yet (what a quiet moment of stdout
   * does).
   */
  detectPending(): void {
    if (this.#pendingLines > 0) this.#detectLines(this.#pendingLines);
  }

  /** How many characters have been detected so far. */
  get detectedChars(): number {
    return this.#scannedChars;
  }

  /** Stops waiting for a quiet moment: the run has ended. */
  stop(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  #wait(ms: number): void {
    const timer = setTimeout(() => {
      this.#timer = undefined;
      const quiet = performance.now() - this.#lastPush;
      if (quiet < QUIET_MS) return this.#wait(QUIET_MS - quiet);
      // A slice of the complete lines pending (a longer line whole), then the next frames.
      const lines = this.#pendingLines;
      if (lines === 0) return;
      const cut = lines <= SLICE_CHARS
        ? lines
        : this.#pending.lastIndexOf("\n", SLICE_CHARS - 1) + 1 ||
          this.#pending.indexOf("\n", SLICE_CHARS) + 1;
      try {
        this.#detectLines(cut);
      } catch {
        // Nothing thrown here may reach the event loop (it would end the server): the run's
        // end detects its stdout whole instead, and reports what that throws to the run.
        this.#failed = true;
        return;
      }
      if (this.#pendingLines > 0) this.#wait(0);
    }, ms);
    // A run's end never waits for it (stop() clears it then).
    Deno.unrefTimer(timer);
    this.#timer = timer;
  }

  /**
   * The matches in the text the result shows: those found while the run printed, up to the last
   * line end that the shown text holds unchanged, and those of the rest, detected now (shared
   * with the detection thread when it is long). Equal to the detector's matches in the whole
   * text.
   *
   * @param shown The stdout the result shows: what was pushed, maybe cut (the cap, a preview).
   * @returns The matches, in order.
   */
  async matches(shown: string): Promise<PersonalDataMatch[]> {
    this.stop();
    const upTo = Math.min(this.#scannedChars, shown.length);
    if (this.#failed || !this.#startsWithScanned(shown, upTo)) return await this.#rest(shown, 0);
    const end = upTo === 0 ? 0 : shown.lastIndexOf("\n", upTo - 1) + 1;
    const kept = this.#matches;
    let count = 0;
    while (count < kept.length && kept[count].end <= end) count++;
    return [...kept.slice(0, count), ...await this.#rest(shown, end)];
  }

  /**
   * Tokenizes the text the result shows, with what was detected while the run printed.
   *
   * @param shown The stdout the result shows.
   * @returns It with placeholders, the same as tokenizing it whole.
   */
  async finish(shown: string): Promise<string> {
    return await this.#options.tokenize(shown, await this.matches(shown));
  }

  /**
   * Detects `shown` from `end` (0, or just after a line end): its first half on the detection
   * thread, when it is long and the thread is ready, while this thread detects the second.
   */
  async #rest(shown: string, end: number): Promise<PersonalDataMatch[]> {
    const context = (at: number) => shown.slice(Math.max(0, at - CONTEXT_CHARS), at);
    const thread = this.#options.thread;
    const half = end + ((shown.length - end) >> 1);
    const mid = shown.length - end >= SHARE_CHARS && thread?.ready
      ? shown.lastIndexOf("\n", half - 1) + 1
      : 0;
    if (mid <= end) return this.#detect(shown.slice(end), end, context(end));
    const head = context(end);
    const first = thread!.find(head + shown.slice(end, mid), head.length);
    const second = this.#detect(shown.slice(mid), mid, context(mid));
    // The thread's matches are at their offsets in what it was sent; undefined when it failed.
    const found = await first;
    return [
      ...(found
        ? shifted(found, end - head.length)
        : this.#detect(shown.slice(end, mid), end, head)),
      ...second,
    ];
  }

  /** Detects the first `cut` characters pending, which end at a line end. */
  #detectLines(cut: number): void {
    const chunk = this.#pending.slice(0, cut);
    this.#pending = this.#pending.slice(cut);
    this.#pendingLines -= cut;
    const start = this.#scannedChars;
    for (const m of this.#detect(chunk, start, this.#context)) this.#matches.push(m);
    this.#scanned.push(chunk);
    this.#scannedChars += chunk.length;
    this.#context = chunk.length >= CONTEXT_CHARS
      ? chunk.slice(-CONTEXT_CHARS)
      : (this.#context + chunk).slice(-CONTEXT_CHARS);
  }

  /**
   * Detects a chunk that starts at `start` in the whole text, after `context` (the text right
   * before it, which ends at a line end), and returns its matches at their offsets in the whole
   * text.
   */
  #detect(chunk: string, start: number, context: string): PersonalDataMatch[] {
    const found = this.#options.detector.find(context + chunk, this.#memo);
    // A match in the context belongs to the chunk before, which reported it.
    return shifted(found.filter((m) => m.start >= context.length), start - context.length);
  }

  /** Whether `shown` starts with the first `upTo` characters of the text detected so far. */
  #startsWithScanned(shown: string, upTo: number): boolean {
    let at = 0;
    for (const piece of this.#scanned) {
      if (at >= upTo) break;
      const part = at + piece.length <= upTo ? piece : piece.slice(0, upTo - at);
      // Not `startsWith(part, at)`, which compares a character at a time: 1.2 ms a megabyte
      // against 0.15 for the equality of a slice (which copies nothing).
      if (shown.slice(at, at + part.length) !== part) return false;
      at += part.length;
    }
    return true;
  }
}

/** Matches moved by `shift` characters. */
function shifted(matches: PersonalDataMatch[], shift: number): PersonalDataMatch[] {
  return shift === 0
    ? matches
    : matches.map((m) => ({ ...m, start: m.start + shift, end: m.end + shift }));
}
