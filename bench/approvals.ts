/**
 * What approvals cost the calls that need none: a `run_typescript` run of `--calls` read-only
 * upstream calls (server-everything's `echo` and server-memory's `search_nodes`, both annotated
 * `readOnlyHint: true`) with `approvals.mode` `ask` (the default, with a `require` and a `waive`
 * glob that do not match, so that every call is checked against all of them) against `off`.
 *
 * Two code-executor servers run side by side, one per mode, each with its own upstream servers;
 * after a warm-up run on each, `--rounds` rounds alternate between them (which goes first
 * alternates too), so that drift in machine load falls on both. Each run times its calls with
 * `performance.now()` inside the sandbox; the ratio is of the medians (ask / off).
 *
 * The end-to-end medians move with the machine's load; the gate's own cost on a call that needs
 * no approval (`ApprovalGate.check`, in this process, on the same tools) is measured too.
 *
 * ```sh
 * deno run -A bench/approvals.ts [--calls 200] [--rounds 15] [--json]
 * ```
 *
 * @module
 */
import { join } from "node:path";
import { ratio, round, runPaired, type Stats, stats } from "./_stats.ts";
import { type MachineReport, machineReport, machineText } from "./_machine.ts";
import { connectCodeExecutor, type StdioServer } from "./_server.ts";
import { type BenchStart, log, printReport, row, runBenchWithOptions } from "./_report.ts";
import { EVERYTHING, MEMORY } from "../tests/_pins.ts";
import { homeEnv, writeSettings } from "../tests/_env.ts";
import { THIRD_PARTY_CONFIG } from "../tests/_third_party.ts";
import { ApprovalGate } from "../src/exec/requests/approvals.ts";
import { ApprovalPolicy } from "../src/policy/approvals.ts";

const OPTIONS = { calls: { fallback: 200 }, rounds: { fallback: 15 } };
const MODES = ["off", "ask"] as const;
type Mode = typeof MODES[number];

interface Report {
  calls: number;
  rounds: number;
  /** In-sandbox time of the whole run of calls, ms. */
  runMs: Record<Mode, Stats>;
  /** Median ask / median off. */
  ratio: number;
  /** `ApprovalGate.check` on a read-only call, in this process, µs per call. */
  gateMicros: number;
  machine: MachineReport;
}

async function startServer(work: string, mode: Mode): Promise<StdioServer> {
  const dir = join(work, mode);
  await Deno.mkdir(join(dir, "tmp"), { recursive: true });
  const mcpConfig = join(dir, "mcp.json");
  const run = (pkg: string, env: Record<string, string> = {}) => ({
    command: Deno.execPath(),
    args: ["run", "-A", "--config", THIRD_PARTY_CONFIG, pkg],
    env,
  });
  await Deno.writeTextFile(
    mcpConfig,
    JSON.stringify({
      mcpServers: {
        everything: run(EVERYTHING),
        memory: run(MEMORY, { MEMORY_FILE_PATH: join(dir, "memory.jsonl") }),
      },
    }),
  );
  const settings = await writeSettings(dir, {
    approvals: { mode, require: ["mcp__github__delete_*"], waive: ["mcp__memory__create_*"] },
    audit: { enabled: false },
  });
  return await connectCodeExecutor(`code-executor (approvals ${mode})`, {
    mcpConfig,
    env: {
      ...homeEnv(join(dir, "home")),
      TMPDIR: join(dir, "tmp"),
      CODE_EXECUTOR_CONFIG: settings,
      CODE_EXECUTOR_LOG_LEVEL: "warn",
    },
  });
}

function callsCode(calls: number): string {
  return `
    const started = performance.now();
    for (let i = 0; i < ${calls}; i++) {
      if (i % 2 === 0) await callMCPTool("mcp__everything__echo", { message: "x" + i });
      else await callMCPTool("mcp__memory__search_nodes", { query: "x" });
    }
    return performance.now() - started;`;
}

