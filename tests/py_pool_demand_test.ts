/**
 * The Python pool follows demand (`python.warmPoolBurst`, `python.warmPoolIdleMs`): runs that
 * find it empty make it grow, at most by the burst, and it shrinks back to `python.warmPool`
 * once no run has taken a child for the idle time, leaving no process behind.
 */
import { assert, assertEquals } from "./_assert.ts";
import { sandboxPids } from "./_proc.ts";
import { PoolMember as Member, withExecutor } from "./_executor.ts";
import { WarmPool } from "../src/exec/child/warm_pool.ts";
import { createLogger } from "../src/log.ts";

const log = createLogger("error");

/** Polls until `check` holds; fails after `ms`. */
async function eventually(what: string, check: () => Promise<boolean> | boolean, ms = 60_000) {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    assert(Date.now() < deadline, `timed out waiting until ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

Deno.test("WarmPool grows by one per caller it leaves without a child, up to size + burst", async () => {
  const members: Member[] = [];
  const pool = new WarmPool<Member>(
    1,
    () => {
      const member = new Member();
      members.push(member);
      return Promise.resolve(member);
    },
    log,
    { burst: 2, idleMs: 300 },
  );
  pool.fill();
  await pool.settled();
  assertEquals(pool.idle, 1);
  assert(await pool.takeOrWait(), "the idle child");
  assertEquals(pool.target, 1, "a caller that got a child does not grow the pool");
  for (const expected of [2, 3, 3]) {
    assertEquals(await pool.takeOrWait(), undefined);
    assertEquals(pool.target, expected);
  }
  pool.fill();
  await pool.settled();
  assertEquals(pool.idle, 3, "the refill boots the burst side by side");
  for (let run = 0; run < 3; run++) pool.returned();
  await new Promise((resolve) => setTimeout(resolve, 600));
  assertEquals(pool.idle, 3, "a run still in progress keeps the pool grown");
  pool.returned();
  await eventually("the pool shrinks back", () => pool.idle === 1, 10_000);
  assertEquals(pool.target, 1);
  assertEquals(members.filter((m) => m.disposed).length, 2, "the extra children are disposed");
  await pool.close();
});

Deno.test("WarmPool without demand keeps its size whatever the callers", async () => {
  const pool = new WarmPool<Member>(1, () => Promise.resolve(new Member()), log);
  pool.fill();
  await pool.settled();
  assert(await pool.takeOrWait());
  assertEquals(await pool.takeOrWait(), undefined);
  assertEquals(pool.target, 1);
  pool.fill();
  await pool.settled();
  assertEquals(pool.idle, 1);
  await pool.close();
});

Deno.test("a burst of Python runs grows the pool, idle shrinks it, and no process is left", async () => {
  await withExecutor({
    limits: { maxConcurrent: 3 },
    // Long enough for two fresh interpreters to boot side by side on a loaded machine.
    python: { warmPool: 1, warmPoolBurst: 1, warmPoolIdleMs: 10_000 },
  }, async (executor, tempDir) => {
    const pool = await executor.runtime("python").pool();
    const children = () => sandboxPids(tempDir, ["py_host.ts"]);
    await eventually("the pool holds its child", async () => {
      await pool.settled();
      return pool.idle === 1;
    });
    const results = await Promise.all(
      [1, 2, 3].map((n) => executor.runPython(`${n} * 10`, { timeoutMs: 60_000 })),
    );
    assertEquals(results.map((r) => r.returnValue), [10, 20, 30]);
    assertEquals(pool.target, 2, "two runs found the pool empty; the burst allows one more");
    await eventually("the grown pool is full", async () => {
      await executor.idle();
      await pool.settled();
      return pool.idle === 2 && (await children()).length === 2;
    });
    await eventually("the pool shrinks back to one child", async () => {
      return pool.idle === 1 && (await children()).length === 1;
    });
    assertEquals(pool.target, 1);
    // And it grows again at the next burst.
    await Promise.all([1, 2].map(() => executor.runPython("1", { timeoutMs: 60_000 })));
    assertEquals(pool.target, 2);
  });
});
