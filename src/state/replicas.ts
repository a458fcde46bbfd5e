/**
 * Which replicas are alive and where they are (`ReplicaRegistry`), and which replica holds a
 * piece of live state (`OwnerMap`): a parked 2026-07-28 run, a Python session, a 2025-era HTTP
 * session. Live state stays in its replica's children; a request that needs it on another replica
 * is forwarded to the owner's internal address (`forward.ts`).
 *
 * A replica's record lives `ttlMs` after its last heartbeat, so a dead one drops out by itself;
 * an owner entry names the replica and is bound to the principal (its key is an HMAC of kind,
 * principal and id), so another principal's id finds nothing. Values are sealed like every record.
 *
 * @module
 */
import type { StateKeys } from "./keys.ts";
import type { StateStore } from "./store.ts";

/** A replica as the registry knows it. */
export interface ReplicaInfo {
  /** `http.replicaId`. */
  id: string;
  /** Where the other replicas reach it (`http://10.0.0.5:3334`). */
  address: string;
  /** When it first registered (ms since the epoch). */
  startedAt: number;
  /** Its last heartbeat (ms since the epoch). */
  seenAt: number;
}

/** Options of {@linkcode ReplicaRegistry.start}. */
export interface HeartbeatOptions {
  /** This replica's id. */
  id: string;
  /** This replica's internal address. */
  address: string;
  /** Time between heartbeats; a third of the registry's `ttlMs` by default. */
  intervalMs?: number;
  /** Told about a heartbeat that failed (the store is away); the next one tries again. */
  onError?: (error: unknown) => void;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const ALL = "ce:r:all";

/** The replicas sharing one store. */
export class ReplicaRegistry {
  readonly #store: StateStore;
  readonly #keys: StateKeys;
  readonly #ttlMs: number;
  #started = new Map<string, number>();

  /**
   * Binds the registry to a store.
   *
   * @param store Where replicas register.
   * @param keys The keys that seal their records.
   * @param options `ttlMs`: how long a replica counts as alive after its last heartbeat.
   */
  constructor(store: StateStore, keys: StateKeys, options: { ttlMs: number }) {
    this.#store = store;
    this.#keys = keys;
    this.#ttlMs = options.ttlMs;
  }

  async #key(id: string): Promise<string> {
    return `ce:r:e:${await this.#keys.index("replica", id)}`;
  }

  /**
   * Registers a replica, or renews its record (a heartbeat).
   *
   * @param replica Its id and internal address.
   */
  async beat(replica: { id: string; address: string }): Promise<void> {
    const now = Date.now();
    const startedAt = this.#started.get(replica.id) ?? now;
    this.#started.set(replica.id, startedAt);
    const key = await this.#key(replica.id);
    const info: ReplicaInfo = { ...replica, startedAt, seenAt: now };
    const sealed = await this.#keys.seal(encoder.encode(JSON.stringify(info)), key);
    await this.#store.set(key, sealed, { ttlMs: this.#ttlMs });
    await this.#store.sortedAdd(ALL, [[key, now + this.#ttlMs]]);
  }

  /**
   * Finds a live replica.
   *
   * @param id Its id.
   * @returns Its record, or undefined when it has not beaten within `ttlMs`.
   */
  async find(id: string): Promise<ReplicaInfo | undefined> {
    const key = await this.#key(id);
    const [sealed] = await this.#store.get([key]);
    return sealed && await this.#open(sealed, key);
  }

