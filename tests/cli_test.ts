import { join } from "node:path";
import { assertEquals, assertMatch } from "./_assert.ts";
import { ROOT } from "./_env.ts";
import { eventually, sandboxDirs } from "./_proc.ts";
import { type CommandRun, describeRun as describe, runCommand } from "./_command.ts";
import { withTempDir } from "./_fs.ts";

/** How long a command may take before it is killed and the test fails. */
const CLI_TIMEOUT_MS = 60_000;

/**
 * Runs `deno <args>` in the repository root with a private TMPDIR and waits for it to exit.
 *
 * @param args Arguments after `deno`.
 * @param tempDir The TMPDIR the process's sandboxes put their workspaces in.
 * @returns Exit code and output.
 */
function deno(args: string[], tempDir: string): Promise<CommandRun> {
  return runCommand(Deno.execPath(), args, {
    cwd: ROOT,
    env: { TMPDIR: tempDir, NO_COLOR: "1" },
    timeoutMs: CLI_TIMEOUT_MS,
  });
}

/**
 * Gives `body` a fresh directory with a `tmp/` inside for TMPDIR, checks afterwards that no
 * sandbox workspace was left in `tmp/`, and removes the directory.
 */
function withCliDirs(body: (dir: string, tempDir: string) => Promise<void>): Promise<void> {
  return withTempDir("ce-cli-", async (dir) => {
    const tempDir = join(dir, "tmp");
    await Deno.mkdir(tempDir);
    await body(dir, tempDir);
    assertEquals(await sandboxDirs(tempDir), [], "sandbox workspaces were left behind");
  });
}

/** Writes a script into `dir` and returns its path. */
async function script(dir: string, name: string, code: string): Promise<string> {
  const file = join(dir, name);
  await Deno.writeTextFile(file, code);
  return file;
}

Deno.test("main.ts --help prints usage and exits 0", async () => {
  await withCliDirs(async (_dir, tempDir) => {
    const run = await deno(["run", "-A", "main.ts", "--help"], tempDir);
    assertEquals(run.code, 0, describe(run));
    assertMatch(run.stdout, /^Usage:/m);
    assertMatch(run.stdout, /code-executor run FILE\.ts/);
  });
});

Deno.test("main.ts --version prints the name and version", async () => {
  await withCliDirs(async (_dir, tempDir) => {
    const run = await deno(["run", "-A", "main.ts", "--version"], tempDir);
    assertEquals(run.code, 0, describe(run));
    assertEquals(run.stdout, "code-executor 0.1.0\n");
  });
});

Deno.test("main.ts with an unknown command exits 2 and names the command", async () => {
  await withCliDirs(async (_dir, tempDir) => {
    const run = await deno(["run", "-A", "main.ts", "frobnicate"], tempDir);
    assertEquals(run.code, 2, describe(run));
    assertEquals(run.stdout, "");
    assertMatch(run.stderr, /"frobnicate"/);
  });
});

Deno.test("main.ts run FILE.ts prints the output and the return value and exits 0", async () => {
  await withCliDirs(async (dir, tempDir) => {
    const file = await script(dir, "hello.ts", 'console.log("hi"); return {a: 1}\n');
    const run = await deno(["run", "-A", "main.ts", "run", file], tempDir);
    assertEquals(run.code, 0, describe(run));
    const [first, ...rest] = run.stdout.split("\n");
    assertEquals(first, "hi");
    assertEquals(JSON.parse(rest.join("\n")), { a: 1 });
  });
});

Deno.test("main.ts run FILE.ts exits 1 and points at the line that threw", async () => {
  await withCliDirs(async (dir, tempDir) => {
    const file = await script(
      dir,
      "throws.ts",
      'const x = 1;\nconsole.log(x);\nthrow new Error("boom");\n',
    );
    const run = await deno(["run", "-A", "main.ts", "run", file], tempDir);
    assertEquals(run.code, 1, describe(run));
    assertEquals(run.stdout, "1\n");
    assertMatch(run.stderr, /Error: boom/);
    assertMatch(run.stderr, /code\.ts:3\b/);
  });
});

Deno.test("main.ts run --json prints the ExecutionResult as JSON", async () => {
  await withCliDirs(async (dir, tempDir) => {
    const file = await script(dir, "hello.ts", 'console.log("hi"); return {a: 1}\n');
    const run = await deno(["run", "-A", "main.ts", "run", "--json", file], tempDir);
    assertEquals(run.code, 0, describe(run));
    const result = JSON.parse(run.stdout);
    assertEquals(result.ok, true);
    assertEquals(result.stdout, "hi\n");
    assertEquals(result.stderr, "");
    assertEquals(result.returnValue, { a: 1 });
    assertEquals(result.toolCalls, []);
    assertEquals(typeof result.durationMs, "number");
  });
});

Deno.test("deno task start exits 0 by itself when stdin closes, printing nothing", async () => {
  await withCliDirs(async (_dir, tempDir) => {
    const child = new Deno.Command(Deno.execPath(), {
      args: ["task", "start"],
      cwd: ROOT,
      env: { TMPDIR: tempDir, NO_COLOR: "1" },
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    // A server that ignores the closed stdin is killed, so the test fails instead of hanging.
    const timer = setTimeout(() => child.kill("SIGKILL"), 15_000);
    try {
      // Give the warm pool time to create workspaces, so that the test also shows that they
      // are removed on the way out; a server without a warm pool is fine too.
      await eventually(async () => (await sandboxDirs(tempDir)).length > 0, 5_000);
      await child.stdin.close();
      const output = await child.output();
      const run: CommandRun = {
        code: output.code,
        stdout: new TextDecoder().decode(output.stdout),
        stderr: new TextDecoder().decode(output.stderr),
      };
      assertEquals(output.signal, null, `the server did not exit by itself: ${describe(run)}`);
      assertEquals(run.code, 0, describe(run));
      assertEquals(run.stdout, "");
    } finally {
      clearTimeout(timer);
    }
  });
});
