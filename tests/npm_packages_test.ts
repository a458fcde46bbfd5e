/**
 * npm packages in TypeScript (`sandbox.npmPackages`), end to end through a real client: a
 * spawned server (`deno task start`) with real packages from the npm registry, fetched at its
 * start into the children's cache. The packages work by name and by `npm:` specifier; nothing
 * else is importable (refused before the run, and by the child itself when the code computes
 * the specifier); a package's own code gets only the run's permissions; the child can neither
 * write the cache nor fetch into it.
 *
 * @module
 */
import { join } from "node:path";
import { assert, assertEquals, assertMatch, describeResult, type RunResult } from "./_assert.ts";
import { cacheHome } from "./_env.ts";
import { type ServerHarness, startServer } from "./_stdio_server.ts";

/** Real, small packages: two to use, one that reads files and one that reads the environment. */
const PACKAGES = [
  "csv-parse@7.0.3",
  "date-fns@4.4.0",
  "load-json-file@7.0.1",
  "dotenv@18.0.10",
];

/** The children's npm cache, under the cache the server under test shares with this process. */
const NPM_CACHE = join(cacheHome(), "code-executor", "deno-ts", "npm", "registry.npmjs.org");

function assertOk(result: RunResult, expected: unknown): void {
  assertEquals(result.isError, false, describeResult(result));
  assertEquals(result.returnValue, expected, describeResult(result));
}

function assertFails(result: RunResult, type: string, message: RegExp): void {
  assertEquals(result.isError, true, describeResult(result));
  assertEquals(result.error?.type, type, describeResult(result));
  assertMatch(result.error?.message ?? "", message, describeResult(result));
}

