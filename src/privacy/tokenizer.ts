/**
 * One run's side of tokenization (`privacy.tokenize`): what the run returns and what upstream
 * servers answer become placeholders of the run's principal; placeholders in a tool call's
 * arguments become the values again, in the host, just before the call.
 *
 * The placeholders are in this process ({@linkcode PlaceholderVault}, the default) or in the
 * shared state store (`state.url`, {@linkcode SharedPlaceholders}), where every replica finds the
 * ones any of them gave. Every method is async for the store's sake; with the vault in this
 * process it does the same work as before, with no round trip. With the store, one text or one
 * value costs one batch of round trips however many values it holds, and a store that cannot be
 * reached fails the method with `StateUnavailable`: nothing is then shown unreplaced, and no
 * placeholder is passed on unresolved.
 *
 * @module
 */
import type { PersonalDataDetector, PersonalDataMatch } from "./detect.ts";
import { replaceMatches } from "./detect.ts";
import { StdoutTokenizer } from "./stream.ts";
import type { DetectorThread } from "./thread.ts";
import { mapStrings, PLACEHOLDER, placeholderError, PlaceholderVault } from "./vault.ts";

/**
 * Placeholders kept where every replica reads them: what `VaultStore` (src/state/vault_store.ts)
 * does, given to the privacy side by the executor.
 */
export interface SharedPlaceholders {
  /**
   * Gives each value its placeholder (the one it has, or the next number of its category), in
   * order.
   */
  assign(principal: string, items: Array<{ category: string; value: string }>): Promise<string[]>;
  /** The values of the principal's placeholders that it holds; others are absent. */
  lookup(principal: string, placeholders: string[]): Promise<Map<string, string>>;
  /** The last number given in a category (0 when none, or the store lost its counters). */
  given(principal: string, category: string): Promise<number>;
}

/** Options of {@linkcode RunTokenizer}. */
export interface RunTokenizerOptions {
  /** The placeholders: this process's, or the shared store's (`state.url`). */
  vault: PlaceholderVault | SharedPlaceholders;
  /** Whose run it is: placeholders are per principal. */
  principal: string;
  /** What counts as personal data. */
  detector: PersonalDataDetector;
  /** Servers whose results the code sees with real values (`privacy.rawServers`). */
  rawServers: readonly string[];
  /** The host's detection thread, for the run's stdout. */
  thread?: DetectorThread;
}

/** Tokenization for one run, bound to its principal. */
export class RunTokenizer {
  #options: RunTokenizerOptions;
  #local: PlaceholderVault | undefined;
  #shared: SharedPlaceholders | undefined;
  /** The progress messages on their way, so that they reach the client in order. */
  #progress: Promise<void> = Promise.resolve();

  /**
   * Binds the vault to one run's principal.
   *
   * @param options The vault, the principal, the detector and the raw servers.
   */
  constructor(options: RunTokenizerOptions) {
    this.#options = options;
    if (options.vault instanceof PlaceholderVault) this.#local = options.vault;
    else this.#shared = options.vault;
  }

