/**
 * The placeholders of `privacy.tokenize` in a {@linkcode StateStore}, so that a placeholder
 * minted by one replica resolves on every other: what `PlaceholderVault` (src/privacy/vault.ts)
 * keeps in its Maps, with the same time to live after the last use (to a second), the same bound
 * per principal (the least recently used go first) and counters that are never reset while the
 * store runs.
 *
 * In the store, per principal (named by a keyed HMAC, never by its name):
 * - `x:<HMAC(category, value)>` → the placeholder (`<email_3>`), the lookup of a value;
 * - `p:<placeholder>` → the value, sealed (AES-GCM) with the key's name as associated data;
 * - `n:<category>` → the last number given, a counter without expiry;
 * - `lru` → placeholders by last use, for the bound.
 * So the store holds no value and no plain hash of one, and another principal's placeholder is
 * a key that does not exist. A store that restarts has lost them all: each is then unknown (the
 * caller's `PlaceholderError`), and the counters start again from 1, as they do today when the
 * server restarts.
 *
 * @module
 */
import { setImmediate } from "node:timers";
import type { StateKeys } from "./keys.ts";
import type { StateStore } from "./store.ts";

/** Options of {@linkcode VaultStore}. */
export interface VaultStoreOptions {
  /** How long a placeholder lives after its last use (`privacy.ttlMs`). */
  ttlMs: number;
  /** Placeholders kept per principal (`privacy.maxValuesPerPrincipal`). */
  maxValuesPerPrincipal: number;
}

/** A value to give a placeholder. */
export interface VaultItem {
  /** Its category (`email`), which names the placeholder. */
  category: string;
  /** The personal value. */
  value: string;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();
/** Principals whose key prefix is remembered (then forgotten all at once). */
const MAX_PREFIXES = 1024;
/**
 * How long after a renewal a placeholder is not renewed again (at most; a hundredth of its time
 * to live when that is less): a run that resolves the same placeholders call after call renews
 * them once a second, not once a call. A placeholder then lives `ttlMs` after its last use, give
 * or take this, and the least recently used are told apart to this granularity.
 */
const RENEW_SLACK_MS = 1000;
/** Records whose last renewal is remembered (then forgotten all at once). */
const MAX_RENEWED = 16_384;

/** The shared placeholders of every principal. */
export class VaultStore {
  readonly #store: StateStore;
  readonly #keys: StateKeys;
  readonly #options: VaultStoreOptions;
  /** Principals' key prefixes: an HMAC each, asked for by every lookup. */
  readonly #prefixes = new Map<string, string>();
  /** When this process last renewed a record, by its key. */
  readonly #renewed = new Map<string, number>();

  /**
   * Binds the vault to a store.
   *
   * @param store Where the records are.
   * @param keys The keys that seal values and name records.
   * @param options Time to live and bound.
   */
  constructor(store: StateStore, keys: StateKeys, options: VaultStoreOptions) {
    this.#store = store;
    this.#keys = keys;
    this.#options = options;
  }

  async #prefix(principal: string): Promise<string> {
    let prefix = this.#prefixes.get(principal);
    if (prefix === undefined) {
      prefix = `ce:v:${await this.#keys.index("principal", principal)}:`;
      if (this.#prefixes.size >= MAX_PREFIXES) this.#prefixes.clear();
      this.#prefixes.set(principal, prefix);
    }
    return prefix;
  }

  /**
   * Gives each value its placeholder: the one it has, renewed, or the next number of its
   * category, in the order of the items.
   *
   * @param principal Whose placeholders.
   * @param items The values, in the order they appear.
   * @returns The placeholder of each item, in order.
   * @throws {CodeExecutorError} `StateUnavailable` when the store cannot be used; then the caller
   *   must not show the values either.
   */
  async assign(principal: string, items: VaultItem[]): Promise<string[]> {
    if (items.length === 0) return [];
    const prefix = await this.#prefix(principal);
    const ttlMs = this.#options.ttlMs;
    const distinct = new Map<string, VaultItem>();
    for (const item of items) distinct.set(`${item.category}\0${item.value}`, item);
    const wanted = [...distinct.values()];
    const lookups = await Promise.all(
      wanted.map(async (item) =>
        `${prefix}x:${await this.#keys.index("vault", principal, item.category, item.value)}`
      ),
    );
    const known = (await this.#store.get(lookups)).map((b) => b && decoder.decode(b));
    // A lookup whose value record is gone (evicted halfway, say) counts as unknown.
    const present = await this.#store.get(
      known.map((placeholder) => `${prefix}p:${placeholder ?? ""}`),
    );
    const given = new Map<string, string>();
    const renew: string[] = [];
    for (const [i, item] of wanted.entries()) {
      const placeholder = known[i];
      if (placeholder === undefined || present[i] === undefined) continue;
      given.set(`${item.category}\0${item.value}`, placeholder);
      renew.push(lookups[i], `${prefix}p:${placeholder}`);
    }
    const fresh = wanted.map((item, i) => ({ item, lookup: lookups[i] }))
      .filter(({ item }) => !given.has(`${item.category}\0${item.value}`));
    // One connection answers in order, so numbers follow the items' order.
    const numbers = await Promise.all(
      fresh.map(({ item }) => this.#store.increment(`${prefix}n:${item.category}`)),
    );
    await Promise.all([
      this.#store.expire(renew, ttlMs),
      ...fresh.map(async ({ item, lookup }, i) => {
        const placeholder = `<${item.category}_${numbers[i]}>`;
        const record = `${prefix}p:${placeholder}`;
        const sealed = await this.#keys.seal(
          encoder.encode(JSON.stringify({ x: lookup, v: item.value })),
          record,
        );
        await this.#store.set(record, sealed, { ttlMs });
        if (await this.#store.set(lookup, encoder.encode(placeholder), { ttlMs, ifAbsent: true })) {
          given.set(`${item.category}\0${item.value}`, placeholder);
          return;
        }
        // Another replica gave the same value a placeholder meanwhile: use that one.
        await this.#store.delete([record]);
        const [theirs] = await this.#store.get([lookup]);
        given.set(`${item.category}\0${item.value}`, theirs ? decoder.decode(theirs) : placeholder);
      }),
    ]);
    await this.#used(prefix, [...given.values()]);
    return items.map((item) => given.get(`${item.category}\0${item.value}`)!);
  }

