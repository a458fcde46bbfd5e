/**
 * Cost of calling upstream tools through code-executor, next to calling them directly:
 *
 * 1. Latency: `--calls` sequential `echo` calls to server-everything from ONE `run_typescript`
 *    execution (timed with `performance.now()` inside the sandbox), against the same calls made
 *    directly with an SDK v2 `Client` over stdio to a separate server-everything from this
 *    process (before the code-executor run, and again after it to show drift in machine load).
 *    Overhead per call = median through code-executor − median of the first direct run.
 * 2. Tokens (o200k): our `tools/list` as a real client receives it, after the upstream servers
 *    have been listed (the run_typescript description then carries tool counts), against the
 *    sum of the upstream servers' own `tools/list` results, for 3 servers (everything,
 *    filesystem, memory) and for the same three configured ten times over (30 servers).
 *
 * ```sh
 * deno run -A bench/tool_calls.ts [--calls 1000] [--warmup 1000] [--json]
 * ```
 *
 * Warm-up calls (a separate `run_typescript` execution, and direct calls) connect the upstream
 * servers and bring the bench client, the host and the upstream servers to JIT steady state:
 * with only 50, the first direct run was 0.1–0.2 ms slower per call than the same run repeated
 * later. The sandbox child of the measured run is fresh, as every execution's is.
 *
 * code-executor runs as `deno run -A main.ts serve --config <temp mcp.json>` with a private
 * HOME, TMPDIR and settings file (CODE_EXECUTOR_CONFIG), and DENO_DIR pointing at the real
 * Deno cache so that the npm servers are not downloaded again. Upstream servers run with
 * `deno run -A npm:…` from a private working directory, so that they never touch the
 * project's deno.json, lock file or node_modules.
 *
 * Progress goes to stderr; stdout gets a markdown report, or JSON with `--json`.
 *
 * @module
 */
import type { Client } from "@modelcontextprotocol/client";
import { join } from "node:path";
import {
  type CallOutcome,
  connectStdio,
  loadAverage,
  log,
  type MachineReport,
  machineReport,
  machineText,
  mean,
  parseBenchArgs,
  printReport,
  round,
  row,
  runBench,
  type Stats,
  stats,
  status,
  type StdioServer,
  tokensOf,
} from "./_common.ts";
import { EVERYTHING, FILESYSTEM, homeEnv, MEMORY, ROOT } from "../tests/_helpers.ts";

const PACKAGES = { everything: EVERYTHING, filesystem: FILESYSTEM, memory: MEMORY } as const;
const KINDS = ["everything", "filesystem", "memory"] as const;
const COPIES = 10;
const ECHO_ARGS = { message: "x" };
const ECHO_REPLY = "Echo: x";
/** Direct clients listing the upstream servers at once (each is a `deno run` on 2 cores). */
const LIST_CONCURRENCY = 3;
const TARGETS = {
  overheadMedianMs: 0.5,
  ours3Tokens: 1_000,
  growthPerServerTokens: 15,
  saved3Pct: 85,
  saved30Pct: 98,
};

type Kind = typeof KINDS[number];

/** Latencies of single tool calls: sub-millisecond, so three decimals, and the mean. */
interface CallStats extends Stats {
  meanMs: number;
}

interface ServerSpec {
  name: string;
  kind: Kind;
  command: string;
  args: string[];
  env: Record<string, string>;
  cwd: string;
}

interface ToolCost {
  name: string;
  total: number;
  description: number;
  inputSchema: number;
  outputSchema: number;
  annotations: number;
  other: number;
}

interface TokenReport {
  servers: number;
  upstreamTools: number;
  upstreamTokens: number;
  upstreamPerKind: Record<Kind, { tools: number; tokens: number }>;
  oursBeforeListing: number;
  ours: number;
  savedPct: number;
  runTypescriptDescription: string;
  breakdown: ToolCost[];
  /** Servers whose tools code-executor could not list (they would show as unavailable). */
  unlisted: string[];
}

