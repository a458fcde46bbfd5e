/**
 * Saved skills in a {@linkcode StateStore} (`state.url`), so that a skill saved through one
 * replica is listed, found and called through every replica: the HTTP principals' own skills and
 * the shared ones (`src/skills/store.ts` keeps the project's on disk, which ships with each
 * replica, and stdio's).
 *
 * Why the store and not a shared directory: replicas need not share a disk (each container has
 * its own), and the lock that makes a save safe on one machine (`flock` on the root's `.lock`)
 * does not hold across machines on the file systems a shared directory would be (NFS locks are
 * advisory and need lockd on every client; object-store mounts have none). Here a save or removal
 * in a scope holds a lease (`leaseTake` with `max: 1`), which a replica that dies mid-save gives
 * up when it expires, so that two replicas never number two versions alike.
 *
 * Nothing here expires: skills live as long as the store keeps its data, so a store whose skills
 * must outlive a restart needs persistence (Redis `appendonly yes`); one restarted without it has
 * lost them (`SkillNotFound`).
 *
 * In the store, per scope (a keyed HMAC of `principal:<principal>` or `shared`), each name a keyed
 * HMAC: `i` the names by latest version, `v:<name>` the versions of a name, `r:<name>:<version>`
 * one version sealed (its name, description, language, schema and code, and a random `rev`),
 * `lock` the lease; and `ce:s:gen`, a counter each save and removal adds one to, so that a
 * replica checks its cached list with one round trip.
 *
 * @module
 */
import type { StateKeys } from "./keys.ts";
import { type StateStore, stateUnavailable } from "./store.ts";

/** How long a save's lease lives; a save takes a few round trips. */
const LOCK_MS = 10_000;
const GENERATION = "ce:s:gen";

/** One version of a skill, as the store keeps it. */
export interface SkillDoc {
  /** Its name. */
  name: string;
  /** 1, 2, … */
  version: number;
  /** What the skills side saved (description, language, schema, code). */
  body: Record<string, unknown>;
  /** A random id of this save: a name removed and saved again starts at version 1 anew. */
  rev: string;
}

/** The caps of one scope (`skills.maxVersions`, `skills.maxSkills`). */
export interface SkillDocLimits {
  /** Versions one name may have. */
  maxVersions: number;
  /** Names one scope may hold. */
  maxNames: number;
}

/** What a save did: the version saved, or which cap refused it and what the scope holds. */
export type SkillDocSave =
  | { version: number }
  | { refused: "versions" | "names"; count: number };

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Skills of every principal and the shared ones, in the store. */
export class SkillDocs {
  readonly #store: StateStore;
  readonly #keys: StateKeys;

  /**
   * Binds the skills to a store.
   *
   * @param store Where they are kept.
   * @param keys The keys that seal and name them.
   */
  constructor(store: StateStore, keys: StateKeys) {
    this.#store = store;
    this.#keys = keys;
  }

