/**
 * Placeholders for personal data (`privacy.tokenize`): the host replaces each value in what a
 * run returns by `<email_1>`, `<phone_2>`, … and keeps the mapping here, per principal, bounded
 * in size and time. Nothing of it is ever sent to a sandbox or to the client.
 *
 * @module
 */
import { isPlainObject } from "../_util.ts";
import { CodeExecutorError } from "../errors.ts";
import {
  PERSONAL_DATA_CATEGORIES,
  type PersonalDataCategory,
  type PersonalDataDetector,
  type PersonalDataMatch,
  replaceMatches,
} from "./detect.ts";

/** A placeholder as the model sees it, `<email_1>`. */
export const PLACEHOLDER = new RegExp(
  `<(${PERSONAL_DATA_CATEGORIES.join("|")})_([1-9]\\d{0,9})>`,
  "g",
);

/** Options of {@linkcode PlaceholderVault}. */
export interface PlaceholderVaultOptions {
  /** How long a placeholder lives after its last use (`privacy.ttlMs`). */
  ttlMs: number;
  /** Placeholders kept per principal; the least recently used go first. */
  maxValuesPerPrincipal: number;
  /** The clock, in milliseconds. */
  now?: () => number;
}

interface Entry {
  placeholder: string;
  value: string;
  expiresAt: number;
}

/** One principal's placeholders; the Maps' order is least recently used first. */
class PrincipalPlaceholders {
  byValue = new Map<string, Entry>();
  byPlaceholder = new Map<string, Entry>();
  /**
   * The last number given per category. Never reset, so that a placeholder that expired is never
   * given to another value while the server runs.
   */
  counters = new Map<PersonalDataCategory, number>();
}

/** The host's placeholders of every principal. */
export class PlaceholderVault {
  #options: PlaceholderVaultOptions;
  #now: () => number;
  #principals = new Map<string, PrincipalPlaceholders>();

  /**
   * Creates an empty vault.
   *
   * @param options Time to live, size bound and clock.
   */
  constructor(options: PlaceholderVaultOptions) {
    this.#options = options;
    this.#now = options.now ?? Date.now;
  }

  /**
   * Replaces the personal data in a text by the principal's placeholders, giving new values the
   * next number of their category.
   *
   * @param principal Whose placeholders.
   * @param text Any text.
   * @param detector What counts as personal data.
   * @returns The text with placeholders.
   */
  tokenize(principal: string, text: string, detector: PersonalDataDetector): string {
    return this.tokenizeMatches(principal, text, detector.find(text));
  }

  /**
   * Replaces personal data already found in a text by the principal's placeholders, giving new
   * values the next number of their category in the order of the matches (a stream detected
   * while a run printed, `StdoutTokenizer`).
   *
   * @param principal Whose placeholders.
   * @param text Any text.
   * @param matches The personal data in it, in order, none overlapping another (as
   *   `PersonalDataDetector.find` returns them).
   * @returns The text with placeholders.
   */
  tokenizeMatches(
    principal: string,
    text: string,
    matches: readonly PersonalDataMatch[],
  ): string {
    if (matches.length === 0) return text;
    const mine = this.#of(principal);
    const now = this.#now();
    // A value that comes back in the same text (a log's lines) is looked up and renewed once.
    const given: Partial<Record<PersonalDataCategory, Map<string, string>>> = {};
    return replaceMatches(text, matches, (m) => {
      const seen = given[m.category] ??= new Map();
      const placeholder = seen.get(m.value);
      if (placeholder !== undefined) return placeholder;
      const key = `${m.category}\0${m.value}`;
      let entry = mine.byValue.get(key);
      if (entry && entry.expiresAt <= now) {
        this.#forget(mine, key, entry);
        entry = undefined;
      }
      if (!entry) {
        const n = (mine.counters.get(m.category) ?? 0) + 1;
        mine.counters.set(m.category, n);
        entry = { placeholder: `<${m.category}_${n}>`, value: m.value, expiresAt: 0 };
      }
      this.#touch(mine, key, entry, now);
      seen.set(m.value, entry.placeholder);
      return entry.placeholder;
    });
  }

