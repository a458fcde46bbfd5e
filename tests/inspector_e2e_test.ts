/**
 * End to end through a third-party client: the MCP Inspector CLI from npm launches
 * `deno task --quiet start` in the repository root and talks to it over stdio, and talks to a
 * `serve --http` with a bearer token over Streamable HTTP in both protocol eras.
 *
 * The Inspector runs with `npx` on the machine's Node. Its package.json asks for Node
 * >= 22.19, but its CLI works on Node 20; `deno run npm:@modelcontextprotocol/inspector` is
 * not an option because Deno fails to resolve one of its optional dependencies
 * (`napi-windows-process-start-time`). `.ci/run` pre-fetches the same version (pinned as
 * `INSPECTOR` in `_helpers.ts`) into the npx cache, so `--prefer-offline` keeps this test off the
 * network there.
 *
 * @module
 */
import { assert, assertEquals } from "./_assert.ts";
import { join } from "node:path";
import { INSPECTOR } from "./_pins.ts";
import { ROOT } from "./_env.ts";
import { eventually, sandboxDirs } from "./_proc.ts";
import { type CommandRun, describeRun, runCommand } from "./_command.ts";
import { withTempDir } from "./_fs.ts";
import { startHttpServer } from "./_http_server.ts";
import { generateToken } from "../src/server/http_auth.ts";

/** Generous: the first run may download the Inspector and its dependencies from npm. */
const INSPECTOR_TIMEOUT_MS = 180_000;

/**
 * Runs the Inspector CLI against a freshly started server and waits for it to exit.
 *
 * @param tempDir The server's TMPDIR, where its workspaces go.
 * @param methodArgs `--method ...` and its options.
 * @returns The exit code and output of the Inspector.
 */
function inspect(tempDir: string, methodArgs: string[]): Promise<CommandRun> {
  // The Inspector gives the server only PATH, HOME and a few other variables; the rest goes
  // through -e.
  const serverEnv = ["-e", `TMPDIR=${tempDir}`, "-e", "CODE_EXECUTOR_LOG_LEVEL=warn"];
  const denoDir = Deno.env.get("DENO_DIR");
  if (denoDir) serverEnv.push("-e", `DENO_DIR=${denoDir}`);
  return runCommand("npx", [
    "--yes",
    "--prefer-offline",
    INSPECTOR,
    "--cli",
    ...serverEnv,
    "--cwd",
    ROOT,
    Deno.execPath(),
    "task",
    "--quiet",
    "start",
    ...methodArgs,
  ], {
    // Not the repository: npx must not mistake it for an npm project.
    cwd: tempDir,
    env: { NO_COLOR: "1", npm_config_update_notifier: "false", npm_config_fund: "false" },
    timeoutMs: INSPECTOR_TIMEOUT_MS,
  });
}

/**
 * Parses the Inspector's JSON result, failing with its output when it did not succeed.
 *
 * @param run The Inspector run.
 * @returns The parsed MCP result.
 */
function parseResult(run: CommandRun): Record<string, unknown> {
  const context = describeRun(run);
  assertEquals(run.code, 0, `the Inspector failed: ${context}`);
  try {
    return JSON.parse(run.stdout);
  } catch {
    throw new SyntaxError(`The Inspector printed no JSON result: ${context}`);
  }
}

/**
 * Runs `body` with a private TMPDIR for the server and checks that the server removed every
 * workspace it created there.
 */
function withServerTempDir(body: (tempDir: string) => Promise<void>): Promise<void> {
  return withTempDir("ce-inspector-", async (tempDir) => {
    await body(tempDir);
    const clean = await eventually(async () => (await sandboxDirs(tempDir)).length === 0);
    assert(clean, `workspaces left behind: ${(await sandboxDirs(tempDir)).join(", ")}`);
  });
}

Deno.test("MCP Inspector CLI lists run_typescript with tools/list", async () => {
  await withServerTempDir(async (tempDir) => {
    const result = parseResult(await inspect(tempDir, ["--method", "tools/list"]));
    const tools = result.tools as { name: string; inputSchema: { required?: string[] } }[];
    const names = tools.map((tool) => tool.name);
    assert(names.includes("run_typescript"), `tools/list returned ${JSON.stringify(names)}`);
    const runTypescript = tools.find((tool) => tool.name === "run_typescript")!;
    assertEquals(runTypescript.inputSchema.required, ["code"]);
  });
});