  /**
   * Lists the live replicas.
   *
   * @returns Their records, in no particular order.
   */
  async list(): Promise<ReplicaInfo[]> {
    await this.#store.sortedTrim(ALL, Date.now());
    const keys = (await this.#store.sortedRange(ALL, Date.now(), Infinity)).map(([key]) => key);
    const sealed = await this.#store.get(keys);
    const infos = await Promise.all(sealed.map((blob, i) => blob && this.#open(blob, keys[i])));
    return infos.filter((info): info is ReplicaInfo => info !== undefined);
  }

  /**
   * Removes a replica's record (it is shutting down).
   *
   * @param id Its id.
   */
  async leave(id: string): Promise<void> {
    const key = await this.#key(id);
    await this.#store.delete([key]);
    await this.#store.sortedRemove(ALL, [key]);
  }

  /**
   * Beats now and then every `intervalMs` (an unref'd timer) until stopped.
   *
   * @param options This replica, the interval, and what to do with a failed beat.
   * @returns A promise of the first beat (a replica that cannot register should not serve),
   *   and `stop`, which ends the heartbeats.
   */
  start(options: HeartbeatOptions): { first: Promise<void>; stop: () => void } {
    const replica = { id: options.id, address: options.address };
    const timer = setInterval(() => {
      this.beat(replica).catch((error) => options.onError?.(error));
    }, options.intervalMs ?? Math.max(10, Math.floor(this.#ttlMs / 3)));
    Deno.unrefTimer(timer);
    return { first: this.beat(replica), stop: () => clearInterval(timer) };
  }

  async #open(sealed: Uint8Array, key: string): Promise<ReplicaInfo | undefined> {
    const plain = await this.#keys.open(sealed, key);
    return plain ? JSON.parse(decoder.decode(plain)) as ReplicaInfo : undefined;
  }
}

/** What an owner entry is about. */
export type OwnedKind = "parked-run" | "python-session" | "http-session";

/** Names one piece of live state of one principal. */
export interface OwnedRef {
  /** What it is. */
  kind: OwnedKind;
  /** Its id (run id, the caller's session id, `Mcp-Session-Id`). */
  id: string;
  /** Whose it is. */
  principal: string;
}

/** Which replica holds each piece of live state. */
export class OwnerMap {
  readonly #store: StateStore;
  readonly #keys: StateKeys;

  /**
   * Binds the map to a store.
   *
   * @param store Where the entries are.
   * @param keys The keys that seal and name them.
   */
  constructor(store: StateStore, keys: StateKeys) {
    this.#store = store;
    this.#keys = keys;
  }

  async #key(ref: OwnedRef): Promise<string> {
    return `ce:own:${await this.#keys.index("owner", ref.kind, ref.principal, ref.id)}`;
  }

  /**
   * Records that a replica holds a piece of live state (or renews the record).
   *
   * @param ref What, and whose.
   * @param owner `replica`: the replica's id; `ttlMs`: how long the entry lives unless claimed
   *   again (the state's own idle expiry).
   * @returns False when another replica already holds it (the first claim wins).
   */
  async claim(ref: OwnedRef, owner: { replica: string; ttlMs: number }): Promise<boolean> {
    const key = await this.#key(ref);
    const sealed = await this.#keys.seal(encoder.encode(owner.replica), key);
    if (await this.#store.set(key, sealed, { ttlMs: owner.ttlMs, ifAbsent: true })) return true;
    if (await this.owner(ref) !== owner.replica) return false;
    await this.#store.expire([key], owner.ttlMs);
    return true;
  }

  /**
   * Finds the replica that holds a piece of live state.
   *
   * @param ref What, and whose.
   * @returns The replica's id, or undefined when nobody holds it (ended, expired, another
   *   principal's, or lost with a restarted store).
   */
  async owner(ref: OwnedRef): Promise<string | undefined> {
    const key = await this.#key(ref);
    const [sealed] = await this.#store.get([key]);
    const plain = sealed && await this.#keys.open(sealed, key);
    return plain ? decoder.decode(plain) : undefined;
  }

  /**
   * Gives an entry a new expiry (its state was used again), without reading it.
   *
   * @param ref What, and whose.
   * @param ttlMs How long it lives from now.
   */
  async renew(ref: OwnedRef, ttlMs: number): Promise<void> {
    await this.#store.expire([await this.#key(ref)], ttlMs);
  }

  /**
   * Forgets an entry (the run ended, the session closed).
   *
   * @param ref What, and whose.
   */
  async release(ref: OwnedRef): Promise<void> {
    await this.#store.delete([await this.#key(ref)]);
  }
}