interface Report {
  date: string;
  machine: MachineReport;
  command: string;
  options: { calls: number; warmup: number };
  latency: {
    direct: CallStats;
    /** The direct calls again, right after the code-executor run: shows drift in machine load. */
    directAfter: CallStats;
    codeExecutor: CallStats;
    ratio: number;
    overheadMedianMs: number;
    overheadP95Ms: number;
    /** The measured `run_typescript` call, from the client's side, and the server's durationMs. */
    executionWallMs: number;
    executionDurationMs: number;
    directWallMs: number;
  };
  tokens: {
    three: TokenReport;
    thirty: TokenReport;
    growthPerServer: number;
  };
  targets: {
    overhead: { goal: string; actual: string; met: boolean };
    ours3: { goal: string; actual: string; met: boolean };
    growth: { goal: string; actual: string; met: boolean };
    saved3: { goal: string; actual: string; met: boolean };
    saved30: { goal: string; actual: string; met: boolean };
  };
}

type ListResult = { tools: Array<Record<string, unknown>> } & Record<string, unknown>;

function callStats(samples: number[]): CallStats {
  return { ...stats(samples, 3), meanMs: round(mean(samples), 3) };
}

/** Cleanup steps, run in reverse order of registration, once, on every exit path. */
class Cleanup {
  #steps: Array<() => Promise<void>> = [];
  #running: Promise<void> | undefined;

  defer(step: () => Promise<void>): void {
    this.#steps.push(step);
  }

  run(): Promise<void> {
    this.#running ??= (async () => {
      while (this.#steps.length > 0) {
        await this.#steps.pop()!().catch((error) => log(`cleanup: ${(error as Error).message}`));
      }
    })();
    return this.#running;
  }
}

/** The environment every child gets: private HOME and TMPDIR, the real Deno cache. */
function baseEnv(work: string): Record<string, string> {
  return {
    ...homeEnv(join(work, "home")),
    XDG_CONFIG_HOME: join(work, "home", ".config"),
    TMPDIR: join(work, "tmp"),
  };
}

function serverSpecs(work: string, copies: number): ServerSpec[] {
  const specs: ServerSpec[] = [];
  for (let copy = 1; copy <= copies; copy++) {
    for (const kind of KINDS) {
      const name = copies === 1 ? kind : `${kind}${copy}`;
      const args = ["run", "-A", PACKAGES[kind]];
      const env: Record<string, string> = {};
      if (kind === "filesystem") args.push(join(work, "files"));
      if (kind === "memory") env.MEMORY_FILE_PATH = join(work, "memory", `${name}.jsonl`);
      specs.push({
        name,
        kind,
        command: Deno.execPath(),
        args,
        env,
        cwd: join(work, "upstream-cwd"),
      });
    }
  }
  return specs;
}

async function writeMcpConfig(path: string, specs: ServerSpec[]): Promise<void> {
  const mcpServers = Object.fromEntries(
    specs.map((s) => [s.name, { command: s.command, args: s.args, env: s.env, cwd: s.cwd }]),
  );
  await Deno.writeTextFile(path, JSON.stringify({ mcpServers }, null, 2));
}

/** Starts code-executor with the given upstream config and settings file. */
function startExecutor(
  work: string,
  mcpConfig: string,
  settingsFile: string,
  cleanup: Cleanup,
): Promise<StdioServer> {
  return connectStdio("code-executor", {
    command: Deno.execPath(),
    args: ["run", "-A", "main.ts", "serve", "--config", mcpConfig],
    cwd: ROOT,
    env: {
      ...baseEnv(work),
      CODE_EXECUTOR_CONFIG: settingsFile,
      CODE_EXECUTOR_LOG_LEVEL: "warn",
    },
  }, { cleanup });
}

function connectUpstream(spec: ServerSpec, work: string, cleanup: Cleanup): Promise<StdioServer> {
  return connectStdio(spec.name, {
    command: spec.command,
    args: spec.args,
    cwd: spec.cwd,
    env: { ...baseEnv(work), ...spec.env },
  }, { cleanup });
}

