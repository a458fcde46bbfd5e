/**
 * What calling a saved skill costs, timed inside the sandbox (`performance.now()` around the
 * calls, so the MCP round trip of the run itself is not in it): a skill in the caller's language
 * (the host checks the arguments and sends the body back; the child imports or compiles it and
 * runs it) against the same body as a local function and against a bare host round trip
 * (`readOutput` of an unknown id, refused at once), and a skill in the other language (a nested run: a child of that language
 * leased, run and disposed).
 *
 * One server on stdio with the default settings (warm pools on), its skills directories in a temp
 * directory; `--rounds` runs per case, each of `--calls` calls (nested: a tenth of them, at least
 * 3); the medians of the per-call times are reported.
 *
 * ```sh
 * deno run -A bench/skills_call.ts [--calls 50] [--rounds 5] [--json]
 * ```
 *
 * @module
 */
import { join } from "node:path";
import { type Stats, stats } from "./_stats.ts";
import { type MachineReport, machineReport, machineText } from "./_machine.ts";
import { connectCodeExecutor, type StdioServer } from "./_server.ts";
import { type BenchStart, log, printReport, row, runBenchWithOptions } from "./_report.ts";
import { homeEnv, writeSettings } from "../tests/_env.ts";

const OPTIONS = { calls: { fallback: 50 }, rounds: { fallback: 5 } };

interface Case {
  name: string;
  tool: "run_typescript" | "run_python";
  /** Code that returns the ms per call of `n` calls. */
  code(n: number): string;
  /** Whether it starts a nested run per call (fewer calls). */
  nested: boolean;
}

const TS_LOOP = (n: number, call: string) => `
  const add = async (args) => args.a + args.b;
  const roundTrip = () => readOutput("none").catch(() => 0);
  let sum = 0;
  await ${call.replace("$i", "0")};
  const started = performance.now();
  for (let i = 0; i < ${n}; i++) sum += await ${call.replace("$i", "i")};
  return (performance.now() - started) / ${n};`;

const PY_LOOP = (n: number, call: string) => `
import time
async def add(a, b):
    return a + b
async def round_trip():
    try:
        await read_output("none")
    except ToolCallError:
        pass
await ${call.replace("$i", "0")}
started = time.perf_counter()
for i in range(${n}):
    await ${call.replace("$i", "i")}
(time.perf_counter() - started) * 1000 / ${n}`;

const CASES: Case[] = [
  {
    name: "TypeScript: local function (baseline)",
    tool: "run_typescript",
    code: (n) => TS_LOOP(n, "add({ a: $i, b: 1 })"),
    nested: false,
  },
  {
    name: "TypeScript: a host round trip (readOutput, refused)",
    tool: "run_typescript",
    code: (n) => TS_LOOP(n, "roundTrip()"),
    nested: false,
  },
  {
    name: "TypeScript → TypeScript skill (in the caller's child)",
    tool: "run_typescript",
    code: (n) => TS_LOOP(n, "skills.add_ts({ a: $i, b: 1 })"),
    nested: false,
  },
  {
    name: "TypeScript → Python skill (nested run)",
    tool: "run_typescript",
    code: (n) => TS_LOOP(n, "skills.add_py({ a: $i, b: 1 })"),
    nested: true,
  },
  {
    name: "Python: local function (baseline)",
    tool: "run_python",
    code: (n) => PY_LOOP(n, "add(a=$i, b=1)"),
    nested: false,
  },
  {
    name: "Python: a host round trip (read_output, refused)",
    tool: "run_python",
    code: (n) => PY_LOOP(n, "round_trip()"),
    nested: false,
  },
  {
    name: "Python → Python skill (in the caller's child)",
    tool: "run_python",
    code: (n) => PY_LOOP(n, "skills.add_py(a=$i, b=1)"),
    nested: false,
  },
  {
    name: "Python → TypeScript skill (nested run)",
    tool: "run_python",
    code: (n) => PY_LOOP(n, "skills.add_ts(a=$i, b=1)"),
    nested: true,
  },
];

