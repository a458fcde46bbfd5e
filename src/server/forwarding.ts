/**
 * Live state stays where it lives, and requests find it. A parked 2026-07-28 run, a Python
 * session and a 2025-era HTTP session live in the children and memory of one replica; behind a
 * plain round-robin balancer, the requests that need them reach any replica. With `state.url`
 * each replica registers its id and internal address (`http.internalUrl`) in the store with a
 * heartbeat ({@linkcode joinCluster}), and a request for live state another replica owns is
 * forwarded there ({@linkcode Forwarder}):
 *
 * - a retry of a parked run: the replica its `requestState` names (checked with the shared key);
 * - a 2025-era request: the replica named by its `Mcp-Session-Id`'s prefix (`<replicaId>.<uuid>`);
 * - a 2026-07-28 `run_python` call with a `session`: the replica the store names as the owner of
 *   that principal's session, or this one, which then claims it (the first claim wins).
 *
 * The forwarded request goes to the owner's MCP endpoint, the same listener clients use, signed
 * with the peer key from `state.key` (`src/state/forward.ts`) and carrying the caller's principal
 * instead of the caller's token, which never leaves the replica that checked it. The owner serves
 * it as the caller's and never forwards it again (at most one hop), and answers it with an event
 * stream at once, which the forwarding replica relays: a forward that is not taken within
 * `http.forwardTimeoutMs`, or whose stream falls silent past its keep-alives, is cut with a clear
 * error. Nothing is ever sent twice. An owner that is gone (no longer registered, or refusing
 * connections) gives the caller an error that names what was lost with it.
 *
 * @module
 */
import type { AuthInfo } from "@modelcontextprotocol/server";
import type { Settings } from "../config/settings.ts";
import { CodeExecutorError } from "../errors.ts";
import type { ParkedRuns } from "../exec/parked_runs.ts";
import type { Logger } from "../log.ts";
import { FORWARD_HEADER, ForwardRefused, signForward, verifyForward } from "../state/forward.ts";
import type { OwnedKind, OwnedRef, ReplicaInfo, ReplicaRegistry } from "../state/replicas.ts";
import { REPLICA_TTL_MS, type SharedState } from "../state/shared_state.ts";
import { type ReadBody, readBody, within } from "./http_io.ts";
import { replicaOfSession, rpcError } from "./http_sessions.ts";

/** The keep-alive of the SDK's event streams (both eras): an owner's stream is never silent longer. */
const SSE_KEEP_ALIVE_MS = 15_000;

/** Between two heartbeats: a third of a replica record's life (`REPLICA_TTL_MS`). */
const HEARTBEAT_MS = REPLICA_TTL_MS / 3;

/** `extra` of a caller's {@linkcode AuthInfo}: why its run is refused before it starts. */
const REFUSAL = "codeExecutorRefusal";

/** Headers that are the connection's, the caller's credentials, or set again for the owner. */
const NOT_FORWARDED = new Set([
  "authorization",
  "connection",
  "content-length",
  "cookie",
  "host",
  "keep-alive",
  "proxy-authorization",
  "proxy-connection",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
  FORWARD_HEADER,
]);
/** Headers of the owner's answer that are its connection's (the relay sets its own). */
const NOT_RELAYED = new Set([
  "connection",
  "content-encoding",
  "content-length",
  "keep-alive",
  "trailer",
  "transfer-encoding",
]);

const encoder = new TextEncoder();

/** One forwarded request, as `onForward` hears of it (for `/metrics`). */
export interface ForwardEvent {
  /** `sent`: this replica forwarded a caller's request; `received`: it served one forwarded to it. */
  direction: "sent" | "received";
  /** The live state the request needs; absent for a refused forward (its body is not read). */
  kind?: OwnedKind;
  /** The other replica's id. */
  peer: string;
  /**
   * `answered`: the owner took it (its answer is relayed); `lost`: the owner is gone, the caller
   * was told what was lost; `timeout`: the owner did not take it within `http.forwardTimeoutMs`;
   * `unreachable`: it could not be sent otherwise; `refused`: a received forward did not verify
   * (403).
   */
  outcome: "answered" | "lost" | "timeout" | "unreachable" | "refused";
  /** Milliseconds until the owner's answer began (or the failure). */
  ms: number;
}

