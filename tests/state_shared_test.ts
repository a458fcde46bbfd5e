/**
 * What replicas share through the store (`state.url`), end to end: a real redis-server on
 * loopback, `serve --http` replicas each with its own HOME and TMPDIR (no shared disk, as on
 * separate machines) and its own server-memory (its data file read directly by the test), two
 * principals (a tokens file), and real SDK clients that each talk to one replica, so that every
 * crossing below is one replica reading what another wrote: placeholders, kept outputs, pending
 * approvals, skills and the limits across the cluster. Then the store's keys and values are read
 * one by one, and hold none of the values, tokens or principals in a recognisable form.
 *
 * @module
 */
import { assert, assertEquals, assertMatch, assertRejects } from "./_assert.ts";
import { warnUnless } from "./_command.ts";
import { callRun } from "./_client.ts";
import { eventually } from "./_proc.ts";
import { dumpStore, hasRedisServer, REDIS_MISSING, secretForms } from "./_redis.ts";
import {
  claimOf,
  CUSTOMERS,
  DELETE_ZED,
  OBSERVE,
  ok,
  placeholderOf,
  PRINT_CUSTOMERS,
  SEED,
  SEED_NAMES,
  startCluster,
} from "./_state_cluster.ts";

const redis = warnUnless(await hasRedisServer(), REDIS_MISSING);

const text = (result: { content?: unknown }) => JSON.stringify(result.content);

