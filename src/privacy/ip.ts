/**
 * IP addresses for the detector: reading IPv4 and IPv6 addresses into 16-bit groups and telling
 * whether one is in a list of ranges (CIDR), with plain numbers. `node:net`'s `isIPv6` and BigInt
 * arithmetic did the same at several times the cost (bench/privacy.ts).
 *
 * @module
 */

/** An IP range: the address's groups (two for IPv4, eight for IPv6) and the prefix length. */
export interface Cidr {
  /** Whether it is an IPv6 range. */
  v6: boolean;
  /** The address, 16 bits a group. */
  groups: number[];
  /** How many leading bits must be equal. */
  prefix: number;
}

/** Whether a character code is a decimal digit. */
function isDigit(c: number): boolean {
  return c >= 48 && c <= 57;
}

function hexValue(c: number): number {
  if (c >= 48 && c <= 57) return c - 48;
  if (c >= 97 && c <= 102) return c - 87;
  if (c >= 65 && c <= 70) return c - 55;
  return -1;
}

/**
 * Reads a dotted quad of `text[from, to)` as `isIPv4` does (octets 0 to 255, no leading zero).
 *
 * @returns Its two 16-bit groups, or undefined when it is not one.
 */
function ipv4Groups(text: string, from: number, to: number): [number, number] | undefined {
  let value = 0, octets = 0, i = from;
  while (octets < 4) {
    const first = i;
    let octet = 0;
    while (i < to && isDigit(text.charCodeAt(i)) && i - first < 3) {
      octet = octet * 10 + text.charCodeAt(i) - 48;
      i++;
    }
    const length = i - first;
    if (length === 0 || octet > 255 || (length > 1 && text.charCodeAt(first) === 48)) return;
    value = value * 256 + octet;
    octets++;
    if (octets < 4) {
      if (i >= to || text.charCodeAt(i) !== 46) return;
      i++;
    }
  }
  if (i !== to) return;
  return [Math.floor(value / 65536), value % 65536];
}

/**
 * Reads an IPv6 address as `node:net`'s `isIPv6` accepts it, without a zone: eight groups of one
 * to four hex digits, or fewer around one `::` that stands for at least one group, the last two
 * maybe written as a dotted quad.
 *
 * @param text The address.
 * @returns Its eight 16-bit groups, or undefined when it is not an IPv6 address.
 */
export function ipv6Groups(text: string): number[] | undefined {
  const n = text.length;
  const head: number[] = [];
  const tail: number[] = [];
  let gap = false;
  let i = 0;
  if (n >= 2 && text.charCodeAt(0) === 58) {
    if (text.charCodeAt(1) !== 58) return;
    gap = true;
    i = 2;
    if (i === n) return [0, 0, 0, 0, 0, 0, 0, 0];
  }
  for (;;) {
    const groups = gap ? tail : head;
    // A dotted quad ends the address, in place of two groups.
    let j = i, value = 0;
    while (j < n && j - i < 5) {
      const h = hexValue(text.charCodeAt(j));
      if (h < 0) break;
      value = value * 16 + h;
      j++;
    }
    if (j < n && text.charCodeAt(j) === 46) {
      const v4 = ipv4Groups(text, i, n);
      if (!v4) return;
      groups.push(v4[0], v4[1]);
      break;
    }
    if (j === i || j - i > 4) return;
    groups.push(value);
    if (j === n) break;
    if (text.charCodeAt(j) !== 58) return;
    if (j + 1 < n && text.charCodeAt(j + 1) === 58) {
      if (gap) return;
      gap = true;
      i = j + 2;
      if (i === n) break;
    } else {
      if (j + 1 === n) return;
      i = j + 1;
    }
  }
  const explicit = head.length + tail.length;
  if (gap ? explicit > 7 : explicit !== 8) return;
  if (!gap) return head;
  return [...head, ...new Array<number>(8 - explicit).fill(0), ...tail];
}

/**
 * Reads an IP range.
 *
 * @param cidr `address/prefix`, or an address alone.
 * @returns The range.
 * @throws {TypeError} When it is not one.
 */
export function parseCidr(cidr: string): Cidr {
  const [ip, len] = cidr.split("/");
  const v4 = ipv4Groups(ip, 0, ip.length);
  const groups = v4 ?? ipv6Groups(ip);
  const v6 = !v4;
  const prefix = len === undefined ? (v6 ? 128 : 32) : Number(len);
  if (!groups || !Number.isInteger(prefix) || prefix < 0 || prefix > (v6 ? 128 : 32)) {
    throw new TypeError(`Invalid IP range "${cidr}": expected address/prefix`);
  }
  return { v6, groups, prefix };
}

function inRange(groups: readonly number[], range: Cidr): boolean {
  let bits = range.prefix;
  for (let g = 0; bits > 0; g++, bits -= 16) {
    const shift = bits >= 16 ? 0 : 16 - bits;
    if (groups[g] >> shift !== range.groups[g] >> shift) return false;
  }
  return true;
}

/**
 * Whether a dotted quad (already matched as one) is in one of the IPv4 ranges.
 *
 * @param ip The address.
 * @param ranges The ranges.
 * @returns True when one holds it.
 */
export function ipv4InRanges(ip: string, ranges: readonly Cidr[]): boolean {
  const groups = ipv4Groups(ip, 0, ip.length);
  return groups !== undefined && ranges.some((r) => !r.v6 && inRange(groups, r));
}

/**
 * Whether an IPv6 address's groups are in one of the IPv6 ranges.
 *
 * @param groups The eight groups of {@linkcode ipv6Groups}.
 * @param ranges The ranges.
 * @returns True when one holds it.
 */
export function ipv6InRanges(groups: readonly number[], ranges: readonly Cidr[]): boolean {
  return ranges.some((r) => r.v6 && inRange(groups, r));
}
