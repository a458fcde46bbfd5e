/**
 * `serve --http`: the MCP endpoint over Streamable HTTP on `Deno.serve`, for both protocol eras
 * at one URL. 2026-07-28 requests are stateless: the SDK's `createMcpHandler` serves each with a
 * server of its own. 2025-era traffic (initialize, `Mcp-Session-Id`, the GET stream, DELETE) goes
 * to {@linkcode LegacySessions}, where sampling, elicitation and progress reach the client through
 * its stream, as over stdio.
 *
 * Before a request reaches either, it passes one step per concern, in order, as Hono keeps its
 * middleware apart: the request cap and its log line ({@linkcode countAndLog}), the probes
 * ({@linkcode probes}: `/healthz` and `/readyz` answer without auth and reveal nothing), the `Host`
 * and `Origin` checks ({@linkcode guardHost}: DNS rebinding, 403), the OAuth discovery documents,
 * the path and the principal's authentication ({@linkcode authenticate}: 401/403), the principal's
 * share of the request cap ({@linkcode capPrincipal}), and the body's deadline and size
 * ({@linkcode limitBody}: 408/413); then {@linkcode dispatchEra}, which, for replicas sharing a
 * store (`state.url`), sends a request for live state another replica owns there (`forwarding.ts`).
 *
 * Every request is logged at info when it ends (an event stream when it closes): method, path
 * (one this server does not serve as `(other path)`, since it is the caller's text), status,
 * milliseconds, principal and, for refused credentials, the reason (`refused=expired`); never a
 * header, a query string or a token. Until then it counts against `http.maxRequests`; past the
 * cap, new sessions and 2026-era requests get 503, while `/healthz`, `/readyz` and the requests of
 * open sessions are still served. Each principal's requests, its sessions' included, also count
 * against its share (`http.principalMaxRequests`, half the cap by default), so that no principal
 * can fill the cap for the others ({@linkcode capPrincipal}).
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
} from "@modelcontextprotocol/server";
import type { Settings } from "../config/settings.ts";
import type { Logger } from "../log.ts";
import type { Metrics } from "../metrics.ts";
import { isHttpPrincipal, LOCAL_PRINCIPAL, principalShare } from "../principals.ts";
import type { SharedState } from "../state/shared_state.ts";
import { approvalsPending } from "./approve_tool.ts";
import { refusalReason } from "./auth_refusals.ts";
import { forwardedLabels, Forwarder, internalUrlOf, joinCluster } from "./forwarding.ts";
import { type Authenticator, authMode, createAuthenticator } from "./http_auth.ts";
import { LegacySessions, rpcError } from "./http_sessions.ts";
import { listen, type ReadBody, readBody, untilSent, within } from "./http_io.ts";
import { listenForMetrics, METRICS_PATH, metricsResponse, watchServer } from "./metrics.ts";
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
  /**
   * What replicas share: with `state.url`, requests for live state another replica owns are
   * forwarded to it (`forwarding.ts`), and this replica registers itself for theirs.
   */
  shared?: SharedState;
  /** The server's instruments, served at `/metrics` as `http.metrics` says; none without. */
  metrics?: Metrics;
}

