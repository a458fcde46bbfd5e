/**
 * Whether a candidate found in text is a phone number: `libphonenumber-js` decides, after cheap
 * checks that spare it most candidates of ordinary text (its parse costs 15 to 40 µs, and was
 * two thirds of the detector's time on bench/privacy.ts's ordinary corpus).
 *
 * @module
 */
import { isSupportedCountry, Metadata, parsePhoneNumberFromString } from "libphonenumber-js/max";
import type { CountryCode } from "libphonenumber-js/max";

const DOTTED_QUAD = /^\d{1,3}(?:\.\d{1,3}){3}$/;

/** How many digits each group of a written number may have: `[min, max]` per group. */
type Grouping = Array<[number, number]>;

/** What the metadata's formats look like at run time (not in the package's public types). */
interface RuntimeFormat {
  pattern(): string;
  format(): string;
  nationalPrefixFormattingRule(): string | undefined | 0;
}

/**
 * The digit groupings of a region's national format (`(415) 555-2671`: 3, 3, 4), with and without
 * the national prefix; undefined when the metadata does not have the expected shape, and then no
 * candidate is turned away for its grouping before the parse.
 */
function nationalGroupings(metadata: Metadata): Grouping[] | undefined {
  const formats = (metadata.numberingPlan as unknown as { formats?(): RuntimeFormat[] })
    ?.formats?.();
  if (!Array.isArray(formats) || formats.length === 0) return undefined;
  const out: Grouping[] = [];
  for (const f of formats) {
    const groups: Grouping = [];
    const pattern = f.pattern();
    const stripped = pattern.replace(/\(\\d(?:\{(\d+)(?:,(\d+))?\})?\)/g, (_, min, max) => {
      groups.push(min === undefined ? [1, 1] : [Number(min), Number(max ?? min)]);
      return "";
    });
    if (stripped !== "") return undefined; // a pattern this reading does not cover
    // `$1$2` writes two groups as one.
    const joined: Grouping = [];
    const parts = f.format().split(/(\$\d)/).filter(Boolean);
    let previousWasGroup = false;
    for (const part of parts) {
      const n = /^\$(\d)$/.exec(part);
      if (!n) {
        previousWasGroup = /\d/.test(part) ? previousWasGroup : false;
        continue;
      }
      const g = groups[Number(n[1]) - 1];
      if (!g) return undefined;
      if (previousWasGroup) {
        const last = joined[joined.length - 1];
        joined[joined.length - 1] = [last[0] + g[0], last[1] + g[1]];
      } else joined.push([...g]);
      previousWasGroup = true;
    }
    out.push(joined);
    const rule = f.nationalPrefixFormattingRule();
    const prefix = typeof rule === "string" ? /^(\d*)(\s*)\$1/.exec(rule) : null;
    if (prefix && prefix[1]) {
      const d = prefix[1].length;
      out.push(
        prefix[2]
          ? [[d, d], ...joined]
          : [[joined[0][0] + d, joined[0][1] + d], ...joined.slice(1)],
      );
    }
  }
  return out;
}

/** The lengths of the runs of digits of a text, in order. */
function groupsOf(text: string): number[] {
  const groups: number[] = [];
  let length = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c >= 48 && c <= 57) length++;
    else if (length > 0) {
      groups.push(length);
      length = 0;
    }
  }
  if (length > 0) groups.push(length);
  return groups;
}

/** Whether a space, dot or dash comes before a group of one digit. */
function oneDigitGroup(text: string): boolean {
  for (let i = 1; i < text.length; i++) {
    const c = text.charCodeAt(i - 1);
    if (
      (c === 32 || c === 46 || c === 45) && isDigit(text.charCodeAt(i)) &&
      !isDigit(text.charCodeAt(i + 1))
    ) return true;
  }
  return false;
}

function isDigit(c: number): boolean {
  return c >= 48 && c <= 57;
}

/** Tells phone numbers from other runs of digits, for one region. */
export class PhoneNumbers {
  #region: CountryCode;
  #lengths: ReadonlySet<number>;
  /** The fewest digits a number written without `+` can have here (seven at least). */
  readonly shortestNational: number;
  #groupings: Grouping[] | undefined;

  /**
   * Reads the region's lengths and formats from the library's metadata.
   *
   * @param region The region of numbers written without `+` (ISO 3166).
   * @throws {TypeError} When the library does not know the region.
   */
  constructor(region: string) {
    this.#region = region.toUpperCase() as CountryCode;
    if (!isSupportedCountry(this.#region)) {
      throw new TypeError(
        `Unknown phone region "${this.#region}": expected an ISO 3166 country code such as US`,
      );
    }
    const metadata = new Metadata();
    metadata.selectNumberingPlan(this.#region);
    // A national prefix (`1`, `0`) may come before the national number.
    const lengths = metadata.numberingPlan?.possibleLengths() ?? [];
    this.#lengths = new Set(lengths.flatMap((n) => [n, n + 1]));
    this.shortestNational = Math.max(7, Math.min(...this.#lengths));
    this.#groupings = nationalGroupings(metadata);
  }

  /**
   * Whether a candidate is a phone number: with `+`, a valid number of its country; without, a
   * valid number of the region written in the region's grouping (a port range `25654-38420` or
   * an amount can be a valid number's digits, never in that grouping).
   *
   * @param candidate Digits with spaces, dots, dashes or parentheses, maybe after `+`.
   * @param verdicts The verdicts on candidates seen before (kept for one text: values repeat in
   * output, and the library's parse costs 15 to 40 µs).
   * @returns True for a phone number.
   */
  test(candidate: string, verdicts?: Map<string, boolean>): boolean {
    let verdict = verdicts?.get(candidate);
    if (verdict === undefined) {
      verdict = this.#test(candidate);
      verdicts?.set(candidate, verdict);
    }
    return verdict;
  }

  #test(candidate: string): boolean {
    const groups = groupsOf(candidate);
    let digits = 0;
    for (const g of groups) digits += g;
    if (digits < 7 || digits > 15) return false;
    const national = candidate.charCodeAt(0) !== 43;
    if (national) {
      if (!this.#lengths.has(digits)) return false;
      // A one-digit group past the first (`203.0.113.9`, a version), or an address.
      if (oneDigitGroup(candidate) || DOTTED_QUAD.test(candidate)) return false;
      if (this.#groupings && !this.#fits(groups)) return false;
    }
    const phone = parsePhoneNumberFromString(candidate, this.#region);
    return phone?.isValid() === true &&
      (!national || groups.join() === groupsOf(phone.formatNational()).join());
  }

  #fits(groups: number[]): boolean {
    return this.#groupings!.some((g) =>
      g.length === groups.length && g.every(([min, max], i) => groups[i] >= min && groups[i] <= max)
    );
  }
}