function breakdown(list: ListResult): ToolCost[] {
  return list.tools.map((tool) => {
    const total = tokensOf(tool);
    const description = tokensOf(tool.description);
    const inputSchema = tokensOf(tool.inputSchema);
    const outputSchema = tokensOf(tool.outputSchema);
    const annotations = tokensOf(tool.annotations);
    return {
      name: String(tool.name),
      total,
      description,
      inputSchema,
      outputSchema,
      annotations,
      other: total - description - inputSchema - outputSchema - annotations,
    };
  });
}

async function runTypescript(
  client: Client,
  code: string,
  timeoutMs: number,
): Promise<{ outcome: CallOutcome; wallMs: number }> {
  const started = performance.now();
  const result = await client.callTool(
    { name: "run_typescript", arguments: { code, timeoutMs } },
    { timeout: timeoutMs + 30_000 },
  );
  const wallMs = performance.now() - started;
  const outcome = (result.structuredContent ?? {}) as CallOutcome;
  if (result.isError || outcome.ok !== true) {
    throw new Error(
      `run_typescript failed: ${
        outcome.error ? `${outcome.error.type}: ${outcome.error.message}` : JSON.stringify(result)
      }`,
    );
  }
  return { outcome, wallMs };
}

/** Sandbox code: `calls` sequential echo calls, each timed inside the sandbox. */
function echoLoop(calls: number): string {
  return `const durations: number[] = [];
for (let i = 0; i < ${calls}; i++) {
  const started = performance.now();
  const reply = await callMCPTool("mcp__everything__echo", ${JSON.stringify(ECHO_ARGS)});
  durations.push(performance.now() - started);
  if (reply !== ${JSON.stringify(ECHO_REPLY)}) {
    throw new Error("Unexpected echo reply: " + JSON.stringify(reply));
  }
}
return durations.map((d) => Math.round(d * 1000) / 1000);`;
}

async function directEchoLoop(client: Client, calls: number): Promise<number[]> {
  const durations: number[] = [];
  for (let i = 0; i < calls; i++) {
    const started = performance.now();
    const result = await client.callTool({ name: "echo", arguments: ECHO_ARGS });
    durations.push(performance.now() - started);
    const content = result.content as Array<{ type: string; text?: string }>;
    if (content?.[0]?.text !== ECHO_REPLY) {
      throw new Error(`Unexpected echo reply: ${JSON.stringify(result)}`);
    }
  }
  return durations;
}

/** Lists every upstream server's tools with a direct client, a few servers at a time. */
async function upstreamLists(
  specs: ServerSpec[],
  work: string,
  cleanup: Cleanup,
  reuse: Map<string, Client> = new Map(),
): Promise<Map<string, ListResult>> {
  const lists = new Map<string, ListResult>();
  const queue = [...specs];
  const worker = async () => {
    for (let spec = queue.shift(); spec; spec = queue.shift()) {
      const existing = reuse.get(spec.name);
      if (existing) {
        lists.set(spec.name, await existing.listTools() as ListResult);
        continue;
      }
      const connection = await connectUpstream(spec, work, cleanup);
      try {
        lists.set(spec.name, await connection.client.listTools() as ListResult);
      } finally {
        await connection.close();
      }
    }
  };
  await Promise.all(Array.from({ length: LIST_CONCURRENCY }, worker));
  return lists;
}

/** Our `tools/list` once code-executor has listed every upstream server (via search_tools). */
async function ourLists(
  executor: Client,
  specs: ServerSpec[],
  before: ListResult,
): Promise<{ before: ListResult; after: ListResult; unlisted: string[] }> {
  const started = performance.now();
  const found = await executor.callTool(
    { name: "search_tools", arguments: { query: "", limit: 100, detail: "names" } },
    { timeout: 180_000 },
  );
  log(
    `search_tools listed ${specs.length} servers in ${Math.round(performance.now() - started)} ms`,
  );
  if (found.isError) throw new Error(`search_tools failed: ${JSON.stringify(found.content)}`);
  const after = await executor.listTools() as ListResult;
  const description = String(
    after.tools.find((t) => t.name === "run_typescript")?.description ?? "",
  );
  const unlisted = specs.map((s) => s.name).filter((name) =>
    !new RegExp(`(^|[ ,:])${name} \\(\\d+\\)`).test(description)
  );
  return { before, after, unlisted };
}

