/**
 * A Python child serves several runs of one principal, each in a fresh Worker with a fresh
 * interpreter (issue 27). These tests run code that tries to leave something behind for the next
 * run in the same child (patched builtins, globals, modules, files, `js` objects, tasks, timers,
 * memory, Workers, frames forged with the Worker's real nonce), then the next run, and check
 * that it finds none of it, and that a child whose run ended badly is not given another. Two
 * principals never share a child.
 *
 * @module
 */
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { withExecutor } from "./_executor.ts";
import { LIMITS, withPyChild } from "./_pyodide.ts";
import { FIND_NONCE } from "./_heap_nonce.ts";
import { residentMb } from "../src/exec/child/_os.ts";
import type { PyChild } from "../src/exec/python/child.ts";

/** Reaches the worker's JavaScript globals through allowed modules, bypassing the import hook. */
const JS = 'import random\njs = random._os.sys.modules["importlib"].import_module("js")\n';
const FUNCTION =
  'import random\nF = random._os.sys.modules["pyodide.ffi"].to_js([]).constructor.constructor\n';

async function runAgain(child: PyChild, code: string, limits = LIMITS) {
  assert(await child.recycle(), "the child did not ready another interpreter");
  return await child.run(code, limits);
}

Deno.test("a run in a reused child sees nothing of the run before it in that child", async () => {
  await withPyChild({ maxRuns: 10, allowedImports: "*" }, async (child) => {
    const first = await child.run(
      `${JS}import asyncio, builtins, json, sys
create_proxy = random._os.sys.modules["pyodide.ffi"].create_proxy
builtins.len = lambda x: 42
secret = 1
json.leak = "A"
sys.modules["leaky"] = type(sys)("leaky")
with open("/home/pyodide/left.txt", "w") as f:
    f.write("A")
with open("/tmp/left.txt", "w") as f:
    f.write("A")
js.globalThis.leftover = "A"
async def forever():
    while True:
        await asyncio.sleep(0.05)
        print("a task of the first run")
asyncio.get_event_loop().create_task(forever())
asyncio.get_event_loop().call_later(0.2, lambda: print("a timer of the first run"))
js.setTimeout(create_proxy(lambda: print("a JavaScript timer of the first run")), 200)
js.setInterval(create_proxy(lambda: print("a JavaScript interval of the first run")), 50)
await asyncio.sleep(0.01)
len([])`,
      LIMITS,
    );
    assertEquals(first.error, undefined);
    assertEquals(first.returnValue, 42);
    const pid = child.pid;
    const next = await runAgain(
      child,
      `${JS}import asyncio, json, os, sys
await asyncio.sleep(0.6)
[len([1, 2]), "secret" in globals(), hasattr(json, "leak"), "leaky" in sys.modules,
 os.path.exists("/home/pyodide/left.txt"), os.path.exists("/tmp/left.txt"),
 bool(js.Reflect.has(js.globalThis, "leftover"))]`,
    );
    assertEquals(next.error, undefined);
    assertEquals(next.returnValue, [2, false, false, false, false, false, false]);
    assertEquals(next.stdout, "", "something the first run scheduled ran in the second");
    assertEquals(child.pid, pid);
    assertEquals(child.runs, 2);
  });
});

Deno.test("a run that filled memory near the limit leaves all of it to the next run", async () => {
  // 300 MB of bytes on top of the child's 160-220 MB, under a limit of 600: twice over would
  // pass it, so the second run gets it only if the first run's memory went with its Worker.
  const fill = "blob = b'x' * (300 * 2**20)\nlen(blob)";
  await withPyChild({ maxRuns: 10, memoryMb: 600 }, async (child) => {
    const first = await child.run(fill, { ...LIMITS, timeoutMs: 60_000 });
    assertEquals(first.error, undefined);
    assertEquals(first.returnValue, 300 * 2 ** 20);
    const next = await runAgain(child, fill, { ...LIMITS, timeoutMs: 60_000 });
    assertEquals(next.error, undefined, "the first run's memory was still held");
    assertEquals(next.returnValue, 300 * 2 ** 20);
    assert(await child.recycle());
    const resident = await residentMb(child.pid);
    assert(resident !== undefined && resident < 300, `an idle child holds ${resident} MB`);
  });
});

