/**
 * The 2025-era sessions of the HTTP endpoint: `initialize` opens one (an MCP server and the SDK's
 * `WebStandardStreamableHTTPServerTransport`, under a random `Mcp-Session-Id`), later requests
 * carry its id, GET opens its stream of server-to-client messages (sampling, elicitation,
 * progress, list changes), DELETE closes it. The SDK has no session table, so this is it: each
 * session is bound to the principal that opened it (another principal's request gets 404, as an
 * unknown id would), idle sessions are closed, and their number is capped, in all and per
 * principal (half of the cap by default, so that one principal cannot take every session).
 *
 * Behind a load balancer each replica names itself (`http.replicaId`) at the start of the ids it
 * mints, `<replicaId>.<uuid>`, so that the balancer can send a session's requests to the replica
 * that holds it (docs/DEPLOY.md); a request that reaches another replica anyway is told so.
 *
 * @module
 */
import {
  type AuthInfo,
  isInitializeRequest,
  isJSONRPCNotification,
  readRequestBody,
  WebStandardStreamableHTTPServerTransport,
} from "@modelcontextprotocol/server";
import type { Logger } from "../log.ts";
import { principalShare } from "../principals.ts";
import type { CodeExecutorServer } from "./server.ts";

/** What {@linkcode LegacySessions} needs. */
export interface LegacySessionsOptions {
  /** Sessions open at once (`http.maxSessions`). */
  max: number;
  /** One principal's share of them (`http.principalMaxSessions`; 0: half). */
  principalMax?: number;
  /** Idle time after which a session is closed (`http.sessionIdleMs`). */
  idleMs: number;
  /** The largest request body. */
  maxBodyBytes: number;
  /** This replica's name (`http.replicaId`), the prefix of the session ids it mints. */
  replicaId?: string;
  /** Builds the MCP server of a new session. */
  create: () => CodeExecutorServer;
  /** Where session events are reported. */
  log: Logger;
}

interface Session {
  transport: WebStandardStreamableHTTPServerTransport;
  server: CodeExecutorServer;
  principal: string;
  lastSeen: number;
}

/** A replica name at the start of a session id, as `http.replicaId` allows them. */
const REPLICA_PREFIX = /^([A-Za-z0-9_-]{1,63})\./;

/**
 * The replica a session id names as the one that minted it.
 *
 * @param id An `Mcp-Session-Id`.
 * @returns The `http.replicaId` before its first `.`, or undefined for an id without one.
 */
export function replicaOfSession(id: string): string | undefined {
  return REPLICA_PREFIX.exec(id)?.[1];
}

/** A JSON-RPC error response with an HTTP status, as the SDK's transport answers. */
export function rpcError(status: number, code: number, message: string): Response {
  return Response.json({ jsonrpc: "2.0", error: { code, message }, id: null }, { status });
}

/** The open 2025-era sessions of one HTTP endpoint. */
export class LegacySessions {
  #options: LegacySessionsOptions;
  #sessions = new Map<string, Session>();
  #sweeper: ReturnType<typeof setInterval> | undefined;
  #closed = false;

  /**
   * Creates an empty set of sessions; the idle sweep starts with the first session.
   *
   * @param options The cap, the idle time, the body limit and the server factory.
   */
  constructor(options: LegacySessionsOptions) {
    this.#options = options;
  }

  /** Number of open sessions. */
  get size(): number {
    return this.#sessions.size;
  }

  /** Whether a session with this id is open (for any principal). */
  has(id: string): boolean {
    return this.#sessions.has(id);
  }

