/**
 * Store faults with replicas serving (`state.url`): a store that is not there at the start stops
 * the start with a message naming it; one killed under load and started again (empty, as a store
 * without persistence comes back) leaves runs that need no shared state unaffected, fails what
 * needs it with `StateUnavailable` (no placeholder passed on unresolved, no value shown
 * unreplaced, no approval assumed), is used again without a restart of any replica, and answers
 * "expired" for what it lost, never another principal's data; one that stops answering (SIGSTOP)
 * fails what needs it after `state.timeoutMs`.
 *
 * @module
 */
import type { Client } from "@modelcontextprotocol/client";
import { assert, assertEquals, assertMatch, assertRejects, type RunResult } from "./_assert.ts";
import { warnUnless } from "./_command.ts";
import { callRun } from "./_client.ts";
import { startHttpServer } from "./_http_server.ts";
import { eventually } from "./_proc.ts";
import { hasPrometheusParser, histogramOf, PARSER_MISSING, scrape, valueOf } from "./_metrics.ts";
import { freePort, hasRedisServer, REDIS_MISSING } from "./_redis.ts";
import {
  type Cluster,
  CUSTOMERS,
  DELETE_ZED,
  KEY,
  OBSERVE,
  ok,
  placeholderOf,
  PRINT_CUSTOMERS,
  SEED,
  startCluster,
} from "./_state_cluster.ts";

const redis = warnUnless(await hasRedisServer(), REDIS_MISSING);
const parser = warnUnless(await hasPrometheusParser(), PARSER_MISSING);

/** A run that needs no shared state: arithmetic and a tool call whose answer holds no value. */
const PLAIN = (n: number) =>
  `const r = await callMCPTool("mcp__memory__search_nodes", { query: "Zed" });
return [${n} * 2, JSON.stringify(r).includes("Zed")];`;

/** A plain run's result, and when it was started and answered (`performance.now()`). */
type Timed = { n: number; result: RunResult; started: number; ended: number };

/** Runs {@linkcode PLAIN} on each client, one after another, until stopped; every result kept. */
function load(clients: Client[]): { stop(): Promise<Timed[]> } {
  let stopping = false;
  const results: Timed[] = [];
  let next = 0;
  const loops = clients.map(async (client) => {
    while (!stopping) {
      const n = next++;
      const started = performance.now();
      const result = await callRun(client, "run_typescript", PLAIN(n));
      results.push({ n, result, started, ended: performance.now() });
    }
  });
  return {
    async stop() {
      stopping = true;
      await Promise.all(loops);
      return results;
    },
  };
}

function assertPlainResults(results: Timed[]): void {
  const wrong = results.filter(({ n, result }) =>
    result.error !== undefined ||
    JSON.stringify(result.returnValue) !== JSON.stringify([n * 2, true])
  );
  assertEquals(
    wrong.map(({ n, result }) => `${n}: ${JSON.stringify(result.error ?? result.returnValue)}`),
    [],
  );
}

async function unavailable(client: Client, code: string): Promise<RunResult> {
  const result = await callRun(client, "run_typescript", code);
  const type = result.error?.type ?? (result.returnValue as string[] | undefined)?.[0];
  assertEquals(type, "StateUnavailable", JSON.stringify(result));
  return result;
}

Deno.test({
  name:
    "state.url: a store that cannot be reached at the start stops serve with a message naming it",
  ignore: !redis,
  async fn() {
    const port = freePort();
    const error = await assertRejects(
      () =>
        startHttpServer({
          settings: { state: { url: `redis://127.0.0.1:${port}`, key: KEY } },
          readyTimeoutMs: 30_000,
        }),
      Error,
    );
    assertMatch(
      error.message,
      new RegExp(
        `Cannot start: the shared state store redis://127\\.0\\.0\\.1:${port} \\(state\\.url, CODE_EXECUTOR_STATE_URL\\) is unreachable`,
      ),
    );
  },
});

