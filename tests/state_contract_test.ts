/**
 * The shared state's contract, run against both stores: the in-process one and Redis (Debian's
 * redis-server, a child of each test on loopback). Each Redis test opens two connections, one
 * per replica, so that what one replica writes is read through the other; the in-process store
 * plays both replicas with one instance.
 *
 * @module
 */
import { assert, assertEquals, assertMatch, assertRejects } from "./_assert.ts";
import { warnUnless } from "./_command.ts";
import { hasRedisServer, REDIS_MISSING, RedisServer } from "./_redis.ts";
import { CodeExecutorError } from "../src/errors.ts";
import { StateKeys } from "../src/state/keys.ts";
import { KeptStore } from "../src/state/kept_store.ts";
import { ConcurrencyShare, SharedRate } from "../src/state/limits.ts";
import { MemoryStateStore } from "../src/state/memory_store.ts";
import { PendingStore } from "../src/state/pending_store.ts";
import { RedisStateStore } from "../src/state/redis_store.ts";
import { OwnerMap, ReplicaRegistry } from "../src/state/replicas.ts";
import { SkillDocs } from "../src/state/skill_docs.ts";
import type { StateStore } from "../src/state/store.ts";
import { VaultStore } from "../src/state/vault_store.ts";
import {
  FORWARD_HEADER,
  ForwardRefused,
  signForward,
  verifyForward,
  type VerifyForwardOptions,
} from "../src/state/forward.ts";

const KEY = "a-test-secret-of-at-least-32-characters!";
const redis = warnUnless(await hasRedisServer(), REDIS_MISSING);

