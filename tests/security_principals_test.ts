/**
 * Principal names cannot collide with the built-in identity `local` (issue 23, class 1). A
 * tokens-file entry named `local`, or an OAuth token whose `sub` is `local`, is the HTTP principal
 * `http:local`: its saves go to its own skills directory, never to the user directory that stdio
 * shares, and no other principal sees them; the audit log tells it apart from stdio's `local`.
 *
 * @module
 */
import { join } from "node:path";
import { assert, assertEquals, describeResult, type RunResult } from "./_assert.ts";
import {
  callRun,
  connect,
  eventually,
  type HttpServer,
  startHttpServer,
  withTempDir,
} from "./_helpers.ts";
import { writeTokensFile } from "./_http_server.ts";
import { generateToken } from "../src/server/http_auth.ts";
import { startAuthorizationServer } from "./fixtures/oidc_server.ts";

const SAVE = `return await skills.save(${
  JSON.stringify({
    name: "planted",
    description: "Planted by a principal named local",
    language: "typescript",
    code: "return 'planted';",
  })
});`;

function skillsSettings(dir: string): Record<string, unknown> {
  return {
    projectDir: join(dir, "project-skills"),
    userDir: join(dir, "user-skills"),
    sharedDir: join(dir, "shared-skills"),
    principalsDir: join(dir, "principal-skills"),
  };
}

async function runAs(server: HttpServer, token: string, code: string): Promise<RunResult> {
  const client = await connect(server.url, { token });
  try {
    return await callRun(client, "run_typescript", code);
  } finally {
    await client.close();
  }
}

async function entries(dir: string): Promise<string[]> {
  const names: string[] = [];
  try {
    for await (const entry of Deno.readDir(dir)) names.push(entry.name);
  } catch (error) {
    if (!(error instanceof Deno.errors.NotFound)) throw error;
  }
  return names.sort();
}

async function auditedPrincipals(server: HttpServer): Promise<string[]> {
  const text = await Deno.readTextFile(join(server.tempDir, "audit.jsonl")).catch(() => "");
  return text.split("\n").filter(Boolean).map((line) => JSON.parse(line))
    .filter((record) => record.kind === "execution").map((record) => record.principal);
}

/** The attack: a principal called `local` saves, another principal lists and runs the skill. */
async function attempt(
  server: HttpServer,
  dir: string,
  tokens: { local: string; other: string },
): Promise<void> {
  const saved = await runAs(server, tokens.local, SAVE);
  assertEquals(saved.ok, true, describeResult(saved));
  // The save went to the saver's own directory, not the user directory stdio shares.
  assertEquals(await entries(join(dir, "user-skills")), []);
  assertEquals((await entries(join(dir, "principal-skills"))).length, 1);
  const listed = await runAs(
    server,
    tokens.other,
    "return (await skills.list()).map((s) => s.name);",
  );
  assertEquals(listed.returnValue, [], describeResult(listed));
  const called = await runAs(server, tokens.other, "return await skills.planted({});");
  assertEquals(called.error?.type, "SkillNotFound", describeResult(called));
  // Its own principal still runs it.
  const own = await runAs(server, tokens.local, "return await skills.planted({});");
  assertEquals(own.returnValue, "planted", describeResult(own));
}

Deno.test("a tokens-file principal named local is http:local: its skills are its own, and the audit log tells it from stdio", async () => {
  await withTempDir("ce-principals-", async (dir) => {
    const { tokensFile, tokens: { local, bob } } = await writeTokensFile(dir, ["local", "bob"]);
    const server = await startHttpServer({
      settings: { http: { tokensFile }, skills: skillsSettings(dir) },
    });
    try {
      await attempt(server, dir, { local, other: bob });
      await eventually(async () => (await auditedPrincipals(server)).length >= 4, 10_000);
      const principals = await auditedPrincipals(server);
      assert(!principals.includes("local"), `an HTTP run was audited as local: ${principals}`);
      assertEquals([...new Set(principals)].sort(), ["http:bob", "http:local"]);
    } finally {
      await server.close();
    }
  });
});

Deno.test("an OAuth token whose sub is local is http:local: its skills are its own", async () => {
  const as = await startAuthorizationServer();
  try {
    await withTempDir("ce-principals-oauth-", async (dir) => {
      const server = await startHttpServer({
        settings: { http: { oauth: { issuer: as.issuer } }, skills: skillsSettings(dir) },
      });
      try {
        const resource = server.url.href;
        // Signed with the issuer's own key: the server accepts it as any token of the issuer.
        const local = await as.sign({ aud: resource, sub: "local", client_id: "local" });
        // A token the issuer itself grants, for its client.
        const other = await as.token(resource);
        await attempt(server, dir, { local, other });
      } finally {
        await server.close();
      }
    });
  } finally {
    await as.stop();
  }
});

Deno.test("a tokens file cannot name default beside CODE_EXECUTOR_HTTP_TOKEN", async () => {
  await withTempDir("ce-principals-default-", async (dir) => {
    const tokensFile = join(dir, "tokens");
    await Deno.writeTextFile(tokensFile, `default ${generateToken()}\n`, { mode: 0o600 });
    let failed: Error | undefined;
    try {
      const server = await startHttpServer({
        settings: { http: { tokensFile } },
        env: { CODE_EXECUTOR_HTTP_TOKEN: generateToken() },
      });
      await server.close();
    } catch (error) {
      failed = error as Error;
    }
    assert(failed, "the server started with two tokens for the principal default");
    assert(
      /names "default", the principal of CODE_EXECUTOR_HTTP_TOKEN/.test(failed.message),
      failed.message,
    );
  });
});
