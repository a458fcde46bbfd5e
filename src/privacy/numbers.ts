/**
 * Finding the numbers the detector checks (cards, social security numbers, IPv4 addresses, phone
 * numbers) fast: runs of digits are found by hand, and each pattern is tried, sticky, only where
 * a number can start and the few characters there allow it. What is found is what the global
 * patterns run over each run found (tests/privacy_detect_test.ts; bench/privacy.ts for the cost).
 *
 * @module
 */

/** A pattern tried at the places of a run where it can match. */
export interface NumberPattern {
  /** Sticky: tried at one place at a time. */
  pattern: RegExp;
  /** The fewest digits a match must hold to be kept: fewer left in a run, it stops there. */
  minDigits: number;
  /**
   * The pattern's look-behind at a digit, as a bit of {@linkcode REFUSED_BEFORE}: the characters
   * that may not come right before a match that starts with a digit.
   */
  before: number;
  /** Whether the pattern can match at `p`, from the characters there (no false negatives). */
  canStart(text: string, p: number): boolean;
}

/** Bits of {@linkcode REFUSED_BEFORE}, one per pattern. */
const CARD_BEFORE = 1, SSN_BEFORE = 2, IPV4_BEFORE = 4, PHONE_BEFORE = 8;

/**
 * Per ASCII character, the patterns whose look-behind refuses it before a number's first digit:
 * checked here, it spares the pattern's run at most of the places that start a date, a version
 * or a range, where the pattern would fail (`12` in `2023-12-27`).
 */
const REFUSED_BEFORE = new Uint8Array(128);
{
  const refuse = (chars: string, bits: number) => {
    for (const c of chars) REFUSED_BEFORE[c.charCodeAt(0)] |= bits;
  };
  const all = CARD_BEFORE | SSN_BEFORE | IPV4_BEFORE | PHONE_BEFORE;
  refuse("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-", all); // [\w.-]
  refuse(",", CARD_BEFORE);
  refuse("/:", SSN_BEFORE | IPV4_BEFORE | PHONE_BEFORE);
  refuse("@", IPV4_BEFORE | PHONE_BEFORE);
  refuse("+#$", PHONE_BEFORE);
}

/** Whether the character before `p` lets a pattern with that look-behind bit start at `p`. */
function startsAfter(text: string, p: number, before: number): boolean {
  if (p === 0) return true;
  const c = text.charCodeAt(p - 1);
  if (c < 128) return (REFUSED_BEFORE[c] & before) === 0;
  return before !== PHONE_BEFORE || (c !== 0x20ac && c !== 0xa3); // € £
}

function digitAt(text: string, p: number): boolean {
  const c = text.charCodeAt(p);
  return c >= 48 && c <= 57;
}

/** Payment cards: four digits first. */
export const CARD: NumberPattern = {
  pattern: /(?<![\w.,-])\d{4}(?:[ -]?\d{2,6}){2,4}(?:[ -]?\d{1,4})?(?![\w.,-]\d)/y,
  minDigits: 13,
  before: CARD_BEFORE,
  canStart: (text, p) =>
    digitAt(text, p) && digitAt(text, p + 1) && digitAt(text, p + 2) && digitAt(text, p + 3),
};

/** US social security numbers, `123-45-6789` or `123 45 6789`. */
export const SSN: NumberPattern = {
  pattern: /(?<![\w.\-/:])(\d{3})([- ])(\d{2})\2(\d{4})(?![\w.\-/:])/y,
  minDigits: 9,
  before: SSN_BEFORE,
  canStart(text, p) {
    const sep = text.charCodeAt(p + 3);
    return (sep === 45 || sep === 32) && text.charCodeAt(p + 6) === sep && digitAt(text, p) &&
      digitAt(text, p + 1) && digitAt(text, p + 2) && digitAt(text, p + 4) &&
      digitAt(text, p + 5) && digitAt(text, p + 7) && digitAt(text, p + 8) &&
      digitAt(text, p + 9) && digitAt(text, p + 10);
  },
};

