/**
 * A second thread for the detection of personal data in runs' stdout (`privacy.tokenize`). A
 * program that prints flat out leaves the host no quiet moment to detect its stdout while it
 * prints (`stream.ts`), and detecting while its frames arrive would hold it up, as both cores
 * are busy then; at its end, what is left is detected half here and half on the host's own
 * thread, at the same time.
 *
 * The thread is a Web Worker started from this very module, which serves the requests when it is
 * the worker's entry point (named {@linkcode THREAD_NAME}). Being in the program's static module
 * graph, it is cached by `deno install` and `deno run jsr:…` and embedded by `deno compile`
 * (which leaves out a worker module the graph does not reach unless given `--include`).
 *
 * Messages (structured clone):
 * - host → thread: `{t:"init", options}` first, then `{t:"find", id, text, skip}`;
 * - thread → host: `{t:"ready"}` (or `{t:"down", message}` when the detector cannot be built),
 *   then `{t:"found", id, spans}` or `{t:"failed", id, message}` for each `find`, in order.
 *
 * A `find`'s matches are those of `text` that start at or after `skip` (the text before is
 * context). They come back as `spans`, an `Int32Array` of (category index, start, end) triples,
 * whose values the host slices from the text it sent, so that a text dense with personal data
 * (thousands of matches a megabyte) comes back as one transferred buffer, not as thousands of
 * objects to copy.
 *
 * @module
 */
import {
  type DetectOptions,
  PERSONAL_DATA_CATEGORIES,
  PersonalDataDetector,
  type PersonalDataMatch,
} from "./detect.ts";

/** The worker's name, by which this module knows it is the thread's entry point. */
const THREAD_NAME = "privacy-detector";

/** What the host sends the thread. */
export type ThreadRequest =
  | { t: "init"; options: DetectOptions }
  | { t: "find"; id: number; text: string; skip: number };

/** What the thread answers. */
export type ThreadReply =
  | { t: "ready" }
  | { t: "down"; message: string }
  | { t: "found"; id: number; spans: Int32Array }
  | { t: "failed"; id: number; message: string };

/**
 * The host's detection thread. It is used once it has loaded the detector; it is not used again
 * once it has failed or been closed, and the host detects on its own then.
 *
 * @example
 * ```ts ignore
 * const thread = new DetectorThread({ categories: ["email"] });
 * await thread.start(); // true once ready
 * await thread.find("mail jane@example.org\n", 0); // [{ category: "email", start: 5, ... }]
 * thread.close();
 * ```
 */
export class DetectorThread {
  #options: DetectOptions;
  #onDown: (reason: string) => void;
  #worker: Worker | undefined;
  #ready = false;
  /** Set once the thread failed or was closed. */
  #down = false;
  #nextId = 1;
  #waiting = new Map<
    number,
    { text: string; resolve: (found: PersonalDataMatch[] | undefined) => void }
  >();
  #started = Promise.withResolvers<boolean>();

  /**
   * Keeps the detector's options; the thread starts with {@linkcode DetectorThread.start}.
   *
   * @param options The options of the detector (already checked by building one on the host).
   * @param onDown Told once why the thread stopped, unless it was closed.
   */
  constructor(options: DetectOptions, onDown: (reason: string) => void = () => {}) {
    this.#options = options;
    this.#onDown = onDown;
  }

