/**
 * Who is calling over HTTP. Every request runs as a principal: `http:` and the name of its bearer
 * token (`CODE_EXECUTOR_HTTP_TOKEN` is `default`; `http.tokensFile` names each token) or the
 * subject of its OAuth 2.1 access token, or `local` when the server runs without auth on loopback.
 * The `http:` namespace (`src/principals.ts`) keeps every name a token can carry apart from `local`. The SDK's
 * bearer gate does the HTTP side (the `WWW-Authenticate` challenges, `insufficient_scope`, expiry);
 * this module supplies the verifiers, and the protected-resource metadata for OAuth.
 *
 * Tokens are compared in constant time (SHA-256 digests through `timingSafeEqual`) and never
 * leave this module: not into logs, the audit log, sandbox code or upstream requests.
 *
 * @module
 */
import { createHash, timingSafeEqual } from "node:crypto";
import { dirname } from "node:path";
import {
  type AuthInfo,
  type AuthMetadataOptions,
  buildOAuthProtectedResourceMetadata,
  getOAuthProtectedResourceMetadataUrl,
  OAuthError,
  oauthMetadataResponse,
  type OAuthTokenVerifier,
} from "@modelcontextprotocol/server";
import { createRemoteJWKSet, errors as joseErrors, jwtVerify } from "jose";
import type { Settings } from "../config/settings.ts";
import { httpPrincipal, LOCAL_PRINCIPAL } from "../principals.ts";
import { bearerGate, CredentialRefused } from "./auth_refusals.ts";

/** How requests are authenticated. */
export type AuthMode = "none" | "bearer" | "oauth";

/** The principal a token stands for, and the token's hash. */
interface NamedToken {
  principal: string;
  digest: Uint8Array;
}

/** Authentication of the HTTP endpoint. */
export interface Authenticator {
  /** The mode in force. */
  readonly mode: AuthMode;
  /** The OAuth discovery documents (RFC 9728 and the issuer's), or undefined for other paths. */
  metadata(request: Request): Response | undefined;
  /**
   * The request's principal (`clientId`), or the 401/403 response to send instead.
   *
   * @internal It returns the MCP SDK's type, which `deno doc --lint` takes for a private one
   * (denoland/deno#27364); the SDK documents it.
   */
  authenticate(request: Request): Promise<AuthInfo | Response>;
}

/** What {@linkcode createAuthenticator} needs besides the settings. */
export interface AuthenticatorOptions {
  /** The environment (`CODE_EXECUTOR_HTTP_TOKEN`). */
  env: Record<string, string | undefined>;
  /** This server's resource URL: the OAuth audience and the protected resource. */
  resource: URL;
  /** Fetches the issuer's metadata and JWKS; `fetch` by default. */
  fetch?: typeof fetch;
}

/** A principal's name in the tokens file: printable, no spaces. */
const PRINCIPAL = /^[A-Za-z0-9_.@:+-]{1,64}$/;
/** The longest OAuth subject accepted: it names directories and is written in every log line. */
const MAX_SUBJECT = 256;
/**
 * An OAuth subject: printable, with no control, format or line-separator character (it is written
 * into the request log and the audit log, and must not start a line of its own there).
 */
const SUBJECT = new RegExp(`^[^\\p{C}\\p{Zl}\\p{Zp}]{1,${MAX_SUBJECT}}$`, "u");
/** Tokens shorter than this are refused: they could be guessed. */
const MIN_TOKEN_LENGTH = 16;
/** Bearer tokens do not expire; the SDK's gate requires an expiry, so give one far away. */
const NEVER = Number.MAX_SAFE_INTEGER;

function sha256(bytes: Uint8Array): Uint8Array {
  return new Uint8Array(createHash("sha256").update(bytes).digest());
}

/**
 * Reads a tokens file: one `principal token` pair a line; blank lines and `#` comments skipped.
 * The file must not be readable by group or others, like an SSH key.
 *
 * @param path The file.
 * @returns The principals and their tokens' digests.
 * @throws {TypeError} When the file is readable by others or a line is malformed.
 */
