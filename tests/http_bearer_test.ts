/**
 * Bearer tokens on `serve --http`, end to end: a real server process, the SDK v2 client in both
 * protocol eras, plain `fetch` for what a client must not be able to do. `CODE_EXECUTOR_HTTP_TOKEN`
 * is the principal `default`; `http.tokensFile` names each token's principal; a missing or wrong
 * token is a 401 with a `Bearer` challenge; a tokens file that others can read, a malformed line
 * or a short token stop the server before it serves; `setup --http-token` makes tokens the server
 * then accepts. No token ever shows in the server's stderr or its audit log, and the server's
 * own `CODE_EXECUTOR_HTTP_TOKEN` reaches no upstream server (stdio or HTTP) and no sandbox code.
 *
 * @module
 */
import { join } from "node:path";
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { fixtureServer, ROOT, serverEnv } from "./_env.ts";
import { eventually } from "./_proc.ts";
import { describeRun, runCommand } from "./_command.ts";
import { withTempDir } from "./_fs.ts";
import { type HttpServer, startHttpServer } from "./_http_server.ts";
import { assertUpstreamGotNoToken, refusedHttpStart, runTokenProbe } from "./_http_auth.ts";
import { callRun, connect, forEachEra, postInitialize } from "./_client.ts";
import { generateToken } from "../src/server/http_auth.ts";
import { startRecordingUpstream } from "./fixtures/http_upstream.ts";

/** The execution records of a server's audit log. */
async function auditedPrincipals(server: HttpServer): Promise<string[]> {
  const text = await Deno.readTextFile(join(server.tempDir, "audit.jsonl")).catch(() => "");
  return text.split("\n").filter(Boolean).map((line) => JSON.parse(line))
    .filter((record) => record.kind === "execution").map((record) => record.principal);
}

/** Waits until the audit log holds `count` execution records and returns their principals. */
async function waitForAudit(server: HttpServer, count: number): Promise<string[]> {
  await eventually(async () => (await auditedPrincipals(server)).length >= count, 10_000);
  return await auditedPrincipals(server);
}

/** Asserts a 401 with a Bearer challenge, and drains the body. */
async function assertRefused(response: Response, why: string): Promise<void> {
  const body = await response.text();
  assertEquals(response.status, 401, `${why}: ${body}`);
  assertMatch(response.headers.get("www-authenticate") ?? "", /^Bearer /, why);
}

/** Asserts that none of the tokens appears in the server's stderr or audit log. */
async function assertNoTokenLeaked(server: HttpServer, tokens: string[]): Promise<void> {
  const audit = await Deno.readTextFile(join(server.tempDir, "audit.jsonl")).catch(() => "");
  for (const token of tokens) {
    assert(!server.stderr().includes(token), "a token is in the server's stderr");
    assert(!audit.includes(token), "a token is in the audit log");
  }
}

Deno.test("serve --http with CODE_EXECUTOR_HTTP_TOKEN runs both eras as principal default and answers a missing or wrong token with 401 Bearer", async () => {
  const token = generateToken();
  const server = await startHttpServer({ env: { CODE_EXECUTOR_HTTP_TOKEN: token } });
  try {
    assertMatch(server.stderr(), /auth: bearer/);
    await assertRefused(await postInitialize(server.url, "bearer-test"), "no Authorization header");
    await assertRefused(
      await postInitialize(server.url, "bearer-test", `Bearer ${generateToken()}`),
      "a wrong token",
    );
    await assertRefused(
      await postInitialize(server.url, "bearer-test", `Bearer ${token}x`),
      "the token plus one character",
    );
    await assertRefused(
      await postInitialize(server.url, "bearer-test", `Basic ${btoa(`u:${token}`)}`),
      "another scheme",
    );
    await assertRefused(
      await postInitialize(server.url, "bearer-test", "Bearer "),
      "an empty token",
    );
    // The same requests with the token get through.
    const ok = await postInitialize(server.url, "bearer-test", `Bearer ${token}`);
    await ok.body?.cancel();
    assertEquals(ok.status, 200);

    await forEachEra(server.url, { token }, async (client, era) => {
      const result = await callRun(client, "run_typescript", "return 6 * 7");
      assertEquals(result.returnValue, 42, `${era}: ${JSON.stringify(result)}`);
    });
    // A client without the token cannot even connect.
    const refused = await connect(server.url).then(
      async (client) => {
        await client.close();
        return false;
      },
      () => true,
    );
    assert(refused, "a client without the token connected");
    // The initialize above opened no run; the two runs ran as "default" (http:default).
    assertEquals(await waitForAudit(server, 2), ["http:default", "http:default"]);
    await assertNoTokenLeaked(server, [token]);
    assertMatch(server.stderr(), /POST \/mcp 401 .*principal=-/);
    assertMatch(server.stderr(), /POST \/mcp 200 .*principal=http:default/);
  } finally {
    await server.close();
  }
});

