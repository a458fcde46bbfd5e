/**
 * Host files in a Python run: the paths a run is granted to read (`permissions.read`, narrowed
 * under `ALLOWED_PROJECTS` by the policy) become the child's only extra Deno read permission and
 * are mounted read-only at the same paths in Pyodide's file system (`sandbox/py_files.ts`). A run
 * with grants gets a child started for it, never a pooled one, and the child serves that run (or
 * that session) only, so a grant cannot reach another run.
 *
 * @module
 */
import { pathToFileURL } from "node:url";
import { CodeExecutorError } from "../../errors.ts";
import { MAX_BLOCKED_ENTRIES, MAX_SCAN_DEPTH, MAX_SCAN_ENTRIES } from "../../policy/permissions.ts";
import { findBlockedEntries } from "../../policy/path_scan.ts";

/** The file grants of one Python child: real paths, as the policy narrowed them. */
export interface PyFileGrants {
  /** Paths to read, mounted read-only at the same path. */
  read: readonly string[];
  /** Entries under them that stay unreadable (symlinks that lead out of `ALLOWED_PROJECTS`). */
  deny: readonly string[];
}

/** What a child with file grants is started with. */
export interface PyFileFlags {
  /** Paths added to the child's `--allow-read`. */
  read: string[];
  /** Further Deno flags (`--deny-read`). */
  args: string[];
  /** The `files` field of the `init` frame. */
  init: { path: string; url: string; read: string[] };
}

/**
 * Whether a grant gives a Python child anything to read.
 *
 * @param grants The narrowed grants, or none.
 * @returns True when a child needs them.
 */
export function hasFileGrants(grants: PyFileGrants | undefined): grants is PyFileGrants {
  return (grants?.read.length ?? 0) > 0;
}

/**
 * Narrows a run's grants for a Python child: besides what the policy blocks (symlinks out of
 * `ALLOWED_PROJECTS`), every symlink under a granted directory that leads out of the granted
 * paths is denied too. Pyodide's file system never follows a symlink on the host, but code that
 * reaches JavaScript calls Deno, which would: a grant of one project directory must not read a
 * sibling through a link.
 *
 * @param grants The policy's grants.
 * @returns The grants with those symlinks added to `deny`.
 * @throws {CodeExecutorError} `PermissionError` when a granted directory is too large to walk,
 * holds too many such links, or a link's path has a comma (which Deno's flag cannot express).
 */
export async function pythonFileGrants(grants: PyFileGrants): Promise<PyFileGrants> {
  const deny = new Set(grants.deny);
  for (const path of grants.read) {
    if (!(await Deno.stat(path).then((info) => info.isDirectory, () => false))) continue;
    let blocked;
    try {
      blocked = await findBlockedEntries(path, {
        projects: [...grants.read],
        maxEntries: MAX_SCAN_ENTRIES,
        maxDepth: MAX_SCAN_DEPTH,
      });
    } catch (error) {
      if (!(error instanceof RangeError)) throw error;
      refuse(`Cannot grant read access to "${path}" to Python: ${error.message}`);
    }
    for (const entry of blocked) {
      if (entry.path.includes(",")) {
        refuse(
          `Cannot grant read access to "${path}" to Python: "${entry.path}" is ${entry.reason}, and its path has a comma, which Deno's --deny-read flag cannot express; rename or remove it`,
        );
      }
      deny.add(entry.path);
    }
  }
  if (deny.size > MAX_BLOCKED_ENTRIES) {
    refuse(
      `Cannot grant read access to ${
        grants.read.join(", ")
      } to Python: more than ${MAX_BLOCKED_ENTRIES} symlinks there lead out of the granted paths; grant a smaller directory`,
    );
  }
  return { read: grants.read, deny: [...deny] };
}

function refuse(message: string): never {
  throw new CodeExecutorError("PermissionError", `${message}; grant a directory with fewer links`);
}

/**
 * The flags and `init` field that give a child its grants.
 *
 * @param grants The narrowed grants.
 * @param filesPath `sandbox/py_files.ts` on disk, which the child imports to mount them.
 * @returns The flags.
 * @throws {Error} Without `filesPath`.
 */
export function fileFlags(grants: PyFileGrants, filesPath: string | undefined): PyFileFlags {
  if (!filesPath) throw new Error("Cannot grant files to a Python child without py_files.ts");
  const read = [...grants.read];
  return {
    read: [filesPath, ...read],
    args: grants.deny.length > 0 ? [`--deny-read=${grants.deny.join(",")}`] : [],
    init: { path: filesPath, url: pathToFileURL(filesPath).href, read },
  };
}

/**
 * A grant's identity, to compare a session's later calls with the grants it started with.
 *
 * @param grants The narrowed grants, or none.
 * @returns A string equal for equal grants.
 */
export function grantsKey(grants: PyFileGrants | undefined): string {
  if (!hasFileGrants(grants)) return "";
  return JSON.stringify([[...grants.read].sort(), [...grants.deny].sort()]);
}

/**
 * Refuses a session call whose grants differ from those its interpreter was started with: a
 * child's permissions are fixed when it starts.
 *
 * @param session The session's id.
 * @param started The grants of the session's child.
 * @param asked The grants of this call.
 * @throws {CodeExecutorError} `PermissionError` when they differ.
 */
export function checkSessionGrants(session: string, started: string, asked: string): void {
  if (started === asked) return;
  throw new CodeExecutorError(
    "PermissionError",
    `Session "${session}" was started with ${
      started === "" ? "no read grants" : `the read grants ${JSON.parse(started)[0].join(", ")}`
    }, and its interpreter keeps them: pass the same permissions.read in every call of the session, or start a new session`,
  );
}