export async function readTokensFile(path: string): Promise<Array<[string, Uint8Array]>> {
  const info = await Deno.stat(path);
  if (Deno.build.os !== "windows" && info.mode !== null && (info.mode & 0o077) !== 0) {
    throw new TypeError(
      `Refusing http.tokensFile ${path}: it is readable by others (mode ${
        (info.mode & 0o777).toString(8)
      }); run chmod 600 ${path}`,
    );
  }
  const entries: Array<[string, Uint8Array]> = [];
  const seen = new Set<string>();
  const lines = (await Deno.readTextFile(path)).split("\n");
  lines.forEach((raw, index) => {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) return;
    const [principal, token, ...rest] = line.split(/\s+/);
    const where = `http.tokensFile ${path}, line ${index + 1}`;
    if (!token || rest.length > 0 || !PRINCIPAL.test(principal)) {
      throw new TypeError(
        `Invalid ${where}: expected "principal token" (principal: letters, digits and _.@:+-)`,
      );
    }
    if (token.length < MIN_TOKEN_LENGTH) {
      throw new TypeError(
        `Invalid ${where}: the token is shorter than ${MIN_TOKEN_LENGTH} characters; generate one with code-executor setup --http-token`,
      );
    }
    if (seen.has(principal)) {
      throw new TypeError(`Invalid ${where}: "${principal}" is listed twice`);
    }
    seen.add(principal);
    entries.push([principal, sha256(new TextEncoder().encode(token))]);
  });
  return entries;
}

/**
 * Appends a `principal token` line to a tokens file, creating it (mode 0600, and its directory)
 * when it does not exist. An existing file must pass {@linkcode readTokensFile} and must not name
 * the principal already.
 *
 * @param path The tokens file.
 * @param principal The name the token stands for.
 * @param token The token (from {@linkcode generateToken}).
 * @throws {TypeError} When the principal is not a valid name or is listed already, the token is
 *   too short, or the existing file is refused by {@linkcode readTokensFile}.
 */
export async function appendTokenLine(
  path: string,
  principal: string,
  token: string,
): Promise<void> {
  if (!PRINCIPAL.test(principal)) {
    throw new TypeError(
      `Invalid principal "${principal}": use 1 to 64 letters, digits and _.@:+-`,
    );
  }
  if (token.length < MIN_TOKEN_LENGTH || /\s/.test(token)) {
    throw new TypeError(`Invalid token: it must be ${MIN_TOKEN_LENGTH}+ characters without spaces`);
  }
  let text: string | undefined;
  try {
    text = await Deno.readTextFile(path);
  } catch (error) {
    if (!(error instanceof Deno.errors.NotFound)) throw error;
    await Deno.mkdir(dirname(path), { recursive: true, mode: 0o700 });
  }
  if (text !== undefined) {
    const listed = (await readTokensFile(path)).map(([name]) => name);
    if (listed.includes(principal)) {
      throw new TypeError(
        `Cannot add "${principal}" to ${path}: it is listed already; remove its line first to replace its token`,
      );
    }
  }
  const line = `${!text || text.endsWith("\n") ? "" : "\n"}${principal} ${token}\n`;
  await Deno.writeTextFile(path, line, { append: true, create: true, mode: 0o600 });
}

/** Generates a random bearer token (256 bits, base64url). */
export function generateToken(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(32));
  return btoa(String.fromCharCode(...bytes)).replace(/\+/g, "-").replace(/\//g, "_").replace(
    /=+$/,
    "",
  );
}

function bearerVerifier(tokens: NamedToken[]): OAuthTokenVerifier {
  return {
    verifyAccessToken(token: string): Promise<AuthInfo> {
      const presented = sha256(new TextEncoder().encode(token));
      let principal: string | undefined;
      // Every entry is compared, so that the time taken says nothing about which one matched.
      for (const entry of tokens) {
        if (timingSafeEqual(presented, entry.digest)) principal ??= entry.principal;
      }
      if (principal === undefined) {
        return Promise.reject(
          new CredentialRefused(
            "unknown_token",
            "The token is not one of this server's (CODE_EXECUTOR_HTTP_TOKEN or a line of http.tokensFile): send the token the server was given; code-executor doctor --http URL checks one",
          ),
        );
      }
      return Promise.resolve({
        token,
        clientId: httpPrincipal(principal),
        scopes: [],
        expiresAt: NEVER,
      });
    },
  };
}

/** The mode the settings ask for, with `auto` resolved. */
export function authMode(settings: Settings, env: Record<string, string | undefined>): AuthMode {
  const http = settings.http;
  if (http.auth !== "auto") return http.auth;
  if (env.CODE_EXECUTOR_HTTP_TOKEN || http.tokensFile) return "bearer";
  if (http.oauth) return "oauth";
  return "none";
}

async function issuerMetadata(
  issuer: string,
  doFetch: typeof fetch,
): Promise<Record<string, unknown> | undefined> {
  const base = issuer.endsWith("/") ? issuer : `${issuer}/`;
  for (
    const path of [".well-known/oauth-authorization-server", ".well-known/openid-configuration"]
  ) {
    try {
      const response = await doFetch(new URL(path, base), { signal: AbortSignal.timeout(5_000) });
      if (response.ok) return await response.json();
      await response.body?.cancel();
    } catch {
      // Try the next well-known document.
    }
  }
  return undefined;
}