  /**
   * Replaces the principal's placeholders in a text by their values.
   *
   * @param principal Whose placeholders.
   * @param text Text that may hold placeholders.
   * @param where What the text is, for the error (`the arguments of mcp__crm__send`).
   * @returns The text with the values.
   * @throws {CodeExecutorError} `PlaceholderError` when a placeholder is unknown to this
   * principal or has expired; nothing is replaced then.
   */
  resolve(principal: string, text: string, where: string): string {
    if (!text.includes("<")) return text;
    const mine = this.#principals.get(principal);
    const now = this.#now();
    return text.replace(PLACEHOLDER, (placeholder, category: PersonalDataCategory, n: string) => {
      const entry = mine?.byPlaceholder.get(placeholder);
      if (mine && entry && entry.expiresAt > now) {
        this.#touch(mine, `${category}\0${entry.value}`, entry, now);
        return entry.value;
      }
      throw placeholderError(placeholder, where, Number(n) <= (mine?.counters.get(category) ?? 0));
    });
  }

  /** Placeholders held for a principal (expired ones included until they are swept). */
  size(principal: string): number {
    return this.#principals.get(principal)?.byValue.size ?? 0;
  }

  #of(principal: string): PrincipalPlaceholders {
    let mine = this.#principals.get(principal);
    if (!mine) this.#principals.set(principal, mine = new PrincipalPlaceholders());
    return mine;
  }

  #touch(mine: PrincipalPlaceholders, key: string, entry: Entry, now: number): void {
    entry.expiresAt = now + this.#options.ttlMs;
    mine.byValue.delete(key);
    mine.byValue.set(key, entry);
    mine.byPlaceholder.delete(entry.placeholder);
    mine.byPlaceholder.set(entry.placeholder, entry);
    // The least recently used go first: expired ones, then the oldest live ones past the bound.
    for (const [oldKey, old] of mine.byValue) {
      if (mine.byValue.size <= this.#options.maxValuesPerPrincipal && old.expiresAt > now) break;
      this.#forget(mine, oldKey, old);
    }
  }

  #forget(mine: PrincipalPlaceholders, key: string, entry: Entry): void {
    mine.byValue.delete(key);
    mine.byPlaceholder.delete(entry.placeholder);
  }
}

/**
 * The error for a placeholder that does not resolve.
 *
 * @param placeholder The placeholder, `<email_3>`.
 * @param where What the text is, `the arguments of mcp__crm__send`.
 * @param given Whether this principal was given its number (it expired since); with the shared
 *   store, a number it does not know was given may also have been lost with a restart of the store.
 * @param shared Whether the placeholders are in the shared state store (`state.url`).
 * @returns A `PlaceholderError`.
 */
export function placeholderError(
  placeholder: string,
  where: string,
  given: boolean,
  shared = false,
): CodeExecutorError {
  const why = given
    ? "it has expired (privacy.ttlMs) or was given it"
    : shared
    ? "it has expired or this caller was never given it (the shared state store keeps placeholders for privacy.ttlMs, and loses them when it restarts)"
    : "this caller was never given it";
  return new CodeExecutorError(
    "PlaceholderError",
    `Cannot use ${placeholder} in ${where}: ${why}; run the code that printed it again and use the placeholder it prints now`,
  );
}

/**
 * Applies a function to every string of a JSON-like value, keys included.
 *
 * @param value Any JSON-like value.
 * @param map What each string becomes.
 * @returns A copy with every string mapped.
 */
export function mapStrings<T>(value: T, map: (text: string) => string): T {
  if (typeof value === "string") return map(value) as T;
  if (Array.isArray(value)) return value.map((v) => mapStrings(v, map)) as T;
  if (isPlainObject(value)) {
    return Object.fromEntries(
      Object.entries(value).map(([k, v]) => [map(k), mapStrings(v, map)]),
    ) as T;
  }
  return value;
}
