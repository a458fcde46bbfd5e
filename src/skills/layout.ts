/**
 * Where skills live on disk, and the file operations that refuse to follow a symlink planted
 * under a skills root.
 *
 * A root holds one directory per skill, `<root>/<name>/SKILL.md` and `<root>/<name>/skill.ts` (or
 * `skill.py`): the latest version, which is what MCP hosts see. Older versions live in
 * `<root>/.versions/<name>/<n>/`, whose name is not a valid skill name, so that no skills host
 * takes them for skills. Saves are written in `<root>/.tmp-<random>/` and renamed into place.
 *
 * @module
 */
import { isAbsolute, join, resolve } from "node:path";
import { CodeExecutorError } from "../errors.ts";
import { homeDataDir, ownConfigDir } from "../config/paths.ts";
import { writeSyncClose } from "../config/safe_write.ts";
import { sha256Hex } from "../_util.ts";
import type { Settings } from "../config/settings.ts";

/** Which root a skill comes from. */
export type SkillScope = "project" | "user" | "shared" | "principal";

/** A directory of skills and what it is. */
export interface SkillRoot {
  /** What it is. */
  readonly scope: SkillScope;
  /** Its absolute path; for a root in the shared state store, `state:<scope>`. */
  readonly dir: string;
  /** The root's scope in the shared state store (`state.url`), when it is kept there. */
  readonly stored?: string;
}

/** The directories of the `skills.*` settings, resolved. */
export interface SkillDirs {
  /** The project's skills. */
  project: string;
  /** The user's skills (undefined without a home directory). */
  user?: string;
  /** The skills every HTTP principal sees. */
  shared?: string;
  /** Where each HTTP principal's own directory is made. */
  principals: string;
}

/** The name of the folder of older versions in a root. */
export const VERSIONS_DIR = ".versions";

/** The file of a skill's program, by language. */
export const CODE_FILE = { typescript: "skill.ts", python: "skill.py" } as const;

/**
 * Resolves the skills directories of the settings.
 *
 * @param settings The `skills` settings.
 * @param options The working directory (for relative paths) and the environment (for the home).
 * @returns Absolute paths.
 */
export function skillDirs(
  settings: Settings["skills"],
  options: { cwd?: string; env?: Record<string, string | undefined> } = {},
): SkillDirs {
  const cwd = options.cwd ?? Deno.cwd();
  const env = options.env;
  const at = (path: string) => isAbsolute(path) ? path : resolve(cwd, path);
  const config = ownConfigDir(env);
  const user = settings.userDir !== undefined
    ? at(settings.userDir)
    : config !== undefined
    ? join(config, "skills")
    : undefined;
  return {
    project: at(settings.projectDir),
    user,
    shared: settings.sharedDir !== undefined ? at(settings.sharedDir) : user,
    principals: at(settings.principalsDir ?? join(homeDataDir(env), "skills")),
  };
}

/**
 * The directory name of a principal's own skills: a readable prefix and a digest, so that two
 * principals never share one (case-insensitive file systems included) and no principal id can
 * name a path.
 *
 * @param principal The principal's id.
 * @returns A name of letters, digits, `-` and `_`.
 */
export function principalDirName(principal: string): string {
  const readable = principal.toLowerCase().replace(/[^a-z0-9_-]+/g, "-").slice(0, 32);
  return `${readable}-${sha256Hex(principal).slice(0, 16)}`;
}

/** What a path is, without following a symlink. */
export type PathKind = "missing" | "directory" | "file" | "symlink" | "other";

/**
 * Tells what a path is without following it.
 *
 * @param path The path.
 * @returns Its kind.
 */
export async function pathKind(path: string): Promise<PathKind> {
  try {
    const info = await Deno.lstat(path);
    if (info.isSymlink) return "symlink";
    if (info.isDirectory) return "directory";
    if (info.isFile) return "file";
    return "other";
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return "missing";
    throw error;
  }
}

/**
 * The error for a path under a skills root that is a symlink or a special file.
 *
 * @param path The path.
 * @param kind What it is.
 * @returns A `SkillInvalid` error that says what to remove.
 */
