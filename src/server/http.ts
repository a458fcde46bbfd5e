/**
 * `serve --http`: the MCP endpoint over Streamable HTTP on `Deno.serve`, for both protocol eras
 * at one URL. 2026-07-28 requests are stateless: the SDK's `createMcpHandler` serves each with a
 * server of its own. 2025-era traffic (initialize, `Mcp-Session-Id`, the GET stream, DELETE) goes
 * to {@linkcode LegacySessions}, where sampling, elicitation and progress reach the client through
 * its stream, as over stdio.
 *
 * Before a request reaches either: the request cap, the `Host` and `Origin` checks (DNS
 * rebinding; 403), the OAuth discovery documents, the path, the body deadline and the principal's
 * authentication (401/403). `/healthz` and `/readyz` answer without auth and reveal nothing.
 *
 * Every request is logged at info when it ends (an event stream when it closes): method, path
 * (one this server does not serve as `(other path)`, since it is the caller's text), status,
 * milliseconds, principal and, for refused credentials, the reason (`refused=expired`); never a
 * header, a query string or a token. Until then it counts
 * against `http.maxRequests`; past the cap, new sessions and 2026-era requests get 503, while
 * `/healthz`, `/readyz` and the requests of open sessions are still served. Each principal's
 * requests, its sessions' included, also count against its share (`http.principalMaxRequests`,
 * half the cap by default), so that no principal can fill the cap for the others.
 *
 * @module
 */
import {
  type AuthInfo,
  createMcpHandler,
  hostHeaderValidationResponse,
  isLegacyRequest,
  type McpHttpHandler,
  originValidationResponse,
  readRequestBody,
} from "@modelcontextprotocol/server";
import type { Settings } from "../config/settings.ts";
import type { Logger } from "../log.ts";
import { type Authenticator, authMode, createAuthenticator } from "./http_auth.ts";
import { refusalReason } from "./auth_refusals.ts";
import { isHttpPrincipal, principalShare } from "../principals.ts";
import { LegacySessions, rpcError } from "./http_sessions.ts";
import { type CodeExecutorServer, createServer, type ServerDeps } from "./server.ts";

/** What the endpoint needs from the rest of the server. */
export interface HttpEndpointOptions extends ServerDeps {
  /** The admin's settings (`http`, `limits`). */
  settings: Settings;
  /** The environment (`CODE_EXECUTOR_HTTP_TOKEN`). */
  env: Record<string, string | undefined>;
  /** Where requests and problems are logged. */
  log: Logger;
  /** Whether the upstream catalog is loaded, for `/readyz`. */
  ready: () => boolean;
}

/** A listening endpoint. */
export interface HttpEndpoint {
  /** The URL of the MCP endpoint as bound (`http://127.0.0.1:3333/mcp`). */
  url: URL;
  /** The authentication in force. */
  auth: Authenticator["mode"];
  /** Tells every open session and stream that the tool list changed. */
  toolsChanged(): void;
  /** Stops accepting requests (new ones get 503), for a drain. */
  stopAccepting(): void;
  /** Requests being handled, open streams included. */
  readonly inFlight: number;
  /** Closes every session and stream and stops listening. */
  close(): Promise<void>;
}

const LOOPBACK_NAMES = ["localhost", "127.0.0.1", "[::1]"];

/** Whether a bind address is loopback only. */
export function isLoopback(host: string): boolean {
  const bare = host.replace(/^\[|\]$/g, "");
  return bare === "localhost" || bare === "::1" || /^127(\.\d{1,3}){3}$/.test(bare);
}

function isWildcard(host: string): boolean {
  return host === "0.0.0.0" || host === "::" || host === "[::]";
}

/**
 * A host name as URLs and the SDK's Host and Origin checks write it: IPv6 in brackets, no port.
 *
 * @param host A host name or address (`::1` or `[::1]`).
 * @returns The name, IPv6 in brackets.
 */
export function hostName(host: string): string {
  return host.includes(":") && !host.startsWith("[") ? `[${host}]` : host;
}

/** The room a request needs: the largest code, JSON-escaped, and never under 10 MiB. */
function defaultBodyBytes(settings: Settings): number {
  return Math.max(10 * 1024 * 1024, 6 * settings.limits.maxCodeBytes + 64 * 1024);
}

