/**
 * A Python session does no work between its calls: what a run scheduled and did not finish is
 * cancelled when the run ends, and the child is stopped (SIGSTOP) until the next run. Each test's
 * child is stopped when withPyChild() disposes of it: that must still end it.
 *
 * @module
 */
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { eventually, leftovers, processGone, processStat } from "./_proc.ts";
import { LIMITS, withPyChild } from "./_pyodide.ts";
import type { PyChild } from "../src/exec/python/child.ts";
import { parentDeathHelper } from "../src/parent_death.ts";
import { removeStaleDirs } from "../src/exec/child/files.ts";
import { createLogger } from "../src/log.ts";

const log = createLogger("error");

/**
 * Once a session's child has stopped after its run (SIGSTOP takes effect a moment after it is
 * sent), looks at it every 100 ms for 1.5 s and returns the states seen: a stopped process (`T`)
 * runs nothing, whatever its code scheduled.
 */
async function idleStates(child: PyChild): Promise<string[]> {
  await eventually(async () => (await processStat(child.pid)).state === "T");
  const states: string[] = [];
  for (let look = 0; look < 15; look++) {
    states.push((await processStat(child.pid)).state);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return [...new Set(states)];
}

const SPINNERS = `
import asyncio

def spin():
    while True:
        pass

async def busy():
    while True:
        pass

kept = 42
`;

for (
  const [how, schedule] of [
    [
      "a run without await",
      "asyncio.get_event_loop().call_later(0.1, spin)\nasyncio.ensure_future(busy())\n",
    ],
    [
      "a run that awaits",
      "await asyncio.sleep(0)\nasyncio.get_event_loop().call_soon(spin)\n" +
      "asyncio.get_event_loop().call_at(asyncio.get_event_loop().time() + 0.1, spin)\n" +
      "asyncio.ensure_future(busy())\n",
    ],
  ]
) {
  Deno.test(`PyChild.run() stops a session between calls and cancels the busy work ${how} scheduled`, async () => {
    await withPyChild({ session: true }, async (child) => {
      const scheduled = await child.run(SPINNERS + schedule + '"scheduled"', LIMITS);
      assertEquals(scheduled.error, undefined);
      assertEquals(scheduled.returnValue, "scheduled");

      assertEquals(
        await idleStates(child),
        ["T"],
        "a session's child is stopped throughout the time between its runs",
      );

      // Had the spinners survived the run's end, they would hold the event loop and the next run
      // would end in a TimeoutError instead.
      const next = await child.run("1 + 1", { ...LIMITS, timeoutMs: 30_000 });
      assertEquals(next.error, undefined);
      assertEquals(next.returnValue, 2);
      assertEquals(
        (await child.run("kept", LIMITS)).returnValue,
        42,
        "the session kept its globals",
      );
    });
  });
}

Deno.test("PyChild.run() cancels a session's pending task at the end of its call, so it never runs later", async () => {
  await withPyChild({ session: true }, async (child) => {
    const first = await child.run(
      `
import asyncio
hits = []

async def later():
    await asyncio.sleep(0.2)
    hits.append("ran")

task = asyncio.ensure_future(later())
`,
      LIMITS,
    );
    assertEquals(first.error, undefined);
    // Started in a run that awaits, a task still unwinds (its finally block) inside that run.
    const second = await child.run(
      `
async def unwinding():
    try:
        await asyncio.sleep(0.2)
        hits.append("ran too")
    finally:
        hits.append("unwound")

other = asyncio.ensure_future(unwinding())
await asyncio.sleep(0.05)
"started"
`,
      LIMITS,
    );
    assertEquals(second.error, undefined);
    assertEquals((await child.run("list(hits)", LIMITS)).returnValue, ["unwound"]);
    // Past both tasks' sleeps, with the event loop free to run whatever was still due.
    const later = await child.run(
      "await asyncio.sleep(0.4)\n[hits, task.cancelled(), other.cancelled()]",
      LIMITS,
    );
    assertEquals(later.error, undefined);
    assertEquals(later.returnValue, [["unwound"], true, true]);
  });
});

Deno.test("PyChild.run() bounds JavaScript scheduled through the js bridge by the next call's timeout", async () => {
  // JavaScript timers are out of the runner's reach: stopped between calls, the child runs this
  // spinner only once the next run starts, which the timeout then ends (interrupt, then SIGKILL).
  await withPyChild({ session: true, allowedImports: "*" }, async (child) => {
    const scheduled = await child.run(
      'import importlib\njs = importlib.import_module("js")\n' +
        'js.eval("setTimeout(() => { for (;;) {} }, 100)")\n"scheduled"',
      LIMITS,
    );
    assertEquals(scheduled.error, undefined);
    assertEquals(await idleStates(child), ["T"], "the spinner ran between the calls");

    const next = await child.run("1 + 1", { ...LIMITS, timeoutMs: 1_000, graceMs: 200 });
    assertEquals(next.error?.type, "TimeoutError");
    const after = await child.run("1 + 1", LIMITS);
    assertEquals(after.error?.type, "SessionEnded");
    assertMatch(after.error?.message ?? "", /start a new session/);
  });
});

Deno.test("a session child stopped between calls does not outlive a SIGKILLed host", async () => {
  // Stopped, the child cannot notice that its stdin ended: the kernel ends it where setpriv
  // --pdeathsig is available, and the next start (removeStaleDirs) where it is not.
  const tempRoot = await Deno.realPath(await Deno.makeTempDir({ prefix: "ce-py-orphan-" }));
  const host = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      new URL("./fixtures/py_session_host.ts", import.meta.url).pathname,
      tempRoot,
    ],
    stdout: "piped",
    stderr: "null",
  }).spawn();
  let pid = 0;
  try {
    const reader = host.stdout.pipeThrough(new TextDecoderStream()).getReader();
    let text = "";
    while (!text.includes("\n")) {
      const { value, done } = await reader.read();
      if (done) break;
      text += value;
    }
    pid = Number(text.trim());
    assert(pid > 0, `the host printed no pid: ${JSON.stringify(text)}`);
    host.kill("SIGKILL");
    await host.status;
    await reader.cancel();
    if (parentDeathHelper()) {
      // Started through setpriv --pdeathsig KILL: the kernel kills it, stopped or not.
      // Nothing else ends it: stopped, it cannot read the end of its stdin, and removeStaleDirs
      // has not run yet.
      assert(
        await eventually(() => processGone(pid), 30_000),
        `the stopped child ${pid} outlived its host`,
      );
    } else {
      assertEquals((await processStat(pid)).state, "T", "the orphaned child stays stopped");
    }
    await removeStaleDirs(tempRoot, log);
    assert(await eventually(() => processGone(pid)), `sandbox process ${pid} left behind`);
    assertEquals(await leftovers(tempRoot), [], "stale sandbox directories left behind");
  } finally {
    if (pid > 0 && !(await processGone(pid))) Deno.kill(pid, "SIGKILL");
    await Deno.remove(tempRoot, { recursive: true });
  }
});
