/**
 * The skills roots kept in the shared state store (`state.url`) instead of on disk: with it, an
 * HTTP principal's own skills and the shared ones are the store's (`src/state/skill_docs.ts`,
 * which says why a store and not a shared directory), so that a skill saved through one replica
 * is listed, found and called through every replica. The project's root stays on disk (it ships
 * with each replica), and so does everything stdio sees.
 *
 * A stored version is the same record as a file one: its `SKILL.md` is rendered from its front
 * matter exactly as a save writes it to disk, so hosts get the same files and digests.
 *
 * @module
 */
import { CodeExecutorError } from "../errors.ts";
import { renderSkillMarkdown } from "./front_matter.ts";
import { CODE_FILE, type SkillRoot } from "./layout.ts";
import { notFound, type SkillLanguage, type SkillRecord } from "./records.ts";
import type { ValidSkill } from "./validate.ts";

/** One version in the store (`SkillDoc` of src/state/skill_docs.ts). */
export interface StoredSkillDoc {
  /** Its name. */
  name: string;
  /** Its version. */
  version: number;
  /** What the skill side saved. */
  body: Record<string, unknown>;
  /** A random id of the save. */
  rev: string;
}

/** The shared store's skills (`SkillDocs` of src/state/skill_docs.ts). */
export interface SharedSkillDocs {
  /** A number that changes with every save and removal. */
  generation(): Promise<number>;
  /** The latest version of every name in a scope. */
  latest(scope: string): Promise<StoredSkillDoc[]>;
  /** A name's versions, oldest first. */
  versions(scope: string, name: string): Promise<number[]>;
  /** One version (the latest without `version`). */
  get(scope: string, name: string, version?: number): Promise<StoredSkillDoc | undefined>;
  /** Saves the next version within the caps. */
  save(
    scope: string,
    name: string,
    body: Record<string, unknown>,
    limits: { maxVersions: number; maxNames: number },
  ): Promise<{ version: number } | { refused: "versions" | "names"; count: number }>;
  /** Removes every version; whether there was one. */
  remove(scope: string, name: string): Promise<boolean>;
}

/** The part of a root's records that the store keeps. */
interface Body {
  description: string;
  language: SkillLanguage;
  inputSchema: Record<string, unknown>;
  code: string;
}

/** The skills of the store's roots, as the skills store reads and writes them. */
export class StoredSkills {
  readonly #docs: SharedSkillDocs;
  readonly #limits: { maxVersions: number; maxSkills: number };
  /** The save id of each record read from the store (records are immutable versions). */
  readonly #revs = new WeakMap<SkillRecord, string>();

  /**
   * Binds the store's skills to the caps of the settings.
   *
   * @param docs The shared store's skills.
   * @param limits `skills.maxVersions` and `skills.maxSkills`.
   */
  constructor(docs: SharedSkillDocs, limits: { maxVersions: number; maxSkills: number }) {
    this.#docs = docs;
    this.#limits = limits;
  }

  /** A number that changes with every save and removal through any replica. */
  generation(): Promise<number> {
    return this.#docs.generation();
  }

