/**
 * What the tests of `serve --http`'s authentication (bearer tokens, OAuth) share: a start that
 * must be refused, and the checks that the caller's token reaches no sandbox code and no upstream
 * server.
 *
 * @module
 */
import { assert, assertEquals, type RunResult } from "./_assert.ts";
import { callRun, connect } from "./_client.ts";
import { describeRun, runCommand } from "./_command.ts";
import { ROOT, serverEnv, writeSettings } from "./_env.ts";
import type { RecordingUpstream } from "./fixtures/http_upstream.ts";

/** What {@linkcode runTokenProbe} saw. */
export interface TokenProbe {
  /** The run's result. */
  result: RunResult;
  /** The stdio upstream's environment (`/proc/<pid>/environ`), read after the run. */
  upstreamEnviron: string;
}

/**
 * Runs sandbox code that looks for the caller's token, as a client with that token: the code
 * calls the upstream servers `recorder` (HTTP, {@linkcode RecordingUpstream}) and `fixture`
 * (stdio, its `pid` tool) and tries to read its environment; `rest` goes on with `remote`,
 * `pid` and `env` and returns an object with `remote` and `pid`. Checks that the run succeeded
 * and reached the HTTP upstream.
 *
 * @param url The MCP endpoint.
 * @param token The caller's bearer token.
 * @param rest The rest of the code.
 * @returns The result, and the stdio upstream's environment.
 */
export async function runTokenProbe(url: URL, token: string, rest: string): Promise<TokenProbe> {
  const client = await connect(url, { token });
  let result: RunResult;
  try {
    result = await callRun(
      client,
      "run_typescript",
      `
      const remote = await callMCPTool("mcp__recorder__whoami", {});
      const pid = await callMCPTool("mcp__fixture__pid", {});
      let env;
      try { env = Deno.env.toObject(); } catch (error) { env = String(error); }
      ${rest}`,
    );
  } finally {
    await client.close();
  }
  assertEquals(result.ok, true, JSON.stringify(result));
  const { remote, pid } = result.returnValue as { remote: string; pid: string };
  assertEquals(remote, "upstream here");
  const environ = await Deno.readFile(`/proc/${Number(pid)}/environ`);
  return { result, upstreamEnviron: new TextDecoder().decode(environ) };
}

/**
 * Runs `serve --http` with the given settings (and environment) and expects it to refuse to
 * start: exit code 2, no `ready on` in its log (at level info), the message on stderr. A server
 * that starts instead is killed after 60 s, which fails the test.
 *
 * @param dir The server's TMPDIR and HOME, where its settings file is written.
 * @param settings The settings that must stop it.
 * @param env More environment variables (after the settings and the log level).
 * @returns Its stderr.
 */
export async function refusedHttpStart(
  dir: string,
  settings: Record<string, unknown>,
  env: Record<string, string> = {},
): Promise<string> {
  const run = await runCommand(
    Deno.execPath(),
    ["run", "-A", "main.ts", "serve", "--http", "--port", "0"],
    {
      cwd: ROOT,
      clearEnv: true,
      env: {
        ...serverEnv(dir),
        CODE_EXECUTOR_CONFIG: await writeSettings(dir, settings),
        CODE_EXECUTOR_LOG_LEVEL: "info",
        ...env,
      },
      timeoutMs: 60_000,
    },
  );
  assertEquals(run.code, 2, describeRun(run));
  assert(!run.stderr.includes("ready on"), describeRun(run));
  return run.stderr;
}

/**
 * Checks that a recording upstream was called, and never with an `Authorization` header or
 * `secret` in any header: the caller's token stays with Code Executor.
 *
 * @param upstream The HTTP upstream the run called.
 * @param secret The caller's token, or the part of it that must not travel.
 */
export async function assertUpstreamGotNoToken(
  upstream: RecordingUpstream,
  secret: string,
): Promise<void> {
  const requests = await upstream.requests();
  assert(requests.length > 0, "the HTTP upstream was never called");
  for (const { headers } of requests) {
    assertEquals(headers.authorization, undefined, JSON.stringify(headers));
    assert(!JSON.stringify(headers).includes(secret), JSON.stringify(headers));
  }
}