Deno.test({
  name:
    "state.url: a store killed under load and started again: plain runs go on, shared state fails closed, then comes back without a restart, 'expired'",
  ignore: !redis,
  async fn(t) {
    const cluster: Cluster = await startCluster({ privacy: { tokenize: true } });
    const memory = (i: number) => Deno.readTextFile(cluster.memoryFiles[i]).catch(() => "");
    try {
      const alice = [await cluster.client("alice", 0), await cluster.client("alice", 1)];
      const bob = await cluster.client("bob", 1);
      const modern = await cluster.client("alice", 1, "modern");
      for (const client of alice) await ok(client, SEED);
      const email = placeholderOf(
        (await ok(alice[0], PRINT_CUSTOMERS)).stdout,
        "Customer Jane",
        "email",
      );
      const kept = await ok(
        alice[0],
        `console.log("k".repeat(${200 * 1024}));`,
      );
      const uri = kept.outputs?.[0].uri;
      assert(uri, JSON.stringify(kept));
      await ok(
        alice[0],
        `await skills.save({ name: "twice", description: "Doubles", code: "return 2 * args.n" });`,
      );
      const running = load([...alice, bob]);
      const down = { from: Infinity, to: -Infinity };

      await t.step("with the store killed, what needs it fails with StateUnavailable", async () => {
        await cluster.store.kill();
        down.from = performance.now();
        const stolen = await unavailable(alice[1], OBSERVE(`while down ${email}`));
        assertMatch(
          stolen.error!.message,
          /shared state store redis:\/\/127\.0\.0\.1:\d+ is unreachable/,
        );
        assert(!(await memory(1)).includes("while down"), "a placeholder was passed on unresolved");
        const shown = await unavailable(alice[0], `return "${CUSTOMERS[0].email}";`);
        assert(!JSON.stringify(shown).includes(CUSTOMERS[0].email), JSON.stringify(shown));
        const approval = await callRun(alice[0], "run_typescript", DELETE_ZED);
        assertEquals((approval.returnValue as string[])[0], "StateUnavailable");
        assertMatch(await memory(0), /"name":"Zed"/);
        const read = await assertRejects(() => alice[1].readResource({ uri }), Error);
        assertMatch(read.message, /shared state store/);
        await unavailable(
          alice[1],
          `try { return await skills.twice({ n: 2 }); } catch (e) { return [e.name]; }`,
        );
        const approve = await modern.callTool({
          name: "approve_pending_calls",
          arguments: { calls: [{ id: "ap_0000000000000000", call: "x" }] },
        });
        assertEquals(approve.isError, true);
        assertMatch(JSON.stringify(approve.content), /StateUnavailable|shared state store/);
      });

      await t.step(
        "started again, the store is used without a restart, and what it lost is expired",
        async () => {
          down.to = performance.now();
          await cluster.store.start();
          // Listing skills needs the store and gives no placeholder (which would give the lost
          // numbers anew).
          const back = await eventually(async () => {
            const result = await callRun(alice[1], "run_typescript", "return await skills.list();");
            return result.error === undefined;
          }, 30_000);
          assert(back, "the replicas did not use the store again");
          const lost = await callRun(alice[1], "run_typescript", OBSERVE(`after ${email}`));
          assertEquals(lost.error?.type, "PlaceholderError", JSON.stringify(lost));
          assertMatch(lost.error!.message, /expired/);
          assert(!(await memory(1)).includes("after <"), "a placeholder was passed on unresolved");
          const gone = await assertRejects(() => alice[0].readResource({ uri }), Error);
          assertMatch(gone.message, /No kept output/);
          const skill = await callRun(
            alice[0],
            "run_typescript",
            `try { return await skills.twice({ n: 2 }); } catch (e) { return e.name; }`,
          );
          assertEquals(skill.returnValue, "SkillNotFound");
          // Numbers start again from 1 for each principal: Alice's new <email_1> is not Bob's.
          const fresh = placeholderOf(
            (await ok(alice[0], PRINT_CUSTOMERS)).stdout,
            "Customer Jane",
            "email",
          );
          const theirs = await callRun(bob, "run_typescript", OBSERVE(`bob has ${fresh}`));
          assertEquals(theirs.error?.type, "PlaceholderError", JSON.stringify(theirs));
          assertEquals((await ok(alice[1], OBSERVE(`again ${fresh}`))).returnValue, "stored");
          assert((await memory(1)).includes(`again ${CUSTOMERS[0].email}`));
        },
      );

      await t.step(
        "a store that stops answering fails what needs it after state.timeoutMs",
        async () => {
          cluster.store.pause();
          try {
            const slow = await unavailable(alice[0], `return "${CUSTOMERS[1].email}";`);
            assertMatch(slow.error!.message, /did not answer within 2000 ms \(state\.timeoutMs\)/);
          } finally {
            cluster.store.resume();
          }
          const back = await eventually(
            async () =>
              (await callRun(alice[0], "run_typescript", PRINT_CUSTOMERS)).error === undefined,
            30_000,
          );
          assert(back, "the store was not used again after it went on");
        },
      );

      await t.step({
        name: "/metrics counts the store's round trips and the failures it saw",
        ignore: !parser,
        fn: async () => {
          const url = new URL("/metrics", cluster.replicas[0].url);
          const families = await scrape(url, cluster.tokens.alice);
          const labels = { store: "redis" };
          const operations = valueOf(families, "code_executor_store_operations_total", labels);
          const failures = valueOf(families, "code_executor_store_failures_total", labels);
          assert(operations !== undefined && operations > 0, `operations ${operations}`);
          assert(failures !== undefined && failures > 0, `failures ${failures}`);
          const trips = histogramOf(families, "code_executor_store_round_trip_seconds", labels);
          assert(trips.count > 0, `round trips ${trips.count}`);
        },
      });

      const results = await running.stop();
      assertPlainResults(results);
      // Some of them ran start to end while the store was down.
      const whileDown = results.filter((r) => r.started >= down.from && r.ended <= down.to);
      assert(whileDown.length > 0, `${results.length} plain runs, none while the store was down`);
    } finally {
      await cluster.close();
    }
  },
});
