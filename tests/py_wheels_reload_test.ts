/**
 * A running server picks up the wheels that `code-executor sync` regenerates in
 * `python.wheelDirs`, without a restart; open sessions keep the ones they started with.
 *
 * @module
 */
import { join } from "node:path";
import { assertEquals } from "./_assert.ts";
import { leftovers } from "./_helpers.ts";
import { buildWheel, wheelFileName } from "../src/codegen/wheel.ts";
import { resolveSettings } from "../src/config/settings.ts";
import { Executor } from "../src/exec/executor.ts";
import type { Logger } from "../src/log.ts";

/** A logger that keeps warnings, so that the test can check that nothing went wrong. */
function captureLog(): Logger & { warnings: string[] } {
  const warnings: string[] = [];
  return { warnings, debug() {}, info() {}, warn: (m) => warnings.push(m), error() {} };
}

/** Writes a wheel the way `code-executor sync` does: a temporary file renamed into place. */
async function writeWheel(dir: string, version: string, source: string): Promise<string> {
  const path = join(dir, wheelFileName("demo_wrappers", version));
  const temp = `${path}.${crypto.randomUUID()}.tmp`;
  await Deno.writeFile(
    temp,
    buildWheel({ "demo_wrappers/__init__.py": source }, {
      distribution: "demo_wrappers",
      version,
    }),
  );
  await Deno.rename(temp, path);
  return path;
}

/** Longer than the interval at which the server looks at the wheel directories. */
function pastTheNextCheck(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 1_100));
}

Deno.test("Executor.runPython() imports the wheels python.wheelDirs holds now, without a restart", async () => {
  const dir = await Deno.makeTempDir({ prefix: "ce-wheels-reload-" });
  const tempDir = await Deno.realPath(await Deno.makeTempDir({ prefix: "ce-exec-reload-" }));
  const log = captureLog();
  // A warm child booted with the first wheel must be replaced, not handed out.
  const settings = resolveSettings({
    python: { wheelDirs: [dir], warmPool: 1 },
    sandbox: { warmPool: 0, tempDir },
  });
  const first = await writeWheel(dir, "0.0.0", 'VALUE = "A"\n');
  const executor = await Executor.create(settings, { log });
  const value = async (session?: string) => {
    const result = await executor.runPython("import demo_wrappers\ndemo_wrappers.VALUE", {
      session,
    });
    assertEquals(result.error, undefined);
    return result.returnValue;
  };
  try {
    await (await executor.pythonPool()).settled();
    assertEquals(await value(), "A");
    assertEquals(await value("opened-before"), "A");

    // What sync does when a server's tools change: the same file name, new contents.
    await writeWheel(dir, "0.0.0", 'VALUE = "B"\n');
    await pastTheNextCheck();
    assertEquals(await value(), "B");
    assertEquals(await value("opened-before"), "A", "a session keeps its interpreter");
    assertEquals(await value("opened-after"), "B");

    // Another version under another file name, the old one removed.
    await Deno.remove(first);
    await writeWheel(dir, "2.0.0", 'VALUE = "C"\n');
    await pastTheNextCheck();
    assertEquals(await value(), "C");
    assertEquals(log.warnings, []);
  } finally {
    await executor.close();
    const left = await leftovers(tempDir);
    await Deno.remove(tempDir, { recursive: true });
    await Deno.remove(dir, { recursive: true });
    assertEquals(left, [], "sandbox directories left behind");
  }
});