/** `code_executor_forwarded_requests_total`'s `kind` for each kind of live state. */
const METRIC_KINDS: Record<OwnedKind, string> = {
  "parked-run": "parked_run",
  "python-session": "python_session",
  "http-session": "session",
};

/** Its `outcome` for each outcome of a forward this replica sent. */
const METRIC_OUTCOMES: Record<ForwardEvent["outcome"], string> = {
  answered: "ok",
  lost: "owner_gone",
  timeout: "timeout",
  unreachable: "failed",
  refused: "failed",
};

/**
 * The labels `Metrics.forwarded` counts a forward this replica sent under.
 *
 * @param event What {@linkcode ForwarderOptions.onForward} heard.
 * @returns `kind` and `outcome`, or undefined for a request another replica forwarded here
 *   (the sender counts it).
 */
export function forwardedLabels(
  event: ForwardEvent,
): { kind: string; outcome: string } | undefined {
  if (event.direction !== "sent" || event.kind === undefined) return undefined;
  return { kind: METRIC_KINDS[event.kind], outcome: METRIC_OUTCOMES[event.outcome] };
}

/** What a {@linkcode Forwarder} needs. */
export interface ForwarderOptions {
  /** The shared state (its store, keys, replica registry and owner map). */
  shared: SharedState;
  /** This replica's id (`http.replicaId`). */
  replicaId: string;
  /** The settings (`http.forwardTimeoutMs`, `python.sessionTtlMs`). */
  settings: Settings;
  /** The executor's parked runs, which read the replica a `requestState` names. */
  parked: ParkedRuns;
  /** Where forwards that fail are reported. */
  log: Logger;
  /** Told of every forward, sent or received. */
  onForward?: (event: ForwardEvent) => void;
}

/** A request forwarded to this replica, once verified. */
export interface AcceptedForward {
  /**
   * The caller's principal, as the sending replica authenticated it.
   *
   * @internal The MCP SDK's type, which `deno doc --lint` takes for a private one
   * (denoland/deno#27364); the SDK documents it.
   */
  authInfo: AuthInfo;
  /** Its body, read once. */
  body: ReadBody;
  /** The sending replica. */
  from: string;
}

/** A request as {@linkcode Forwarder.route} sees it. */
export interface RouteCall {
  /** The HTTP request. */
  request: Request;
  /** Its body's JSON, when it has one. */
  parsed?: unknown;
  /** Its body as read (what is forwarded), when it has one. */
  text?: string;
  /**
   * The caller's principal.
   *
   * @internal The MCP SDK's type, which `deno doc --lint` takes for a private one
   * (denoland/deno#27364); the SDK documents it.
   */
  authInfo: AuthInfo;
  /** Whether it is 2025-era traffic. */
  legacy: boolean;
  /** The replica that forwarded it here, when it was forwarded. */
  forwardedFrom?: string;
}

/**
 * Where a request goes: answered by the owner (`response`, from replica `to`), or served here,
 * as the principal `authInfo` (which may carry the refusal its run tool answers with).
 *
 * @internal It holds the MCP SDK's type, which `deno doc --lint` takes for a private one
 * (denoland/deno#27364); the SDK documents it.
 */
export type Routed = { response: Response; to: string } | { authInfo: AuthInfo };

/** The live state a request needs, as read from the request alone. */
interface Needed {
  kind: OwnedKind;
  /** The session id, the `requestState`, or the Python session's id. */
  id: string;
  /** The JSON-RPC id of the request, for an error sent on its event stream. */
  rpcId?: string | number;
}

/** What the forward of one request found. */
type Outcome =
  | { answered: Response }
  | { lost: string }
  | { unreachable: string; timedOut?: true };

/**
 * The refusal a forwarding replica attached to a caller's principal: the run tools answer it as
 * their result, and run nothing.
 *
 * @param authInfo The principal of the tool call, if any.
 * @returns The error, or undefined for a call that may run.
 * @internal It takes the MCP SDK's type, which `deno doc --lint` takes for a private one
 * (denoland/deno#27364); the SDK documents it.
 */
export function refusalOf(authInfo: AuthInfo | undefined): CodeExecutorError | undefined {
  const refusal = authInfo?.extra?.[REFUSAL];
  return refusal instanceof CodeExecutorError ? refusal : undefined;
}