async function sha256(path: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", await Deno.readFile(path));
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

Deno.test("npm packages of sandbox.npmPackages: imported offline, nothing else, no more rights than the run", async (t) => {
  const project = await Deno.realPath(await Deno.makeTempDir({ prefix: "ce-npm-project-" }));
  await Deno.writeTextFile(join(project, "data.json"), '{"rows": 3}');
  let server: ServerHarness | undefined;
  try {
    server = await startServer({
      settings: { sandbox: { npmPackages: PACKAGES }, allowedProjects: [project] },
    });
    const run = server.runTs;

    await t.step("run_typescript's description names the packages", async () => {
      const { tools } = await server!.client.listTools();
      const description = tools.find((tool) => tool.name === "run_typescript")?.description ?? "";
      assert(description.includes(PACKAGES.join(", ")), description);
    });

    await t.step(
      "code parses a CSV with csv-parse and formats its dates with date-fns",
      async () => {
        const result = await run(`
import { parse } from "csv-parse/sync";
import { format } from "npm:date-fns@4.4.0";
const rows = parse("day,visits\\n2026-03-01,12\\n2026-03-02,30\\n", { columns: true, cast: true });
return rows.map((row) => \`\${format(new Date(row.day + "T00:00:00Z"), "EEE d MMM yyyy")}: \${row.visits}\`);`);
        assertOk(result, ["Sun 1 Mar 2026: 12", "Mon 2 Mar 2026: 30"]);
      },
    );

    await t.step("the same child's network is refused", async () => {
      const result = await run(`
import { parse } from "csv-parse/sync";
parse("a\\n1\\n");
return await (await fetch("https://registry.npmjs.org/csv-parse")).text();`);
      assertFails(result, "PermissionError", /Requires net access to "registry\.npmjs\.org:443"/);
    });

    await t.step("packages() lists the packages with their descriptions", async () => {
      const result = await run(
        "return packages().map((p) => [p.specifier, typeof p.description]);",
      );
      assertOk(result, PACKAGES.map((spec) => [`npm:${spec}`, "string"]));
    });

    await t.step(
      "an unlisted package, jsr: and https: imports are refused before the run",
      async () => {
        for (
          const [specifier, why] of [
            ["lodash", /"lodash" is not one of the npm packages offered/],
            ["npm:left-pad@1.3.0", /"npm:left-pad@1\.3\.0" is not one of the npm packages offered/],
            ["npm:csv-parse@6.0.0", /asks for another version than npm:csv-parse@7\.0\.3/],
            ["jsr:@std/path@1.0.0", /is a JSR module/],
            ["https://esm.sh/lodash@4.17.21", /is a remote module/],
            ["./helpers.ts", /is a relative path/],
            ["fs", /the Node built-in is "node:fs"/],
          ] as const
        ) {
          // Printed before the import is reached: a refusal before the run prints nothing.
          const result = await run(`console.log("ran");\nawait import("${specifier}");\nreturn 1;`);
          assertFails(result, "ImportNotAllowedError", why);
          assertMatch(result.error!.message, /line 2: /);
          assertMatch(
            result.error!.message,
            /Allowed: the npm packages of sandbox\.npmPackages: "csv-parse" \(or "npm:csv-parse@7\.0\.3"\), "date-fns"/,
          );
          assertEquals(result.stdout, "", describeResult(result));
        }
        const declared = await run('import _ from "lodash";\nimport { x } from "jsr:@std/path";');
        assertFails(
          declared,
          "ImportNotAllowedError",
          /line 1: "lodash".*line 2: "jsr:@std\/path"/,
        );
      },
    );

    await t.step(
      "a package named at run time is not fetched: the child reads the cache only",
      async () => {
        const result = await run(
          'const name = ["left", "pad"].join("-");\nreturn await import(`npm:${name}@1.3.0`);',
        );
        assertEquals(result.isError, true, describeResult(result));
        assertMatch(
          result.error?.message ?? "",
          /npm package not found in cache: "left-pad", --cached-only/,
        );
        const fetched = await Deno.stat(join(NPM_CACHE, "left-pad")).then(() => true, () => false);
        assertEquals(fetched, false, "left-pad was fetched into the children's cache");
      },
    );

    await t.step(
      "a package's read of /etc/passwd is refused, its stack in the package",
      async () => {
        const result = await run(
          'import { loadJsonFileSync } from "load-json-file";\nreturn loadJsonFileSync("/etc/passwd");',
        );
        assertFails(result, "PermissionError", /Requires read access to "\/etc\/passwd"/);
        assertMatch(
          result.error?.traceback ?? "",
          /at loadJsonFileSync \(file:\/\/\/.*load-json-file\/7\.0\.1\//,
        );
      },
    );

    await t.step("a package's read of an environment variable is refused", async () => {
      const result = await run(
        'import dotenv from "dotenv";\nreturn dotenv.config({ path: "/etc/passwd", quiet: true });',
      );
      assertFails(result, "PermissionError", /Requires env access to "DOTENV_/);
      assertMatch(result.error?.traceback ?? "", /dotenv\/18\.0\.10\//);
    });

    await t.step("a package reads what the run is granted, and only that", async () => {
      const code = `import { loadJsonFileSync } from "load-json-file";
return loadJsonFileSync(${JSON.stringify(join(project, "data.json"))});`;
      assertOk(await run(code, { permissions: { read: [project] } }), { rows: 3 });
      assertFails(await run(code), "PermissionError", /Requires read access/);
    });

    await t.step("the child can neither write nor read the packages' cache", async () => {
      const file = join(NPM_CACHE, "csv-parse", "7.0.3", "package.json");
      const before = await sha256(file);
      const path = JSON.stringify(file);
      for (
        const code of [
          `await Deno.writeTextFile(${path}, "{}");`,
          `import { writeFileSync } from "node:fs";\nwriteFileSync(${path}, "{}");`,
          `await Deno.remove(${path});`,
          `await Deno.mkdir(${JSON.stringify(join(NPM_CACHE, "planted"))});`,
        ]
      ) {
        assertFails(await run(code), "PermissionError", /Requires write access/);
      }
      assertFails(
        await run(`return await Deno.readTextFile(${path});`),
        "PermissionError",
        /Requires read access/,
      );
      assertEquals(await sha256(file), before);
      const planted = await Deno.stat(join(NPM_CACHE, "planted")).then(() => true, () => false);
      assertEquals(planted, false);
    });
  } finally {
    await server?.close();
    await Deno.remove(project, { recursive: true });
  }
});

Deno.test("a server whose sandbox.npmPackages cannot be fetched says which and what to do", async () => {
  const spec = "code-executor-no-such-package-4e1b@1.0.0";
  const error = await startServer({ settings: { sandbox: { npmPackages: [spec] } } }).then(
    async (server) => {
      await server.close();
      return undefined;
    },
    (error: Error) => error,
  );
  assert(error, "the server started without its packages");
  assertMatch(error.message, new RegExp(`Cannot fetch sandbox\\.npmPackages \\(${spec}\\)`));
  assertMatch(error.message, /code-executor prepare/);
});
