/**
 * `doctor`'s HTTP report, through the real command line with a private HOME: the settings in
 * force, and whether `serve --http` could start with them (its port taken by another program or
 * by a running Code Executor, a wildcard bind without auth). The token is never shown.
 *
 * @module
 */
import { join } from "node:path";
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { homeEnv, ROOT } from "./_env.ts";
import { type CommandRun, describeRun, runCommand } from "./_command.ts";
import { withTempDir } from "./_fs.ts";
import { startHttpServer } from "./_http_server.ts";

const TOKEN = "doctor-test-token-0123456789abcdef";

function doctor(home: string, env: Record<string, string>): Promise<CommandRun> {
  return runCommand(Deno.execPath(), ["run", "-A", "main.ts", "doctor"], {
    cwd: ROOT,
    clearEnv: true,
    env: { ...homeEnv(home), TMPDIR: home, ...env },
    timeoutMs: 120_000,
  });
}

/** The report's HTTP section: its heading and the lines under it. */
function httpSection(run: CommandRun): string {
  const start = run.stdout.indexOf("HTTP (serve --http");
  assert(start !== -1, `no HTTP section: ${describeRun(run)}`);
  return run.stdout.slice(start);
}

Deno.test("doctor shows the HTTP settings and names http.port when another program holds the port", async () => {
  await withTempDir("ce-doctor-http-", async (home) => {
    const env = {
      CODE_EXECUTOR_HTTP_PUBLIC_URL: "https://ce.example.com/mcp",
      CODE_EXECUTOR_HTTP_TOKEN: TOKEN,
    };
    const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const port = listener.addr.port;
    let taken: CommandRun;
    try {
      taken = await doctor(home, { ...env, CODE_EXECUTOR_HTTP_PORT: String(port) });
    } finally {
      listener.close();
    }
    // HTTP problems are shown, not counted: the exit code is about the upstream servers.
    assertEquals(taken.code, 0, describeRun(taken));
    const report = httpSection(taken);
    assertMatch(report, new RegExp(`^ +endpoint +http://127\\.0\\.0\\.1:${port}/mcp `, "m"));
    assertMatch(report, /^ +public URL +https:\/\/ce\.example\.com\/mcp$/m);
    assertMatch(
      report,
      /^ +auth +bearer \(http\.auth auto\): tokens from CODE_EXECUTOR_HTTP_TOKEN/m,
    );
    assertMatch(report, /^ +Host check +on: 127\.0\.0\.1, ce\.example\.com, localhost, \[::1\]/m);
    assertMatch(report, new RegExp(`^ +port +127\\.0\\.0\\.1:${port} is in use$`, "m"));
    assertMatch(
      report,
      new RegExp(
        `^ +problem: 127\\.0\\.0\\.1:${port} is in use by another program: stop it, or set http\\.port \\(CODE_EXECUTOR_HTTP_PORT`,
        "m",
      ),
    );
    assert(!taken.stdout.includes(TOKEN) && !taken.stderr.includes(TOKEN), "the token is shown");

    // Released, the same port is free and nothing is wrong.
    const free = await doctor(home, { ...env, CODE_EXECUTOR_HTTP_PORT: String(port) });
    assertEquals(free.code, 0, describeRun(free));
    assertMatch(httpSection(free), new RegExp(`^ +port +127\\.0\\.0\\.1:${port} is free$`, "m"));
    assert(!httpSection(free).includes("problem:"), httpSection(free));
  });
});

Deno.test("doctor tells a running serve --http on the port from another program", async () => {
  await withTempDir("ce-doctor-http-", async (tempDir) => {
    const home = join(tempDir, "home");
    await Deno.mkdir(home);
    const server = await startHttpServer({
      tempDir,
      home,
      sharedCache: true,
    });
    try {
      const port = new URL(server.url).port;
      const run = await doctor(home, { CODE_EXECUTOR_HTTP_PORT: port });
      assertEquals(run.code, 0, describeRun(run));
      const report = httpSection(run);
      assertMatch(
        report,
        new RegExp(
          `^ +port +127\\.0\\.0\\.1:${port} is in use by a running Code Executor \\(its /healthz answers\\)$`,
          "m",
        ),
      );
      assert(!report.includes("problem:"), report);
    } finally {
      const status = await server.close();
      assert(status?.success, server.stderr());
    }
  });
});

Deno.test("doctor says serve --http would refuse a wildcard bind without auth, and checks no Host there", async () => {
  await withTempDir("ce-doctor-http-", async (home) => {
    const run = await doctor(home, {
      CODE_EXECUTOR_HTTP_HOST: "0.0.0.0",
      CODE_EXECUTOR_HTTP_PORT: "0",
    });
    assertEquals(run.code, 0, describeRun(run));
    const report = httpSection(run);
    assertMatch(report, /^ +auth +none \(http\.auth auto\)/m);
    assertMatch(report, /^ +Host check +off$/m);
    assertMatch(report, /^ +Origins +none \(browsers are refused\)/m);
    assertMatch(report, /^ +port +0: a free port is picked at start \(http\.port\)$/m);
    assertMatch(
      report,
      /^ +problem: serve --http refuses to listen on 0\.0\.0\.0 without auth: set CODE_EXECUTOR_HTTP_TOKEN/m,
    );
    assertMatch(
      report,
      /^ +problem: the Host header is not checked on 0\.0\.0\.0 \(DNS rebinding\): set http\.allowedHosts or http\.publicUrl/m,
    );
  });
});