/** Dotted quads: four groups of one to three digits (versions and dates have three). */
export const IPV4: NumberPattern = {
  pattern:
    /(?<![\w.\-@:/])(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?:\.(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}(?![\w.]|-\d)/y,
  minDigits: 4,
  before: IPV4_BEFORE,
  canStart(text, p) {
    for (let group = 0, q = p;; group++) {
      const first = q;
      while (q - first < 3 && digitAt(text, q)) q++;
      if (q === first) return false;
      if (group === 3) return true;
      if (text.charCodeAt(q) !== 46) return false;
      q++;
    }
  },
};

/**
 * Phone numbers: digits with spaces, dots, dashes or a parenthesised area code, optionally after
 * `+`; seven digits at least (`PhoneNumbers.test`).
 */
export const PHONE: NumberPattern = {
  pattern:
    /(?<![\w+.\-/:@#$€£])(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?)?\d{1,8}(?:[ .-]\d{1,8}){1,5}(?![\w.\-/:@%])|(?<![\w+])\+\d{8,15}(?!\w)/y,
  minDigits: 7,
  before: PHONE_BEFORE,
  canStart(text, p) {
    const c = text.charCodeAt(p);
    if (c === 43 || c === 40) return digitAt(text, p + 1);
    // From a digit: its whole group (at most eight digits), then a separator and a digit.
    let q = p + 1;
    while (q - p <= 8 && digitAt(text, q)) q++;
    const sep = text.charCodeAt(q);
    return q - p <= 8 && (sep === 32 || sep === 46 || sep === 45) && digitAt(text, q + 1);
  },
};

/**
 * Finds each run of digits, spaces, dots, dashes and parentheses (with the `+` or `(` before it)
 * that holds `minDigits` digits or more (seven after a `+`), or three dots: what the number
 * patterns need; and each place
 * two capitals and two digits start (an IBAN's country and checksum), which is always a run's
 * start. By hand, in one pass: a pattern for the runs costs 15 to 25 ms a megabyte, one for the
 * capitals 2, and this loop 3 to 5 for both (bench/privacy.ts). It calls nothing, so that V8
 * optimizes it once for all texts (a callback per text made it throw its code away each time),
 * and returns an array, not an object (whose property stores, never run before the optimized
 * code reached them, threw that code away at the end of every call).
 *
 * @param text Any text.
 * @param minDigits The fewest digits a run needs unless it has three dots or follows a `+`.
 * @param capitals Where to put the index of the first capital of each IBAN start; none looked
 * for when undefined.
 * @returns Per run: its first character, the index after its last, its digits and its dots.
 */
export function numberRuns(text: string, minDigits: number, capitals?: number[]): number[] {
  const runs: number[] = [];
  const n = text.length;
  let i = 0;
  while (i < n) {
    // `c - 48 >>> 0 <= 9`: a digit, in one comparison.
    let c = text.charCodeAt(i);
    while (c - 48 >>> 0 > 9) {
      if (++i >= n) return runs;
      c = text.charCodeAt(i);
    }
    if (capitals && i >= 2) {
      const a = text.charCodeAt(i - 2), b = text.charCodeAt(i - 1), d = text.charCodeAt(i + 1);
      if (a >= 65 && a <= 90 && b >= 65 && b <= 90 && d - 48 >>> 0 <= 9) capitals.push(i - 2);
    }
    let separators = 0, dots = 0, j = i + 1;
    for (; j < n; j++) {
      const k = text.charCodeAt(j);
      if (k - 48 >>> 0 <= 9) continue;
      if (k === 46) dots++;
      else if (k === 32 || k === 45 || k === 40 || k === 41) separators++;
      else break;
    }
    const digits = j - i - separators - dots;
    const before = i > 0 ? text.charCodeAt(i - 1) : 0;
    if (digits >= minDigits || dots >= 3 || (before === 43 && digits >= 7)) {
      runs.push(before === 43 || before === 40 ? i - 1 : i, j, digits, dots);
    }
    i = j + 1;
  }
  return runs;
}

/**
 * Lists the places of the run `text[start, end)` where a number can start (a digit after a
 * non-digit, a `+` or a `(`: the patterns' look-behinds refuse the others), each with the digits
 * from there to the run's end: the walk the patterns share.
 *
 * @param text The whole text.
 * @param start The run's first character.
 * @param end After the run's last character.
 * @param digits How many digits the run holds.
 * @param out Where to write them: position, digits left, position, digits left, …
 * @returns How many numbers were written (twice the places).
 */
export function numberStarts(
  text: string,
  start: number,
  end: number,
  digits: number,
  out: number[],
): number {
  let n = 0, left = digits;
  let previousDigit = start > 0 && digitAt(text, start - 1);
  for (let p = start; p < end; p++) {
    const c = text.charCodeAt(p);
    const digit = c >= 48 && c <= 57;
    if (digit ? !previousDigit : c === 43 || c === 40) {
      out[n++] = p;
      out[n++] = left;
    }
    if (digit) left--;
    previousDigit = digit;
  }
  return n;
}

const NONE: RegExpExecArray[] = [];

/**
 * Tries a pattern at the places of a run where a number can start ({@linkcode numberStarts}) and
 * its `canStart` allows, going on after each match: what the global pattern run over the run
 * finds, without trying every position nor copying the run. It stops when fewer digits are left
 * than a kept match needs: a match there would be dropped.
 *
 * @param text The whole text.
 * @param starts The run's places and digits left, from {@linkcode numberStarts}.
 * @param count How many numbers of `starts` are the run's.
 * @param number The pattern.
 * @param minDigits The fewest digits of a kept match that starts with a digit or `(`, when more
 * than the pattern's `minDigits` (a region's shortest national phone number); one that starts
 * with `+` needs the pattern's.
 * @returns The matches, their `index` in the whole text.
 */
export function eachNumber(
  text: string,
  starts: readonly number[],
  count: number,
  number: NumberPattern,
  minDigits: number = number.minDigits,
): RegExpExecArray[] {
  const { pattern, before, canStart } = number;
  let found = NONE;
  let resume = 0;
  for (let s = 0; s < count; s += 2) {
    const p = starts[s];
    const c = text.charCodeAt(p);
    // Only a run's first place can be a `+`.
    if (starts[s + 1] < (c === 43 ? number.minDigits : minDigits)) break;
    if (p < resume || (c <= 57 && c >= 48 && !startsAfter(text, p, before))) continue;
    if (!canStart(text, p)) continue;
    pattern.lastIndex = p;
    const m = pattern.exec(text);
    if (m) {
      if (found === NONE) found = [];
      found.push(m);
      resume = p + m[0].length;
    }
  }
  return found;
}
