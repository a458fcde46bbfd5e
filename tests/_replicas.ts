/**
 * `serve --http` replicas for tests/replicas*_test.ts and bench/replicas.ts: each with its own
 * `http.replicaId` (`ce-i`), TMPDIR, HOME, audit log and upstream fixture, whose pid tells which
 * replica ran a run, sharing a redis-server (`state.url`, one `state.key`) when given one; SDK
 * clients through the balancer whose requests nginx's log can name; and the mixed workload the
 * tests and the bench drive.
 *
 * @module
 */
import {
  Client,
  type ClientOptions,
  StreamableHTTPClientTransport,
} from "@modelcontextprotocol/client";
import { join } from "node:path";
import { assertEquals, type RunResult } from "./_assert.ts";
import { fixtureServer } from "./_env.ts";
import { eventually } from "./_proc.ts";
import { type HttpServer, startHttpServer } from "./_http_server.ts";
import { callRun } from "./_client.ts";
import { type AccessLine, findNginx, type Nginx, startNginx } from "./_nginx.ts";
import { hasRedisServer, RedisServer } from "./_redis.ts";

/** The `state.key` of the tests' clusters (every replica of one cluster has the same). */
export const STATE_KEY = "replicas-test-state-key-0123456789abcdef";

/**
 * The environment that puts replicas on one store.
 *
 * @param url The store's `redis://` URL.
 * @returns `CODE_EXECUTOR_STATE_URL` and `CODE_EXECUTOR_STATE_KEY`.
 */
export function clusterEnv(url: string): Record<string, string> {
  return { CODE_EXECUTOR_STATE_URL: url, CODE_EXECUTOR_STATE_KEY: STATE_KEY };
}

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
 * @param options How many, and more environment for every replica (the token,
 *   {@linkcode clusterEnv}, …).
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

/** What one client sent with a run, seen by its fetch. */
export interface SentRun {
  /** The run's id, from its code's first line (`// run <id>`). */
  requestId: string;
  /** The `Mcp-Param-Session` header the SDK sent, if any. */
  paramSession: string | null;
}

/** Options of {@linkcode taggedClient}. */
export interface TaggedClientOptions {
  /** `modern` (2026-07-28) or `legacy` (2025-era). */
  era: "modern" | "legacy";
  /** Its bearer token. */
  token: string;
  /** Filled with each run it sends. */
  sent?: SentRun[];
  /** The capabilities it declares (sampling, elicitation). */
  capabilities?: ClientOptions["capabilities"];
  /** Registers its request handlers before it connects. */
  setup?: (client: Client) => void;
  /**
   * `false`: `input_required` results are returned to the caller, not answered by the SDK (and
   * the tools are not listed first: such a client calls `run_typescript` only).
   */
  autoFulfill?: boolean;
}

/**
 * A client through the balancer whose fetch tags each run's POST (a retry of a parked run too)
 * with `X-Request-Id: <the run's id>` from the code's first line, so that nginx's log says which
 * replica got it, and records the `Mcp-Param-Session` header the SDK sent.
 *
 * @param url The MCP endpoint.
 * @param options Era, token, capabilities and handlers.
 * @returns The connected client and its transport.
 */
