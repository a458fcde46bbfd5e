/**
 * The {@linkcode StateStore} on Redis 7 or Valkey (`state.url`), through ioredis.
 *
 * Why ioredis (6.0.0), measured under Deno 2.9.6 against Debian's redis-server 7.0.15 on
 * loopback, with node-redis (`@redis/client` 6.3.1) and iovalkey 0.4.0 beside it: all three
 * connect, pipeline, run MULTI, EVALSHA (falling back to EVAL after SCRIPT FLUSH), pub/sub,
 * reconnect by themselves within ~200 ms of a killed server's restart, fail a command at once
 * while the server is down (offline queue off), and leave Deno's test sanitizers clean after
 * quit or disconnect. A GET's round trip: median 0.11 ms (ioredis), 0.11 (node-redis), 0.08
 * (iovalkey). The difference is a stopped server (SIGSTOP), which accepts bytes and answers
 * nothing: ioredis's `commandTimeout` failed the command after 501 ms; node-redis's
 * `commandOptions.timeout` only covers a command not yet written, so the GET hung until the
 * server went on (a 5 s guard ended the probe), and only an idle-socket timeout with pings caught
 * it (1.2 s, by dropping the connection). iovalkey is an ioredis fork with the same behaviour and
 * a twentieth of its use.
 *
 * Settings that follow from it: no offline queue and no retry of a command (a retried INCR would
 * count twice): a command either reaches a connected store within `state.timeoutMs` or fails
 * with `StateUnavailable`; reconnection goes on in the background, so service resumes by itself.
 * The scripts (`lua/*.lua`, beside `src/` rather than in it: `deno doc --lint src/` reads every
 * file under src/ as a module) read the store's clock, so that replicas' clocks do not matter.
 *
 * @module
 */
import { Buffer } from "node:buffer";
import type { ConnectionOptions } from "node:tls";
import { Redis } from "ioredis";
import windowTakeLua from "../../lua/window_take.lua" with { type: "text" };
import leaseTakeLua from "../../lua/lease_take.lua" with { type: "text" };
import leaseRenewLua from "../../lua/lease_renew.lua" with { type: "text" };
import budgetLua from "../../lua/budget.lua" with { type: "text" };
import { CodeExecutorError } from "../errors.ts";
import {
  type BudgetKey,
  type BudgetUse,
  describeStoreUrl,
  type LeaseOptions,
  type Scored,
  type SetOptions,
  type StateStore,
  stateUnavailable,
  type StoreStats,
  type WindowOptions,
} from "./store.ts";

/** Options of {@linkcode RedisStateStore.connect}. */
export interface RedisStoreOptions {
  /** `redis://…` or `rediss://…` (`state.url`). */
  url: string;
  /** The bound of one round trip (`state.timeoutMs`). */
  timeoutMs: number;
  /** TLS options for `rediss://` beyond the system's CAs (a private CA in tests). */
  tls?: ConnectionOptions;
  /** Told how long each operation took, failed or not (`/metrics`). */
  onRoundTrip?: (ms: number) => void;
}

/** The scripts, as ioredis's `defineCommand` adds them. */
interface Scripts {
  ceWindowTake(key: string, limit: number, windowMs: number, member: string): Promise<number>;
  ceLeaseTake(key: string, holder: string, max: number, ttlMs: number): Promise<number>;
  ceLeaseRenew(key: string, holder: string, ttlMs: number): Promise<number>;
  ceBudget(...args: Array<string | number>): Promise<number | [number, number]>;
}

/** Reply errors that mean the store cannot serve now, not that the command was wrong. */
const TRANSIENT_REPLY = /^(LOADING|BUSY|READONLY|MASTERDOWN|TRYAGAIN|CLUSTERDOWN|NOREPLICAS)\b/;