function tokenReport(
  specs: ServerSpec[],
  upstream: Map<string, ListResult>,
  ours: { before: ListResult; after: ListResult; unlisted: string[] },
): TokenReport {
  const perKind = Object.fromEntries(KINDS.map((k) => [k, { tools: 0, tokens: 0 }])) as Record<
    Kind,
    { tools: number; tokens: number }
  >;
  let upstreamTokens = 0;
  let upstreamTools = 0;
  for (const spec of specs) {
    const list = upstream.get(spec.name);
    if (!list) throw new Error(`No tools/list from ${spec.name}`);
    const tokens = tokensOf(list);
    upstreamTokens += tokens;
    upstreamTools += list.tools.length;
    perKind[spec.kind].tools += list.tools.length;
    perKind[spec.kind].tokens += tokens;
  }
  const oursTokens = tokensOf(ours.after);
  return {
    servers: specs.length,
    upstreamTools,
    upstreamTokens,
    upstreamPerKind: perKind,
    oursBeforeListing: tokensOf(ours.before),
    ours: oursTokens,
    savedPct: round((1 - oursTokens / upstreamTokens) * 100, 1),
    runTypescriptDescription: String(
      ours.after.tools.find((t) => t.name === "run_typescript")?.description ?? "",
    ),
    breakdown: breakdown(ours.after),
    unlisted: ours.unlisted,
  };
}

function renderMarkdown(report: Report): string {
  const { latency, tokens, targets } = report;
  const tokenRow = (label: string, t: TokenReport) =>
    row([
      label,
      `${t.upstreamTools} tools`,
      t.upstreamTokens,
      t.oursBeforeListing,
      t.ours,
      `${t.savedPct}%`,
    ]);
  const lines = [
    `# Tool-call benchmark (${report.date})`,
    "",
    `Machine: ${machineText(report.machine)}`,
    "",
    `Command: \`${report.command}\``,
    "",
    `${report.options.calls} sequential \`echo\` calls (after ${report.options.warmup} warm-up ` +
    "calls on each path); code-executor calls are timed inside the sandbox around " +
    "`await callMCPTool(...)`, direct calls around `client.callTool(...)` in this process.",
    "",
    row(["path", "n", "median ms", "p95 ms", "mean ms", "min ms", "max ms", "all calls ms"]),
    row(["---", "---:", "---:", "---:", "---:", "---:", "---:", "---:"]),
    row([
      "direct SDK client → server-everything",
      latency.direct.n,
      latency.direct.medianMs,
      latency.direct.p95Ms,
      latency.direct.meanMs,
      latency.direct.minMs,
      latency.direct.maxMs,
      round(latency.directWallMs, 0),
    ]),
    row([
      "direct again, after the code-executor run (drift check)",
      latency.directAfter.n,
      latency.directAfter.medianMs,
      latency.directAfter.p95Ms,
      latency.directAfter.meanMs,
      latency.directAfter.minMs,
      latency.directAfter.maxMs,
      "",
    ]),
    row([
      "run_typescript → callMCPTool → server-everything",
      latency.codeExecutor.n,
      latency.codeExecutor.medianMs,
      latency.codeExecutor.p95Ms,
      latency.codeExecutor.meanMs,
      latency.codeExecutor.minMs,
      latency.codeExecutor.maxMs,
      `${round(latency.executionDurationMs, 0)} (execution), ${
        round(latency.executionWallMs, 0)
      } (MCP call)`,
    ]),
    "",
    `Ratio of medians: ${latency.ratio}×; overhead per call: ${latency.overheadMedianMs} ms ` +
    `(median), ${latency.overheadP95Ms} ms (p95), both against the first direct run.`,
    "",
    row([
      "servers",
      "upstream tools",
      "upstream tools/list tokens",
      "ours, servers not yet listed",
      "ours, servers listed",
      "saved",
    ]),
    row(["---", "---:", "---:", "---:", "---:", "---:"]),
    tokenRow(`${tokens.three.servers} (everything, filesystem, memory)`, tokens.three),
    tokenRow(`${tokens.thirty.servers} (each ×${COPIES})`, tokens.thirty),
    "",
    `Growth per extra server: ${tokens.growthPerServer} tokens ((ours30 − ours3) / ${
      tokens.thirty.servers - tokens.three.servers
    }).`,
    "",
    row(["upstream server", "tools", "tools/list tokens"]),
    row(["---", "---:", "---:"]),
    ...KINDS.map((k) =>
      row([k, tokens.three.upstreamPerKind[k].tools, tokens.three.upstreamPerKind[k].tokens])
    ),
    "",
    row(["our tool (3 servers)", "total", "description", "inputSchema", "outputSchema", "other"]),
    row(["---", "---:", "---:", "---:", "---:", "---:"]),
    ...tokens.three.breakdown.map((t) =>
      row([t.name, t.total, t.description, t.inputSchema, t.outputSchema, t.annotations + t.other])
    ),
    "",
    "(“other” is the name, title, annotations, execution and JSON punctuation.)",
    "",
    row(["target", "goal", "measured", "status"]),
    row(["---", "---:", "---:", "---"]),
    ...([
      ["overhead per call, median", targets.overhead],
      ["our tools/list, 3 servers", targets.ours3],
      ["growth per extra server", targets.growth],
      ["saved, 3 servers", targets.saved3],
      ["saved, 30 servers", targets.saved30],
    ] as const).map(([name, t]) => row([name, t.goal, t.actual, status(t.met)])),
    "",
  ];
  for (const t of [tokens.three, tokens.thirty]) {
    if (t.unlisted.length > 0) {
      lines.push(
        `Warning: with ${t.servers} servers, code-executor did not list: ${t.unlisted.join(", ")}`,
        "",
      );
    }
  }
  return lines.join("\n");
}

