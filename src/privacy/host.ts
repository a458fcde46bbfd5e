/**
 * The host's privacy settings in one object: what counts as personal data, the placeholders of
 * every principal (`privacy.tokenize`, kept in this process only), and the redaction of `llm.*`
 * prompts and answers (`privacy.redactSampling`).
 *
 * @module
 */
import type { Settings } from "../config/settings.ts";
import type { PersonalDataDetector } from "./detect.ts";
import { detectorFor, redactPersonalData } from "./redaction.ts";
import { RunTokenizer } from "./tokenizer.ts";
import { PlaceholderVault } from "./vault.ts";

/** Personal data handling for one server process. */
export class HostPrivacy {
  #settings: Settings["privacy"];
  #detector: PersonalDataDetector;
  #vault: PlaceholderVault | undefined;

  /**
   * Builds the detector and, with `privacy.tokenize`, the placeholder vault.
   *
   * @param settings The `privacy` settings.
   * @throws {TypeError} When a setting is invalid (an unknown region or IP range).
   */
  constructor(settings: Settings["privacy"]) {
    this.#settings = settings;
    this.#detector = detectorFor(settings);
    if (settings.tokenize) this.#vault = new PlaceholderVault(settings);
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
    });
  }

  /**
   * Text on its way to a client (and so maybe to the model): with `privacy.tokenize`, its
   * personal data becomes the principal's placeholders.
   *
   * @param text The text.
   * @param principal Who reads it.
   * @returns The text to send.
   */
  forClient(text: string, principal: string): string {
    return this.tokenizer(principal)?.text(text) ?? text;
  }

  /** Redacts personal data from `llm.*` prompts and answers; undefined when that is off. */
  get scrubSampling(): ((text: string) => string) | undefined {
    if (!this.#settings.redactSampling) return undefined;
    return (text) => redactPersonalData(text, this.#detector);
  }
}