function toBuffer(bytes: Uint8Array): Buffer {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

function toBytes(buffer: Buffer | null): Uint8Array | undefined {
  return buffer === null ? undefined : new Uint8Array(buffer);
}

function pairs(flat: string[]): Scored[] {
  const out: Scored[] = [];
  for (let i = 0; i + 1 < flat.length; i += 2) out.push([flat[i], Number(flat[i + 1])]);
  return out;
}

function bound(score: number): string | number {
  return score === Infinity ? "+inf" : score === -Infinity ? "-inf" : score;
}

/** A {@linkcode StateStore} on a Redis or Valkey server. */
export class RedisStateStore implements StateStore {
  /** Always `redis`. */
  readonly kind = "redis";
  /** The URL without its password. */
  readonly where: string;
  /** Operations and failures so far. */
  readonly stats: StoreStats = { operations: 0, failures: 0 };
  readonly #client: Redis;
  readonly #scripts: Scripts;
  readonly #timeoutMs: number;
  readonly #onRoundTrip: ((ms: number) => void) | undefined;
  #lastError: Error | undefined;

  private constructor(client: Redis, where: string, options: RedisStoreOptions) {
    this.#client = client;
    this.#scripts = client as unknown as Scripts;
    this.where = where;
    this.#timeoutMs = options.timeoutMs;
    this.#onRoundTrip = options.onRoundTrip;
    client.on("error", (error: Error) => this.#lastError = error);
    client.defineCommand("ceWindowTake", { numberOfKeys: 1, lua: windowTakeLua });
    client.defineCommand("ceLeaseTake", { numberOfKeys: 1, lua: leaseTakeLua });
    client.defineCommand("ceLeaseRenew", { numberOfKeys: 1, lua: leaseRenewLua });
    client.defineCommand("ceBudget", { numberOfKeys: 5, lua: budgetLua });
  }

  /**
   * Connects to the store, or refuses to start.
   *
   * @param options The URL and the time bound.
   * @returns The connected store.
   * @throws {CodeExecutorError} `StateUnavailable` naming the URL (without its password) and the
   *   cause, when the store cannot be reached or does not answer within a few round trips.
   */
  static async connect(options: RedisStoreOptions): Promise<RedisStateStore> {
    const where = describeStoreUrl(options.url);
    const client = new Redis(options.url, {
      lazyConnect: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      commandTimeout: options.timeoutMs,
      connectTimeout: Math.max(options.timeoutMs, 1000),
      retryStrategy: (attempt: number) => Math.min(100 * attempt, 1000),
      enableAutoPipelining: true,
      connectionName: "code-executor",
      ...(options.tls ? { tls: options.tls } : {}),
    });
    const store = new RedisStateStore(client, where, options);
    // A stopped server completes TCP and then answers nothing: connect() alone would wait.
    const startMs = Math.max(3 * options.timeoutMs, 2000);
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      await Promise.race([
        client.connect().then(() => client.ping()),
        new Promise((_, reject) => {
          timer = setTimeout(
            () => reject(new Error(`no answer within ${startMs} ms`)),
            startMs,
          );
        }),
      ]);
    } catch (error) {
      client.disconnect();
      const cause = store.#lastError ?? error;
      const message = (cause as Error).message ?? String(cause);
      const why = /timed out|no answer/i.test(message)
        ? `did not answer within ${
          /no answer/.test(message) ? startMs : options.timeoutMs
        } ms (state.timeoutMs)`
        : `is unreachable: ${message}`;
      throw new CodeExecutorError(
        "StateUnavailable",
        `Cannot start: the shared state store ${where} (state.url, CODE_EXECUTOR_STATE_URL) ${why}; start the store, or fix state.url`,
        { cause },
      );
    } finally {
      clearTimeout(timer);
    }
    return store;
  }

  async #run<T>(operation: () => Promise<T>): Promise<T> {
    this.stats.operations++;
    const started = performance.now();
    try {
      return await operation();
    } catch (error) {
      const message = (error as Error).message ?? String(error);
      if ((error as Error).name === "ReplyError" && !TRANSIENT_REPLY.test(message)) throw error;
      this.stats.failures++;
      const why = /timed out/i.test(message)
        ? `did not answer within ${this.#timeoutMs} ms (state.timeoutMs)`
        : (error as Error).name === "ReplyError"
        ? `is not serving (${message})`
        : `is unreachable (${this.#lastError?.message ?? message}; reconnecting)`;
      throw stateUnavailable(this.where, why, error);
    } finally {
      this.#onRoundTrip?.(performance.now() - started);
    }
  }

  /** The values of some keys. */
  get(keys: string[]): Promise<Array<Uint8Array | undefined>> {
    if (keys.length === 0) return Promise.resolve([]);
    return this.#run(async () => (await this.#client.mgetBuffer(keys)).map(toBytes));
  }

  /** Sets a value with an expiry. */
  set(key: string, value: Uint8Array, options: SetOptions): Promise<boolean> {
    return this.#run(async () => {
      const bytes = toBuffer(value);
      if (options.ttlMs === Infinity) {
        const kept = options.ifAbsent
          ? await this.#client.set(key, bytes, "NX")
          : await this.#client.set(key, bytes);
        return kept === "OK";
      }
      const ttl = Math.max(1, Math.ceil(options.ttlMs));
      const reply = options.ifAbsent
        ? await this.#client.set(key, bytes, "PX", ttl, "NX")
        : await this.#client.set(key, bytes, "PX", ttl);
      return reply === "OK";
    });
  }

  /** Gets and deletes a value (GETDEL). */
  take(key: string): Promise<Uint8Array | undefined> {
    return this.#run(async () => toBytes(await this.#client.getdelBuffer(key)));
  }

  /** Deletes keys. */
  delete(keys: string[]): Promise<void> {
    if (keys.length === 0) return Promise.resolve();
    return this.#run(async () => void await this.#client.del(...keys));
  }

  /** Renews the expiry of the keys that exist. */
  expire(keys: string[], ttlMs: number): Promise<void> {
    if (keys.length === 0) return Promise.resolve();
    const ttl = Math.max(1, Math.ceil(ttlMs));
    return this.#run(async () => {
      const pipeline = this.#client.pipeline();
      for (const key of keys) pipeline.pexpire(key, ttl);
      for (const [error] of await pipeline.exec() ?? []) if (error) throw error;
    });
  }

  /** Adds one to a counter (INCR). */
  increment(key: string): Promise<number> {
    return this.#run(() => this.#client.incr(key));
  }

  /** Reads a counter. */
  counter(key: string): Promise<number> {
    return this.#run(async () => Number(await this.#client.get(key) ?? 0));
  }

  /** Adds or re-scores members of a sorted set. */
  sortedAdd(key: string, members: Scored[], ttlMs?: number): Promise<number> {
    return this.#run(async () => {
      const multi = this.#client.multi();
      if (members.length > 0) multi.zadd(key, ...members.flatMap(([m, s]) => [s, m]));
      if (ttlMs !== undefined) multi.pexpire(key, Math.max(1, Math.ceil(ttlMs)));
      const replies = await multi.zcard(key).exec();
      if (!replies) throw new Error("MULTI was aborted");
      for (const [error] of replies) if (error) throw error;
      return Number(replies[replies.length - 1][1]);
    });
  }

  /** Removes members of a sorted set. */
  sortedRemove(key: string, members: string[]): Promise<void> {
    if (members.length === 0) return Promise.resolve();
    return this.#run(async () => void await this.#client.zrem(key, ...members));
  }

  /** Members with `min <= score <= max`, lowest first. */
  sortedRange(key: string, min: number, max: number): Promise<Scored[]> {
    return this.#run(async () =>
      pairs(await this.#client.zrangebyscore(key, bound(min), bound(max), "WITHSCORES"))
    );
  }

  /** Removes and returns the lowest-scored members (ZPOPMIN). */
  sortedPop(key: string, count: number): Promise<Scored[]> {
    return this.#run(async () => pairs(await this.#client.zpopmin(key, count)));
  }

  /** Removes the members scored below `score`. */
  sortedTrim(key: string, score: number): Promise<number> {
    return this.#run(async () => {
      const replies = await this.#client.multi()
        .zremrangebyscore(key, "-inf", `(${score}`)
        .zcard(key)
        .exec();
      const [error, left] = replies?.[1] ?? [new Error("MULTI was aborted"), 0];
      if (error) throw error;
      return Number(left);
    });
  }

  /** Counts one take in a sliding window (`lua/window_take.lua`). */
  windowTake(key: string, options: WindowOptions): Promise<number | undefined> {
    return this.#run(async () => {
      const wait = await this.#scripts.ceWindowTake(
        key,
        options.limit,
        options.windowMs,
        crypto.randomUUID(),
      );
      return wait < 0 ? undefined : wait;
    });
  }

  /** Takes or renews a lease (`lua/lease_take.lua`). */
  leaseTake(key: string, options: LeaseOptions): Promise<boolean> {
    return this.#run(async () =>
      await this.#scripts.ceLeaseTake(key, options.holder, options.max, options.ttlMs) === 1
    );
  }

  /** Renews a held lease (`lua/lease_renew.lua`). */
  leaseRenew(key: string, holder: string, ttlMs: number): Promise<boolean> {
    return this.#run(async () => await this.#scripts.ceLeaseRenew(key, holder, ttlMs) === 1);
  }

  /** Gives a lease back. */
  leaseDrop(key: string, holder: string): Promise<void> {
    return this.#run(async () => void await this.#client.zrem(key, holder));
  }

  #budget(budget: BudgetKey, ...args: Array<string | number>) {
    const k = budget.key;
    return this.#run(() =>
      this.#scripts.ceBudget(`${k}:r`, `${k}:l`, `${k}:k`, `${k}:s`, `${k}:t`, ...args)
    );
  }

  /** Reserves bytes, evicting the oldest kept entries for room (`lua/budget.lua`). */
  async budgetReserve(
    budget: BudgetKey,
    options: { holder: string; bytes: number; max: number; leaseMs: number },
  ): Promise<boolean> {
    const { holder, bytes, max, leaseMs } = options;
    const prefixes = budget.entryPrefixes.join(" ");
    return await this.#budget(budget, "reserve", holder, bytes, max, leaseMs, prefixes) === 1;
  }

  /** Turns reserved bytes into a kept entry. */
  async budgetKeep(
    budget: BudgetKey,
    options: { holder: string; entry: string; bytes: number; ttlMs: number },
  ): Promise<number> {
    const { holder, entry, bytes, ttlMs } = options;
    return Number(await this.#budget(budget, "keep", holder, entry, bytes, ttlMs));
  }

  /** Gives back reserved bytes. */
  async budgetRelease(budget: BudgetKey, holder: string, bytes?: number): Promise<void> {
    await this.#budget(budget, "release", holder, bytes ?? -1);
  }

  /** What the budget holds. */
  async budgetUse(budget: BudgetKey): Promise<BudgetUse> {
    const [kept, reserved] = await this.#budget(budget, "use") as [number, number];
    return { kept: Number(kept), reserved: Number(reserved) };
  }

  /** Closes the connection: politely when the store answers, at once otherwise. */
  async close(): Promise<void> {
    if (this.#client.status === "ready") {
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([
        this.#client.quit().catch(() => {}),
        new Promise((resolve) => timer = setTimeout(resolve, this.#timeoutMs)),
      ]);
      clearTimeout(timer);
    }
    this.#client.disconnect();
  }
}