/**
 * Why `jose` refused a JWT, in words that say what to change; the `jose` code stays in the text
 * for whoever searches for it.
 */
function joseRefusal(
  error: unknown,
  expected: { issuer: string; audience: string },
): CredentialRefused {
  const code = error instanceof joseErrors.JOSEError ? error.code : "ERR_INVALID";
  const claim = error instanceof joseErrors.JWTClaimValidationFailed ? error.claim : undefined;
  const because = (reason: ConstructorParameters<typeof CredentialRefused>[0], text: string) =>
    new CredentialRefused(reason, `${text.replace(/:/, ` (${code}):`)}`);
  if (error instanceof joseErrors.JWTExpired) {
    return because("expired", "The token has expired: get a new one from the issuer");
  }
  if (claim === "aud") {
    return because(
      "wrong_audience",
      `The token is for another audience: ask the issuer for a token whose aud is ${expected.audience} (RFC 8707 resource), or set http.oauth.audience to the aud its tokens carry`,
    );
  }
  if (claim === "iss") {
    return because(
      "wrong_issuer",
      `The token was not issued by ${expected.issuer}: get one from that issuer, or set http.oauth.issuer to the iss its tokens carry`,
    );
  }
  if (claim === "nbf" || claim === "iat") {
    return because(
      "not_yet_valid",
      "The token is not valid yet (nbf or iat in the future): check the clocks of this server and the issuer, or raise http.oauth.clockToleranceSec",
    );
  }
  if (claim === "exp") {
    return because("no_expiry", "The token has no exp: ask the issuer for tokens that expire");
  }
  if (error instanceof joseErrors.JWKSNoMatchingKey) {
    return because(
      "unknown_key",
      "The token is signed with a key the issuer's JWKS does not publish: get a token from the issuer named by http.oauth.issuer",
    );
  }
  if (error instanceof joseErrors.JWSSignatureVerificationFailed) {
    return because(
      "bad_signature",
      "The token's signature does not verify: it was altered or signed by someone else; get a new one from the issuer",
    );
  }
  if (error instanceof joseErrors.JOSEAlgNotAllowed) {
    return because(
      "algorithm",
      "The token is signed with an algorithm this server does not accept: use one of http.oauth.algorithms",
    );
  }
  if (error instanceof joseErrors.JWKSTimeout || code === "ERR_JOSE_GENERIC") {
    return because(
      "issuer_unreachable",
      "The issuer's keys could not be fetched to check the token: retry; if it lasts, check that this server reaches http.oauth.issuer (or http.oauth.jwksUri)",
    );
  }
  return because(
    "not_a_jwt",
    "The token is not a JWT access token this server can check: send the JWT access token the issuer gave (opaque tokens are not accepted)",
  );
}

