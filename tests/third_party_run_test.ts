/**
 * `runThirdParty()`, the bounded first attempt and single retry the tests use for programs whose
 * first run may hang, against a real program that hangs the way Deno's first-run deadlock does:
 * asleep at 0% CPU, printing nothing.
 *
 * @module
 */
import { join } from "node:path";
import { assert, assertEquals } from "./_assert.ts";
import { withTempDir } from "./_helpers.ts";
import { runThirdParty } from "./_third_party.ts";

/** Sleeps without end on its first run (it leaves a marker), prints "second run" on the next. */
const HANGS_ONCE = `
const marker = Deno.args[0];
try {
  await Deno.stat(marker);
  console.log("second run");
} catch {
  await Deno.writeTextFile(marker, "");
  await new Promise(() => setInterval(() => {}, 1e9));
}`;

Deno.test("runThirdParty() kills a first attempt that uses no CPU and returns the retry's run", async () => {
  await withTempDir("ce-third-party-", async (dir) => {
    const marker = join(dir, "ran");
    const run = await runThirdParty(
      Deno.execPath(),
      ["eval", "--no-config", HANGS_ONCE, marker],
      { name: "hangs-once", firstAttemptMs: 120_000, stallMs: 2_000, retryMs: 120_000 },
    );
    assertEquals(run.code, 0, run.stderr);
    assertEquals(run.stdout.trim(), "second run");
  });
});

Deno.test("runThirdParty() names both attempts and the cause when the retry hangs too", async () => {
  await withTempDir("ce-third-party-", async (dir) => {
    let error: Error | undefined;
    try {
      await runThirdParty(
        Deno.execPath(),
        ["eval", "--no-config", "await new Promise(() => setInterval(() => {}, 1e9));"],
        { name: "hangs-always", cwd: dir, firstAttemptMs: 60_000, stallMs: 2_000, retryMs: 3_000 },
      );
    } catch (caught) {
      error = caught as Error;
    }
    assert(error, "a program that never ends was not reported");
    assert(
      /hangs-always: its first attempt used no CPU for 2 s/.test(error.message),
      error.message,
    );
    assert(/The retry did not end in 3 s \(.*\), too/.test(error.message), error.message);
    assert(error.message.includes("docs/deno-first-run-hang.md"), error.message);
  });
});
