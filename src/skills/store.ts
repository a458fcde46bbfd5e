/**
 * The skills store: saved programs as plain files under the skills roots, with versions. It
 * validates everything it writes (name, sizes, schema, front matter) and refuses any symlink under
 * a root, so that nothing is read or written outside the skills directories.
 *
 * Roots by caller (earlier wins on a name clash):
 * - stdio, or HTTP without authentication (principal `local` or none): project, then user.
 * - an HTTP principal: its own directory, then project, then shared. Its saves go to its own
 *   directory; an admin's (`skills.admins`) go to the shared one. With the shared state store
 *   (`state.url`), its own and the shared ones are the store's (`stored.ts`), so that every
 *   replica sees them.
 *
 * @module
 */
import { join } from "node:path";
import { CodeExecutorError } from "../errors.ts";
import type { Logger } from "../log.ts";
import type { Settings } from "../config/settings.ts";
import { LOCAL_PRINCIPAL, principalName } from "../principals.ts";
import { renderSkillMarkdown } from "./front_matter.ts";
import {
  CODE_FILE,
  ensureRoot,
  notPlain,
  pathKind,
  principalDirName,
  readPlainFile,
  realDirOrMissing,
  type SkillDirs,
  skillDirs,
  type SkillRoot,
  VERSIONS_DIR,
  withRootLock,
  writeNewFile,
} from "./layout.ts";
import { notFound, type SkillLanguage, type SkillRecord, VersionReader } from "./records.ts";
import { type SharedSkillDocs, StoredSkills } from "./stored.ts";
import {
  parseSkillRef,
  SKILL_NAME_PATTERN,
  validateSaveInput,
  validateSkillName,
  type ValidSkill,
} from "./validate.ts";

export type { SkillRoot, SkillScope } from "./layout.ts";
export type { SkillLanguage, SkillRecord } from "./records.ts";
export type { SharedSkillDocs, StoredSkillDoc } from "./stored.ts";

/** What a save gives. */
export interface SaveSkillInput {
  /** The name. */
  name: string;
  /** What it does and when to use it. */
  description: string;
  /** The language of the program. */
  language: SkillLanguage;
  /** The input JSON Schema; any object when absent. */
  inputSchema?: Record<string, unknown>;
  /** The program. */
  code: string;
}

/** Options of {@linkcode SkillStore.save}. */
export interface SaveOptions {
  /** The admin saves (the CLI's `skills import`): allowed when `skills.save` is `admin`. */
  admin?: boolean;
}

/** Options of {@linkcode SkillStore}. */
export interface SkillStoreOptions {
  /** The working directory, for the project root; the process's by default. */
  cwd?: string;
  /** The environment, for the home directory; the process's by default. */
  env?: Record<string, string | undefined>;
  /** Where problems with a stored skill are reported. */
  log?: Logger;
  /**
   * How long `list` answers from memory before it looks at the roots again (behind the answer: the
   * next call sees the result). 0 reads them on every call. Default 1000 ms.
   */
  listCacheMs?: number;
  /**
   * With `privacy.tokenize`: the category of personal data a text holds, if any. A skill's files
   * reach clients as they are (their digests are served with them), so a save holding personal
   * data is refused, and a stored skill that holds some (written by hand, or before tokenization
   * was on) is left out of every list and not found.
   */
  personalData?: (text: string) => string | undefined;
  /**
   * The shared state store's skills (`state.url`): HTTP principals' own skills and the shared ones
   * are kept there rather than on this machine's disk.
   */
  shared?: SharedSkillDocs;
}

/**
 * Saved skills under the roots of the `skills.*` settings.
 *
 * @example
 * ```ts
 * const store = new SkillStore(settings.skills);
 * await store.save({ name: "add", description: "Adds", language: "typescript", code: "return args.a + args.b" });
 * const add = await store.get("add@1");
 * ```
 */
