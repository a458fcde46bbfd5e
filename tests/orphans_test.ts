/**
 * Nothing outlives a server that is killed hard: SIGKILL gives the server no chance to clean up,
 * so its children must be killed by the kernel (see src/parent_death.ts), busy or not.
 *
 * @module
 */
import { Client } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { join } from "node:path";
import { assert, assertEquals } from "./_assert.ts";
import { denoDir, eventually, ROOT, sandboxPids } from "./_helpers.ts";
import { parentDeathHelper } from "../src/parent_death.ts";

const FIXTURE = join(ROOT, "tests", "fixtures", "upstream_fixture.ts");

function alive(pid: number): boolean {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    // A zombie has exited; only its parent's wait is missing.
    return stat.slice(stat.lastIndexOf(")") + 2)[0] !== "Z";
  } catch {
    return false;
  }
}

/** CPU time a process has used, in clock ticks (utime + stime). */
function cpuTicks(pid: number): number {
  const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return Number(fields[11]) + Number(fields[12]);
}

Deno.test({
  name:
    "serve's children die within 2 s when the server is SIGKILLed: busy, idle, parked, upstream",
  ignore: Deno.build.os !== "linux" || parentDeathHelper() === undefined,
  async fn() {
    const home = await Deno.makeTempDir({ prefix: "ce-orphans-" });
    const pidFile = join(home, "upstream.pid");
    const config = join(home, "mcp.json");
    await Deno.writeTextFile(
      config,
      JSON.stringify({
        mcpServers: {
          fixture: {
            command: Deno.execPath(),
            args: ["run", "-A", "--config", join(ROOT, "deno.json"), FIXTURE],
            env: { FIXTURE_PID_FILE: pidFile },
          },
        },
      }),
    );
    const transport = new StdioClientTransport({
      command: Deno.execPath(),
      args: ["run", "-A", "main.ts", "serve", "--config", config],
      cwd: ROOT,
      env: {
        PATH: Deno.env.get("PATH") ?? "",
        HOME: home,
        TMPDIR: home,
        DENO_DIR: denoDir(),
        XDG_CACHE_HOME: Deno.env.get("XDG_CACHE_HOME") ??
          join(Deno.env.get("HOME") ?? home, ".cache"),
        CODE_EXECUTOR_WARM_POOL: "2",
        CODE_EXECUTOR_PYTHON_WARM_POOL: "1",
        AUDIT_LOG_PATH: join(home, "audit.jsonl"),
        CODE_EXECUTOR_LOG_LEVEL: "warn",
      },
      stderr: "pipe",
    });
    transport.stderr?.on("data", () => {});
    const client = new Client({ name: "orphans-test", version: "1.0.0" });
    const pending: Promise<unknown>[] = [];
    try {
      await client.connect(transport);
      // The upstream server is started on first use.
      const listed = await client.callTool({
        name: "run_typescript",
        arguments: { code: "return (await discoverMCPTools()).length > 0" },
      });
      assertEquals(listed.isError, false, JSON.stringify(listed));
      const parked = await client.callTool({
        name: "run_python",
        arguments: { code: "x = 41\nx + 1", session: "parked", timeoutMs: 60_000 },
      });
      assertEquals((parked.structuredContent as { returnValue?: unknown }).returnValue, 42);
      for (
        const [name, code] of [
          ["run_typescript", "while (true) {}"],
          ["run_python", "while True: pass"],
        ]
      ) {
        pending.push(
          client.callTool({ name, arguments: { code, timeoutMs: 120_000 } }).catch(() => {}),
        );
      }
      // Both busy children are burning CPU before the server dies.
      let busy: number[] = [];
      assert(
        await eventually(async () => {
          const now = await sandboxPids(home);
          const first = new Map(now.map((pid) => [pid, cpuTicks(pid)]));
          await new Promise((r) => setTimeout(r, 300));
          busy = now.filter((pid) => alive(pid) && cpuTicks(pid) - first.get(pid)! >= 10);
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
          all = [...new Set([...await sandboxPids(home), upstream])];
          return all.length >= 5;
        }, 30_000),
        `expected at least 5 children, found ${all.length}`,
      );
      assert(all.every(alive), "a child was gone before the kill");

      Deno.kill(transport.pid!, "SIGKILL");
      const killedAt = performance.now();
      const gone = await eventually(() => Promise.resolve(all.every((pid) => !alive(pid))), 2_000);
      const left = all.filter(alive);
      for (const pid of left) Deno.kill(pid, "SIGKILL");
      assert(
        gone,
        `${left.length} of ${all.length} children outlived the server by ${
          Math.round(performance.now() - killedAt)
        } ms: ${left.join(", ")}`,
      );
    } finally {
      await client.close().catch(() => {});
      await Promise.all(pending);
      await Deno.remove(home, { recursive: true }).catch(() => {});
    }
  },
});
