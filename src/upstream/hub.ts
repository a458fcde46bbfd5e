/**
 * The upstream hub: the configured servers' connections, their tool catalog and the shared
 * per-server rate limiter, built from the discovered configuration.
 *
 * @module
 */
import type { Settings } from "../config/settings.ts";
import type { UpstreamConfig } from "../config/upstream.ts";
import type { Logger } from "../log.ts";
import type { Metrics } from "../metrics.ts";
import { RateLimiter } from "../policy/tool_policy.ts";
import { catalogCacheFile, ToolCatalog } from "./catalog.ts";
import { UpstreamPool } from "./pool.ts";

/** The upstream hub an execution talks to. */
export interface Hub {
  /** Upstream connections. */
  pool: UpstreamPool;
  /** The tool catalog. */
  catalog: ToolCatalog;
  /** Per-server call limiter shared by all executions. */
  limiter: RateLimiter;
  /** The configuration it was built from. */
  config: UpstreamConfig;
  /** Closes every upstream connection. */
  close(): Promise<void>;
}

/** Options of {@linkcode openHub}. */
export interface OpenHubOptions {
  /** Where problems and upstream stderr go. */
  log: Logger;
  /** Directory for the tool cache; no disk cache when omitted. */
  cacheDir?: string;
  /** Called when a server's tool list changed. */
  onChange?: () => void;
  /** Where tool calls are timed (`/metrics`). */
  metrics?: Metrics;
}

/**
 * Builds the hub. Nothing is connected yet: servers connect on first use.
 *
 * @param config The discovered upstream configuration.
 * @param settings The admin's settings.
 * @param options Logging, cache and change notification.
 * @returns The hub.
 */
export async function openHub(
  config: UpstreamConfig,
  settings: Settings,
  options: OpenHubOptions,
): Promise<Hub> {
  // The pool reports changes to the catalog, which is built on the pool.
  const late: { catalog?: ToolCatalog } = {};
  const pool = new UpstreamPool(config.servers, {
    log: options.log,
    callTimeoutMs: settings.tools.callTimeoutMs,
    // The text and structuredContent of a result may both carry it: room for both, and JSON.
    maxMessageBytes: 2 * settings.tools.maxResultBytes + 1024 * 1024,
    onToolsChanged: (server) => void late.catalog?.refresh(server),
    metrics: options.metrics,
  });
  const catalog = late.catalog = new ToolCatalog(pool, {
    log: options.log,
    configHash: config.hash,
    cacheFile: options.cacheDir ? catalogCacheFile(options.cacheDir, config.hash) : undefined,
    onChange: options.onChange,
  });
  await catalog.loadCache();
  return {
    pool,
    catalog,
    limiter: new RateLimiter(settings.tools.callsPerMinutePerServer),
    config,
    close: () => pool.close(),
  };
}
