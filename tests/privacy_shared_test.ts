/**
 * `RunTokenizer` over the shared store's placeholders (`state.url`'s `VaultStore`, here on the
 * in-process store, whose semantics tests/state_contract_test.ts holds to Redis's) against the
 * in-process `PlaceholderVault`: the same texts and values get the same placeholders, numbered in
 * the same order, and a placeholder that does not resolve is refused with the same error type.
 *
 * @module
 */
import { assert, assertEquals, assertMatch, assertRejects } from "./_assert.ts";
import { CodeExecutorError } from "../src/errors.ts";
import { PersonalDataDetector } from "../src/privacy/detect.ts";
import { RunTokenizer } from "../src/privacy/tokenizer.ts";
import { PlaceholderVault } from "../src/privacy/vault.ts";
import { StateKeys } from "../src/state/keys.ts";
import { MemoryStateStore } from "../src/state/memory_store.ts";
import { VaultStore } from "../src/state/vault_store.ts";

const detector = new PersonalDataDetector();
const options = { ttlMs: 60_000, maxValuesPerPrincipal: 1000 };

async function pair(principal = "http:alice") {
  const store = new MemoryStateStore();
  const shared = new VaultStore(store, await StateKeys.derive(), options);
  const make = (vault: PlaceholderVault | VaultStore) =>
    new RunTokenizer({ vault, principal, detector, rawServers: [] });
  return {
    local: make(new PlaceholderVault(options)),
    shared: make(shared),
    sharedFor: (other: string) =>
      new RunTokenizer({ vault: shared, principal: other, detector, rawServers: [] }),
    close: () => store.close(),
  };
}

const VALUE = {
  rows: [
    { name: "Jane", mail: "jane@example.org", phone: "+1 415-555-2671" },
    { name: "Omar", mail: "omar@mail.de", note: "also jane@example.org, at 8.8.8.8" },
  ],
  "from jane@example.org": "key holding a value",
};

Deno.test("RunTokenizer over the shared vault numbers values as the in-process vault does", async () => {
  const { local, shared, close } = await pair();
  try {
    for (const tokenizer of [local, shared]) {
      assertEquals(await tokenizer.text(""), "");
    }
    const steps = [
      (t: RunTokenizer) => t.value(VALUE),
      (t: RunTokenizer) => t.text("mail omar@mail.de and new@example.org from 203.0.113.9"),
      async (t: RunTokenizer) => {
        const stdout = t.stream(1 << 20);
        stdout.push("one new2@example.org\ntwo jane@example.org\n");
        stdout.detectPending();
        stdout.push("three +44 20 7946 0958");
        return await stdout.finish(
          "one new2@example.org\ntwo jane@example.org\nthree +44 20 7946 0958",
        );
      },
    ];
    for (const step of steps) {
      const [fromLocal, fromShared] = [await step(local), await step(shared)];
      assertEquals(fromShared, fromLocal);
    }
    const text = JSON.stringify(await shared.value(VALUE));
    assert(!text.includes("jane@example.org"), text);
    assertMatch(text, /<email_1>.*<phone_1>/);
  } finally {
    await close();
  }
});

Deno.test("RunTokenizer over the shared vault resolves a principal's own placeholders and refuses the rest", async () => {
  const { shared, sharedFor, close } = await pair();
  try {
    await shared.text("jane@example.org omar@mail.de");
    assertEquals(
      await shared.resolveArgs({ to: ["<email_2>", "<email_1>"], "<email_1>": "key" }, "t"),
      { to: ["omar@mail.de", "jane@example.org"], "jane@example.org": "key" },
    );
    const args = { note: "hello <b>world</b>", n: 3 };
    assertEquals(await shared.resolveArgs(args, "t"), args, "no placeholder, nothing asked");
    const never = await assertRejects(
      () => shared.resolveArgs({ to: "<email_3>" }, "mcp__mail__send"),
      CodeExecutorError,
    );
    assertEquals(never.type, "PlaceholderError");
    assertMatch(never.message, /<email_3> in the arguments of mcp__mail__send/);
    const other = await assertRejects(
      () => sharedFor("http:bob").resolveArgs({ to: "<email_1>" }, "t"),
      CodeExecutorError,
    );
    assertEquals(other.type, "PlaceholderError");
    assertMatch(other.message, /never given it/);
  } finally {
    await close();
  }
});
