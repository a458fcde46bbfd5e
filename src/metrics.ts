/**
 * What operators see of a server: the instruments of `GET /metrics` (Prometheus text format,
 * exposed by `prom-client`), observed where things happen and read from their sources when
 * scraped. Runs, upstream calls, store round trips and forwarded requests are counted as they end;
 * queue depth, warm pools, upstream connections, store totals and the process are read from their
 * owners at each scrape, so that nothing is kept twice.
 *
 * Label values are bounded: languages, the closed set of error types (a name the code raised
 * itself is `raised`: the code must not mint series), the admin's upstream server names, and the
 * few kinds and outcomes named below. No principal, tool name or argument is a label.
 *
 * `prom-client` is loaded by {@linkcode Metrics.create}, not imported here: it adds ~70 ms to a
 * start (measured), which a stdio server or a command that serves no metrics does not pay.
 *
 * @module
 */
import process from "node:process";
import type { Counter, Gauge, Histogram, Registry } from "prom-client";
import { ERROR_TYPES } from "./errors.ts";
import { SERVER_VERSION } from "./version.ts";

/** A warm pool as a scrape reads it. */
export interface WarmPoolSize {
  /** The language its children run. */
  language: string;
  /** Started children waiting for a run. */
  ready: number;
  /** How many it keeps now (its size, or more during a burst). */
  target: number;
}

/** The shared state store as a scrape reads it: a `StateStore` fits. */
export interface StoreCounts {
  /** `memory` or `redis`. */
  readonly kind: string;
  /** Operations and failures since it was opened. */
  readonly stats: { readonly operations: number; readonly failures: number };
}

/** Where the gauges read their values at each scrape; each is optional. */
export interface MetricSources {
  /** Runs waiting for a slot (`limits.maxConcurrent`). */
  queued?: () => number;
  /** Runs between their call and their result, queued ones included. */
  inFlight?: () => number;
  /** Each language's warm pool. */
  warmPools?: () => WarmPoolSize[];
  /** Each configured upstream server, and whether it is connected now. */
  upstreams?: () => Array<{ name: string; up: boolean }>;
  /** HTTP requests being handled, open event streams included. */
  httpInFlight?: () => number;
  /** The shared state store. */
  store?: StoreCounts;
}

/** How an upstream call ended: an answer, an answer with `isError`, or no answer. */
export type UpstreamOutcome = "ok" | "tool_error" | "failed";

/** Seconds: from a trivial run (~10 ms) to the longest `limits.maxTimeoutMs`. */
const RUN_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];
/** Seconds: from a local stdio tool (~1 ms) to `tools.callTimeoutMs`. */
const CALL_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
/** Seconds: a store on loopback answers in ~0.1 ms; `state.timeoutMs` is 1 s by default. */
const STORE_BUCKETS = [0.0002, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1];

/**
 * The `outcome` label of a run: `ok`, a type of `ERROR_TYPES`, or `raised` for a name the code's
 * own exception had.
 *
 * @param errorType The result's `error.type`; undefined for a run that succeeded.
 * @returns The label value.
 */
export function runOutcome(errorType: string | undefined): string {
  if (errorType === undefined) return "ok";
  return Object.hasOwn(ERROR_TYPES, errorType) ? errorType : "raised";
}

/** Open file descriptors, where the system lists them (`/proc`); undefined elsewhere. */
function openFds(): number | undefined {
  try {
    let count = 0;
    for (const _ of Deno.readDirSync("/proc/self/fd")) count++;
    return count;
  } catch {
    return undefined;
  }
}

type Prom = typeof import("prom-client");

/** Where a group of instruments is made: the library, the registry, and the sources to read. */
interface Scope {
  prom: Prom;
  registers: Registry[];
  sources: () => MetricSources;
}

/** A gauge of one value, read from its source at each scrape (absent without one). */
function readGauge(
  scope: Scope,
  metric: { name: string; help: string },
  read: (sources: MetricSources) => (() => number) | undefined,
): void {
  new scope.prom.Gauge({
    ...metric,
    registers: scope.registers,
    collect(this: Gauge) {
      const source = read(scope.sources());
      if (source) this.set(source());
    },
  });
}