Deno.test("MCP Inspector CLI runs code with tools/call run_typescript", async () => {
  await withServerTempDir(async (tempDir) => {
    const result = parseResult(
      await inspect(tempDir, [
        "--method",
        "tools/call",
        "--tool-name",
        "run_typescript",
        "--tool-arg",
        'code=console.log("from inspector"); return 6*7',
      ]),
    );
    assertEquals(result.isError, false, JSON.stringify(result));
    const structured = result.structuredContent as Record<string, unknown>;
    assertEquals(structured.ok, true);
    assertEquals(structured.stdout, "from inspector\n");
    assertEquals(structured.returnValue, 42);
    const text = (result.content as { type: string; text?: string }[])
      .filter((block) => block.type === "text")
      .map((block) => block.text)
      .join("\n");
    assert(text.includes("from inspector"), `text content: ${text}`);
    assert(text.includes("42"), `text content: ${text}`);
  });
});

/**
 * Runs the Inspector CLI against an HTTP endpoint. It gets a private HOME and an in-memory secret
 * store (it would otherwise try the OS keychain), keeps the caller's npm cache, and with
 * `--stored-auth-only` never waits for a browser: a refused request ends it with `auth_required`.
 *
 * @param home The private HOME.
 * @param url The MCP endpoint.
 * @param args The header, era and `--method ...` options.
 * @returns The exit code and output of the Inspector.
 */
function inspectHttp(home: string, url: URL, args: string[]): Promise<CommandRun> {
  const realHome = Deno.env.get("HOME") ?? home;
  return runCommand("npx", [
    "--yes",
    "--prefer-offline",
    INSPECTOR,
    "--cli",
    url.href,
    "--transport",
    "http",
    "--stored-auth-only",
    ...args,
  ], {
    cwd: home,
    env: {
      NO_COLOR: "1",
      HOME: home,
      MCP_INSPECTOR_SECRET_STORE: "memory",
      npm_config_cache: Deno.env.get("npm_config_cache") ?? join(realHome, ".npm"),
      npm_config_update_notifier: "false",
      npm_config_fund: "false",
    },
    timeoutMs: INSPECTOR_TIMEOUT_MS,
  });
}

Deno.test("MCP Inspector CLI lists and calls tools over HTTP with a bearer token, and is refused without it", async () => {
  const token = generateToken();
  const server = await startHttpServer({ env: { CODE_EXECUTOR_HTTP_TOKEN: token } });
  try {
    await withTempDir("ce-inspector-home-", async (home) => {
      const header = ["--header", `Authorization: Bearer ${token}`];
      const listed = parseResult(
        await inspectHttp(home, server.url, [...header, "--method", "tools/list"]),
      );
      const names = (listed.tools as { name: string }[]).map((tool) => tool.name);
      assert(names.includes("run_typescript"), `tools/list returned ${JSON.stringify(names)}`);

      for (const era of ["legacy", "modern"]) {
        const called = parseResult(
          await inspectHttp(home, server.url, [
            ...header,
            "--protocol-era",
            era,
            "--method",
            "tools/call",
            "--tool-name",
            "run_typescript",
            "--tool-arg",
            `code=console.log("over http"); return 6*7`,
          ]),
        );
        assertEquals(called.isError, false, `${era}: ${JSON.stringify(called)}`);
        const structured = called.structuredContent as Record<string, unknown>;
        assertEquals(structured.returnValue, 42, era);
        assertEquals(structured.stdout, "over http\n", era);
      }

      for (const refusedHeader of [[], ["--header", `Authorization: Bearer ${generateToken()}`]]) {
        const refused = await inspectHttp(home, server.url, [
          ...refusedHeader,
          "--method",
          "tools/list",
        ]);
        assert(refused.code !== 0, describeRun(refused));
        assert(
          `${refused.stdout}${refused.stderr}`.includes("auth_required"),
          describeRun(refused),
        );
      }
    });
    assert(!server.stderr().includes(token), "the token is in the server's stderr");
  } finally {
    await server.close();
  }
});
