/**
 * Host entries of `permissions.net` (`host` or `host:port`): parsed once, in one canonical form,
 * and classified, so that the form compared with the admin's list is the form Deno sees.
 *
 * IPv4 literals are read with `inet_aton` semantics (what the resolver behind `Deno.connect`
 * accepts, and what the WHATWG URL parser behind `fetch` normalises): 1 to 4 parts, each decimal,
 * octal (leading `0`) or hex (`0x`), the last part filling the remaining bytes. So `2130706433`,
 * `0177.0.0.1`, `0x7f.1` and `127.1` all become `127.0.0.1`. A name whose last label looks
 * numeric but is not a valid IPv4 literal is refused rather than guessed at.
 *
 * @module
 */

/** One parsed `permissions.net` entry. */
export interface HostEntry {
  /**
   * The canonical host: a lowercase name without a trailing dot, a dotted-quad IPv4 address
   * (also for IPv4-mapped IPv6), or a compressed IPv6 address in brackets.
   */
  host: string;
  /** The pinned port; undefined allows every port. */
  port?: number;
  /** What the host is, where a special rule applies: "the loopback address 127.0.0.1". */
  special?: string;
}

/** Cloud instance-metadata endpoints: they hand out credentials to whoever asks. */
const METADATA_IPV4 = new Set([
  "169.254.169.254",
  "169.254.170.2",
  "100.100.100.200",
  "168.63.129.16",
]);
const METADATA_IPV6 = new Set(["[fd00:ec2::254]"]);
const METADATA_NAMES = new Set([
  "metadata",
  "metadata.google.internal",
  "metadata.goog",
  "instance-data",
  "instance-data.ec2.internal",
  "metadata.tencentyun.com",
]);
const LOOPBACK_NAMES = new Set([
  "localhost",
  "localhost.localdomain",
  "localhost6",
  "localhost6.localdomain6",
  "ip6-localhost",
  "ip6-loopback",
]);
/** Special-use domains that never name a public host (RFC 6761, RFC 6762, RFC 8375, ICANN). */
const PRIVATE_SUFFIXES = ["internal", "local", "localdomain", "home.arpa"];

/** IPv4 ranges whose hosts must be listed explicitly: [first address, prefix length, kind]. */
const IPV4_RANGES: Array<[string, number, string]> = [
  ["0.0.0.0", 8, "unspecified"],
  ["127.0.0.0", 8, "loopback"],
  ["10.0.0.0", 8, "private"],
  ["172.16.0.0", 12, "private"],
  ["192.168.0.0", 16, "private"],
  ["100.64.0.0", 10, "private (carrier-grade NAT)"],
  ["169.254.0.0", 16, "link-local"],
  ["192.0.0.0", 24, "reserved (IETF protocol)"],
  ["198.18.0.0", 15, "reserved (benchmarking)"],
  ["224.0.0.0", 4, "multicast"],
  ["240.0.0.0", 4, "reserved"],
];

const LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

function ipv4Text(value: number): string {
  return [24, 16, 8, 0].map((shift) => (value >>> shift) & 255).join(".");
}

function ipv4Value(text: string): number {
  return text.split(".").reduce((acc, part) => acc * 256 + Number(part), 0);
}

const V4_RANGES = IPV4_RANGES.map(([first, bits, kind]) => ({
  first: ipv4Value(first),
  size: 2 ** (32 - bits),
  kind,
}));

/**
 * Describes an IPv4 address that must be listed explicitly.
 *
 * @param value The address as an unsigned 32-bit number.
 * @returns "the loopback address 127.0.0.1", or undefined for an ordinary public address.
 */
function classifyIPv4(value: number): string | undefined {
  const text = ipv4Text(value);
  if (METADATA_IPV4.has(text)) return `the cloud metadata address ${text}`;
  if (value === 0xffffffff) return `the broadcast address ${text}`;
  const range = V4_RANGES.find((r) => value >= r.first && value < r.first + r.size);
  return range ? `the ${range.kind} address ${text}` : undefined;
}

function parseIPv4Number(part: string): number | undefined {
  if (/^0x[0-9a-f]+$/.test(part)) return parseInt(part.slice(2), 16);
  if (/^0[0-7]+$/.test(part)) return parseInt(part.slice(1), 8);
  if (/^(?:0|[1-9][0-9]*)$/.test(part)) return Number(part);
  return undefined;
}

/**
 * Parses an IPv4 literal with `inet_aton` semantics.
 *
 * @param text A lowercase host without a trailing dot.
 * @returns The address as an unsigned 32-bit number, or undefined when it is not valid.
 */
