/**
 * `serve --http` as an OAuth 2.1 resource server, against a real authorization server
 * (`oidc-provider` on loopback, tests/fixtures/oidc_server.ts): its JWT access tokens are
 * accepted in both protocol eras, also when the SDK client finds everything itself from the 401
 * (protected-resource metadata, then the issuer's metadata, then `client_credentials`); tokens
 * that are wrong in each way that matters are refused with the status and the `WWW-Authenticate`
 * challenge the MCP authorization spec asks for; a rotated signing key is picked up; and the
 * token goes nowhere past the gate: not to upstream servers, not into sandbox code, not into
 * logs.
 *
 * The edge cases are signed directly with jose, most with the authorization server's own key, so
 * that each is refused for the reason it stands for rather than for an unknown key.
 *
 * @module
 */
import { ClientCredentialsProvider } from "@modelcontextprotocol/client";
import { exportSPKI, SignJWT, UnsecuredJWT } from "jose";
import { join } from "node:path";
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { fixtureServer } from "./_env.ts";
import { eventually } from "./_proc.ts";
import { withTempDir } from "./_fs.ts";
import { type HttpServer, startHttpServer } from "./_http_server.ts";
import { assertUpstreamGotNoToken, refusedHttpStart, runTokenProbe } from "./_http_auth.ts";
import { callRun, connect, forEachEra, postInitialize } from "./_client.ts";
import {
  type AuthorizationServer,
  CLIENT_ID,
  CLIENT_SECRET,
  generateSigningKey,
  startAuthorizationServer,
} from "./fixtures/oidc_server.ts";
import { startRecordingUpstream } from "./fixtures/http_upstream.ts";

/** The RFC 9728 metadata URL of an MCP endpoint (`/.well-known/oauth-protected-resource/mcp`). */
function metadataUrl(url: URL): string {
  return new URL(`/.well-known/oauth-protected-resource${url.pathname}`, url).href;
}

/**
 * Sends `token` and expects the refusal: the status, a Bearer challenge with the error code and
 * `resource_metadata` pointing at the protected-resource metadata, and (when given) the reason
 * in the description.
 */
async function assertRefused(
  server: HttpServer,
  token: string | undefined,
  expected: { status: 401 | 403; error: string; reason?: RegExp },
  what: string,
): Promise<void> {
  const response = await postInitialize(server.url, "oauth-test", token && `Bearer ${token}`);
  const body = await response.text();
  assertEquals(response.status, expected.status, `${what}: ${body}`);
  const challenge = response.headers.get("www-authenticate") ?? "";
  assertMatch(challenge, /^Bearer /, what);
  assert(challenge.includes(`error="${expected.error}"`), `${what}: ${challenge}`);
  assert(
    challenge.includes(`resource_metadata="${metadataUrl(server.url)}"`),
    `${what}: ${challenge}`,
  );
  if (expected.reason) assertMatch(challenge, expected.reason, what);
}

/** Expects the token to be accepted (an `initialize` answered 200). */
async function assertAccepted(server: HttpServer, token: string, what: string): Promise<void> {
  const response = await postInitialize(server.url, "oauth-test", `Bearer ${token}`);
  const body = await response.text();
  assertEquals(response.status, 200, `${what}: ${body}`);
}

/** Runs `body` with a fresh authorization server, and stops it afterwards. */
async function withAuthorizationServer(
  body: (as: AuthorizationServer) => Promise<void>,
): Promise<void> {
  const as = await startAuthorizationServer();
  try {
    await body(as);
  } finally {
    await as.stop();
  }
}

/** Starts `serve --http` with OAuth against `as`, runs `body`, then stops the server. */
async function withOAuthServer(
  as: AuthorizationServer,
  oauth: Record<string, unknown>,
  body: (server: HttpServer) => Promise<void>,
  options: { upstream?: Record<string, unknown> } = {},
): Promise<void> {
  const server = await startHttpServer({
    settings: { http: { oauth: { issuer: as.issuer, ...oauth } } },
    upstream: options.upstream,
  });
  try {
    assertMatch(server.stderr(), /auth: oauth/);
    await body(server);
  } finally {
    await server.close();
  }
}

