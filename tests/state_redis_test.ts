/**
 * The shared state on a real redis-server under faults: a store that is not there at start, one
 * killed and started again while serving, one stopped (SIGSTOP); and what the store holds, read
 * key by key, against the personal values, tokens and principals written through it.
 *
 * @module
 */
import { createHash } from "node:crypto";
import { join } from "node:path";
import { assert, assertEquals, assertMatch, assertRejects } from "./_assert.ts";
import { warnUnless } from "./_command.ts";
import {
  dumpStore,
  freePort,
  hasRedisServer,
  REDIS_MISSING,
  RedisServer,
  secretForms,
} from "./_redis.ts";
import { loadSettings, resolveSettings, SettingsError } from "../src/config/settings.ts";
import { CodeExecutorError } from "../src/errors.ts";
import { signForward, verifyForward } from "../src/state/forward.ts";
import { StateKeys } from "../src/state/keys.ts";
import { ConcurrencyShare } from "../src/state/limits.ts";
import { RedisStateStore } from "../src/state/redis_store.ts";
import { openSharedState, type SharedState } from "../src/state/shared_state.ts";

const KEY = "a-test-secret-of-at-least-32-characters!";
const redis = warnUnless(await hasRedisServer(), REDIS_MISSING);

function settingsFor(url: string, timeoutMs = 300) {
  return resolveSettings({
    state: { url, key: KEY, timeoutMs },
    limits: { principalExecutionsPerMinute: 5, principalMaxConcurrent: 2 },
  });
}

async function withState(
  fn: (server: RedisServer, state: SharedState) => Promise<void>,
  timeoutMs?: number,
): Promise<void> {
  const server = new RedisServer();
  await server.start();
  let state: SharedState | undefined;
  try {
    state = await openSharedState(settingsFor(server.url, timeoutMs));
    await fn(server, state);
  } finally {
    await state?.close();
    await server.close();
  }
}

async function unavailable(fn: () => Promise<unknown>): Promise<string> {
  const error = await assertRejects(fn, CodeExecutorError);
  assertEquals(error.type, "StateUnavailable", error.message);
  return error.message;
}