export async function taggedClient(
  url: URL,
  options: TaggedClientOptions,
): Promise<{ client: Client; transport: StreamableHTTPClientTransport }> {
  const tagging: typeof fetch = (input, init) => {
    const headers = new Headers(init?.headers);
    if (typeof init?.body === "string") {
      try {
        const message = JSON.parse(init.body);
        const code = message?.params?.arguments?.code;
        const tag = message?.method === "tools/call" && typeof code === "string"
          ? /^(?:\/\/|#) run (\S+)/.exec(code)?.[1]
          : undefined;
        if (tag) {
          headers.set("x-request-id", tag);
          options.sent?.push({ requestId: tag, paramSession: headers.get("mcp-param-session") });
        }
      } catch {
        // Not JSON: nothing to tag.
      }
    }
    return fetch(input, { ...init, headers });
  };
  const transport = new StreamableHTTPClientTransport(url, {
    requestInit: { headers: { authorization: `Bearer ${options.token}` } },
    fetch: tagging,
  });
  const client = new Client({ name: "replicas-test", version: "1.0.0" }, {
    capabilities: options.capabilities,
    ...(options.era === "modern" ? { versionNegotiation: { mode: "auto" as const } } : {}),
    ...(options.autoFulfill === false ? { inputRequired: { autoFulfill: false } } : {}),
  });
  options.setup?.(client);
  await client.connect(transport);
  assertEquals(client.getProtocolEra(), options.era);
  // A 2026-07-28 client learns from the tools' schemas which arguments it repeats in headers
  // (run_python's session → Mcp-Param-Session). Without the list its first call goes without the
  // header and is refused (400, before anything runs); the SDK then lists the tools and retries,
  // but three concurrent first calls were not all recovered so (seen here): list first.
  // (Not for a client that takes input_required results itself: the SDK checks each result of a
  // listed tool against its output schema, which an input_required result has no part of.)
  if (options.era === "modern" && options.autoFulfill !== false) await client.listTools();
  return { client, transport };
}

/**
 * The replicas that got each of a run's requests (its first, then each retry), in order.
 *
 * @param lines nginx's access log.
 * @param requestId The run's id.
 * @param replicas The replicas.
 * @returns Their ids (`?` for an address of none).
 */
export function landedOn(lines: AccessLine[], requestId: string, replicas: Replica[]): string[] {
  return lines.filter((line) => line.requestId === requestId).map((line) =>
    replicas.find((r) => r.address === line.upstreams.at(-1))?.id ?? "?"
  );
}

/**
 * The replica whose upstream fixture has this pid.
 *
 * @param replicas The replicas.
 * @param pid A pid a run returned from `mcp__fixture__pid`.
 * @returns The replica, or undefined.
 */
export function replicaOfPid(replicas: Replica[], pid: unknown): Replica | undefined {
  return replicas.find((r) => r.fixturePid === pid);
}

/**
 * The headers of a JSON-RPC POST in a 2025-era session, sent by hand rather than by a client.
 *
 * @param sessionId The `Mcp-Session-Id`.
 * @param token The caller's bearer token; none for a request that must not carry one.
 * @returns The headers.
 */
export function sessionHeaders(sessionId: string, token?: string): Record<string, string> {
  return {
    ...(token === undefined ? {} : { authorization: `Bearer ${token}` }),
    "content-type": "application/json",
    accept: "application/json, text/event-stream",
    "mcp-session-id": sessionId,
    "mcp-protocol-version": "2025-11-25",
  };
}

/**
 * POSTs `tools/list` in a 2025-era session straight to a URL (a replica, or the balancer).
 *
 * @param url Where.
 * @param sessionId The `Mcp-Session-Id`.
 * @param token The caller's bearer token.
 * @returns The status, and the JSON-RPC error if the answer is one.
 */
export async function sessionRequest(
  url: URL,
  sessionId: string,
  token: string,
): Promise<{ status: number; error?: { code: number; message: string } }> {
  const response = await fetch(url, {
    method: "POST",
    headers: sessionHeaders(sessionId, token),
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
  });
  const text = await response.text();
  let error;
  try {
    error = JSON.parse(text).error;
  } catch {
    // An event stream: a result, not an error.
  }
  return { status: response.status, error };
}

/**
 * The replica a parked run's `requestState` names (its payload is signed, not secret).
 *
 * @param requestState The state of an `input_required` result.
 * @returns The replica's id.
 */
export function parkedOn(requestState: string): string {
  const payload = requestState.split(".")[1];
  return JSON.parse(atob(payload.replaceAll("-", "+").replaceAll("_", "/"))).i;
}

/**
 * The nginx executable, when nginx and redis-server are both installed; else undefined, after
 * saying loudly on stderr that the test file is skipped.
 *
 * @param file The test file, for the message.
 * @returns nginx's path, or undefined (skip).
 */
export async function clusterTools(file: string): Promise<string | undefined> {
  const nginx = await findNginx();
  const redis = await hasRedisServer();
  if (nginx && redis) return nginx;
  console.error(
    [
      "",
      "!".repeat(78),
      `!! ${file} SKIPPED: ${!nginx ? "nginx" : "redis-server"} is not installed.`,
      "!! Install it (apt-get install -y nginx redis-server; .ci/run does) to test replicas.",
      "!".repeat(78),
      "",
    ].join("\n"),
  );
  return undefined;
}

/** Three replicas on one redis-server behind nginx, and the clients a test opened on them. */
export interface Cluster {
  /** The store. */
  redis: RedisServer;
  /** The replicas `ce-0` … `ce-2`. */
  replicas: Replica[];
  /** The balancer, deploy/nginx.conf. */
  nginx: Nginx;
  /** Closed with the cluster. */
  clients: Client[];
  /**
   * Closes the clients, nginx, the replicas (checking that none left a child or file behind,
   * the killed one's included) and the store.
   */
  close(): Promise<void>;
}

/**
 * Starts a redis-server, three replicas on it (with {@linkcode clusterEnv}) and nginx in front.
 *
 * @param nginxPath nginx ({@linkcode clusterTools}).
 * @param options `env`: more environment for every replica (the token, …); `tokens`: the lines
 *   of an `http.tokensFile` (`name token`) for every replica.
 * @returns The cluster; close it when done. On failure what was started is stopped.
 */
export async function startCluster(
  nginxPath: string,
  options: { env: Record<string, string>; tokens?: string },
): Promise<Cluster> {
  const dir = await Deno.makeTempDir({ prefix: "ce-replicas-" });
  const redis = new RedisServer();
  const clients: Client[] = [];
  let replicas: Replica[] = [];
  let nginx: Nginx | undefined;
  const close = async () => {
    await Promise.all(clients.map((client) => client.close().catch(() => {})));
    await nginx?.stop();
    const stopped = await Promise.allSettled(replicas.filter(Boolean).map((r) => r.serve.close()));
    await redis.close();
    await Deno.remove(dir, { recursive: true }).catch(() => {});
    const failures = stopped.filter((s) => s.status === "rejected");
    assertEquals(failures.map((f) => String((f as PromiseRejectedResult).reason)), []);
  };
  try {
    // 5 s for a store round trip (1 s by default): on this shared machine, at a load of 20, a
    // replica's event loop has stalled past 1 s, and the store's timeout is not what is tested.
    const env: Record<string, string> = {
      CODE_EXECUTOR_STATE_TIMEOUT_MS: "5000",
      ...options.env,
      ...clusterEnv(redis.url),
    };
    if (options.tokens !== undefined) {
      env.CODE_EXECUTOR_HTTP_TOKENS_FILE = join(dir, "tokens");
      await Deno.writeTextFile(env.CODE_EXECUTOR_HTTP_TOKENS_FILE, options.tokens, { mode: 0o600 });
    }
    await redis.start();
    replicas = await startReplicas(dir, { count: 3, env });
    nginx = await startNginx(nginxPath, replicas.map((r) => Number(r.serve.url.port)));
    return { redis, replicas, nginx, clients, close };
  } catch (error) {
    await close().catch(() => {});
    throw error;
  }
}

/** A `run_typescript` answer as a client that takes `input_required` rounds itself sees it. */
export interface Round {
  /** `input_required` for a round. */
  resultType?: string;
  /** The round's questions, by key. */
  inputRequests?: Record<string, unknown>;
  /** The state to echo in the retry. */
  requestState?: string;
  /** The run's result, when it ended. */
  structuredContent?: { returnValue?: unknown; error?: { type: string; message: string } };
}

/**
 * Calls `run_typescript` with a client made with `autoFulfill: false`: its first round, or with
 * `retry` ({@linkcode samplingRetry}) the next.
 *
 * @param client The client.
 * @param code The code (the same in every round).
 * @param retry The retry's `inputResponses` and `requestState`.
 * @returns The round, or the run's result.
 */
export async function callRound(
  client: Client,
  code: string,
  retry: Record<string, unknown> = {},
): Promise<Round> {
  return await client.callTool(
    { name: "run_typescript", arguments: { code }, ...retry },
    { allowInputRequired: true, timeout: 120_000 },
  ) as Round;
}

/**
 * The retry that answers every `llm.ask` of a round with the same text.
 *
 * @param round The `input_required` round.
 * @param text The model's answer.
 * @returns `inputResponses` and `requestState`.
 */
export function samplingRetry(round: Round, text: string): Record<string, unknown> {
  return {
    inputResponses: Object.fromEntries(
      Object.keys(round.inputRequests ?? {}).map((key) => [key, {
        role: "assistant",
        model: "m",
        content: { type: "text", text },
      }]),
    ),
    requestState: round.requestState,
  };
}
