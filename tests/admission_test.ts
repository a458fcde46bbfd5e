import { assertEquals, assertRejects } from "./_assert.ts";
import { resolveSettings } from "../src/config/settings.ts";
import { CodeExecutorError } from "../src/errors.ts";
import { Admission } from "../src/exec/admission.ts";

function admission(limits: Record<string, number>): Admission {
  return new Admission(resolveSettings({ limits }));
}

/** Lets queued grants run. */
const tick = () => new Promise((resolve) => setTimeout(resolve, 0));

Deno.test("Admission.enter() gives a free slot to the waiting principal with the fewest runs", async () => {
  const slots = admission({ maxConcurrent: 2 });
  const order: string[] = [];
  const a1 = await slots.enter("a");
  const a2 = await slots.enter("a");
  // a queues three more before b asks for one: b must not wait behind all of a's.
  const waiting = ["a", "a", "a", "b"].map((principal, i) =>
    slots.enter(principal).then((release) => {
      order.push(`${principal}${i}`);
      return release;
    })
  );
  await tick();
  a1();
  await tick();
  assertEquals(order, ["b3"]);
  a2();
  await tick();
  assertEquals(order, ["b3", "a0"]);
  for (const granted of waiting) (await granted)();
  assertEquals(order, ["b3", "a0", "a1", "a2"]);
});

Deno.test("Admission.enter() lets a lone principal use every slot", async () => {
  const slots = admission({ maxConcurrent: 3 });
  const granted: number[] = [];
  const entering = [0, 1, 2].map((i) =>
    slots.enter("a").then((release) => {
      granted.push(i);
      return release;
    })
  );
  await tick();
  assertEquals(granted, [0, 1, 2], "a lone principal waited while a slot was free");
  // The three hold every slot: a fourth waits until one of them is released.
  let fourth = false;
  const queued = slots.enter("a").then((release) => {
    fourth = true;
    return release;
  });
  await tick();
  assertEquals(fourth, false, "a fourth run got a slot past limits.maxConcurrent");
  const [first, ...rest] = await Promise.all(entering);
  first();
  (await queued)();
  assertEquals(fourth, true);
  for (const release of rest) release();
});

Deno.test("Admission.enter() holds a principal to limits.principalMaxConcurrent", async () => {
  const slots = admission({ maxConcurrent: 3, principalMaxConcurrent: 1 });
  // Shares hold for HTTP principals (local is alone in its process and may use every slot).
  const first = await slots.enter("http:a");
  let second = false;
  const queued = slots.enter("http:a").then((release) => {
    second = true;
    return release;
  });
  const other = await slots.enter("http:b");
  await tick();
  assertEquals(second, false, "a ran two at once past its cap while a slot was free");
  first();
  (await queued)();
  other();
  assertEquals(second, true);
});

Deno.test("Admission.enter() caps each principal's queue and rate on its own", async () => {
  const slots = admission({ maxConcurrent: 1, maxQueued: 1, principalExecutionsPerMinute: 3 });
  const running = await slots.enter("a");
  const queued = slots.enter("a");
  const refused = await assertRejects(() => slots.enter("a"), CodeExecutorError);
  assertEquals(refused.type, "QueueFullError");
  // b has a queue of its own.
  const other = slots.enter("b");
  running();
  (await queued)();
  (await other)();
  const rated = await assertRejects(() => slots.enter("a"), CodeExecutorError);
  assertEquals(rated.type, "RateLimitError");
  (await slots.enter("b"))();
});

Deno.test("Admission.enter() reports a queued run's cancellation with the signal's reason", async () => {
  const slots = admission({ maxConcurrent: 1 });
  const running = await slots.enter("a");
  const controller = new AbortController();
  const queued = slots.enter("b", controller.signal);
  controller.abort(new CodeExecutorError("ShuttingDown", "The server is shutting down"));
  const error = await assertRejects(() => queued, CodeExecutorError);
  assertEquals(error.type, "ShuttingDown");
  running();
});