interface Report {
  calls: number;
  rounds: number;
  /** Per case: ms per call, over the rounds. */
  perCallMs: Record<string, Stats>;
  machine: MachineReport;
}

async function run(server: StdioServer, tool: string, code: string): Promise<unknown> {
  const result = await server.client.callTool({
    name: tool,
    arguments: { code, timeoutMs: 120_000 },
  });
  const outcome = result.structuredContent as {
    ok?: boolean;
    returnValue?: unknown;
    error?: unknown;
  };
  if (result.isError || outcome.ok !== true) {
    throw new Error(
      `The run failed: ${JSON.stringify(outcome.error ?? result)}\n${server.stderr()}`,
    );
  }
  return outcome.returnValue;
}

const SCHEMA = {
  type: "object",
  properties: { a: { type: "number" }, b: { type: "number" } },
  required: ["a", "b"],
};

async function saveSkills(server: StdioServer): Promise<void> {
  for (
    const [name, language, code] of [
      ["add-ts", "typescript", "return args.a + args.b;"],
      ["add-py", "python", 'args["a"] + args["b"]'],
    ]
  ) {
    await run(
      server,
      "run_typescript",
      `return await skills.save(${
        JSON.stringify({ name, language, code, description: "Adds", inputSchema: SCHEMA })
      });`,
    );
  }
}

function render(report: Report): string {
  return [
    `## Session 5: calling a skill, ${report.calls} calls per run (nested: a tenth), ${report.rounds} runs per case`,
    "",
    row(["case", "median ms per call", "min", "max", "runs"]),
    row(["---", "---:", "---:", "---:", "---:"]),
    ...CASES.map((c) => {
      const s = report.perCallMs[c.name];
      return row([c.name, s.medianMs, s.minMs, s.maxMs, s.n]);
    }),
    "",
    machineText(report.machine),
  ].join("\n");
}

async function main(
  { ints: { calls, rounds }, json, loadBefore }: BenchStart<keyof typeof OPTIONS>,
): Promise<void> {
  const work = await Deno.makeTempDir({ prefix: "ce-bench-skills-" });
  let server: StdioServer | undefined;
  try {
    const settings = await writeSettings(work, {
      skills: { projectDir: join(work, "project-skills"), userDir: join(work, "user-skills") },
      audit: { enabled: false },
    });
    await Deno.mkdir(join(work, "tmp"));
    server = await connectCodeExecutor("code-executor (skills)", {
      env: {
        ...homeEnv(join(work, "home"), { sharedCache: true }),
        TMPDIR: join(work, "tmp"),
        CODE_EXECUTOR_CONFIG: settings,
        CODE_EXECUTOR_LOG_LEVEL: "warn",
      },
    });
    await saveSkills(server);
    const perCall: Record<string, number[]> = {};
    for (const c of CASES) {
      const n = c.nested ? Math.max(3, Math.round(calls / 10)) : calls;
      log(`warm-up: ${c.name}`);
      await run(server, c.tool, c.code(n));
      perCall[c.name] = [];
      for (let round = 0; round < rounds; round++) {
        perCall[c.name].push(Number(await run(server, c.tool, c.code(n))));
      }
      log(`${c.name}: ${perCall[c.name].map((ms) => ms.toFixed(2)).join(", ")} ms per call`);
    }
    const report: Report = {
      calls,
      rounds,
      perCallMs: Object.fromEntries(
        Object.entries(perCall).map(([name, samples]) => [name, stats(samples, 3)]),
      ),
      machine: await machineReport(loadBefore),
    };
    printReport(json, report, render);
  } finally {
    await server?.close();
    await Deno.remove(work, { recursive: true });
  }
}

if (import.meta.main) await runBenchWithOptions("bench/skills_call.ts", OPTIONS, main);