async function measure(
  options: Report["options"],
  work: string,
  cleanup: Cleanup,
): Promise<Omit<Report, "date" | "machine" | "command" | "options" | "targets">> {
  for (const dir of ["home", "tmp", "files", "memory", "upstream-cwd"]) {
    await Deno.mkdir(join(work, dir), { recursive: true });
  }
  await Deno.writeTextFile(join(work, "files", "hello.txt"), "hello\n");
  const timeoutMs = Math.max(120_000, options.calls * 50);
  const settingsFile = join(work, "settings.jsonc");
  await Deno.writeTextFile(
    settingsFile,
    JSON.stringify(
      {
        limits: { timeoutMs, maxTimeoutMs: timeoutMs },
        tools: { maxCallsPerExecution: Math.max(1_000, options.calls, options.warmup) },
      },
      null,
      2,
    ),
  );
  const specs3 = serverSpecs(work, 1);
  const specs30 = serverSpecs(work, COPIES);
  const config3 = join(work, "mcp3.json");
  const config30 = join(work, "mcp30.json");
  await writeMcpConfig(config3, specs3);
  await writeMcpConfig(config30, specs30);

  log("starting code-executor (3 servers) and a direct server-everything");
  const executor = await startExecutor(work, config3, settingsFile, cleanup);
  // Before any upstream server is connected: the description names the servers, without counts.
  const before3 = await executor.client.listTools() as ListResult;
  const everything = await connectUpstream(specs3[0], work, cleanup);

  log(`warm-up: ${options.warmup} echo calls on each path`);
  await directEchoLoop(everything.client, options.warmup);
  await runTypescript(executor.client, echoLoop(options.warmup), timeoutMs);

  log(`direct: ${options.calls} echo calls`);
  const directStarted = performance.now();
  const direct = await directEchoLoop(everything.client, options.calls);
  const directWallMs = performance.now() - directStarted;

  log(`code-executor: ${options.calls} echo calls from one run_typescript execution`);
  const run = await runTypescript(executor.client, echoLoop(options.calls), timeoutMs);
  const through = run.outcome.returnValue;
  if (!Array.isArray(through) || through.length !== options.calls) {
    throw new Error(`run_typescript returned ${JSON.stringify(through)?.slice(0, 200)}`);
  }
  log(`direct again: ${options.calls} echo calls`);
  const directAfter = await directEchoLoop(everything.client, options.calls);

  log("tokens: 3 servers");
  const ours3 = await ourLists(executor.client, specs3, before3);
  const upstream3 = await upstreamLists(
    specs3,
    work,
    cleanup,
    new Map([["everything", everything.client]]),
  );
  await executor.close();
  await everything.close();

  log(`tokens: ${specs30.length} servers`);
  const executor30 = await startExecutor(work, config30, settingsFile, cleanup);
  let ours30;
  try {
    const before30 = await executor30.client.listTools() as ListResult;
    ours30 = await ourLists(executor30.client, specs30, before30);
  } finally {
    await executor30.close();
  }
  const upstream30 = await upstreamLists(specs30, work, cleanup);

  const directStats = callStats(direct);
  const throughStats = callStats(through as number[]);
  const three = tokenReport(specs3, upstream3, ours3);
  const thirty = tokenReport(specs30, upstream30, ours30);
  return {
    latency: {
      direct: directStats,
      directAfter: callStats(directAfter),
      codeExecutor: throughStats,
      ratio: round(throughStats.medianMs / directStats.medianMs, 2),
      overheadMedianMs: round(throughStats.medianMs - directStats.medianMs, 3),
      overheadP95Ms: round(throughStats.p95Ms - directStats.p95Ms, 3),
      executionWallMs: round(run.wallMs, 1),
      executionDurationMs: round(run.outcome.durationMs ?? NaN, 1),
      directWallMs: round(directWallMs, 1),
    },
    tokens: {
      three,
      thirty,
      growthPerServer: round((thirty.ours - three.ours) / (thirty.servers - three.servers), 1),
    },
  };
}