export class SkillStore {
  readonly #settings: Settings["skills"];
  readonly #dirs: SkillDirs;
  readonly #log?: Logger;
  readonly #listCacheMs: number;
  #queue: Promise<unknown> = Promise.resolve();
  #listCache = new Map<
    string,
    { at: number; records: Promise<SkillRecord[]>; refreshing?: boolean }
  >();
  readonly #reader: VersionReader;
  readonly #personalData?: (text: string) => string | undefined;
  /** Records already checked for personal data, by identity (records are cached and reused). */
  readonly #checked = new WeakMap<SkillRecord, string | undefined>();
  readonly #stored: StoredSkills | undefined;
  /** The store's generation each principal's cached list was read at. */
  readonly #listedAt = new Map<string, number>();

  /**
   * Creates a store over the settings' directories (nothing is read or made until used).
   *
   * @param settings The `skills` settings.
   * @param options Working directory, environment, logger.
   */
  constructor(settings: Settings["skills"], options: SkillStoreOptions = {}) {
    this.#settings = settings;
    this.#dirs = skillDirs(settings, options);
    this.#log = options.log;
    this.#listCacheMs = options.listCacheMs ?? 1_000;
    this.#personalData = options.personalData;
    this.#reader = new VersionReader({
      maxCodeBytes: settings.maxCodeBytes,
      maxSkillMdBytes: this.#skillMdMax(),
    });
    this.#stored = options.shared && new StoredSkills(options.shared, settings);
  }

  /** Where problems with a stored skill are reported. */
  get log(): Logger | undefined {
    return this.#log;
  }

  /** The resolved directories. */
  get dirs(): Readonly<SkillDirs> {
    return this.#dirs;
  }

  /**
   * The roots a caller sees, the one that wins on a name clash first.
   *
   * @param principal The HTTP principal; none (or `local`) on stdio.
   * @returns The roots.
   */
  roots(principal?: string): SkillRoot[] {
    const dirs = this.#dirs;
    if (principal === undefined || principal === LOCAL_PRINCIPAL) {
      const roots: SkillRoot[] = [{ scope: "project", dir: dirs.project }];
      if (dirs.user !== undefined) roots.push({ scope: "user", dir: dirs.user });
      return roots;
    }
    if (this.#stored) {
      return [
        { scope: "principal", dir: "state:principal", stored: `principal:${principal}` },
        { scope: "project", dir: dirs.project },
        { scope: "shared", dir: "state:shared", stored: "shared" },
      ];
    }
    const roots: SkillRoot[] = [
      // Named after the name the admin knows (`alice` of `http:alice`), as before principals had
      // namespaces, so that a principal's saved skills stay where they were.
      {
        scope: "principal",
        dir: join(dirs.principals, principalDirName(principalName(principal))),
      },
      { scope: "project", dir: dirs.project },
    ];
    if (dirs.shared !== undefined) roots.push({ scope: "shared", dir: dirs.shared });
    return roots;
  }

  /**
   * Tells whether a caller may save (`skills.save`).
   *
   * @param principal The HTTP principal; none (or `local`) on stdio.
   * @param options Whether the admin saves.
   * @returns Whether a save is allowed.
   */
  canSave(principal?: string, options: SaveOptions = {}): boolean {
    const mode = this.#settings.save;
    if (mode === "off") return false;
    if (mode === "on" || options.admin) return true;
    return this.#isAdmin(principal);
  }

  /**
   * Whether `skills.admins` names an HTTP principal: by its name (`alice` for `http:alice`) or in
   * full. The local principal is never one (stdio saves by `skills.save` alone).
   */
  #isAdmin(principal: string | undefined): boolean {
    if (principal === undefined || principal === LOCAL_PRINCIPAL) return false;
    const admins = this.#settings.admins;
    return admins.includes(principal) || admins.includes(principalName(principal));
  }

  /**
   * The latest version of every name a caller sees, sorted by name. A stored skill that cannot be
   * read (bad front matter, a symlink) is left out and logged.
   *
   * @param principal The HTTP principal; none on stdio.
   * @returns The records.
   */
  list(principal?: string): Promise<SkillRecord[]> {
    const key = principal ?? LOCAL_PRINCIPAL;
    if (this.#stored && key !== LOCAL_PRINCIPAL) return this.#listShared(key);
    const cached = this.#listCache.get(key);
    if (cached !== undefined && this.#listCacheMs > 0) {
      // Older than listCacheMs: answer from memory and look at the disk again behind it, so that
      // no search waits for the directories (a save through this store clears the cache).
      if (Date.now() - cached.at >= this.#listCacheMs && !cached.refreshing) {
        cached.refreshing = true;
        const records = this.#readAll(principal);
        records.then(
          () => this.#listCache.set(key, { at: Date.now(), records }),
          () => this.#listCache.delete(key),
        );
      }
      return cached.records;
    }
    const records = this.#readAll(principal);
    this.#listCache.set(key, { at: Date.now(), records });
    records.catch(() => this.#listCache.delete(key));
    return records;
  }

  /**
   * A list that holds stored roots: answered from memory while the store's generation is the one
   * it was read at (one round trip), so that a save through another replica is seen at once.
   */
  async #listShared(principal: string): Promise<SkillRecord[]> {
    const generation = await this.#stored!.generation();
    const cached = this.#listCache.get(principal);
    if (
      cached !== undefined && this.#listedAt.get(principal) === generation &&
      Date.now() - cached.at < this.#listCacheMs
    ) {
      return cached.records;
    }
    const records = this.#readAll(principal);
    this.#listCache.set(principal, { at: Date.now(), records });
    this.#listedAt.set(principal, generation);
    records.catch(() => this.#listCache.delete(principal));
    return await records;
  }

  /** The category of personal data a record's files hold (`privacy.tokenize`), if any. */
  #heldPersonalData(record: SkillRecord): string | undefined {
    const find = this.#personalData;
    if (find === undefined) return undefined;
    if (this.#checked.has(record)) return this.#checked.get(record);
    const found = find(
      [record.name, record.description, JSON.stringify(record.inputSchema), record.code].join("\n"),
    );
    this.#checked.set(record, found);
    return found;
  }

  /** The record, or not found when it holds personal data that must not reach a client. */
  #servable(record: SkillRecord, ref: string): SkillRecord {
    if (this.#heldPersonalData(record) !== undefined) throw notFound(ref);
    return record;
  }

  async #readAll(principal?: string): Promise<SkillRecord[]> {
    const seen = new Set<string>();
    const records: SkillRecord[] = [];
    for (const root of this.roots(principal)) {
      let read: Array<SkillRecord | undefined>;
      if (root.stored) {
        read = (await this.#stored!.latest(root)).filter((record) => !seen.has(record.name));
        for (const record of read) seen.add(record!.name);
      } else {
        if (!(await this.#rootExists(root))) continue;
        const names: string[] = [];
        for await (const entry of Deno.readDir(root.dir)) {
          if (SKILL_NAME_PATTERN.test(entry.name) && !seen.has(entry.name)) {
            names.push(entry.name);
          }
        }
        for (const name of names) seen.add(name);
        // In parallel: the file system's thread pool reads many small files faster than one by
        // one.
        read = await Promise.all(
          names.map((name) =>
            this.#reader.read(root, name).catch((error) => {
              this.#log?.warn(
                `Skipped skill ${join(root.dir, name)}: ${(error as Error).message}`,
              );
              return undefined;
            })
          ),
        );
      }
      for (const record of read) {
        if (record === undefined) continue;
        const found = this.#heldPersonalData(record);
        if (found !== undefined) {
          this.#log?.warn(
            `Skipped skill ${record.dir}: it holds personal data (${found}) and privacy.tokenize is on; edit it or remove it`,
          );
          continue;
        }
        records.push(record);
      }
    }
    return records.sort((a, b) => a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
  }

  /**
   * One skill: `name` (the latest version) or `name@N`.
   *
   * @param ref The reference.
   * @param principal The HTTP principal; none on stdio.
   * @returns The record.
   * @throws {CodeExecutorError} `SkillNotFound`; `SkillInvalid` for a bad reference or a stored
   *   skill that cannot be read.
   */
  async get(ref: string, principal?: string): Promise<SkillRecord> {
    const { name, version } = parseSkillRef(ref);
    const root = await this.#rootOf(name, principal);
    if (root === undefined) throw notFound(ref);
    if (root.stored) return this.#servable(await this.#stored!.get(root, name, ref, version), ref);
    const latest = await this.#reader.read(root, name);
    if (version === undefined || version === latest.version) return this.#servable(latest, ref);
    const dir = join(root.dir, VERSIONS_DIR, name, String(version));
    await this.#reader.versionsDirExists(root, name);
    if (!(await realDirOrMissing(dir))) throw notFound(ref);
    return this.#servable(await this.#reader.read(root, name, version), ref);
  }

  /**
   * Every version of a skill, oldest first, from the root where the caller sees it.
   *
   * @param name The name.
   * @param principal The HTTP principal; none on stdio.
   * @returns The records.
   * @throws {CodeExecutorError} `SkillNotFound`, `SkillInvalid`.
   */
  async versions(name: string, principal?: string): Promise<SkillRecord[]> {
    validateSkillName(name);
    const root = await this.#rootOf(name, principal);
    if (root === undefined) throw notFound(name);
    if (root.stored) return await this.#stored!.versions(root, name);
    const latest = await this.#reader.read(root, name);
    const older = await this.#reader.olderVersions(root, name);
    const records: SkillRecord[] = [];
    for (const version of older) {
      if (version < latest.version) records.push(await this.#reader.read(root, name, version));
    }
    records.push(latest);
    return records;
  }

  /**
   * Saves a skill: validated, then written as a new directory and renamed into place. A name that
   * exists in the target root becomes version N+1, and the old version moves to `.versions/`.
   *
   * @param input The skill.
   * @param principal The HTTP principal; none on stdio.
   * @param options Whether the admin saves (the CLI).
   * @returns The saved record.
   * @throws {CodeExecutorError} `SkillSaveDisabled`; `SkillInvalid` naming what to change.
   */
  save(input: SaveSkillInput, principal?: string, options: SaveOptions = {}): Promise<SkillRecord> {
    const run = this.#queue.then(() => this.#save(input, principal, options));
    this.#queue = run.catch(() => {});
    return run;
  }

  async #save(input: SaveSkillInput, principal: string | undefined, options: SaveOptions) {
    if (!this.canSave(principal, options)) {
      throw new CodeExecutorError(
        "SkillSaveDisabled",
        `Saving skills is ${this.#settings.save === "off" ? "turned off" : "for the admin only"} ` +
          `(skills.save is "${this.#settings.save}"): run the program with run_typescript or ` +
          "run_python instead, or ask the admin",
      );
    }
    const valid = validateSaveInput(input, this.#settings);
    const held = this.#personalData?.(
      [valid.name, valid.description, JSON.stringify(valid.inputSchema), valid.code].join("\n"),
    );
    if (held !== undefined) {
      throw new CodeExecutorError(
        "SkillInvalid",
        `Cannot save skill "${valid.name}": it holds personal data (${held}), and with privacy.tokenize a skill's files reach clients as they are; use placeholders (<${held}_1>) in its code, or take the value from its arguments`,
      );
    }
    const name = valid.name;
    const root = await this.#saveRoot(name, principal);
    if (root.stored) {
      try {
        return await this.#stored!.save(root, valid);
      } finally {
        this.#listCache.clear();
      }
    }
    await this.#ensureRootReal(root);
    return await withRootLock(root.dir, () => this.#write(root, valid));
  }

  async #write(root: SkillRoot, input: ValidSkill): Promise<SkillRecord> {
    const { name, description, code, inputSchema } = input;
    await this.#removeStaleTemps(root);
    const current = join(root.dir, name);
    const exists = await realDirOrMissing(current);
    let previous: SkillRecord | undefined;
    let older: number[] = [];
    if (exists) {
      previous = await this.#reader.read(root, name);
      older = await this.#reader.olderVersions(root, name);
      if (older.length + 1 >= this.#settings.maxVersions) {
        throw new CodeExecutorError(
          "SkillInvalid",
          `Skill "${name}" has ${older.length + 1} versions, the most skills.maxVersions allows: ` +
            `remove it (code-executor skills rm ${name}) or save under another name`,
        );
      }
    } else if ((await this.#countNames(root)) >= this.#settings.maxSkills) {
      throw new CodeExecutorError(
        "SkillInvalid",
        `${root.dir} holds skills.maxSkills (${this.#settings.maxSkills}) skills: remove some first`,
      );
    }
    const version = Math.max(previous?.version ?? 0, ...older) + 1;
    const meta = { name, description, language: input.language, version, inputSchema };
    const temp = join(root.dir, `.tmp-${crypto.randomUUID()}`);
    await Deno.mkdir(temp, { mode: 0o755 });
    try {
      await writeNewFile(join(temp, "SKILL.md"), renderSkillMarkdown(meta));
      await writeNewFile(join(temp, CODE_FILE[input.language]), code);
      if (previous !== undefined) await this.#retire(root, name, previous.version);
      await Deno.rename(temp, current);
    } catch (error) {
      await Deno.remove(temp, { recursive: true }).catch(() => {});
      throw error;
    } finally {
      this.#listCache.clear();
    }
    return { ...meta, code, latest: true, scope: root.scope, dir: current };
  }

  /**
   * Removes a skill, every version, from the root where the caller sees it (an HTTP principal:
   * only from its own directory, or the shared one for an admin).
   *
   * @param name The name.
   * @param principal The HTTP principal; none on stdio.
   * @returns Nothing.
   * @throws {CodeExecutorError} `SkillNotFound`, `SkillInvalid`.
   */
  remove(name: string, principal?: string): Promise<void> {
    const run = this.#queue.then(() => this.#remove(name, principal));
    this.#queue = run.catch(() => {});
    return run;
  }

  async #remove(name: string, principal?: string): Promise<void> {
    validateSkillName(name);
    const writable = this.#writableRoots(principal);
    const root = await this.#rootOf(name, principal);
    if (root === undefined || !writable.some((r) => r.dir === root.dir)) throw notFound(name);
    if (root.stored) {
      try {
        return await this.#stored!.remove(root, name);
      } finally {
        this.#listCache.clear();
      }
    }
    await this.#reader.versionsDirExists(root, name);
    const kind = await pathKind(join(root.dir, name));
    if (kind !== "directory" && kind !== "missing") throw notPlain(join(root.dir, name), kind);
    await withRootLock(root.dir, () => this.#removeFiles(root, name));
  }

  async #removeFiles(root: SkillRoot, name: string): Promise<void> {
    try {
      await Deno.remove(join(root.dir, name), { recursive: true }).catch((error) => {
        if (!(error instanceof Deno.errors.NotFound)) throw error;
      });
      await Deno.remove(join(root.dir, VERSIONS_DIR, name), { recursive: true }).catch((error) => {
        if (!(error instanceof Deno.errors.NotFound)) throw error;
      });
    } finally {
      this.#listCache.clear();
    }
  }

  /**
   * The files of one version as they are on disk, for serving them: `SKILL.md` and the program.
   *
   * @param record A record this store returned.
   * @returns File name to bytes.
   * @throws {CodeExecutorError} `SkillInvalid` when a file became a symlink.
   */
  async files(record: SkillRecord): Promise<Record<string, Uint8Array>> {
    if (this.#stored?.fingerprint(record) !== undefined) return this.#stored.files(record);
    const code = CODE_FILE[record.language];
    return {
      "SKILL.md": await readPlainFile(join(record.dir, "SKILL.md"), this.#skillMdMax()),
      [code]: await readPlainFile(join(record.dir, code), this.#settings.maxCodeBytes),
    };
  }

  /**
   * What changes whenever a version's files do, for caching what is built from them: the files'
   * inode, size and modification time, or the save's id for a version in the shared store.
   *
   * @param record A record this store returned.
   * @returns The key.
   */
  async fingerprint(record: SkillRecord): Promise<string> {
    const stored = this.#stored?.fingerprint(record);
    if (stored !== undefined) return `state:${stored}`;
    const parts: string[] = [];
    for (const name of ["SKILL.md", CODE_FILE[record.language]]) {
      const info = await Deno.lstat(join(record.dir, name));
      parts.push(`${info.ino}:${info.size}:${info.mtime?.getTime()}`);
    }
    return parts.join("|");
  }

  #skillMdMax(): number {
    return this.#settings.maxSchemaBytes * 3 + 64 * 1024;
  }

  #writableRoots(principal?: string): SkillRoot[] {
    const roots = this.roots(principal);
    if (principal === undefined || principal === LOCAL_PRINCIPAL) return roots;
    const own = roots.filter((root) => root.scope === "principal");
    const shared = roots.filter((root) => root.scope === "shared");
    return this.#isAdmin(principal) ? [...own, ...shared] : own;
  }

  async #saveRoot(name: string, principal?: string): Promise<SkillRoot> {
    const roots = this.roots(principal);
    if (principal === undefined || principal === LOCAL_PRINCIPAL) {
      const existing = await this.#rootOf(name, principal);
      if (existing !== undefined) return existing;
      return roots.find((root) => root.scope === this.#settings.saveTo) ?? roots[0];
    }
    if (this.#isAdmin(principal)) {
      const shared = roots.find((root) => root.scope === "shared");
      if (shared !== undefined) return shared;
    }
    return roots[0];
  }

  async #rootExists(root: SkillRoot): Promise<boolean> {
    try {
      return await realDirOrMissing(root.dir);
    } catch (error) {
      this.#log?.warn((error as Error).message);
      return false;
    }
  }

  async #ensureRootReal(root: SkillRoot): Promise<void> {
    await ensureRoot(root.dir);
  }

  async #rootOf(name: string, principal?: string): Promise<SkillRoot | undefined> {
    for (const root of this.roots(principal)) {
      if (root.stored) {
        if (await this.#stored!.has(root, name)) return root;
        continue;
      }
      const kind = await pathKind(join(root.dir, name));
      if (kind !== "missing") {
        if (kind !== "directory") throw notPlain(join(root.dir, name), kind);
        if (!(await realDirOrMissing(root.dir))) continue;
        return root;
      }
    }
    return undefined;
  }

  async #retire(root: SkillRoot, name: string, version: number): Promise<void> {
    const versions = join(root.dir, VERSIONS_DIR);
    if (!(await realDirOrMissing(versions))) await Deno.mkdir(versions, { mode: 0o755 });
    const mine = join(versions, name);
    if (!(await realDirOrMissing(mine))) await Deno.mkdir(mine, { mode: 0o755 });
    const target = join(mine, String(version));
    const kind = await pathKind(target);
    if (kind !== "missing") {
      throw new CodeExecutorError(
        "SkillInvalid",
        `Cannot keep version ${version} of "${name}": ${target} already exists; remove it`,
      );
    }
    await Deno.rename(join(root.dir, name), target);
  }

  /** Under the root's lock no save is under way: a `.tmp-*` left is a dead process's. */
  async #removeStaleTemps(root: SkillRoot): Promise<void> {
    for await (const entry of Deno.readDir(root.dir)) {
      if (!entry.name.startsWith(".tmp-")) continue;
      // Deno.remove takes a symlink itself away, never what it points to.
      await Deno.remove(join(root.dir, entry.name), { recursive: !entry.isSymlink }).catch(
        () => {},
      );
    }
  }

  async #countNames(root: SkillRoot): Promise<number> {
    let count = 0;
    for await (const entry of Deno.readDir(root.dir)) {
      if (SKILL_NAME_PATTERN.test(entry.name)) count++;
    }
    return count;
  }
}