export function parseIPv4(text: string): number | undefined {
  const parts = text.split(".");
  if (parts.length > 4) return undefined;
  const numbers = parts.map(parseIPv4Number);
  if (numbers.some((n) => n === undefined)) return undefined;
  const values = numbers as number[];
  const last = values[values.length - 1];
  if (values.slice(0, -1).some((n) => n > 255)) return undefined;
  if (last >= 256 ** (5 - values.length)) return undefined;
  return values.slice(0, -1).reduce((acc, n, i) => acc + n * 256 ** (3 - i), 0) + last;
}

/**
 * Parses the text between the brackets of an IPv6 literal (`::` compression and a trailing
 * dotted IPv4 part allowed; zone ids are not).
 *
 * @param text The address without brackets, lowercase.
 * @returns Its eight 16-bit groups, or undefined when it is not valid.
 */
export function parseIPv6(text: string): number[] | undefined {
  const halves = text.split("::");
  if (halves.length > 2) return undefined;
  const parseHalf = (half: string, isLast: boolean): number[] | undefined => {
    if (half === "") return [];
    const pieces = half.split(":");
    const groups: number[] = [];
    for (const [i, piece] of pieces.entries()) {
      if (isLast && i === pieces.length - 1 && piece.includes(".")) {
        // The embedded IPv4 part is strict dotted decimal, as in the URL standard.
        if (!/^(?:(?:0|[1-9][0-9]{0,2})\.){3}(?:0|[1-9][0-9]{0,2})$/.test(piece)) return undefined;
        const bytes = piece.split(".").map(Number);
        if (bytes.some((b) => b > 255)) return undefined;
        groups.push(bytes[0] * 256 + bytes[1], bytes[2] * 256 + bytes[3]);
      } else if (/^[0-9a-f]{1,4}$/.test(piece)) {
        groups.push(parseInt(piece, 16));
      } else {
        return undefined;
      }
    }
    return groups;
  };
  if (halves.length === 1) {
    const groups = parseHalf(halves[0], true);
    return groups?.length === 8 ? groups : undefined;
  }
  const head = parseHalf(halves[0], false);
  const tail = parseHalf(halves[1], true);
  if (!head || !tail || head.length + tail.length > 7) return undefined;
  return [...head, ...new Array(8 - head.length - tail.length).fill(0), ...tail];
}

/**
 * Writes IPv6 groups in the RFC 5952 form: lowercase, no leading zeros, the longest run of two
 * or more zero groups (the first, on a tie) compressed to `::`.
 *
 * @param groups Eight 16-bit groups.
 * @returns The address without brackets.
 */
export function formatIPv6(groups: number[]): string {
  let best = -1;
  let bestLength = 1;
  for (let i = 0; i < 8;) {
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLength) [best, bestLength] = [i, j - i];
    i = j === i ? i + 1 : j;
  }
  const hex = (g: number[]) => g.map((n) => n.toString(16)).join(":");
  if (best < 0) return hex(groups);
  return `${hex(groups.slice(0, best))}::${hex(groups.slice(best + bestLength))}`;
}

function embeddedIPv4(high: number, low: number): number {
  return high * 65536 + low;
}

/**
 * Describes an IPv6 address that must be listed explicitly.
 *
 * @param g Eight 16-bit groups (not IPv4-mapped; those are handled as IPv4).
 * @param text The canonical form in brackets.
 * @returns "the loopback address [::1]", or undefined for an ordinary public address.
 */
function classifyIPv6(g: number[], text: string): string | undefined {
  if (METADATA_IPV6.has(text)) return `the cloud metadata address ${text}`;
  const zeros = (from: number, to: number) => g.slice(from, to).every((n) => n === 0);
  if (zeros(0, 8)) return `the unspecified address ${text}`;
  if (zeros(0, 7) && g[7] === 1) return `the loopback address ${text}`;
  if (zeros(0, 6)) {
    return `the IPv4-compatible address ${text} (of ${ipv4Text(embeddedIPv4(g[6], g[7]))})`;
  }
  if (zeros(0, 4) && g[4] === 0xffff && g[5] === 0) {
    return `the IPv4-translated address ${text} (of ${ipv4Text(embeddedIPv4(g[6], g[7]))})`;
  }
  if (g[0] === 0x64 && g[1] === 0xff9b && zeros(2, 6)) {
    const inner = classifyIPv4(embeddedIPv4(g[6], g[7]));
    return inner ? `the NAT64 address ${text} (of ${inner})` : undefined;
  }
  if (g[0] === 0x64 && g[1] === 0xff9b && g[2] === 1) return `the private (NAT64) address ${text}`;
  if (g[0] === 0x2002) {
    const inner = classifyIPv4(embeddedIPv4(g[1], g[2]));
    return inner ? `the 6to4 address ${text} (of ${inner})` : undefined;
  }
  if (g[0] === 0x2001 && g[1] === 0) return `the Teredo tunnel address ${text}`;
  if (g[0] === 0x100 && zeros(1, 4)) return `the reserved (discard) address ${text}`;
  if ((g[0] & 0xfe00) === 0xfc00) return `the private (unique local) address ${text}`;
  if ((g[0] & 0xffc0) === 0xfe80) return `the link-local address ${text}`;
  if ((g[0] & 0xffc0) === 0xfec0) return `the private (site-local) address ${text}`;
  if ((g[0] & 0xff00) === 0xff00) return `the multicast address ${text}`;
  return undefined;
}