/** Times the gate on read-only calls: what approvals add to each call that needs none. */
async function gateMicros(): Promise<number> {
  const gate = new ApprovalGate({
    policy: new ApprovalPolicy({
      mode: "ask",
      require: ["mcp__github__delete_*"],
      waive: ["mcp__memory__create_*"],
      timeoutMs: 1000,
    }),
    approver: { decide: () => Promise.reject(new Error("a read-only call was asked about")) },
    principal: "local",
    executionId: "bench",
    signal: new AbortController().signal,
  });
  const tools = [
    {
      server: "everything",
      fullName: "mcp__everything__echo",
      annotations: { readOnlyHint: true },
    },
    {
      server: "memory",
      fullName: "mcp__memory__search_nodes",
      annotations: { readOnlyHint: true },
    },
  ];
  const n = 200_000;
  for (let i = 0; i < 10_000; i++) await gate.check(tools[i % 2], { message: "x" });
  const started = performance.now();
  for (let i = 0; i < n; i++) await gate.check(tools[i % 2], { message: "x" });
  return round(((performance.now() - started) * 1000) / n, 3);
}

async function timedCalls(server: StdioServer, calls: number): Promise<number> {
  const result = await server.client.callTool({
    name: "run_typescript",
    arguments: { code: callsCode(calls), timeoutMs: 120_000 },
  });
  const outcome = result.structuredContent as {
    ok?: boolean;
    returnValue?: unknown;
    error?: unknown;
  };
  if (result.isError || outcome.ok !== true || typeof outcome.returnValue !== "number") {
    throw new Error(
      `The run failed: ${JSON.stringify(outcome.error ?? result)}\n${server.stderr()}`,
    );
  }
  return outcome.returnValue;
}

function render(report: Report): string {
  return [
    `## Approvals: ${report.calls} read-only calls in one run, approvals ask vs off`,
    "",
    row(["mode", "median ms", "p95 ms", "min ms", "max ms", "runs"]),
    row(["---", "---:", "---:", "---:", "---:", "---:"]),
    ...MODES.map((mode) => {
      const s = report.runMs[mode];
      return row([mode, s.medianMs, s.p95Ms, s.minMs, s.maxMs, s.n]);
    }),
    "",
    `Ratio (median ask / median off): **${report.ratio}**; the gate itself on a read-only call: ${report.gateMicros} µs`,
    "",
    machineText(report.machine),
  ].join("\n");
}

async function main(
  { ints: { calls, rounds }, json, loadBefore }: BenchStart<keyof typeof OPTIONS>,
): Promise<void> {
  const work = await Deno.makeTempDir({ prefix: "ce-bench-approvals-" });
  const servers: Partial<Record<Mode, StdioServer>> = {};
  try {
    for (const mode of MODES) servers[mode] = await startServer(work, mode);
    for (const mode of MODES) {
      log(`warm-up (${mode})`);
      await timedCalls(servers[mode]!, calls);
    }
    const samples = await runPaired({
      arms: MODES,
      rounds,
      sample: (mode) => timedCalls(servers[mode]!, calls),
      onRound: (i, ms) =>
        log(
          `round ${i + 1}/${rounds}: off ${ms.off.toFixed(1)} ms, ask ${ms.ask.toFixed(1)} ms`,
        ),
    });
    const runMs = { off: stats(samples.off), ask: stats(samples.ask) };
    const report: Report = {
      calls,
      rounds,
      runMs,
      ratio: ratio(runMs.ask.medianMs, runMs.off.medianMs),
      gateMicros: await gateMicros(),
      machine: await machineReport(loadBefore),
    };
    printReport(json, report, render);
  } finally {
    for (const server of Object.values(servers)) await server?.close();
    await Deno.remove(work, { recursive: true }).catch(() => {});
  }
}

if (import.meta.main) await runBenchWithOptions("bench/approvals.ts", OPTIONS, main);
