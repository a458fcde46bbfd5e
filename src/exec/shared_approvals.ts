/**
 * Pending approvals in the shared state store (`state.url`, `src/state/pending_store.ts`) behind
 * the interface runs and `approve_pending_calls` use: a call refused through one replica is
 * approved through any other, and the approval is used once across all of them. Each approval is
 * audited by the replica that gave it, as on one machine.
 *
 * @module
 */
import type { AuditLog } from "../policy/audit.ts";
import { claimForms, type PendingCalls } from "../policy/approvals.ts";
import type { PendingStore } from "../state/pending_store.ts";

/**
 * The shared store's pending calls as {@linkcode PendingCalls}.
 *
 * @param store The shared pending calls.
 * @param audit Where each approval is recorded.
 * @returns The pending calls.
 */
export function sharedPendingCalls(store: PendingStore, audit?: AuditLog): PendingCalls {
  return {
    take: (call) => store.take(call),
    add: (call, shown) => store.add(call, shown),
    async approve(principal, claims, shownAs) {
      const results = await store.approve(
        principal,
        claims,
        async (shown) => claimForms(shown, shownAs ? await shownAs(shown) : undefined),
      );
      for (const result of results) {
        if (!result.ok) continue;
        audit?.record({
          kind: "approval",
          principal,
          tool: result.fullName,
          argumentDigest: result.digest,
          decision: "approved-once",
          how: "approval-tool",
          pendingId: result.id,
        });
      }
      return results;
    },
    active: (principal) => store.active(principal),
  };
}
