/**
 * The approvals policy on its own: which calls need a person, how a call is shown, and the
 * one-time approvals of clients that cannot ask (principal, expiry, single use).
 *
 * @module
 */
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import {
  ApprovalPolicy,
  argumentDigest,
  PENDING_TTL_MS,
  PendingApprovals,
  showCall,
} from "../src/policy/approvals.ts";

const policy = (settings: Partial<ConstructorParameters<typeof ApprovalPolicy>[0]> = {}) =>
  new ApprovalPolicy({ mode: "ask", require: [], waive: [], timeoutMs: 1000, ...settings });

Deno.test("needs(): destructive and not read-only, plus require, minus waive; off needs nothing", () => {
  const p = policy({ require: ["mcp__fixture__*"], waive: ["mcp__memory__delete_relations"] });
  const destructive = { destructiveHint: true };
  assertMatch(
    p.needs({ fullName: "mcp__memory__delete_entities", annotations: destructive })!,
    /destructiveHint/,
  );
  assertEquals(
    p.needs({
      fullName: "mcp__x__y",
      annotations: { destructiveHint: true, readOnlyHint: true },
    }),
    undefined,
  );
  assertEquals(
    p.needs({ fullName: "mcp__memory__read_graph", annotations: { readOnlyHint: true } }),
    undefined,
  );
  assertEquals(p.needs({ fullName: "mcp__memory__create_entities" }), undefined);
  assertMatch(
    p.needs({ fullName: "mcp__fixture__pid" })!,
    /approvals\.require rule "mcp__fixture__\*"/,
  );
  assertEquals(
    p.needs({ fullName: "mcp__memory__delete_relations", annotations: destructive }),
    undefined,
  );
  assertEquals(
    policy({ mode: "off", require: ["*"] }).needs({
      fullName: "mcp__a__b",
      annotations: destructive,
    }),
    undefined,
  );
});

Deno.test("showCall() redacts secrets and cuts long values with their size", () => {
  const shown = showCall("mcp__s__t", {
    password: "hunter2-secret",
    token: "ghp_0123456789abcdefghijABCDEFGHIJ",
    body: "é".repeat(500),
  });
  assert(!shown.includes("hunter2"), shown);
  assert(!shown.includes("ghp_0123"), shown);
  assertMatch(shown, /… \(1000 bytes in all\)/);
  assert(showCall("mcp__s__t", { list: Array(2000).fill("x") }).length < 2100);
});

Deno.test("PendingApprovals: approved once, for the same principal, tool and arguments, until it expires", () => {
  const store = new PendingApprovals();
  const digest = argumentDigest({ entityNames: ["Alice"] });
  const shown = showCall("mcp__m__delete", { entityNames: ["Alice"] });
  const id = store.add("alice", "mcp__m__delete", digest, shown, 0);
  assertEquals(store.add("alice", "mcp__m__delete", digest, shown, 1), id);
  assertEquals(store.take("alice", "mcp__m__delete", digest, 2), false);
  assertEquals(store.approve("bob", [{ id, call: shown }], 3)[0].ok, false);
  assertEquals(store.approve("alice", [{ id, call: shown + " " }], 3)[0].ok, false);
  assertEquals(store.approve("alice", [{ id, call: shown }], 4)[0].ok, true);
  assertEquals(store.approve("alice", [{ id, call: shown }], 5)[0].ok, false);
  assertEquals(store.take("bob", "mcp__m__delete", digest, 6), false);
  assertEquals(
    store.take("alice", "mcp__m__delete", argumentDigest({ entityNames: ["Bob"] }), 6),
    false,
  );
  assertEquals(store.take("alice", "mcp__m__delete", digest, 7), true);
  assertEquals(store.take("alice", "mcp__m__delete", digest, 8), false);

  const late = store.add("alice", "mcp__m__delete", digest, shown, 10);
  assertEquals(
    store.approve("alice", [{ id: late, call: shown }], 10 + PENDING_TTL_MS)[0].ok,
    false,
  );
  const used = store.add("alice", "mcp__m__delete", digest, shown, 20);
  store.approve("alice", [{ id: used, call: shown }], 21);
  assertEquals(store.take("alice", "mcp__m__delete", digest, 21 + PENDING_TTL_MS), false);
});
