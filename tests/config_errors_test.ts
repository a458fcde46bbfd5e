/**
 * Config files that do not parse, through the real program: Code Executor's own
 * `~/.config/code-executor/mcp.json`, a `--config` file and a settings file stop `serve` with
 * exit code 2, `file:line:column`, the line and a caret, and no stack trace; another client's
 * file is skipped with the same words as a warning, and `doctor` and the `run_typescript`
 * description name it.
 *
 * @module
 */
import { join } from "node:path";
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import {
  describeRun,
  ROOT,
  runCommand,
  serverEnv,
  withUserDirs,
  writeFileWithParents,
} from "./_helpers.ts";
import { startStdioServer } from "./_stdio_stderr.ts";
import { formatJsoncProblem, parseJsoncChecked } from "../src/config/jsonc_errors.ts";

/** A servers file with a comma missing after the first entry's closing brace (line 5). */
const MISSING_COMMA = [
  "{",
  '  "mcpServers": {',
  '    "first": { "command": "first-server" }',
  "  }",
  '  "second": { "command": "second-server" }',
  "}",
].join("\n");

/** The caret lines under line 5, column 3, of {@linkcode MISSING_COMMA}. */
const CARET = /^ {2}5 \| {3}"second": \{ "command": "second-server" \}\n {2} {2}\| {3}\^$/m;

function runMain(
  home: string,
  args: string[],
  env: Record<string, string> = {},
): ReturnType<typeof runCommand> {
  return runCommand(Deno.execPath(), ["run", "-A", "main.ts", ...args], {
    cwd: ROOT,
    clearEnv: true,
    env: { ...serverEnv(join(home, ".."), { home, sharedCache: true }), ...env },
    timeoutMs: 120_000,
  });
}

function assertStopsAt(run: Awaited<ReturnType<typeof runCommand>>, where: RegExp): void {
  assertEquals(run.code, 2, describeRun(run));
  assertMatch(run.stderr, where, describeRun(run));
  assert(!/^\s+at .+:\d+:\d+\)?$/m.test(run.stderr), `a stack trace:\n${describeRun(run)}`);
  assert(!/CommaExpected|EndOfFileExpected/.test(run.stderr), describeRun(run));
}

Deno.test("serve refuses a --config file that does not parse: exit 2, file:line:column, the line and a caret", async () => {
  await withUserDirs("ce-config-errors-", async ({ home, root }) => {
    const file = await writeFileWithParents(join(root, "servers.json"), MISSING_COMMA);
    const run = await runMain(home, ["serve", "--config", file]);
    assertStopsAt(
      run,
      new RegExp(`Cannot parse ${RegExp.escape(file)}:5:3: a "," is missing before this`),
    );
    assertMatch(run.stderr, CARET, describeRun(run));
  });
});

Deno.test("serve refuses Code Executor's own mcp.json that does not parse, and says why it stops", async () => {
  await withUserDirs("ce-config-errors-", async ({ home }) => {
    const own = await writeFileWithParents(
      join(home, ".config", "code-executor", "mcp.json"),
      MISSING_COMMA,
    );
    const run = await runMain(home, ["serve"]);
    assertStopsAt(
      run,
      new RegExp(`Cannot parse ${RegExp.escape(own)}:5:3: a "," is missing before this`),
    );
    assertMatch(run.stderr, CARET, describeRun(run));
    assertMatch(run.stderr, /does not start without the servers of its own file/);
  });
});

Deno.test("serve refuses a settings file that does not parse, pointing at the line", async () => {
  await withUserDirs("ce-config-errors-", async ({ home, root }) => {
    const settings = await writeFileWithParents(
      join(root, "settings.jsonc"),
      '{\n  // the limits\n  "limits": { "timeoutMs": 5000, },\n  "audit": { "enabled": tru }\n}\n',
    );
    const run = await runMain(home, ["serve"], { CODE_EXECUTOR_CONFIG: settings });
    assertStopsAt(
      run,
      new RegExp(`Cannot parse ${RegExp.escape(settings)}:4:25: unexpected "tru"`),
    );
    assertMatch(run.stderr, /^ {2}4 \| {3}"audit": \{ "enabled": tru \}\n {2} {2}\| {25}\^$/m);
  });
});

Deno.test("another client's file that does not parse is a warning, and doctor and the run_typescript description name it", async () => {
  await withUserDirs("ce-config-errors-", async ({ home }) => {
    const claude = await writeFileWithParents(join(home, ".claude.json"), MISSING_COMMA);
    const where = new RegExp(`Cannot parse ${RegExp.escape(claude)}:5:3: a "," is missing`);

    const server = await startStdioServer({ home });
    try {
      const description = await server.runTypescriptDescription();
      assert(!/No MCP servers are configured/.test(description), description);
      assertMatch(description, /No MCP servers are usable\./);
      assertMatch(description, new RegExp(`Skipped config files .*${RegExp.escape(claude)}`));
      const search = await server.searchTools("anything");
      assertMatch(search, new RegExp(`Skipped config file ${RegExp.escape(claude)}`));
    } finally {
      await server.close();
    }
    const log = server.stderr();
    assertMatch(log, where, log);
    assertMatch(log, CARET, log);
    assertMatch(log, /Skipped this file: none of its servers is used until it is fixed/);
    assert(!/No MCP servers are configured/.test(log), log);

    const doctor = await runMain(home, ["doctor"]);
    assertEquals(doctor.code, 1, describeRun(doctor));
    assertMatch(
      doctor.stdout,
      new RegExp(
        `^ {2}skipped ${RegExp.escape(claude)} \\[claude-code\\]: none of its servers`,
        "m",
      ),
    );
    assertMatch(doctor.stdout, where);
    assertMatch(doctor.stdout, /^ {6}5 \| {3}"second"/m);
    assertMatch(doctor.stdout, /\(none usable: see the skipped config files above\)/);
  });
});

function problemOf(text: string): string {
  const { problem } = parseJsoncChecked(text);
  assert(problem, `no problem found in ${JSON.stringify(text)}`);
  return formatJsoncProblem("f.json", problem);
}

Deno.test("formatJsoncProblem() points past the last character at the end, keeps tabs, hides secrets and cuts long lines", () => {
  assertEquals(
    problemOf('{ "mcpServers": { "a": {} \n\n'),
    'Cannot parse f.json:1:26: the file ends before an object is closed: a "}" is missing\n' +
      '  1 | { "mcpServers": { "a": {} \n' +
      `    | ${" ".repeat(25)}^`,
  );
  assertEquals(
    problemOf('{\n\t"a": {\t"k": 1 "b": 2}\n}').split("\n").slice(1),
    ['  2 | \t"a": {\t"k": 1 "b": 2}', "    | \t      \t       ^"],
  );
  const secret = "sk-abcdefghijklmnopqrstuvwxyz";
  const redacted = problemOf(`{ "env": { "API_KEY": "${secret}" } "x": 1 }`);
  assert(!redacted.includes(secret), redacted);
  assertEquals(redacted.split("\n").slice(1), [
    '  1 | { "env": { "API_KEY": "[REDACTED]" } "x": 1 }',
    "    |                                      ^",
  ]);
  const long = problemOf(`{"a": "${"x".repeat(300)}" "b": 1, "c": "${"y".repeat(300)}"}`);
  const [, shown, caret] = long.split("\n");
  assert(shown.length < 140 && shown.includes('" "b": 1'), long);
  assertEquals(shown[caret.indexOf("^")], '"', long);
  assertMatch(problemOf(""), /:1:1: the file is empty/);
});