/** Two replicas' views of one store, and the keys they share. */
interface Cluster {
  a: StateStore;
  b: StateStore;
  keys: StateKeys;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function contract(name: string, fn: (cluster: Cluster) => Promise<void>): void {
  Deno.test(`${name} (memory)`, async () => {
    const store = new MemoryStateStore();
    try {
      await fn({ a: store, b: store, keys: await StateKeys.derive(KEY) });
    } finally {
      await store.close();
    }
  });
  Deno.test({
    name: `${name} (redis)`,
    ignore: !redis,
    fn: async () => {
      const server = new RedisServer();
      await server.start();
      const stores: StateStore[] = [];
      try {
        for (let i = 0; i < 2; i++) {
          stores.push(await RedisStateStore.connect({ url: server.url, timeoutMs: 2000 }));
        }
        await fn({ a: stores[0], b: stores[1], keys: await StateKeys.derive(KEY) });
      } finally {
        for (const store of stores) await store.close();
        await server.close();
      }
    },
  });
}

const bytes = (text: string) => new TextEncoder().encode(text);
const text = (value: Uint8Array | undefined) => value && new TextDecoder().decode(value);

contract(
  "StateStore: values expire, take() is one-shot, ifAbsent lets the first writer win",
  async ({ a, b }) => {
    assert(await a.set("k", bytes("one"), { ttlMs: 60_000 }));
    assertEquals(await b.set("k", bytes("two"), { ttlMs: 60_000, ifAbsent: true }), false);
    assertEquals((await b.get(["k", "missing"])).map(text), ["one", undefined]);
    const takes = await Promise.all([a.take("k"), b.take("k"), a.take("k")]);
    assertEquals(takes.map(text).filter(Boolean), ["one"]);
    await a.set("short", bytes("x"), { ttlMs: 50 });
    await a.set("renewed", bytes("y"), { ttlMs: 50 });
    await b.expire(["renewed"], 60_000);
    await sleep(120);
    assertEquals((await b.get(["short", "renewed"])).map(text), [undefined, "y"]);
    assertEquals([await a.increment("n"), await b.increment("n"), await a.counter("n")], [1, 2, 2]);
    assertEquals(await b.counter("none"), 0);
    await a.delete(["renewed", "n"]);
    assertEquals((await b.get(["renewed"]))[0], undefined);
  },
);

contract("StateStore: sorted sets add, range, pop once and trim", async ({ a, b }) => {
  assertEquals(await a.sortedAdd("z", [["x", 3], ["y", 1], ["w", 2]], 60_000), 3);
  assertEquals(await b.sortedRange("z", 2, Infinity), [["w", 2], ["x", 3]]);
  const pops = await Promise.all([a.sortedPop("z", 1), b.sortedPop("z", 1)]);
  assertEquals(pops.flat().map(([m]) => m).sort(), ["w", "y"]);
  assertEquals(await b.sortedTrim("z", 4), 0);
  await a.sortedAdd("z", [["q", 5]]);
  await b.sortedRemove("z", ["q"]);
  assertEquals(await a.sortedRange("z", -Infinity, Infinity), []);
});

contract(
  "StateStore.windowTake() allows limit takes in a sliding window and says when to retry",
  async ({ a, b }) => {
    const window = { limit: 2, windowMs: 400 };
    assertEquals(await a.windowTake("w", window), undefined);
    assertEquals(await b.windowTake("w", window), undefined);
    const wait = await a.windowTake("w", window);
    assert(wait !== undefined && wait > 0 && wait <= 400, `retry in ${wait} ms`);
    // A refused take is not counted: once the first two leave the window, two more fit.
    await sleep(450);
    assertEquals(await b.windowTake("w", window), undefined);
    assertEquals(await a.windowTake("w", window), undefined);
    assert(await b.windowTake("w", window) !== undefined);
  },
);

contract(
  "StateStore leases: at most max held, a renewal keeps one, an expired one frees its place",
  async ({ a, b }) => {
    const lease = (holder: string, ttlMs = 60_000) => ({ holder, max: 2, ttlMs });
    assert(await a.leaseTake("l", lease("h1")));
    assert(await b.leaseTake("l", lease("h2", 150)));
    assertEquals(await a.leaseTake("l", lease("h3")), false);
    assert(await a.leaseTake("l", lease("h1")), "a holder takes its own lease again");
    await b.leaseDrop("l", "h1");
    assert(await a.leaseTake("l", lease("h3")));
    await sleep(200);
    assertEquals(await b.leaseRenew("l", "h2", 150), false, "h2 expired");
    assert(await b.leaseTake("l", lease("h4")));
    assert(await a.leaseRenew("l", "h3", 60_000));
  },
);

contract(
  "StateStore budget: reservations and kept entries never pass max; the oldest kept go first",
  async ({ a, b }) => {
    const budget = { key: "bud", entryPrefixes: ["e1:", "e2:"] };
    const reserve = (store: StateStore, holder: string, n: number, leaseMs = 60_000) =>
      store.budgetReserve(budget, { holder, bytes: n, max: 100, leaseMs });
    assert(await reserve(a, "run1", 60));
    assertEquals(await reserve(b, "run2", 50), false, "reservations alone would pass max");
    await a.set("e1:old", bytes("text"), { ttlMs: 60_000 });
    await a.set("e2:old", bytes("header"), { ttlMs: 60_000 });
    const expires = await a.budgetKeep(budget, {
      holder: "run1",
      entry: "old",
      bytes: 60,
      ttlMs: 60_000,
    });
    assert(expires > Date.now());
    assertEquals(await b.budgetUse(budget), { kept: 60, reserved: 0 });
    assert(await reserve(b, "run2", 50), "the oldest kept entry is evicted for room");
    assertEquals(await a.get(["e1:old", "e2:old"]), [undefined, undefined]);
    assertEquals(await a.budgetUse(budget), { kept: 0, reserved: 50 });
    await b.budgetRelease(budget, "run2", 20);
    assertEquals(await a.budgetUse(budget), { kept: 0, reserved: 30 });
    // A reservation whose holder stops renewing (its replica died) gives its bytes back.
    assert(await reserve(a, "dead", 60, 100));
    await sleep(150);
    assertEquals(await b.budgetUse(budget), { kept: 0, reserved: 30 });
    await b.budgetRelease(budget, "run2");
    assertEquals(await a.budgetUse(budget), { kept: 0, reserved: 0 });
  },
);

contract(
  "VaultStore: a placeholder minted through one replica resolves through the other, for its principal only",
  async ({ a, b, keys }) => {
    const options = { ttlMs: 60_000, maxValuesPerPrincipal: 100 };
    const vaultA = new VaultStore(a, keys, options);
    const vaultB = new VaultStore(b, keys, options);
    const first = await vaultA.assign("alice", [
      { category: "email", value: "bob@example.org" },
      { category: "phone", value: "+1 202 555 0100" },
      { category: "email", value: "carol@example.org" },
      { category: "email", value: "bob@example.org" },
    ]);
    assertEquals(first, ["<email_1>", "<phone_1>", "<email_2>", "<email_1>"]);
    assertEquals(
      await vaultB.assign("alice", [{ category: "email", value: "carol@example.org" }]),
      ["<email_2>"],
    );
    const found = await vaultB.lookup("alice", ["<email_1>", "<phone_1>", "<email_9>"]);
    assertEquals(Object.fromEntries(found), {
      "<email_1>": "bob@example.org",
      "<phone_1>": "+1 202 555 0100",
    });
    assertEquals((await vaultA.lookup("mallory", ["<email_1>", "<phone_1>"])).size, 0);
    assertEquals(
      await vaultB.assign("mallory", [{ category: "email", value: "eve@example.org" }]),
      ["<email_1>"],
    );
    assertEquals(
      (await vaultA.lookup("alice", ["<email_1>"])).get("<email_1>"),
      "bob@example.org",
      "mallory's <email_1> is not alice's",
    );
    assertEquals([await vaultA.given("alice", "email"), await vaultB.given("carol", "email")], [
      2,
      0,
    ]);
  },
);

contract(
  "VaultStore: placeholders expire after their last use and the least recently used go past the bound",
  async ({ a, b, keys }) => {
    const short = new VaultStore(a, keys, { ttlMs: 150, maxValuesPerPrincipal: 100 });
    await short.assign("alice", [{ category: "email", value: "old@example.org" }]);
    await sleep(200);
    assertEquals((await short.lookup("alice", ["<email_1>"])).size, 0);
    assertEquals(await short.given("alice", "email"), 1, "the counter outlives the placeholder");
    assertEquals(
      await short.assign("alice", [{ category: "email", value: "old@example.org" }]),
      ["<email_2>"],
      "an expired placeholder's number is never given again",
    );
    const bounded = new VaultStore(b, keys, { ttlMs: 60_000, maxValuesPerPrincipal: 2 });
    await bounded.assign("bob", [{ category: "ip", value: "203.0.113.1" }]);
    await sleep(5);
    await bounded.assign("bob", [{ category: "ip", value: "203.0.113.2" }]);
    await sleep(5);
    await bounded.lookup("bob", ["<ip_1>"]);
    await sleep(5);
    await bounded.assign("bob", [{ category: "ip", value: "203.0.113.3" }]);
    assertEquals([...(await bounded.lookup("bob", ["<ip_1>", "<ip_2>", "<ip_3>"])).keys()].sort(), [
      "<ip_1>",
      "<ip_3>",
    ]);
  },
);

contract(
  "VaultStore: a lookup renews what it found behind its answer, and not again within a second",
  async ({ a, keys }) => {
    const vault = new VaultStore(a, keys, { ttlMs: 60_000, maxValuesPerPrincipal: 100 });
    const placeholders = await vault.assign("alice", [
      { category: "email", value: "often@example.org" },
      { category: "email", value: "twice@example.org" },
    ]);
    // The operations a lookup made, once its renewals (sent on the next immediate) are out.
    const operations = async (names: string[]) => {
      const before = a.stats.operations;
      assertEquals((await vault.lookup("alice", names)).size, names.length);
      await new Promise((resolve) => setTimeout(resolve, 0));
      return a.stats.operations - before;
    };
    const [often] = placeholders;
    assert(await operations([often]) >= 3, "the first lookup reads, renews and marks use");
    assertEquals(await operations([often]), 1, "resolved again at once: the read alone");
    assert(await operations(placeholders) >= 3, "one not renewed yet is renewed");
    assertEquals(await operations(placeholders), 1);
  },
);

contract(
  "VaultStore: two replicas giving one new value a placeholder at once agree on it",
  async ({ a, b, keys }) => {
    const options = { ttlMs: 60_000, maxValuesPerPrincipal: 100 };
    const item = { category: "email", value: "race@example.org" };
    const [fromA, fromB] = await Promise.all([
      new VaultStore(a, keys, options).assign("alice", [item]),
      new VaultStore(b, keys, options).assign("alice", [item]),
    ]);
    assertEquals(fromA, fromB);
    assertEquals(
      (await new VaultStore(b, keys, options).lookup("alice", fromA)).get(fromA[0]),
      item.value,
    );
  },
);

contract(
  "KeptStore: an output kept through one replica is read through the other, by its principal only",
  async ({ a, b, keys }) => {
    const options = { maxBytes: 1000, maxTotalBytes: 1000, ttlMs: 60_000 };
    const keptA = new KeptStore(a, keys, options);
    const keptB = new KeptStore(b, keys, options);
    const output = "x".repeat(300) + " bob@example.org";
    const size = bytes(output).length;
    assert(await keptA.reserve("run1", size, 60_000));
    const entry = await keptA.keep({
      holder: "run1",
      principal: "alice",
      part: "stdout",
      text: output,
      bytes: size,
    });
    assertMatch(entry.uri, /^code-executor:\/\/output\/[0-9a-f-]{36}$/);
    assertEquals((await keptB.read(entry.uri, "alice")).text, output);
    assertEquals((await keptB.read(entry.id, "alice")).part, "stdout");
    assertEquals((await keptB.list("alice")).map((e) => e.id), [entry.id]);
    assertEquals(await keptB.list("mallory"), []);
    const denied = await assertRejects(() => keptB.read(entry.id, "mallory"), CodeExecutorError);
    assertEquals(denied.type, "OutputAccessDenied");
    const missing = await assertRejects(() => keptA.read("no-such-id", "alice"), CodeExecutorError);
    assertEquals(missing.type, "OutputNotFound");
    assertEquals(await keptA.use(), { kept: size, reserved: 0 });
  },
);

contract(
  "KeptStore: the total cap is counted across replicas, evicting the oldest output",
  async ({ a, b, keys }) => {
    const options = { maxBytes: 600, maxTotalBytes: 1000, ttlMs: 60_000 };
    const keptA = new KeptStore(a, keys, options);
    const keptB = new KeptStore(b, keys, options);
    assertEquals(keptA.maxBytes, 600);
    const keep = async (store: KeptStore, run: string, n: number) => {
      assert(await store.reserve(run, n, 60_000), `${run} reserves ${n}`);
      return await store.keep({
        holder: run,
        principal: "alice",
        part: "stdout",
        text: "y".repeat(n),
        bytes: n,
      });
    };
    const first = await keep(keptA, "r1", 600);
    await sleep(5);
    const second = await keep(keptB, "r2", 300);
    assert(await keptB.reserve("r3", 400, 60_000), "room is made by evicting the oldest output");
    await assertRejects(() => keptB.read(first.id, "alice"), CodeExecutorError);
    assertEquals(
      await keptA.reserve("r4", 700, 60_000),
      false,
      "r3's reservation on the other replica leaves no room for r4",
    );
    const third = await keptB.keep({
      holder: "r3",
      principal: "alice",
      part: "stderr",
      text: "z".repeat(400),
      bytes: 400,
    });
    assertEquals((await keptA.read(second.id, "alice")).bytes, 300);
    assertEquals((await keptA.read(third.id, "alice")).part, "stderr");
    assertEquals(await keptA.use(), { kept: 700, reserved: 0 });
  },
);

contract(
  "PendingStore: a call refused through one replica is approved through another and used once",
  async ({ a, b, keys }) => {
    const pendingA = new PendingStore(a, keys);
    const pendingB = new PendingStore(b, keys);
    const call = { principal: "alice", fullName: "mcp__crm__delete", digest: "sha256:abc" };
    const shown = 'mcp__crm__delete {"email":"bob@example.org"}';
    const id = await pendingA.add(call, shown);
    assertMatch(id, /^ap_[0-9a-f]{16}$/);
    assertEquals(await pendingB.add(call, shown), id, "the same call again gets the same id");
    assert(await pendingB.active("alice"));
    assertEquals(await pendingB.active("mallory"), false);
    assertEquals((await pendingB.approve("mallory", [{ id, call: shown }]))[0].ok, false);
    assertEquals(
      (await pendingB.approve("alice", [{ id, call: shown + " " }]))[0].text,
      "`call` differs from the pending call; pass it verbatim",
    );
    assertEquals(await pendingA.take(call), false, "not approved yet");
    const [approved] = await pendingB.approve("alice", [{ id, call: shown }]);
    assertEquals(approved, {
      id,
      ok: true,
      text: shown,
      fullName: call.fullName,
      digest: call.digest,
    });
    assertEquals(
      (await pendingA.approve("alice", [{ id, call: shown }]))[0].text,
      "already approved",
    );
    assertEquals(await pendingA.take({ ...call, digest: "sha256:other" }), false);
    assertEquals(await pendingA.take({ ...call, principal: "mallory" }), false);
    const takes = await Promise.all([
      pendingA.take(call),
      pendingB.take(call),
      pendingA.take(call),
    ]);
    assertEquals(takes.filter(Boolean).length, 1, "used once, whichever replica asks first");
    assertEquals(await pendingB.active("alice"), false);
    assertEquals(
      (await pendingA.approve("alice", [{ id, call: shown }]))[0].text,
      "no such pending call (expired, used, or never made)",
    );
  },
);

contract(
  "PendingStore: pending calls are bounded per principal, the oldest first",
  async ({ a, keys }) => {
    const pending = new PendingStore(a, keys, { ttlMs: 60_000, maxPerPrincipal: 2 });
    const call = (n: number) => ({
      principal: "alice",
      fullName: "mcp__t__x",
      digest: `sha256:${n}`,
    });
    const ids = [];
    for (let n = 0; n < 3; n++) {
      ids.push(await pending.add(call(n), `call ${n}`));
      await sleep(5);
    }
    const results = await pending.approve("alice", ids.map((id, n) => ({ id, call: `call ${n}` })));
    assertEquals(results.map((r) => r.ok), [false, true, true]);
  },
);

contract(
  "SharedRate: executions per minute hold across replicas, per principal",
  async ({ a, b, keys }) => {
    const rateA = new SharedRate(a, keys, { perMinute: 3, scope: "principal" });
    const rateB = new SharedRate(b, keys, { perMinute: 3, scope: "principal" });
    const taken = [];
    for (const rate of [rateA, rateB, rateA, rateB]) taken.push(await rate.take("alice"));
    assertEquals(taken.slice(0, 3), [undefined, undefined, undefined]);
    assert(
      taken[3] !== undefined && taken[3] > 59_000 && taken[3] <= 60_000,
      `retry in ${taken[3]}`,
    );
    assertEquals(await rateB.take("bob"), undefined);
    assertEquals(
      await new SharedRate(a, keys, { perMinute: 3, scope: "server" }).take("alice"),
      undefined,
    );
    assertEquals(
      await new SharedRate(a, keys, { perMinute: 0, scope: "principal" }).take("alice"),
      undefined,
    );
  },
);

contract(
  "ConcurrencyShare: a principal's runs across replicas stay under max until one is released",
  async ({ a, b, keys }) => {
    // A lease long enough that a loaded machine's late timers do not let it lapse between renewals.
    const options = { max: 2, leaseMs: 1_000 };
    const shareA = new ConcurrencyShare(a, keys, options);
    const shareB = new ConcurrencyShare(b, keys, options);
    const one = await shareA.take("alice");
    const two = await shareB.take("alice");
    assert(one && two);
    assertEquals(await shareA.take("alice"), undefined);
    const other = await shareB.take("bob");
    assert(other);
    // Renewed every third of a lease: three lease lives later the places are still held.
    await sleep(3_100);
    assertEquals(await shareB.take("alice"), undefined);
    assert(one.held && two.held);
    await one.release();
    await one.release();
    const three = await shareB.take("alice");
    assert(three);
    for (const hold of [two, three, other]) await hold.release();
  },
);

contract(
  "ReplicaRegistry and OwnerMap: replicas find each other and the owner of a principal's live state",
  async ({ a, b, keys }) => {
    const registryA = new ReplicaRegistry(a, keys, { ttlMs: 150 });
    const registryB = new ReplicaRegistry(b, keys, { ttlMs: 150 });
    const beat = registryA.start({ id: "ce-0", address: "http://127.0.0.1:4000", intervalMs: 40 });
    try {
      await beat.first;
      await registryB.beat({ id: "ce-1", address: "http://127.0.0.1:4001" });
      assertEquals((await registryB.find("ce-0"))?.address, "http://127.0.0.1:4000");
      assertEquals((await registryA.list()).map((r) => r.id).sort(), ["ce-0", "ce-1"]);
      await sleep(250);
      assertEquals((await registryB.list()).map((r) => r.id), ["ce-0"], "ce-1 stopped beating");
    } finally {
      beat.stop();
    }
    await registryA.leave("ce-0");
    assertEquals(await registryB.find("ce-0"), undefined);

    const ownersA = new OwnerMap(a, keys);
    const ownersB = new OwnerMap(b, keys);
    const run = { kind: "parked-run" as const, id: "run-1", principal: "alice" };
    assert(await ownersA.claim(run, { replica: "ce-0", ttlMs: 60_000 }));
    assertEquals(await ownersB.claim(run, { replica: "ce-1", ttlMs: 60_000 }), false);
    assert(await ownersA.claim(run, { replica: "ce-0", ttlMs: 60_000 }), "the owner renews");
    assertEquals(await ownersB.owner(run), "ce-0");
    assertEquals(await ownersB.owner({ ...run, principal: "mallory" }), undefined);
    assertEquals(await ownersB.owner({ ...run, kind: "python-session" }), undefined);
    await ownersB.release(run);
    assertEquals(await ownersA.owner(run), undefined);
  },
);

contract(
  "verifyForward() takes a request signed by another replica once, and nothing altered or replayed",
  async ({ a, b, keys }) => {
    const request = { method: "POST", path: "/mcp", body: bytes('{"jsonrpc":"2.0"}') };
    const origin = { principal: "alice@example.org", from: "ce-0" };
    const header = await signForward(keys, request, origin);
    assert(!header.includes("alice"), "the principal is encoded, not in clear");
    assertEquals(await verifyForward(keys, header, request, { store: b }), origin);
    const refused = async (h: string, r = request, options: VerifyForwardOptions = { store: a }) =>
      (await assertRejects(() => verifyForward(keys, h, r, options), ForwardRefused)).message;
    assertMatch(await refused(header), /already received once/);
    const fresh = await signForward(keys, request, origin);
    assertMatch(
      await refused(fresh, { ...request, body: bytes('{"jsonrpc":"2.1"}') }),
      /MAC does not match/,
    );
    assertMatch(await refused(fresh, { ...request, path: "/mcp?x" }), /MAC does not match/);
    const parts = fresh.split(".");
    parts[3] = btoa("mallory").replaceAll("=", "");
    assertMatch(await refused(parts.join(".")), /MAC does not match/);
    const otherKeys = await StateKeys.derive("another-secret-of-at-least-32-characters");
    assertMatch(await refused(await signForward(otherKeys, request, origin)), /MAC does not match/);
    assertMatch(await refused("v1.1.2.3"), new RegExp(`${FORWARD_HEADER} is malformed`));
    const late = await signForward(keys, request, origin);
    await sleep(60);
    assertMatch(
      await refused(late, request, { store: a, windowMs: 20 }),
      /outside the 20 ms window/,
    );
  },
);

contract(
  "SkillDocs: saves through two replicas at once get distinct versions, within the caps",
  async ({ a, b, keys }) => {
    const docsA = new SkillDocs(a, keys);
    const docsB = new SkillDocs(b, keys);
    const limits = { maxVersions: 5, maxNames: 2 };
    const before = await docsA.generation();
    const saved = await Promise.all(
      [docsA, docsB, docsA, docsB].map((docs, i) =>
        docs.save("principal:http:alice", "greet", { code: `return ${i}` }, limits)
      ),
    );
    assertEquals(saved.map((s) => "version" in s ? s.version : 0).sort(), [1, 2, 3, 4]);
    assertEquals(await docsB.versions("principal:http:alice", "greet"), [1, 2, 3, 4]);
    assert(await docsB.generation() >= before + 4, "every save moves the generation");
    const latest = await docsB.latest("principal:http:alice");
    assertEquals(latest.map((d) => [d.name, d.version]), [["greet", 4]]);
    assertEquals((await docsA.get("principal:http:alice", "greet", 2))?.version, 2);
    assertEquals(await docsA.save("principal:http:alice", "greet", {}, limits), { version: 5 });
    assertEquals(await docsB.save("principal:http:alice", "greet", {}, limits), {
      refused: "versions",
      count: 5,
    });
    await docsA.save("principal:http:alice", "other", {}, limits);
    assertEquals(await docsB.save("principal:http:alice", "third", {}, limits), {
      refused: "names",
      count: 2,
    });
    // Another scope (principal) sees none of it.
    assertEquals(await docsB.latest("principal:http:bob"), []);
    assertEquals(await docsB.get("principal:http:bob", "greet"), undefined);
    assert(await docsB.remove("principal:http:alice", "greet"));
    assertEquals(await docsA.versions("principal:http:alice", "greet"), []);
    assertEquals(await docsA.save("principal:http:alice", "greet", {}, limits), { version: 1 });
    assertEquals(await docsA.remove("principal:http:bob", "greet"), false);
  },
);

contract(
  "PendingStore: a claim may repeat the call as the client saw it, and is put back unapproved when that cannot be told",
  async ({ a, b, keys }) => {
    const storeA = new PendingStore(a, keys);
    const storeB = new PendingStore(b, keys);
    const call = { principal: "alice", fullName: "mcp__crm__email", digest: "sha256:ab" };
    const shown = 'mcp__crm__email {"to":"jane@example.org"}';
    const seen = 'mcp__crm__email {"to":"<email_1>"}';
    const id = await storeA.add(call, shown);
    const failing = () => Promise.reject(new CodeExecutorError("StateUnavailable", "away"));
    await assertRejects(() => storeB.approve("alice", [{ id, call: seen }], failing));
    assertEquals(await storeA.take(call), false, "an approval was assumed");
    const forms = (text: string) =>
      Promise.resolve([text, text.replace("jane@example.org", "<email_1>")]);
    const [result] = await storeB.approve("alice", [{ id, call: seen }], forms);
    assertEquals(result.ok, true, result.text);
    assertEquals(await storeA.take(call), true);
    assertEquals(await storeB.take(call), false, "used once");
  },
);