function refusing(authInfo: AuthInfo, error: CodeExecutorError): { authInfo: AuthInfo } {
  return { authInfo: { ...authInfo, extra: { ...authInfo.extra, [REFUSAL]: error } } };
}

/**
 * This replica's id when `http.replicaId` is unset and replicas share a store: the host's name
 * (a pod's name on Kubernetes) and six random hex digits, unique even for replicas on one host.
 *
 * @returns An id `http.replicaId` accepts.
 */
export function defaultReplicaId(): string {
  let host = "replica";
  try {
    host = Deno.hostname().replace(/[^A-Za-z0-9_-]/g, "-").slice(0, 48) || host;
  } catch {
    // No --allow-sys: the generic name.
  }
  const random = Array.from(
    crypto.getRandomValues(new Uint8Array(3)),
    (b) => b.toString(16).padStart(2, "0"),
  ).join("");
  return `${host}-${random}`;
}

/** This machine's first address that another machine could reach (not loopback, not link-local). */
function reachableAddress(): string {
  try {
    const addresses = Deno.networkInterfaces().filter((i) =>
      !/^(127\.|::1$|fe80:)/i.test(i.address) && i.address !== "::"
    );
    const chosen = addresses.find((i) => i.family === "IPv4") ?? addresses[0];
    if (chosen) return chosen.address;
  } catch {
    // No --allow-sys: the host's name below.
  }
  return Deno.hostname();
}

/**
 * The URL the other replicas forward to: `http.internalUrl`, else the bound address, with a
 * wildcard host replaced by an address of this machine that others can reach.
 *
 * @param http The `http` settings.
 * @param port The port bound (`http.port` may be 0).
 * @returns The URL of this replica's MCP endpoint for its peers.
 */
export function internalUrlOf(http: Settings["http"], port: number): URL {
  if (http.internalUrl) return new URL(http.internalUrl);
  const wildcard = ["0.0.0.0", "::", "[::]"].includes(http.host);
  const host = wildcard ? reachableAddress() : http.host.replace(/^\[|\]$/g, "");
  const name = host.includes(":") ? `[${host}]` : host;
  return new URL(`http://${name}:${port}${http.path}`);
}

/** Options of {@linkcode joinCluster}. */
export interface JoinOptions {
  /** The registry of the shared store. */
  registry: ReplicaRegistry;
  /** This replica's id. */
  id: string;
  /** Its internal URL. */
  address: URL;
  /** Where failed heartbeats are reported. */
  log: Logger;
}

/**
 * Registers this replica and keeps its record alive with a heartbeat. An id already registered
 * at another address is taken over only once its record has stopped being renewed (the replica
 * restarted elsewhere); a live replica with the same id stops the start.
 *
 * @param options The registry, this replica's id and address, the logger.
 * @returns `leave`, which stops the heartbeat and removes the record (the others then know at
 *   once that this replica's live state is gone).
 * @throws {Error} When another live replica has the same id, or the store does not answer.
 */
export async function joinCluster(options: JoinOptions): Promise<{ leave(): Promise<void> }> {
  const { registry, id, log } = options;
  const address = options.address.href;
  const existing = await registry.find(id);
  if (existing && existing.address !== address) {
    // A live replica beats every HEARTBEAT_MS; a dead one's record only waits for its expiry.
    await new Promise((resolve) => setTimeout(resolve, HEARTBEAT_MS + 1_000));
    const again = await registry.find(id);
    if (again && again.seenAt > existing.seenAt) {
      throw new Error(
        `Cannot start: another live replica is registered as "${id}" at ${again.address}; give each replica its own http.replicaId (CODE_EXECUTOR_HTTP_REPLICA_ID), or leave it unset for a unique one`,
      );
    }
  }
  const replica = { id, address };
  await registry.beat(replica);
  // A heartbeat a third of the record's life; an outage is said once, and so is its end.
  let failing = false;
  const timer = setInterval(async () => {
    try {
      await registry.beat(replica);
      if (failing) log.info(`replica ${id}: the heartbeat reaches the shared store again`);
      failing = false;
    } catch (error) {
      if (!failing) {
        log.warn(
          `replica ${id}: the heartbeat to the shared store failed (${
            (error as Error).message
          }); the other replicas cannot reach this one's live state until it is back`,
        );
      }
      failing = true;
    }
  }, HEARTBEAT_MS);
  Deno.unrefTimer(timer);
  return {
    async leave() {
      clearInterval(timer);
      await registry.leave(id).catch(() => {});
    },
  };
}

