/**
 * Three `serve --http` replicas on one redis-server (`state.url`), as tests/replicas_test.ts runs
 * them, in two parts:
 *
 * - `retry`: what forwarding adds to the retry of a parked run (`llm.ask` over MRTR). A run is
 *   parked on replica `ce-0`, then its retry is sent straight to `ce-0` (direct) or to `ce-1`,
 *   which forwards it to `ce-0` (forwarded); the client's wall time of the retry is measured, the
 *   two arms interleaved (`--rounds` each, after 3 warm-up rounds).
 * - `load`: `--clients` 2026-07-28 clients of 4 principals through nginx in plain round robin
 *   (deploy/nginx.conf) share `--runs` runs, a quarter each of: TypeScript with upstream calls, a
 *   fresh Python interpreter with upstream calls, a call of one of the principal's two Python
 *   sessions, and a TypeScript run that asks the client's model (`llm.ask`, parked until the
 *   retry). Every result is checked (a session's counter must count each of its calls once);
 *   lost is a call that failed or returned wrong. Forwards are counted from the replicas' logs.
 *
 * ```sh
 * deno run -A bench/replicas.ts [--part retry|load] [--rounds 40] [--runs 400] [--clients 32] [--json]
 * ```
 *
 * Needs nginx and redis-server (`apt-get install -y nginx redis-server`).
 *
 * @module
 */
import type { Client } from "@modelcontextprotocol/client";
import { parseArgs } from "node:util";
import { percentile, round, runPaired, type Stats, stats } from "./_stats.ts";
import { loadAverage } from "./_machine.ts";
import { log, printReport, row, runBench } from "./_report.ts";
import { callRun } from "../tests/_client.ts";
import {
  callRound,
  type Cluster,
  clusterTools,
  job,
  replicaOfPid,
  samplingRetry,
  servedBy,
  startCluster,
  taggedClient,
} from "../tests/_replicas.ts";

const USAGE =
  "Usage: deno run -A bench/replicas.ts [--part retry|load] [--rounds N] [--runs N] [--clients N] [--json]";
const TOKENS = ["alice", "bob", "carol", "dave"].map((name) => ({
  name,
  token: `bench-replicas-${name}-0123456789abcdef`,
}));

interface RetryReport {
  rounds: number;
  load: { before: string; after: string };
  direct: Stats;
  forwarded: Stats;
  /** Median of forwarded − direct over the paired rounds. */
  addedMedianMs: number;
}

interface KindReport {
  runs: number;
  lost: number;
  p50: number;
  p99: number;
}

interface LoadReport {
  clients: number;
  runs: number;
  load: { before: string; after: string };
  seconds: number;
  runsPerSecond: number;
  lost: number;
  problems: string[];
  /** Lost or wrong runs by what they got (an error type, or `wrong`). */
  byCause: Record<string, number>;
  forwards: number;
  kinds: Record<string, KindReport>;
}

interface Report {
  nproc: number;
  retry?: RetryReport;
  load?: LoadReport;
}

function answering(client: Client): void {
  client.setRequestHandler("sampling/createMessage", (request) => {
    const text = (request.params.messages[0].content as { text: string }).text;
    return Promise.resolve({
      role: "assistant",
      model: "bench-model",
      content: { type: "text", text: `answer to ${text}` },
    }) as never;
  });
}

const PARKED = 'const a = await llm.ask("q");\nreturn a;';

async function measureRetry(cluster: Cluster, rounds: number): Promise<RetryReport> {
  const [home, other] = cluster.replicas;
  const manual = async (url: URL) => {
    const { client } = await taggedClient(url, {
      era: "modern",
      token: TOKENS[0].token,
      capabilities: { sampling: {} },
      autoFulfill: false,
    });
    cluster.clients.push(client);
    return client;
  };
  const starter = await manual(home.serve.url);
  const retriers = {
    direct: await manual(home.serve.url),
    forwarded: await manual(other.serve.url),
  };
  const before = await loadAverage();
  log(
    `retry: ${rounds} rounds of each, direct to ${home.id} and through ${other.id} (load ${before})`,
  );
  const samples = await runPaired({
    arms: ["direct", "forwarded"] as const,
    rounds,
    warmup: 3,
    sample: async (arm) => {
      const first = await callRound(starter, PARKED);
      if (first.resultType !== "input_required") throw new Error(JSON.stringify(first));
      const started = performance.now();
      const done = await callRound(retriers[arm], PARKED, samplingRetry(first, "a"));
      const ms = performance.now() - started;
      if (done.structuredContent?.returnValue !== "a") throw new Error(JSON.stringify(done));
      return ms;
    },
  });
  const added = samples.forwarded.map((ms, i) => ms - samples.direct[i]).sort((a, b) => a - b);
  return {
    rounds,
    load: { before, after: await loadAverage() },
    direct: stats(samples.direct),
    forwarded: stats(samples.forwarded),
    addedMedianMs: round(percentile(added, 0.5), 2),
  };
}

