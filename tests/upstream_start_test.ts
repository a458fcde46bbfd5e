/**
 * Upstream servers that cannot be started or reached, through the real program: a stdio server
 * that dies during start-up is shown in its own words (the last lines of its stderr, bounded and
 * redacted) in the log, in `doctor` and in the error the model gets, with a shell-quoted command
 * that runs the same thing; an HTTP server that cannot be reached is named by its URL and the
 * cause.
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
  withUserDirs,
  writeFileWithParents,
  writeMcpConfig,
} from "./_helpers.ts";
import { startStdioServer } from "./_stdio_stderr.ts";

const DIES = join(ROOT, "tests", "fixtures", "dies_at_start.ts");
const MARKER = "it's a 'quoted' marker";
const SECRET = "sk-dies0123456789abcdefghij";

function doctor(home: string, config: string): ReturnType<typeof runCommand> {
  return runCommand(Deno.execPath(), ["run", "-A", "main.ts", "doctor", "--config", config], {
    cwd: ROOT,
    clearEnv: true,
    env: serverEnv(join(home, ".."), { home, sharedCache: true }),
    timeoutMs: 120_000,
  });
}

/** Checks that a text holds the dying server's last words, bounded and redacted. */
function assertLastWords(text: string, where: string): void {
  assertMatch(
    text,
    /dies-at-start: Error: cannot open database \/nonexistent\/dies\.sqlite/,
    where,
  );
  assert(text.includes(`dies-at-start: marker ${MARKER}`), `no marker in ${where}:\n${text}`);
  assertMatch(text, /dies-at-start: connecting with api_key=\[REDACTED\]/, where);
  assert(!text.includes(SECRET), `the secret in ${where}:\n${text}`);
  assertMatch(text, /noise line 39$/m, where);
  assertMatch(text, /dies-at-start: screen kept plain$/m, where);
  assert(
    !["\x1b", "\x07", "\u202e"].some((c) => text.includes(c)),
    `a terminal escape in ${where}:\n${JSON.stringify(text)}`,
  );
  assert(!/noise line 0$/m.test(text), `the whole stderr, not its tail, in ${where}:\n${text}`);
}

Deno.test("an upstream that writes to stderr and exits at start-up is shown in its words in the log, doctor and the model's error", async () => {
  await withUserDirs("ce-upstream-start-", async ({ home, root }) => {
    // A path with a space and a value with quotes: the command to run it by hand must quote both.
    const script = await writeFileWithParents(
      join(root, "dir with space", "dies_at_start.ts"),
      await Deno.readTextFile(DIES),
    );
    const config = await writeMcpConfig(root, {
      dies: { command: Deno.execPath(), args: ["run", "-A", script], env: { DIES_MARKER: MARKER } },
    });

    const server = await startStdioServer({ home, args: ["--config", config] });
    let message: string;
    try {
      const result = await server.runTs([
        "try {",
        '  await callMCPTool("mcp__dies__anything", {});',
        '  return "called";',
        "} catch (error) {",
        "  return (error as Error).message;",
        "}",
      ].join("\n"));
      assertEquals(result.isError, false, describeResult(result));
      message = result.returnValue as string;
    } finally {
      await server.close();
    }
    assertMatch(message, /^Server "dies" is unavailable: the process exited during start-up/);
    assertLastWords(message, "the model's error");
    assertLastWords(server.stderr(), "the log");

    const hand = /^Run it by hand to see more: (.+)$/m.exec(message)?.[1];
    assert(hand, `no command to run it by hand:\n${message}`);
    const pasted = await runCommand("sh", ["-c", hand], { cwd: root, timeoutMs: 60_000 });
    assertEquals(pasted.code, 3, describeRun(pasted));
    assert(pasted.stderr.includes(`dies-at-start: marker ${MARKER}`), describeRun(pasted));

    const run = await doctor(home, config);
    assertEquals(run.code, 1, describeRun(run));
    assertMatch(run.stdout, /^ {2}dies .* error +- +-$/m);
    assertMatch(
      run.stdout.replace(/\n {3,}/g, " "),
      /^ {2}dies: .*the process exited during start-up/m,
    );
    assertLastWords(run.stdout, "doctor");
  });
});

Deno.test("doctor names an HTTP upstream's URL and the cause it cannot be reached: refused, DNS, TLS, 401", async () => {
  await withUserDirs("ce-upstream-start-", async ({ home, root }) => {
    const closed = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const refusedPort = closed.addr.port;
    closed.close();
    const plain = Deno.serve(
      { hostname: "127.0.0.1", port: 0, onListen() {} },
      () => new Response("who are you?", { status: 401 }),
    );
    try {
      const base = `127.0.0.1:${plain.addr.port}`;
      const urls = {
        refused: `http://127.0.0.1:${refusedPort}/mcp`,
        dns: "http://no-such-host.invalid/mcp",
        tls: `https://${base}/mcp`,
        unauthorized: `http://${base}/mcp`,
      };
      const config = await writeMcpConfig(
        root,
        Object.fromEntries(
          Object.entries(urls).map(([name, url]) => [name, { type: "http", url }]),
        ),
      );
      const run = await doctor(home, config);
      assertEquals(run.code, 1, describeRun(run));
      const cause = (url: string, words: string) =>
        assertMatch(
          // Under the table, a detail wraps at 100 columns.
          run.stdout.replace(/\n {3,}/g, " "),
          new RegExp(`: cannot reach ${RegExp.escape(url)}: ${words}`),
          describeRun(run),
        );
      cause(
        urls.refused,
        `the connection was refused: nothing listens on 127\\.0\\.0\\.1:${refusedPort}`,
      );
      cause(urls.dns, "the host name does not resolve \\(DNS\\)");
      cause(urls.tls, "the TLS connection failed");
      cause(
        urls.unauthorized,
        'it answered 401 Unauthorized: the token is missing or wrong; check "headers" of MCP server "unauthorized"',
      );
      assert(!/fetch failed/i.test(run.stdout), describeRun(run));
    } finally {
      await plain.shutdown();
    }
  });
});
