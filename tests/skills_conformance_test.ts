/**
 * The conformance suite's skills scenarios (SEP-2640, `sep-2640-skills-*`, server side) against
 * `serve --http` with a seeded skills directory, at both revisions. The suite's `--requirements`
 * runs do not include extension scenarios, so each is run by name. Every check must pass, except
 * the ones the suite itself skips as not applicable (`resources/directory/read`, which is optional
 * and not offered; caching attributes before 2026-07-28), and docs/CONFORMANCE.md's skills table
 * must say what the run gave.
 *
 * @module
 */
import { join } from "node:path";
import { SettingsSchema } from "../src/config/settings.ts";
import { SkillStore } from "../src/skills/store.ts";
import { assert, assertEquals } from "./_assert.ts";
import { CONFORMANCE } from "./_pins.ts";
import { homeEnv, ROOT } from "./_env.ts";
import { assertNoSandboxes } from "./_proc.ts";
import { describeRun, runCommand } from "./_command.ts";
import { withTempDir } from "./_fs.ts";
import { startHttpServer } from "./_http_server.ts";

const SCENARIOS = [
  "sep-2640-skills-enumeration",
  "sep-2640-skills-manifest",
  "sep-2640-skills-directory",
];
const REVISIONS = ["2025-11-25", "2026-07-28"];

interface Check {
  id: string;
  status: string;
  errorMessage?: string;
}

async function seed(home: string, projectDir: string): Promise<void> {
  const store = new SkillStore(SettingsSchema.parse({ skills: { projectDir } }).skills, {
    env: { HOME: home },
  });
  await store.save({
    name: "add-numbers",
    description: "Adds two numbers",
    language: "typescript",
    inputSchema: { type: "object", properties: { a: { type: "number" }, b: { type: "number" } } },
    code: "return args.a + args.b;",
  });
  await store.save({
    name: "add-numbers",
    description: "Adds two numbers, version 2",
    language: "typescript",
    code: "return args.a + args.b + 0;",
  });
  await store.save({
    name: "shout",
    description: "Upper-cases a text: use it for headings",
    language: "python",
    inputSchema: { type: "object", properties: { text: { type: "string" } } },
    code: "args['text'].upper()",
  });
}

/**
 * The checks the suite may skip: all of `sep-2640-skills-directory` (no `directoryRead`), and the
 * caching attributes before 2026-07-28 (defined from that revision).
 */
function skipAllowed(scenario: string, check: string, revision: string): boolean {
  if (scenario === "sep-2640-skills-directory") return true;
  return revision < "2026-07-28" && check.endsWith("-cache-attributes");
}

async function documentedRows(): Promise<string[]> {
  const doc = await Deno.readTextFile(join(ROOT, "docs", "CONFORMANCE.md"));
  return [
    ...doc.matchAll(/^\| `(sep-2640-[\w-]+)` +\| (\S+) +\| (\d+) passed, (\d+) skipped +\|/gm),
  ]
    .map((m) => `${m[1]} ${m[2]}: ${m[3]} passed, ${m[4]} skipped`).sort();
}

Deno.test("serve --http passes the conformance suite's skills scenarios (sep-2640-skills-*)", async () => {
  await withTempDir("ce-skills-conformance-", async (tempDir) => {
    const home = join(tempDir, "home");
    const projectDir = join(tempDir, "project-skills");
    await Deno.mkdir(home);
    await seed(home, projectDir);
    const env = homeEnv(home, { sharedCache: true });
    const server = await startHttpServer({
      tempDir,
      home,
      sharedCache: true,
      settings: { skills: { projectDir } },
    });
    const rows: string[] = [];
    const failures: string[] = [];
    try {
      for (const revision of REVISIONS) {
        for (const scenario of SCENARIOS) {
          const outDir = join(tempDir, `results-${revision}-${scenario}`);
          const run = await runCommand(Deno.execPath(), [
            "run",
            "-A",
            "--no-config",
            CONFORMANCE,
            "server",
            "--url",
            server.url.href,
            "--scenario",
            scenario,
            "--spec-version",
            revision,
            // Extension scenarios are "not on the spec timeline"; run them at 2025-11-25 too.
            "--force",
            "-o",
            outDir,
          ], { cwd: tempDir, env, clearEnv: true, timeoutMs: 300_000 });
          const dirs = [...Deno.readDirSync(outDir)].filter((e) => e.isDirectory);
          assertEquals(dirs.length, 1, `${scenario} at ${revision}: ${describeRun(run)}`);
          const checks: Check[] = JSON.parse(
            await Deno.readTextFile(join(outDir, dirs[0].name, "checks.json")),
          );
          const bad = checks.filter((c) => c.status !== "SUCCESS" && c.status !== "SKIPPED");
          failures.push(
            ...bad.map((c) => `${revision} ${scenario}:${c.id} ${c.status} ${c.errorMessage}`),
          );
          const skipped = checks.filter((c) => c.status === "SKIPPED");
          failures.push(
            ...skipped.filter((c) => !skipAllowed(scenario, c.id, revision))
              .map((c) => `${revision} ${scenario}:${c.id} SKIPPED`),
          );
          assertEquals(run.code, 0, `${scenario} at ${revision}: ${describeRun(run)}`);
          const passed = checks.filter((c) => c.status === "SUCCESS").length;
          rows.push(`${scenario} ${revision}: ${passed} passed, ${skipped.length} skipped`);
        }
      }
    } finally {
      const status = await server.close();
      assert(status?.success, `serve --http did not exit cleanly:\n${server.stderr()}`);
    }
    await assertNoSandboxes(tempDir);
    assertEquals(failures, [], `skills checks that did not pass:\n${failures.join("\n")}`);
    assertEquals(
      rows.sort(),
      await documentedRows(),
      `docs/CONFORMANCE.md's skills table is out of date; this run gave:\n${rows.join("\n")}`,
    );
  });
});