/** Runs: counted as they end; the queue and the warm pools, read at each scrape. */
function runInstruments(scope: Scope) {
  const { prom, registers, sources } = scope;
  const count = new prom.Counter({
    name: "code_executor_runs_total",
    help:
      "Runs of run_typescript and run_python that ended, by language and outcome: ok, an error type, or raised (an exception of the code's own)",
    labelNames: ["language", "outcome"],
    registers,
  });
  const seconds = new prom.Histogram({
    name: "code_executor_run_duration_seconds",
    help: "Time from a run's call to its result, queue wait included, by language",
    labelNames: ["language"],
    buckets: RUN_BUCKETS,
    registers,
  });
  readGauge(scope, {
    name: "code_executor_runs_in_flight",
    help: "Runs between their call and their result, queued ones included",
  }, (read) => read.inFlight);
  readGauge(scope, {
    name: "code_executor_runs_queued",
    help: "Runs waiting for a slot (limits.maxConcurrent)",
  }, (read) => read.queued);
  const pools = {
    ready: "Started sandbox children waiting for a run, by language",
    target: "Sandbox children each warm pool keeps now: its size, or more during a burst",
  } as const;
  for (const [field, help] of Object.entries(pools) as Array<[keyof typeof pools, string]>) {
    new prom.Gauge({
      name: `code_executor_warm_pool_${field}`,
      help,
      labelNames: ["language"],
      registers,
      collect(this: Gauge<"language">) {
        this.reset();
        for (const pool of sources().warmPools?.() ?? []) {
          this.set({ language: pool.language }, pool[field]);
        }
      },
    });
  }
  return { count, seconds };
}

/** Upstream servers: whether each is connected (read), and their calls (timed as they end). */
function upstreamInstruments(scope: Scope): Histogram<"server" | "outcome"> {
  const { prom, registers, sources } = scope;
  new prom.Gauge({
    name: "code_executor_upstream_up",
    help:
      "1 while the upstream server is connected; 0 before its first use, after it dropped, or when it failed",
    labelNames: ["server"],
    registers,
    collect(this: Gauge<"server">) {
      this.reset();
      for (const server of sources().upstreams?.() ?? []) {
        this.set({ server: server.name }, server.up ? 1 : 0);
      }
    },
  });
  return new prom.Histogram({
    name: "code_executor_upstream_call_duration_seconds",
    help:
      "Tool calls to upstream servers, by server and outcome: ok, tool_error (isError) or failed (no answer)",
    labelNames: ["server", "outcome"],
    buckets: CALL_BUCKETS,
    registers,
  });
}

/**
 * The shared state store: the totals it keeps itself (`StateStore.stats`, read rather than counted
 * twice), and its round trips (timed by the store's hook).
 */
function storeInstruments(scope: Scope): Histogram<"store"> {
  const { prom, registers, sources } = scope;
  const totals = {
    operations: "Operations on the shared state store (state.url, else this process)",
    failures: "Operations on the shared state store that failed with StateUnavailable",
  } as const;
  for (const [field, help] of Object.entries(totals) as Array<[keyof typeof totals, string]>) {
    new prom.Counter({
      name: `code_executor_store_${field}_total`,
      help,
      labelNames: ["store"],
      registers,
      collect(this: Counter<"store">) {
        const store = sources().store;
        this.reset();
        if (store) this.inc({ store: store.kind }, store.stats[field]);
      },
    });
  }
  return new prom.Histogram({
    name: "code_executor_store_round_trip_seconds",
    help: "Round trips to a shared state store on the network (redis), failed ones included",
    labelNames: ["store"],
    buckets: STORE_BUCKETS,
    registers,
  });
}

/**
 * The process's own, under the names Prometheus's client libraries give them. Not prom-client's
 * `collectDefaultMetrics`: under Deno its event-loop lag is never sampled (min 9.2e9 s, mean NaN,
 * measured on 2.9.6) and its handle counts read empty.
 */
function processInstruments(scope: Scope): void {
  const { prom, registers } = scope;
  new prom.Counter({
    name: "process_cpu_seconds_total",
    help: "User and system CPU time spent, in seconds",
    registers,
    collect(this: Counter) {
      const { user, system } = process.cpuUsage();
      this.reset();
      this.inc((user + system) / 1e6);
    },
  });
  readGauge(scope, {
    name: "process_resident_memory_bytes",
    help: "Resident memory of the server process (its sandbox children not included)",
  }, () => () => Deno.memoryUsage().rss);
  new prom.Gauge({
    name: "process_start_time_seconds",
    help: "When the process started, in seconds since the epoch",
    registers,
  }).set(Math.round(performance.timeOrigin) / 1000);
  if (openFds() !== undefined) {
    readGauge(
      scope,
      { name: "process_open_fds", help: "Open file descriptors" },
      () => () => openFds() ?? 0,
    );
  }
}