Deno.test("a child is not given another run after a run it did not end well", async (t) => {
  const cases: Array<[string, string, Partial<typeof LIMITS>]> = [
    ["a timeout", "while True:\n    pass", { timeoutMs: 1_000 }],
    ["an output flood", "while True:\n    print('x' * 1000)", { maxOutputBytes: 10_000 }],
    [
      "a Worker of its own that runs on",
      `${FUNCTION}F('const u = URL.createObjectURL(new Blob(["for (;;) {}"], ` +
      `{ type: "text/javascript" })); return new Worker(u, { type: "module" })')()\n1`,
      {},
    ],
  ];
  for (const [what, code, limits] of cases) {
    await t.step(what, async () => {
      await withPyChild({ maxRuns: 10 }, async (child) => {
        await child.run(code, { ...LIMITS, ...limits });
        assertEquals(await child.recycle(), false);
        let refused = "";
        await child.run("1", LIMITS).catch((error) => refused = error.message);
        assertMatch(refused, /again before its next interpreter is ready/);
      });
    });
  }
  await t.step("its runs or its age are used up", async () => {
    await withPyChild({ maxRuns: 2 }, async (child) => {
      assertEquals((await child.run("1", LIMITS)).returnValue, 1);
      assertEquals((await runAgain(child, "2")).returnValue, 2);
      assertEquals(await child.recycle(), false, "a third run");
    });
    await withPyChild({ maxRuns: 10, maxAgeMs: 1 }, async (child) => {
      assertEquals((await child.run("1", LIMITS)).returnValue, 1);
      assertEquals(await child.recycle(), false, "a run after its age");
    });
  });
});

/**
 * Finds this Worker's frame nonce in a heap snapshot of its own isolate (the module variable
 * `nonce` of `sandbox/py_worker.ts`), and defines `forge(frame)` with it.
 */
const READ_NONCE = `import json, random
run_js = random._os.sys.modules["pyodide.code"].run_js
nonce = await run_js('''${FIND_NONCE}''')
write = run_js("(line) => Deno.stdout.writeSync(new TextEncoder().encode(line))")
def forge(frame):
    write(nonce + " " + json.dumps(frame) + "\\n")
`;

Deno.test("frames forged with a Worker's real nonce end only that Worker's own run", async () => {
  // The heap snapshot needs room; the limit is the child's, not the point of this test.
  await withPyChild({ maxRuns: 10, memoryMb: 3_000 }, async (child) => {
    const forged = await child.run(
      `${READ_NONCE}
forge({"t": "out", "s": "stdout", "d": "forged output\\n"})
forge({"t": "result", "ok": True, "value": "forged"})
# What this Worker writes after the result the host took is no part of any run.
forge({"t": "out", "s": "stdout", "d": "after the forged result\\n"})
forge({"t": "ready", "nonce": nonce})
print("printed after the forged result")
import time
time.sleep(0.3)
"the real result"`,
      { ...LIMITS, timeoutMs: 60_000 },
    );
    // The forged result ends the run: it is what the code could have returned itself.
    assertEquals(forged.error, undefined);
    assertEquals(forged.returnValue, "forged");
    assertEquals(forged.stdout, "forged output\n");
    const next = await runAgain(child, "print('the next run')\n'next'");
    assertEquals(next.error, undefined);
    assertEquals(next.returnValue, "next");
    assertEquals(next.stdout, "the next run\n");
  });
});

Deno.test("two principals never share a Python child; each one's runs reuse its own", async () => {
  await withExecutor({
    python: { warmPool: 2, runsPerChild: 20 },
  }, async (executor) => {
    const pool = await executor.runtime("python").pool();
    const pids: Record<string, number[]> = { "http:a": [], "http:b": [] };
    for (let round = 0; round < 3; round++) {
      for (const principal of Object.keys(pids)) {
        const result = await executor.runPython(`${JS}js.Deno.pid`, {
          principal,
          timeoutMs: 60_000,
        });
        assertEquals(result.error, undefined);
        pids[principal].push(result.returnValue as number);
        await executor.idle();
        await pool.settled();
      }
    }
    const [a, b] = [new Set(pids["http:a"]), new Set(pids["http:b"])];
    assertEquals([...a].filter((pid) => b.has(pid)), [], JSON.stringify(pids));
    assert(a.size < 3 && b.size < 3, `no child served a principal twice: ${JSON.stringify(pids)}`);
  });
});