/** What a request needs, described for a person: `the parked run`, `the Python session "a"`. */
function described(needed: Needed): string {
  if (needed.kind === "parked-run") return "the parked run";
  if (needed.kind === "python-session") return `the Python session "${needed.id}"`;
  return "the 2025-era session";
}

/** The JSON-RPC id of a single request, or undefined (a notification, a batch, not JSON-RPC). */
function rpcIdOf(parsed: unknown): string | number | undefined {
  const id = (parsed as { id?: unknown } | undefined)?.id;
  return typeof id === "string" || typeof id === "number" ? id : undefined;
}

/** The live state a request needs, from the request itself (nothing is looked up). */
function needed(call: RouteCall): Needed | undefined {
  if (call.legacy) {
    const id = call.request.headers.get("mcp-session-id");
    return id === null ? undefined : { kind: "http-session", id, rpcId: rpcIdOf(call.parsed) };
  }
  const message = call.parsed as { method?: unknown; params?: Record<string, unknown> };
  if (message?.method !== "tools/call" || typeof message.params !== "object") return undefined;
  const rpcId = rpcIdOf(message);
  const state = message.params?.requestState;
  if (typeof state === "string") return { kind: "parked-run", id: state, rpcId };
  const args = message.params?.arguments as Record<string, unknown> | undefined;
  if (message.params?.name === "run_python" && typeof args?.session === "string") {
    return { kind: "python-session", id: args.session, rpcId };
  }
  return undefined;
}

/** Routes requests to the replica that owns their live state, and verifies those forwarded here. */
export class Forwarder {
  readonly #shared: SharedState;
  readonly #id: string;
  readonly #timeoutMs: number;
  readonly #sessionTtlMs: number;
  readonly #parked: ParkedRuns;
  readonly #log: Logger;
  readonly #onForward: ((event: ForwardEvent) => void) | undefined;

  /**
   * Binds the forwarding to this replica.
   *
   * @param options The shared state, this replica's id, the settings, parked runs and logger.
   */
  constructor(options: ForwarderOptions) {
    this.#shared = options.shared;
    this.#id = options.replicaId;
    this.#timeoutMs = options.settings.http.forwardTimeoutMs;
    this.#sessionTtlMs = options.settings.python.sessionTtlMs;
    this.#parked = options.parked;
    this.#log = options.log;
    this.#onForward = options.onForward;
  }

  /** This replica's id. */
  get replicaId(): string {
    return this.#id;
  }

  /**
   * Whether a request says it was forwarded by another replica (and must verify as such).
   *
   * @param request The HTTP request.
   * @returns True when it carries the forward header.
   */
  isForwarded(request: Request): boolean {
    return request.headers.has(FORWARD_HEADER);
  }

