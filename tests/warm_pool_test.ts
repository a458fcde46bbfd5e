/**
 * What `WarmPool` itself does, with members that are only objects: a caller waits for a child
 * that a spawn in progress delivers, no more callers wait than children are starting, and a wait
 * ends on abort.
 *
 * @module
 */
import { assertEquals } from "./_assert.ts";
import { PoolMember as Member } from "./_executor.ts";
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
