/**
 * A load test kept short enough for CI: 200 executions through the real server (`deno task start`
 * over stdio, one SDK client), half `run_typescript` and half `run_python`, 16 in flight at once,
 * each making 20 calls to server-everything and server-memory on inputs of its own (the workload
 * of `bench/load.ts`). Every result must come back right, and afterwards the server must be back
 * where it started: only its warm pools alive, no workspace left, host memory near its baseline.
 *
 * It is CPU-bound: a Python execution costs ~1.3 s of CPU (mostly booting the interpreter that
 * replaces the pooled one it used), a TypeScript one ~0.1 s: ~180 s of CPU in all, so the test
 * takes 1.5–2 min on two otherwise idle cores, and longer on a busy machine. Each run gets a generous `timeoutMs`, since a
 * starved CPU slows runs down without making them wrong.
 *
 * The limits are the defaults: 16 callers never exceed `limits.maxConcurrent` (4) plus
 * `limits.maxQueued` (64), so none is refused, and measured on two cores, 2 or 4 at once finish
 * the batch equally fast (the CPU is the bottleneck) while 8 were slower.
 *
 * @module
 */
import type { Client } from "@modelcontextprotocol/client";
import { assert, assertEquals } from "./_assert.ts";
import { eventually, sandboxDirs, sandboxPids } from "./_proc.ts";
import { serverPid } from "./_stdio_server.ts";
import { residentMb } from "../bench/_machine.ts";
import {
  CALLS_PER_EXECUTION,
  type LoadJob,
  loadJobs,
  outcomeProblem,
  runLoad,
  seedCode,
  settledRss,
  startLoadServer,
  WARMUP_EXECUTIONS,
} from "../bench/load.ts";

const EXECUTIONS = 200;
const CONCURRENCY = 16;
const TS_WARM_POOL = 2;
const PYTHON_WARM_POOL = 2;
const RUN_TIMEOUT_MS = 120_000;
/** How far host RSS may stay above its pre-load baseline once the load is over. */
const RSS_SLACK = 1.2;

/** Sandbox processes of this server, by language. */
async function sandboxes(tempDir: string): Promise<{ ts: number[]; python: number[] }> {
  return {
    ts: await sandboxPids(tempDir, ["ts_runner.ts"]),
    python: await sandboxPids(tempDir, ["py_host.ts"]),
  };
}

function problems(outcomes: Array<Parameters<typeof outcomeProblem>[0]>): string[] {
  return outcomes.map(outcomeProblem).filter((problem) => problem !== undefined);
}

Deno.test("run_typescript and run_python return all 200 results right under 16 concurrent callers, then leave nothing behind", async () => {
  const home = await Deno.makeTempDir({ prefix: "ce-load-home-" });
  try {
    const server = await startLoadServer(home, {
      tsPool: TS_WARM_POOL,
      pythonPool: PYTHON_WARM_POOL,
    });
    const tempDir = server.tempDir;
    try {
      const tag = crypto.randomUUID().slice(0, 8);
      const salt = 1 + Math.floor(Math.random() * 1_000_000);
      const seeded = await server.runTs(seedCode(tag, EXECUTIONS + WARMUP_EXECUTIONS));
      assertEquals(
        seeded.returnValue,
        EXECUTIONS + WARMUP_EXECUTIONS,
        JSON.stringify(seeded.error),
      );

      // A small load of the same shape first: it connects the upstream servers and brings the
      // host to the size it keeps under this load (compiled code, buffers, a grown heap), so
      // that the baseline is that size rather than the size of a server that has done nothing.
      const warmup = loadJobs(tag, { count: WARMUP_EXECUTIONS, first: EXECUTIONS, salt });
      const warm = await runLoad(server.client, warmup, CONCURRENCY, { timeoutMs: RUN_TIMEOUT_MS });
      assertEquals(problems(warm.outcomes), []);
      const pid = await serverPid(server);
      const before = await settle(server.client, tempDir);
      assert(before.settled, `the warm pools did not fill: ${JSON.stringify(before)}`);
      const baselineMb = (await settledRss(pid)).settledMb;

      const jobs: LoadJob[] = loadJobs(tag, { count: EXECUTIONS, salt });
      assertEquals(jobs.filter((job) => job.language === "python").length, EXECUTIONS / 2);
      const run = await runLoad(server.client, jobs, CONCURRENCY, { timeoutMs: RUN_TIMEOUT_MS });
      const loadedMb = await residentMb(pid);
      assertEquals(run.outcomes.filter((o) => o !== undefined).length, EXECUTIONS);
      const wrong = problems(run.outcomes);
      assertEquals(wrong.length, 0, `${wrong.length} wrong or lost results:\n${wrong.join("\n")}`);
      const calls = run.outcomes.reduce((sum, o) => sum + (o.result?.toolCalls.length ?? 0), 0);
      assertEquals(calls, EXECUTIONS * CALLS_PER_EXECUTION);

      // Every used child is disposed and replaced: what is left is the warm pools, one private
      // directory each.
      const pooled = await settle(server.client, tempDir);
      assert(
        pooled.settled,
        `not back to the warm pools (${TS_WARM_POOL} TypeScript, ${PYTHON_WARM_POOL} Python) ` +
          `after the load: ${JSON.stringify(pooled)}`,
      );

      // The load grows V8's heap again; RSS sits 30–90% above the baseline until V8's memory
      // reducer runs.
      const rss = await settledRss(pid);
      console.log(
        `${EXECUTIONS} executions in ${(run.elapsedMs / 1000).toFixed(1)} s; host RSS ` +
          `${baselineMb.toFixed(1)} MB before, ${loadedMb.toFixed(1)} MB right after, ` +
          `${rss.settledMb.toFixed(1)} MB ${(rss.waitedMs / 1000).toFixed(1)} s later`,
      );
      assert(
        rss.settledMb <= baselineMb * RSS_SLACK,
        `host RSS ${rss.settledMb.toFixed(1)} MB ${(rss.waitedMs / 1000).toFixed(1)} s after ` +
          `the load, more than ${RSS_SLACK} × the ${baselineMb.toFixed(1)} MB before it ` +
          `(V8's memory reducer ${rss.dropped ? "ran" : "did not run"})`,
      );

      await server.client.close();
      const clean = await eventually(async () => {
        const left = await sandboxes(tempDir);
        return left.ts.length + left.python.length === 0 &&
          (await sandboxDirs(tempDir)).length === 0;
      }, 10_000);
      assert(
        clean,
        `left after shutdown: ${JSON.stringify(await sandboxes(tempDir))}, ` +
          `directories ${JSON.stringify(await sandboxDirs(tempDir))}`,
      );
    } finally {
      await server.close();
    }
  } finally {
    await Deno.remove(home, { recursive: true });
  }
});

/**
 * Waits (up to 30 s) until exactly the warm pools are alive, each child with its directory, and
 * checks that the server still answers.
 */
async function settle(
  client: Client,
  tempDir: string,
): Promise<{ settled: boolean; ts: number[]; python: number[]; dirs: string[] }> {
  let last = { ts: [] as number[], python: [] as number[], dirs: [] as string[] };
  const settled = await eventually(async () => {
    last = { ...await sandboxes(tempDir), dirs: await sandboxDirs(tempDir) };
    return last.ts.length === TS_WARM_POOL && last.python.length === PYTHON_WARM_POOL &&
      last.dirs.length === TS_WARM_POOL + PYTHON_WARM_POOL;
  }, 30_000);
  await client.listTools();
  return { settled, ...last };
}