  /**
   * Finds the values of a principal's placeholders, renewing each one found.
   *
   * @param principal Whose placeholders.
   * @param placeholders Placeholders as the text holds them (`<email_1>`).
   * @returns The value of each one this principal holds; unknown and expired ones are absent.
   * @throws {CodeExecutorError} `StateUnavailable` when the store cannot be used; then nothing
   *   must be passed on unresolved.
   */
  async lookup(principal: string, placeholders: string[]): Promise<Map<string, string>> {
    const found = new Map<string, string>();
    if (placeholders.length === 0) return found;
    const prefix = await this.#prefix(principal);
    const distinct = [...new Set(placeholders)];
    const records = distinct.map((placeholder) => `${prefix}p:${placeholder}`);
    const sealed = await this.#store.get(records);
    const renew: string[] = [];
    const used: string[] = [];
    const now = Date.now();
    const slack = Math.min(RENEW_SLACK_MS, this.#options.ttlMs / 100);
    await Promise.all(distinct.map(async (placeholder, i) => {
      const blob = sealed[i];
      const plain = blob && await this.#keys.open(blob, records[i]);
      if (!plain) return;
      const { x, v } = JSON.parse(decoder.decode(plain)) as { x: string; v: string };
      found.set(placeholder, v);
      if (now - (this.#renewed.get(records[i]) ?? -Infinity) < slack) return;
      renew.push(records[i], x);
      used.push(placeholder);
    }));
    if (used.length === 0) return found;
    if (this.#renewed.size + used.length > MAX_RENEWED) this.#renewed.clear();
    for (let i = 0; i < renew.length; i += 2) this.#renewed.set(renew[i], now);
    // Renewing is bookkeeping, done behind the answer: the caller goes on to its next wait (the
    // tool call), then the renewals are sent (issuing them took 0.9 ms, more than the read's
    // round trip, on this 2-core machine). One lost to a store that went away costs at most an
    // earlier expiry.
    setImmediate(() => this.#renew(prefix, renew, used).catch(() => {}));
    return found;
  }

  /**
   * The last number given in a category, so that a caller can tell an expired placeholder from
   * one never given.
   *
   * @param principal Whose placeholders.
   * @param category The category.
   * @returns 0 when none was given (or the store lost its counters).
   */
  async given(principal: string, category: string): Promise<number> {
    return await this.#store.counter(`${await this.#prefix(principal)}n:${category}`);
  }

  /** Renews records and their lookups, and marks their placeholders used. */
  async #renew(prefix: string, keys: string[], placeholders: string[]): Promise<void> {
    await Promise.all([
      this.#store.expire(keys, this.#options.ttlMs),
      this.#used(prefix, placeholders),
    ]);
  }

  /** Marks placeholders used now, and drops the least recently used past the bound. */
  async #used(prefix: string, placeholders: string[]): Promise<void> {
    const { ttlMs, maxValuesPerPrincipal: max } = this.#options;
    const now = Date.now();
    const lru = `${prefix}lru`;
    let size = await this.#store.sortedAdd(lru, placeholders.map((p) => [p, now]), ttlMs);
    if (size <= max) return;
    size = await this.#store.sortedTrim(lru, now - ttlMs);
    if (size <= max) return;
    const oldest = await this.#store.sortedPop(lru, size - max);
    const records = oldest.map(([placeholder]) => `${prefix}p:${placeholder}`);
    const sealed = await this.#store.get(records);
    const lookups = await Promise.all(sealed.map(async (blob, i) => {
      const plain = blob && await this.#keys.open(blob, records[i]);
      return plain ? [(JSON.parse(decoder.decode(plain)) as { x: string }).x] : [];
    }));
    await this.#store.delete([...records, ...lookups.flat()]);
  }
}