/**
 * The Host names and Origin hosts accepted. Loopback binds accept the localhost names; a
 * wildcard bind (0.0.0.0) with nothing configured checks no Host, since the name clients use is
 * unknown (auth is required there); Origin is always checked.
 *
 * @param settings The admin's settings (`http`).
 * @returns `hosts`: the Host names accepted, undefined when the Host header is not checked;
 *   `origins`: the Origin hosts accepted.
 */
export function hostAllowlists(settings: Settings): { hosts?: string[]; origins: string[] } {
  const http = settings.http;
  const own = isWildcard(http.host) ? [] : [hostName(http.host)];
  if (http.publicUrl) own.push(hostName(new URL(http.publicUrl).hostname));
  const local = isLoopback(http.host) ? LOOPBACK_NAMES : [];
  const hosts = [...new Set([...own, ...local, ...http.allowedHosts.map(hostName)])];
  const origins = [...new Set([...own, ...local, ...http.allowedOrigins.map(hostName)])];
  return { hosts: hosts.length > 0 ? hosts : undefined, origins };
}

/** A request's body, read once. */
interface ReadBody {
  /** Over the limit: nothing was kept. */
  tooLarge?: boolean;
  /** The JSON of the body, when it is JSON. */
  parsed?: unknown;
  /** A copy of the request with its body, for a body that is not JSON (the SDK answers it). */
  request?: Request;
}

/**
 * Reads a POST's body once. JSON is returned parsed; anything else is put back into a copy of
 * the request, so that the SDK gives its usual answer (406, 415 or 400, in its order).
 */
async function readBody(request: Request, maxBytes: number): Promise<ReadBody> {
  if (request.method !== "POST") return {};
  const read = await readRequestBody(request, maxBytes);
  if (read.tooLarge) return { tooLarge: true };
  try {
    if (read.text.length > 0) return { parsed: JSON.parse(read.text) };
  } catch {
    // Not JSON: the SDK says so below.
  }
  return {
    request: new Request(request.url, {
      method: request.method,
      headers: request.headers,
      body: read.text,
      signal: request.signal,
    }),
  };
}

/**
 * `Deno.serve`, with the errors of a taken or forbidden address said in terms of the settings.
 *
 * @throws {TypeError} When the address cannot be bound.
 */
function listen(
  options: Deno.ServeTcpOptions,
  handler: Deno.ServeHandler<Deno.NetAddr>,
): Deno.HttpServer<Deno.NetAddr> {
  try {
    return Deno.serve(options, handler);
  } catch (error) {
    const where = `${options.hostname}:${options.port}`;
    if (error instanceof Deno.errors.AddrInUse) {
      throw new TypeError(
        `Cannot listen on ${where}: the port is in use; pick another with --port, http.port or CODE_EXECUTOR_HTTP_PORT (0 picks a free one), or stop what holds it (code-executor doctor says what)`,
        { cause: error },
      );
    }
    if (
      error instanceof Deno.errors.AddrNotAvailable || error instanceof Deno.errors.PermissionDenied
    ) {
      throw new TypeError(
        `Cannot listen on ${where}: ${
          (error as Error).message
        }; check --host / http.host (CODE_EXECUTOR_HTTP_HOST), or use a port above 1023`,
        { cause: error },
      );
    }
    throw error;
  }
}

/** Races a promise against a deadline; undefined when the deadline comes first. */
async function within<T>(work: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([
      work,
      new Promise<undefined>((r) => timer = setTimeout(() => r(undefined), ms)),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The same response, calling `done` once when its event stream has been sent in full, has failed
 * or was cancelled (the client went away); at once for any other response, whose body is whole
 * already (and keeps its Content-Length).
 */
function untilSent(response: Response, done: () => void): Response {
  const type = response.headers.get("content-type") ?? "";
  if (!response.body || !type.startsWith("text/event-stream")) {
    done();
    return response;
  }
  let pending = true;
  const finish = () => {
    if (pending) {
      pending = false;
      done();
    }
  };
  const reader = response.body.getReader();
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const { value, done: ended } = await reader.read();
        if (ended) {
          finish();
          controller.close();
        } else {
          controller.enqueue(value);
        }
      } catch (error) {
        finish();
        controller.error(error);
      }
    },
    async cancel(reason) {
      finish();
      await reader.cancel(reason);
    },
  });
  return new Response(body, {
    status: response.status,
    statusText: response.statusText,
    headers: response.headers,
  });
}

