/**
 * Finding one saved skill among 100 with `search_tools` (issue #14: under 5 ms in the server).
 *
 * 1. Server side: `searchToolsText`, the function the `search_tools` handler runs, over a real
 *    `SkillStore` of 100 skills on disk (99 fillers and `add-numbers`), no upstream server:
 *    - `cached`: the store's `list()` answers from memory (it looks at the directories again at
 *      most once a second, `listCacheMs`), as in a server that is searched repeatedly;
 *    - `checked`: `listCacheMs: 0`, every search lists the directories and `lstat`s each skill's
 *      files (a record is parsed again only when a file changed), what a search costs right
 *      after the second has passed;
 *    - `fresh`: a new store per search, which reads and parses all 200 files (a server's first
 *      search).
 * 2. Round trip: `search_tools` through a real SDK client over stdio to `main.ts serve`, for
 *    context (JSON-RPC, transport and the client included).
 * 3. `tools/list` tokens (o200k) of that server with 0 and with 100 saved skills.
 *
 * ```sh
 * deno run -A bench/skills.ts [--iterations 200] [--warmup 50] [--json]
 * ```
 *
 * @module
 */
import { join } from "node:path";
import { repeat, type Stats, stats } from "./_stats.ts";
import { loadAverage, machineReport, machineText } from "./_machine.ts";
import { connectCodeExecutor } from "./_server.ts";
import { log, parseBenchArgs, printReport, row, runBench, status, tokensOf } from "./_report.ts";
import { SettingsSchema } from "../src/config/settings.ts";
import { SkillStore } from "../src/skills/store.ts";
import { ToolPolicy } from "../src/policy/tool_policy.ts";
import { searchToolsText } from "../src/server/server.ts";
import { ADD } from "../tests/_skills.ts";

const QUERY = "add numbers";

async function seed(store: SkillStore): Promise<void> {
  for (let i = 0; i < 99; i++) {
    await store.save({
      name: `report-${i}`,
      description: `Builds weekly report number ${i} from the issue tracker and the sheet`,
      language: i % 2 === 0 ? "typescript" : "python",
      inputSchema: {
        type: "object",
        properties: { week: { type: "integer" }, team: { type: "string" } },
        required: ["week"],
      },
      code: i % 2 === 0 ? "return args.week;" : "args['week']",
    });
  }
  await store.save(ADD);
}

async function serverSide(
  dirs: { home: string; projectDir: string },
  mode: "cached" | "checked" | "fresh",
  counts: { iterations: number; warmup: number },
): Promise<Stats> {
  const settings = SettingsSchema.parse({ skills: { projectDir: dirs.projectDir } });
  const open = () =>
    new SkillStore(settings.skills, {
      env: { HOME: dirs.home },
      listCacheMs: mode === "cached" ? 1_000 : 0,
    });
  let store = open();
  const policy = new ToolPolicy(settings.tools);
  const samples = await repeat(counts, async () => {
    if (mode === "fresh") store = open();
    const started = performance.now();
    const text = await searchToolsText(
      { policy, skills: () => store.list() },
      QUERY,
      10,
      "signatures",
    );
    const ms = performance.now() - started;
    if (!text.includes("skill:add-numbers@1")) throw new Error(`not found: ${text}`);
    return ms;
  });
  return stats(samples, 3);
}

async function overStdio(
  env: Record<string, string>,
  counts: { iterations: number; warmup: number },
): Promise<{ roundTrip?: Stats; toolsListTokens: number }> {
  const server = await connectCodeExecutor("code-executor", { env });
  try {
    const toolsListTokens = tokensOf((await server.client.listTools()).tools);
    if (counts.iterations === 0) return { toolsListTokens };
    const samples = await repeat(counts, async () => {
      const started = performance.now();
      await server.client.callTool({ name: "search_tools", arguments: { query: QUERY } });
      return performance.now() - started;
    });
    return { roundTrip: stats(samples, 3), toolsListTokens };
  } finally {
    await server.close();
  }
}

