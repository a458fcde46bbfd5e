/**
 * What replicas share, opened once per server from the settings: the store (`state.url`, or
 * this process), the keys derived from `state.key`, and the records over them, each with the
 * bounds the settings give it today.
 *
 * @module
 */
import type { ConnectionOptions } from "node:tls";
import type { Settings } from "../config/settings.ts";
import { CodeExecutorError } from "../errors.ts";
import { StateKeys } from "./keys.ts";
import { KeptStore } from "./kept_store.ts";
import { ConcurrencyShare, SharedRate } from "./limits.ts";
import { MemoryStateStore } from "./memory_store.ts";
import { PendingStore } from "./pending_store.ts";
import { RedisStateStore } from "./redis_store.ts";
import { OwnerMap, ReplicaRegistry } from "./replicas.ts";
import { SkillDocs } from "./skill_docs.ts";
import type { StateStore } from "./store.ts";
import { VaultStore } from "./vault_store.ts";

/** How long a replica counts as alive after its last heartbeat (one every 5 s). */
export const REPLICA_TTL_MS = 15_000;
/** How long a run's place in its principal's share lives without renewal. */
export const SHARE_LEASE_MS = 30_000;

/** The shared state of one server. */
export interface SharedState {
  /** The store under it all. */
  readonly store: StateStore;
  /** The keys derived from `state.key`. */
  readonly keys: StateKeys;
  /** Placeholders of `privacy.tokenize`. */
  readonly vault: VaultStore;
  /** Kept outputs. */
  readonly outputs: KeptStore;
  /** Pending approvals and one-time approvals. */
  readonly approvals: PendingStore;
  /** `limits.principalExecutionsPerMinute`, per principal. */
  readonly principalRate: SharedRate;
  /** `limits.executionsPerMinute`, for the whole cluster (key `executions`). */
  readonly serverRate: SharedRate;
  /** `limits.principalMaxConcurrent` across replicas. */
  readonly concurrency: ConcurrencyShare;
  /** The HTTP principals' skills and the shared ones. */
  readonly skills: SkillDocs;
  /** The live replicas. */
  readonly replicas: ReplicaRegistry;
  /** Which replica holds which live state. */
  readonly owners: OwnerMap;
  /** Closes the store's connection. */
  close(): Promise<void>;
}

/** Options of {@linkcode openSharedState}. */
export interface OpenSharedStateOptions {
  /** TLS options for `rediss://` beyond the system's CAs (a private CA). */
  tls?: ConnectionOptions;
  /** Told how long each round trip to a Redis store took (`/metrics`). */
  onRoundTrip?: (ms: number) => void;
}

/**
 * Opens the shared state: in this process without `state.url`, else on the Redis or Valkey server
 * it names, which must answer now.
 *
 * @param settings The server's settings (`state`, `privacy`, `outputs`, `limits`).
 * @param options TLS options.
 * @returns The shared state.
 * @throws {CodeExecutorError} `StateUnavailable` when `state.url` is set without `state.key`, or
 *   the store cannot be reached: the server must not start then.
 */
export async function openSharedState(
  settings: Settings,
  options: OpenSharedStateOptions = {},
): Promise<SharedState> {
  const { url, key, timeoutMs } = settings.state;
  if (url !== undefined && key === undefined) {
    throw new CodeExecutorError(
      "StateUnavailable",
      "Cannot start: state.url is set without state.key; give every replica the same secret of at least 32 characters (state.key or CODE_EXECUTOR_STATE_KEY)",
    );
  }
  const store = url === undefined ? new MemoryStateStore() : await RedisStateStore.connect({
    url,
    timeoutMs,
    tls: options.tls,
    onRoundTrip: options.onRoundTrip,
  });
  const keys = await StateKeys.derive(url === undefined ? undefined : key);
  const { limits, privacy, outputs } = settings;
  return {
    store,
    keys,
    vault: new VaultStore(store, keys, {
      ttlMs: privacy.ttlMs,
      maxValuesPerPrincipal: privacy.maxValuesPerPrincipal,
    }),
    outputs: new KeptStore(store, keys, outputs),
    approvals: new PendingStore(store, keys),
    principalRate: new SharedRate(store, keys, {
      perMinute: limits.principalExecutionsPerMinute,
      scope: "principal",
    }),
    serverRate: new SharedRate(store, keys, {
      perMinute: limits.executionsPerMinute,
      scope: "server",
    }),
    concurrency: new ConcurrencyShare(store, keys, {
      max: limits.principalMaxConcurrent,
      leaseMs: SHARE_LEASE_MS,
    }),
    skills: new SkillDocs(store, keys),
    replicas: new ReplicaRegistry(store, keys, { ttlMs: REPLICA_TTL_MS }),
    owners: new OwnerMap(store, keys),
    close: () => store.close(),
  };
}
