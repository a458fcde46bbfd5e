/**
 * `serve`: the MCP server, on stdio (the default) or over Streamable HTTP (`--http`).
 *
 * @module
 */
import { serveStdio } from "@modelcontextprotocol/server/stdio";
import { personalDataFinder } from "../privacy/redaction.ts";
import { cacheDir, defaultAuditPath } from "../config/paths.ts";
import { loadSettings, type Settings } from "../config/settings.ts";
import { configWarnings, discoverUpstreams } from "../config/upstream.ts";
import { Executor } from "../exec/executor.ts";
import { createLogger, flushLogs, type Logger } from "../log.ts";
import { Metrics } from "../metrics.ts";
import { startHttpEndpoint } from "../server/http.ts";
import { defaultReplicaId } from "../server/forwarding.ts";
import { openSharedState, type SharedState } from "../state/shared_state.ts";
import { type CodeExecutorServer, createServer } from "../server/server.ts";
import { LineStdioServerTransport } from "../server/stdio_transport.ts";
import { type Hub, openHub } from "../upstream/hub.ts";
import { AuditLog } from "../policy/audit.ts";
import { SkillStore } from "../skills/store.ts";

/** Options of {@linkcode serve}. */
export interface ServeOptions {
  /** Upstream MCP config files given with `--config`. */
  configPaths: string[];
  /** Serve Streamable HTTP instead of stdio. */
  http?: boolean;
  /** `--host`: overrides `http.host`. */
  host?: string;
  /** `--port`: overrides `http.port`. */
  port?: number;
}

/** Everything a transport serves from. */
interface Services {
  settings: Settings;
  log: Logger;
  hub: Hub;
  executor: Executor;
  audit: AuditLog | undefined;
  /** Saved skills (served as MCP Agent Skills, found by search_tools). */
  skills: SkillStore;
  /** What replicas share: in the store of `state.url`, or in this process. */
  shared: SharedState;
  /** Called when the upstream tool lists change. */
  onChange: { handler: () => void };
  /** What `/metrics` serves (`serve --http` unless `http.metrics` is `off`). */
  metrics?: Metrics;
}

/** Routes library output to the logger: stdout is the protocol, and stderr must not block. */
function captureConsole(log: Logger): void {
  const forward = (write: (message: string) => void) => (...args: unknown[]) =>
    write(args.map((a) => typeof a === "string" ? a : Deno.inspect(a)).join(" "));
  console.log = console.info = forward(log.info);
  console.debug = forward(log.debug);
  console.warn = forward(log.warn);
  console.error = forward(log.error);
}

async function openServices(options: ServeOptions, log: Logger): Promise<Services> {
  const { settings: loaded, sources } = await loadSettings();
  const settings = {
    ...loaded,
    http: {
      ...loaded.http,
      ...(options.host ? { host: options.host } : {}),
      ...(options.port !== undefined ? { port: options.port } : {}),
      // Replicas sharing a store forward to each other by name: each needs its own.
      ...(loaded.state.url !== undefined && !loaded.http.replicaId
        ? { replicaId: defaultReplicaId() }
        : {}),
    },
  };
  log.info(`settings from ${sources.length ? sources.join(", ") : "defaults"}`);
  const metrics = options.http && settings.http.metrics !== "off"
    ? await Metrics.create()
    : undefined;
  // First: a store that cannot be reached stops the start before anything is spawned.
  const shared = await openSharedState(settings, { onRoundTrip: metrics?.storeRoundTrip });
  if (shared.store.kind !== "memory") {
    log.info(`shared state: ${shared.store.where}`);
    metrics?.watch({ store: shared.store });
  }
  try {
    return await openWithState(options, settings, log, { shared, metrics });
  } catch (error) {
    await shared.close();
    throw error;
  }
}

async function openWithState(
  options: ServeOptions,
  settings: Settings,
  log: Logger,
  { shared, metrics }: { shared: SharedState; metrics: Metrics | undefined },
): Promise<Services> {
  const upstream = await discoverUpstreams({ configPaths: options.configPaths });
  for (const broken of upstream.broken) log.warn(broken.error);
  for (const warning of configWarnings(upstream)) log.warn(warning);
  const skippedFiles = upstream.sources.filter((source) => source.error).length;
  if (upstream.servers.length === 0 && upstream.broken.length === 0 && skippedFiles === 0) {
    log.warn(
      "No MCP servers are configured: run_typescript works, but there is nothing to call. Run `code-executor setup` (from a checkout: `deno task setup`) to find the servers your MCP clients use and put Code Executor in front of them, or pass --config mcp.json (see docs/setup.md)",
    );
  } else {
    log.info(`upstream servers: ${upstream.servers.map((s) => s.name).join(", ")}`);
  }
  const onChange = { handler: () => {} };
  const hub = await openHub(upstream, settings, {
    log,
    cacheDir: cacheDir(),
    onChange: () => onChange.handler(),
    metrics,
  });
  const audit = settings.audit.enabled
    ? new AuditLog({
      path: settings.audit.path ?? defaultAuditPath(),
      maxBytes: settings.audit.maxBytes,
      maxFiles: settings.audit.maxFiles,
      log,
    })
    : undefined;
  if (audit) log.info(`audit log: ${audit.path}`);
  const skills = new SkillStore(settings.skills, {
    log,
    personalData: personalDataFinder(settings.privacy),
    shared: shared.store.kind === "memory" ? undefined : shared.skills,
  });
  const executor = await Executor.create(settings, { log, hub, audit, skills, shared, metrics });
  return { settings, log, hub, executor, audit, skills, shared, onChange, metrics };
}

