/**
 * The MCP conformance suite ({@linkcode CONFORMANCE}, run under Deno) against `serve --http`
 * without auth on 127.0.0.1, at both revisions it has requirement sets for: 2025-11-25
 * (initialize, sessions, streams) and 2026-07-28 (stateless requests).
 *
 * Every scenario that runs must pass, unless `tests/conformance/expected-failures.<revision>.yaml`
 * lists it, or one of its checks, with a reason; a listed entry that does not fail is stale and
 * fails the test too. The suite's own exit code (also checked) covers only the scenarios it scores
 * at that revision, so this test applies the rule itself to every scenario that ran, the unscored
 * ones included (server-session-lifecycle, http-header-validation, ...). It also checks that
 * `docs/CONFORMANCE.md` records the results as they are.
 *
 * @module
 */
import { join } from "node:path";
import { assert, assertEquals } from "./_assert.ts";
import { CONFORMANCE } from "./_pins.ts";
import { homeEnv, ROOT } from "./_env.ts";
import { assertNoSandboxes } from "./_proc.ts";
import { type CommandRun, describeRun, runCommand } from "./_command.ts";
import { withTempDir } from "./_fs.ts";
import { startHttpServer } from "./_http_server.ts";

type Revision = "2025-11-25" | "2026-07-28";

/** Generous: a first run may download the suite from npm, and the machine is shared. */
const SUITE_TIMEOUT_MS = 600_000;

/**
 * Scenarios named by issue #11 and every other protocol scenario this server passes: none may
 * ever be listed as an expected failure (server-stateless only for its fixture checks).
 */
const MUST_PASS: Record<Revision, string[]> = {
  "2025-11-25": [
    "server-initialize",
    "server-session-lifecycle",
    "ping",
    "logging-set-level",
    "tools-list",
    "server-sse-multiple-streams",
    "resources-list",
    "prompts-list",
    "dns-rebinding-protection",
  ],
  "2026-07-28": [
    "server-stateless",
    "tools-list",
    "server-sse-multiple-streams",
    "resources-list",
    "prompts-list",
    "sep-2164-resource-not-found",
    "dns-rebinding-protection",
    "caching",
    "input-required-result-unsupported-methods",
    "input-required-result-validate-input",
    "http-header-validation",
    "http-custom-header-server-validation",
  ],
};

/** One check of a scenario, as the suite writes it to `checks.json`. */
interface Check {
  id: string;
  status: "SUCCESS" | "FAILURE" | "WARNING" | "INFO" | "SKIPPED";
  errorMessage?: string;
}

/** An expected failure: a whole scenario, or one check of it, and why. */
interface BaselineEntry {
  scenario: string;
  check?: string;
  reason: string;
}

/** What became of one scenario. */
interface Outcome {
  scenario: string;
  /** `yes`, or why the suite does not score it at this revision (`extension`, `pending`, …). */
  scored: string;
  /**
   * `pass`, `expected failure`, `expected failure of N of M checks` (per-check entries), or
   * `skipped by the suite` (it ran no check it could judge).
   */
  result: string;
  /** Failures and warnings that no baseline entry covers. */
  unexpected: string[];
  /** Baseline entries of this scenario that did not fail. */
  stale: string[];
}

function baselinePath(revision: Revision): string {
  return join(ROOT, "tests", "conformance", `expected-failures.${revision}.yaml`);
}

/**
 * Reads an expected-failures file: `  - scenario # reason` or `  - scenario:check-id # reason`
 * under `server:`. The suite parses the same file as YAML; its exit code shows if the two differ.
 */
