/**
 * Why the HTTP endpoint refused a request's credentials, said so that a person can fix it: each
 * refusal has a reason (`missing`, `not_bearer`, `unknown_token`, `expired`, `wrong_audience`, …),
 * a description of what is wrong and what to change, sent as the challenge's `error_description`
 * and in the JSON body, and written into the request log. No part of a refusal repeats the
 * credential, nor any part of the header that could be it (a token sent without `Bearer ` is
 * the scheme word, so the scheme is not named either).
 *
 * The gate here replaces the SDK's `requireBearerAuth` around the same `verifyBearerToken`,
 * because the SDK reads only the first of a comma-separated list of credentials and ignores words
 * after the token; both are refused here.
 *
 * @module
 */
import {
  type AuthInfo,
  OAuthError,
  OAuthErrorCode,
  type OAuthTokenVerifier,
  verifyBearerToken,
} from "@modelcontextprotocol/server";

/** Why credentials were refused. */
export type RefusalReason =
  | "missing"
  | "not_bearer"
  | "malformed"
  | "several_credentials"
  | "unknown_token"
  | "not_a_jwt"
  | "bad_signature"
  | "unknown_key"
  | "algorithm"
  | "expired"
  | "not_yet_valid"
  | "wrong_audience"
  | "wrong_issuer"
  | "no_expiry"
  | "no_subject"
  | "bad_subject"
  | "insufficient_scope"
  | "issuer_unreachable"
  | "invalid";

/**
 * A refused credential: the reason, and what is wrong and what to change, in words.
 *
 * @internal It uses the MCP SDK's types, which `deno doc --lint` takes for private ones
 * (denoland/deno#27364); the SDK documents them.
 */
export class CredentialRefused extends OAuthError {
  /** The reason, as the body and the request log name it. */
  readonly reason: RefusalReason;

  /**
   * Creates a refusal.
   *
   * @param reason The reason.
   * @param description What is wrong and what to change; never the credential.
   * @param code `invalid_token` (401) or `insufficient_scope` (403).
   */
  constructor(
    reason: RefusalReason,
    description: string,
    code: OAuthErrorCode = OAuthErrorCode.InvalidToken,
  ) {
    super(code, description);
    this.reason = reason;
  }
}

const SEND_BEARER =
  "send one header `Authorization: Bearer <token>` (the word Bearer, one space, the token)";

/**
 * Reads the one Bearer token of an `Authorization` header.
 *
 * @param header The header's value, or null.
 * @returns The token.
 * @throws {CredentialRefused} When there is none, it is not Bearer, or there are several.
 */
export function bearerToken(header: string | null): string {
  const value = header?.trim() ?? "";
  if (value === "") {
    throw new CredentialRefused(
      "missing",
      `The request has no Authorization header: ${SEND_BEARER}`,
    );
  }
  // RFC 9110 lets a header field hold a list; a credential never holds a comma (RFC 6750's
  // b64token has none), so a comma means several credentials, of which none is taken.
  if (value.includes(",")) {
    throw new CredentialRefused(
      "several_credentials",
      `The Authorization header holds several credentials (a comma-separated list): ${SEND_BEARER}`,
    );
  }
  const [scheme, ...words] = value.split(/\s+/);
  if (scheme.toLowerCase() !== "bearer") {
    throw new CredentialRefused(
      "not_bearer",
      `The Authorization header is not a Bearer credential: ${SEND_BEARER}`,
    );
  }
  if (words.length !== 1) {
    throw new CredentialRefused(
      "malformed",
      `The Authorization header has ${
        words.length === 0 ? "no token" : "more than one word"
      } after Bearer: ${SEND_BEARER}`,
    );
  }
  return words[0];
}

/**
 * What {@linkcode bearerGate} checks.
 *
 * @internal It uses the MCP SDK's types, which `deno doc --lint` takes for private ones
 * (denoland/deno#27364); the SDK documents them.
 */
