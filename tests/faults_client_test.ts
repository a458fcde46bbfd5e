/**
 * Fault tolerance towards the client: one that disconnects mid-run, vanishes without reading its
 * answers, or stops reading its stdout. The server must kill every child and exit, or go on
 * serving and enforcing timeouts.
 *
 * @module
 */
import { Client } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { join } from "node:path";
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { faultyFixtureServer, ROOT, serverEnv, writeMcpConfig } from "./_env.ts";
import {
  assertNoSandboxes,
  eventually,
  exitOrKill,
  isAlive,
  pidsWithEnv,
  readPidFile,
  sandboxDirs,
  sandboxPids,
} from "./_proc.ts";
import { spawnServe } from "./_stdio_server.ts";
import { initializeRequest } from "./_client.ts";

const DENO = Deno.execPath();

Deno.test("serve kills every child and exits when the client disconnects mid-run", async () => {
  const home = await Deno.makeTempDir({ prefix: "ce-disconnect-" });
  const tempDir = join(home, "tmp");
  await Deno.mkdir(tempDir);
  const hangPid = join(home, "upstream.pid");
  try {
    const config = await writeMcpConfig(home, { upstream: faultyFixtureServer(hangPid) });
    const transport = new StdioClientTransport({
      command: DENO,
      args: ["run", "-A", "main.ts", "serve", "--config", config],
      cwd: ROOT,
      // At info level the server logs why it shuts down.
      env: { ...serverEnv(tempDir, { home }), CODE_EXECUTOR_LOG_LEVEL: "info" },
      stderr: "pipe",
    });
    let stderr = "";
    const decoder = new TextDecoder();
    transport.stderr?.on("data", (chunk: Uint8Array) => {
      stderr += decoder.decode(chunk, { stream: true });
    });
    const client = new Client({ name: "disconnect-test", version: "1.0.0" });
    await client.connect(transport);
    const serverProcess = transport.pid!;
    const busy = client.callTool({
      name: "run_typescript",
      arguments: { code: "while (true) {}", timeoutMs: 120_000 },
    }).catch((error: Error) => error);
    const waiting = client.callTool({
      name: "run_typescript",
      arguments: { code: 'await callMCPTool("mcp__upstream__hang");', timeoutMs: 120_000 },
    }).catch((error: Error) => error);
    const upstream = await readPidFile(hangPid);
    assert(
      await eventually(() => Deno.stat(`${hangPid}.hang`).then(() => true, () => false), 15_000),
      "the upstream call never started",
    );
    // The two running children (taken from the warm pool, or spawned when it was not ready yet;
    // any idle ones are checked with the rest below). On failure, close the client first, so
    // that the server shuts down and kills the endless child.
    const started = await eventually(
      async () => (await sandboxPids(tempDir)).length >= 2,
      30_000,
    );
    if (!started) {
      const seen = await sandboxPids(tempDir);
      await client.close();
      await Promise.all([busy, waiting]);
      assert(false, `sandboxes: ${seen}`);
    }

    await client.close();
    const leftBehind = async () => ({
      server: await isAlive(serverProcess) ? [serverProcess] : [],
      upstream: await isAlive(upstream) ? [upstream] : [],
      sandboxes: await sandboxPids(tempDir),
      withTmp: await pidsWithEnv(`TMPDIR=${tempDir}`),
      dirs: await sandboxDirs(tempDir),
    });
    const clean = await eventually(
      async () => Object.values(await leftBehind()).every((list) => list.length === 0),
      10_000,
    );
    assert(clean, `left after the client went away: ${JSON.stringify(await leftBehind())}`);
    // The server saw its stdin end and stopped by itself: had it missed the end of input, only
    // the SIGTERM the client sends after 2 s would have stopped it.
    assert(
      await eventually(() => Promise.resolve(/shutting down \(/.test(stderr))),
      `the server never said why it shut down:\n${stderr}`,
    );
    assertMatch(stderr, /shutting down \(client disconnected\)/);
    assert((await busy) instanceof Error, "the busy run was answered after the disconnect");
    assert((await waiting) instanceof Error, "the waiting run was answered after the disconnect");
  } finally {
    await Deno.remove(home, { recursive: true });
  }
});

/** Code that marks its workspace once it runs, then never ends. */
const ENDLESS_CODE = 'Deno.writeTextFileSync("started", ""); while (true) {}';

/** The private directory of the sandbox running {@linkcode ENDLESS_CODE}, if one is. */
async function endlessRunDir(tempDir: string): Promise<string | undefined> {
  for (const dir of await sandboxDirs(tempDir)) {
    if (await Deno.stat(join(tempDir, dir, "ws", "started")).then(() => true, () => false)) {
      return dir;
    }
  }
  return undefined;
}

Deno.test("serve survives a client that vanishes without reading its answers", async () => {
  const home = await Deno.makeTempDir({ prefix: "ce-vanish-" });
  const tempDir = join(home, "tmp");
  await Deno.mkdir(tempDir);
  try {
    const { child, stderr, writer, send } = spawnServe(tempDir, { home });
    const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
    await send(initializeRequest("vanishing"));
    let seen = "";
    while (!seen.includes('"id":1')) {
      const { value, done } = await reader.read();
      if (done) break;
      seen += value;
    }
    assertMatch(seen, /"serverInfo"/);
    await send({ jsonrpc: "2.0", method: "notifications/initialized" });
    // A run that finishes while nobody reads, one that prints a lot, and one that never ends
    // (and says, in its workspace, that it has started).
    for (
      const [id, code] of [[2, "return 1"], [3, 'console.log("z".repeat(90_000))'], [
        4,
        ENDLESS_CODE,
      ]] as const
    ) {
      await send({
        jsonrpc: "2.0",
        id,
        method: "tools/call",
        params: { name: "run_typescript", arguments: { code, timeoutMs: 60_000 } },
      });
    }
    // Checked after the shutdown, so that a failure does not leave the server running.
    const ran = await eventually(async () => (await endlessRunDir(tempDir)) !== undefined, 30_000);
    await reader.cancel();
    await writer.close();
    const status = await exitOrKill(child);
    const log = await stderr;
    await child.status;
    assert(ran, `the endless run did not start:\n${log}`);
    assert(status, `the server did not exit after the client vanished:\n${log}`);
    assertEquals(status.code, 0, log);
    await assertNoSandboxes(tempDir);
  } finally {
    await Deno.remove(home, { recursive: true });
  }
});

Deno.test("serve keeps enforcing timeouts while a client is not reading its stdout", async () => {
  const home = await Deno.makeTempDir({ prefix: "ce-stall-" });
  const tempDir = join(home, "tmp");
  await Deno.mkdir(tempDir);
  const { child, stderr, writer, send } = spawnServe(tempDir, {
    home,
    env: { CODE_EXECUTOR_WARM_POOL: "0" },
  });
  const reader = child.stdout.getReader();
  let status: Deno.CommandStatus | undefined;
  let reached = false;
  try {
    await send(initializeRequest("stalled"));
    const first = await reader.read();
    assert(!first.done && first.value.length > 0, "no answer to initialize");
    await send({ jsonrpc: "2.0", method: "notifications/initialized" });
    // Answers bigger than a pipe's buffer fill stdout, which nobody reads from now on; the
    // endless run must still be killed at its timeout.
    for (let id = 2; id < 6; id++) {
      await send({
        jsonrpc: "2.0",
        id,
        method: "tools/call",
        params: {
          name: "run_typescript",
          arguments: { code: 'console.log("z".repeat(90_000))', timeoutMs: 20_000 },
        },
      });
    }
    await send({
      jsonrpc: "2.0",
      id: 6,
      method: "tools/call",
      params: {
        name: "run_typescript",
        arguments: { code: ENDLESS_CODE, timeoutMs: 1_000 },
      },
    });
    assert(
      await eventually(async () => (await endlessRunDir(tempDir)) !== undefined, 30_000),
      "no start",
    );
    assert(
      await eventually(async () => (await endlessRunDir(tempDir)) === undefined, 15_000),
      "the endless run outlived its timeout while stdout was full",
    );
    reached = true;
  } finally {
    await writer.close().catch(() => {});
    status = await exitOrKill(child);
    await reader.cancel();
    await child.status;
    await stderr;
    if (!reached) await Deno.remove(home, { recursive: true });
  }
  try {
    assert(status, "the server did not exit when stdin closed with stdout full");
    await assertNoSandboxes(tempDir);
  } finally {
    await Deno.remove(home, { recursive: true });
  }
});