/** Stops the executor, the upstream servers and the logs, then exits. */
async function shutDown(services: Services): Promise<never> {
  await services.executor.close();
  await services.hub.close();
  await services.shared.close().catch(() => {});
  await services.audit?.flush();
  await flushLogs();
  Deno.exit(0);
}

function serveOnStdio(services: Services): void {
  const { settings, log, executor, hub, skills } = services;
  const live = new Set<CodeExecutorServer>();
  services.onChange.handler = () => live.forEach((s) => s.refresh());
  // Listed now, so that run_typescript's description has every server's tool count (or says it
  // is loading, or down) from the client's first tools/list on; each listing that ends updates
  // it, and the client is told. With the tool cache of an earlier start, nothing is started.
  void hub.catalog.ensure().catch(() => {});
  let stopping: Promise<never> | undefined;
  const stop = (why: string): Promise<never> => {
    stopping ??= (async () => {
      log.info(`shutting down (${why})`);
      await handle.close().catch(() => {});
      return await shutDown(services);
    })();
    return stopping;
  };
  const handle = serveStdio(() => {
    const created = createServer({ executor, hub, skills });
    live.add(created);
    created.server.server.onclose = () => live.delete(created);
    return created.server;
  }, {
    transport: new LineStdioServerTransport({
      // Room for the largest code the settings allow, JSON-escaped, and never under the SDK's
      // own 10 MiB.
      maxLineBytes: Math.max(10 * 1024 * 1024, 6 * settings.limits.maxCodeBytes + 64 * 1024),
      tooLargeHint:
        `code may be at most limits.maxCodeBytes (${settings.limits.maxCodeBytes} bytes); send smaller code and read large data through tools or files`,
      onClosed: () => void stop("client disconnected"),
    }),
    onerror: (error) => log.warn(`protocol: ${error.message}`),
  });
  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    Deno.addSignalListener(signal, () => void stop(signal));
  }
  log.info("ready on stdio");
}

async function serveOnHttp(services: Services): Promise<void> {
  const { settings, log, executor, hub, skills, shared } = services;
  const ready = () =>
    hub.catalog.summary().every((server) => server.tools !== undefined || server.error);
  // List every server now, so that /readyz turns ready without waiting for a first call.
  void hub.catalog.ensure().catch(() => {});
  const endpoint = await startHttpEndpoint({
    executor,
    hub,
    skills,
    settings,
    env: Deno.env.toObject(),
    log,
    ready,
    shared,
    metrics: services.metrics,
  });
  services.onChange.handler = () => endpoint.toolsChanged();
  let stopping: Promise<never> | undefined;
  const stop = (why: string): Promise<never> => {
    stopping ??= (async () => {
      // Refuse new requests, let the runs in flight finish within http.drainMs, then stop the
      // rest: they end with a ShuttingDown error, which their clients still receive.
      log.info(
        `shutting down (${why}): draining ${executor.running} runs for up to ${settings.http.drainMs} ms`,
      );
      endpoint.stopAccepting();
      const drained = await executor.settle(settings.http.drainMs);
      if (!drained) log.warn(`stopping ${executor.running} runs still in flight after the drain`);
      await executor.close();
      await endpoint.close();
      return await shutDown(services);
    })();
    return stopping;
  };
  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    Deno.addSignalListener(signal, () => void stop(signal));
  }
  const replica = settings.http.replicaId ? `, replica ${settings.http.replicaId}` : "";
  if (endpoint.metricsUrl) {
    log.info(`metrics on ${endpoint.metricsUrl.href} (no auth, loopback only)`);
  }
  log.info(`ready on ${endpoint.url.href} (auth: ${endpoint.auth}${replica})`);
}

/**
 * Runs the MCP server until the client disconnects (stdio) or a signal arrives, then kills every
 * sandbox child, closes the upstream servers and exits.
 *
 * @param options The command line options.
 * @returns Once the server is running; the process exits when it stops.
 * @throws {TypeError} When HTTP cannot be served as configured (say, beyond loopback without auth).
 */
export async function serve(options: ServeOptions): Promise<void> {
  const log = createLogger();
  captureConsole(log);
  const services = await openServices(options, log);
  try {
    if (options.http) await serveOnHttp(services);
    else serveOnStdio(services);
  } catch (error) {
    await services.executor.close();
    await services.hub.close();
    await services.shared.close().catch(() => {});
    throw error;
  }
  await new Promise(() => {});
}
