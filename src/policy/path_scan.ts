/**
 * The symlink check behind read and write grants. Deno checks a path as written, after removing
 * `.` and `..` but without resolving symlinks, and the operating system then follows them: with
 * `--allow-read=/project`, reading `/project/link/passwd` where `link -> /etc` reads
 * `/etc/passwd`. So before a directory is granted, its tree is walked for the entries through
 * which code could leave `ALLOWED_PROJECTS`, and those are blocked by path.
 *
 * @module
 */
import { isAbsolute, join, relative, sep } from "node:path";

/** An entry under a granted directory that sandbox code must not reach. */
export interface BlockedEntry {
  /** Its path, under the granted directory (not resolved). */
  path: string;
  /** What it is and why it is blocked, for messages: `a symlink to "/etc", outside …`. */
  reason: string;
}

/** Options of {@linkcode findBlockedEntries}. */
export interface ScanOptions {
  /** Real paths of `ALLOWED_PROJECTS`: a symlink may lead anywhere under them. */
  projects: string[];
  /** Directory entries read in all, counting the directories that symlinks lead to. */
  maxEntries: number;
  /** Directory levels below the granted directory. */
  maxDepth: number;
}

/**
 * Whether a path is a parent directory of another path, or the same path.
 *
 * @param child An absolute, normalised path.
 * @param parent An absolute, normalised path.
 * @returns True when `child` is `parent` or under it.
 */
export function isWithin(child: string, parent: string): boolean {
  const rel = relative(parent, child);
  return rel === "" || (rel !== ".." && !rel.startsWith(`..${sep}`) && !isAbsolute(rel));
}

interface Alias {
  path: string;
  target: string;
}

/**
 * Walks a directory (without following symlinks, but also walking, once each, the directories
 * inside `ALLOWED_PROJECTS` that its symlinks lead to) and returns what code must not reach:
 *
 * - symlinks that lead outside `ALLOWED_PROJECTS`, that do not resolve, or that lead to a socket,
 *   FIFO or device;
 * - sockets, FIFOs and devices;
 * - directories the server cannot list (code could still open a name it guesses inside them);
 * - symlinks to directories from which one of the above can be reached: `alias -> /project`
 *   would otherwise let `/project/alias/link/passwd` past a block on `/project/link`.
 *
 * @param root A real directory path.
 * @param options The projects and the walk's limits.
 * @returns The blocked entries under `root`, sorted by path.
 * @throws {RangeError} When the walk passes `maxEntries` or `maxDepth`; the message names it.
 */
export async function findBlockedEntries(
  root: string,
  options: ScanOptions,
): Promise<BlockedEntry[]> {
  const blocked = new Map<string, string>();
  const aliases: Alias[] = [];
  const visited = new Set<string>();
  const queue: Array<{ dir: string; depth: number }> = [{ dir: root, depth: 0 }];
  let entries = 0;
  while (queue.length > 0) {
    const { dir, depth } = queue.pop()!;
    if (visited.has(dir)) continue;
    visited.add(dir);
    try {
      for await (const entry of Deno.readDir(dir)) {
        if (++entries > options.maxEntries) {
          throw new RangeError(
            `it holds more than ${options.maxEntries} entries, counting the directories its symlinks lead to, and the symlink check reads at most that many`,
          );
        }
        const path = join(dir, entry.name);
        if (entry.isDirectory) {
          if (depth + 1 > options.maxDepth) {
            throw new RangeError(
              `it has directories more than ${options.maxDepth} levels deep ("${path}"), and the symlink check walks at most that many levels`,
            );
          }
          queue.push({ dir: path, depth: depth + 1 });
        } else if (entry.isSymlink) {
          const target = await checkSymlink(path, options.projects, blocked);
          if (target !== undefined) {
            aliases.push({ path, target });
            queue.push({ dir: target, depth: 0 });
          }
        } else if (!entry.isFile) {
          blocked.set(path, "a socket, FIFO or device");
        }
      }
    } catch (error) {
      if (error instanceof RangeError) throw error;
      // Removed while we looked: nothing to reach there.
      if (error instanceof Deno.errors.NotFound) continue;
      blocked.set(dir, `a directory the server cannot list (${(error as Error).message})`);
    }
  }
  const pending = [...blocked.keys()];
  while (pending.length > 0) {
    const bad = pending.pop()!;
    for (const alias of aliases) {
      if (blocked.has(alias.path) || !isWithin(bad, alias.target)) continue;
      blocked.set(alias.path, `a symlink to "${alias.target}", which leads to "${bad}"`);
      pending.push(alias.path);
    }
  }
  return [...blocked]
    .filter(([path]) => isWithin(path, root))
    .map(([path, reason]) => ({ path, reason }))
    .sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}

/**
 * Records a symlink that must be blocked, or returns the directory it leads to.
 *
 * @returns The real path of the directory the link leads to (inside the projects), if any.
 */
async function checkSymlink(
  path: string,
  projects: string[],
  blocked: Map<string, string>,
): Promise<string | undefined> {
  let target: string;
  try {
    target = await Deno.realPath(path);
  } catch {
    const text = await Deno.readLink(path).catch(() => "?");
    blocked.set(path, `a symlink to "${text}", which does not resolve`);
    return undefined;
  }
  if (!projects.some((project) => isWithin(target, project))) {
    blocked.set(path, `a symlink to "${target}", outside ALLOWED_PROJECTS`);
    return undefined;
  }
  let info: Deno.FileInfo;
  try {
    info = await Deno.stat(target);
  } catch (error) {
    blocked.set(
      path,
      `a symlink to "${target}", which cannot be read (${(error as Error).message})`,
    );
    return undefined;
  }
  if (info.isDirectory) return target;
  if (!info.isFile) blocked.set(path, `a symlink to the socket, FIFO or device "${target}"`);
  return undefined;
}
