/**
 * Pure-Python wheels of generated modules, so that `run_python` can import them: the Python
 * sandbox cannot read the host's files, but it unpacks the wheels of `python.wheelDirs` (see
 * `src/exec/python/wheels.ts`). The archive is a plain zip of stored entries with a fixed timestamp,
 * so the same files always give the same bytes.
 *
 * @module
 */
import { createHash } from "node:crypto";

/** Options of {@linkcode buildWheel}. */
export interface BuildWheelOptions {
  /** The distribution name: ASCII letters, digits and `_`. */
  distribution: string;
  /** The version, e.g. `0.0.0`. */
  version: string;
  /** One line for the metadata's `Summary`. */
  summary?: string;
}

const CRC_TABLE = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});

function crc32(bytes: Uint8Array): number {
  let crc = 0xffffffff;
  for (const byte of bytes) crc = CRC_TABLE[(crc ^ byte) & 0xff] ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}

/** 1980-01-01 00:00, the earliest date a zip entry can carry. */
const DOS_DATE = 0x21;
const DOS_TIME = 0;
/** Bit 11: names are UTF-8. */
const UTF8_FLAG = 0x0800;

/**
 * Writes the run of fields that a local file header and its central directory entry share, in
 * the same order: version needed (2.0), flags, method (0, stored, left zero), time, date, CRC-32,
 * both sizes and the name's length.
 *
 * @param view The header.
 * @param at Where the run starts: 4 in a local header, 6 in a central entry.
 * @param entry The entry's CRC-32, size (stored: both sizes are the same) and name length.
 */
function writeEntryFields(
  view: DataView,
  at: number,
  entry: { crc: number; size: number; nameLength: number },
): void {
  view.setUint16(at, 20, true);
  view.setUint16(at + 2, UTF8_FLAG, true);
  view.setUint16(at + 6, DOS_TIME, true);
  view.setUint16(at + 8, DOS_DATE, true);
  view.setUint32(at + 10, entry.crc, true);
  view.setUint32(at + 14, entry.size, true);
  view.setUint32(at + 18, entry.size, true);
  view.setUint16(at + 22, entry.nameLength, true);
}

/**
 * Builds a zip archive of stored (uncompressed) entries, in the order given.
 *
 * @param entries Path inside the archive → contents.
 * @returns The archive.
 * @throws {RangeError} When the archive would need ZIP64 (more than 65 535 entries or 4 GiB).
 */
export function zipStored(entries: ReadonlyArray<[string, Uint8Array]>): Uint8Array {
  const encoder = new TextEncoder();
  const parts: Uint8Array[] = [];
  const centrals: Uint8Array[] = [];
  let offset = 0;
  if (entries.length > 0xffff) throw new RangeError("Cannot build the zip: too many entries");
  for (const [path, data] of entries) {
    const name = encoder.encode(path);
    const fields = { crc: crc32(data), size: data.length, nameLength: name.length };
    const local = new Uint8Array(30 + name.length);
    const lv = new DataView(local.buffer);
    lv.setUint32(0, 0x04034b50, true);
    writeEntryFields(lv, 4, fields);
    local.set(name, 30);
    const central = new Uint8Array(46 + name.length);
    const cv = new DataView(central.buffer);
    cv.setUint32(0, 0x02014b50, true);
    cv.setUint16(4, 20, true);
    writeEntryFields(cv, 6, fields);
    // Regular file, rw-r--r--, in the upper half of the external attributes (Unix).
    cv.setUint32(38, (0o100644 << 16) >>> 0, true);
    cv.setUint32(42, offset, true);
    central.set(name, 46);
    parts.push(local, data);
    centrals.push(central);
    offset += local.length + data.length;
    if (offset > 0xffffffff) throw new RangeError("Cannot build the zip: it is larger than 4 GiB");
  }
  const centralSize = centrals.reduce((sum, c) => sum + c.length, 0);
  const end = new Uint8Array(22);
  const ev = new DataView(end.buffer);
  ev.setUint32(0, 0x06054b50, true);
  ev.setUint16(8, entries.length, true);
  ev.setUint16(10, entries.length, true);
  ev.setUint32(12, centralSize, true);
  ev.setUint32(16, offset, true);
  const all = [...parts, ...centrals, end];
  const out = new Uint8Array(all.reduce((sum, part) => sum + part.length, 0));
  let at = 0;
  for (const part of all) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

/**
 * The file name of a pure-Python wheel.
 *
 * @param distribution The distribution name (letters, digits, `_`).
 * @param version The version.
 * @returns `<distribution>-<version>-py3-none-any.whl`.
 */
export function wheelFileName(distribution: string, version: string): string {
  return `${distribution}-${version}-py3-none-any.whl`;
}

/**
 * Builds a pure-Python wheel (`py3-none-any`) holding the given files, with its `METADATA`,
 * `WHEEL` and `RECORD` (sha256 of every file).
 *
 * @param files Path inside site-packages → text (e.g. `mcp_wrappers/memory.py`).
 * @param options Distribution name, version and summary.
 * @returns The wheel's bytes; the same input always gives the same bytes.
 * @throws {TypeError} When the distribution name or version would make an invalid file name.
 *
 * @example
 * ```ts
 * const bytes = buildWheel({ "mcp_wrappers/memory.py": source }, {
 *   distribution: "mcp_wrappers_memory",
 *   version: "0.0.0",
 * });
 * ```
 */
export function buildWheel(
  files: Readonly<Record<string, string>>,
  options: BuildWheelOptions,
): Uint8Array {
  const { distribution, version } = options;
  if (!/^[A-Za-z0-9_]+$/.test(distribution)) {
    throw new TypeError(`Invalid wheel distribution name "${distribution}": use A-Z, 0-9 and _`);
  }
  if (!/^[0-9][0-9A-Za-z.+]*$/.test(version)) {
    throw new TypeError(`Invalid wheel version "${version}": expected a version like 1.0.0`);
  }
  const encoder = new TextEncoder();
  const info = `${distribution}-${version}.dist-info`;
  const summary = (options.summary ?? "").replace(/[\p{Cc}\p{Zl}\p{Zp}]/gu, " ");
  const entries: Array<[string, Uint8Array]> = Object.keys(files).sort().map((
    path,
  ) => [path, encoder.encode(files[path])]);
  entries.push(
    [
      `${info}/METADATA`,
      encoder.encode(
        `Metadata-Version: 2.1\nName: ${distribution}\nVersion: ${version}\n${
          summary ? `Summary: ${summary}\n` : ""
        }`,
      ),
    ],
    [
      `${info}/WHEEL`,
      encoder.encode(
        "Wheel-Version: 1.0\nGenerator: code-executor\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
      ),
    ],
  );
  const record = entries.map(([path, data]) => {
    const digest = createHash("sha256").update(data).digest("base64url");
    return `${path},sha256=${digest},${data.length}\n`;
  }).join("") + `${info}/RECORD,,\n`;
  entries.push([`${info}/RECORD`, encoder.encode(record)]);
  return zipStored(entries);
}
