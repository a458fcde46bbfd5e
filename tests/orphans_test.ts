/**
 * Nothing outlives a server that is killed hard: SIGKILL gives the server no chance to clean up,
 * so its children must be killed by the kernel (see src/parent_death.ts), busy or not.
 *
 * @module
 */
import { join } from "node:path";
import { assert, assertReturns } from "./_assert.ts";
import { fixtureServer } from "./_env.ts";
import { cpuTicksOver, eventually, livePids, sandboxPids } from "./_proc.ts";
import { withTempDir } from "./_fs.ts";
import { serverPid, startServer } from "./_stdio_server.ts";
import { parentDeathHelper } from "../src/parent_death.ts";

Deno.test({
  name: "serve's children die with the server when it is SIGKILLed: busy, idle, parked, upstream",
  ignore: Deno.build.os !== "linux" || parentDeathHelper() === undefined,
  fn: () =>
    withTempDir("ce-orphans-", async (home) => {
      const pidFile = join(home, "upstream.pid");
      const server = await startServer({
        home,
        sharedCache: true,
        upstream: { fixture: fixtureServer({ FIXTURE_PID_FILE: pidFile }) },
        env: { CODE_EXECUTOR_WARM_POOL: "2", CODE_EXECUTOR_PYTHON_WARM_POOL: "1" },
      });
      const pending: Promise<unknown>[] = [];
      try {
        // The upstream server is started on first use.
        assertReturns(await server.runTs("return (await discoverMCPTools()).length > 0"), true);
        assertReturns(
          await server.runPy("x = 41\nx + 1", { session: "parked", timeoutMs: 60_000 }),
          42,
        );
        pending.push(
          server.runTs("while (true) {}", { timeoutMs: 120_000 }).catch(() => {}),
          server.runPy("while True: pass", { timeoutMs: 120_000 }).catch(() => {}),
        );
        // Both busy children are burning CPU before the server dies.
        let busy: number[] = [];
        assert(
          await eventually(async () => {
            const now = await sandboxPids(server.tempDir);
            const used = await cpuTicksOver(now, 300);
            busy = now.filter((_, i) => used[i] >= 10);
            return busy.length >= 2;
          }, 60_000),
          "the two busy runs did not start",
        );
        const upstream = Number(await Deno.readTextFile(pidFile));
        // The busy pair, the parked session, an idle pooled child (the pool keeps two) and the
        // upstream server.
        let all: number[] = [];
        assert(
          await eventually(async () => {
            all = [...new Set([...await sandboxPids(server.tempDir), upstream])];
            return all.length >= 5;
          }, 30_000),
          `expected at least 5 children, found ${all.length}`,
        );
        assert((await livePids(all)).length === all.length, "a child was gone before the kill");

        // The server itself, not the `deno task` runner above it.
        Deno.kill(await serverPid(server), "SIGKILL");
        // Only the kernel can end the busy pair: a busy loop never reads the end of its stdin,
        // and the timeoutMs that would stop it was the dead server's to enforce.
        const gone = await eventually(async () => (await livePids(all)).length === 0, 30_000);
        const left = await livePids(all);
        for (const pid of left) Deno.kill(pid, "SIGKILL");
        assert(gone, `${left.length} of ${all.length} children outlived the server: ${left}`);
      } finally {
        await server.close().catch(() => {});
        await Promise.all(pending);
      }
    }),
});