  async #names(scope: string, name?: string) {
    const prefix = `ce:s:${await this.#keys.index("skills", scope)}:`;
    const of = name === undefined ? "" : await this.#keys.index("skill", scope, name);
    return {
      of,
      index: `${prefix}i`,
      versions: `${prefix}v:${of}`,
      record: (n: string, version: number) => `${prefix}r:${n}:${version}`,
      lock: `${prefix}lock`,
    };
  }

  async #open(key: string, sealed: Uint8Array | undefined): Promise<SkillDoc | undefined> {
    const plain = sealed && await this.#keys.open(sealed, key);
    return plain ? JSON.parse(decoder.decode(plain)) as SkillDoc : undefined;
  }

  /**
   * A number that changes with every save and removal, in any scope.
   *
   * @returns The counter (0 for a new or restarted store).
   */
  generation(): Promise<number> {
    return this.#store.counter(GENERATION);
  }

  /**
   * The latest version of every name in a scope.
   *
   * @param scope `principal:<principal>` or `shared`.
   * @returns The versions, in no particular order.
   */
  async latest(scope: string): Promise<SkillDoc[]> {
    const names = await this.#names(scope);
    const latest = await this.#store.sortedRange(names.index, -Infinity, Infinity);
    const keys = latest.map(([name, version]) => names.record(name, version));
    const sealed = await this.#store.get(keys);
    const docs = await Promise.all(sealed.map((blob, i) => this.#open(keys[i], blob)));
    return docs.filter((doc): doc is SkillDoc => doc !== undefined);
  }

  /**
   * The versions of a name.
   *
   * @param scope The scope.
   * @param name The skill's name.
   * @returns Its version numbers, oldest first; none when the scope has no such name.
   */
  async versions(scope: string, name: string): Promise<number[]> {
    const names = await this.#names(scope, name);
    return (await this.#store.sortedRange(names.versions, -Infinity, Infinity)).map(([, v]) => v);
  }

  /**
   * One version of a name.
   *
   * @param scope The scope.
   * @param name The skill's name.
   * @param version The version; the latest when absent.
   * @returns It, or undefined when the scope has no such name or version.
   */
  async get(scope: string, name: string, version?: number): Promise<SkillDoc | undefined> {
    const names = await this.#names(scope, name);
    const wanted = version ?? (await this.versions(scope, name)).at(-1);
    if (wanted === undefined) return undefined;
    const key = names.record(names.of, wanted);
    return await this.#open(key, (await this.#store.get([key]))[0]);
  }

  /**
   * Saves the next version of a name, within the scope's caps.
   *
   * @param scope The scope.
   * @param name The skill's name.
   * @param body What to keep of it.
   * @param limits The caps.
   * @returns The version saved, or the cap that refused it.
   * @throws {CodeExecutorError} `StateUnavailable` when the store cannot be used.
   */
  async save(
    scope: string,
    name: string,
    body: Record<string, unknown>,
    limits: SkillDocLimits,
  ): Promise<SkillDocSave> {
    const names = await this.#names(scope, name);
    return await this.#locked(names.lock, async () => {
      const versions = await this.versions(scope, name);
      if (versions.length >= limits.maxVersions) {
        return { refused: "versions", count: versions.length };
      }
      if (versions.length === 0) {
        const held = (await this.#store.sortedRange(names.index, -Infinity, Infinity)).length;
        if (held >= limits.maxNames) return { refused: "names", count: held };
      }
      const version = Math.max(0, ...versions) + 1;
      const key = names.record(names.of, version);
      const doc: SkillDoc = { name, version, body, rev: crypto.randomUUID() };
      await this.#store.set(
        key,
        await this.#keys.seal(encoder.encode(JSON.stringify(doc)), key),
        { ttlMs: Infinity },
      );
      await this.#store.sortedAdd(names.versions, [[String(version), version]]);
      await this.#store.sortedAdd(names.index, [[names.of, version]]);
      await this.#store.increment(GENERATION);
      return { version };
    });
  }

  /**
   * Removes every version of a name.
   *
   * @param scope The scope.
   * @param name The skill's name.
   * @returns Whether the scope had it.
   */
  async remove(scope: string, name: string): Promise<boolean> {
    const names = await this.#names(scope, name);
    return await this.#locked(names.lock, async () => {
      const versions = await this.versions(scope, name);
      if (versions.length === 0) return false;
      await this.#store.delete([
        ...versions.map((version) => names.record(names.of, version)),
        names.versions,
      ]);
      await this.#store.sortedRemove(names.index, [names.of]);
      await this.#store.increment(GENERATION);
      return true;
    });
  }

  /** Runs `fn` holding the scope's lease, waiting for a save on another replica to end. */
  async #locked<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const holder = crypto.randomUUID();
    // A holder that died gives the lease up after LOCK_MS: waiting a little longer always ends.
    const deadline = Date.now() + LOCK_MS + 2_000;
    for (let pause = 5;; pause = Math.min(pause * 2, 100)) {
      if (await this.#store.leaseTake(key, { holder, max: 1, ttlMs: LOCK_MS })) break;
      if (Date.now() > deadline) {
        throw stateUnavailable(
          this.#store.where,
          `did not give up the lease of a skills save within ${LOCK_MS + 2_000} ms`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, pause));
    }
    try {
      return await fn();
    } finally {
      await this.#store.leaseDrop(key, holder).catch(() => {});
    }
  }
}