Deno.test("serve --http with http.tokensFile runs each token as its own principal", async () => {
  await withTempDir("ce-tokens-", async (dir) => {
    const alice = generateToken();
    const bob = generateToken();
    const tokensFile = join(dir, "tokens");
    await Deno.writeTextFile(
      tokensFile,
      `# principal token\n\nalice ${alice}\r\n  bob\t${bob}  \n`,
      { mode: 0o600 },
    );
    const server = await startHttpServer({ settings: { http: { tokensFile } } });
    try {
      await assertRefused(
        await postInitialize(server.url, "bearer-test", `Bearer ${generateToken()}`),
        "an unlisted token",
      );
      await assertRefused(
        await postInitialize(server.url, "bearer-test", "Bearer alice"),
        "a principal's name",
      );
      for (const [token, era] of [[alice, "legacy"], [bob, "modern"], [alice, "modern"]] as const) {
        const client = await connect(server.url, { era, token });
        try {
          const result = await callRun(client, "run_typescript", "return 1");
          assertEquals(result.returnValue, 1, JSON.stringify(result));
        } finally {
          await client.close();
        }
      }
      assertEquals((await waitForAudit(server, 3)).sort(), [
        "http:alice",
        "http:alice",
        "http:bob",
      ]);
      assertMatch(server.stderr(), /principal=http:alice/);
      assertMatch(server.stderr(), /principal=http:bob/);
      await assertNoTokenLeaked(server, [alice, bob]);
    } finally {
      await server.close();
    }
  });
});

Deno.test("serve --http in bearer mode passes CODE_EXECUTOR_HTTP_TOKEN to no upstream server and no sandbox code", async () => {
  const token = generateToken();
  const upstream = startRecordingUpstream();
  try {
    const server = await startHttpServer({
      env: { CODE_EXECUTOR_HTTP_TOKEN: token },
      upstream: {
        recorder: { type: "http", url: upstream.url.href },
        fixture: fixtureServer({}),
      },
    });
    try {
      const { result, upstreamEnviron: environ } = await runTokenProbe(
        server.url,
        token,
        "console.log(JSON.stringify(env));\nreturn { remote, pid };",
      );
      assertMatch(result.stdout, /NotCapable: Requires env access/);
      assert(!JSON.stringify(result).includes(token), "sandbox code saw the token");
      // The server's own environment holds the token; the stdio upstream's curated one does not.
      assertMatch(environ, /(^|\0)PATH=/);
      assert(!environ.includes(token), "the token is in a stdio upstream's environment");
      assert(!environ.includes("CODE_EXECUTOR_HTTP_TOKEN"), environ.replaceAll("\0", " "));
      await assertUpstreamGotNoToken(upstream, token);
      assertEquals(await waitForAudit(server, 1), ["http:default"]);
      await assertNoTokenLeaked(server, [token]);
    } finally {
      await server.close();
    }
  } finally {
    await upstream.close();
  }
});

Deno.test("serve --http refuses a tokens file that group or others can read, and says chmod 600", async () => {
  await withTempDir("ce-tokens-", async (dir) => {
    const token = generateToken();
    const tokensFile = join(dir, "tokens");
    for (const mode of [0o644, 0o640, 0o604]) {
      await Deno.writeTextFile(tokensFile, `alice ${token}\n`);
      await Deno.chmod(tokensFile, mode);
      const stderr = await refusedHttpStart(dir, { http: { tokensFile } });
      assertMatch(stderr, new RegExp(`mode ${mode.toString(8)}\\); run chmod 600 ${tokensFile}`));
      assert(!stderr.includes(token), "the refusal shows the token");
    }
  });
});

