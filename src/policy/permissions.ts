/**
 * Narrowing a caller's `permissions` request to what the admin allows. The admin's settings
 * are the ceiling; a request can only pick from them.
 *
 * Hosts are compared, and handed to Deno, in one canonical form (see `hosts.ts`), so that the
 * flag Deno sees is exactly what was checked. Paths are resolved with realpath, and a granted
 * directory is walked for symlinks that lead out of `ALLOWED_PROJECTS` (see `path_scan.ts`):
 * a read grant blocks them by path, a write grant that holds one is refused.
 *
 * @module
 */
import { isAbsolute } from "node:path";
import type { Settings } from "../config/settings.ts";
import { formatHostEntry, type HostEntry, parseHostEntry } from "./hosts.ts";
import { type BlockedEntry, findBlockedEntries, isWithin } from "./path_scan.ts";
import { CodeExecutorError } from "../errors.ts";

/** What a caller asks to grant to sandbox code. */
export interface RequestedPermissions {
  /** Hosts, as `host` or `host:port`. */
  net?: string[];
  /** Absolute paths to read. */
  read?: string[];
  /** Absolute paths to write. */
  write?: string[];
}

/** What the sandbox will get, in the form of Deno `--allow-*` and `--deny-*` lists. */
export interface GrantedPermissions {
  /** Canonical hosts for `--allow-net`. */
  net: string[];
  /** Real paths for `--allow-read`. */
  read: string[];
  /** Real paths for `--allow-write`. */
  write: string[];
  /**
   * Paths under `read` for `--deny-read` and `--deny-write`: symlinks that lead out of
   * `ALLOWED_PROJECTS` and the other entries {@linkcode findBlockedEntries} reports.
   */
  deny: string[];
}

/** Options of {@linkcode narrowPermissions}. */
export interface NarrowOptions {
  /**
   * Directory entries the symlink check reads per granted directory, counting the directories
   * its symlinks lead to; a larger directory is refused. Defaults to {@linkcode MAX_SCAN_ENTRIES}.
   */
  maxScanEntries?: number;
  /** Directory levels the symlink check walks; defaults to {@linkcode MAX_SCAN_DEPTH}. */
  maxScanDepth?: number;
}

/** Default of {@linkcode NarrowOptions.maxScanEntries} (one to two seconds of walking). */
export const MAX_SCAN_ENTRIES = 100_000;
/** Default of {@linkcode NarrowOptions.maxScanDepth}. */
export const MAX_SCAN_DEPTH = 64;
/** Blocked entries one execution may carry (they become command-line flags of the child). */
export const MAX_BLOCKED_ENTRIES = 256;

function refuse(message: string): never {
  throw new CodeExecutorError("PermissionError", message);
}

function narrowNet(requested: string[], allowed: string[]): string[] {
  const ceiling: HostEntry[] = [];
  const ignored: string[] = [];
  for (const entry of allowed) {
    try {
      ceiling.push(parseHostEntry(entry));
    } catch {
      ignored.push(`"${entry}"`);
    }
  }
  const note = ignored.length
    ? `; the admin's entries ${ignored.join(", ")} are not host or host:port and are ignored`
    : "";
  return requested.map((raw) => {
    let wanted: HostEntry;
    try {
      wanted = parseHostEntry(raw);
    } catch (error) {
      refuse(`Cannot grant network access to "${raw}": ${(error as Error).message}`);
    }
    const sameHost = ceiling.filter((entry) => entry.host === wanted.host);
    if (sameHost.some((entry) => entry.port === undefined || entry.port === wanted.port)) {
      return formatHostEntry(wanted);
    }
    if (sameHost.length > 0) {
      const ports = sameHost.map((entry) => entry.port).join(", ");
      refuse(
        `Cannot grant network access to "${raw}": the admin allows ${wanted.host} only on port ${ports} (permissions.net); ask for ${wanted.host}:${
          sameHost[0].port
        }${note}`,
      );
    }
    if (wanted.special) {
      refuse(
        `Cannot grant network access to "${raw}": it is ${wanted.special}, which the admin must list explicitly in permissions.net${note}`,
      );
    }
    const hint = ceiling.length
      ? `the admin allows ${ceiling.map(formatHostEntry).join(", ")} (permissions.net)`
      : "the admin allows no hosts; the admin adds them to permissions.net (or CODE_EXECUTOR_ALLOWED_HOSTS)";
    refuse(`Cannot grant network access to "${raw}": ${hint}${note}`);
  });
}

async function realProjects(settings: Settings): Promise<string[]> {
  const out: string[] = [];
  for (const project of settings.allowedProjects) {
    try {
      out.push(await Deno.realPath(project));
    } catch {
      // A project directory that does not exist grants nothing.
    }
  }
  return out;
}

/** A path granted for reading or writing, after realpath and the symlink check. */
interface CheckedPath {
  raw: string;
  real: string;
  blocked: BlockedEntry[];
}

