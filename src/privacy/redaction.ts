/**
 * The detector the admin's `privacy` settings describe, and redaction of personal data (for
 * `llm.*` prompts and answers, `privacy.redactSampling`).
 *
 * @module
 */
import type { Settings } from "../config/settings.ts";
import { type DetectOptions, PersonalDataDetector, replaceMatches } from "./detect.ts";

/**
 * The detector's options in the admin's `privacy` settings.
 *
 * @param settings The `privacy` settings.
 * @returns The categories, phone region and ignored IP ranges.
 */
export function detectOptions(settings: Settings["privacy"]): DetectOptions {
  return {
    categories: settings.categories,
    phoneRegion: settings.phoneRegion,
    ignoredIpRanges: settings.ignoredIpRanges,
  };
}

/**
 * Builds the detector of the admin's `privacy` settings.
 *
 * @param settings The `privacy` settings.
 * @returns A detector for the chosen categories, phone region and ignored IP ranges.
 * @throws {TypeError} When an IP range or the phone region is invalid.
 */
export function detectorFor(settings: Settings["privacy"]): PersonalDataDetector {
  return new PersonalDataDetector(detectOptions(settings));
}

/**
 * With `privacy.tokenize`, a check for text that must not reach a client as it is and cannot be
 * tokenized (a skill's files, served with their digests): the category of the first piece of
 * personal data it holds.
 *
 * @param settings The `privacy` settings.
 * @returns The check, or undefined when `privacy.tokenize` is off.
 */
export function personalDataFinder(
  settings: Settings["privacy"],
): ((text: string) => string | undefined) | undefined {
  if (!settings.tokenize) return undefined;
  const detector = detectorFor(settings);
  return (text) => detector.find(text)[0]?.category;
}

/**
 * Replaces each piece of personal data by `[REDACTED <category>]`.
 *
 * @param text Any text.
 * @param detector What counts as personal data.
 * @returns The text without personal data.
 * @example
 * ```ts ignore
 * redactPersonalData("mail jane@example.org", detector); // "mail [REDACTED email]"
 * ```
 */
export function redactPersonalData(text: string, detector: PersonalDataDetector): string {
  return replaceMatches(text, detector.find(text), (m) => `[REDACTED ${m.category}]`);
}