  #record(root: SkillRoot, doc: StoredSkillDoc, latest: boolean): SkillRecord {
    const body = doc.body as unknown as Body;
    const record: SkillRecord = {
      name: doc.name,
      version: doc.version,
      latest,
      description: body.description,
      language: body.language,
      inputSchema: body.inputSchema,
      code: body.code,
      scope: root.scope,
      dir: `${root.dir}/${doc.name}`,
    };
    this.#revs.set(record, doc.rev);
    return record;
  }

  /**
   * The latest version of every name in a root.
   *
   * @param root A stored root.
   * @returns Its records.
   */
  async latest(root: SkillRoot): Promise<SkillRecord[]> {
    return (await this.#docs.latest(root.stored!)).map((doc) => this.#record(root, doc, true));
  }

  /**
   * Whether a root has a name.
   *
   * @param root A stored root.
   * @param name The name.
   * @returns True when it has a version of it.
   */
  async has(root: SkillRoot, name: string): Promise<boolean> {
    return (await this.#docs.versions(root.stored!, name)).length > 0;
  }

  /**
   * One version of a name, the latest without `version`.
   *
   * @param root A stored root.
   * @param name The name.
   * @param ref The reference, for the error.
   * @param version The version.
   * @returns The record.
   * @throws {CodeExecutorError} `SkillNotFound`.
   */
  async get(root: SkillRoot, name: string, ref: string, version?: number): Promise<SkillRecord> {
    const versions = await this.#docs.versions(root.stored!, name);
    const latest = versions.at(-1);
    const doc = latest === undefined
      ? undefined
      : await this.#docs.get(root.stored!, name, version ?? latest);
    if (doc === undefined) throw notFound(ref);
    return this.#record(root, doc, doc.version === latest);
  }

  /**
   * Every version of a name, oldest first.
   *
   * @param root A stored root.
   * @param name The name.
   * @returns The records.
   */
  async versions(root: SkillRoot, name: string): Promise<SkillRecord[]> {
    const versions = await this.#docs.versions(root.stored!, name);
    const latest = versions.at(-1);
    const docs = await Promise.all(versions.map((v) => this.#docs.get(root.stored!, name, v)));
    return docs.filter((doc): doc is StoredSkillDoc => doc !== undefined)
      .map((doc) => this.#record(root, doc, doc.version === latest));
  }

  /**
   * Saves the next version of a skill, within `skills.maxVersions` and `skills.maxSkills`.
   *
   * @param root A stored root.
   * @param input The validated skill.
   * @returns The saved record.
   * @throws {CodeExecutorError} `SkillInvalid` at a cap; `StateUnavailable`.
   */
  async save(root: SkillRoot, input: ValidSkill): Promise<SkillRecord> {
    const { name, description, language, inputSchema, code } = input;
    const body: Body = { description, language, inputSchema, code };
    const saved = await this.#docs.save(root.stored!, name, { ...body }, {
      maxVersions: this.#limits.maxVersions,
      maxNames: this.#limits.maxSkills,
    });
    if ("refused" in saved) {
      throw new CodeExecutorError(
        "SkillInvalid",
        saved.refused === "versions"
          ? `Skill "${name}" has ${saved.count} versions, the most skills.maxVersions allows: remove it or save under another name`
          : `${root.dir} holds skills.maxSkills (${this.#limits.maxSkills}) skills: remove some first`,
      );
    }
    const doc = await this.#docs.get(root.stored!, name, saved.version);
    if (doc === undefined) throw notFound(`${name}@${saved.version}`);
    return this.#record(root, doc, true);
  }

  /**
   * Removes every version of a name.
   *
   * @param root A stored root.
   * @param name The name.
   * @throws {CodeExecutorError} `SkillNotFound` when the root has no such name.
   */
  async remove(root: SkillRoot, name: string): Promise<void> {
    if (!await this.#docs.remove(root.stored!, name)) throw notFound(name);
  }

  /**
   * The files of a stored version, as a save writes them to disk.
   *
   * @param record A record this class returned.
   * @returns File name to bytes.
   */
  files(record: SkillRecord): Record<string, Uint8Array> {
    const encoder = new TextEncoder();
    const { name, description, language, version, inputSchema } = record;
    return {
      "SKILL.md": encoder.encode(
        renderSkillMarkdown({ name, description, language, version, inputSchema }),
      ),
      [CODE_FILE[language]]: encoder.encode(record.code),
    };
  }

  /**
   * What identifies a stored version's files (a save's id), or undefined for a record read from
   * disk.
   *
   * @param record A record.
   * @returns The id.
   */
  fingerprint(record: SkillRecord): string | undefined {
    return this.#revs.get(record);
  }
}