async function readBaseline(revision: Revision): Promise<BaselineEntry[]> {
  const entries: BaselineEntry[] = [];
  for (const line of (await Deno.readTextFile(baselinePath(revision))).split("\n")) {
    const match = /^\s+-\s+([^\s#]+)\s*(?:#\s*(.*))?$/.exec(line);
    if (!match) continue;
    const [name, reason = ""] = [match[1], match[2]?.trim()];
    const colon = name.indexOf(":");
    entries.push(
      colon === -1
        ? { scenario: name, reason }
        : { scenario: name.slice(0, colon), check: name.slice(colon + 1), reason },
    );
  }
  return entries;
}

/** Applies the baseline to one scenario's checks, as the suite does, and stricter: a listed check
 * that no longer fails (or no longer exists) is stale. */
function judge(scenario: string, checks: Check[], baseline: BaselineEntry[], scored: string) {
  const bad = checks.filter((c) => c.status === "FAILURE" || c.status === "WARNING");
  const describe = (c: Check) =>
    `${scenario}:${c.id} (${c.status}${c.errorMessage ? `: ${c.errorMessage}` : ""})`;
  const outcome: Outcome = { scenario, scored, result: "pass", unexpected: [], stale: [] };
  const mine = baseline.filter((e) => e.scenario === scenario);
  if (mine.some((e) => e.check === undefined)) {
    if (bad.length > 0) outcome.result = "expected failure";
    else outcome.stale.push(scenario);
    return outcome;
  }
  const scoredChecks = checks.filter((c) => c.status !== "INFO" && c.status !== "SKIPPED");
  if (scoredChecks.length === 0 && mine.length === 0) outcome.result = "skipped by the suite";
  const listed = new Set(mine.map((e) => e.check));
  outcome.unexpected = bad.filter((c) => !listed.has(c.id)).map(describe);
  outcome.stale = mine.filter((e) => !bad.some((c) => c.id === e.check))
    .map((e) => `${scenario}:${e.check}`);
  if (mine.length > 0) {
    outcome.result = `expected failure of ${mine.length} of ${scoredChecks.length} checks`;
  }
  return outcome;
}

/**
 * The scenarios the suite runs at a revision, and which of them it does not score (with the
 * reason), from `conformance list --server --requirements <revision>`.
 */
async function requirementSet(
  revision: Revision,
  env: Record<string, string>,
  cwd: string,
): Promise<Map<string, string>> {
  const run = await runCommand(
    Deno.execPath(),
    ["run", "-A", "--no-config", CONFORMANCE, "list", "--server", "--requirements", revision],
    { cwd, env, clearEnv: true, timeoutMs: SUITE_TIMEOUT_MS },
  );
  assertEquals(run.code, 0, `conformance list failed: ${describeRun(run)}`);
  const scored = new Map<string, string>();
  let section: "scored" | "not-scored" | undefined;
  let reason = "";
  for (const line of run.stdout.split("\n")) {
    if (/^Server scenarios/.test(line)) section = "scored";
    else if (/^Client scenarios/.test(line)) section = undefined;
    else if (/^Run and reported, but never scored/.test(line)) section = "not-scored";
    const reasonHeader = /^\s{2}(\S+) \(\d+\):$/.exec(line);
    if (section === "not-scored" && reasonHeader) reason = reasonHeader[1];
    const item = /^\s+- (\S+)(?: \[(\w+)\])?$/.exec(line);
    if (!item) continue;
    if (section === "scored") scored.set(item[1], "yes");
    if (section === "not-scored" && item[2] === "server") scored.set(item[1], reason);
  }
  assert(scored.size > 0, `conformance list named no server scenario: ${describeRun(run)}`);
  return scored;
}

/**
 * Reads the suite's results directory: one `server-<scenario>-<time>/checks.json` per scenario.
 */
async function readResults(outDir: string): Promise<Map<string, Check[]>> {
  const results = new Map<string, Check[]>();
  for await (const entry of Deno.readDir(outDir)) {
    if (!entry.isDirectory) continue;
    const scenario = entry.name.replace(/^server-/, "").replace(
      /-\d{4}-\d{2}-\d{2}T[\d-]+Z$/,
      "",
    );
    const checks = JSON.parse(await Deno.readTextFile(join(outDir, entry.name, "checks.json")));
    results.set(scenario, checks);
  }
  return results;
}

/** The rows of docs/CONFORMANCE.md's table for a revision: scenario → `scored | result`. */
async function documentedRows(revision: Revision): Promise<Map<string, string>> {
  const doc = await Deno.readTextFile(join(ROOT, "docs", "CONFORMANCE.md"));
  const start = doc.indexOf(`\n## Results at ${revision}`);
  assert(start !== -1, `docs/CONFORMANCE.md has no "## Results at ${revision}" section`);
  const end = doc.indexOf("\n## ", start + 1);
  const section = doc.slice(start, end === -1 ? undefined : end);
  const rows = new Map<string, string>();
  for (const match of section.matchAll(/^\| `([^`]+)` +\| ([^|]+?) +\| ([^|]+?) +\|/gm)) {
    rows.set(match[1], `${match[2]} | ${match[3]}`);
  }
  return rows;
}

function renderRows(outcomes: Outcome[], baseline: BaselineEntry[]): string {
  return outcomes.map((o) => {
    const why = baseline.filter((e) => e.scenario === o.scenario)
      .map((e) => e.check ? `${e.check}: ${e.reason}` : e.reason).join("; ");
    return `| \`${o.scenario}\` | ${o.scored} | ${o.result} | ${why} |`;
  }).join("\n");
}