/** A listening endpoint. */
export interface HttpEndpoint {
  /** The URL of the MCP endpoint as bound (`http://127.0.0.1:3333/mcp`). */
  url: URL;
  /** The authentication in force. */
  auth: Authenticator["mode"];
  /** Where `/metrics` is served without authentication (`http.metrics: "loopback"`). */
  metricsUrl?: URL;
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

/** A request on its way through the endpoint's steps, with what they learned of it. */
interface Incoming {
  request: Request;
  /** The URL's path. */
  path: string;
  /** Who sent it, once {@linkcode authenticate} has checked. */
  principal?: AuthInfo;
  /** Its body, once {@linkcode limitBody} has read it. */
  body?: ReadBody;
  /** The principal it counts against, once {@linkcode capPrincipal} has counted it. */
  counted?: string;
  /** The replica that forwarded it here (verified). */
  forwardedFrom?: string;
  /** The replica it was forwarded to, whose answer was relayed. */
  forwardedTo?: string;
}

/**
 * One concern of the endpoint, as Hono writes middleware: it answers the request itself, or
 * calls `next` for the steps after it (and may see their response).
 */
type Step = (incoming: Incoming, next: () => Promise<Response>) => Promise<Response>;

/** What the steps share and the endpoint changes: whether it takes requests, and its auth. */
interface EndpointState {
  /** False once draining: new requests get 503. */
  accepting: boolean;
  /** Made once the socket is bound (the OAuth resource URL holds the port). */
  auth?: Authenticator;
  /** Requests being handled, open streams included. */
  inFlight: number;
  /** The same, per HTTP principal, its open sessions' included. */
  inFlightOf: Map<string, number>;
}

/** Runs `incoming` through the steps in order, then `last`. */
function runSteps(
  steps: readonly Step[],
  last: (incoming: Incoming) => Promise<Response>,
  incoming: Incoming,
): Promise<Response> {
  const at = (index: number): Promise<Response> =>
    index < steps.length ? steps[index](incoming, () => at(index + 1)) : last(incoming);
  return at(0);
}

/**
 * Counts each request against `http.maxRequests` until its body has been sent, and logs it then:
 * method, path (one this server does not serve as `(other path)`), status, milliseconds,
 * principal. Probes and the traffic of open sessions pass the cap.
 */
function countAndLog(
  state: EndpointState,
  options: { http: Settings["http"]; sessions: LegacySessions; log: Logger },
): Step {
  const { http, sessions, log } = options;
  // Paths this server answers are logged as they are; any other is the caller's text, which can
  // hold a secret (a client configured with a token-in-path URL) or be 100 KiB long.
  const known = new Set([http.path, "/healthz", "/readyz", METRICS_PATH]);
  const loggedPath = (path: string, status: number) =>
    known.has(path) || (path.startsWith("/.well-known/") && status < 400) ? path : "(other path)";
  return async (incoming, next) => {
    const { request, path } = incoming;
    const started = performance.now();
    // Probes are answered whatever the load: a liveness check failing on a busy server would
    // have it restarted, runs and all. So is the traffic of an open session (its number is
    // capped by http.maxSessions, its runs by admission): refused, the answers to its sampling
    // and elicitation requests and its cancellations would leave its runs stuck at the cap.
    const sessionId = request.headers.get("mcp-session-id");
    const exempt = path === "/healthz" || path === "/readyz" ||
      (sessionId !== null && sessions.has(sessionId));
    if (state.inFlight >= http.maxRequests && !exempt) {
      return rpcError(
        503,
        -32000,
        `Too many requests at once (http.maxRequests ${http.maxRequests}); retry shortly`,
      );
    }
    state.inFlight++;
    const uncount = () => {
      state.inFlight--;
      const counted = incoming.counted;
      if (counted === undefined) return;
      const left = (state.inFlightOf.get(counted) ?? 1) - 1;
      if (left > 0) state.inFlightOf.set(counted, left);
      else state.inFlightOf.delete(counted);
    };
    let response: Response;
    try {
      response = await next();
    } catch (error) {
      uncount();
      throw error;
    }
    // A request counts, and is logged, until its body has been sent: a 2025-era tool call or
    // GET stream answers at once with an event stream that stays open for the whole run.
    return untilSent(response, () => {
      uncount();
      const refused = refusalReason(response);
      const hop = incoming.forwardedTo !== undefined
        ? ` to=${incoming.forwardedTo}`
        : incoming.forwardedFrom !== undefined
        ? ` from=${incoming.forwardedFrom}`
        : "";
      log.info(
        `http: ${request.method} ${loggedPath(path, response.status)} ${response.status} ${
          Math.round(performance.now() - started)
        } ms principal=${incoming.principal?.clientId ?? "-"}${
          refused ? ` refused=${refused}` : ""
        }${hop}`,
      );
    });
  };
}

/** `/healthz` and `/readyz`, answered without auth and revealing nothing; 503 while draining. */
function probes(state: EndpointState, ready: () => boolean): Step {
  return (incoming, next) => {
    if (incoming.path === "/healthz") {
      return Promise.resolve(Response.json({ status: state.accepting ? "ok" : "draining" }, {
        status: state.accepting ? 200 : 503,
      }));
    }
    if (incoming.path === "/readyz") {
      const isReady = state.accepting && ready();
      return Promise.resolve(Response.json({ ready: isReady }, { status: isReady ? 200 : 503 }));
    }
    if (!state.accepting) {
      return Promise.resolve(rpcError(503, -32000, "The server is shutting down"));
    }
    return next();
  };
}

/** The `Host` and `Origin` checks against DNS rebinding (403). */
function guardHost(allowed: { hosts?: string[]; origins: string[] }): Step {
  return (incoming, next) => {
    const { request } = incoming;
    const refused =
      (allowed.hosts ? hostHeaderValidationResponse(request, allowed.hosts) : undefined) ??
        originValidationResponse(request, allowed.origins);
    return refused ? Promise.resolve(refused) : next();
  };
}

/**
 * The OAuth discovery documents, the endpoint's path (404 elsewhere), and the principal's
 * authentication (401/403): a caller's token, or another replica's signature of a request it
 * forwarded (the caller's principal, which that replica authenticated).
 */
function authenticate(
  state: EndpointState,
  paths: { endpoint: string; metrics: boolean },
  forwards?: { forwarder: Forwarder; maxBytes: number; timeoutMs: number },
): Step {
  const endpointPath = paths.endpoint;
  return async (incoming, next) => {
    const auth = state.auth;
    if (!auth) return rpcError(503, -32000, "The server is starting; retry shortly");
    const metadata = auth.metadata(incoming.request);
    if (metadata) return metadata;
    if (incoming.path !== endpointPath && !(paths.metrics && incoming.path === METRICS_PATH)) {
      return rpcError(404, -32000, `Not found: the MCP endpoint is ${endpointPath}`);
    }
    if (forwards?.forwarder.isForwarded(incoming.request)) {
      const accepted = await forwards.forwarder.accept(incoming.request, forwards);
      if (accepted instanceof Response) return accepted;
      incoming.principal = accepted.authInfo;
      incoming.body = accepted.body;
      incoming.forwardedFrom = accepted.from;
      return await next();
    }
    const principal = await auth.authenticate(incoming.request);
    if (principal instanceof Response) return principal;
    incoming.principal = principal;
    return await next();
  };
}

/** `/metrics` for an authenticated caller (`http.metrics: "auth"`). */
function serveMetrics(metrics: Metrics): Step {
  return (incoming, next) =>
    incoming.path === METRICS_PATH ? metricsResponse(incoming.request, metrics) : next();
}

/**
 * Each HTTP principal's share of `http.maxRequests` (`http.principalMaxRequests`): its open
 * sessions' requests are exempt from the cap, not from their principal's share of it (slow bodies
 * would fill it).
 */
function capPrincipal(state: EndpointState, http: Settings["http"]): Step {
  return (incoming, next) => {
    const who = incoming.principal!.clientId;
    // `local` is every caller of a server without auth: the global cap alone holds for it, with
    // its exemption for open sessions.
    if (!isHttpPrincipal(who)) return next();
    const mine = state.inFlightOf.get(who) ?? 0;
    const share = principalShare(who, http.maxRequests, http.principalMaxRequests);
    if (mine >= share) {
      return Promise.resolve(rpcError(
        503,
        -32000,
        `Too many requests of yours at once: ${mine} (your share of http.maxRequests, http.principalMaxRequests ${share}); retry shortly`,
      ));
    }
    state.inFlightOf.set(who, mine + 1);
    incoming.counted = who;
    return next();
  };
}

/** Reads a POST's body within `http.bodyTimeoutMs` (408) and `maxBytes` (413). */
function limitBody(options: { maxBytes: number; timeoutMs: number }): Step {
  const { maxBytes, timeoutMs } = options;
  return async (incoming, next) => {
    // A forwarded request's body was read to check its signature.
    if (incoming.body) return await next();
    // The body is read and parsed once, here, and handed on parsed: reading a clone to tell the
    // eras apart and then the body again cost ~0.5 ms of every request (measured).
    const body = await within(readBody(incoming.request, maxBytes), timeoutMs);
    if (body === undefined) {
      return rpcError(
        408,
        -32000,
        `Request timeout: the body did not arrive within ${timeoutMs} ms (http.bodyTimeoutMs)`,
      );
    }
    if (body.tooLarge) {
      return rpcError(
        413,
        -32000,
        `Payload Too Large: the body is over ${maxBytes} bytes (http.maxBodyBytes)`,
      );
    }
    incoming.body = body;
    return await next();
  };
}

/**
 * Hands an authenticated request to its era: a 2025-era session, or a 2026-07-28 handler; or,
 * with forwarding, to the replica that owns its live state. A request forwarded here is answered
 * with an event stream (`streamed`), so that the forwarding replica knows at once it was taken.
 */
function dispatchEra(
  options: {
    sessions: LegacySessions;
    modern: McpHttpHandler;
    streamed?: McpHttpHandler;
    forwarder?: Forwarder;
    maxBodyBytes: number;
  },
): (incoming: Incoming) => Promise<Response> {
  const { sessions, modern, maxBodyBytes, forwarder } = options;
  return async (incoming) => {
    const parsed = incoming.body?.parsed;
    const forward = incoming.body?.request ?? incoming.request;
    let principal = incoming.principal!;
    const legacy = await isLegacyRequest(forward, parsed, { maxRequestBodySize: maxBodyBytes });
    if (forwarder) {
      const routed = await forwarder.route({
        request: incoming.request,
        parsed,
        text: incoming.body?.text,
        authInfo: principal,
        legacy,
        forwardedFrom: incoming.forwardedFrom,
      });
      if ("response" in routed) {
        incoming.forwardedTo = routed.to;
        return routed.response;
      }
      principal = routed.authInfo;
    }
    const handler = incoming.forwardedFrom !== undefined && options.streamed
      ? options.streamed
      : modern;
    return legacy
      ? await sessions.handle(forward, principal, parsed)
      : await handler.fetch(forward, { authInfo: principal, parsedBody: parsed });
  };
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
  const metrics = http.metrics === "off" ? undefined : options.metrics;
  const authMetrics = http.metrics === "auth" ? metrics : undefined;
  if (authMetrics && http.path === METRICS_PATH) {
    throw new TypeError(
      `http.path ${METRICS_PATH} is where http.metrics "auth" serves the metrics; pick another http.path, or set http.metrics to "loopback" or "off"`,
    );
  }
  const maxBodyBytes = http.maxBodyBytes ?? defaultBodyBytes(settings);
  const build = (): CodeExecutorServer => createServer(options);
  const modernOptions = {
    legacy: "reject" as const,
    maxRequestBodySize: maxBodyBytes,
    onerror: (error: Error) => log.debug(`http: ${error.message}`),
  };
  const perRequest = async ({ authInfo }: { authInfo?: { clientId?: string } }) =>
    createServer({
      ...options,
      perRequest: true,
      approvalsPending: await approvalsPending(
        options.executor,
        authInfo?.clientId ?? LOCAL_PRINCIPAL,
      ),
    }).server;
  const modern: McpHttpHandler = createMcpHandler(perRequest, modernOptions);
  // Replicas forward to each other only when they share a store (state.url).
  const forwarding = options.shared && settings.state.url !== undefined;
  if (forwarding && !http.replicaId) {
    throw new TypeError(
      "state.url is set without http.replicaId: each replica needs a name of its own for the others to forward to (serve gives it one)",
    );
  }
  const forwarder = forwarding
    ? new Forwarder({
      shared: options.shared!,
      replicaId: http.replicaId!,
      settings,
      parked: options.executor.parkedRuns,
      log,
      onForward: (event) => {
        const labels = forwardedLabels(event);
        if (labels) metrics?.forwarded(labels.kind, labels.outcome);
      },
    })
    : undefined;
  const streamed = forwarder
    ? createMcpHandler(perRequest, { ...modernOptions, responseMode: "sse" })
    : undefined;
  const sessions = new LegacySessions({
    max: http.maxSessions,
    principalMax: http.principalMaxSessions,
    idleMs: http.sessionIdleMs,
    maxBodyBytes,
    replicaId: http.replicaId,
    create: build,
    log,
  });
  const allowed = hostAllowlists(settings);
  // The other replicas reach this one at its internal URL, whose host they send.
  if (forwarder && allowed.hosts) allowed.hosts.push(internalUrlOf(http, http.port).hostname);
  if (!allowed.hosts) {
    log.warn(
      `http: the Host header is not checked on ${http.host}; set http.allowedHosts or http.publicUrl to the names clients use`,
    );
  }

  const state: EndpointState = { accepting: true, inFlight: 0, inFlightOf: new Map() };
  const steps: Step[] = [
    countAndLog(state, { http, sessions, log }),
    probes(state, options.ready),
    guardHost(allowed),
    authenticate(
      state,
      { endpoint: http.path, metrics: authMetrics !== undefined },
      forwarder && { forwarder, maxBytes: maxBodyBytes, timeoutMs: http.bodyTimeoutMs },
    ),
    ...(authMetrics ? [serveMetrics(authMetrics)] : []),
    capPrincipal(state, http),
    limitBody({ maxBytes: maxBodyBytes, timeoutMs: http.bodyTimeoutMs }),
  ];
  const dispatch = dispatchEra({ sessions, modern, streamed, forwarder, maxBodyBytes });
  const server = listen({
    hostname: http.host,
    port: http.port,
    onListen: () => {},
    onError: (error) => {
      log.error(`http: ${(error as Error).stack ?? error}`);
      return rpcError(500, -32603, "Internal error");
    },
  }, (request) => runSteps(steps, dispatch, { request, path: new URL(request.url).pathname }));

  const addr = server.addr as Deno.NetAddr;
  const url = new URL(`http://${hostName(http.host)}:${addr.port}${http.path}`);
  const resource = new URL(http.publicUrl ?? url.href);
  let auth: Authenticator;
  let cluster: { leave(): Promise<void> } | undefined;
  let loopback: ReturnType<typeof listenForMetrics> | undefined;
  try {
    auth = state.auth = await createAuthenticator(settings, { env: options.env, resource });
    if (forwarder) {
      cluster = await joinCluster({
        registry: options.shared!.replicas,
        id: forwarder.replicaId,
        address: internalUrlOf(http, addr.port),
        log,
      });
    }
    if (metrics) {
      watchServer(metrics, { ...options, httpInFlight: () => state.inFlight });
      if (http.metrics === "loopback") {
        loopback = listenForMetrics(metrics, { port: http.metricsPort, log });
      }
    }
  } catch (error) {
    await cluster?.leave();
    await sessions.close();
    await modern.close().catch(() => {});
    await streamed?.close().catch(() => {});
    await within(server.shutdown(), 5_000);
    throw error;
  }
  let leaving: Promise<void> | undefined;
  const leave = () => leaving ??= cluster?.leave() ?? Promise.resolve();
  return {
    url,
    auth: auth.mode,
    metricsUrl: loopback?.url,
    get inFlight() {
      return state.inFlight;
    },
    toolsChanged() {
      for (const session of sessions.servers()) session.refresh();
      modern.notify.toolsChanged();
      streamed?.notify.toolsChanged();
    },
    stopAccepting() {
      state.accepting = false;
      // The others learn at once that this replica's live state goes with it.
      void leave();
    },
    async close() {
      state.accepting = false;
      await leave();
      await sessions.close();
      await modern.close().catch(() => {});
      await streamed?.close().catch(() => {});
      await within(server.shutdown(), 5_000);
      await loopback?.close();
    },
  };
}
