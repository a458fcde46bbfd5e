import { assertEquals, assertThrows } from "./_assert.ts";
import { PersonalDataDetector } from "../src/privacy/detect.ts";
import { PlaceholderVault } from "../src/privacy/vault.ts";
import { CodeExecutorError } from "../src/errors.ts";

const detector = new PersonalDataDetector();

function vaultAt(clock: { now: number }, maxValuesPerPrincipal = 100) {
  return new PlaceholderVault({ ttlMs: 1000, maxValuesPerPrincipal, now: () => clock.now });
}

Deno.test("PlaceholderVault gives a value the same placeholder, numbered per category and principal", () => {
  const vault = vaultAt({ now: 0 });
  assertEquals(
    vault.tokenize("a", "x@example.org, y@example.org, x@example.org, 8.8.8.8", detector),
    "<email_1>, <email_2>, <email_1>, <ip_1>",
  );
  assertEquals(vault.tokenize("b", "y@example.org", detector), "<email_1>");
  assertEquals(
    vault.resolve("a", "to <email_2> and <email_1>", "here"),
    "to y@example.org and x@example.org",
  );
  assertEquals(vault.resolve("b", "<email_1>", "here"), "y@example.org");
  assertEquals(
    vault.resolve("a", "no placeholder, <b>tags</b>", "here"),
    "no placeholder, <b>tags</b>",
  );
});

Deno.test("PlaceholderVault refuses unknown and expired placeholders, and numbers never come back", () => {
  const clock = { now: 0 };
  const vault = vaultAt(clock);
  vault.tokenize("a", "x@example.org", detector);
  const error = assertThrows(
    () => vault.resolve("a", "<email_2>", "the arguments of t"),
    CodeExecutorError,
  );
  assertEquals(error.type, "PlaceholderError");
  clock.now = 900;
  assertEquals(vault.resolve("a", "<email_1>", "t"), "x@example.org"); // a use renews it
  clock.now = 1800;
  assertEquals(vault.resolve("a", "<email_1>", "t"), "x@example.org");
  clock.now = 2900;
  const expired = assertThrows(() => vault.resolve("a", "<email_1>", "t"), CodeExecutorError);
  assertEquals(/expired/.test(expired.message), true, expired.message);
  // The same value seen again gets a new number: <email_1> never means anything else.
  assertEquals(vault.tokenize("a", "y@example.org x@example.org", detector), "<email_2> <email_3>");
  assertThrows(() => vault.resolve("a", "<email_1>", "t"), CodeExecutorError);
});

Deno.test("PlaceholderVault keeps at most maxValuesPerPrincipal, dropping the least recently used", () => {
  const vault = vaultAt({ now: 0 }, 2);
  vault.tokenize("a", "a@example.org b@example.org", detector);
  vault.resolve("a", "<email_1>", "t"); // a@ is now the most recently used
  vault.tokenize("a", "c@example.org", detector);
  assertEquals(vault.size("a"), 2);
  assertEquals(vault.resolve("a", "<email_1> <email_3>", "t"), "a@example.org c@example.org");
  assertThrows(() => vault.resolve("a", "<email_2>", "t"), CodeExecutorError);
});