/** Retries an operation until the store answers again (bounded: a guard, not an assertion). */
async function whenBack<T>(fn: () => Promise<T>): Promise<T> {
  for (let i = 0;; i++) {
    try {
      return await fn();
    } catch (error) {
      if (i > 200 || (error as CodeExecutorError).type !== "StateUnavailable") throw error;
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  }
}

Deno.test("loadSettings() refuses state.url without state.key, and takes the key from the environment", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const env = { HOME: dir, CODE_EXECUTOR_STATE_URL: "redis://127.0.0.1:6379" };
    const error = await assertRejects(() => loadSettings({ env, cwd: dir }), SettingsError);
    assertMatch(error.message, /Missing setting "state\.key".*CODE_EXECUTOR_STATE_KEY/);
    await Deno.writeTextFile(
      join(dir, ".code-executor.jsonc"),
      '{ "state": { "url": "rediss://user:pw@store.internal:6380/2" } }',
    );
    const { settings } = await loadSettings({
      env: { HOME: dir, CODE_EXECUTOR_STATE_KEY: KEY, CODE_EXECUTOR_STATE_TIMEOUT_MS: "250" },
      cwd: dir,
    });
    assertEquals(settings.state, {
      url: "rediss://user:pw@store.internal:6380/2",
      key: KEY,
      timeoutMs: 250,
    });
    const bad = await assertRejects(
      () => loadSettings({ env: { ...env, CODE_EXECUTOR_STATE_URL: "http://x" }, cwd: dir }),
      SettingsError,
    );
    assertMatch(bad.message, /state\.url.*redis:\/\/ or rediss:\/\//);
    assertEquals(resolveSettings({}).state, { timeoutMs: 1000 });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test({
  name:
    "openSharedState() refuses to start when the store is unreachable, naming it without its password",
  ignore: !redis,
  fn: async () => {
    const port = freePort();
    const message = await unavailable(() =>
      openSharedState(settingsFor(`redis://ce:hunter2-secret@127.0.0.1:${port}/0`))
    );
    assertMatch(
      message,
      new RegExp(
        `^Cannot start: the shared state store redis://ce:\\*\\*\\*@127\\.0\\.0\\.1:${port}/0 \\(state\\.url, CODE_EXECUTOR_STATE_URL\\) is unreachable`,
      ),
    );
    assertMatch(message, /ECONNREFUSED/);
    assert(!message.includes("hunter2"), message);
    // A stopped server takes the connection and answers nothing: refused too, not waited for.
    const server = new RedisServer();
    await server.start();
    server.pause();
    try {
      assertMatch(
        await unavailable(() => openSharedState(settingsFor(server.url))),
        /did not answer within \d+ ms \(state\.timeoutMs\)/,
      );
    } finally {
      await server.close();
    }
    const noKey = resolveSettings({ state: { url: "redis://127.0.0.1:1" } });
    assertMatch(await unavailable(() => openSharedState(noKey)), /without state\.key/);
  },
});

Deno.test({
  name:
    "a killed store fails every shared operation closed, and a restarted one resumes without a restart and has forgotten",
  ignore: !redis,
  fn: () =>
    withState(async (server, state) => {
      const [placeholder] = await state.vault.assign("alice", [
        { category: "email", value: "bob@example.org" },
      ]);
      assert(await state.outputs.reserve("run1", 5, 60_000));
      const kept = await state.outputs.keep({
        holder: "run1",
        principal: "alice",
        part: "stdout",
        text: "hello",
        bytes: 5,
      });
      const call = { principal: "alice", fullName: "mcp__crm__delete", digest: "sha256:1" };
      const id = await state.approvals.add(call, "mcp__crm__delete {}");
      assert((await state.approvals.approve("alice", [{ id, call: "mcp__crm__delete {}" }]))[0].ok);

      await server.kill();
      // Every record fails closed while the store is down: nothing is resolved, kept, approved
      // or counted from a guess.
      const down = await unavailable(() => state.vault.lookup("alice", [placeholder]));
      assertMatch(down, /^The shared state store redis:\/\/127\.0\.0\.1:\d+ is unreachable/);
      await unavailable(() =>
        state.vault.assign("alice", [{ category: "ip", value: "203.0.113.9" }])
      );
      await unavailable(() => state.outputs.read(kept.id, "alice"));
      await unavailable(() => state.approvals.take(call));
      await unavailable(() => state.principalRate.take("alice"));
      await unavailable(() => state.concurrency.take("alice"));
      assert(state.store.stats.failures >= 6);

      await server.start();
      // Back by itself: the same SharedState, the same connection object.
      assertEquals((await whenBack(() => state.vault.lookup("alice", [placeholder]))).size, 0);
      assertEquals(await state.vault.given("alice", "email"), 0);
      assertEquals(
        (await assertRejects(() => state.outputs.read(kept.id, "alice"), CodeExecutorError)).type,
        "OutputNotFound",
      );
      assertEquals(await state.approvals.take(call), false, "an approval is never assumed");
      // The lost counters start again; a placeholder another principal gets now is never
      // alice's to resolve.
      const [theirs] = await state.vault.assign("mallory", [
        { category: "email", value: "eve@example.org" },
      ]);
      assertEquals(theirs, placeholder);
      assertEquals((await state.vault.lookup("alice", [placeholder])).size, 0);
      assertEquals(
        (await state.vault.lookup("mallory", [placeholder])).get(placeholder),
        "eve@example.org",
      );
    }),
});

Deno.test({
  name:
    "a stopped store (SIGSTOP) fails operations after state.timeoutMs, and they work again once it goes on",
  ignore: !redis,
  fn: () =>
    withState(async (server, state) => {
      const [placeholder] = await state.vault.assign("alice", [
        { category: "email", value: "bob@example.org" },
      ]);
      server.pause();
      const message = await unavailable(() => state.vault.lookup("alice", [placeholder]));
      assertMatch(message, /did not answer within 300 ms \(state\.timeoutMs\)/);
      server.resume();
      const found = await whenBack(() => state.vault.lookup("alice", [placeholder]));
      assertEquals(found.get(placeholder), "bob@example.org");
    }),
});

Deno.test({
  name:
    "a dead replica's place in the concurrency share expires, so the principal's runs go on elsewhere",
  ignore: !redis,
  fn: async () => {
    const server = new RedisServer();
    await server.start();
    const keys = await StateKeys.derive(KEY);
    const connect = () => RedisStateStore.connect({ url: server.url, timeoutMs: 300 });
    const [alive, dead] = [await connect(), await connect()];
    const options = { max: 1, leaseMs: 300 };
    try {
      const held = await new ConcurrencyShare(dead, keys, options).take("alice");
      assert(held);
      const share = new ConcurrencyShare(alive, keys, options);
      assertEquals(await share.take("alice"), undefined);
      // The replica dies: its connection goes, so its run's lease is no longer renewed.
      await dead.close();
      await assertRejects(() => held.release());
      let mine;
      for (let i = 0; i < 100 && !mine; i++) {
        await new Promise((resolve) => setTimeout(resolve, 50));
        mine = await share.take("alice");
      }
      assert(mine, "the lease of the dead replica's run expired");
      await mine.release();
    } finally {
      await alive.close();
      await server.close();
    }
  },
});

Deno.test({
  name:
    "the store's keys and values hold no personal value, token, principal, or plain hash of one",
  ignore: !redis,
  fn: () =>
    withState(async (server, state) => {
      const principal = "alice.owner@corp.example";
      const secrets = [
        principal,
        "bob.customer@example.org",
        "+1 202 555 0143",
        "4111111111111111",
        "DE89370400440532013000",
        "tok_live_9f8e7d6c5b4a",
        "ce-0.6f0c1d2e-3b4a-4c5d-8e9f-0a1b2c3d4e5f",
        "python-session-of-alice",
      ];
      const [, , , , , token, httpSession, pySession] = secrets;
      await state.vault.assign(principal, [
        { category: "email", value: secrets[1] },
        { category: "phone", value: secrets[2] },
        { category: "card", value: secrets[3] },
        { category: "iban", value: secrets[4] },
      ]);
      await state.vault.lookup(principal, ["<email_1>", "<card_1>"]);
      const text = `${secrets[1]} paid with ${secrets[3]} using ${token}`;
      const size = new TextEncoder().encode(text).length;
      assert(await state.outputs.reserve("run-1", size, 60_000));
      const kept = await state.outputs.keep({
        holder: "run-1",
        principal,
        part: "stdout",
        text,
        bytes: size,
      });
      secrets.push(kept.id);
      const digest = `sha256:${createHash("sha256").update(secrets[1]).digest("hex")}`;
      const call = { principal, fullName: "mcp__crm__email", digest };
      const shown = `mcp__crm__email {"to":"${secrets[1]}","token":"${token}"}`;
      const id = await state.approvals.add(call, shown);
      secrets.push(id);
      await state.approvals.add({ ...call, digest: "sha256:0" }, "other");
      await state.approvals.approve(principal, [{ id, call: shown }]);
      await state.principalRate.take(principal);
      const share = await state.concurrency.take(principal);
      await state.replicas.beat({ id: "ce-0", address: "http://10.1.2.3:3334" });
      await state.owners.claim({ kind: "http-session", id: httpSession, principal }, {
        replica: "ce-0",
        ttlMs: 60_000,
      });
      await state.owners.claim({ kind: "python-session", id: pySession, principal }, {
        replica: "ce-0",
        ttlMs: 60_000,
      });
      const request = { method: "POST", path: "/mcp", body: new TextEncoder().encode(text) };
      await verifyForward(
        state.keys,
        await signForward(state.keys, request, { principal, from: "ce-0" }),
        request,
        { store: state.store },
      );

      const dump = await dumpStore(server.url);
      assert(dump.length > 20, `${dump.length} keys and members`);
      const found: string[] = [];
      for (const secret of secrets) {
        for (const [form, needle] of secretForms(secret)) {
          if (dump.some((blob) => blob.includes(needle))) found.push(`${form} of ${secret}`);
        }
      }
      assertEquals(found, []);
      await share?.release();
    }),
});
