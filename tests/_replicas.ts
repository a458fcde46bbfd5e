/**
 * `serve --http` replicas for tests/replicas_test.ts and bench/replicas.ts: each with its own
 * `http.replicaId` (`ce-i`), TMPDIR, audit log and upstream fixture, whose pid tells which replica
 * ran a run; and the mixed workload both drive through the balancer.
 *
 * @module
 */
import type { Client } from "@modelcontextprotocol/client";
import { join } from "node:path";
import type { RunResult } from "./_assert.ts";
import { fixtureServer } from "./_env.ts";
import { eventually } from "./_proc.ts";
import { type HttpServer, startHttpServer } from "./_http_server.ts";
import { callRun } from "./_client.ts";

/** One running replica. */
export interface Replica {
  /** Its `http.replicaId`, `ce-i`. */
  id: string;
  /** The process. */
  serve: HttpServer;
  /** The pid of its upstream fixture: a run that returns it ran on this replica. */
  fixturePid: number;
  /** host:port, as nginx logs it. */
  address: string;
}

/**
 * Starts replicas `ce-0` … `ce-<count-1>` at once, each with the upstream fixture, and waits
 * until each is ready (its fixture has listed its tools and written its pid).
 *
 * @param dir A directory for the fixtures' pid files.
 * @param options How many, and more environment for every replica (the token, …).
 * @returns The replicas, in order; on failure the started ones are stopped.
 */
export async function startReplicas(
  dir: string,
  options: { count: number; env: Record<string, string> },
): Promise<Replica[]> {
  const replicas: Replica[] = [];
  try {
    await Promise.all(Array.from({ length: options.count }, async (_, i) => {
      const pidFile = join(dir, `fixture-${i}.pid`);
      const serve = await startHttpServer({
        env: {
          ...options.env,
          CODE_EXECUTOR_HTTP_REPLICA_ID: `ce-${i}`,
          CODE_EXECUTOR_PYTHON_WARM_POOL: "1",
        },
        upstream: { fixture: fixtureServer({ FIXTURE_PID_FILE: pidFile }) },
      });
      replicas[i] = { id: `ce-${i}`, serve, fixturePid: 0, address: serve.url.host };
      // /readyz: the upstream fixture has listed its tools, so it has written its pid.
      const ready = await eventually(async () => {
        const response = await fetch(new URL("/readyz", serve.url)).catch(() => undefined);
        await response?.body?.cancel();
        return response?.status === 200;
      }, 60_000);
      if (!ready) throw new Error(`replica ce-${i} never became ready:\n${serve.stderr()}`);
      replicas[i].fixturePid = Number(await Deno.readTextFile(pidFile));
    }));
  } catch (error) {
    await Promise.all(replicas.filter(Boolean).map((r) => r.serve.close().catch(() => {})));
    throw error;
  }
  return replicas;
}

/** A run with tool calls on inputs of its own, and what it must return. */
export interface Job {
  /** Unique; the code's first line is `// run <id>` (or `# run <id>`). */
  id: string;
  /** Which tool runs it. */
  tool: "run_typescript" | "run_python";
  /** The program. */
  code: string;
  /** What its three `Get-Thing.v2` calls must return, in order. */
  things: string[];
}

/**
 * A run of the mixed workload: three upstream calls on inputs of its own, optionally a slow call,
 * then the fixture's pid, returned with the run's id.
 *
 * @param id The run's id.
 * @param python run_python, else run_typescript.
 * @param slowMs When set, an upstream call that waits this long.
 * @returns The job.
 */
export function job(id: string, python: boolean, slowMs = 0): Job {
  const ids = [0, 1, 2].map((k) => `${id}/${k}`);
  const things = ids.map((thing) => `thing ${thing}`);
  const code = python
    ? [
      `# run ${id}`,
      `ids = ${JSON.stringify(ids)}`,
      "things = []",
      "for i in ids:",
      '    things.append(await call_mcp_tool("mcp__fixture__Get-Thing.v2", {"id": i}))',
      slowMs ? `await call_mcp_tool("mcp__fixture__slow", {"ms": ${slowMs}})` : "",
      'pid = int(await call_mcp_tool("mcp__fixture__pid", {}))',
      `{"id": "${id}", "things": things, "pid": pid}`,
    ]
    : [
      `// run ${id}`,
      `const ids = ${JSON.stringify(ids)};`,
      "const things = [];",
      'for (const i of ids) things.push(await callMCPTool("mcp__fixture__Get-Thing.v2", { id: i }));',
      slowMs ? `await callMCPTool("mcp__fixture__slow", { ms: ${slowMs} });` : "",
      'const pid = Number(await callMCPTool("mcp__fixture__pid", {}));',
      `return { id: "${id}", things, pid };`,
    ];
  return {
    id,
    tool: python ? "run_python" : "run_typescript",
    code: code.filter(Boolean).join("\n"),
    things,
  };
}

/** What one job gave. */
export interface Outcome {
  /** The job. */
  job: Job;
  /** When the call was made (`Date.now()`). */
  startedAt: number;
  /** When it returned or failed. */
  endedAt: number;
  /** The structured result, when the call returned one. */
  result?: RunResult;
  /** The call's error, when it failed. */
  error?: string;
}

/**
 * Runs the jobs with one client per worker, each taking the next job in turn.
 *
 * @param clients The workers' clients.
 * @param jobs The jobs.
 * @returns One outcome per job, in the order they ended.
 */
export async function runJobs(clients: Client[], jobs: Job[]): Promise<Outcome[]> {
  const outcomes: Outcome[] = [];
  let next = 0;
  await Promise.all(clients.map(async (client) => {
    while (next < jobs.length) {
      const job = jobs[next++];
      const startedAt = Date.now();
      try {
        // Generous: the machine may be busy with other work (the server's default is 30 s).
        const result = await callRun(client, job.tool, job.code, { timeoutMs: 240_000 }, {
          timeout: 300_000,
        });
        outcomes.push({ job, startedAt, endedAt: Date.now(), result });
      } catch (error) {
        outcomes.push({ job, startedAt, endedAt: Date.now(), error: (error as Error).message });
      }
    }
  }));
  return outcomes;
}

/**
 * The replica that served a correct run, or what is wrong with the run.
 *
 * @param outcome What the run gave.
 * @param replicas The replicas.
 * @returns The replica whose upstream fixture answered, or a description of the problem.
 */
export function servedBy(outcome: Outcome, replicas: Replica[]): Replica | string {
  const { job, result } = outcome;
  if (!result) return `${job.id}: the call failed: ${outcome.error}`;
  const value = result.returnValue as { id?: string; things?: string[]; pid?: number } | undefined;
  if (result.isError || !result.ok || !value) {
    return `${job.id}: ${result.error?.type}: ${result.error?.message}`;
  }
  if (value.id !== job.id || JSON.stringify(value.things) !== JSON.stringify(job.things)) {
    return `${job.id}: returned ${JSON.stringify(value)}`;
  }
  return replicas.find((replica) => replica.fixturePid === value.pid) ??
    `${job.id}: returned the pid ${value.pid} of no replica's upstream`;
}
