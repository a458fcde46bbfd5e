/**
 * Cost of calling upstream tools through code-executor, next to calling them directly:
 *
 * 1. Latency: `--calls` sequential `echo` calls to server-everything from ONE `run_typescript`
 *    execution (timed with `performance.now()` inside the sandbox), against the same calls made
 *    directly with an SDK v2 `Client` over stdio to a separate server-everything from this
 *    process (before the code-executor run, and again after it to show drift in machine load).
 *    Overhead per call = median through code-executor − median of the first direct run.
 * 2. Python against TypeScript (issue #17): `--lang-calls` sequential `echo` calls from one
 *    `run_python` execution and from one `run_typescript` execution, each timed inside the
 *    sandbox around the awaited call, alternated `--lang-rounds` times in the same server; the
 *    per-call median of each language over all its rounds, and their ratio.
 * 3. Tokens (o200k): our `tools/list` as a real client receives it, after the upstream servers
 *    have been listed (the run_typescript description then carries tool counts), against the
 *    sum of the upstream servers' own `tools/list` results, for 3 servers (everything,
 *    filesystem, memory) and for the same three configured ten times over (30 servers).
 *
 * ```sh
 * deno run -A bench/tool_calls.ts [--calls 1000] [--warmup 1000] [--lang-calls 100]
 *   [--lang-rounds 3] [--only-lang] [--json]
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
import { mean, round, runPaired, type Stats, stats } from "./_stats.ts";
import { loadAverage, type MachineReport, machineReport, machineText } from "./_machine.ts";
import { type CallOutcome, connectStdio, type StdioServer } from "./_server.ts";
import { log, parseBenchArgs, printReport, row, runBench, status, tokensOf } from "./_report.ts";
import { EVERYTHING, FILESYSTEM, MEMORY } from "../tests/_pins.ts";
import { homeEnv, ROOT } from "../tests/_env.ts";

const PACKAGES = { everything: EVERYTHING, filesystem: FILESYSTEM, memory: MEMORY } as const;
const KINDS = ["everything", "filesystem", "memory"] as const;
const COPIES = 10;
const ECHO_ARGS = { message: "x" };
const ECHO_REPLY = "Echo: x";
/** Direct clients listing the upstream servers at once (each is a `deno run` on 2 cores). */
const LIST_CONCURRENCY = 3;
const TARGETS = {
  overheadMedianMs: 0.5,
  /** Issue #17: a tool call from Python ≤ 1.2× one from TypeScript, in the same run. */
  pythonToTypescript: 1.2,
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
  options: { calls: number; warmup: number; langCalls: number; langRounds: number };
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
  } | null;
  /** Python and TypeScript, the same calls in the same server (per call, all rounds). */
  languages: {
    typescript: CallStats;
    python: CallStats;
    /** The median of each round, in order, to show drift. */
    roundMedians: Array<{ typescript: number; python: number }>;
    ratio: number;
  };
  tokens: {
    three: TokenReport;
    thirty: TokenReport;
    growthPerServer: number;
  } | null;
  /** By name, as the report's target table shows them; only the parts measured. */
  targets: Record<string, { goal: string; actual: string; met: boolean }>;
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

async function runPython(
  client: Client,
  code: string,
  timeoutMs: number,
): Promise<CallOutcome> {
  const result = await client.callTool(
    { name: "run_python", arguments: { code, timeoutMs } },
    { timeout: timeoutMs + 30_000 },
  );
  const outcome = (result.structuredContent ?? {}) as CallOutcome;
  if (result.isError || outcome.ok !== true) {
    throw new Error(
      `run_python failed: ${
        outcome.error ? `${outcome.error.type}: ${outcome.error.message}` : JSON.stringify(result)
      }`,
    );
  }
  return outcome;
}

/** Python sandbox code: `calls` sequential echo calls, each timed inside the sandbox. */
function pythonEchoLoop(calls: number): string {
  return `import time
durations = []
for i in range(${calls}):
    started = time.perf_counter()
    reply = await call_mcp_tool("mcp__everything__echo", ${JSON.stringify(ECHO_ARGS)})
    durations.append(round((time.perf_counter() - started) * 1000, 3))
    if reply != ${JSON.stringify(ECHO_REPLY)}:
        raise ValueError(f"Unexpected echo reply: {reply!r}")
durations`;
}

