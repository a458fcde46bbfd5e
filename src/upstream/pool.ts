/**
 * MCP clients to every configured upstream server: connected lazily and in parallel, with
 * per-call timeouts, reconnection with backoff after a crash, and isolation so that one broken
 * server never blocks the others. A stdio server's output is read by `message_lines.ts`, and it
 * starts with the environment of `curated_env.ts`.
 *
 * @module
 */
import {
  Client,
  ProtocolError,
  SdkError,
  SdkErrorCode,
  SSEClientTransport,
  StreamableHTTPClientTransport,
  type Transport,
} from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { dieWithParent } from "../parent_death.ts";
import type { UpstreamServerConfig } from "../config/server_entry.ts";
import type { Logger } from "../log.ts";
import type { Metrics, UpstreamOutcome } from "../metrics.ts";
import { SERVER_NAME, SERVER_VERSION } from "../version.ts";
import { describeConnectError } from "./connect_errors.ts";
import { curatedEnv } from "./curated_env.ts";
import { MessageLines, UpstreamMessageTooLarge } from "./message_lines.ts";
import { StderrTail } from "./stderr_tail.ts";

/** A tool as listed by an upstream server. */
export interface UpstreamTool {
  /** The tool's name, verbatim. */
  name: string;
  /** Its description, if any. */
  description?: string;
  /** Its input JSON Schema. */
  inputSchema: Record<string, unknown>;
  /** Its output JSON Schema, if declared. */
  outputSchema?: Record<string, unknown>;
  /** Its server's hints that approvals read (booleans only; anything else is dropped). */
  annotations?: ToolHints;
}

/** The annotations of a tool that decide whether a call needs a person's approval. */
export interface ToolHints {
  /** The server says the tool changes nothing. */
  readOnlyHint?: boolean;
  /** The server says the tool may destroy or overwrite data. */
  destructiveHint?: boolean;
}

function toolHints(raw: unknown): ToolHints | undefined {
  if (typeof raw !== "object" || raw === null) return undefined;
  const { readOnlyHint, destructiveHint } = raw as Record<string, unknown>;
  const hints: ToolHints = {};
  if (typeof readOnlyHint === "boolean") hints.readOnlyHint = readOnlyHint;
  if (typeof destructiveHint === "boolean") hints.destructiveHint = destructiveHint;
  return Object.keys(hints).length > 0 ? hints : undefined;
}

/** The content of an upstream `tools/call` result that matters to callers. */
export interface UpstreamCallResult {
  /** Content blocks. */
  content: Array<Record<string, unknown>>;
  /** Structured output, when the tool declares it. */
  structuredContent?: unknown;
  /** Whether the tool reported a failure. */
  isError?: boolean;
}

/** The state of one upstream connection, as `doctor` and the catalog report it. */
export interface UpstreamStatus {
  /** Server name. */
  name: string;
  /** `idle` (not yet connected), `ready`, or `failed` with `error`. */
  state: "idle" | "connecting" | "ready" | "failed";
  /**
   * Why the last connection attempt failed, on the first line; a stdio server that wrote to
   * stderr before it died has the last of those lines (redacted) on the lines after.
   */
  error?: string;
  /** How long the last successful connection took. */
  connectMs?: number;
}

/** Options of {@linkcode UpstreamPool}. */
export interface UpstreamPoolOptions {
  /** Where upstream stderr and connection problems go. */
  log: Logger;
  /** Default time allowed for connecting and listing. */
  connectTimeoutMs?: number;
  /** Default time allowed for one tool call. */
  callTimeoutMs?: number;
  /** Environment to pick the curated variables for stdio servers from. */
  env?: Record<string, string>;
  /** Called when a server reports that its tool list changed. */
  onToolsChanged?: (server: string) => void;
  /**
   * The largest message read from a stdio server; a larger one drops the connection with an
   * {@linkcode UpstreamMessageTooLarge}. Default 11 MiB.
   */
  maxMessageBytes?: number;
  /** Where tool calls are timed (`/metrics`). */
  metrics?: Metrics;
}

type ResolvedPoolOptions = UpstreamPoolOptions & {
  connectTimeoutMs: number;
  callTimeoutMs: number;
  maxMessageBytes: number;
};

const MAX_BACKOFF_MS = 30_000;
const FIRST_BACKOFF_MS = 250;