Deno.test("serve --http with OAuth publishes protected-resource metadata naming the resource and the issuer", async () => {
  await withAuthorizationServer(async (as) => {
    await withOAuthServer(as, { scopes: ["mcp:tools"] }, async (server) => {
      const response = await fetch(metadataUrl(server.url));
      assertEquals(response.status, 200);
      assertEquals(response.headers.get("access-control-allow-origin"), "*");
      const metadata = await response.json();
      assertEquals(metadata.resource, server.url.href);
      assertEquals(metadata.authorization_servers, [as.issuer]);
      assertEquals(metadata.scopes_supported, ["mcp:tools"]);
      // The metadata is public: it is served without a token, like /healthz.
      const health = await fetch(new URL("/healthz", server.url));
      assertEquals(health.status, 200);
      await health.body?.cancel();
    });
  });
});

Deno.test("serve --http with OAuth refuses missing, bad, expired, misaddressed, unsigned, HMAC-forged, unknown-key and under-scoped tokens", async () => {
  await withAuthorizationServer(async (as) => {
    await withOAuthServer(as, { scopes: ["mcp:tools"] }, async (server) => {
      const resource = server.url.href;
      const now = Math.floor(Date.now() / 1000);
      const invalid = (reason?: RegExp) => ({
        status: 401 as const,
        error: "invalid_token",
        reason,
      });

      // A positive control first: the real thing is accepted, so every refusal below is the
      // server's judgement of the one thing that differs.
      await assertAccepted(server, await as.token(resource), "a token from the server");
      await assertAccepted(server, await as.sign({ aud: resource }), "a token signed like one");

      await assertRefused(server, undefined, invalid(), "no token");
      await assertRefused(server, "not-a-jwt", invalid(/ERR_JWS_INVALID/), "a bad token");
      await assertRefused(
        server,
        await as.sign({ aud: resource, iat: now - 900, exp: now - 600 }),
        invalid(/ERR_JWT_EXPIRED/),
        "an expired token",
      );
      await assertRefused(
        server,
        await as.sign({ aud: resource, nbf: now + 600 }),
        invalid(/ERR_JWT_CLAIM_VALIDATION_FAILED/),
        "a token not valid yet",
      );
      // The authorization server itself issues this one, for another resource (RFC 8707).
      await assertRefused(
        server,
        await as.token("http://127.0.0.1:1/other"),
        invalid(/ERR_JWT_CLAIM_VALIDATION_FAILED/),
        "a token for another resource",
      );
      await assertRefused(
        server,
        await as.sign({ aud: resource, iss: "http://127.0.0.1:1" }),
        invalid(/ERR_JWT_CLAIM_VALIDATION_FAILED/),
        "a token from another issuer",
      );
      await assertRefused(
        server,
        await as.sign({ aud: [] }),
        invalid(/ERR_JWT_CLAIM_VALIDATION_FAILED/),
        "a token without an audience",
      );
      await assertRefused(
        server,
        new UnsecuredJWT({ iss: as.issuer, aud: resource, sub: CLIENT_ID, scope: "mcp:tools" })
          .setIssuedAt().setExpirationTime("5m").encode(),
        invalid(),
        "an alg:none token",
      );
      // The classic confusion: HS256 keyed with the issuer's public key, which anyone can fetch.
      const publicPem = await exportSPKI(
        await crypto.subtle.importKey(
          "jwk",
          as.key.publicJwk as JsonWebKey,
          { name: "RSASSA-PKCS1-v1_5", hash: "SHA-256" },
          true,
          ["verify"],
        ),
      );
      for (const secret of [publicPem, JSON.stringify(as.key.publicJwk)]) {
        const forged = await new SignJWT({
          iss: as.issuer,
          aud: resource,
          sub: CLIENT_ID,
          scope: "mcp:tools",
        })
          .setProtectedHeader({ alg: "HS256", typ: "at+jwt", kid: as.key.kid })
          .setIssuedAt().setExpirationTime("5m")
          .sign(new TextEncoder().encode(secret));
        await assertRefused(server, forged, invalid(), "an HS256 token keyed with the public key");
      }
      const stranger = await generateSigningKey("k-unknown");
      await assertRefused(
        server,
        await as.sign({ aud: resource }, { key: stranger }),
        invalid(/ERR_JWKS_NO_MATCHING_KEY/),
        "a token signed with a key the issuer does not publish",
      );
      // The same stranger's key under the issuer's kid: found, and the signature fails.
      const impostor = { ...stranger, kid: as.key.kid };
      await assertRefused(
        server,
        await as.sign({ aud: resource }, { key: impostor }),
        invalid(/ERR_JWS_SIGNATURE_VERIFICATION_FAILED/),
        "a token signed with another key under the issuer's kid",
      );
      // A valid token whose signature was cut off, and one with a claim changed after signing.
      const real = await as.token(resource);
      const [header, payload] = real.split(".");
      await assertRefused(server, `${header}.${payload}.`, invalid(), "a token without signature");
      const claims = JSON.parse(atob(payload.replace(/-/g, "+").replace(/_/g, "/")));
      const tampered = btoa(JSON.stringify({ ...claims, sub: "admin" })).replace(/=+$/, "")
        .replace(/\+/g, "-").replace(/\//g, "_");
      await assertRefused(
        server,
        `${header}.${tampered}.${real.split(".")[2]}`,
        invalid(/ERR_JWS_SIGNATURE_VERIFICATION_FAILED/),
        "a token changed after signing",
      );

      // Valid, but without the scope http.oauth.scopes requires: 403, saying which scope.
      await assertRefused(
        server,
        await as.token(resource, "mcp:admin"),
        { status: 403, error: "insufficient_scope", reason: /scope="mcp:tools"/ },
        "a token without the required scope",
      );

      // Nothing of any token reached the logs.
      for (const token of [real, header, claims.jti]) {
        assert(!server.stderr().includes(token), "a token is in the server's stderr");
      }
    });
  });
});

Deno.test("serve --http with OAuth runs code in both eras with a token from the authorization server, as its client", async () => {
  await withAuthorizationServer(async (as) => {
    await withOAuthServer(as, {}, async (server) => {
      const token = await as.token(server.url.href);
      await forEachEra(server.url, { token }, async (client, era) => {
        const result = await callRun(client, "run_typescript", "return 6 * 7");
        assertEquals(result.returnValue, 42, `${era}: ${JSON.stringify(result)}`);
      });
      const audit = join(server.tempDir, "audit.jsonl");
      const principals = async () =>
        (await Deno.readTextFile(audit).catch(() => "")).split("\n").filter(Boolean)
          .map((line) => JSON.parse(line)).filter((r) => r.kind === "execution")
          .map((r) => r.principal);
      await eventually(async () => (await principals()).length === 2, 10_000);
      assertEquals(await principals(), [`http:${CLIENT_ID}`, `http:${CLIENT_ID}`]);
      assert(!(await Deno.readTextFile(audit)).includes(token), "the token is in the audit log");
      assertMatch(server.stderr(), new RegExp(`POST /mcp 200 .*principal=http:${CLIENT_ID}`));
      assert(!server.stderr().includes(token), "the token is in the server's stderr");
    });
  });
});

Deno.test("the SDK's ClientCredentialsProvider finds the authorization server from the 401 and calls tools, in both eras", async () => {
  await withAuthorizationServer(async (as) => {
    await withOAuthServer(as, { scopes: ["mcp:tools"] }, async (server) => {
      for (const era of ["legacy", "modern"] as const) {
        // The provider knows only its credentials and the issuer it trusts; the server's 401
        // leads it to the metadata, the metadata to the issuer, the issuer to its token endpoint.
        const provider = new ClientCredentialsProvider({
          clientId: CLIENT_ID,
          clientSecret: CLIENT_SECRET,
          expectedIssuer: as.issuer,
        });
        const client = await connect(server.url, { era, authProvider: provider });
        try {
          const result = await callRun(client, "run_typescript", "return 'via discovery'");
          assertEquals(result.returnValue, "via discovery", `${era}: ${JSON.stringify(result)}`);
        } finally {
          await client.close();
        }
        const token = provider.tokens()?.access_token;
        assert(token, `${era}: the provider holds no token`);
        const claims = JSON.parse(atob(token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/")));
        assertEquals(claims.aud, server.url.href, "the token's audience is this server");
      }
      assertMatch(server.stderr(), /GET \/.well-known\/oauth-protected-resource\/mcp 200/);
    });
  });
});

Deno.test("serve --http with OAuth picks up a rotated signing key", async () => {
  await withAuthorizationServer(async (as) => {
    await withOAuthServer(as, { jwksCooldownMs: 0 }, async (server) => {
      const before = await as.token(server.url.href);
      await assertAccepted(server, before, "a token signed with the first key");
      // The issuer restarts with only a new key: the server has cached the old JWKS, meets an
      // unknown kid, fetches the JWKS again and finds it.
      await as.rotate("k2");
      const after = await as.token(server.url.href);
      assertEquals(JSON.parse(atob(after.split(".")[0])).kid, "k2");
      await assertAccepted(server, after, "a token signed with the rotated key");
      // The old key is gone from the JWKS, so its tokens are too.
      await assertRefused(
        server,
        before,
        { status: 401, error: "invalid_token", reason: /ERR_JWKS_NO_MATCHING_KEY/ },
        "a token signed with the retired key",
      );
    });
  });
});

Deno.test("serve --http with OAuth passes the access token to no upstream server and no sandbox code", async () => {
  const upstream = startRecordingUpstream();
  try {
    await withAuthorizationServer(async (as) => {
      await withOAuthServer(as, {}, async (server) => {
        const token = await as.token(server.url.href);
        const signature = token.split(".")[2];
        const { result, upstreamEnviron: environ } = await runTokenProbe(
          server.url,
          token,
          `
            // Every global that is not a function, as JSON, and anything that looks like a JWT.
            const globals = {};
            for (const name of Object.getOwnPropertyNames(globalThis)) {
              try {
                const value = globalThis[name];
                if (typeof value !== "function") globals[name] = JSON.stringify(value)?.slice(0, 2000);
              } catch (error) {
                globals[name] = String(error);
              }
            }
            const seen = JSON.stringify({ env, globals, args: Deno.args, main: Deno.mainModule });
            const jwts = seen.match(/eyJ[\w-]+\.[\w-]+\.[\w-]*/g) ?? [];
            console.log(seen);
            console.log(JSON.stringify({ jwts }));
            return { remote, pid, jwts: jwts.length };
          `,
        );
        const { jwts } = result.returnValue as { jwts: number };
        assertEquals(jwts, 0, "sandbox code found a JWT");
        assertMatch(result.stdout, /"globals"/);
        for (const part of [token, signature]) {
          assert(!JSON.stringify(result).includes(part), "sandbox code saw the token");
        }
        // The stdio upstream's environment, read from outside while it runs.
        assert(environ.length > 0, "the fixture's environment is empty");
        assert(!environ.includes(signature), "the token is in a stdio upstream's environment");
        // The HTTP upstream was called, without the caller's token or any Authorization.
        await assertUpstreamGotNoToken(upstream, signature);
        assert(!server.stderr().includes(signature), "the token is in the server's stderr");
        // The audit log is written in the background: wait for the run's tool call records.
        const auditPath = join(server.tempDir, "audit.jsonl");
        const audit = () => Deno.readTextFile(auditPath).catch(() => "");
        await eventually(async () => (await audit()).includes("mcp__fixture__pid"), 10_000);
        assert((await audit()).includes("mcp__recorder__whoami"), await audit());
        assert(!(await audit()).includes(signature), "the token is in the audit log");
      }, {
        upstream: {
          recorder: { type: "http", url: upstream.url.href },
          fixture: fixtureServer({}),
        },
      });
    });
  } finally {
    await upstream.close();
  }
});

Deno.test("serve --http refuses an OAuth issuer that cannot work, rather than refusing every token", async () => {
  await withAuthorizationServer(async (as) => {
    await withTempDir("ce-oauth-", async (dir) => {
      // The issuer's metadata says "http://127.0.0.1:<port>"; every token's iss says so too.
      const slash = await refusedHttpStart(dir, { http: { oauth: { issuer: `${as.issuer}/` } } });
      assertMatch(slash, /the issuer's metadata names the issuer "http:\/\/127\.0\.0\.1:\d+", not/);
      // Plain http is allowed on localhost and 127.0.0.1 only (the SDK's rule for the metadata).
      const port = new URL(as.issuer).port;
      const plain = await refusedHttpStart(dir, {
        http: { oauth: { issuer: `http://127.0.0.2:${port}`, jwksUri: `${as.issuer}/jwks` } },
      });
      assertMatch(
        plain,
        /Cannot use OAuth with http.oauth.issuer http:\/\/127.0.0.2:\d+: Issuer URL must be HTTPS/,
      );
      // An issuer that publishes nothing, with no jwksUri to fall back on.
      const none = await refusedHttpStart(dir, {
        http: { oauth: { issuer: "http://127.0.0.1:1" } },
      });
      assertMatch(none, /publishes no metadata with a jwks_uri; check http.oauth.issuer/);
    });
  });
});
