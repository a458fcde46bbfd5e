/**
 * A running server picks up the wheels that `code-executor sync` regenerates in
 * `python.wheelDirs`, without a restart; open sessions keep the ones they started with.
 *
 * @module
 */
import { join } from "node:path";
import { assertEquals } from "./_assert.ts";
import { withTempDir } from "./_fs.ts";
import { captureWarnings, withExecutor } from "./_executor.ts";
import { buildWheel, wheelFileName } from "../src/codegen/wheel.ts";

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
  await withTempDir("ce-wheels-reload-", async (dir) => {
    const log = captureWarnings();
    const first = await writeWheel(dir, "0.0.0", 'VALUE = "A"\n');
    // A warm child booted with the first wheel must be replaced, not handed out.
    await withExecutor({ python: { wheelDirs: [dir], warmPool: 1 } }, async (executor) => {
      const value = async (session?: string) => {
        const result = await executor.runPython("import demo_wrappers\ndemo_wrappers.VALUE", {
          session,
        });
        assertEquals(result.error, undefined);
        return result.returnValue;
      };
      await (await executor.runtime("python").pool()).settled();
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
    }, { log });
  });
});
