/**
 * The parts of the Python executor that make it fast: the pool's wait for a child that is
 * starting, the synchronous run of code that does not await, the warm-up before `ready`, and the
 * kill at the result (stderr mark), which must leave sessions alive.
 */
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { PoolMember as Member, sandboxPids, withExecutor } from "./_helpers.ts";
import { LIMITS, withPyChild } from "./_pyodide.ts";
import { WarmPool } from "../src/exec/child/warm_pool.ts";
import { createLogger } from "../src/log.ts";

const log = createLogger("error");

/** A pool whose spawns finish when the test releases them. */
function gatedPool(size: number) {
  const gates: Array<PromiseWithResolvers<Member>> = [];
  const pool = new WarmPool<Member>(size, () => {
    const gate = Promise.withResolvers<Member>();
    gates.push(gate);
    return gate.promise;
  }, log);
  return { pool, gates };
}

Deno.test("WarmPool.takeOrWait() hands out the child that a spawn in progress delivers", async () => {
  const { pool, gates } = gatedPool(2);
  pool.fill();
  assertEquals(pool.idle, 0);
  const first = pool.takeOrWait();
  const second = pool.takeOrWait();
  const a = new Member();
  gates[0].resolve(a);
  assertEquals(await first, a);
  const b = new Member();
  gates[1].resolve(b);
  // The second caller lost the race for the first child and waited for the next one.
  assertEquals(await second, b);
  assertEquals(await pool.takeOrWait(), undefined, "nothing idle and nothing starting");
  await pool.close();
});

Deno.test("WarmPool.takeOrWait() makes no more callers wait than children are starting", async () => {
  const { pool, gates } = gatedPool(1);
  pool.fill();
  const first = pool.takeOrWait();
  // One child is starting and one caller waits for it: the next one must start its own.
  assertEquals(await pool.takeOrWait(), undefined);
  const child = new Member();
  gates[0].resolve(child);
  assertEquals(await first, child);
  await pool.close();
});

Deno.test("WarmPool.takeOrWait() stops waiting on abort and the child stays in the pool", async () => {
  const { pool, gates } = gatedPool(1);
  pool.fill();
  const controller = new AbortController();
  const waiting = pool.takeOrWait(controller.signal);
  controller.abort();
  assertEquals(await waiting, undefined);
  const child = new Member();
  gates[0].resolve(child);
  await pool.settled();
  assertEquals(pool.idle, 1);
  assertEquals(pool.take(), child);
  await pool.close();
});

Deno.test("PyChild.run() mixes synchronous and awaiting runs in one session", async () => {
  await withPyChild({ session: true }, async (child) => {
    const first = await child.run("x = 20\nprint('sync')\nx + 1", LIMITS);
    assertEquals([first.ok, first.stdout, first.returnValue], [true, "sync\n", 21]);
    const second = await child.run(
      "import asyncio\nawait asyncio.sleep(0)\nx += 1\nprint('async')\nx",
      LIMITS,
    );
    assertEquals([second.ok, second.stdout, second.returnValue], [true, "async\n", 21]);
    // The session child is not killed at its result: its state survives.
    const third = await child.run("\n\nx * 2", LIMITS);
    assertEquals(third.returnValue, 42);
    assert(!child.exited, "the session child was killed after its result");
    const failed = await child.run("y = 1\n\nundefined_name + y", LIMITS);
    assertEquals(failed.error?.type, "NameError");
    assertMatch(failed.error?.traceback ?? "", /File "code\.py", line 3/);
    const awaiting = await child.run("import asyncio\nawait asyncio.sleep(0)\n1 / 0", LIMITS);
    assertEquals(awaiting.error?.type, "ZeroDivisionError");
    assertMatch(awaiting.error?.traceback ?? "", /File "code\.py", line 3/);
  });
});

Deno.test("PyChild.run() interrupts synchronous code at timeoutMs with its line", async () => {
  const result = await withPyChild(
    {},
    (child) => child.run("n = 0\nwhile True:\n    n += 1", { ...LIMITS, timeoutMs: 1_500 }),
  );
  assertEquals(result.error?.type, "TimeoutError");
  assertMatch(result.error?.traceback ?? "", /File "code\.py", line \d/);
});

Deno.test("PyChild's warm-up before ready leaves nothing in the fresh interpreter", async () => {
  const result = await withPyChild({ allowedImports: "*" }, (child) =>
    child.run(
      [
        "import builtins, linecache",
        "[sorted(k for k, v in globals().items() if not k.startswith('__')",
        "        and isinstance(v, (int, float, str, list, dict))),",
        " hasattr(builtins, '_'), ''.join(linecache.getlines('code.py')).count('\\n')]",
      ].join("\n"),
      LIMITS,
    ));
  // code.py in linecache is this run's own source (4 lines), not the warm-up's.
  assertEquals(result.returnValue, [[], false, 4]);
});

Deno.test("Executor.runPython() right after start-up waits for a pooled child instead of booting a third", async () => {
  const seen = new Set<number>();
  await withExecutor({ python: { warmPool: 2 } }, async (executor, tempDir) => {
    let watching = true;
    const watch = (async () => {
      while (watching) {
        for (const pid of await sandboxPids(tempDir, ["py_host.ts"])) seen.add(pid);
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    try {
      const result = await executor.runPython("1 + 1");
      assertEquals([result.ok, result.returnValue], [true, 2]);
    } finally {
      watching = false;
      await watch;
    }
  }, { log });
  // The pool's two children only: the run took the first one to boot.
  assert(seen.size <= 2, `${seen.size} Python children were started for one run and a pool of 2`);
});

Deno.test({
  name: "a ready Python child's V8 background threads run at nice 19, its Python thread does not",
  ignore: Deno.build.os !== "linux",
  async fn() {
    await withPyChild({}, async (child) => {
      const niceByThread = async () => {
        const nice: Record<string, number[]> = {};
        for await (const entry of Deno.readDir(`/proc/${child.pid}/task`)) {
          const dir = `/proc/${child.pid}/task/${entry.name}`;
          const comm = (await Deno.readTextFile(`${dir}/comm`)).trim();
          // Field 19 of stat is the nice value; the fields after the command name start at 3.
          const fields = (await Deno.readTextFile(`${dir}/stat`)).split(") ")[1].split(" ");
          (nice[comm] ??= []).push(Number(fields[16]));
        }
        return nice;
      };
      let nice = await niceByThread();
      const deadline = Date.now() + 10_000;
      while (!nice["V8 DefaultWorke"]?.every((n) => n === 19) && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 50));
        nice = await niceByThread();
      }
      assert(
        (nice["V8 DefaultWorke"] ?? []).length > 0,
        `no V8 worker thread: ${JSON.stringify(nice)}`,
      );
      assertEquals(new Set(nice["V8 DefaultWorke"]), new Set([19]), JSON.stringify(nice));
      // The Worker that runs Python keeps the default priority.
      assertEquals(new Set(nice["worker-1"]), new Set([0]), JSON.stringify(nice));
      const result = await child.run("1 + 1", LIMITS);
      assertEquals(result.returnValue, 2);
    });
  },
});
