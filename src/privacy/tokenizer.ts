/**
 * One run's side of tokenization (`privacy.tokenize`): what the run returns and what upstream
 * servers answer become placeholders of the run's principal; placeholders in a tool call's
 * arguments become the values again, in the host, just before the call.
 *
 * @module
 */
import type { PersonalDataDetector } from "./detect.ts";
import { StdoutTokenizer } from "./stream.ts";
import type { DetectorThread } from "./thread.ts";
import { mapStrings, type PlaceholderVault } from "./vault.ts";

/** Options of {@linkcode RunTokenizer}. */
export interface RunTokenizerOptions {
  /** The host's placeholders. */
  vault: PlaceholderVault;
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

  /**
   * Binds the vault to one run's principal.
   *
   * @param options The vault, the principal, the detector and the raw servers.
   */
  constructor(options: RunTokenizerOptions) {
    this.#options = options;
  }

  /**
   * Replaces personal data by placeholders.
   *
   * @param text Any text.
   * @returns The text with placeholders.
   */
  text(text: string): string {
    const { vault, principal, detector } = this.#options;
    return vault.tokenize(principal, text, detector);
  }

  /**
   * A tokenizer for the run's stdout that detects personal data while the run prints, so that
   * little is left to do once it has ended (and that little is shared with the detection thread).
   *
   * @param maxChars The most characters the result can show of it (`limits.maxOutputBytes`).
   * @returns The stream's tokenizer: push what is captured, then finish with what is shown.
   */
  stream(maxChars: number): StdoutTokenizer {
    const { vault, principal, detector, thread } = this.#options;
    return new StdoutTokenizer({
      detector,
      maxChars,
      tokenize: (text, matches) => vault.tokenizeMatches(principal, text, matches),
      thread,
    });
  }

  /**
   * Replaces personal data by placeholders in every string of a JSON-like value.
   *
   * @param value Any JSON-like value.
   * @returns A copy with placeholders.
   */
  value<T>(value: T): T {
    return mapStrings(value, (text) => this.text(text));
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
   * @throws {CodeExecutorError} `PlaceholderError` for an unknown or expired placeholder.
   */
  resolveArgs(args: Record<string, unknown>, toolName: string): Record<string, unknown> {
    const { vault, principal } = this.#options;
    return mapStrings(
      args,
      (text) => vault.resolve(principal, text, `the arguments of ${toolName}`),
    );
  }
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
  return (message) => send(tokenizer.text(message));
}