/** One run of the load and how to check it. */
interface LoadRun {
  id: string;
  kind: "typescript" | "python" | "session" | "llm";
  /** Returns a problem, or undefined. */
  run(client: Client): Promise<string | undefined>;
}

async function measureLoad(cluster: Cluster, runs: number, clients: number): Promise<LoadReport> {
  const { replicas, nginx } = cluster;
  const pool: Array<{ client: Client; principal: number }> = [];
  for (let i = 0; i < clients; i++) {
    const principal = i % TOKENS.length;
    const { client } = await taggedClient(nginx.url, {
      era: "modern",
      token: TOKENS[principal].token,
      capabilities: { sampling: {} },
      setup: answering,
    });
    cluster.clients.push(client);
    pool.push({ client, principal });
  }
  // Each session's counters, by principal and name: each call must count once.
  const counted = new Map<string, number[]>();
  const sessionHomes = new Map<string, number>();
  const runOf = (i: number, principal: number): LoadRun => {
    const id = `load-${i}`;
    const kind = (["typescript", "python", "session", "llm"] as const)[i % 4];
    if (kind === "typescript" || kind === "python") {
      const work = job(id, kind === "python");
      return {
        id,
        kind,
        run: async (client) => {
          const result = await callRun(client, work.tool, work.code, { timeoutMs: 240_000 }, {
            timeout: 300_000,
          });
          const served = servedBy({ job: work, startedAt: 0, endedAt: 0, result }, replicas);
          return typeof served === "string" ? served : undefined;
        },
      };
    }
    if (kind === "session") {
      const session = `s${(i >> 2) % 2}`;
      const key = `${principal}/${session}`;
      return {
        id,
        kind,
        run: async (client) => {
          const code =
            `# run ${id}\nn = globals().get('n', 0) + 1\npid = int(await call_mcp_tool("mcp__fixture__pid", {}))\n[n, pid]`;
          const result = await callRun(client, "run_python", code, {
            session,
            timeoutMs: 240_000,
          }, { timeout: 300_000 });
          const [n, pid] = (result.returnValue ?? []) as number[];
          if (!result.ok || typeof n !== "number") return `${id}: ${JSON.stringify(result.error)}`;
          if (!replicaOfPid(replicas, pid)) return `${id}: ran on no replica`;
          if ((sessionHomes.get(key) ?? pid) !== pid) return `${id}: session ${key} moved`;
          sessionHomes.set(key, pid);
          counted.set(key, [...(counted.get(key) ?? []), n]);
          return undefined;
        },
      };
    }
    return {
      id,
      kind,
      run: async (client) => {
        const code =
          `// run ${id}\nconst p = Deno.pid; globalThis.k = "${id}";\nconst a = await llm.ask("${id}");\nreturn [a, Deno.pid === p, globalThis.k];`;
        const result = await callRun(client, "run_typescript", code, { timeoutMs: 240_000 }, {
          timeout: 300_000,
        });
        const expected = JSON.stringify([`answer to ${id}`, true, id]);
        return JSON.stringify(result.returnValue) === expected
          ? undefined
          : `${id}: ${JSON.stringify(result.error ?? result.returnValue)}`;
      },
    };
  };
  // One warm-up run per client, of each kind in turn; not measured.
  await Promise.all(
    pool.map(({ client, principal }, i) => runOf(1_000_000 + i, principal).run(client)),
  );
  counted.clear();
  const forwardsBefore = forwards(cluster);
  const before = await loadAverage();
  log(`load: ${runs} runs, ${clients} clients of ${TOKENS.length} principals (load ${before})`);
  const timings: Array<{ kind: string; ms: number; problem?: string }> = [];
  let next = 0;
  const started = performance.now();
  await Promise.all(pool.map(async ({ client, principal }) => {
    while (next < runs) {
      const run = runOf(next++, principal);
      const t0 = performance.now();
      let problem: string | undefined;
      try {
        problem = await run.run(client);
      } catch (error) {
        problem = `${run.id}: ${(error as Error).message}`;
      }
      timings.push({ kind: run.kind, ms: performance.now() - t0, problem });
    }
  }));
  const seconds = (performance.now() - started) / 1000;
  const problems = timings.flatMap((t) => t.problem ? [t.problem] : []);
  // Every call of a session counted once: its counters are 1…k after the warm-up's.
  for (const [key, ns] of counted) {
    const sorted = [...ns].sort((a, b) => a - b);
    const start = sorted[0];
    if (sorted.some((n, i) => n !== start + i)) problems.push(`session ${key}: counted ${sorted}`);
  }
  const kinds: Record<string, KindReport> = {};
  for (const kind of ["typescript", "python", "session", "llm"]) {
    const own = timings.filter((t) => t.kind === kind);
    const ms = own.map((t) => t.ms).sort((a, b) => a - b);
    kinds[kind] = {
      runs: own.length,
      lost: own.filter((t) => t.problem).length,
      p50: round(percentile(ms, 0.5)),
      p99: round(percentile(ms, 0.99)),
    };
  }
  return {
    clients,
    runs,
    load: { before, after: await loadAverage() },
    seconds: round(seconds),
    runsPerSecond: round(runs / seconds, 2),
    lost: problems.length + (runs - timings.length),
    problems: problems.slice(0, 5),
    byCause: Object.fromEntries(
      [...new Set(problems.map(causeOf))].map((
        c,
      ) => [c, problems.filter((p) => causeOf(p) === c).length]),
    ),
    forwards: forwards(cluster) - forwardsBefore,
    kinds,
  };
}