function classifyName(name: string): string | undefined {
  if (METADATA_NAMES.has(name)) return `the cloud metadata name ${name}`;
  if (LOOPBACK_NAMES.has(name) || name.endsWith(".localhost")) {
    return `the loopback name ${name}`;
  }
  const suffix = PRIVATE_SUFFIXES.find((s) => name === s || name.endsWith(`.${s}`));
  if (suffix) return `the private name ${name} (under .${suffix}, which is never public)`;
  if (!name.includes(".")) {
    return `the single-label name ${name} (the resolver's search domains make it a local name)`;
  }
  return undefined;
}

function parseHost(raw: string): { host: string; special?: string } {
  if (raw.startsWith("[")) {
    if (!raw.endsWith("]")) throw new SyntaxError("an IPv6 address needs a closing bracket");
    const groups = parseIPv6(raw.slice(1, -1));
    if (!groups) throw new SyntaxError(`"${raw}" is not a valid IPv6 address`);
    if (groups.slice(0, 5).every((n) => n === 0) && groups[5] === 0xffff) {
      const value = embeddedIPv4(groups[6], groups[7]);
      return { host: ipv4Text(value), special: classifyIPv4(value) };
    }
    const host = `[${formatIPv6(groups)}]`;
    return { host, special: classifyIPv6(groups, host) };
  }
  // One trailing dot is the same name written fully qualified.
  const name = raw.endsWith(".") ? raw.slice(0, -1) : raw;
  const labels = name.split(".");
  if (/[*/]/.test(name)) {
    throw new SyntaxError(
      "expected host or host:port; wildcards and address ranges are not supported, list each host",
    );
  }
  if (name.length > 253 || !labels.every((label) => LABEL.test(label))) {
    throw new SyntaxError(
      "expected host or host:port, with a host name of letters, digits, hyphens and dots, an IPv4 address, or an IPv6 address in brackets",
    );
  }
  // As in the URL standard: a last label that is a number makes the whole host an IPv4 literal.
  if (/^(?:[0-9]+|0x[0-9a-f]*)$/.test(labels[labels.length - 1])) {
    const value = parseIPv4(name);
    if (value === undefined) {
      throw new SyntaxError(`"${raw}" ends in a number but is not a valid IPv4 address`);
    }
    return { host: ipv4Text(value), special: classifyIPv4(value) };
  }
  return { host: name, special: classifyName(name) };
}

/**
 * Parses a `permissions.net` entry into its canonical form.
 *
 * @param entry `host` or `host:port`; IPv6 addresses in brackets (`[::1]:8080`).
 * @returns The canonical host, the port if pinned, and what makes the host special.
 * @throws {SyntaxError} When the entry is not a host or host:port; the message says why.
 *
 * @example
 * ```ts
 * parseHostEntry("0x7f.1:8080");
 * // { host: "127.0.0.1", port: 8080, special: "the loopback address 127.0.0.1" }
 * ```
 */
export function parseHostEntry(entry: string): HostEntry {
  const text = entry.trim().toLowerCase();
  const match = /^(\[[^\]]*\]|[^:]*)(?::([^:]*))?$/.exec(text);
  if (!match) {
    throw new SyntaxError(
      text.includes(":") && !text.startsWith("[")
        ? "write an IPv6 address in brackets, as in [::1]:8080"
        : "expected host or host:port",
    );
  }
  const [, rawHost, rawPort] = match;
  if (rawHost === "") throw new SyntaxError("expected host or host:port");
  let port: number | undefined;
  if (rawPort !== undefined) {
    port = /^[0-9]{1,5}$/.test(rawPort) ? Number(rawPort) : NaN;
    if (!(port >= 1 && port <= 65535)) {
      throw new SyntaxError(`expected a port from 1 to 65535 after the colon, got "${rawPort}"`);
    }
  }
  const { host, special } = parseHost(rawHost);
  return { host, port, special };
}

/**
 * Writes a parsed entry back as `host` or `host:port`, the form Deno's `--allow-net` takes.
 *
 * @param entry A parsed entry.
 * @returns For example `127.0.0.1:8080` or `[::1]`.
 */
export function formatHostEntry(entry: HostEntry): string {
  return entry.port === undefined ? entry.host : `${entry.host}:${entry.port}`;
}
