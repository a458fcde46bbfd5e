/**
 * The check of a run's imports against `sandbox.npmPackages`, and the import map the children get:
 * which specifiers pass, and what a refusal says.
 *
 * @module
 */
import { assertEquals, assertMatch, assertThrows } from "./_assert.ts";
import { CodeExecutorError } from "../src/errors.ts";
import { NpmPackages } from "../src/exec/typescript/npm_packages.ts";

const packages = new NpmPackages(["csv-parse@7.0.3", "@turf/helpers@7.3.4"]);

function refusal(code: string): string {
  const error = assertThrows(() => packages.check(code), CodeExecutorError);
  assertEquals(error.type, "ImportNotAllowedError");
  return error.message;
}

Deno.test("imports of the listed packages pass, by name, subpath or exact npm: specifier", () => {
  for (
    const specifier of [
      "csv-parse",
      "csv-parse/sync",
      "npm:csv-parse",
      "npm:csv-parse@7.0.3",
      "npm:csv-parse@7.0.3/sync",
      "npm:/csv-parse@7.0.3/sync",
      "@turf/helpers",
      "npm:@turf/helpers@7.3.4",
      "node:fs",
      "data:text/javascript,export default 1",
    ]
  ) {
    packages.check(
      `import x from ${JSON.stringify(specifier)};\nawait import(${JSON.stringify(specifier)});`,
    );
  }
  // Files by absolute URL or path, under a path the run may read (generated wrappers).
  for (const specifier of ["file:///opt/wrappers/typescript/memory.ts", "/opt/wrappers/x.ts"]) {
    packages.check(`import x from ${JSON.stringify(specifier)};`, ["/opt/wrappers"]);
  }
});

Deno.test("anything else is refused with its line and what is allowed", () => {
  const message = refusal(
    'import a from "csv-parse";\nimport b from "npm:csv-parse@7.0.4";\nimport c from "@turf/other";\nawait import("./lib.ts");',
  );
  assertMatch(
    message,
    /line 2: "npm:csv-parse@7\.0\.4" asks for another version than npm:csv-parse@7\.0\.3/,
  );
  assertMatch(message, /line 3: "@turf\/other" is not one of the npm packages offered/);
  assertMatch(message, /line 4: "\.\/lib\.ts" is a relative path/);
  assertMatch(
    message,
    /Allowed: the npm packages of sandbox\.npmPackages: "csv-parse" \(or "npm:csv-parse@7\.0\.3"\), "@turf\/helpers" \(or "npm:@turf\/helpers@7\.3\.4"\); Node built-ins/,
  );
  assertMatch(refusal('import x from "npm:csv-parse@^7";'), /another version/);
  assertMatch(refusal('import x from "csv-p\\u0061rse";'), /not one of the npm packages offered/);
  assertMatch(refusal('import x from "HTTPS://example.com/x.js";'), /is a remote module/);
  assertMatch(refusal('import x from "../x.ts";'), /is a relative path.*absolute file: URL/);
  assertMatch(
    refusal('import x from "file:///etc/passwd";'),
    /is a file outside the paths .* read access/,
  );
  // `..` does not climb out of a granted directory.
  const climbed = assertThrows(
    () =>
      packages.check('import x from "file:///opt/wrappers/../../etc/passwd";', ["/opt/wrappers"]),
    CodeExecutorError,
  );
  assertMatch(climbed.message, /is a file outside/);
  assertMatch(refusal('import x from "path";'), /the Node built-in is "node:path"/);
});

Deno.test("the import map sends each name and its subpaths to the exact version", () => {
  const url = packages.importMapUrl();
  const map = JSON.parse(atob(url.slice(url.indexOf(",") + 1)));
  assertEquals(map.imports, {
    "csv-parse": "npm:csv-parse@7.0.3",
    "csv-parse/": "npm:/csv-parse@7.0.3/",
    "npm:csv-parse": "npm:csv-parse@7.0.3",
    "@turf/helpers": "npm:@turf/helpers@7.3.4",
    "@turf/helpers/": "npm:/@turf/helpers@7.3.4/",
    "npm:@turf/helpers": "npm:@turf/helpers@7.3.4",
  });
});
