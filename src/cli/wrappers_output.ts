/**
 * What `wrappers` leaves on disk besides the generated code's contents: `manifest.json` (read
 * back with every entry checked, since the directory is the user's to edit) and the writes that
 * touch a file only when its bytes change, atomically (a temporary file in the same directory,
 * then a rename), so that unchanged wrappers keep their mtime.
 *
 * @module
 */
import { randomUUID } from "node:crypto";
import { basename, dirname, join } from "node:path";
import type { Logger } from "../log.ts";
import { sha256Hex } from "../_util.ts";

/** The version of `manifest.json`'s format; a manifest of another version is ignored. */
export const MANIFEST_VERSION = 1;

/** A server's entry in `manifest.json`. */
export interface ManifestEntry {
  /** The server's module name (`typescript/<module>.ts`, `mcp_wrappers.<module>`). */
  module: string;
  /** The hash of what its files were generated from (format, server, module, tools). */
  hash: string;
  /** Its number of tools. */
  tools: number;
  /** Path relative to the output directory → sha256 hex of its bytes. */
  files: Record<string, string>;
}

/** The contents of `manifest.json`. */
export interface Manifest {
  /** {@linkcode MANIFEST_VERSION} when written. */
  version: number;
  /** The program that wrote it (`code-executor <version>`). */
  generator: string;
  /** Each server's entry, by server name. */
  servers: Record<string, ManifestEntry>;
}

/**
 * Reads a manifest, keeping only the entries that are well formed and list only files the
 * generator could have written.
 *
 * @param path The manifest's path.
 * @param log Where a manifest that does not parse is reported.
 * @returns The manifest, or undefined when it is missing, unreadable, of another version or not
 * JSON (every server is then regenerated).
 */
export async function readManifest(path: string, log: Logger): Promise<Manifest | undefined> {
  let text: string;
  try {
    text = await Deno.readTextFile(path);
  } catch {
    return undefined;
  }
  try {
    const raw = JSON.parse(text);
    if (raw?.version !== MANIFEST_VERSION || typeof raw.servers !== "object" || !raw.servers) {
      return undefined;
    }
    const servers: Record<string, ManifestEntry> = {};
    for (const [name, entry] of Object.entries(raw.servers as Record<string, ManifestEntry>)) {
      const valid = typeof entry?.module === "string" && /^[a-z_][a-z0-9_]*$/.test(entry.module) &&
        typeof entry.hash === "string" && typeof entry.files === "object" && entry.files !== null &&
        Object.keys(entry.files).every(isOwnFile);
      if (valid) servers[name] = entry;
    }
    return { ...raw, servers };
  } catch (error) {
    log.warn(`Ignoring ${path}: ${(error as Error).message}; every server is regenerated`);
    return undefined;
  }
}

/** A manifest path the generator could have written: never one outside the output directory. */
function isOwnFile(file: string): boolean {
  return /^(typescript\/[a-z0-9_]+\.ts|python\/[a-z0-9_]+\/[a-z0-9_]+\.py|python\/[a-z0-9_]+-[0-9.]+-py3-none-any\.whl)$/
    .test(file);
}

/**
 * Tells whether a server's files are all on disk with the bytes its manifest entry records.
 *
 * @param out The output directory.
 * @param entry The server's manifest entry.
 * @returns False when any file is missing, unreadable or different.
 */
export async function filesMatch(out: string, entry: ManifestEntry): Promise<boolean> {
  for (const [file, hash] of Object.entries(entry.files)) {
    try {
      if (sha256Hex(await Deno.readFile(join(out, file))) !== hash) return false;
    } catch {
      return false;
    }
  }
  return true;
}

/**
 * Writes a manifest, its servers sorted by name, unless the file already holds exactly that.
 *
 * @param path The manifest's path.
 * @param manifest The manifest.
 * @returns Whether the file was written.
 * @throws {Error} When it cannot be written.
 */
export async function writeManifest(path: string, manifest: Manifest): Promise<boolean> {
  const servers = Object.fromEntries(
    Object.entries(manifest.servers).sort(([a], [b]) => a < b ? -1 : a > b ? 1 : 0),
  );
  const bytes = new TextEncoder().encode(JSON.stringify({ ...manifest, servers }, null, 2) + "\n");
  return await writeIfChanged(path, bytes);
}

/**
 * Writes a file atomically unless it already holds exactly these bytes.
 *
 * @param path The file.
 * @param bytes Its new contents.
 * @returns Whether the file was written.
 * @throws {Error} When it cannot be written; no temporary file is left behind.
 */
export async function writeIfChanged(path: string, bytes: Uint8Array): Promise<boolean> {
  try {
    const current = await Deno.readFile(path);
    if (current.length === bytes.length && current.every((byte, i) => byte === bytes[i])) {
      return false;
    }
  } catch {
    // Missing or unreadable: write it.
  }
  await Deno.mkdir(dirname(path), { recursive: true });
  const temp = join(dirname(path), `.${basename(path)}.${Deno.pid}.${randomUUID()}.tmp`);
  try {
    await Deno.writeFile(temp, bytes);
    await Deno.rename(temp, path);
  } catch (error) {
    await Deno.remove(temp).catch(() => {});
    throw new Error(`Cannot write ${path}: ${(error as Error).message}`);
  }
  return true;
}

/**
 * Removes a file if it can.
 *
 * @param path The file.
 * @returns Whether it was removed (false when it was already gone or cannot be removed).
 */
export async function removeFile(path: string): Promise<boolean> {
  try {
    await Deno.remove(path);
    return true;
  } catch {
    return false;
  }
}