  /**
   * Verifies a request another replica forwarded: its MAC over method, path and body under the
   * peer key, its time, and that it was not received before. Its body is read here (within the
   * same limits as any body), since the MAC covers it.
   *
   * @param request The HTTP request.
   * @param limits `maxBytes` (`http.maxBodyBytes`) and `timeoutMs` (`http.bodyTimeoutMs`).
   * @returns The caller's principal, the body and the sender; or the response that refuses it
   *   (403 unverified, 408, 413, 503 without the store).
   */
  async accept(
    request: Request,
    limits: { maxBytes: number; timeoutMs: number },
  ): Promise<AcceptedForward | Response> {
    const started = performance.now();
    const body = await within(readBody(request, limits.maxBytes), limits.timeoutMs);
    if (body === undefined) {
      return rpcError(
        408,
        -32000,
        `Request timeout: the forwarded body did not arrive within ${limits.timeoutMs} ms (http.bodyTimeoutMs)`,
      );
    }
    if (body.tooLarge) {
      return rpcError(
        413,
        -32000,
        `Payload Too Large: the forwarded body is over ${limits.maxBytes} bytes (http.maxBodyBytes)`,
      );
    }
    const url = new URL(request.url);
    try {
      const origin = await verifyForward(this.#shared.keys, request.headers.get(FORWARD_HEADER)!, {
        method: request.method,
        path: url.pathname + url.search,
        body: encoder.encode(body.text ?? ""),
      }, { store: this.#shared.store });
      return {
        authInfo: {
          token: "",
          clientId: origin.principal,
          scopes: [],
          extra: { forwardedFrom: origin.from },
        },
        body,
        from: origin.from,
      };
    } catch (error) {
      this.#onForward?.({
        direction: "received",
        peer: "unknown",
        outcome: "refused",
        ms: performance.now() - started,
      });
      if (error instanceof ForwardRefused) {
        this.#log.warn(`http: ${error.message}`);
        return rpcError(403, -32000, error.message);
      }
      if (error instanceof CodeExecutorError) return rpcError(503, -32000, error.message);
      throw error;
    }
  }

  /**
   * Decides where a request is served: here (its state is here, or it needs none, or it was
   * forwarded here), or at the replica that owns its live state, whose answer is relayed.
   *
   * @param call The request, its body, its principal and era, and where it came from.
   * @returns The relayed answer, or the principal to serve it here as (with a refusal when its
   *   state was lost with its replica or cannot be found).
   */
  async route(call: RouteCall): Promise<Routed> {
    const need = needed(call);
    if (!need) return { authInfo: call.authInfo };
    if (call.forwardedFrom !== undefined) {
      this.#onForward?.({
        direction: "received",
        kind: need.kind,
        peer: call.forwardedFrom,
        outcome: "answered",
        ms: 0,
      });
      // Served here whatever this replica knows: a forwarded request is never forwarded again.
      if (need.kind === "python-session") this.#renewSession(call, need);
      return { authInfo: call.authInfo };
    }
    if (need.kind === "http-session") {
      const owner = replicaOfSession(need.id);
      if (owner === undefined || owner === this.#id) return { authInfo: call.authInfo };
      return await this.#toSessionOwner(call, need, owner);
    }
    let owner: string | undefined;
    let outcome: Outcome;
    try {
      owner = need.kind === "parked-run"
        ? await this.#parked.replicaOf(need.id)
        : await this.#sessionOwner(call, need);
      if (owner === undefined || owner === this.#id) return { authInfo: call.authInfo };
      outcome = await this.#forwardTo(owner, call, need);
    } catch (error) {
      if (!(error instanceof CodeExecutorError)) throw error;
      return refusing(call.authInfo, this.#unfindable(need, error));
    }
    if ("answered" in outcome) return { response: outcome.answered, to: owner };
    if ("lost" in outcome) {
      if (need.kind === "python-session") await this.#release(call, need, owner);
      return refusing(call.authInfo, this.#lost(need, owner, outcome.lost));
    }
    return refusing(
      call.authInfo,
      new CodeExecutorError("ReplicaUnreachableError", outcome.unreachable),
    );
  }

  /** A 2025-era request of a session another replica opened: 404 when that replica is gone. */
  async #toSessionOwner(call: RouteCall, need: Needed, owner: string): Promise<Routed> {
    let outcome: Outcome;
    try {
      outcome = await this.#forwardTo(owner, call, need);
    } catch (error) {
      if (!(error instanceof CodeExecutorError)) throw error;
      return { response: rpcError(503, -32000, this.#unfindable(need, error).message), to: owner };
    }
    if ("answered" in outcome) return { response: outcome.answered, to: owner };
    if ("lost" in outcome) {
      return {
        response: rpcError(
          404,
          -32001,
          `Session not found: it was opened on replica "${owner}", which is gone (${outcome.lost}); initialize a new session`,
        ),
        to: owner,
      };
    }
    return { response: rpcError(504, -32000, outcome.unreachable), to: owner };
  }

  #ref(call: RouteCall, need: Needed): OwnedRef {
    return { kind: "python-session", id: need.id, principal: call.authInfo.clientId };
  }

  /** The replica that holds a principal's Python session; this one when nobody does (claimed). */
  async #sessionOwner(call: RouteCall, need: Needed): Promise<string | undefined> {
    const owners = this.#shared.owners;
    const ref = this.#ref(call, need);
    const owner = await owners.owner(ref);
    if (owner === this.#id) {
      this.#renewSession(call, need);
      return owner;
    }
    if (owner !== undefined) return owner;
    if (await owners.claim(ref, { replica: this.#id, ttlMs: this.#sessionTtlMs })) return this.#id;
    // Another replica claimed it a moment ago.
    return await owners.owner(ref);
  }

  /**
   * A session used here stays this replica's for another idle time. Not awaited: the call does
   * not wait for it, and a renewal lost with the store ends only in an earlier expiry.
   */
  #renewSession(call: RouteCall, need: Needed): void {
    this.#shared.owners.renew(this.#ref(call, need), this.#sessionTtlMs).catch((error) =>
      this.#log.debug(`http: could not renew the owner of a Python session: ${error.message}`)
    );
  }

  /** Forgets a lost session's owner, so that the next call starts it afresh. */
  async #release(call: RouteCall, need: Needed, gone: string): Promise<void> {
    const owners = this.#shared.owners;
    const ref = this.#ref(call, need);
    try {
      if (await owners.owner(ref) === gone) await owners.release(ref);
    } catch (error) {
      this.#log.debug(`http: could not forget a lost Python session: ${(error as Error).message}`);
    }
  }

  #unfindable(need: Needed, error: CodeExecutorError): CodeExecutorError {
    return new CodeExecutorError(
      "StateUnavailable",
      `Cannot find the replica that holds ${described(need)}, so nothing was run: ${error.message}`,
      { cause: error },
    );
  }

  #lost(need: Needed, owner: string, why: string): CodeExecutorError {
    if (need.kind === "python-session") {
      return new CodeExecutorError(
        "SessionEnded",
        `The Python session "${need.id}" was lost: replica "${owner}", which held its interpreter, is gone (${why}), and its variables with it; the code was not run. Call again to start the session afresh, and set up its variables again`,
      );
    }
    return new CodeExecutorError(
      "RequestStateRefused",
      `The requestState was refused: its run was parked on replica "${owner}", which is gone (${why}); the run, its variables and its questions were lost with it, and nothing of it was run again. Run the code again`,
    );
  }

  /**
   * Sends a request to the owner of its state and returns its answer, relayed, or why it could
   * not: the owner is gone (not registered, or refusing connections), or it did not take the
   * request in time.
   */
  async #forwardTo(owner: string, call: RouteCall, need: Needed): Promise<Outcome> {
    const started = performance.now();
    const replica = await this.#shared.replicas.find(owner);
    const report = (outcome: ForwardEvent["outcome"]) =>
      this.#onForward?.({
        direction: "sent",
        kind: need.kind,
        peer: owner,
        outcome,
        ms: performance.now() - started,
      });
    if (!replica) {
      report("lost");
      return { lost: "it is no longer registered in the shared store" };
    }
    const outcome = await this.#send(replica, call, need);
    report(
      "answered" in outcome
        ? "answered"
        : "lost" in outcome
        ? "lost"
        : outcome.timedOut
        ? "timeout"
        : "unreachable",
    );
    if (!("answered" in outcome)) {
      this.#log.warn(
        `http: a request for ${described(need)} was not forwarded to replica ${owner}: ${
          "lost" in outcome ? outcome.lost : outcome.unreachable
        }`,
      );
    }
    return outcome;
  }

  async #send(replica: ReplicaInfo, call: RouteCall, need: Needed): Promise<Outcome> {
    const { request } = call;
    const target = new URL(replica.address);
    const body = call.text ?? "";
    const headers = new Headers();
    for (const [name, value] of request.headers) {
      if (!NOT_FORWARDED.has(name)) headers.set(name, value);
    }
    headers.set(
      FORWARD_HEADER,
      await signForward(this.#shared.keys, {
        method: request.method,
        path: target.pathname + target.search,
        body: encoder.encode(body),
      }, { principal: call.authInfo.clientId, from: this.#id }),
    );
    const abort = new AbortController();
    const onCallerGone = () => abort.abort(request.signal.reason);
    request.signal.addEventListener("abort", onCallerGone, { once: true });
    const timer = setTimeout(
      () => abort.abort(new DOMException("", "TimeoutError")),
      this.#timeoutMs,
    );
    const what = `Replica "${replica.id}", which holds ${described(need)},`;
    let response: Response;
    try {
      response = await fetch(target, {
        method: request.method,
        headers,
        body: request.method === "GET" || request.method === "HEAD" ? undefined : body,
        signal: abort.signal,
        redirect: "manual",
      });
    } catch (error) {
      request.signal.removeEventListener("abort", onCallerGone);
      if (request.signal.aborted) return { unreachable: "the caller went away" };
      if ((error as Error).name === "TimeoutError") {
        return {
          unreachable:
            `${what} did not take the forwarded request within ${this.#timeoutMs} ms (http.forwardTimeoutMs): it was withdrawn and is not sent again. Retry shortly`,
          timedOut: true,
        };
      }
      if (await refuses(target)) return { lost: `${target.host} refuses connections` };
      return {
        unreachable: `${what} could not be reached (${
          (error as Error).message
        }); the request was not sent again. Retry shortly`,
      };
    } finally {
      clearTimeout(timer);
    }
    return {
      answered: relay(response, {
        abort,
        done: () => request.signal.removeEventListener("abort", onCallerGone),
        idleMs: SSE_KEEP_ALIVE_MS + this.#timeoutMs,
        failure: (why) => ({
          jsonrpc: "2.0",
          id: need.rpcId ?? null,
          error: {
            code: -32000,
            message:
              `${what} stopped answering (${why}): the request did not finish and may have partly happened; it is not sent again`,
          },
        }),
        rpcId: need.rpcId,
      }),
    };
  }
}