runBench(async (args) => {
  const parsed = parseBenchArgs(
    args,
    "deno run -A bench/skills.ts [--iterations 200] [--warmup 50] [--json]",
    {
      iterations: { fallback: 200, min: 1 },
      warmup: { fallback: 50, min: 0 },
    },
  );
  if (!parsed) return;
  const counts = { iterations: parsed.ints.iterations, warmup: parsed.ints.warmup };
  const loadBefore = await loadAverage();
  const root = await Deno.makeTempDir({ prefix: "bench-skills-" });
  try {
    const home = join(root, "home");
    const projectDir = join(root, "project-skills");
    await Deno.mkdir(home);
    const settingsFile = join(root, "settings.json");
    await Deno.writeTextFile(settingsFile, JSON.stringify({ skills: { projectDir } }));
    const env = {
      PATH: Deno.env.get("PATH") ?? "",
      HOME: home,
      DENO_DIR: Deno.env.get("DENO_DIR") ?? join(Deno.env.get("HOME") ?? "", ".cache", "deno"),
      XDG_CACHE_HOME: Deno.env.get("XDG_CACHE_HOME") ??
        join(Deno.env.get("HOME") ?? "", ".cache"),
      TMPDIR: root,
      CODE_EXECUTOR_CONFIG: settingsFile,
      CODE_EXECUTOR_WARM_POOL: "0",
      CODE_EXECUTOR_PYTHON_WARM_POOL: "0",
      AUDIT_LOG_PATH: join(root, "audit.jsonl"),
    };
    log("tools/list with 0 skills");
    const empty = await overStdio(env, { iterations: 0, warmup: 0 });
    log("seeding 100 skills");
    await seed(
      new SkillStore(SettingsSchema.parse({ skills: { projectDir } }).skills, {
        env: { HOME: home },
      }),
    );
    log("server side, list cached");
    const cached = await serverSide({ home, projectDir }, "cached", counts);
    log("server side, files checked");
    const checked = await serverSide({ home, projectDir }, "checked", counts);
    log("server side, fresh store");
    const fresh = await serverSide({ home, projectDir }, "fresh", counts);
    log("round trip over stdio");
    const full = await overStdio(env, counts);
    const report = {
      machine: await machineReport(loadBefore),
      query: QUERY,
      skills: 100,
      serverSide: { cached, checked, fresh },
      roundTrip: full.roundTrip,
      toolsListTokens: { zeroSkills: empty.toolsListTokens, hundredSkills: full.toolsListTokens },
    };
    printReport(parsed.json, report, (r) =>
      [
        machineText(r.machine),
        "",
        `Finding "add-numbers" among ${r.skills} saved skills with search_tools ("${r.query}"), ` +
        `${counts.iterations} searches after ${counts.warmup} warm-up ones:`,
        "",
        row(["measure", "median ms", "p95 ms", "min ms", "max ms", "goal < 5 ms"]),
        row(["---", "---", "---", "---", "---", "---"]),
        ...([
          ["server side, list cached (steady state)", r.serverSide.cached, true],
          ["server side, files checked (each second)", r.serverSide.checked, false],
          ["server side, fresh store (first search)", r.serverSide.fresh, false],
        ] as const).map(([what, s, goal]) =>
          row([what, s.medianMs, s.p95Ms, s.minMs, s.maxMs, status(goal ? s.medianMs < 5 : null)])
        ),
        row([
          "round trip over stdio (client)",
          r.roundTrip?.medianMs,
          r.roundTrip?.p95Ms,
          r.roundTrip?.minMs,
          r.roundTrip?.maxMs,
          status(null),
        ]),
        "",
        `tools/list: ${r.toolsListTokens.zeroSkills} tokens with 0 skills, ` +
        `${r.toolsListTokens.hundredSkills} with 100 (o200k)`,
      ].join("\n"));
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});