export function notPlain(path: string, kind: PathKind): CodeExecutorError {
  const what = kind === "symlink" ? "a symlink" : kind === "directory" ? "a directory" : `${kind}`;
  return new CodeExecutorError(
    "SkillInvalid",
    `Refused ${path}: it is ${what}, and skills are plain files and directories (a symlink could ` +
      "point outside the skills directory); replace it with a copy or remove it",
  );
}

/**
 * Checks that a path is a real directory (not a symlink to one), or missing.
 *
 * @param path The path.
 * @returns Whether it exists.
 * @throws {CodeExecutorError} `SkillInvalid` for a symlink or another kind of file.
 */
export async function realDirOrMissing(path: string): Promise<boolean> {
  const kind = await pathKind(path);
  if (kind === "missing") return false;
  if (kind !== "directory") throw notPlain(path, kind);
  return true;
}

/**
 * Reads a regular file that is not a symlink. The file opened is checked to be the one looked at
 * (device and inode), so that a symlink swapped in between is not followed.
 *
 * @param path The file.
 * @param maxBytes The largest size read.
 * @returns Its bytes.
 * @throws {CodeExecutorError} `SkillInvalid` for a symlink, another kind of file, or one too large.
 * @throws {Deno.errors.NotFound} When it does not exist.
 */
export async function readPlainFile(path: string, maxBytes: number): Promise<Uint8Array> {
  const before = await Deno.lstat(path);
  if (!before.isFile) {
    throw notPlain(path, before.isSymlink ? "symlink" : before.isDirectory ? "directory" : "other");
  }
  if (before.size > maxBytes) {
    throw new CodeExecutorError(
      "SkillInvalid",
      `Refused ${path}: ${before.size} bytes is above ${maxBytes}`,
    );
  }
  const file = await Deno.open(path, { read: true });
  try {
    const opened = await file.stat();
    if (opened.ino !== before.ino || opened.dev !== before.dev || !opened.isFile) {
      throw notPlain(path, "symlink");
    }
    const bytes = new Uint8Array(opened.size);
    let read = 0;
    while (read < bytes.length) {
      const n = await file.read(bytes.subarray(read));
      if (n === null) break;
      read += n;
    }
    return bytes.subarray(0, read);
  } finally {
    file.close();
  }
}

/**
 * Writes a new file that must not exist yet (so nothing planted there is followed).
 *
 * @param path The file.
 * @param text Its contents.
 * @returns Nothing.
 */
export async function writeNewFile(path: string, text: string): Promise<void> {
  const file = await Deno.open(path, { write: true, createNew: true, mode: 0o644 });
  await writeSyncClose(file, text);
}

/**
 * Makes a skills root (and its parents) if missing; the root itself may not be a symlink planted
 * where a real directory was expected, but its parents are the admin's business.
 *
 * @param dir The root.
 * @returns Nothing.
 * @throws {CodeExecutorError} `SkillInvalid` when the root is a symlink or a file.
 */
export async function ensureRoot(dir: string): Promise<void> {
  if (await realDirOrMissing(dir)) return;
  await Deno.mkdir(dir, { recursive: true, mode: 0o755 });
  if (!(await realDirOrMissing(dir))) throw notPlain(dir, "missing");
}

/**
 * Runs `fn` holding an exclusive lock on `<root>/.lock` (`flock`), so that saves and removes of
 * several server processes sharing a root (one stdio server per client) do not interleave. The
 * lock goes with the process if it dies.
 *
 * @param root The skills root (a real directory).
 * @param fn The work.
 * @returns What `fn` returns.
 * @throws {CodeExecutorError} `SkillInvalid` when `.lock` is a symlink or not a file.
 */
export async function withRootLock<T>(root: string, fn: () => Promise<T>): Promise<T> {
  const path = join(root, ".lock");
  const kind = await pathKind(path);
  if (kind !== "missing" && kind !== "file") throw notPlain(path, kind);
  const file = await Deno.open(path, { read: true, write: true, create: true, mode: 0o644 });
  try {
    await file.lock(true);
    return await fn();
  } finally {
    file.close();
  }
}