/** Whether nothing listens at a URL's address any more (the connection is refused). */
async function refuses(url: URL): Promise<boolean> {
  const port = Number(url.port || (url.protocol === "https:" ? 443 : 80));
  const hostname = url.hostname.replace(/^\[|\]$/g, "");
  const connecting = Deno.connect({ hostname, port });
  try {
    // An address that drops packets would keep the caller waiting for the kernel's timeout.
    const conn = await within(connecting, 1_000);
    if (conn) conn.close();
    else void connecting.then((late) => late.close(), () => {});
    return false;
  } catch (error) {
    return error instanceof Deno.errors.ConnectionRefused;
  }
}

/** What {@linkcode relay} needs. */
interface RelayOptions {
  /** Aborts the forwarded request (the owner then sees it cancelled). */
  abort: AbortController;
  /** Called once when the relay ends, however. */
  done: () => void;
  /** The longest silence of the owner's event stream. */
  idleMs: number;
  /** The JSON-RPC error to end a cut stream with. */
  failure: (why: string) => unknown;
  /** The request's JSON-RPC id: a cut stream of a request (not of a GET) ends with the error. */
  rpcId?: string | number;
}

/**
 * The owner's answer, for the caller: its status and headers (not its connection's), and its
 * body. An event stream is watched: silent past `idleMs`, or failing, it is cut, ending with a
 * JSON-RPC error for the request; a caller that goes away cancels the forwarded request.
 */
