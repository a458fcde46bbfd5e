/**
 * Runs per second with 1 and with 3 `serve --http` replicas behind nginx (deploy/nginx.conf, as
 * tests/replicas_test.ts runs it), on the same machine.
 *
 * Each configuration gets `--clients` 2026-07-28 clients through the balancer sharing `--runs`
 * runs of tests/_replicas.ts's workload (TypeScript and Python alternating, each with 4 calls to
 * its replica's upstream fixture, every result checked), after a warm-up of one run per client.
 * One replica is nginx with the same replica thrice, so that both configurations pay for the
 * balancer. The configurations alternate, 1 3 then 3 1 for each further `--rounds` (2 by default:
 * 1 3 3 1), so that a change in the machine's other load falls on both. Latency is the client's wall time of a call, queueing
 * included; runs/s counts the measured runs over the wall time of the batch.
 *
 * ```sh
 * deno run -A bench/replicas.ts [--runs 100] [--clients 12] [--rounds 2] [--json]
 * ```
 *
 * Needs nginx (`apt-get install -y nginx`).
 *
 * @module
 */
import type { Client } from "@modelcontextprotocol/client";
import { percentile, round } from "./_stats.ts";
import { loadAverage } from "./_machine.ts";
import { log, parseBenchArgs, printReport, row, runBench } from "./_report.ts";
import { connect } from "../tests/_client.ts";
import { findNginx, type Nginx, startNginx } from "../tests/_nginx.ts";
import { job, type Replica, runJobs, servedBy, startReplicas } from "../tests/_replicas.ts";

const USAGE = "Usage: deno run -A bench/replicas.ts [--runs N] [--clients N] [--rounds N] [--json]";
const TOKEN = "bench-replicas-token-0123456789";

interface Measured {
  replicas: number;
  load: { before: string; after: string };
  runs: number;
  wrong: number;
  problems: string[];
  runsPerSecond: number;
  p50: number;
  p99: number;
  perReplica: Record<string, number>;
}

interface Report {
  clients: number;
  runs: number;
  nproc: number;
  measured: Measured[];
}

async function measure(
  nginxPath: string,
  count: number,
  runs: number,
  clients: number,
  batch: number,
): Promise<Measured> {
  const dir = await Deno.makeTempDir({ prefix: "ce-bench-replicas-" });
  let replicas: Replica[] = [];
  let nginx: Nginx | undefined;
  const pool: Client[] = [];
  try {
    log(`${count} replica(s): starting`);
    replicas = await startReplicas(dir, { count, env: { CODE_EXECUTOR_HTTP_TOKEN: TOKEN } });
    const ports = replicas.map((r) => Number(r.serve.url.port));
    nginx = await startNginx(nginxPath, [0, 1, 2].map((i) => ports[i % ports.length]));
    for (let i = 0; i < clients; i++) {
      pool.push(await connect(nginx.url, { era: "modern", token: TOKEN }));
    }
    const tag = `b${batch}`;
    await runJobs(pool, pool.map((_, i) => job(`${tag}-warm-${i}`, i % 2 === 1)));
    const jobs = Array.from({ length: runs }, (_, i) => job(`${tag}-${i}`, i % 2 === 1));
    const before = await loadAverage();
    log(`${count} replica(s): ${runs} runs, ${clients} clients (load ${before})`);
    const started = performance.now();
    const outcomes = await runJobs(pool, jobs);
    const elapsedMs = performance.now() - started;
    const served = outcomes.map((o) => servedBy(o, replicas));
    const problems = served.filter((s): s is string => typeof s === "string");
    const latencies = outcomes.map((o) => o.endedAt - o.startedAt).sort((a, b) => a - b);
    return {
      replicas: count,
      load: { before, after: await loadAverage() },
      runs,
      wrong: problems.length + (runs - outcomes.length),
      problems: problems.slice(0, 5),
      runsPerSecond: round(outcomes.length / (elapsedMs / 1000), 2),
      p50: round(percentile(latencies, 0.5)),
      p99: round(percentile(latencies, 0.99)),
      perReplica: Object.fromEntries(
        replicas.map((r) => [r.id, served.filter((s) => s === r).length]),
      ),
    };
  } finally {
    await Promise.all(pool.map((client) => client.close().catch(() => {})));
    await nginx?.stop();
    await Promise.all(replicas.map((r) => r.serve.close().catch(() => {})));
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

function render(r: Report): string {
  return [
    `${r.clients} clients (2026-07-28) through nginx, ${r.runs} mixed runs per row, nproc ${r.nproc}:`,
    "",
    row([
      "replicas",
      "runs/s",
      "p50 ms",
      "p99 ms",
      "wrong or lost",
      "runs per replica",
      "load before → after",
    ]),
    row(["---:", "---:", "---:", "---:", "---:", "---", "---"]),
    ...r.measured.map((m) =>
      row([
        m.replicas,
        m.runsPerSecond,
        m.p50,
        m.p99,
        m.wrong,
        Object.entries(m.perReplica).map(([id, n]) => `${id} ${n}`).join(", "),
        `${m.load.before} → ${m.load.after}`,
      ])
    ),
  ].join("\n");
}

await runBench(async (args) => {
  const parsed = parseBenchArgs(args, USAGE, {
    runs: { fallback: 100 },
    clients: { fallback: 12 },
    rounds: { fallback: 2 },
  });
  if (!parsed) return;
  const { runs, clients, rounds } = parsed.ints;
  const order = Array.from({ length: rounds }, (_, r) => r % 2 === 0 ? [1, 3] : [3, 1]).flat();
  const nginxPath = await findNginx();
  if (!nginxPath) throw new Error("nginx is not installed (apt-get install -y nginx)");
  const measured: Measured[] = [];
  for (const [batch, count] of order.entries()) {
    measured.push(await measure(nginxPath, count, runs, clients, batch));
  }
  const report: Report = { clients, runs, nproc: navigator.hardwareConcurrency, measured };
  printReport(parsed.json, report, render);
  if (measured.some((m) => m.wrong > 0)) Deno.exitCode = 1;
});