Deno.test({
  name:
    "state.url: placeholders, kept outputs, approvals and skills cross replicas for their principal only, and the store holds nothing recognisable",
  ignore: !redis,
  async fn(t) {
    const cluster = await startCluster({
      privacy: { tokenize: true },
      limits: { maxOutputBytes: 4096 },
      outputs: { maxTotalBytes: 50_000 },
    });
    const { memoryFiles } = cluster;
    const memory = (i: number) => Deno.readTextFile(memoryFiles[i]).catch(() => "");
    try {
      const alice = [await cluster.client("alice", 0), await cluster.client("alice", 1)];
      const bob = [await cluster.client("bob", 0), await cluster.client("bob", 1)];
      // A value first, so that Jane's address is not <email_1>, which a replica with a vault of
      // its own would also give the first address it saw; replica 1 never sees the values
      // itself (its memory holds the names only).
      const first = await ok(alice[0], `return "first.one@example.org";`);
      assertEquals(first.returnValue, "<email_1>");
      await ok(alice[0], SEED);
      await ok(alice[1], SEED_NAMES);

      await t.step("a placeholder minted on one replica resolves on another", async () => {
        const printed = await ok(alice[0], PRINT_CUSTOMERS);
        for (const c of CUSTOMERS) assert(!printed.stdout.includes(c.email), printed.stdout);
        const email = placeholderOf(printed.stdout, "Customer Jane", "email");
        const phone = placeholderOf(printed.stdout, "Customer Omar", "phone");
        assertEquals(email, "<email_2>");

        assertEquals(
          (await ok(alice[1], OBSERVE(`reached at ${email} and ${phone}`))).returnValue,
          "stored",
        );
        assert(
          (await memory(1)).includes(`reached at ${CUSTOMERS[0].email} and ${CUSTOMERS[1].phone}`),
          await memory(1),
        );
        // The other replica gives the same value the same placeholder when it reads it back.
        const again = await ok(alice[1], PRINT_CUSTOMERS);
        assertMatch(again.stdout, new RegExp(`Customer Jane: reached at ${email} and ${phone}`));

        // Another principal's placeholder is refused on every replica, and nothing is written.
        for (const [i, client] of bob.entries()) {
          const stolen = await callRun(client, "run_typescript", OBSERVE(`bob saw ${email}`));
          assertEquals(stolen.error?.type, "PlaceholderError", JSON.stringify(stolen));
          assertMatch(stolen.error!.message, /never given it/);
          assert(!(await memory(i)).includes("bob saw"), `replica ${i} wrote bob's call`);
        }
      });

      await t.step(
        "a kept output is read through the other replica, by its principal only",
        async () => {
          const big = (tag: string) =>
            `for (let i = 0; i < 400; i++) console.log("${tag} line " + i + " " + "x".repeat(40));`;
          const kept = await ok(alice[0], big("first"));
          const output = kept.outputs?.[0];
          assert(output, JSON.stringify(kept));
          const read = await alice[1].readResource({ uri: output.uri });
          const whole = (read.contents[0] as { text: string }).text;
          assertEquals(whole.split("\n").length, 401);
          assertMatch(whole, /^first line 0 x+\n/);
          // From code on the other replica too.
          const fromCode = await ok(alice[1], `return (await readOutput("${output.id}")).length;`);
          assertEquals(fromCode.returnValue, whole.length);
          const listed = (await alice[1].listResources()).resources.map((r) => r.uri);
          assert(listed.includes(output.uri), listed.join());

          for (const client of bob) {
            const error = await assertRejects(
              () => client.readResource({ uri: output.uri }),
              Error,
            );
            assertMatch(error.message, /belongs to another principal/);
            const theirs = (await client.listResources()).resources.map((r) => r.uri);
            assert(!theirs.includes(output.uri), theirs.join());
          }

          // outputs.maxTotalBytes holds across the cluster: two more kept through both replicas
          // leave no room for the first.
          const second = await ok(alice[1], big("second"));
          const third = await ok(alice[0], big("third"));
          assert(second.outputs?.[0] && third.outputs?.[0]);
          const gone = await assertRejects(() => alice[1].readResource({ uri: output.uri }), Error);
          assertMatch(gone.message, /No kept output/);
          await alice[1].readResource({ uri: third.outputs[0].uri });
        },
      );

      await t.step(
        "an image past the cap is kept with its type and served through the other replica",
        async () => {
          // A PNG's signature and random bytes: the host checks the signature, not the pixels.
          const shown = await ok(
            alice[0],
            `const png = new Uint8Array(6000);
crypto.getRandomValues(png.subarray(8));
png.set([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
await display(png, "image/png");
return new Uint8Array(await crypto.subtle.digest("SHA-256", png)).toHex();`,
          );
          const kept = shown.outputs?.find((output) => output.part === "image");
          assert(kept, JSON.stringify(shown));
          const read = await alice[1].readResource({ uri: kept.uri });
          const contents = read.contents[0] as { mimeType: string; blob: string };
          assertEquals(contents.mimeType, "image/png");
          const bytes = Uint8Array.fromBase64(contents.blob);
          assertEquals(bytes.length, 6000);
          const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes)).toHex();
          assertEquals(digest, shown.returnValue);
          const stolen = await assertRejects(() => bob[1].readResource({ uri: kept.uri }), Error);
          assertMatch(stolen.message, /belongs to another principal/);
        },
      );

      await t.step(
        "a pending approval made through one replica is approved through another and used once",
        async () => {
          const refused = await callRun(alice[0], "run_typescript", DELETE_ZED);
          const [type, message] = refused.returnValue as string[];
          assertEquals(type, "ApprovalDenied", JSON.stringify(refused));
          const claim = claimOf(message);

          // A 2026-07-28 client on the other replica is offered the tool (the principal has a call
          // pending in the store) and approves; another principal can do neither.
          const bobModern = await cluster.client("bob", 1, "modern");
          const bobTools = (await bobModern.listTools()).tools.map((tool) => tool.name);
          assert(!bobTools.includes("approve_pending_calls"), bobTools.join());
          const modern = await cluster.client("alice", 1, "modern");
          const tools = (await modern.listTools()).tools.map((tool) => tool.name);
          assert(tools.includes("approve_pending_calls"), tools.join());
          const stolen = await bobModern.callTool({
            name: "approve_pending_calls",
            arguments: claim,
          })
            .catch((error: Error) => ({ isError: true, content: [{ text: error.message }] }));
          assertEquals(stolen.isError, true);
          const approved = await modern.callTool({
            name: "approve_pending_calls",
            arguments: claim,
          });
          assertEquals(approved.isError, false, text(approved));

          // Both replicas make the approved call at once: one goes through, the other is refused.
          const raced = await Promise.all(
            alice.map((c) => callRun(c, "run_typescript", DELETE_ZED)),
          );
          const outcomes = raced.map((r) =>
            r.returnValue === "deleted" ? "deleted" : r.returnValue
          );
          assertEquals(outcomes.filter((o) => o === "deleted").length, 1, JSON.stringify(outcomes));
          const other = outcomes.find((o) => o !== "deleted") as string[];
          assertEquals(other[0], "ApprovalDenied");
          const deletedOn = raced.findIndex((r) => r.returnValue === "deleted");
          assert(!(await memory(deletedOn)).includes('"name":"Zed"'), await memory(deletedOn));
          assertMatch(await memory(1 - deletedOn), /"name":"Zed"/);
        },
      );

      await t.step(
        "a skill saved through one replica is listed, found and called through the other",
        async () => {
          const saved = await ok(
            alice[0],
            `return await skills.save({
            name: "greet",
            description: "Greets someone by name for the shared-state test",
            inputSchema: { type: "object", properties: { who: { type: "string" } }, required: ["who"] },
            code: "return 'hello ' + args.who",
          });`,
          );
          assertEquals((saved.returnValue as { version: number }).version, 1);
          const called = await ok(
            alice[1],
            `return [await skills.greet({ who: "Ada" }), (await skills.list()).map((s) => s.name)];`,
          );
          assertEquals(called.returnValue, ["hello Ada", ["greet"]]);
          const found = await alice[1].callTool({
            name: "search_tools",
            arguments: { query: "greets someone" },
          });
          assertMatch(text(found), /greet/);
          // A new version through the other replica is seen by the first.
          await ok(
            alice[1],
            `await skills.save({ name: "greet", description: "Greets", code: "return 'hi ' + args.who" });`,
          );
          assertEquals(
            (await ok(alice[0], `return await skills.greet({ who: "Bo" });`)).returnValue,
            "hi Bo",
          );

          for (const client of bob) {
            const theirs = await callRun(
              client,
              "run_typescript",
              `try { return await skills.call("greet", { who: "x" }); } catch (e) { return e.name; }`,
            );
            assertEquals(theirs.returnValue, "SkillNotFound");
          }
        },
      );

      await t.step("no key or value of the store holds a value, token or principal", async () => {
        const dump = await dumpStore(cluster.store.url);
        assert(dump.length > 20, `${dump.length} keys and members`);
        const secrets = [
          ...CUSTOMERS.flatMap((c) => [c.email, c.phone]),
          cluster.tokens.alice,
          cluster.tokens.bob,
          "http:alice",
          "http:bob",
          "hello ' + args.who",
          "first line 0",
        ];
        const found: string[] = [];
        for (const secret of secrets) {
          for (const [form, needle] of secretForms(secret)) {
            if (dump.some((blob) => blob.includes(needle))) found.push(`${form} of ${secret}`);
          }
        }
        assertEquals(found, []);
      });
    } finally {
      await cluster.close();
    }
  },
});