  /**
   * Replaces personal data by placeholders.
   *
   * @param text Any text.
   * @returns The text with placeholders.
   * @throws {CodeExecutorError} `StateUnavailable` when the shared store cannot be used.
   */
  async text(text: string): Promise<string> {
    const { principal, detector } = this.#options;
    if (this.#local) return this.#local.tokenize(principal, text, detector);
    return (await this.#assign([text], [detector.find(text)]))[0];
  }

  /**
   * A tokenizer for the run's stdout that detects personal data while the run prints, so that
   * little is left to do once it has ended (and that little is shared with the detection thread).
   *
   * @param maxChars The most characters the result can show of it (`limits.maxOutputBytes`).
   * @returns The stream's tokenizer: push what is captured, then finish with what is shown.
   */
  stream(maxChars: number): StdoutTokenizer {
    const { principal, detector, thread } = this.#options;
    const local = this.#local;
    return new StdoutTokenizer({
      detector,
      maxChars,
      tokenize: local
        ? (text, matches) => local.tokenizeMatches(principal, text, matches)
        : async (text, matches) => (await this.#assign([text], [matches]))[0],
      thread,
    });
  }

  /**
   * Replaces personal data by placeholders in every string of a JSON-like value.
   *
   * @param value Any JSON-like value.
   * @returns A copy with placeholders.
   * @throws {CodeExecutorError} `StateUnavailable` when the shared store cannot be used.
   */
  async value<T>(value: T): Promise<T> {
    const { principal, detector } = this.#options;
    const local = this.#local;
    if (local) return mapStrings(value, (text) => local.tokenize(principal, text, detector));
    const texts = stringsOf(value);
    const tokenized = await this.#assign(texts, texts.map((text) => detector.find(text)));
    let next = 0;
    return mapStrings(value, () => tokenized[next++]);
  }

  /**
   * Whether sandbox code sees a server's results with the real values.
   *
   * @param server The upstream server's name.
   * @returns True for a server in `privacy.rawServers`.
   */
  raw(server: string): boolean {
    return this.#options.rawServers.includes(server);
  }

  /**
   * Puts the values back in place of the placeholders in a tool call's arguments.
   *
   * @param args The arguments, as the code sent them.
   * @param toolName The tool, for the error.
   * @returns A copy with the values.
   * @throws {CodeExecutorError} `PlaceholderError` for an unknown or expired placeholder;
   *   `StateUnavailable` when the shared store cannot be used. Nothing is resolved then.
   */
  async resolveArgs(
    args: Record<string, unknown>,
    toolName: string,
  ): Promise<Record<string, unknown>> {
    const { principal } = this.#options;
    const where = `the arguments of ${toolName}`;
    const local = this.#local;
    if (local) return mapStrings(args, (text) => local.resolve(principal, text, where));
    const texts = stringsOf(args);
    const wanted = new Set<string>();
    for (const text of texts) {
      if (text.includes("<")) {
        for (const [placeholder] of text.matchAll(PLACEHOLDER)) wanted.add(placeholder);
      }
    }
    if (wanted.size === 0) return args;
    const shared = this.#shared!;
    const found = await shared.lookup(principal, [...wanted]);
    for (const placeholder of wanted) {
      if (found.has(placeholder)) continue;
      const [, category, n] = /^<(\w+)_(\d+)>$/.exec(placeholder)!;
      const given = Number(n) <= await shared.given(principal, category);
      throw placeholderError(placeholder, where, given, true);
    }
    return mapStrings(
      args,
      (text) =>
        text.includes("<")
          ? text.replace(PLACEHOLDER, (placeholder) => found.get(placeholder)!)
          : text,
    );
  }

  /**
   * Wraps a progress sender so that what it sends has placeholders. The messages go out in the
   * order they were sent; one whose placeholders cannot be given (the shared store is away) is
   * dropped, never sent as it is.
   *
   * @param send Sends one progress message to the client.
   * @returns The wrapped sender.
   */
  progress(send: (message: string) => void): (message: string) => void {
    const { principal, detector } = this.#options;
    const local = this.#local;
    if (local) return (message) => send(local.tokenize(principal, message, detector));
    return (message) => {
      const tokenized = this.text(message);
      this.#progress = this.#progress.then(() => tokenized).then(send, () => {});
    };
  }

  /** Gives the matches of each text their placeholders in one batch (the shared store). */
  async #assign(
    texts: string[],
    matches: ReadonlyArray<readonly PersonalDataMatch[]>,
  ): Promise<string[]> {
    const items = matches.flat().map(({ category, value }) => ({ category, value }));
    if (items.length === 0) return texts;
    const placeholders = await this.#shared!.assign(this.#options.principal, items);
    let next = 0;
    return texts.map((text, i) => replaceMatches(text, matches[i], () => placeholders[next++]));
  }
}

/** Every string of a JSON-like value, keys included, in the order `mapStrings` visits them. */
function stringsOf(value: unknown): string[] {
  const texts: string[] = [];
  mapStrings(value, (text) => {
    texts.push(text);
    return text;
  });
  return texts;
}

/**
 * Wraps a progress sender so that what it sends has placeholders.
 *
 * @param send Sends one progress message to the client.
 * @param tokenizer The run's tokenizer.
 * @returns The wrapped sender.
 */
export function tokenizedProgress(
  send: (message: string) => void,
  tokenizer: RunTokenizer,
): (message: string) => void {
  return tokenizer.progress(send);
}
