/**
 * `serve`: the stdio MCP server.
 *
 * @module
 */
import { serveStdio } from "@modelcontextprotocol/server/stdio";
import { loadSettings } from "../config/settings.ts";
import { discoverUpstreams } from "../config/upstream.ts";
import { cacheDir, defaultAuditPath } from "../config/paths.ts";
import { Executor } from "../exec/executor.ts";
import { createLogger, flushLogs } from "../log.ts";
import { type CodeExecutorServer, createServer } from "../server/server.ts";
import { LineStdioServerTransport } from "../server/stdio_transport.ts";
import { openHub } from "../upstream/hub.ts";
import { AuditLog } from "../policy/audit.ts";

/** Options of {@linkcode serve}. */
export interface ServeOptions {
  /** Upstream MCP config files given with `--config`. */
  configPaths: string[];
}

/**
 * Runs the MCP server on stdin/stdout until the client disconnects or a signal arrives, then
 * kills every sandbox child, closes the upstream servers and exits.
 *
 * @param options The command line options.
 * @returns Never returns normally: the process exits when the server stops.
 */
export async function serve(options: ServeOptions): Promise<void> {
  const log = createLogger();
  // Libraries must not write to stdout, which carries the protocol, and console's synchronous
  // writes to stderr would block the event loop when nobody reads it: route them to the logger.
  const forward = (write: (message: string) => void) => (...args: unknown[]) =>
    write(args.map((a) => typeof a === "string" ? a : Deno.inspect(a)).join(" "));
  console.log = console.info = forward(log.info);
  console.debug = forward(log.debug);
  console.warn = forward(log.warn);
  console.error = forward(log.error);

  const { settings, sources } = await loadSettings();
  log.info(`settings from ${sources.length ? sources.join(", ") : "defaults"}`);
  const upstream = await discoverUpstreams({ configPaths: options.configPaths });
  for (const broken of upstream.broken) log.warn(broken.error);
  for (const source of upstream.sources) {
    if (source.error) log.warn(`Skipped ${source.path}: ${source.error}`);
  }
  if (upstream.servers.length === 0 && upstream.broken.length === 0) {
    log.warn(
      "No MCP servers are configured: run_typescript works, but there is nothing to call. Run `code-executor setup` (from a checkout: `deno task setup`) to find the servers your MCP clients use and put Code Executor in front of them, or pass --config mcp.json (see README)",
    );
  } else {
    log.info(`upstream servers: ${upstream.servers.map((s) => s.name).join(", ")}`);
  }

  const live = new Set<CodeExecutorServer>();
  const hub = await openHub(upstream, settings, {
    log,
    cacheDir: cacheDir(),
    onChange: () => live.forEach((s) => s.refresh()),
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
  const executor = await Executor.create(settings, { log, hub, audit });

  let stopping: Promise<never> | undefined;
  const stop = (why: string): Promise<never> => {
    stopping ??= (async () => {
      log.info(`shutting down (${why})`);
      await handle.close().catch(() => {});
      await executor.close();
      await hub.close();
      await audit?.flush();
      await flushLogs();
      Deno.exit(0);
    })();
    return stopping;
  };
  const handle = serveStdio(() => {
    const created = createServer({ executor, hub });
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
  await new Promise(() => {});
}