function relay(response: Response, options: RelayOptions): Response {
  const headers = new Headers();
  for (const [name, value] of response.headers) {
    if (!NOT_RELAYED.has(name)) headers.set(name, value);
  }
  const init = { status: response.status, statusText: response.statusText, headers };
  const type = response.headers.get("content-type") ?? "";
  if (!response.body || !type.startsWith("text/event-stream")) {
    options.done();
    return new Response(response.body, init);
  }
  const reader = response.body.getReader();
  let timer: ReturnType<typeof setTimeout> | undefined;
  let finished = false;
  const finish = () => {
    if (finished) return;
    finished = true;
    clearTimeout(timer);
    options.done();
  };
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      let idle = false;
      clearTimeout(timer);
      timer = setTimeout(() => {
        idle = true;
        options.abort.abort(new DOMException("", "TimeoutError"));
      }, options.idleMs);
      try {
        const { value, done } = await reader.read();
        clearTimeout(timer);
        if (done) {
          finish();
          controller.close();
        } else {
          controller.enqueue(value);
        }
      } catch (error) {
        const why = idle
          ? `no event for ${options.idleMs} ms`
          : `its stream failed: ${(error as Error).message}`;
        if (options.rpcId !== undefined) {
          // Blank lines first: the owner's stream may have been cut inside an event.
          const event = `\n\nevent: message\ndata: ${JSON.stringify(options.failure(why))}\n\n`;
          controller.enqueue(encoder.encode(event));
        }
        finish();
        controller.close();
      }
    },
    async cancel(reason) {
      finish();
      options.abort.abort(reason);
      await reader.cancel(reason).catch(() => {});
    },
  });
  return new Response(body, init);
}