/** One upstream server: its client, its state and its reconnection schedule. */
class UpstreamConnection {
  readonly config: UpstreamServerConfig;
  #options: ResolvedPoolOptions;
  #client: Client | undefined;
  #connecting: Promise<Client> | undefined;
  #failures = 0;
  #retryAt = 0;
  #closed = false;
  /** Why a client's transport gave up, when it did so by itself. */
  #fatal = new WeakMap<Client, Error>();
  /** The stderr of the process the last transport started, and when that stream ended. */
  #stderr: { tail: StderrTail; ended: Promise<void> } | undefined;
  /** Set once the server turned out to be Code Executor itself: it is never connected again. */
  #self: string | undefined;
  status: UpstreamStatus;

  constructor(config: UpstreamServerConfig, options: ResolvedPoolOptions) {
    this.config = config;
    this.#options = options;
    this.status = { name: config.name, state: "idle" };
  }

  #transport(): Transport {
    const config = this.config;
    if (config.transport === "stdio") {
      const env = curatedEnv(this.#options.env ?? Deno.env.toObject(), config.env);
      // The kernel kills the server with us, even if we are SIGKILLed (see parent_death.ts).
      const { command, args } = dieWithParent(config.command!, config.args ?? [], {
        path: env.PATH,
        cwd: config.cwd,
      });
      const transport = new StdioClientTransport({
        command,
        args,
        env,
        cwd: config.cwd,
        stderr: "pipe",
      });
      // The SDK reads through this private field; see MessageLines for why it is replaced.
      (transport as unknown as { _readBuffer: MessageLines })._readBuffer = new MessageLines(
        config.name,
        this.#options.maxMessageBytes,
      );
      const tail = new StderrTail({
        onLine: (line) => this.#options.log.debug(`[${config.name}] ${line}`),
      });
      const stream = transport.stderr;
      stream?.on("data", (chunk: Uint8Array) => tail.push(chunk));
      const ended = new Promise<void>((resolve) => {
        stream?.once("end", resolve);
        stream?.once("close", resolve);
      });
      this.#stderr = { tail, ended };
      return transport;
    }
    const requestInit = { headers: config.headers ?? {} };
    const url = new URL(config.url!);
    return config.transport === "sse"
      ? new SSEClientTransport(url, { requestInit })
      : new StreamableHTTPClientTransport(url, { requestInit });
  }