async function oauthAuthenticator(
  settings: Settings,
  options: AuthenticatorOptions,
): Promise<Authenticator> {
  const oauth = settings.http.oauth!;
  const doFetch = options.fetch ?? fetch;
  const meta = await issuerMetadata(oauth.issuer, doFetch);
  // RFC 8414 §3.3: the metadata's issuer is the issuer, character for character. A mismatch (a
  // trailing slash, say) would refuse every token on `iss`, so it is refused here, where it shows.
  if (meta && meta.issuer !== oauth.issuer) {
    throw new TypeError(
      `Cannot use OAuth: the issuer's metadata names the issuer ${
        JSON.stringify(meta.issuer)
      }, not http.oauth.issuer "${oauth.issuer}"; set http.oauth.issuer to exactly what its tokens carry in "iss"`,
    );
  }
  const jwksUri = oauth.jwksUri ?? (typeof meta?.jwks_uri === "string" ? meta.jwks_uri : undefined);
  if (!jwksUri) {
    throw new TypeError(
      `Cannot use OAuth: the issuer ${oauth.issuer} publishes no metadata with a jwks_uri; check http.oauth.issuer, or set http.oauth.jwksUri`,
    );
  }
  const jwks = createRemoteJWKSet(new URL(jwksUri), {
    cooldownDuration: oauth.jwksCooldownMs,
    timeoutDuration: 5_000,
  });
  const resource = options.resource;
  const audience = oauth.audience ?? resource.href;
  const verifier: OAuthTokenVerifier = {
    async verifyAccessToken(token: string): Promise<AuthInfo> {
      try {
        const { payload } = await jwtVerify(token, jwks, {
          issuer: oauth.issuer,
          audience,
          algorithms: oauth.algorithms,
          requiredClaims: ["exp"],
          clockTolerance: oauth.clockToleranceSec,
        });
        const scopes = typeof payload.scope === "string"
          ? payload.scope.split(" ").filter(Boolean)
          : Array.isArray(payload.scp)
          ? payload.scp.map(String)
          : [];
        const subject = payload.sub ?? payload.client_id;
        if (typeof subject !== "string" || subject === "") {
          throw new CredentialRefused(
            "no_subject",
            "The token names no subject (sub or client_id): ask the issuer for a token with sub",
          );
        }
        if (!SUBJECT.test(subject)) {
          throw new CredentialRefused(
            "bad_subject",
            `The token's subject is not a name this server accepts: it must be 1 to ${MAX_SUBJECT} characters without control characters`,
          );
        }
        return {
          token,
          clientId: httpPrincipal(subject),
          scopes,
          expiresAt: payload.exp,
          resource,
        };
      } catch (error) {
        if (error instanceof OAuthError) throw error;
        throw joseRefusal(error, { issuer: oauth.issuer, audience });
      }
    },
  };
  const resourceMetadataUrl = getOAuthProtectedResourceMetadataUrl(resource);
  const gate = bearerGate({
    verifier,
    requiredScopes: oauth.scopes,
    resourceMetadataUrl,
    expectedResource: resource,
  });
  const metadataOptions: AuthMetadataOptions = {
    oauthMetadata: (meta ?? { issuer: oauth.issuer }) as AuthMetadataOptions["oauthMetadata"],
    resourceServerUrl: resource,
    scopesSupported: oauth.scopes.length > 0 ? oauth.scopes : undefined,
    resourceName: "Code Executor",
  };
  try {
    // The SDK checks the issuer URL on every metadata request; a bad one would be a 500 each time.
    buildOAuthProtectedResourceMetadata(metadataOptions);
  } catch (error) {
    throw new TypeError(
      `Cannot use OAuth with http.oauth.issuer ${oauth.issuer}: ${
        (error as Error).message
      } (http is allowed on localhost and 127.0.0.1 only)`,
    );
  }
  return {
    mode: "oauth",
    metadata: (request) => oauthMetadataResponse(request, metadataOptions),
    authenticate: gate,
  };
}

/**
 * Builds the authentication of the HTTP endpoint from the settings.
 *
 * @param settings The admin's settings (`http`).
 * @param options The environment and this server's resource URL.
 * @returns The authenticator.
 * @throws {TypeError} When the tokens or the OAuth issuer cannot be used; the message says which
 *   setting to fix.
 */
export async function createAuthenticator(
  settings: Settings,
  options: AuthenticatorOptions,
): Promise<Authenticator> {
  const mode = authMode(settings, options.env);
  if (mode === "oauth") {
    if (!settings.http.oauth) {
      throw new TypeError(
        "http.auth is oauth but http.oauth is not set: set http.oauth.issuer (CODE_EXECUTOR_OAUTH_ISSUER)",
      );
    }
    return await oauthAuthenticator(settings, options);
  }
  if (mode === "none") {
    const local: AuthInfo = { token: "", clientId: LOCAL_PRINCIPAL, scopes: [], expiresAt: NEVER };
    return {
      mode,
      metadata: () => undefined,
      authenticate: () => Promise.resolve(local),
    };
  }
  const tokens: NamedToken[] = [];
  const single = options.env.CODE_EXECUTOR_HTTP_TOKEN;
  if (single) {
    if (single.length < MIN_TOKEN_LENGTH) {
      throw new TypeError(
        `CODE_EXECUTOR_HTTP_TOKEN is shorter than ${MIN_TOKEN_LENGTH} characters; generate one with code-executor setup --http-token`,
      );
    }
    tokens.push({ principal: "default", digest: sha256(new TextEncoder().encode(single)) });
  }
  if (settings.http.tokensFile) {
    for (const [principal, hash] of await readTokensFile(settings.http.tokensFile)) {
      // Two tokens for one name would make two holders one principal, sharing everything.
      if (single && principal === "default") {
        throw new TypeError(
          `Invalid http.tokensFile ${settings.http.tokensFile}: it names "default", the principal of CODE_EXECUTOR_HTTP_TOKEN; rename the entry or unset the variable`,
        );
      }
      tokens.push({ principal, digest: hash });
    }
  }
  if (tokens.length === 0) {
    throw new TypeError(
      "http.auth is bearer but no token is set: set CODE_EXECUTOR_HTTP_TOKEN or http.tokensFile (code-executor setup --http-token makes one)",
    );
  }
  return {
    mode,
    metadata: () => undefined,
    authenticate: bearerGate({ verifier: bearerVerifier(tokens) }),
  };
}