async function checkPath(
  kind: "read" | "write",
  raw: string,
  projects: string[],
  scan: (real: string) => Promise<BlockedEntry[]>,
): Promise<CheckedPath> {
  if (!isAbsolute(raw)) refuse(`Cannot grant ${kind} access to "${raw}": use an absolute path`);
  if (raw.includes(",")) {
    refuse(`Cannot grant ${kind} access to "${raw}": commas are not allowed in paths`);
  }
  if (projects.length === 0) {
    refuse(
      `Cannot grant ${kind} access to "${raw}": no project directories are allowed; the admin sets ALLOWED_PROJECTS (or allowedProjects in the settings file)`,
    );
  }
  let real: string;
  let info: Deno.FileInfo;
  try {
    real = await Deno.realPath(raw);
    info = await Deno.stat(real);
  } catch {
    refuse(`Cannot grant ${kind} access to "${raw}": the path does not exist`);
  }
  if (!projects.some((project) => isWithin(real, project))) {
    refuse(
      `Cannot grant ${kind} access to "${raw}": it is not under ALLOWED_PROJECTS (${
        projects.join(", ")
      })`,
    );
  }
  if (real.includes(",")) {
    refuse(`Cannot grant ${kind} access to "${raw}": its real path "${real}" has a comma`);
  }
  if (info.isFile) return { raw, real, blocked: [] };
  if (!info.isDirectory) {
    refuse(`Cannot grant ${kind} access to "${raw}": it is a socket, FIFO or device`);
  }
  let blocked: BlockedEntry[];
  try {
    blocked = await scan(real);
  } catch (error) {
    if (!(error instanceof RangeError)) throw error;
    refuse(`Cannot grant ${kind} access to "${raw}": ${error.message}; grant a smaller directory`);
  }
  const self = blocked.find((entry) => entry.path === real);
  if (self) refuse(`Cannot grant ${kind} access to "${raw}": it is ${self.reason}`);
  return { raw, real, blocked };
}

function describeBlocked(blocked: BlockedEntry[]): string {
  const [first] = blocked;
  const more = blocked.length > 1 ? ` (and ${blocked.length - 1} more such entries)` : "";
  return `"${first.path}" is ${first.reason}${more}`;
}

async function narrowPaths(
  requested: RequestedPermissions | undefined,
  settings: Settings,
  options: NarrowOptions,
): Promise<Pick<GrantedPermissions, "read" | "write" | "deny">> {
  const reads = requested?.read ?? [];
  const writes = requested?.write ?? [];
  if (reads.length + writes.length === 0) return { read: [], write: [], deny: [] };
  const projects = await realProjects(settings);
  const scans = new Map<string, Promise<BlockedEntry[]>>();
  const scan = (real: string) => {
    let result = scans.get(real);
    if (!result) {
      result = findBlockedEntries(real, {
        projects,
        maxEntries: options.maxScanEntries ?? MAX_SCAN_ENTRIES,
        maxDepth: options.maxScanDepth ?? MAX_SCAN_DEPTH,
      });
      scans.set(real, result);
    }
    return result;
  };
  const read: CheckedPath[] = [];
  for (const raw of reads) read.push(await checkPath("read", raw, projects, scan));
  const write: CheckedPath[] = [];
  for (const raw of writes) write.push(await checkPath("write", raw, projects, scan));
  // Write access includes renaming: code could move a directory above a blocked entry and so
  // take the entry out from under the block. Such a grant is refused instead.
  for (const { raw, blocked } of write) {
    if (blocked.length === 0) continue;
    refuse(
      `Cannot grant write access to "${raw}": ${
        describeBlocked(blocked)
      }; with write access, code could rename a directory above it and so get past the block on it, so remove or replace it, or grant write access to a directory that does not contain it (read access can still be granted, with such entries blocked)`,
    );
  }
  const deny = new Set<string>();
  for (const { raw, blocked } of read) {
    for (const entry of blocked) {
      if (entry.path.includes(",")) {
        refuse(
          `Cannot grant read access to "${raw}": ${
            describeBlocked([entry])
          }, and its path has a comma, which Deno's --deny-read flag cannot express; rename or remove it`,
        );
      }
      deny.add(entry.path);
    }
    if (deny.size > MAX_BLOCKED_ENTRIES) {
      refuse(
        `Cannot grant read access to "${raw}": ${
          describeBlocked(blocked)
        }, and more than ${MAX_BLOCKED_ENTRIES} entries would have to be blocked in one execution; grant a smaller directory`,
      );
    }
  }
  return { read: read.map((p) => p.real), write: write.map((p) => p.real), deny: [...deny] };
}

/**
 * Checks a caller's permission request against the admin's settings.
 *
 * A host is granted when the admin lists the same host (in any spelling with the same canonical
 * form) with no port or the same port; it is granted in its canonical form. Loopback, private,
 * link-local, metadata and other special hosts follow the same rule; a refusal names what they are.
 * A path is granted when its real path lies under `ALLOWED_PROJECTS`; see the module
 * documentation for the symlink check.
 *
 * @param requested The `permissions` argument of a run.
 * @param settings The admin's settings.
 * @param options Limits of the symlink check.
 * @returns The permissions to grant, with canonical hosts, real paths and the paths to block.
 * @throws {CodeExecutorError} Naming the entry that was refused and the setting that governs it.
 *
 * @example
 * ```ts
 * const settings = resolveSettings({ permissions: { net: ["127.0.0.1:8080"] } });
 * (await narrowPermissions({ net: ["0x7f.1:8080"] }, settings)).net; // ["127.0.0.1:8080"]
 * ```
 */
export async function narrowPermissions(
  requested: RequestedPermissions | undefined,
  settings: Settings,
  options: NarrowOptions = {},
): Promise<GrantedPermissions> {
  const net = narrowNet(requested?.net ?? [], settings.permissions.net);
  return { net, ...(await narrowPaths(requested, settings, options)) };
}

/**
 * Whether a grant adds nothing to the default profile (so a warm child can serve it).
 *
 * @param granted The narrowed permissions.
 * @returns True when nothing beyond the private workspace is granted.
 */
export function isDefaultProfile(granted: GrantedPermissions): boolean {
  return granted.net.length === 0 && granted.read.length === 0 && granted.write.length === 0 &&
    granted.deny.length === 0;
}