async function main(args: string[]): Promise<void> {
  const parsed = parseBenchArgs(
    args,
    "Usage: deno run -A bench/tool_calls.ts [--calls N] [--warmup N] [--json]",
    { calls: { fallback: 1_000 }, warmup: { fallback: 1_000 } },
  );
  if (!parsed) return;
  const options = parsed.ints;

  const cleanup = new Cleanup();
  const work = await Deno.makeTempDir({ prefix: "ce-bench-tools-" });
  cleanup.defer(() => Deno.remove(work, { recursive: true }).catch(() => {}));
  const onSignal = () => {
    log("interrupted; cleaning up");
    cleanup.run().finally(() => Deno.exit(130));
  };
  for (const signal of ["SIGINT", "SIGTERM"] as const) Deno.addSignalListener(signal, onSignal);
  try {
    const loadBefore = await loadAverage();
    const measured = await measure(options, work, cleanup);
    const { latency, tokens } = measured;
    const report: Report = {
      date: new Date().toISOString(),
      machine: await machineReport(loadBefore),
      command: ["deno run -A bench/tool_calls.ts", ...args].join(" "),
      options,
      ...measured,
      targets: {
        overhead: {
          goal: `≤ ${TARGETS.overheadMedianMs} ms`,
          actual: `${latency.overheadMedianMs} ms`,
          met: latency.overheadMedianMs <= TARGETS.overheadMedianMs,
        },
        ours3: {
          goal: `≤ ${TARGETS.ours3Tokens} tokens`,
          actual: `${tokens.three.ours} tokens`,
          met: tokens.three.ours <= TARGETS.ours3Tokens,
        },
        growth: {
          goal: `≤ ${TARGETS.growthPerServerTokens} tokens`,
          actual: `${tokens.growthPerServer} tokens`,
          met: tokens.growthPerServer <= TARGETS.growthPerServerTokens,
        },
        saved3: {
          goal: `≥ ${TARGETS.saved3Pct}%`,
          actual: `${tokens.three.savedPct}%`,
          met: tokens.three.savedPct >= TARGETS.saved3Pct,
        },
        saved30: {
          goal: `≥ ${TARGETS.saved30Pct}%`,
          actual: `${tokens.thirty.savedPct}%`,
          met: tokens.thirty.savedPct >= TARGETS.saved30Pct,
        },
      },
    };
    printReport(parsed.json, report, renderMarkdown);
  } finally {
    await cleanup.run();
    for (const signal of ["SIGINT", "SIGTERM"] as const) {
      Deno.removeSignalListener(signal, onSignal);
    }
  }
}

if (import.meta.main) await runBench(main);
