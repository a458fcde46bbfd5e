/**
 * A wrong token is diagnosable (issue 24, item 6), and an `Authorization` header with several
 * credentials is refused rather than read as its first (issue 23, class 7): each refusal's 401
 * carries the reason and what to change in `error_description` and a JSON body, the request log
 * names the same reason, `doctor --http URL` reports it, and none of them repeats the token.
 *
 * @module
 */
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import {
  describeRun,
  eventually,
  type HttpServer,
  initializeRequest,
  ROOT,
  runCommand,
  serverEnv,
  startHttpServer,
  withTempDir,
} from "./_helpers.ts";
import { writeTokensFile } from "./_http_server.ts";
import { generateToken } from "../src/server/http_auth.ts";
import { startAuthorizationServer } from "./fixtures/oidc_server.ts";

interface Refusal {
  status: number;
  reason: string;
  description: string;
  challenge: string;
}

async function initializeWith(server: HttpServer, authorization?: string): Promise<Response> {
  return await fetch(server.url, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      ...(authorization === undefined ? {} : { authorization }),
    },
    body: JSON.stringify(initializeRequest("refusals-test")),
  });
}

async function refusal(server: HttpServer, authorization?: string): Promise<Refusal> {
  const response = await initializeWith(server, authorization);
  const text = await response.text();
  assertEquals(response.status, 401, `${authorization}: ${text}`);
  const body = JSON.parse(text);
  const challenge = response.headers.get("www-authenticate") ?? "";
  assertEquals(body.error, "invalid_token");
  assertMatch(challenge, /^Bearer error="invalid_token", error_description="/);
  return {
    status: response.status,
    reason: body.reason,
    description: body.error_description,
    challenge,
  };
}

/** Asserts the reason, that the description says what to send, and that no secret is repeated. */
function assertRefusal(found: Refusal, reason: string, secrets: string[]): void {
  assertEquals(found.reason, reason, found.description);
  assert(found.description.length > 20, found.description);
  assert(found.challenge.includes(found.description.slice(0, 30)), found.challenge);
  for (const secret of secrets) {
    assert(
      !found.description.includes(secret),
      `the description repeats a token: ${found.description}`,
    );
    assert(!found.challenge.includes(secret), "the challenge repeats a token");
  }
}

Deno.test("a refused bearer token's 401 and log line name the reason and never the token; several credentials are refused", async () => {
  await withTempDir("ce-refusals-", async (dir) => {
    const { tokensFile, tokens: { alice, bob } } = await writeTokensFile(dir, ["alice", "bob"]);
    const server = await startHttpServer({ settings: { http: { tokensFile } } });
    try {
      const wrong = generateToken();
      const secrets = [alice, bob, wrong];
      assertRefusal(await refusal(server), "missing", secrets);
      assertRefusal(await refusal(server, `Basic ${btoa(`alice:${wrong}`)}`), "not_bearer", [
        ...secrets,
        btoa(`alice:${wrong}`),
      ]);
      // The token alone, without "Bearer ": its first word is the token, which is not shown.
      assertRefusal(await refusal(server, wrong), "not_bearer", secrets);
      const unknown = await refusal(server, `Bearer ${wrong}`);
      assertRefusal(unknown, "unknown_token", secrets);
      assertMatch(unknown.description, /http\.tokensFile/);
      assertRefusal(await refusal(server, `Bearer ${alice} ${wrong}`), "malformed", secrets);
      // A list of credentials is not read as its first, whichever comes first.
      for (const list of [`Bearer ${alice}, Bearer ${bob}`, `Bearer ${alice},Basic x`]) {
        assertRefusal(await refusal(server, list), "several_credentials", secrets);
      }
      const accepted = await initializeWith(server, `Bearer ${alice}`);
      await accepted.body?.cancel();
      assertEquals(accepted.status, 200);

      await eventually(
        () => Promise.resolve(/refused=several_credentials/.test(server.stderr())),
        5_000,
      );
      const log = server.stderr();
      for (
        const reason of [
          "missing",
          "not_bearer",
          "unknown_token",
          "malformed",
          "several_credentials",
        ]
      ) {
        assertMatch(log, new RegExp(`POST /mcp 401 \\d+ ms principal=- refused=${reason}\\n`));
      }
      for (const secret of secrets) assert(!log.includes(secret), "a token is in the server's log");

      // doctor --http URL checks a token against the running server.
      const doctor = (token?: string) =>
        runCommand(Deno.execPath(), ["run", "-A", "main.ts", "doctor", "--http", server.url.href], {
          cwd: ROOT,
          clearEnv: true,
          env: { ...serverEnv(dir), ...(token ? { CODE_EXECUTOR_HTTP_TOKEN: token } : {}) },
          timeoutMs: 60_000,
        });
      const refused = await doctor(wrong);
      assertEquals(refused.code, 1, describeRun(refused));
      assertMatch(refused.stdout, /refused with 401 \(unknown_token\): The token is not one/);
      assert(
        !refused.stdout.includes(wrong) && !refused.stderr.includes(wrong),
        describeRun(refused),
      );
      const none = await doctor();
      assertMatch(none.stdout, /refused with 401 \(missing\)/);
      const ok = await doctor(bob);
      assertEquals(ok.code, 0, describeRun(ok));
      assertMatch(ok.stdout, /token +accepted/);
    } finally {
      await server.close();
    }
  });
});

Deno.test("a refused OAuth token says expired or wrong audience, in the 401 and the log", async () => {
  const as = await startAuthorizationServer();
  try {
    const server = await startHttpServer({ settings: { http: { oauth: { issuer: as.issuer } } } });
    try {
      const resource = server.url.href;
      const now = Math.floor(Date.now() / 1000);
      const expired = await as.sign({ aud: resource, iat: now - 900, exp: now - 600 });
      const elsewhere = await as.token("http://127.0.0.1:1/other");
      const secrets = [expired, elsewhere];
      const gone = await refusal(server, `Bearer ${expired}`);
      assertRefusal(gone, "expired", secrets);
      assertMatch(gone.challenge, /resource_metadata="/);
      const misaddressed = await refusal(server, `Bearer ${elsewhere}`);
      assertRefusal(misaddressed, "wrong_audience", secrets);
      assertMatch(
        misaddressed.description,
        new RegExp(`aud is ${resource.replaceAll(".", "\\.")}`),
      );
      await eventually(
        () => Promise.resolve(/refused=wrong_audience/.test(server.stderr())),
        5_000,
      );
      assertMatch(server.stderr(), /principal=- refused=expired\n/);
      for (const secret of secrets) {
        assert(!server.stderr().includes(secret), "a token is in the log");
      }
    } finally {
      await server.close();
    }
  } finally {
    await as.stop();
  }
});