/**
 * Starts the HTTP endpoint.
 *
 * @param options The executor, hub, settings, environment and logger.
 * @returns The endpoint, listening.
 * @throws {TypeError} When it would listen beyond loopback without auth, or auth cannot be set
 *   up; the message says which setting to change.
 */
export async function startHttpEndpoint(options: HttpEndpointOptions): Promise<HttpEndpoint> {
  const { settings, log } = options;
  const http = settings.http;
  if (authMode(settings, options.env) === "none" && !isLoopback(http.host)) {
    throw new TypeError(
      `Refusing to serve HTTP on ${http.host} without authentication: anyone who reaches the port could run code. Set CODE_EXECUTOR_HTTP_TOKEN (or http.tokensFile, or http.oauth), or bind to 127.0.0.1`,
    );
  }
  const maxBodyBytes = http.maxBodyBytes ?? defaultBodyBytes(settings);
  const build = (): CodeExecutorServer => createServer(options);
  const modern: McpHttpHandler = createMcpHandler(
    () => createServer({ ...options, perRequest: true }).server,
    {
      legacy: "reject",
      maxRequestBodySize: maxBodyBytes,
      onerror: (error) => log.debug(`http: ${error.message}`),
    },
  );
  const sessions = new LegacySessions({
    max: http.maxSessions,
    principalMax: http.principalMaxSessions,
    idleMs: http.sessionIdleMs,
    maxBodyBytes,
    replicaId: http.replicaId,
    create: build,
    log,
  });
  const { hosts, origins } = hostAllowlists(settings);
  if (!hosts) {
    log.warn(
      `http: the Host header is not checked on ${http.host}; set http.allowedHosts or http.publicUrl to the names clients use`,
    );
  }

  let inFlight = 0;
  // Requests in flight per principal, its open sessions' included: they are exempt from
  // http.maxRequests, not from their principal's share of it (slow bodies would fill it).
  const inFlightOf = new Map<string, number>();
  let accepting = true;
  // Made once the socket is bound: the resource URL (the OAuth audience and the protected
  // resource) holds the port, and `--port 0` learns it only then.
  let auth: Authenticator | undefined;
  const route = async (request: Request, path: string): Promise<Response> => {
    if (path === "/healthz") {
      return Response.json({ status: accepting ? "ok" : "draining" }, {
        status: accepting ? 200 : 503,
      });
    }
    if (path === "/readyz") {
      const ready = accepting && options.ready();
      return Response.json({ ready }, { status: ready ? 200 : 503 });
    }
    if (!accepting) return rpcError(503, -32000, "The server is shutting down");
    const refused = (hosts ? hostHeaderValidationResponse(request, hosts) : undefined) ??
      originValidationResponse(request, origins);
    if (refused) return refused;
    if (!auth) return rpcError(503, -32000, "The server is starting; retry shortly");
    const metadata = auth.metadata(request);
    if (metadata) return metadata;
    if (path !== http.path) {
      return rpcError(404, -32000, `Not found: the MCP endpoint is ${http.path}`);
    }
    const principal = await auth.authenticate(request);
    if (principal instanceof Response) return principal;
    const who = principal.clientId;
    (request as Request & { principal?: string }).principal = who;
    const mine = inFlightOf.get(who) ?? 0;
    const share = principalShare(who, http.maxRequests, http.principalMaxRequests);
    // `local` is every caller of a server without auth: the global cap alone holds for it, with
    // its exemption for open sessions.
    if (isHttpPrincipal(who) && mine >= share) {
      return rpcError(
        503,
        -32000,
        `Too many requests of yours at once: ${mine} (your share of http.maxRequests, http.principalMaxRequests ${share}); retry shortly`,
      );
    }
    if (isHttpPrincipal(who)) {
      inFlightOf.set(who, mine + 1);
      (request as Request & { counted?: string }).counted = who;
    }
    // The body is read and parsed once, here, and handed on parsed: reading a clone to tell the
    // eras apart and then the body again cost ~0.5 ms of every request (measured).
    const body = await within(readBody(request, maxBodyBytes), http.bodyTimeoutMs);
    if (body === undefined) {
      return rpcError(
        408,
        -32000,
        `Request timeout: the body did not arrive within ${http.bodyTimeoutMs} ms (http.bodyTimeoutMs)`,
      );
    }
    if (body.tooLarge) {
      return rpcError(
        413,
        -32000,
        `Payload Too Large: the body is over ${maxBodyBytes} bytes (http.maxBodyBytes)`,
      );
    }
    const forward = body.request ?? request;
    const legacy = await isLegacyRequest(forward, body.parsed, {
      maxRequestBodySize: maxBodyBytes,
    });
    return legacy
      ? await sessions.handle(forward, principal as AuthInfo, body.parsed)
      : await modern.fetch(forward, { authInfo: principal, parsedBody: body.parsed });
  };

  // Paths this server answers are logged as they are; any other is the caller's text, which can
  // hold a secret (a client configured with a token-in-path URL) or be 100 KiB long.
  const known = new Set([http.path, "/healthz", "/readyz"]);
  const loggedPath = (path: string, status: number) =>
    known.has(path) || (path.startsWith("/.well-known/") && status < 400) ? path : "(other path)";

  const server = listen({
    hostname: http.host,
    port: http.port,
    onListen: () => {},
    onError: (error) => {
      log.error(`http: ${(error as Error).stack ?? error}`);
      return rpcError(500, -32603, "Internal error");
    },
  }, async (request) => {
    const started = performance.now();
    const path = new URL(request.url).pathname;
    // Probes are answered whatever the load: a liveness check failing on a busy server would
    // have it restarted, runs and all. So is the traffic of an open session (its number is
    // capped by http.maxSessions, its runs by admission): refused, the answers to its sampling
    // and elicitation requests and its cancellations would leave its runs stuck at the cap.
    const sessionId = request.headers.get("mcp-session-id");
    const exempt = path === "/healthz" || path === "/readyz" ||
      (sessionId !== null && sessions.has(sessionId));
    if (inFlight >= http.maxRequests && !exempt) {
      return rpcError(
        503,
        -32000,
        `Too many requests at once (http.maxRequests ${http.maxRequests}); retry shortly`,
      );
    }
    inFlight++;
    const uncount = () => {
      inFlight--;
      const counted = (request as Request & { counted?: string }).counted;
      if (counted === undefined) return;
      const left = (inFlightOf.get(counted) ?? 1) - 1;
      if (left > 0) inFlightOf.set(counted, left);
      else inFlightOf.delete(counted);
    };
    let response: Response;
    try {
      response = await route(request, path);
    } catch (error) {
      uncount();
      throw error;
    }
    // A request counts, and is logged, until its body has been sent: a 2025-era tool call or
    // GET stream answers at once with an event stream that stays open for the whole run.
    return untilSent(response, () => {
      uncount();
      const who = (request as Request & { principal?: string }).principal ?? "-";
      const refused = refusalReason(response);
      log.info(
        `http: ${request.method} ${loggedPath(path, response.status)} ${response.status} ${
          Math.round(performance.now() - started)
        } ms principal=${who}${refused ? ` refused=${refused}` : ""}`,
      );
    });
  });

  const addr = server.addr as Deno.NetAddr;
  const url = new URL(`http://${hostName(http.host)}:${addr.port}${http.path}`);
  const resource = new URL(http.publicUrl ?? url.href);
  try {
    auth = await createAuthenticator(settings, { env: options.env, resource });
  } catch (error) {
    await sessions.close();
    await modern.close().catch(() => {});
    await within(server.shutdown(), 5_000);
    throw error;
  }
  return {
    url,
    auth: auth.mode,
    get inFlight() {
      return inFlight;
    },
    toolsChanged() {
      for (const session of sessions.servers()) session.refresh();
      modern.notify.toolsChanged();
    },
    stopAccepting() {
      accepting = false;
    },
    async close() {
      accepting = false;
      await sessions.close();
      await modern.close().catch(() => {});
      await within(server.shutdown(), 5_000);
    },
  };
}