Deno.test({
  name:
    "state.url: executions per minute and the concurrency share of a principal hold across replicas, and are never assumed while the store is gone",
  ignore: !redis,
  async fn() {
    const cluster = await startCluster({
      limits: { principalExecutionsPerMinute: 3, principalMaxConcurrent: 1 },
    });
    try {
      const alice = [await cluster.client("alice", 0), await cluster.client("alice", 1)];
      const bob = [await cluster.client("bob", 0), await cluster.client("bob", 1)];
      for (const i of [0, 1, 0]) await ok(alice[i], "return 1");
      const fourth = await callRun(alice[1], "run_typescript", "return 1");
      assertEquals(fourth.error?.type, "RateLimitError", JSON.stringify(fourth));
      assertMatch(
        fourth.error!.message,
        /limits\.principalExecutionsPerMinute, across the replicas/,
      );

      // Bob's own count, and his one place at a time: his run on replica 1 starts only after his
      // run on replica 0, which holds the place, has ended.
      const holding = callRun(
        bob[0],
        "run_typescript",
        `await callMCPTool("mcp__memory__create_entities", { entities: [{ name: "holding", entityType: "t", observations: [] }] });
         await new Promise((r) => setTimeout(r, 1500));
         return Date.now();`,
      );
      const held = await eventually(
        async () =>
          (await Deno.readTextFile(cluster.memoryFiles[0]).catch(() => "")).includes("holding"),
        60_000,
      );
      assert(held, "bob's first run never started");
      const waiting = await callRun(bob[1], "run_typescript", "return Date.now();");
      const first = await holding;
      assertEquals(first.error, undefined, JSON.stringify(first));
      assertEquals(waiting.error, undefined, JSON.stringify(waiting));
      assert(
        (waiting.returnValue as number) >= (first.returnValue as number),
        `the second run started at ${waiting.returnValue}, before the first ended at ${first.returnValue}`,
      );

      // A limit that is set is never assumed: with the store gone, runs are refused, and counted
      // again (from nothing: the store restarted empty) once it is back, without a restart.
      await cluster.store.kill();
      const uncounted = await callRun(bob[0], "run_typescript", "return 1");
      assertEquals(uncounted.error?.type, "StateUnavailable", JSON.stringify(uncounted));
      assertMatch(uncounted.error!.message, /shared state store redis:\/\/127\.0\.0\.1:\d+/);
      await cluster.store.start();
      const back = await eventually(
        async () => (await callRun(alice[1], "run_typescript", "return 1")).error === undefined,
        30_000,
      );
      assert(back, "runs were not admitted again once the store was back");
    } finally {
      await cluster.close();
    }
  },
});
