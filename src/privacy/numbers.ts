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
  /**
   * Which pattern it is (0 card, 1 SSN, 2 IPv4, 3 phone), for {@linkcode eachNumber}'s checks of
   * the characters at a place: each refuses only places where the pattern cannot match (no false
   * negatives).
   */
  kind: 0 | 1 | 2 | 3;
}

const CARD_KIND = 0, SSN_KIND = 1, IPV4_KIND = 2, PHONE_KIND = 3;

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

/** Whether the character at `p` is a digit (`c - 48 >>> 0 <= 9`: one comparison). */
function digitAt(text: string, p: number): boolean {
  return text.charCodeAt(p) - 48 >>> 0 <= 9;
}

/** Payment cards: four digits first. */
export const CARD: NumberPattern = {
  pattern: /(?<![\w.,-])\d{4}(?:[ -]?\d{2,6}){2,4}(?:[ -]?\d{1,4})?(?![\w.,-]\d)/y,
  minDigits: 13,
  before: CARD_BEFORE,
  kind: CARD_KIND,
};

/** US social security numbers, `123-45-6789` or `123 45 6789`. */
export const SSN: NumberPattern = {
  pattern: /(?<![\w.\-/:])(\d{3})([- ])(\d{2})\2(\d{4})(?![\w.\-/:])/y,
  minDigits: 9,
  before: SSN_BEFORE,
  kind: SSN_KIND,
};

/** Dotted quads: four groups of one to three digits (versions and dates have three). */
export const IPV4: NumberPattern = {
  pattern:
    /(?<![\w.\-@:/])(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?:\.(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}(?![\w.]|-\d)/y,
  minDigits: 4,
  before: IPV4_BEFORE,
  kind: IPV4_KIND,
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
  kind: PHONE_KIND,
};

/**
 * Finds each run of digits, spaces, dots, dashes and parentheses (with the `+` or `(` before it)
 * that holds `minDigits` digits or more (seven after a `+`), or three dots: what the number
 * patterns need; and each place two capitals and two digits start (an IBAN's country and
 * checksum), which is always a run's start. By hand, in one pass: a pattern for the runs costs 15 to 25 ms a megabyte, one for the
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
 * from there to the run's end and the length of its group of digits: the walk the patterns share.
 *
 * @param text The whole text.
 * @param start The run's first character.
 * @param end After the run's last character.
 * @param digits How many digits the run holds.
 * @param out Where to write them: position, digits left, digits in its group (0 for `+` and
 * `(`), then the next place's.
 * @returns How many numbers were written (three per place).
 */
export function numberStarts(
  text: string,
  start: number,
  end: number,
  digits: number,
  out: number[],
): number {
  let n = 0, left = digits, group = -1;
  for (let p = start; p < end; p++) {
    const c = text.charCodeAt(p);
    if (c - 48 >>> 0 <= 9) {
      // A group starts after anything but a digit; the run's first character never follows one.
      if (group < 0) {
        out[n] = p;
        out[n + 1] = left;
        group = n + 2;
        n += 3;
      }
      left--;
      continue;
    }
    if (group >= 0) {
      out[group] = p - out[group - 2];
      group = -1;
    }
    if (c === 43 || c === 40) {
      out[n] = p;
      out[n + 1] = left;
      out[n + 2] = 0;
      n += 3;
    }
  }
  if (group >= 0) out[group] = end - out[group - 2];
  return n;
}

/**
 * Tries a pattern at the places of a run where a number can start ({@linkcode numberStarts}) and
 * the characters there allow it, going on after each match: what the global pattern run over the
 * run finds, without trying every position nor copying the run. It stops when fewer digits are
 * left than a kept match needs: a match there would be dropped.
 *
 * @param text The whole text.
 * @param starts The run's places from {@linkcode numberStarts}.
 * @param count How many numbers of `starts` are the run's.
 * @param number The pattern.
 * @param minDigits The fewest digits of a kept match that starts with a digit or `(`, when more
 * than the pattern's `minDigits` (a region's shortest national phone number); one that starts
 * with `+` needs the pattern's.
 * @param hits Where to write the matches: the first character and the index after the last of
 * each (a pattern's `test` makes no match object).
 * @returns How many numbers were written (two per match).
 */
export function eachNumber(
  text: string,
  starts: readonly number[],
  count: number,
  number: NumberPattern,
  minDigits: number,
  hits: number[],
): number {
  const { pattern, before, kind } = number;
  let found = 0;
  let resume = 0;
  for (let s = 0; s < count; s += 3) {
    const p = starts[s];
    const group = starts[s + 2];
    // Only a run's first place can be a `+`.
    if (starts[s + 1] < (group === 0 && text.charCodeAt(p) === 43 ? number.minDigits : minDigits)) {
      break;
    }
    if (p < resume || (group > 0 && !startsAfter(text, p, before))) continue;
    const next = p + group;
    switch (kind) {
      case CARD_KIND: // four digits first
        if (group < 4) continue;
        break;
      case SSN_KIND: { // `123-45-6789`, `123 45 6789`
        const sep = text.charCodeAt(next);
        if (
          group !== 3 || (sep !== 45 && sep !== 32) || text.charCodeAt(p + 6) !== sep ||
          !digitAt(text, p + 4) || !digitAt(text, p + 5) || !digitAt(text, p + 7) ||
          !digitAt(text, p + 8) || !digitAt(text, p + 9) || !digitAt(text, p + 10)
        ) continue;
        break;
      }
      case IPV4_KIND: // four groups of one to three digits, dotted
        if (group === 0 || group > 3 || !dottedQuadAt(text, next)) continue;
        break;
      default: // a phone: after `+` or `(`, a digit; else its group (≤ 8), a separator, a digit
        if (group === 0 ? !digitAt(text, p + 1) : group > 8 || !phoneSeparatorAt(text, next)) {
          continue;
        }
    }
    pattern.lastIndex = p;
    if (pattern.test(text)) {
      resume = pattern.lastIndex;
      hits[found++] = p;
      hits[found++] = resume;
    }
  }
  return found;
}

/** After a dotted quad's first group: `.` and three more groups of one to three digits. */
function dottedQuadAt(text: string, q: number): boolean {
  for (let group = 1;; group++) {
    if (text.charCodeAt(q) !== 46) return false;
    const first = ++q;
    while (q - first < 3 && digitAt(text, q)) q++;
    if (q === first) return false;
    if (group === 3) return true;
  }
}

/** A space, dot or dash, then a digit. */
function phoneSeparatorAt(text: string, q: number): boolean {
  const sep = text.charCodeAt(q);
  return (sep === 32 || sep === 46 || sep === 45) && digitAt(text, q + 1);
}