  /** Returns a connected client, connecting (or reconnecting) first when needed. */
  client(): Promise<Client> {
    if (this.#client) return Promise.resolve(this.#client);
    if (this.#connecting) return this.#connecting;
    if (this.#closed) return Promise.reject(new Error(`Server "${this.config.name}" is closed`));
    if (this.#self) return Promise.reject(new Error(this.#self));
    const wait = this.#retryAt - Date.now();
    if (wait > 0) {
      const reason = this.status.error ?? "";
      const retry = `next reconnect attempt in ${Math.ceil(wait / 100) / 10} s`;
      // A reason of several lines ends in the server's own words and the command to run it by
      // hand: the retry time goes on a line after them, where it cannot read as one of them.
      return Promise.reject(
        new Error(
          `Server "${this.config.name}" is unavailable: ${reason}${
            reason.includes("\n") ? `\n(${retry})` : `; ${retry}`
          }`,
        ),
      );
    }
    this.#connecting = this.#connect().finally(() => this.#connecting = undefined);
    return this.#connecting;
  }

  async #connect(): Promise<Client> {
    this.status = { name: this.config.name, state: "connecting" };
    const started = performance.now();
    const onToolsChanged = this.#options.onToolsChanged;
    const client = new Client({ name: SERVER_NAME, version: SERVER_VERSION }, {
      listChanged: onToolsChanged
        ? { tools: { autoRefresh: false, onChanged: () => onToolsChanged(this.config.name) } }
        : undefined,
    });
    const transport = this.#transport();
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      await Promise.race([
        client.connect(transport),
        new Promise((_, reject) => {
          timer = setTimeout(
            () =>
              reject(
                new Error(`no answer to initialize within ${this.#options.connectTimeoutMs} ms`),
              ),
            this.#options.connectTimeoutMs,
          );
        }),
      ]);
    } catch (error) {
      await client.close().catch(() => {});
      await transport.close().catch(() => {});
      this.#failures++;
      this.#retryAt = Date.now() +
        Math.min(MAX_BACKOFF_MS, FIRST_BACKOFF_MS * 2 ** (this.#failures - 1));
      const reason = describeConnectError(error as Error, this.config, await this.#lastWords());
      this.status = { name: this.config.name, state: "failed", error: reason };
      this.#options.log.warn(`Cannot connect to MCP server "${this.config.name}": ${reason}`);
      throw new Error(`Server "${this.config.name}" is unavailable: ${reason}`);
    } finally {
      clearTimeout(timer);
    }
    if (this.#closed) {
      await client.close().catch(() => {});
      throw new Error(`Server "${this.config.name}" is closed`);
    }
    const info = client.getServerVersion();
    if (info?.name === SERVER_NAME) {
      await client.close().catch(() => {});
      // Listing its tools would offer the model run_typescript inside run_typescript, and every
      // call through it would take a second run slot of the same limits.
      const reason =
        `it is Code Executor itself (its initialize answer names "${info.name}" ${info.version}), which does not call itself`;
      this.#self = `Skipped MCP server "${this.config.name}" in ${this.config.source}: ${reason}`;
      this.status = { name: this.config.name, state: "failed", error: `skipped: ${reason}` };
      this.#options.log.warn(this.#self);
      throw new Error(this.#self);
    }
    client.onerror = (error) => {
      if (!(error instanceof UpstreamMessageTooLarge)) return;
      // The transport has closed itself; calls must not be sent to it while its process exits.
      this.#fatal.set(client, error);
      if (this.#client === client) this.#client = undefined;
      this.status = { name: this.config.name, state: "idle", error: error.message };
      this.#options.log.warn(`${error.message}; the connection was dropped`);
    };
    client.onclose = () => {
      if (this.#client !== client) return;
      this.#client = undefined;
      if (!this.#closed) {
        this.status = { name: this.config.name, state: "idle", error: "the connection closed" };
        this.#options.log.warn(
          `MCP server "${this.config.name}" disconnected; it reconnects on next use`,
        );
      }
    };
    this.#failures = 0;
    this.#retryAt = 0;
    this.#client = client;
    this.status = {
      name: this.config.name,
      state: "ready",
      connectMs: Math.round(performance.now() - started),
    };
    return client;
  }

  /**
   * The last lines the process wrote to stderr, once the stream has ended; a process that left
   * a child holding it gets a moment, not a wait.
   */
  async #lastWords(): Promise<string[]> {
    const stderr = this.#stderr;
    if (!stderr) return [];
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([stderr.ended, new Promise((resolve) => timer = setTimeout(resolve, 250))]);
    clearTimeout(timer);
    return stderr.tail.lines();
  }

  /** Why a client's transport closed itself, if it did. */
  fatalError(client: Client): Error | undefined {
    return this.#fatal.get(client);
  }

  /** Drops a client whose transport is broken, so that the next use reconnects. */
  async reset(client: Client): Promise<void> {
    if (this.#client === client) this.#client = undefined;
    await client.close().catch(() => {});
  }

  async close(): Promise<void> {
    this.#closed = true;
    const client = this.#client ?? await this.#connecting?.catch(() => undefined);
    this.#client = undefined;
    await client?.close().catch(() => {});
  }
}

/**
 * The set of upstream connections. Each server is connected on first use; a failure affects
 * only that server.
 */
export class UpstreamPool {
  #connections = new Map<string, UpstreamConnection>();
  #options: ResolvedPoolOptions;

  /**
   * Sets up one connection per server; none is opened until the server is first used.
   *
   * @param servers The configured servers.
   * @param options Logging, timeouts and change notification.
   */
  constructor(servers: UpstreamServerConfig[], options: UpstreamPoolOptions) {
    this.#options = {
      connectTimeoutMs: 30_000,
      callTimeoutMs: 60_000,
      maxMessageBytes: 11 * 1024 * 1024,
      ...options,
    };
    for (const server of servers) {
      this.#connections.set(server.name, new UpstreamConnection(server, this.#options));
    }
  }

  /** Names of the configured servers, sorted. */
  get names(): string[] {
    return [...this.#connections.keys()].sort();
  }

  /**
   * Returns a server's configuration.
   *
   * @param name The server name.
   * @returns Its configuration, or undefined when there is no such server.
   */
  config(name: string): UpstreamServerConfig | undefined {
    return this.#connections.get(name)?.config;
  }

  /** The status of every server, sorted by name. */
  statuses(): UpstreamStatus[] {
    return this.names.map((name) => this.#connections.get(name)!.status);
  }

  #get(name: string): UpstreamConnection {
    const connection = this.#connections.get(name);
    if (!connection) throw new Error(`No MCP server named "${name}" is configured`);
    return connection;
  }

  /**
   * Lists one server's tools, connecting first if needed.
   *
   * @param name The server name.
   * @returns Its tools.
   * @throws {Error} When the server cannot be reached.
   */
  async listTools(name: string): Promise<UpstreamTool[]> {
    const connection = this.#get(name);
    const client = await connection.client();
    try {
      const { tools } = await client.listTools(undefined, {
        timeout: this.#options.connectTimeoutMs,
      });
      return tools.map((tool) => ({
        name: tool.name,
        description: tool.description,
        inputSchema: tool.inputSchema as Record<string, unknown>,
        outputSchema: tool.outputSchema as Record<string, unknown> | undefined,
        annotations: toolHints(tool.annotations),
      }));
    } catch (error) {
      await connection.reset(client);
      throw new Error(`Cannot list the tools of "${name}": ${(error as Error).message}`);
    }
  }

  /**
   * Lists one server's tools exactly as the server sends them (for measuring their size).
   *
   * @param name The server name.
   * @returns The `tools/list` result.
   */
  async listToolsRaw(name: string): Promise<Record<string, unknown>> {
    const client = await this.#get(name).client();
    return await client.listTools(undefined, { timeout: this.#options.connectTimeoutMs }) as Record<
      string,
      unknown
    >;
  }

  /**
   * Calls a tool on a server.
   *
   * @param server The server name.
   * @param tool The tool name, verbatim.
   * @param args The arguments, already validated.
   * @param options Timeout and cancellation.
   * @returns The upstream result.
   * @throws {Error} When the server is unreachable, the call times out or the connection breaks.
   */
  async callTool(
    server: string,
    tool: string,
    args: Record<string, unknown>,
    options: { timeoutMs?: number; signal?: AbortSignal } = {},
  ): Promise<UpstreamCallResult> {
    const started = performance.now();
    let outcome: UpstreamOutcome = "failed";
    try {
      const result = await this.#call({ server, tool, args, options }, false);
      outcome = result.isError ? "tool_error" : "ok";
      return result;
    } finally {
      // A name that is not configured is refused before any call: not a server to have series.
      if (this.#connections.has(server)) {
        this.#options.metrics?.upstreamCall(server, outcome, (performance.now() - started) / 1000);
      }
    }
  }

  /** One try of {@linkcode UpstreamPool.callTool}; `retried` once a new connection was made. */
  async #call(
    call: {
      server: string;
      tool: string;
      args: Record<string, unknown>;
      options: { timeoutMs?: number; signal?: AbortSignal };
    },
    retried: boolean,
  ): Promise<UpstreamCallResult> {
    const { server, tool, args, options } = call;
    const connection = this.#get(server);
    const client = await connection.client();
    const timeout = options.timeoutMs ?? connection.config.timeoutMs ?? this.#options.callTimeoutMs;
    try {
      const result = await client.callTool({ name: tool, arguments: args }, {
        timeout,
        signal: options.signal,
      });
      return result as unknown as UpstreamCallResult;
    } catch (error) {
      const fatal = connection.fatalError(client);
      if (fatal) throw fatal;
      if (error instanceof SdkError && error.code === SdkErrorCode.NotConnected && !retried) {
        // Nothing was sent: a transport that closed itself a moment ago. Try a new connection.
        await connection.reset(client);
        return await this.#call(call, true);
      }
      const message = (error as Error).message ?? String(error);
      // First: the SDK reports a cancel by the caller's signal with the timeout's code too.
      if (options.signal?.aborted) throw new Error("The call was cancelled");
      if (error instanceof SdkError && error.code === SdkErrorCode.RequestTimeout) {
        throw new Error(`"${server}" did not answer within ${timeout} ms`);
      }
      // A JSON-RPC error is the server's answer. Anything else is the transport failing: a dead
      // process, a refused connection, or an HTTP session that a restarted server no longer
      // knows; only a new connection recovers from those.
      if (!(error instanceof ProtocolError)) {
        await connection.reset(client);
        throw new Error(
          `The connection to "${server}" broke during the call (${message}); it reconnects on next use`,
        );
      }
      throw error;
    }
  }

  /** Closes every connection (stdio servers are terminated). */
  async close(): Promise<void> {
    await Promise.all([...this.#connections.values()].map((c) => c.close()));
  }
}
