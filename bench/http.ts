/**
 * `serve --http` against stdio, and under load.
 *
 * 1. Latency: trivial `run_typescript` (`return 1`) through a stdio server and through an HTTP
 *    server (2025-era session and 2026-07-28 stateless requests), interleaved in one process, so
 *    that the difference of the medians is what HTTP adds.
 * 2. Load: `--clients` HTTP clients of their own (half of each era) share `--runs` executions of
 *    bench/load.ts's workload (TypeScript and Python alternating, 20 upstream calls each to
 *    server-everything and server-memory, every result checked), each client running its share
 *    one after another. The server's VmRSS is read settled after a warm-up, at its peak, and
 *    settled after the load.
 *
 * ```sh
 * deno run -A bench/http.ts [--iterations 60] [--clients 32] [--runs 400] [--json]
 * ```
 *
 * @module
 */
import type { Client } from "@modelcontextprotocol/client";
import { join } from "node:path";
import { percentile, round, sleep, type Stats, stats } from "./_stats.ts";
import { loadAverage, residentMb } from "./_machine.ts";
import { log, parseBenchArgs, printReport, row, runBench } from "./_report.ts";
import { loadJobs, type LoadOutcome, outcomeProblem, runJob, seedCode } from "./load.ts";
import { EVERYTHING, MEMORY } from "../tests/_pins.ts";
import { npmServer } from "../tests/_env.ts";
import { startServer } from "../tests/_stdio_server.ts";
import { startHttpServer } from "../tests/_http_server.ts";
import { connect } from "../tests/_client.ts";

const USAGE =
  "Usage: deno run -A bench/http.ts [--iterations N] [--pause-ms N] [--clients N] [--runs N] [--json]";

async function returnsOne(client: Client): Promise<number> {
  const started = performance.now();
  const result = await client.callTool({
    name: "run_typescript",
    arguments: { code: "return 1" },
  });
  const ms = performance.now() - started;
  const value = (result.structuredContent as { returnValue?: unknown } | undefined)?.returnValue;
  if (result.isError || value !== 1) throw new Error(`return 1 failed: ${JSON.stringify(result)}`);
  return ms;
}

async function settledRss(pid: number): Promise<number> {
  let low = Infinity;
  for (let i = 0; i < 10; i++) {
    await sleep(300);
    low = Math.min(low, await residentMb(pid));
  }
  return round(low);
}

interface Report {
  load: { before: string; after: string };
  latency: { iterations: number; stdio: Stats; legacy: Stats; modern: Stats };
  run: {
    clients: number;
    runs: number;
    wrong: number;
    problems: string[];
    p50: number;
    p99: number;
    runsPerSecond: number;
    rss: { baseline: number; peak: number; after: number };
  };
}

function render(r: Report): string {
  const added = (s: Stats) => round(s.medianMs - r.latency.stdio.medianMs, 2);
  const transport = (name: string, s: Stats, addedMs: number | string) =>
    row([name, s.medianMs, s.p95Ms, s.minMs, addedMs]);
  const rss = r.run.rss;
  return [
    `### HTTP (load ${r.load.before} → ${r.load.after})`,
    "",
    `Trivial run_typescript, ${r.latency.iterations} calls each, interleaved:`,
    "",
    row(["transport", "median ms", "p95 ms", "min ms", "added to stdio's median"]),
    row(["---", "---:", "---:", "---:", "---:"]),
    transport("stdio", r.latency.stdio, ""),
    transport("HTTP, 2025-era session", r.latency.legacy, added(r.latency.legacy)),
    transport("HTTP, 2026-07-28", r.latency.modern, added(r.latency.modern)),
    "",
    `Load: ${r.run.clients} HTTP clients, ${r.run.runs} mixed runs with 20 tool calls each: ` +
    `${r.run.wrong} wrong or lost; p50 ${r.run.p50} ms, p99 ${r.run.p99} ms; ` +
    `${r.run.runsPerSecond} runs/s; server RSS ${rss.baseline} → peak ${rss.peak} → ` +
    `${rss.after} MB settled (${round((rss.after / rss.baseline - 1) * 100)}%)`,
  ].join("\n");
}