/** What a problem was: the error type it names, or `wrong`. */
function causeOf(problem: string): string {
  return /"type":"(\w+)"/.exec(problem)?.[1] ?? /\b([A-Z]\w+Error)\b/.exec(problem)?.[1] ?? "wrong";
}

/** Requests the replicas forwarded so far (their `to=` log lines). */
function forwards(cluster: Cluster): number {
  return cluster.replicas.reduce(
    (sum, r) =>
      sum + r.serve.stderr().split("\n").filter((l) => l.includes("http: ") && / to=/.test(l))
        .length,
    0,
  );
}

function render(r: Report): string {
  const out: string[] = [];
  if (r.retry) {
    const { direct, forwarded } = r.retry;
    out.push(
      `The retry of a parked run (llm.ask over MRTR), ${r.retry.rounds} paired rounds, nproc ${r.nproc}, load ${r.retry.load.before} → ${r.retry.load.after}:`,
      "",
      row(["retry", "median ms", "p95 ms", "min ms", "max ms"]),
      row(["---", "---:", "---:", "---:", "---:"]),
      row([
        "direct (at the run's replica)",
        direct.medianMs,
        direct.p95Ms,
        direct.minMs,
        direct.maxMs,
      ]),
      row([
        "forwarded (at another, which forwards it)",
        forwarded.medianMs,
        forwarded.p95Ms,
        forwarded.minMs,
        forwarded.maxMs,
      ]),
      "",
      `Added by the forward, median of the paired differences: ${r.retry.addedMedianMs} ms.`,
      "",
    );
  }
  if (r.load) {
    const l = r.load;
    out.push(
      `${l.clients} clients of 4 principals through nginx (round robin), ${l.runs} mixed runs, nproc ${r.nproc}, load ${l.load.before} → ${l.load.after}: ${l.runsPerSecond} runs/s over ${l.seconds} s, **${l.lost} lost or wrong**, ${l.forwards} requests forwarded.`,
      "",
      row(["kind", "runs", "lost", "p50 ms", "p99 ms"]),
      row(["---", "---:", "---:", "---:", "---:"]),
      ...Object.entries(l.kinds).map(([kind, k]) => row([kind, k.runs, k.lost, k.p50, k.p99])),
      ...(l.problems.length
        ? ["", `By cause: ${JSON.stringify(l.byCause)}. First: ${l.problems.join("; ")}`]
        : []),
    );
  }
  return out.join("\n");
}

await runBench(async (args) => {
  const { values } = parseArgs({
    args,
    options: {
      part: { type: "string" },
      rounds: { type: "string" },
      runs: { type: "string" },
      clients: { type: "string" },
      json: { type: "boolean" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help) return console.log(USAGE);
  const part = values.part ?? "all";
  if (!["retry", "load", "all"].includes(part)) {
    throw new TypeError(`${USAGE}\nUnknown --part ${part}`);
  }
  const int = (raw: string | undefined, fallback: number) => {
    const value = raw === undefined ? fallback : Number(raw);
    if (!Number.isInteger(value) || value < 1) throw new TypeError(`${USAGE}\nNot a count: ${raw}`);
    return value;
  };
  const nginxPath = await clusterTools("bench/replicas.ts");
  if (!nginxPath) throw new Error("nginx and redis-server are needed");
  log("starting 3 replicas on one redis-server behind nginx");
  const cluster = await startCluster(nginxPath, {
    env: { CODE_EXECUTOR_SAMPLING_ENABLED: "true", CODE_EXECUTOR_MAX_TIMEOUT_MS: "300000" },
    tokens: TOKENS.map((t) => `${t.name} ${t.token}`).join("\n") + "\n",
  });
  const report: Report = { nproc: navigator.hardwareConcurrency };
  try {
    if (part !== "load") report.retry = await measureRetry(cluster, int(values.rounds, 40));
    if (part !== "retry") {
      report.load = await measureLoad(cluster, int(values.runs, 400), int(values.clients, 32));
    }
  } finally {
    await cluster.close();
  }
  printReport(values.json === true, report, render);
  if ((report.load?.lost ?? 0) > 0) Deno.exitCode = 1;
});
