/**
 * Requests of one replica to another (a request that needs live state the other owns): signed
 * with the peer key derived from `state.key`, never with the caller's token, and carrying the
 * caller's principal so that the owner serves it as the caller's.
 *
 * The header `x-code-executor-forward` is `v1.<ms>.<nonce>.<principal>.<from>.<mac>`
 * (principal and sending replica in base64url), the MAC an HMAC-SHA256 over the method, the path,
 * the SHA-256 of the body, the time, the nonce, the principal and the sender. The receiver
 * refuses it past the replay window (either side of its clock) and refuses a nonce it has seen
 * (recorded in the store for twice the window, so across replicas too). A request that carries a
 * valid header is served where it lands, never forwarded again: at most one hop.
 *
 * @module
 */
import { base64url, fromBase64url, type StateKeys } from "./keys.ts";
import type { StateStore } from "./store.ts";

/** The header a forwarded request carries. */
export const FORWARD_HEADER = "x-code-executor-forward";

/** How far a forwarded request's time may be from the receiver's clock, by default. */
export const FORWARD_WINDOW_MS = 30_000;

/** What a forward MAC covers besides the principal. */
export interface ForwardedRequest {
  /** `POST`, `GET`, … */
  method: string;
  /** The path and query as sent (`/mcp`). */
  path: string;
  /** The body's bytes (empty for none). */
  body: Uint8Array<ArrayBuffer>;
}

/** Who a verified forward came from, and for whom. */
export interface ForwardOrigin {
  /** The caller's principal, as the sending replica authenticated it. */
  principal: string;
  /** The sending replica's id. */
  from: string;
}

/** A forwarded request that is refused (answer 403; never serve it, never forward it). */
export class ForwardRefused extends Error {
  /**
   * Creates the refusal.
   *
   * @param why What was wrong with it.
   */
  constructor(why: string) {
    super(`Forwarded request refused: ${why}`);
    this.name = "ForwardRefused";
  }
}

const encoder = new TextEncoder();

async function canonical(
  request: ForwardedRequest,
  fields: { at: number; nonce: string; principal: string; from: string },
): Promise<string> {
  const digest = base64url(new Uint8Array(await crypto.subtle.digest("SHA-256", request.body)));
  return JSON.stringify([
    "v1",
    request.method.toUpperCase(),
    request.path,
    digest,
    fields.at,
    fields.nonce,
    fields.principal,
    fields.from,
  ]);
}

/**
 * Signs a request to forward to the replica that owns its live state.
 *
 * @param keys The cluster's keys.
 * @param request Method, path and body, exactly as they will be sent.
 * @param origin The caller's principal and this replica's id.
 * @returns The value of {@linkcode FORWARD_HEADER}.
 */
export async function signForward(
  keys: StateKeys,
  request: ForwardedRequest,
  origin: ForwardOrigin,
): Promise<string> {
  const at = Date.now();
  const nonce = base64url(crypto.getRandomValues(new Uint8Array(16)));
  const mac = await keys.peerSign(await canonical(request, { at, nonce, ...origin }));
  const principal = base64url(encoder.encode(origin.principal));
  const from = base64url(encoder.encode(origin.from));
  return `v1.${at}.${nonce}.${principal}.${from}.${base64url(mac)}`;
}

/** Options of {@linkcode verifyForward}. */
export interface VerifyForwardOptions {
  /** Where seen nonces are recorded. */
  store: StateStore;
  /** The replay window; {@linkcode FORWARD_WINDOW_MS} by default. */
  windowMs?: number;
}

/**
 * Checks a forwarded request: MAC, time, and that its nonce is new.
 *
 * @param keys The cluster's keys.
 * @param header The value of {@linkcode FORWARD_HEADER}.
 * @param request Method, path and body as received.
 * @param options The store for nonces, and the window.
 * @returns The caller's principal and the sending replica.
 * @throws {ForwardRefused} When the header is malformed, altered, signed with another key, out
 *   of the window, or replayed.
 * @throws {CodeExecutorError} `StateUnavailable` when the nonce cannot be recorded (refused too).
 */
export async function verifyForward(
  keys: StateKeys,
  header: string,
  request: ForwardedRequest,
  options: VerifyForwardOptions,
): Promise<ForwardOrigin> {
  const windowMs = options.windowMs ?? FORWARD_WINDOW_MS;
  const parts = header.split(".");
  if (parts.length !== 6 || parts[0] !== "v1" || !/^\d{1,16}$/.test(parts[1])) {
    throw new ForwardRefused(`${FORWARD_HEADER} is malformed`);
  }
  const [, atText, nonce, principalText, fromText, macText] = parts;
  let origin: ForwardOrigin;
  let mac: Uint8Array<ArrayBuffer>;
  try {
    const decoder = new TextDecoder("utf-8", { fatal: true });
    origin = {
      principal: decoder.decode(fromBase64url(principalText)),
      from: decoder.decode(fromBase64url(fromText)),
    };
    mac = fromBase64url(macText);
  } catch {
    throw new ForwardRefused(`${FORWARD_HEADER} is malformed`);
  }
  const at = Number(atText);
  const data = await canonical(request, { at, nonce, ...origin });
  if (!await keys.peerVerify(data, mac)) {
    throw new ForwardRefused(
      "its MAC does not match (another state.key, or the request was altered on the way)",
    );
  }
  const skew = Math.abs(Date.now() - at);
  if (skew > windowMs) {
    throw new ForwardRefused(
      `it was signed ${skew} ms from this replica's clock, outside the ${windowMs} ms window (replayed, or the replicas' clocks differ)`,
    );
  }
  const seen = `ce:f:n:${await keys.index("nonce", nonce)}`;
  const first = await options.store.set(seen, new Uint8Array([1]), {
    ttlMs: 2 * windowMs,
    ifAbsent: true,
  });
  if (!first) throw new ForwardRefused("it was already received once (a replay)");
  return origin;
}