await runBench(async (args) => {
  const parsed = parseBenchArgs(args, USAGE, {
    iterations: { fallback: 60 },
    pauseMs: { fallback: 250, min: 0 },
    clients: { fallback: 32 },
    runs: { fallback: 400 },
  });
  if (!parsed) return;
  const { iterations, pauseMs, clients, runs } = parsed.ints;
  const home = await Deno.makeTempDir({ prefix: "ce-bench-http-" });
  const upstream = {
    everything: { ...npmServer(EVERYTHING), cwd: home },
    memory: {
      ...npmServer(MEMORY, { env: { MEMORY_FILE_PATH: join(home, "memory.jsonl") } }),
      cwd: home,
    },
  };
  const before = await loadAverage();
  const http = await startHttpServer({
    home,
    sharedCache: true,
    upstream,
    env: Deno.env.get("BENCH_SERVER_V8_FLAGS")
      ? { DENO_V8_FLAGS: Deno.env.get("BENCH_SERVER_V8_FLAGS")! }
      : {},
  });
  const stdio = await startServer({ home, sharedCache: true, upstream });
  const connected: Client[] = [];
  try {
    log("latency: stdio, HTTP 2025, HTTP 2026, interleaved");
    const legacy = await connect(http.url, { era: "legacy" });
    const modern = await connect(http.url, { era: "modern" });
    connected.push(legacy, modern);
    const samples = { stdio: [] as number[], legacy: [] as number[], modern: [] as number[] };
    for (let i = 0; i < iterations + 5; i++) {
      const round = [
        ["stdio", await returnsOne(stdio.client)],
        ["legacy", (await sleep(pauseMs), await returnsOne(legacy))],
        ["modern", (await sleep(pauseMs), await returnsOne(modern))],
      ] as const;
      await sleep(pauseMs);
      if (i < 5) continue;
      for (const [name, ms] of round) samples[name].push(ms);
    }
    await stdio.close();

    log(`load: ${clients} clients, ${runs} runs`);
    const tag = `http-${Date.now()}`;
    const seeded = await legacy.callTool({
      name: "run_typescript",
      arguments: { code: seedCode(tag, runs + clients) },
    });
    if (seeded.isError) throw new Error(`Cannot seed the memory server: ${JSON.stringify(seeded)}`);
    const pool: Client[] = [];
    for (let i = 0; i < clients; i++) {
      pool.push(await connect(http.url, { era: i % 2 === 0 ? "legacy" : "modern" }));
    }
    connected.push(...pool);
    // Warm-up of the same shape: one run per client.
    await Promise.all(
      pool.map((client, i) => runJob(client, loadJobs(tag, { count: 1, first: runs + i })[0])),
    );
    const pid = http.child.pid;
    const baseline = await settledRss(pid);
    let peak = baseline;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        peak = Math.max(peak, await residentMb(pid).catch(() => 0));
        await sleep(200);
      }
    })();
    const jobs = loadJobs(tag, { count: runs });
    const outcomes: LoadOutcome[] = [];
    const started = performance.now();
    await Promise.all(pool.map(async (client, c) => {
      for (let j = c; j < jobs.length; j += clients) {
        outcomes.push(await runJob(client, jobs[j], { timeoutMs: 300_000 }));
      }
    }));
    const elapsedMs = performance.now() - started;
    sampling = false;
    await sampler;
    const after = await settledRss(pid);
    const problems = outcomes.map(outcomeProblem).filter((p): p is string => p !== undefined);
    const latencies = outcomes.map((o) => o.latencyMs).sort((a, b) => a - b);
    const report: Report = {
      load: { before, after: await loadAverage() },
      latency: {
        iterations,
        stdio: stats(samples.stdio),
        legacy: stats(samples.legacy),
        modern: stats(samples.modern),
      },
      run: {
        clients,
        runs,
        wrong: problems.length + (runs - outcomes.length),
        problems: problems.slice(0, 10),
        p50: round(percentile(latencies, 0.5)),
        p99: round(percentile(latencies, 0.99)),
        runsPerSecond: round(outcomes.length / (elapsedMs / 1000), 2),
        rss: { baseline, peak: round(peak), after },
      },
    };
    printReport(parsed.json, report, render);
    if (report.run.wrong > 0) Deno.exitCode = 1;
  } finally {
    await Promise.all(connected.map((client) => client.close().catch(() => {})));
    await stdio.close().catch(() => {});
    await http.close().catch(() => {});
    await Deno.remove(home, { recursive: true }).catch(() => {});
  }
});
