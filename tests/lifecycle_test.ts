import { Client } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { assert, assertEquals } from "./_assert.ts";
import { ROOT } from "./_env.ts";
import { eventually, sandboxDirs, sandboxPids } from "./_proc.ts";
import { startServer } from "./_stdio_server.ts";

Deno.test("run_typescript is killed when the client cancels the call", async () => {
  const server = await startServer({ env: { CODE_EXECUTOR_WARM_POOL: "0" } });
  try {
    const controller = new AbortController();
    const call = server.client.callTool(
      { name: "run_typescript", arguments: { code: "while (true) {}", timeoutMs: 120_000 } },
      { signal: controller.signal },
    );
    assert(
      await eventually(async () => (await sandboxPids(server.tempDir)).length === 1, 30_000),
      "no sandbox started",
    );
    controller.abort();
    await call.catch(() => {});
    assert(
      await eventually(async () => (await sandboxPids(server.tempDir)).length === 0),
      "the cancelled run's sandbox is still alive",
    );
    const next = await server.runTs("return 2");
    assertEquals(next.returnValue, 2);
    // Used children are disposed after the response has been sent.
    assert(
      await eventually(async () => (await sandboxDirs(server.tempDir)).length === 0),
      "sandbox directories survived",
    );
  } finally {
    await server.close();
  }
});

for (const signal of ["SIGTERM", "SIGINT"] as const) {
  Deno.test(`serve exits on ${signal}, killing running and idle sandboxes first`, async () => {
    const tempDir = await Deno.makeTempDir({ prefix: "ce-signal-" });
    const transport = new StdioClientTransport({
      command: Deno.execPath(),
      args: ["run", "-A", "main.ts", "serve"],
      cwd: ROOT,
      env: {
        PATH: Deno.env.get("PATH") ?? "",
        HOME: tempDir,
        TMPDIR: tempDir,
        CODE_EXECUTOR_LOG_LEVEL: "warn",
      },
      stderr: "pipe",
    });
    transport.stderr?.on("data", () => {});
    const client = new Client({ name: "signal-test", version: "1.0.0" });
    try {
      await client.connect(transport);
      const call = client.callTool({
        name: "run_typescript",
        arguments: { code: "while (true) {}", timeoutMs: 120_000 },
      })
        .catch(() => undefined);
      // The running child plus at least one idle pooled child: the run takes a pooled child
      // when the pool is ready in time (the pool then refills only after the run), or spawns its
      // own next to the two the pool is starting. With a fresh cache the Python pool is still
      // building its snapshot: shutdown must stop that builder too.
      assert(
        await eventually(
          async () => (await sandboxPids(tempDir, ["ts_runner.ts"])).length >= 2,
          // A fresh HOME: Deno's cache starts empty, and the Python snapshot is built meanwhile.
          30_000,
        ),
        "sandboxes did not start",
      );
      Deno.kill(transport.pid!, signal);
      assert(
        await eventually(async () => (await sandboxPids(tempDir)).length === 0),
        `sandboxes survived ${signal}`,
      );
      assert(
        await eventually(async () => (await sandboxDirs(tempDir)).length === 0),
        "sandbox directories survived",
      );
      await call;
    } finally {
      await client.close().catch(() => {});
      await Deno.remove(tempDir, { recursive: true });
    }
  });
}
