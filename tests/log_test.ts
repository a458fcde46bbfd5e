/**
 * Logging never blocks the server: a client that never reads the server's stderr must not stop
 * its runs once the pipe is full.
 *
 * @module
 */
import { join } from "node:path";
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { fixtureServer, ROOT, serverEnv, writeMcpConfig } from "./_env.ts";
import { describeRun, runCommand } from "./_command.ts";
import { withTempDir } from "./_fs.ts";
import { initializeRequest } from "./_client.ts";

const NOISE_LINES = 20_000;

Deno.test("serve answers runs while nobody reads its stderr and it logs at debug level", async () => {
  await withTempDir("ce-log-", async (home) => {
    const config = await writeMcpConfig(home, {
      // Every line the upstream server writes to stderr is logged at debug level.
      fixture: fixtureServer({ FIXTURE_STDERR_LINES: String(NOISE_LINES) }),
    });
    // Not spawnServe(): it reads stderr from the start, and this client must not.
    const child = new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", "main.ts", "serve", "--config", config],
      cwd: ROOT,
      clearEnv: true,
      env: { ...serverEnv(home, { home, sharedCache: true }), CODE_EXECUTOR_LOG_LEVEL: "debug" },
      stdin: "piped",
      stdout: "piped",
      // Piped and not read until the end: the pipe fills after 64 KiB.
      stderr: "piped",
    }).spawn();
    const writer = child.stdin.getWriter();
    const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
    const send = (message: unknown) =>
      writer.write(new TextEncoder().encode(JSON.stringify(message) + "\n"));
    let buffered = "";
    const answer = async (id: number, timeoutMs: number): Promise<Record<string, unknown>> => {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const late = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no answer to request ${id}`)), timeoutMs);
      });
      try {
        while (true) {
          for (const line of buffered.split("\n").slice(0, -1)) {
            const message = JSON.parse(line);
            if (message.id === id) return message;
          }
          const { value, done } = await Promise.race([reader.read(), late]);
          if (done) throw new Error("the server closed stdout");
          buffered += value;
        }
      } finally {
        clearTimeout(timer);
      }
    };
    const run = (id: number, code: string) =>
      send({
        jsonrpc: "2.0",
        id,
        method: "tools/call",
        params: { name: "run_typescript", arguments: { code, timeoutMs: 30_000 } },
      });
    try {
      await send(initializeRequest("log-test"));
      await answer(1, 30_000);
      await send({ jsonrpc: "2.0", method: "notifications/initialized" });
      // The first call starts the upstream server, whose start-up fills stderr many times over.
      await run(2, 'return await callMCPTool("mcp__fixture__pid", {}) !== undefined;');
      const first = await answer(2, 60_000);
      assertEquals((first.result as { structuredContent: unknown }).structuredContent, {
        ...(first.result as { structuredContent: Record<string, unknown> }).structuredContent,
        ok: true,
      });
      await run(3, "return 6 * 7;");
      const second = await answer(3, 30_000);
      const result = (second.result as { structuredContent: { returnValue: unknown } })
        .structuredContent;
      assertEquals(result.returnValue, 42);
    } finally {
      await reader.cancel().catch(() => {});
      await writer.close().catch(() => {});
    }
    // Reading at last lets the server drain its queue and exit; what could not be queued is
    // counted.
    const log = await new Response(child.stderr).text();
    const status = await child.status;
    assertEquals(status.code, 0, log.slice(-2000));
    assertMatch(log, /log lines were dropped: stderr was not read fast enough/);
    const noise = log.split("\n").filter((line) => line.includes("noise line")).length;
    assert(noise > 1000 && noise < NOISE_LINES, `${noise} noise lines logged`);
  });
});

Deno.test("createLogger() writes a line logged just as the write before it ends, with no later line to wake it", async () => {
  const run = await runCommand(Deno.execPath(), [
    "run",
    "-A",
    "--config",
    join(ROOT, "deno.json"),
    join(ROOT, "tests", "fixtures", "log_wakeup.ts"),
  ], { cwd: ROOT, timeoutMs: 60_000 });
  assertEquals(run.code, 0, describeRun(run));
});
