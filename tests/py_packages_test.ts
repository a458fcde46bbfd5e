/**
 * `python.packages`, through the real server over stdio: a pure-Python wheel that the test builds
 * from `tests/fixtures/py_package/` is imported into the memory snapshot, so that a run finds it
 * in `sys.modules` before it imports anything; its other modules load from its files; a wheel
 * next to it that the setting does not name, and modules outside the allowed imports, stay
 * refused. No network is involved: the wheel is a zip archive written here.
 *
 * @module
 */
import { join } from "node:path";
import { assertEquals, assertFails, describeResult } from "./_assert.ts";
import { ROOT } from "./_env.ts";
import { withTempDir } from "./_fs.ts";
import { startServer } from "./_stdio_server.ts";
import { buildWheel, wheelFileName } from "../src/codegen/wheel.ts";

const FIXTURE = join(ROOT, "tests", "fixtures", "py_package");

async function fixtureWheel(files: string[], distribution: string): Promise<Uint8Array> {
  const sources: Record<string, string> = {};
  for (const file of files) sources[file] = await Deno.readTextFile(join(FIXTURE, file));
  return buildWheel(sources, { distribution, version: "1.0.0" });
}

Deno.test("python.packages: a wheel built from the fixtures is in the snapshot, imported", async () => {
  await withTempDir("ce-pypackages-", async (dir) => {
    const listed = join(dir, wheelFileName("visitstats", "1.0.0"));
    await Deno.writeFile(
      listed,
      await fixtureWheel(["visitstats/__init__.py", "visitstats/later.py"], "visitstats"),
    );
    // In the same directory, and not named by the setting.
    await Deno.writeFile(
      join(dir, wheelFileName("other_pkg", "1.0.0")),
      await fixtureWheel(["other_pkg.py"], "other_pkg"),
    );
    const server = await startServer({ settings: { python: { packages: [listed] } } });
    try {
      // The first run may wait for the snapshot with the package to be built.
      const first = await server.runPy(
        'import sys\nbefore = "visitstats" in sys.modules\nimport visitstats\n[before, visitstats.LOADED_AT_IMPORT, visitstats.total("day,visits\\n1,12\\n2,30\\n")]',
        { timeoutMs: 120_000 },
      );
      assertEquals(first.returnValue, [true, true, 42], describeResult(first));

      const later = await server.runPy(
        'import sys\nbefore = "visitstats.later" in sys.modules\nimport visitstats.later\n[before, visitstats.later.GREETING]',
      );
      assertEquals(later.returnValue, [false, "loaded later"], describeResult(later));

      assertFails(
        await server.runPy("import other_pkg"),
        "ImportError",
        /other_pkg is not allowed/,
      );
      assertFails(await server.runPy("import os"), "ImportError", /os is not allowed/);
      const hidden = await server.runPy('import sys\n"other_pkg" in sys.modules');
      assertEquals(hidden.returnValue, false, describeResult(hidden));
    } finally {
      await server.close();
    }
  });
});

Deno.test("python.packages: a path that cannot be read stops Python with the setting's name", async () => {
  await withTempDir("ce-pypackages-", async (dir) => {
    const missing = join(dir, "missing.whl");
    const server = await startServer({ settings: { python: { packages: [missing] } } });
    try {
      const result = await server.runPy("1");
      assertFails(result, "PythonUnavailable", /python\.packages path .*missing\.whl/);
    } finally {
      await server.close();
    }
  });
});