  /** The MCP servers of the open sessions (to tell them the tool list changed). */
  servers(): CodeExecutorServer[] {
    return [...this.#sessions.values()].map((session) => session.server);
  }

  /**
   * Serves one 2025-era request: a request of an open session, or an `initialize` that opens one.
   *
   * @param request The HTTP request.
   * @param authInfo Its principal (`clientId`).
   * @param parsedBody Its body, already read and parsed, when it was JSON.
   * @returns The response.
   * @internal It takes the MCP SDK's type, which `deno doc --lint` takes for a private one
   * (denoland/deno#27364); the SDK documents it.
   */
  async handle(request: Request, authInfo: AuthInfo, parsedBody?: unknown): Promise<Response> {
    if (!["GET", "POST", "DELETE"].includes(request.method)) {
      // As the SDK's transport answers within a session: a session id would not help.
      const refused = rpcError(405, -32000, "Method not allowed: use POST, GET or DELETE");
      refused.headers.set("Allow", "GET, POST, DELETE");
      return refused;
    }
    const id = request.headers.get("mcp-session-id");
    if (id !== null) {
      const session = this.#sessions.get(id);
      // Another principal's session is as unknown to the caller as one that never existed.
      if (!session || session.principal !== authInfo.clientId) {
        return rpcError(404, -32001, this.#notFound(id));
      }
      session.lastSeen = Date.now();
      return await session.transport.handleRequest(request, { authInfo, parsedBody });
    }
    if (request.method !== "POST") {
      return rpcError(400, -32000, "Bad Request: Mcp-Session-Id header is required");
    }
    let body = parsedBody;
    if (body === undefined) {
      const read = await readRequestBody(request.clone(), this.#options.maxBodyBytes);
      if (read.tooLarge) return rpcError(413, -32000, "Payload Too Large");
      try {
        body = JSON.parse(read.text);
      } catch {
        return rpcError(400, -32700, "Parse error: the body is not JSON");
      }
    }
    if (!isInitializeRequest(body)) {
      return rpcError(400, -32000, "Bad Request: Mcp-Session-Id header is required");
    }
    if (this.#closed) return rpcError(503, -32000, "The server is shutting down");
    if (this.#sessions.size >= this.#options.max) {
      return rpcError(
        503,
        -32000,
        `Too many sessions: ${this.#options.max} are open (http.maxSessions); close one (DELETE) or retry later`,
      );
    }
    const share = principalShare(
      authInfo.clientId,
      this.#options.max,
      this.#options.principalMax ?? 0,
    );
    const own =
      [...this.#sessions.values()].filter((s) => s.principal === authInfo.clientId).length;
    if (own >= share) {
      return rpcError(
        503,
        -32000,
        `Too many sessions of yours: ${own} are open, your share of http.maxSessions (http.principalMaxSessions ${share}); close one (DELETE) or retry later`,
      );
    }
    return await this.#open(request, authInfo, body);
  }

  async #open(request: Request, authInfo: AuthInfo, body: unknown): Promise<Response> {
    const server = this.#options.create();
    const principal = authInfo.clientId;
    const transport: WebStandardStreamableHTTPServerTransport =
      new WebStandardStreamableHTTPServerTransport({
        sessionIdGenerator: () => {
          const uuid = crypto.randomUUID();
          return this.#options.replicaId ? `${this.#options.replicaId}.${uuid}` : uuid;
        },
        maxRequestBodySize: this.#options.maxBodyBytes,
        onsessioninitialized: (id) => {
          this.#sessions.set(id, { transport, server, principal, lastSeen: Date.now() });
          this.#startSweeper();
          this.#options.log.debug(`http: session ${id} opened by ${principal}`);
        },
        onsessionclosed: (id) => this.#forget(id),
      });
    // Set before connect: the SDK wraps an onclose that exists then, and replacing it afterwards
    // would drop the SDK's own handling (aborting the handlers in flight).
    transport.onclose = () => {
      if (transport.sessionId) this.#forget(transport.sessionId);
      void server.server.close().catch(() => {});
    };
    await server.server.connect(transport);
    // A cancelled request gets no response (the spec says so), and the SDK closes a request's
    // event stream only after its response: the stream stayed open, with keep-alives, until the
    // session ended. Closed here once the cancellation is delivered. (A 2025-03-26 batch shares
    // one stream: its other requests' answers would be cut off; clients do not batch any more.)
    const deliver = transport.onmessage;
    transport.onmessage = (message, extra) => {
      deliver?.(message, extra);
      if (isJSONRPCNotification(message) && message.method === "notifications/cancelled") {
        const requestId = (message.params as { requestId?: string | number } | undefined)
          ?.requestId;
        if (requestId !== undefined) transport.closeSSEStream(requestId);
      }
    };
    return await transport.handleRequest(request, { authInfo, parsedBody: body });
  }

  /**
   * Why a session id is not served here. An id minted by another replica says so (the balancer
   * routed it wrongly, or its replica is gone); the caller learns nothing of this replica's
   * sessions either way, and nothing of the id but a replica name it sent itself.
   */
  #notFound(id: string): string {
    const own = this.#options.replicaId;
    const owner = replicaOfSession(id);
    if (own && owner && owner !== own) {
      return `Session not found: it was opened on replica "${owner}" and this is replica "${own}" (route Mcp-Session-Id by its prefix: docs/DEPLOY.md); initialize a new session`;
    }
    return "Session not found: initialize a new session";
  }

  #forget(id: string): void {
    if (this.#sessions.delete(id)) this.#options.log.debug(`http: session ${id} closed`);
    if (this.#sessions.size === 0) this.#stopSweeper();
  }

  #startSweeper(): void {
    if (this.#sweeper !== undefined) return;
    this.#sweeper = setInterval(() => {
      const now = Date.now();
      for (const [id, session] of this.#sessions) {
        if (now - session.lastSeen < this.#options.idleMs) continue;
        this.#options.log.info(`http: closing session ${id}, idle past http.sessionIdleMs`);
        this.#sessions.delete(id);
        void session.transport.close().catch(() => {});
      }
      if (this.#sessions.size === 0) this.#stopSweeper();
    }, Math.min(this.#options.idleMs, 60_000));
  }

  #stopSweeper(): void {
    clearInterval(this.#sweeper);
    this.#sweeper = undefined;
  }

  /** Closes every session (their handlers in flight are aborted) and refuses new ones. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#stopSweeper();
    const open = [...this.#sessions.values()];
    this.#sessions.clear();
    await Promise.all(open.map((session) => session.transport.close().catch(() => {})));
  }
}
