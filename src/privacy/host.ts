/**
 * The host's privacy settings in one object: what counts as personal data, the placeholders of
 * every principal (`privacy.tokenize`: in this process, or in the shared state store with
 * `state.url`), and the redaction of `llm.*` prompts and answers (`privacy.redactSampling`).
 *
 * @module
 */
import type { Settings } from "../config/settings.ts";
import type { Logger } from "../log.ts";
import type { PersonalDataDetector } from "./detect.ts";
import { detectOptions, detectorFor, redactPersonalData } from "./redaction.ts";
import { SHARE_CHARS } from "./stream.ts";
import { DetectorThread } from "./thread.ts";
import { RunTokenizer, type SharedPlaceholders } from "./tokenizer.ts";
import { PlaceholderVault } from "./vault.ts";

/** Personal data handling for one server process. */
export class HostPrivacy {
  #settings: Settings["privacy"];
  #detector: PersonalDataDetector;
  #vault: PlaceholderVault | SharedPlaceholders | undefined;
  /**
   * Shares the detection of what is left of a run's stdout at its end (`privacy.tokenize`, with an
   * output cap that lets enough be left for sharing to pay).
   */
  #thread: DetectorThread | undefined;

  /**
   * Builds the detector and, with `privacy.tokenize`, the placeholder vault and (when the output
   * cap is above {@linkcode SHARE_CHARS}) the detection thread, not started yet.
   *
   * @param settings The `privacy` settings.
   * @param maxOutputBytes The output cap (`limits.maxOutputBytes`).
   * @param log Where a failure of the detection thread is reported.
   * @param shared The shared store's placeholders (`state.url`), used instead of this process's.
   * @throws {TypeError} When a setting is invalid (an unknown region or IP range).
   */
  constructor(
    settings: Settings["privacy"],
    maxOutputBytes: number,
    log?: Logger,
    shared?: SharedPlaceholders,
  ) {
    this.#settings = settings;
    this.#detector = detectorFor(settings);
    if (settings.tokenize) this.#vault = shared ?? new PlaceholderVault(settings);
    // The shown stdout has at most as many characters as the cap has bytes.
    if (settings.tokenize && maxOutputBytes > SHARE_CHARS) {
      this.#thread = new DetectorThread(detectOptions(settings), (reason) =>
        log?.warn(
          `privacy: the thread that detects personal data in stdout stopped (${reason}); runs' stdout is detected on the main thread from now on, which makes runs that print a lot wait longer at their end`,
        ));
    }
  }

  /**
   * Starts the detection thread (`privacy.tokenize`), so that it is ready for the first run.
   *
   * @returns Whether the thread is ready (see {@linkcode DetectorThread.start}).
   */
  start(): Promise<boolean> {
    return this.#thread?.start() ?? Promise.resolve(false);
  }

  /** Stops the detection thread. */
  close(): void {
    this.#thread?.close();
  }

  /**
   * A run's tokenizer, bound to its principal.
   *
   * @param principal Whose run it is.
   * @returns The tokenizer, or undefined when `privacy.tokenize` is off.
   */
  tokenizer(principal: string): RunTokenizer | undefined {
    if (!this.#vault) return undefined;
    return new RunTokenizer({
      vault: this.#vault,
      principal,
      detector: this.#detector,
      rawServers: this.#settings.rawServers,
      thread: this.#thread,
    });
  }

  /**
   * Text on its way to a client (and so maybe to the model): with `privacy.tokenize`, its
   * personal data becomes the principal's placeholders.
   *
   * @param text The text.
   * @param principal Who reads it.
   * @returns The text to send.
   * @throws {CodeExecutorError} `StateUnavailable` when the shared store cannot be used.
   */
  async forClient(text: string, principal: string): Promise<string> {
    return await this.tokenizer(principal)?.text(text) ?? text;
  }

  /**
   * Redacts personal data from `llm.*` prompts and answers; undefined when that is off. With
   * `privacy.tokenize` it is on whatever `privacy.redactSampling` says: a prompt reaches the
   * client's model, and tokenization promises that values reach it only as placeholders.
   */
  get scrubSampling(): ((text: string) => string) | undefined {
    if (!this.#settings.redactSampling && !this.#settings.tokenize) return undefined;
    return (text) => redactPersonalData(text, this.#detector);
  }
}