Deno.test("serve --http refuses a malformed tokens file line or a short token, naming the line", async () => {
  await withTempDir("ce-tokens-", async (dir) => {
    const token = generateToken();
    const tokensFile = join(dir, "tokens");
    const cases: Array<[string, RegExp]> = [
      [`# team\nalice ${token}\nbob\n`, /line 3: expected "principal token"/],
      [`alice ${token} extra\n`, /line 1: expected "principal token"/],
      [`\n\nal ice!x ${token}\n`, /line 3: expected "principal token"/],
      [`alice ${token}\n\nbob short-token\n`, /line 3: the token is shorter than 16 characters/],
      [`alice ${token}\nalice ${generateToken()}\n`, /line 2: "alice" is listed twice/],
    ];
    for (const [text, message] of cases) {
      await Deno.writeTextFile(tokensFile, text, { mode: 0o600 });
      const stderr = await refusedHttpStart(dir, { http: { tokensFile } });
      assertMatch(stderr, new RegExp(`Invalid http.tokensFile ${tokensFile}, ${message.source}`));
      assert(!stderr.includes(token), `the refusal shows a token: ${stderr}`);
    }
    // The single token of the environment is held to the same length.
    const stderr = await refusedHttpStart(dir, {}, { CODE_EXECUTOR_HTTP_TOKEN: "short" });
    assertMatch(stderr, /CODE_EXECUTOR_HTTP_TOKEN is shorter than 16 characters/);
  });
});

Deno.test("setup --http-token prints a token and adds named ones to a 0600 tokens file that serve --http accepts", async () => {
  await withTempDir("ce-tokens-", async (dir) => {
    const setup = (args: string[]) =>
      runCommand(Deno.execPath(), ["run", "-A", "main.ts", "setup", "--http-token", ...args], {
        cwd: ROOT,
        clearEnv: true,
        env: serverEnv(dir, { home: dir }),
        timeoutMs: 60_000,
      });
    const plain = await setup([]);
    assertEquals(plain.code, 0, describeRun(plain));
    assertMatch(plain.stdout, /^[A-Za-z0-9_-]{43}\n$/);
    assertMatch(plain.stderr, /CODE_EXECUTOR_HTTP_TOKEN/);
    const again = await setup([]);
    assert(again.stdout !== plain.stdout, "two tokens are the same");

    const tokensFile = join(dir, "secrets", "tokens");
    const alice = await setup(["--principal", "alice", "--tokens-file", tokensFile]);
    assertEquals(alice.code, 0, describeRun(alice));
    const bob = await setup(["--principal", "bob", "--tokens-file", tokensFile]);
    assertEquals(bob.code, 0, describeRun(bob));
    assertEquals((await Deno.stat(tokensFile)).mode! & 0o777, 0o600);
    assertEquals(
      await Deno.readTextFile(tokensFile),
      `alice ${alice.stdout.trim()}\nbob ${bob.stdout.trim()}\n`,
    );
    const twice = await setup(["--principal", "bob", "--tokens-file", tokensFile]);
    assertEquals(twice.code, 2, describeRun(twice));
    assertMatch(twice.stderr, /"bob" .* is listed already/);
    const noFile = await setup(["--principal", "carol"]);
    assertEquals(noFile.code, 2, describeRun(noFile));
    assertMatch(noFile.stderr, /pass --tokens-file PATH or set http.tokensFile/);

    const server = await startHttpServer({ settings: { http: { tokensFile } } });
    try {
      const client = await connect(server.url, { token: bob.stdout.trim() });
      try {
        assertEquals((await callRun(client, "run_typescript", "return 'hi'")).returnValue, "hi");
      } finally {
        await client.close();
      }
      assertEquals(await waitForAudit(server, 1), ["http:bob"]);
    } finally {
      await server.close();
    }
  });
});