  /**
   * Starts the thread, if it has not started yet.
   *
   * @returns Whether the thread is ready: true once it has loaded the detector, false when it
   *   failed or was closed.
   */
  start(): Promise<boolean> {
    if (!this.#worker && !this.#down) this.#start();
    return this.#started.promise.then(() => this.ready);
  }

  /** Whether the thread has loaded the detector and not stopped. */
  get ready(): boolean {
    return this.#ready && !this.#down;
  }

  /**
   * Detects a text on the thread.
   *
   * @param text The text, its context first.
   * @param skip The context's length: matches that start in it are left out.
   * @returns The matches at their offsets in `text`, or undefined when the thread could not
   *   detect them (it is not ready, failed or was closed): the caller detects the text itself.
   */
  find(text: string, skip: number): Promise<PersonalDataMatch[] | undefined> {
    if (!this.ready) return Promise.resolve(undefined);
    const id = this.#nextId++;
    const { promise, resolve } = Promise.withResolvers<PersonalDataMatch[] | undefined>();
    this.#waiting.set(id, { text, resolve });
    this.#worker!.postMessage({ t: "find", id, text, skip } satisfies ThreadRequest);
    return promise;
  }

  /** Stops the thread; what was on its way is detected by the callers instead. */
  close(): void {
    this.#stop(undefined);
  }

  #start(): void {
    try {
      this.#worker = new Worker(import.meta.url, { type: "module", name: THREAD_NAME });
    } catch (error) {
      this.#stop(`it cannot start: ${(error as Error).message}`);
      return;
    }
    this.#worker.onmessage = ({ data }: MessageEvent<ThreadReply>) => {
      switch (data.t) {
        case "ready":
          this.#ready = true;
          this.#started.resolve(true);
          return;
        case "down":
          return this.#stop(`its detector cannot be built: ${data.message}`);
        case "found":
        case "failed": {
          const waiting = this.#waiting.get(data.id);
          this.#waiting.delete(data.id);
          waiting?.resolve(data.t === "found" ? matchesOf(waiting.text, data.spans) : undefined);
        }
      }
    };
    // An error in the thread (its module failed to load, or it threw) must not reach the host's
    // event loop, which it would end.
    this.#worker.onerror = (event) => {
      event.preventDefault();
      this.#stop(`it failed: ${event.message}`);
    };
    this.#worker.onmessageerror = () => this.#stop("a message from it could not be read");
    this.#worker.postMessage({ t: "init", options: this.#options } satisfies ThreadRequest);
  }

  /** Stops the thread for good; `reason` is why, unless it was closed. */
  #stop(reason: string | undefined): void {
    if (!this.#down && reason !== undefined) this.#onDown(reason);
    this.#down = true;
    this.#started.resolve(false);
    this.#worker?.terminate();
    this.#worker = undefined;
    for (const { resolve } of this.#waiting.values()) resolve(undefined);
    this.#waiting.clear();
  }
}

/** The matches of `spans` in `text`. */
function matchesOf(text: string, spans: Int32Array): PersonalDataMatch[] {
  const matches: PersonalDataMatch[] = [];
  for (let i = 0; i < spans.length; i += 3) {
    const start = spans[i + 1];
    const end = spans[i + 2];
    matches.push({
      category: PERSONAL_DATA_CATEGORIES[spans[i]],
      start,
      end,
      value: text.slice(start, end),
    });
  }
  return matches;
}

/** Serves the host's requests, in the thread. */
function serve(): void {
  const scope = globalThis as unknown as {
    onmessage: ((event: MessageEvent<ThreadRequest>) => void) | null;
    postMessage(message: ThreadReply, transfer?: Transferable[]): void;
  };
  let detector: PersonalDataDetector | undefined;
  scope.onmessage = ({ data }) => {
    if (data.t === "init") {
      try {
        detector = new PersonalDataDetector(data.options);
      } catch (error) {
        scope.postMessage({ t: "down", message: (error as Error).message });
        return;
      }
      scope.postMessage({ t: "ready" });
      return;
    }
    try {
      const found = detector!.find(data.text).filter((m) => m.start >= data.skip);
      const spans = new Int32Array(found.length * 3);
      found.forEach((m, i) => {
        spans[i * 3] = PERSONAL_DATA_CATEGORIES.indexOf(m.category);
        spans[i * 3 + 1] = m.start;
        spans[i * 3 + 2] = m.end;
      });
      scope.postMessage({ t: "found", id: data.id, spans }, [spans.buffer]);
    } catch (error) {
      scope.postMessage({ t: "failed", id: data.id, message: String(error) });
    }
  };
}

// In the thread, this module is the entry point.
if ("WorkerGlobalScope" in globalThis && (globalThis as { name?: unknown }).name === THREAD_NAME) {
  serve();
}