function durations(outcome: CallOutcome, calls: number, language: string): number[] {
  const value = outcome.returnValue;
  if (!Array.isArray(value) || value.length !== calls || value.some((d) => typeof d !== "number")) {
    throw new Error(`${language} returned ${JSON.stringify(value)?.slice(0, 200)}`);
  }
  return value as number[];
}

/** Python and TypeScript echo loops, alternated in the same server. */
async function measureLanguages(
  executor: Client,
  options: Report["options"],
  timeoutMs: number,
): Promise<Report["languages"]> {
  const all = { typescript: [] as number[], python: [] as number[] };
  const roundMedians: Report["languages"]["roundMedians"] = [];
  log(`languages: one warm-up run each, then ${options.langRounds} rounds`);
  await runPython(executor, pythonEchoLoop(options.langCalls), timeoutMs);
  await runTypescript(executor, echoLoop(options.langCalls), timeoutMs);
  // The two languages take turns at going first, so that neither always runs right after the
  // other.
  await runPaired({
    arms: ["typescript", "python"] as const,
    rounds: options.langRounds,
    sample: async (language) =>
      language === "typescript"
        ? durations(
          (await runTypescript(executor, echoLoop(options.langCalls), timeoutMs)).outcome,
          options.langCalls,
          "run_typescript",
        )
        : durations(
          await runPython(executor, pythonEchoLoop(options.langCalls), timeoutMs),
          options.langCalls,
          "run_python",
        ),
    onRound: (_, { typescript: ts, python: py }) => {
      all.typescript.push(...ts);
      all.python.push(...py);
      roundMedians.push({ typescript: stats(ts, 3).medianMs, python: stats(py, 3).medianMs });
    },
  });
  const typescript = callStats(all.typescript);
  const python = callStats(all.python);
  return {
    typescript,
    python,
    roundMedians,
    ratio: round(python.medianMs / typescript.medianMs, 2),
  };
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

function latencyLines(latency: NonNullable<Report["latency"]>): string[] {
  const statCells = (s: CallStats) => [s.n, s.medianMs, s.p95Ms, s.meanMs, s.minMs, s.maxMs];
  return [
    row(["path", "n", "median ms", "p95 ms", "mean ms", "min ms", "max ms", "all calls ms"]),
    row(["---", "---:", "---:", "---:", "---:", "---:", "---:", "---:"]),
    row([
      "direct SDK client → server-everything",
      ...statCells(latency.direct),
      round(latency.directWallMs, 0),
    ]),
    row([
      "direct again, after the code-executor run (drift check)",
      ...statCells(latency.directAfter),
      "",
    ]),
    row([
      "run_typescript → callMCPTool → server-everything",
      ...statCells(latency.codeExecutor),
      `${round(latency.executionDurationMs, 0)} (execution), ${
        round(latency.executionWallMs, 0)
      } (MCP call)`,
    ]),
    "",
    `Ratio of medians: ${latency.ratio}×; overhead per call: ${latency.overheadMedianMs} ms ` +
    `(median), ${latency.overheadP95Ms} ms (p95), both against the first direct run.`,
    "",
  ];
}

function languageLines(languages: Report["languages"], options: Report["options"]): string[] {
  const statCells = (s: CallStats) => [s.n, s.medianMs, s.p95Ms, s.meanMs, s.minMs, s.maxMs];
  return [
    `Python against TypeScript: ${options.langRounds} rounds of one \`run_typescript\` and one ` +
    `\`run_python\` execution, each making ${options.langCalls} sequential \`echo\` calls timed ` +
    "inside the sandbox, in the same server (after one warm-up execution each).",
    "",
    row(["path", "n", "median ms", "p95 ms", "mean ms", "min ms", "max ms", "round medians"]),
    row(["---", "---:", "---:", "---:", "---:", "---:", "---:", "---:"]),
    row([
      "run_typescript → callMCPTool",
      ...statCells(languages.typescript),
      languages.roundMedians.map((r) => r.typescript).join(", "),
    ]),
    row([
      "run_python → call_mcp_tool",
      ...statCells(languages.python),
      languages.roundMedians.map((r) => r.python).join(", "),
    ]),
    "",
    `Python / TypeScript, median per call: ${languages.ratio}×.`,
    "",
  ];
}

function tokenLines(tokens: NonNullable<Report["tokens"]>): string[] {
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
  ];
  for (const t of [tokens.three, tokens.thirty]) {
    if (t.unlisted.length > 0) {
      lines.push(
        `Warning: with ${t.servers} servers, code-executor did not list: ${t.unlisted.join(", ")}`,
        "",
      );
    }
  }
  return lines;
}