async function conform(revision: Revision): Promise<void> {
  await withTempDir("ce-conformance-", async (tempDir) => {
    const home = join(tempDir, "home");
    const outDir = join(tempDir, "results");
    await Deno.mkdir(home);
    const env = homeEnv(home, { sharedCache: true });
    const baseline = await readBaseline(revision);
    for (const entry of baseline) {
      assert(entry.reason !== "", `${baselinePath(revision)}: "${entry.scenario}" has no reason`);
    }
    const scoring = await requirementSet(revision, env, tempDir);

    const server = await startHttpServer({
      tempDir,
      home,
      sharedCache: true,
    });
    let run: CommandRun;
    try {
      run = await runCommand(Deno.execPath(), [
        "run",
        "-A",
        "--no-config",
        CONFORMANCE,
        "server",
        "--url",
        server.url.href,
        "--requirements",
        revision,
        "--expected-failures",
        baselinePath(revision),
        "-o",
        outDir,
      ], { cwd: tempDir, env, clearEnv: true, timeoutMs: SUITE_TIMEOUT_MS });
    } finally {
      const status = await server.close();
      assert(status?.success, `serve --http did not exit cleanly:\n${server.stderr()}`);
    }
    await assertNoSandboxes(tempDir);
    const context = `${describeRun(run)}\nserver stderr:\n${server.stderr().slice(-20_000)}`;

    const results = await readResults(outDir);
    const announced = /Running requirements \S+ \((\d+) scenarios\)/.exec(run.stdout);
    assert(announced, `the suite did not say what it runs: ${context}`);
    assertEquals(results.size, Number(announced[1]), `scenarios without results: ${context}`);

    const outcomes = [...results].map(([scenario, checks]) =>
      judge(scenario, checks, baseline, scoring.get(scenario) ?? "not listed")
    ).sort((a, b) => a.scenario.localeCompare(b.scenario));
    const unexpected = outcomes.flatMap((o) => o.unexpected);
    const stale = outcomes.flatMap((o) => o.stale);
    for (const entry of baseline) {
      if (!results.has(entry.scenario)) stale.push(`${entry.scenario} (not run)`);
    }
    assertEquals(unexpected, [], `unexpected failures at ${revision}:\n${unexpected.join("\n")}`);
    assertEquals(stale, [], `stale entries in ${baselinePath(revision)}: ${stale.join(", ")}`);
    assertEquals(run.code, 0, `the suite failed at ${revision}: ${context}`);

    for (const scenario of MUST_PASS[revision]) {
      const outcome = outcomes.find((o) => o.scenario === scenario);
      assert(outcome, `${scenario} did not run at ${revision}`);
      // Per-check entries are allowed (server-stateless's fixture checks); the rest of the
      // scenario passed, or `unexpected` above would say otherwise.
      assert(
        outcome.result !== "expected failure",
        `${scenario} must pass at ${revision}, yet the baseline lists all of it`,
      );
    }
    const documented = await documentedRows(revision);
    const actual = new Map(outcomes.map((o) => [o.scenario, `${o.scored} | ${o.result}`]));
    assertEquals(
      [...actual].sort(),
      [...documented].sort(),
      `docs/CONFORMANCE.md is out of date for ${revision}; this run gave:\n${
        renderRows(outcomes, baseline)
      }`,
    );
  });
}

Deno.test("serve --http passes the conformance suite at 2025-11-25 (expected failures: fixtures only)", async () => {
  await conform("2025-11-25");
});

Deno.test("serve --http passes the conformance suite at 2026-07-28 (expected failures: fixtures only)", async () => {
  await conform("2026-07-28");
});