export interface BearerGateOptions {
  /** Verifies a token; it throws {@linkcode CredentialRefused} with the reason. */
  verifier: OAuthTokenVerifier;
  /** Scopes every token must carry. */
  requiredScopes?: string[];
  /** The RFC 9728 metadata URL, named in the challenge (OAuth). */
  resourceMetadataUrl?: string;
  /** The resource a token's `resource` must be (OAuth). */
  expectedResource?: URL;
}

const reasons = new WeakMap<Response, RefusalReason>();

/**
 * The reason of a refusal this module answered, for the request log.
 *
 * @param response A response of the endpoint.
 * @returns The reason, or undefined for any other response.
 */
export function refusalReason(response: Response): RefusalReason | undefined {
  return reasons.get(response);
}

/** A header's quoted-string value as RFC 6750 allows in `error_description`: no `"` or `\`. */
function quoted(text: string): string {
  return text.replace(/["\\]/g, "'").replace(/[^\x20-\x7e]/g, "?");
}

function refusalOf(error: unknown, options: BearerGateOptions): CredentialRefused | undefined {
  if (error instanceof CredentialRefused) return error;
  if (!(error instanceof OAuthError)) return undefined;
  if (error.code === OAuthErrorCode.InsufficientScope) {
    return new CredentialRefused(
      "insufficient_scope",
      `The token lacks a scope this server requires (${
        (options.requiredScopes ?? []).join(" ")
      }): ask the issuer for a token with these scopes, or change http.oauth.scopes`,
      OAuthErrorCode.InsufficientScope,
    );
  }
  if (/expired/i.test(error.message)) {
    return new CredentialRefused("expired", "The token has expired: get a new one");
  }
  if (/resource/i.test(error.message)) {
    return new CredentialRefused(
      "wrong_audience",
      "The token was not issued for this server's resource: ask the issuer for a token for this URL (RFC 8707 resource)",
    );
  }
  return new CredentialRefused("invalid", `The token was refused: ${error.message}`);
}

/**
 * The answer to refused credentials: 401 (403 for a missing scope) with a Bearer challenge whose
 * `error_description` says what is wrong and what to change, and the same in a JSON body with
 * the reason.
 */
function challenge(refusal: CredentialRefused, options: BearerGateOptions): Response {
  const status = refusal.code === OAuthErrorCode.InsufficientScope ? 403 : 401;
  let header = `Bearer error="${refusal.code}", error_description="${quoted(refusal.message)}"`;
  const scopes = options.requiredScopes ?? [];
  if (scopes.length > 0) header += `, scope="${quoted(scopes.join(" "))}"`;
  if (options.resourceMetadataUrl) {
    header += `, resource_metadata="${quoted(options.resourceMetadataUrl)}"`;
  }
  const response = Response.json(
    { error: refusal.code, error_description: refusal.message, reason: refusal.reason },
    { status, headers: { "WWW-Authenticate": header } },
  );
  reasons.set(response, refusal.reason);
  return response;
}

/**
 * A gate that requires one valid Bearer token: the request's principal, or the refusal.
 *
 * @param options The verifier, the scopes, the resource and its metadata URL.
 * @returns The gate.
 * @internal It uses the MCP SDK's types, which `deno doc --lint` takes for private ones
 * (denoland/deno#27364); the SDK documents them.
 */
export function bearerGate(
  options: BearerGateOptions,
): (request: Request) => Promise<AuthInfo | Response> {
  return async (request) => {
    try {
      const token = bearerToken(request.headers.get("authorization"));
      return await verifyBearerToken(`Bearer ${token}`, options);
    } catch (error) {
      const refusal = refusalOf(error, options);
      if (refusal) return challenge(refusal, options);
      return Response.json(
        { error: OAuthErrorCode.ServerError, error_description: "Internal Server Error" },
        { status: 500 },
      );
    }
  };
}