function renderMarkdown(report: Report): string {
  const { latency, languages, tokens, targets } = report;
  return [
    `# Tool-call benchmark (${report.date})`,
    "",
    `Machine: ${machineText(report.machine)}`,
    "",
    `Command: \`${report.command}\``,
    "",
    ...(latency
      ? [
        `${report.options.calls} sequential \`echo\` calls (after ${report.options.warmup} warm-up ` +
        "calls on each path); code-executor calls are timed inside the sandbox around " +
        "`await callMCPTool(...)`, direct calls around `client.callTool(...)` in this process.",
        "",
        ...latencyLines(latency),
      ]
      : []),
    ...languageLines(languages, report.options),
    ...(tokens ? tokenLines(tokens) : []),
    row(["target", "goal", "measured", "status"]),
    row(["---", "---:", "---:", "---"]),
    ...Object.entries(targets).map(([name, t]) => row([name, t.goal, t.actual, status(t.met)])),
    "",
  ].join("\n");
}

async function measure(
  options: Report["options"],
  onlyLanguages: boolean,
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
        tools: {
          maxCallsPerExecution: Math.max(1_000, options.calls, options.warmup, options.langCalls),
        },
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
  if (onlyLanguages) {
    const languages = await measureLanguages(executor.client, options, timeoutMs);
    await executor.close();
    return { latency: null, languages, tokens: null };
  }
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
  const languages = await measureLanguages(executor.client, options, timeoutMs);

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
    languages,
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
    "Usage: deno run -A bench/tool_calls.ts [--calls N] [--warmup N] [--lang-calls N] " +
      "[--lang-rounds N] [--only-lang] [--json]",
    {
      calls: { fallback: 1_000 },
      warmup: { fallback: 1_000 },
      langCalls: { fallback: 100 },
      langRounds: { fallback: 3 },
    },
    ["only-lang"],
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
    const measured = await measure(options, parsed.flags.has("only-lang"), work, cleanup);
    const report: Report = {
      date: new Date().toISOString(),
      machine: await machineReport(loadBefore),
      command: ["deno run -A bench/tool_calls.ts", ...args].join(" "),
      options,
      ...measured,
      targets: targets(measured),
    };
    printReport(parsed.json, report, renderMarkdown);
  } finally {
    await cleanup.run();
    for (const signal of ["SIGINT", "SIGTERM"] as const) {
      Deno.removeSignalListener(signal, onSignal);
    }
  }
}

function targets(
  { latency, languages, tokens }: Pick<Report, "latency" | "languages" | "tokens">,
): Report["targets"] {
  const all: Report["targets"] = {
    [`Python tool call ≤ ${TARGETS.pythonToTypescript}× TypeScript's (median per call)`]: {
      goal: `≤ ${round(TARGETS.pythonToTypescript * languages.typescript.medianMs, 3)} ms`,
      actual: `${languages.python.medianMs} ms (${languages.ratio}×)`,
      met: languages.ratio <= TARGETS.pythonToTypescript,
    },
  };
  if (latency) {
    all["overhead per call, median"] = {
      goal: `≤ ${TARGETS.overheadMedianMs} ms`,
      actual: `${latency.overheadMedianMs} ms`,
      met: latency.overheadMedianMs <= TARGETS.overheadMedianMs,
    };
  }
  if (tokens) {
    all["our tools/list, 3 servers"] = {
      goal: `≤ ${TARGETS.ours3Tokens} tokens`,
      actual: `${tokens.three.ours} tokens`,
      met: tokens.three.ours <= TARGETS.ours3Tokens,
    };
    all["growth per extra server"] = {
      goal: `≤ ${TARGETS.growthPerServerTokens} tokens`,
      actual: `${tokens.growthPerServer} tokens`,
      met: tokens.growthPerServer <= TARGETS.growthPerServerTokens,
    };
    all["saved, 3 servers"] = {
      goal: `≥ ${TARGETS.saved3Pct}%`,
      actual: `${tokens.three.savedPct}%`,
      met: tokens.three.savedPct >= TARGETS.saved3Pct,
    };
    all["saved, 30 servers"] = {
      goal: `≥ ${TARGETS.saved30Pct}%`,
      actual: `${tokens.thirty.savedPct}%`,
      met: tokens.thirty.savedPct >= TARGETS.saved30Pct,
    };
  }
  return all;
}

if (import.meta.main) await runBench(main);
