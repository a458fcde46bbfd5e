/**
 * Detection of personal data in text: email addresses, phone numbers (`libphonenumber-js`),
 * payment card numbers (Luhn and issuer prefix), IBANs (country length and mod-97 checksum), US
 * social security numbers and IPv4/IPv6 addresses. Each kind is found by a cheap candidate
 * pattern and then checked, so that ordinary technical text (versions, dates, ids, hashes,
 * amounts) is left alone: tests/privacy_detect_test.ts measures both sides on the corpora in
 * tests/fixtures/.
 *
 * @module
 */
import { isIPv4, isIPv6 } from "node:net";
import { PhoneNumbers } from "./phone.ts";

/** The kinds of personal data found; each is also the word of its placeholder (`<email_1>`). */
export const PERSONAL_DATA_CATEGORIES = ["email", "phone", "card", "iban", "ssn", "ip"] as const;

/** One kind of personal data. */
export type PersonalDataCategory = typeof PERSONAL_DATA_CATEGORIES[number];

/** A piece of personal data found in a text. */
export interface PersonalDataMatch {
  /** What it is. */
  category: PersonalDataCategory;
  /** Its first character's index. */
  start: number;
  /** The index after its last character. */
  end: number;
  /** The text found. */
  value: string;
}

/** Options of {@linkcode findPersonalData}. */
export interface DetectOptions {
  /** The kinds to look for; all of them when unset. */
  categories?: readonly PersonalDataCategory[];
  /** The region of phone numbers written without `+` (ISO 3166 code); `US` when unset. */
  phoneRegion?: string;
  /** IP ranges (CIDR) never reported; {@linkcode DEFAULT_IGNORED_IP_RANGES} when unset. */
  ignoredIpRanges?: readonly string[];
}

/**
 * Addresses that name no one: loopback, unspecified, and the documentation ranges of RFC 5737
 * and RFC 3849, which examples and docs use.
 */
export const DEFAULT_IGNORED_IP_RANGES: readonly string[] = [
  "127.0.0.0/8",
  "0.0.0.0/8",
  "192.0.2.0/24",
  "198.51.100.0/24",
  "203.0.113.0/24",
  "::1/128",
  "::/128",
  "2001:db8::/32",
];

const EMAIL =
  /(?<![\w.%+-])[A-Za-z0-9](?:[A-Za-z0-9._%+-]{0,62}[A-Za-z0-9_%+-])?@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}(?![\w-]|\.[A-Za-z0-9])/g;
