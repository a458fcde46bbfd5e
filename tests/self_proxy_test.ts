/**
 * Code Executor never proxies itself, through the real program: a client's entry that is this
 * server under another name is skipped with a warning naming the entry, whether it is a running
 * `serve --http` (recognised by its `serverInfo` at initialize), the JSR package, or `deno run
 * main.ts serve` of another checkout (recognised by the command, and never started).
 *
 * @module
 */
import { join } from "node:path";
import { assert, assertEquals, assertMatch, describeResult } from "./_assert.ts";
import {
  describeRun,
  ROOT,
  runCommand,
  serverEnv,
  startHttpServer,
  withUserDirs,
  writeMcpConfig,
} from "./_helpers.ts";
import { startStdioServer } from "./_stdio_stderr.ts";

const TOKEN = "self-proxy-test-token-0123456789";

/**
 * A second checkout of this repository: its own main.ts and deno.json (so that neither path nor
 * realpath is this checkout's), the code and the npm packages linked from this one.
 */
async function copyCheckout(dir: string): Promise<string> {
  await Deno.mkdir(dir, { recursive: true });
  for (const file of ["main.ts", "deno.json", "deno.lock"]) {
    await Deno.copyFile(join(ROOT, file), join(dir, file));
  }
  for (const link of ["src", "sandbox", "node_modules"]) {
    await Deno.symlink(join(ROOT, link), join(dir, link));
  }
  return join(dir, "main.ts");
}

/** Runs `doctor --config` with the test's HOME and a clean environment. */
function runDoctor(root: string, home: string, config: string): ReturnType<typeof runCommand> {
  return runCommand(
    Deno.execPath(),
    ["run", "-A", "main.ts", "doctor", "--config", config],
    {
      cwd: ROOT,
      clearEnv: true,
      env: serverEnv(root, { home, sharedCache: true }),
      timeoutMs: 120_000,
    },
  );
}

Deno.test("an HTTP entry that is a running Code Executor is skipped by its serverInfo, with a warning naming it", async () => {
  await withUserDirs("ce-self-proxy-", async ({ home, root }) => {
    const remote = await startHttpServer({ env: { CODE_EXECUTOR_HTTP_TOKEN: TOKEN } });
    try {
      const config = await writeMcpConfig(root, {
        "team-executor": {
          type: "http",
          url: remote.url.href,
          headers: { Authorization: `Bearer ${TOKEN}` },
        },
      });
      const server = await startStdioServer({ home, args: ["--config", config] });
      let search: string;
      let result;
      try {
        search = await server.searchTools("run_typescript");
        result = await server.runTs([
          "try {",
          '  return await callMCPTool("mcp__team-executor__run_typescript", { code: "return 1" });',
          "} catch (error) {",
          "  return (error as Error).message;",
          "}",
        ].join("\n"));
      } finally {
        await server.close();
      }
      assert(!search.includes("mcp__team-executor__"), search);
      const skipped = new RegExp(
        `Skipped MCP server "team-executor" in ${
          RegExp.escape(config)
        }: it is Code Executor itself \\(its initialize answer names "code-executor"`,
      );
      assertMatch(search, skipped);
      assertEquals(result.isError, false, describeResult(result));
      assertMatch(String(result.returnValue), skipped, describeResult(result));
      assertMatch(server.stderr(), skipped, server.stderr());

      // doctor shows the row as skipped and, with nothing else wrong, exits 0.
      const doctor = await runDoctor(root, home, config);
      assertMatch(doctor.stdout, /^ {2}team-executor .* skipped +- +-$/m, describeRun(doctor));
      assertEquals(doctor.code, 0, describeRun(doctor));
    } finally {
      await remote.close();
    }
  });
});

Deno.test("command entries that start Code Executor under another name are skipped by the command, with a warning naming each", async () => {
  await withUserDirs("ce-self-proxy-", async ({ home, root }) => {
    const copy = await copyCheckout(join(root, "another clone"));
    const jsr = "jsr:@code-executor/code-executor@0.1.0";
    const config = await writeMcpConfig(root, {
      "code-executor": { command: Deno.execPath(), args: ["run", "-A", join(ROOT, "main.ts")] },
      "executor-jsr": { command: "deno", args: ["run", "-A", jsr, "serve"] },
      "executor-clone": { command: Deno.execPath(), args: ["run", "-A", copy, "serve"] },
    });
    const server = await startStdioServer({ home, args: ["--config", config] });
    let search: string;
    let description: string;
    try {
      search = await server.searchTools("run_typescript");
      description = await server.runTypescriptDescription();
    } finally {
      await server.close();
    }
    const log = server.stderr();
    const file = RegExp.escape(config);
    assertMatch(
      log,
      new RegExp(
        `Skipped MCP server "executor-jsr" in ${file}: it is Code Executor itself \\(its argument "${
          RegExp.escape(jsr)
        }" is Code Executor\\)`,
      ),
      log,
    );
    assertMatch(
      log,
      new RegExp(
        `Skipped MCP server "executor-clone" in ${file}: it is Code Executor itself \\(it runs ${
          RegExp.escape(copy)
        }, the main.ts of a Code Executor checkout\\)`,
      ),
      log,
    );
    // The entry setup writes into a client is expected there, and passes without a word.
    assert(!log.includes('Skipped MCP server "code-executor"'), log);
    assert(!search.includes("mcp__executor-"), search);
    assert(!description.includes("executor-clone"), description);

    const doctor = await runDoctor(root, home, config);
    // A skipped entry's row says so; why is under the table, wrapped at 100 columns.
    const details = doctor.stdout.replace(/\n {3,}/g, " ");
    assertMatch(doctor.stdout, /^ {2}executor-clone .* skipped +- +-$/m, describeRun(doctor));
    assertMatch(doctor.stdout, /^ {2}executor-jsr .* skipped +- +-$/m, describeRun(doctor));
    assertMatch(
      details,
      /^ {2}executor-clone: skipped: it runs .*the main\.ts of a Code Executor checkout/m,
      describeRun(doctor),
    );
    assertMatch(details, /^ {2}executor-jsr: skipped: its argument "jsr:/m);
  });
});