/**
 * The server's instruments, in a registry of their own. Observing is a counter or histogram
 * update (~1.3 µs a run on an idle machine, measured); the gauges are read from
 * {@linkcode MetricSources} when scraped.
 *
 * @example
 * ```ts
 * const metrics = await Metrics.create();
 * metrics.watch({ queued: () => 0 });
 * metrics.runEnded("typescript", undefined, 0.012);
 * const text = await metrics.render();
 * ```
 */
export class Metrics {
  #registry: Registry;
  #sources: MetricSources = {};
  #runs: Counter<"language" | "outcome">;
  #runSeconds: Histogram<"language">;
  #callSeconds: Histogram<"server" | "outcome">;
  #storeSeconds: Histogram<"store">;
  #forwarded: Counter<"kind" | "outcome">;

  private constructor(prom: Prom) {
    const registry = this.#registry = new prom.Registry();
    const scope: Scope = { prom, registers: [registry], sources: () => this.#sources };
    const runs = runInstruments(scope);
    this.#runs = runs.count;
    this.#runSeconds = runs.seconds;
    this.#callSeconds = upstreamInstruments(scope);
    this.#storeSeconds = storeInstruments(scope);
    this.#forwarded = new prom.Counter({
      name: "code_executor_forwarded_requests_total",
      help:
        "Requests this replica forwarded to the replica that owns their live state, by kind and outcome",
      labelNames: ["kind", "outcome"],
      registers: scope.registers,
    });
    readGauge(scope, {
      name: "code_executor_http_requests_in_flight",
      help: "HTTP requests being handled, open event streams included (http.maxRequests)",
    }, (read) => read.httpInFlight);
    new prom.Gauge({
      name: "code_executor_build_info",
      help: "Always 1, labelled with the versions of Code Executor and Deno",
      labelNames: ["version", "deno"],
      registers: scope.registers,
    }).set({ version: SERVER_VERSION, deno: Deno.version.deno }, 1);
    processInstruments(scope);
  }

  /**
   * Loads `prom-client` and creates the instruments.
   *
   * @returns The metrics, with no source watched yet.
   */
  static async create(): Promise<Metrics> {
    return new Metrics(await import("prom-client"));
  }

  /**
   * Gives the gauges where to read: each source given replaces the one before it.
   *
   * @param sources Some of the sources.
   */
  watch(sources: MetricSources): void {
    this.#sources = { ...this.#sources, ...sources };
  }

  /**
   * Counts a run that ended.
   *
   * @param language The language it ran.
   * @param errorType The result's `error.type`; undefined for a run that succeeded.
   * @param seconds From its call to its result.
   */
  runEnded(language: string, errorType: string | undefined, seconds: number): void {
    this.#runs.inc({ language, outcome: runOutcome(errorType) });
    this.#runSeconds.observe({ language }, seconds);
  }

  /**
   * Counts a tool call to an upstream server.
   *
   * @param server The server's configured name.
   * @param outcome How it ended.
   * @param seconds How long it took.
   */
  upstreamCall(server: string, outcome: UpstreamOutcome, seconds: number): void {
    this.#callSeconds.observe({ server, outcome }, seconds);
  }

  /**
   * Times one round trip to a store on the network (`RedisStoreOptions.onRoundTrip`); bound, so
   * it can be passed as it is.
   *
   * @param ms How long it took, failed or not.
   */
  readonly storeRoundTrip = (ms: number): void => {
    this.#storeSeconds.observe({ store: "redis" }, ms / 1000);
  };

  /**
   * Counts a request forwarded to the replica that owns its live state.
   *
   * @param kind What it reached: `parked_run`, `python_session` or `session` (2025-era).
   * @param outcome How it ended: `ok`, `owner_gone`, `timeout` or `failed`.
   */
  forwarded(kind: string, outcome: string): void {
    this.#forwarded.inc({ kind, outcome });
  }

  /** The media type of {@linkcode Metrics.render}'s text. */
  get contentType(): string {
    return this.#registry.contentType;
  }

  /**
   * The exposition: every instrument, its gauges read now.
   *
   * @returns The Prometheus text format.
   */
  render(): Promise<string> {
    return this.#registry.metrics();
  }
}