// Digits with spaces, dots, dashes or a parenthesised area code, optionally after `+`.
const PHONE =
  /(?<![\w+.\-/:@#$€£])(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?)?\d{1,8}(?:[ .-]\d{1,8}){1,5}(?![\w.\-/:@%])|(?<![\w+])\+\d{8,15}(?!\w)/g;
const CARD = /(?<![\w.,-])\d{4}(?:[ -]?\d{2,6}){2,4}(?:[ -]?\d{1,4})?(?![\w.,-]\d)/g;
const IBAN_START = /[A-Z]{2}\d{2}/g;
const IBAN = /(?<![\w])[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?(?![\w])/g;
const SSN = /(?<![\w.\-/:])(\d{3})([- ])(\d{2})\2(\d{4})(?![\w.\-/:])/g;
const IPV4 =
  /(?<![\w.\-@:/])(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?:\.(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}(?![\w.]|-\d)/g;
const IPV6 = /(?<![\w:.])(?=[0-9A-Fa-f:]*::|(?:[0-9A-Fa-f]{1,4}:){7})[0-9A-Fa-f:.]{3,45}(?![\w:])/g;
const LOCAL_CHAR = /[A-Za-z0-9._%+-]/;
const DOMAIN_CHAR = /[A-Za-z0-9.-]/;
// Words right before a dotted quad that make it a version, not an address.
const VERSION_WORD = /(?:\bv|version|release|build|ver\.?)\s*$/i;

/** IBAN length per country (ISO 13616 registry). */
// deno-fmt-ignore
const IBAN_LENGTHS: Record<string, number> = {
  AD: 24, AE: 23, AL: 28, AT: 20, AZ: 28, BA: 20, BE: 16, BG: 22, BH: 22, BR: 29, CH: 21,
  CR: 22, CY: 28, CZ: 24, DE: 22, DK: 18, DO: 28, EE: 20, EG: 29, ES: 24, FI: 18, FO: 18,
  FR: 27, GB: 22, GE: 22, GI: 23, GL: 18, GR: 27, GT: 28, HR: 21, HU: 28, IE: 22, IL: 23,
  IQ: 23, IS: 26, IT: 27, JO: 30, KW: 30, KZ: 20, LB: 28, LC: 32, LI: 21, LT: 20, LU: 20,
  LV: 21, MC: 27, MD: 24, ME: 22, MK: 19, MR: 27, MT: 31, MU: 30, NL: 18, NO: 15, PK: 24,
  PL: 28, PS: 29, PT: 25, QA: 29, RO: 24, RS: 22, SA: 24, SC: 31, SE: 24, SI: 19, SK: 24,
  SM: 27, TL: 23, TN: 24, TR: 26, UA: 29, VA: 22, VG: 24, XK: 20,
};

/**
 * Whether a digit string passes the Luhn check (payment cards).
 *
 * @param digits Digits only.
 * @returns True when the checksum holds.
 */
export function luhnValid(digits: string): boolean {
  let sum = 0;
  for (let i = 0; i < digits.length; i++) {
    let d = digits.charCodeAt(digits.length - 1 - i) - 48;
    if (i % 2 === 1) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
  }
  return sum % 10 === 0;
}

/** Issuer prefixes and lengths of the card networks in use (Visa, Mastercard, Amex, …). */
function cardIssuer(digits: string): boolean {
  const n = digits.length;
  const p2 = Number(digits.slice(0, 2));
  const p4 = Number(digits.slice(0, 4));
  if (digits[0] === "4") return n === 13 || n === 16 || n === 19; // Visa
  if ((p2 >= 51 && p2 <= 55) || (p4 >= 2221 && p4 <= 2720)) return n === 16; // Mastercard
  if (p2 === 34 || p2 === 37) return n === 15; // Amex
  if (p4 === 6011 || p2 === 65 || (p4 >= 6440 && p4 <= 6499)) return n >= 16 && n <= 19; // Discover
  if (p4 >= 3528 && p4 <= 3589) return n >= 16 && n <= 19; // JCB
  if (p2 === 36 || p2 === 38 || (p4 >= 3000 && p4 <= 3059)) return n >= 14 && n <= 19; // Diners
  if (p2 === 62) return n >= 16 && n <= 19; // UnionPay
  return false;
}

/**
 * Whether a compact IBAN (no spaces, upper case) has its country's length and a valid checksum.
 *
 * @param iban The IBAN without spaces.
 * @returns True when it is well formed.
 */
export function ibanValid(iban: string): boolean {
  if (IBAN_LENGTHS[iban.slice(0, 2)] !== iban.length) return false;
  const moved = iban.slice(4) + iban.slice(0, 4);
  let rest = 0;
  for (const ch of moved) {
    const code = ch.charCodeAt(0);
    const value = code >= 65 ? code - 55 : code - 48;
    rest = value >= 10 ? (rest * 100 + value) % 97 : (rest * 10 + value) % 97;
  }
  return rest === 1;
}

function ssnValid(area: string, group: string, serial: string): boolean {
  const a = Number(area);
  return a !== 0 && a !== 666 && a < 900 && group !== "00" && serial !== "0000";
}

interface Cidr {
  v6: boolean;
  bits: bigint;
  prefix: number;
  /** IPv4: the address's top `prefix` bits, as a number. */
  v4Top: number;
}

function ipBits(ip: string): bigint | undefined {
  if (isIPv4(ip)) return ip.split(".").reduce((n, o) => (n << 8n) + BigInt(o), 0n);
  return isIPv6(ip) ? ipv6Bits(ip) : undefined;
}

/** The 128 bits of an address already known to be IPv6. */
function ipv6Bits(ip: string): bigint {
  let text = ip;
  const v4 = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (v4) {
    const b = ipBits(v4[1])!;
    text = text.slice(0, v4.index) + `${(b >> 16n).toString(16)}:${(b & 0xffffn).toString(16)}`;
  }
  const [head, tail] = text.split("::");
  const h = head ? head.split(":") : [];
  const t = tail === undefined ? [] : tail ? tail.split(":") : [];
  const groups = tail === undefined ? h : [...h, ...Array(8 - h.length - t.length).fill("0"), ...t];
  return groups.reduce((n, g) => (n << 16n) + BigInt(parseInt(g, 16)), 0n);
}

function parseCidr(cidr: string): Cidr {
  const [ip, len] = cidr.split("/");
  const bits = ipBits(ip);
  const v6 = isIPv6(ip);
  const prefix = len === undefined ? (v6 ? 128 : 32) : Number(len);
  if (bits === undefined || !Number.isInteger(prefix) || prefix < 0 || prefix > (v6 ? 128 : 32)) {
    throw new TypeError(`Invalid IP range "${cidr}": expected address/prefix`);
  }
  return { v6, bits, prefix, v4Top: v6 ? 0 : Number(bits >> BigInt(32 - prefix)) };
}

/** Whether an address (a dotted quad, or a valid IPv6 address) is in one of the ranges. */
function inRanges(ip: string, ranges: readonly Cidr[]): boolean {
  // The IPv4 regex matched a dotted quad already: numbers, not BigInt and isIPv4 (10× faster).
  if (!ip.includes(":")) {
    const o = ip.split(".");
    const n = ((+o[0] << 24) >>> 0) + (+o[1] << 16) + (+o[2] << 8) + +o[3];
    return ranges.some((r) => !r.v6 && Math.floor(n / 2 ** (32 - r.prefix)) === r.v4Top);
  }
  // The caller checked it with isIPv6, whose pattern is the slowest part of this.
  const bits = ipv6Bits(ip);
  return ranges.some((r) => {
    if (!r.v6) return false;
    const shift = 128n - BigInt(r.prefix);
    return (bits >> shift) === (r.bits >> shift);
  });
}

/**
 * Finds personal data in text, in order, without overlaps (the earlier, then the longer, match
 * wins).
 */
export class PersonalDataDetector {
  #categories: ReadonlySet<PersonalDataCategory>;
  #phones: PhoneNumbers;
  #ignored: Cidr[];

  /**
   * Creates a detector for the chosen categories.
   *
   * @param options Categories, the phone region and the IP ranges to leave alone.
   * @throws {TypeError} When an IP range is not `address/prefix`, or the region is unknown.
   */
  constructor(options: DetectOptions = {}) {
    this.#categories = new Set(options.categories ?? PERSONAL_DATA_CATEGORIES);
    this.#phones = new PhoneNumbers(options.phoneRegion ?? "US");
    this.#ignored = (options.ignoredIpRanges ?? DEFAULT_IGNORED_IP_RANGES).map(parseCidr);
  }

  /**
   * Finds the personal data in a text.
   *
   * @param text Any text.
   * @returns The matches, sorted by position, none overlapping another.
   */
  find(text: string): PersonalDataMatch[] {
    const found: PersonalDataMatch[] = [];
    const on = (c: PersonalDataCategory) => this.#categories.has(c);
    // The category patterns only run on small windows around what they need (an `@`, a run of
    // digits, colons, two capitals and two digits): over the whole text their look-behinds cost
    // about 0.5 s a megabyte of ordinary text, against 25 to 55 ms for all of find() on windows
    // (bench/privacy.ts, bench/RESULTS.md "Privacy").
    if (on("email")) this.#emails(text, found);
    if (on("iban")) {
      for (const m of text.matchAll(IBAN_START)) {
        scan(text, m.index - 1, m.index + 44, m.index, IBAN, (v, at) => {
          if (ibanValid(v.replaceAll(" ", ""))) found.push(match("iban", at, v));
        });
      }
    }
    if (on("card") || on("ssn") || on("phone") || on("ip")) {
      forEachNumberRun(text, (start, end) => this.#numbers(text, start, end, found));
    }
    if (on("ip") && text.includes(":")) this.#ipv6(text, found);
    return withoutOverlaps(found);
  }

  #emails(text: string, found: PersonalDataMatch[]): void {
    for (let at = text.indexOf("@"); at >= 0; at = text.indexOf("@", at + 1)) {
      let left = at;
      while (left > 0 && at - left < 64 && LOCAL_CHAR.test(text[left - 1])) left--;
      let right = at + 1;
      while (right < text.length && right - at < 256 && DOMAIN_CHAR.test(text[right])) right++;
      scan(text, left - 1, right + 1, left, EMAIL, (v, start) => {
        found.push(match("email", start, v));
      });
    }
  }

  #numbers(text: string, start: number, end: number, found: PersonalDataMatch[]): void {
    const from = start - 16, to = end + 2;
    // What the run holds decides which patterns can match in it: most runs are dates, times,
    // versions and ids that need one pattern or none.
    let digits = 0, dots = 0, dashes = 0;
    for (let i = start; i < end; i++) {
      const c = text.charCodeAt(i);
      if (c >= 48 && c <= 57) digits++;
      else if (c === 46) dots++;
      else if (c === 45 || c === 32) dashes++;
    }
    if (digits >= 13 && this.#categories.has("card")) {
      scan(text, from, to, start, CARD, (v, at) => {
        const digits = v.replace(/[ -]/g, "");
        if (digits.length >= 13 && digits.length <= 19 && cardIssuer(digits) && luhnValid(digits)) {
          found.push(match("card", at, v));
        }
      });
    }
    if (digits >= 9 && dashes >= 2 && this.#categories.has("ssn")) {
      scan(text, from, to, start, SSN, (v, at, m) => {
        if (ssnValid(m[1], m[3], m[4])) found.push(match("ssn", at, v));
      });
    }
    if (dots >= 3 && this.#categories.has("ip")) {
      scan(text, from, to, start, IPV4, (v, at) => {
        if (VERSION_WORD.test(text.slice(Math.max(0, at - 12), at))) return;
        if (!inRanges(v, this.#ignored)) found.push(match("ip", at, v));
      });
    }
    if (digits >= 7 && this.#categories.has("phone")) {
      scan(text, from, to, start, PHONE, (v, at) => {
        if (this.#phones.test(v)) found.push(match("phone", at, v));
      });
    }
  }

  #ipv6(text: string, found: PersonalDataMatch[]): void {
    // From each `:` that starts a candidate, out to the ends of its run of hex digits, colons and
    // dots: a pattern that could start at any hex digit would try every letter a to f.
    const colon = /:[0-9A-Fa-f]{0,4}:/g;
    for (let m = colon.exec(text); m; m = colon.exec(text)) {
      let left = m.index;
      while (left > 0 && m.index - left < 45 && isIpv6Char(text.charCodeAt(left - 1))) left--;
      let right = m.index + 1;
      while (right < text.length && right - left < 46 && isIpv6Char(text.charCodeAt(right))) {
        right++;
      }
      colon.lastIndex = right;
      scan(text, left - 1, right + 1, left, IPV6, (v, start) => {
        const ip = v.replace(/\.$/, "");
        if (isIPv6(ip) && /[0-9a-f]/i.test(ip) && !inRanges(ip, this.#ignored)) {
          found.push(match("ip", start, ip));
        }
      });
    }
  }
}

function isIpv6Char(c: number): boolean {
  return (c >= 48 && c <= 58) || c === 46 || (c >= 65 && c <= 70) || (c >= 97 && c <= 102);
}

/**
 * Calls `visit` for each run of digits, spaces, dots, dashes and parentheses (with the `+` or `(`
 * before it) that holds seven digits or more, or three dots: what the number patterns need. By
 * hand, because a pattern for it costs 15 to 25 ms a megabyte and this loop 5 (bench/privacy.ts).
 */
function forEachNumberRun(text: string, visit: (start: number, end: number) => void): void {
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c < 48 || c > 57) continue;
    let digits = 1, dots = 0, j = i + 1;
    for (; j < n; j++) {
      const k = text.charCodeAt(j);
      if (k >= 48 && k <= 57) digits++;
      else if (k === 46) dots++;
      else if (k !== 32 && k !== 45 && k !== 40 && k !== 41) break;
    }
    if (digits >= 7 || dots >= 3) {
      const before = i > 0 ? text.charCodeAt(i - 1) : 0;
      visit(before === 43 || before === 40 ? i - 1 : i, j);
    }
    i = j;
  }
}

function match(category: PersonalDataCategory, start: number, value: string): PersonalDataMatch {
  return { category, start, end: start + value.length, value };
}

/**
 * Runs a global pattern over `text[from, to)` (clamped) and reports the matches that start at or
 * after `min`, with their index in the whole text; the characters before `min` are there for
 * the pattern's look-behind.
 */
function scan(
  text: string,
  from: number,
  to: number,
  min: number,
  pattern: RegExp,
  report: (value: string, start: number, m: RegExpExecArray) => void,
): void {
  const offset = Math.max(0, from);
  const window = text.slice(offset, Math.min(text.length, to));
  pattern.lastIndex = 0;
  for (let m = pattern.exec(window); m; m = pattern.exec(window)) {
    if (m[0].length === 0) pattern.lastIndex++;
    else if (m.index + offset >= min) report(m[0], m.index + offset, m);
  }
}

function withoutOverlaps(found: PersonalDataMatch[]): PersonalDataMatch[] {
  found.sort((a, b) => a.start - b.start || b.end - a.end);
  const kept: PersonalDataMatch[] = [];
  let end = 0;
  for (const m of found) {
    if (m.start < end) continue;
    kept.push(m);
    end = m.end;
  }
  return kept;
}

/**
 * Replaces each piece of personal data in a text.
 *
 * @param text Any text.
 * @param matches The matches of {@linkcode PersonalDataDetector.find} on that text.
 * @param replace What each match becomes.
 * @returns The text with every match replaced.
 */
export function replaceMatches(
  text: string,
  matches: readonly PersonalDataMatch[],
  replace: (match: PersonalDataMatch) => string,
): string {
  if (matches.length === 0) return text;
  let out = "";
  let at = 0;
  for (const m of matches) {
    out += text.slice(at, m.start) + replace(m);
    at = m.end;
  }
  return out + text.slice(at);
}
