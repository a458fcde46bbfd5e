/**
 * Reading the versions of skills from disk: the record type, the strict parse of a version's
 * directory (front matter, directory name, program), and a cache of parsed records keyed on the
 * files' identity and times.
 *
 * @module
 */
import { join } from "node:path";
import { CodeExecutorError } from "../errors.ts";
import { parseSkillMarkdown } from "./front_matter.ts";
import {
  CODE_FILE,
  notPlain,
  readPlainFile,
  realDirOrMissing,
  type SkillRoot,
  type SkillScope,
  VERSIONS_DIR,
} from "./layout.ts";

/** The language of a skill's program. */
export type SkillLanguage = "typescript" | "python";

/** A saved skill, one version of it. */
export interface SkillRecord {
  /** Its name (Agent Skills rules, not reserved). */
  readonly name: string;
  /** 1, 2, … */
  readonly version: number;
  /** Whether this is the latest version. */
  readonly latest: boolean;
  /** What it does and when to use it. */
  readonly description: string;
  /** The language of its program. */
  readonly language: SkillLanguage;
  /** Its input JSON Schema (`type: "object"`). */
  readonly inputSchema: Record<string, unknown>;
  /** The program, as `run_typescript` / `run_python` takes it, with `args` in scope. */
  readonly code: string;
  /** The root it comes from. */
  readonly scope: SkillScope;
  /** The directory its files are in. */
  readonly dir: string;
}

/**
 * The error for a skill or version the caller does not have.
 *
 * @param ref `name` or `name@N`.
 * @returns A `SkillNotFound` error.
 */
export function notFound(ref: string): CodeExecutorError {
  return new CodeExecutorError(
    "SkillNotFound",
    `No skill "${ref}": call skills.list() or search_tools to see the saved ones`,
  );
}

/** The sizes a version's files may have. */
export interface ReadLimits {
  /** The largest program. */
  maxCodeBytes: number;
  /** The largest `SKILL.md`. */
  maxSkillMdBytes: number;
}

/** Reads versions of skills, and remembers the parsed ones. */
export class VersionReader {
  readonly #limits: ReadLimits;
  readonly #cache = new Map<string, { key: string; record: SkillRecord }>();

  /**
   * Creates a reader.
   *
   * @param limits The largest files it reads.
   */
  constructor(limits: ReadLimits) {
    this.#limits = limits;
  }

  /**
   * Whether `<root>/.versions/<name>/` exists, both parts real directories.
   *
   * @param root The root.
   * @param name The skill's name.
   * @returns Whether it exists.
   * @throws {CodeExecutorError} `SkillInvalid` when either is a symlink or a file.
   */
  async versionsDirExists(root: SkillRoot, name: string): Promise<boolean> {
    if (!(await realDirOrMissing(join(root.dir, VERSIONS_DIR)))) return false;
    return await realDirOrMissing(join(root.dir, VERSIONS_DIR, name));
  }

  /**
   * The versions kept in `<root>/.versions/<name>/`, oldest first.
   *
   * @param root The root.
   * @param name The skill's name.
   * @returns The version numbers.
   * @throws {CodeExecutorError} `SkillInvalid` for a symlink among them.
   */
  async olderVersions(root: SkillRoot, name: string): Promise<number[]> {
    if (!(await this.versionsDirExists(root, name))) return [];
    const versions: number[] = [];
    for await (const entry of Deno.readDir(join(root.dir, VERSIONS_DIR, name))) {
      if (/^[1-9]\d{0,8}$/.test(entry.name)) {
        if (entry.isSymlink) {
          throw notPlain(join(root.dir, VERSIONS_DIR, name, entry.name), "symlink");
        }
        versions.push(Number(entry.name));
      }
    }
    return versions.sort((a, b) => a - b);
  }

  /**
   * A version's record, from memory while its files keep their inode, size and times (a refresh
   * of `list` then costs a few `lstat`s per skill instead of reading and parsing it); the symlink
   * checks run every time.
   *
   * @param root The root.
   * @param name The skill's name (validated).
   * @param version The version; the latest (`<root>/<name>/`) when absent.
   * @returns The record.
   * @throws {CodeExecutorError} `SkillNotFound`; `SkillInvalid` for malformed files or a symlink.
   */
  async read(root: SkillRoot, name: string, version?: number): Promise<SkillRecord> {
    const dir = version === undefined
      ? join(root.dir, name)
      : join(root.dir, VERSIONS_DIR, name, String(version));
    if (!(await realDirOrMissing(dir))) throw notFound(version ? `${name}@${version}` : name);
    const before = await this.#fileKey(dir);
    const cached = this.#cache.get(dir);
    if (cached !== undefined && cached.key === before && cached.record.scope === root.scope) {
      return cached.record;
    }
    const record = await this.#parse(root, name, dir, version);
    // Kept only when nothing changed while it was read.
    if (before === await this.#fileKey(dir)) this.#cache.set(dir, { key: before, record });
    return record;
  }

  /** Identity and change time of the files a version can have (`-` for a missing one). */
  async #fileKey(dir: string): Promise<string> {
    const parts = await Promise.all(["SKILL.md", CODE_FILE.typescript, CODE_FILE.python].map(
      async (file) => {
        try {
          const info = await Deno.lstat(join(dir, file));
          return `${info.isFile}:${info.dev}:${info.ino}:${info.size}:${info.mtime?.getTime()}:${info.ctime?.getTime()}`;
        } catch {
          return "-";
        }
      },
    ));
    return parts.join("|");
  }

  async #parse(
    root: SkillRoot,
    name: string,
    dir: string,
    version: number | undefined,
  ): Promise<SkillRecord> {
    const skillMd = join(dir, "SKILL.md");
    const text = await readSkillText(
      skillMd,
      this.#limits.maxSkillMdBytes,
      `Skill ${dir} has no SKILL.md: remove the directory`,
    );
    const meta = parseSkillMarkdown(text, skillMd);
    if (meta.name !== name) {
      throw new CodeExecutorError(
        "SkillInvalid",
        `${skillMd} names "${meta.name}" but its directory is "${name}": the two must be equal`,
      );
    }
    if (version !== undefined && meta.version !== version) {
      throw new CodeExecutorError(
        "SkillInvalid",
        `${skillMd} says version ${meta.version} but its directory is ${version}`,
      );
    }
    const codePath = join(dir, CODE_FILE[meta.language]);
    const code = await readSkillText(
      codePath,
      this.#limits.maxCodeBytes,
      `Skill ${dir} has no ${CODE_FILE[meta.language]}`,
    );
    return { ...meta, code, latest: version === undefined, scope: root.scope, dir };
  }
}

/**
 * Reads one file of a skill's directory as UTF-8.
 *
 * @param path The file.
 * @param maxBytes The most it may hold.
 * @param missing The message when it does not exist.
 * @returns Its text.
 * @throws {CodeExecutorError} `SkillInvalid` when it is missing or not UTF-8; any other error of
 *   reading it as it is.
 */
async function readSkillText(path: string, maxBytes: number, missing: string): Promise<string> {
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(await readPlainFile(path, maxBytes));
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) throw new CodeExecutorError("SkillInvalid", missing);
    if (error instanceof TypeError) {
      throw new CodeExecutorError("SkillInvalid", `${path} is not UTF-8`);
    }
    throw error;
  }
}
