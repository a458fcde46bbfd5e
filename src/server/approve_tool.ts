/**
 * `approve_pending_calls`: how a person approves upstream calls that needed approval when the
 * client cannot ask its user (no form elicitation). The tool is annotated destructive, so clients
 * confirm each call of it with their user, showing its arguments: the calls being approved,
 * exactly as the refusal showed them. Offered only when approvals are on (`ask`), upstream
 * servers are configured, and the client cannot elicit. See SECURITY.md for what it protects.
 *
 * @module
 */
import { fromJsonSchema, type McpServer, type ServerContext } from "@modelcontextprotocol/server";
import { CodeExecutorError } from "../errors.ts";
import type { Executor } from "../exec/executor.ts";
import { LOCAL_PRINCIPAL } from "../principals.ts";

/** The tool's name, which refusals name. */
export const APPROVE_TOOL = "approve_pending_calls";

/**
 * Hand-written, as the other schemas in tools/list are: once offered, every token of it is in the
 * client's context (the zod-derived one cost about twice as much).
 */
const ApproveInput = fromJsonSchema<{ calls: Array<{ id: string; call: string }> }>({
  type: "object",
  properties: {
    calls: {
      type: "array",
      minItems: 1,
      maxItems: 20,
      items: {
        type: "object",
        properties: { id: { type: "string" }, call: { type: "string" } },
        required: ["id", "call"],
      },
    },
  },
  required: ["calls"],
});

/**
 * Registers `approve_pending_calls` on a server.
 *
 * @param server The MCP server.
 * @param executor The executor whose pending calls it approves.
 * @internal It takes the MCP SDK's types, which `deno doc --lint` takes for private ones
 * (denoland/deno#27364); the SDK documents them.
 */
export function registerApproveTool(server: McpServer, executor: Executor): void {
  server.registerTool(APPROVE_TOOL, {
    description:
      "Approve, once each, calls refused with ApprovalDenied; pass {id, call} as given. Only when the user asks; then rerun the code.",
    inputSchema: ApproveInput,
    // Clients confirm destructive tools with their user: that confirmation is the approval.
    annotations: { destructiveHint: true },
  }, async (args, ctx: ServerContext) => {
    const principal = ctx.http?.authInfo?.clientId ?? LOCAL_PRINCIPAL;
    let results;
    try {
      // The refusal reached the client through the run's result, tokenized for this principal.
      results = await executor.pendingCalls.approve(
        principal,
        args.calls,
        (text) => executor.tokenizeForClient(text, principal),
      );
    } catch (error) {
      // The shared store is away: nothing was approved.
      if (!(error instanceof CodeExecutorError)) throw error;
      return { content: [{ type: "text" as const, text: error.message }], isError: true };
    }
    const lines = results.map((r) =>
      r.ok ? `approved once: ${r.text}` : `not approved (${r.id}): ${r.text}`
    );
    const approved = results.filter((r) => r.ok).length;
    if (approved > 0) lines.push("Run the code again: each approved call goes through once.");
    return {
      content: [{ type: "text" as const, text: lines.join("\n") }],
      isError: approved === 0,
    };
  });
}

/**
 * How long a 2026-era request waits for the shared store to say whether its principal has a call
 * pending: every such request asks (it may be a `tools/list`), and one that needs nothing of the
 * store must not wait `state.timeoutMs` for a store that has stopped answering.
 */
const PENDING_ASK_MS = 250;

/**
 * Whether a server built for one 2026-era request of a principal offers `approve_pending_calls`:
 * while the principal has a call pending or approved (through any replica, with `state.url`).
 * When the shared store cannot say (soon), it is offered, so that a call of it fails with the
 * store's error rather than as an unknown tool.
 *
 * @param executor The executor.
 * @param principal Whose request.
 * @returns Whether to offer it.
 */
export async function approvalsPending(executor: Executor, principal: string): Promise<boolean> {
  if (executor.settings.approvals.mode !== "ask") return false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([
      executor.pendingCalls.active(principal).catch(() => true),
      new Promise<boolean>((resolve) => timer = setTimeout(() => resolve(true), PENDING_ASK_MS)),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Offers `approve_pending_calls` only where it is needed, so that `tools/list` stays small: on a
 * server built for one 2026-era request (whose clients cannot be asked today) while the
 * principal has a call pending ({@linkcode approvalsPending}); to a 2025-era client when one of
 * its calls is first refused for want of a person (the client gets
 * `notifications/tools/list_changed`). Nothing when approvals are not `ask`.
 *
 * @param server The MCP server.
 * @param executor The executor.
 * @param pending Built for a single 2026-era request whose principal has a call pending.
 * @returns What the client channel calls at a refusal; undefined when there is nothing to offer.
 * @internal It takes the MCP SDK's types (see {@linkcode registerApproveTool}).
 */
export function offerApproveTool(
  server: McpServer,
  executor: Executor,
  pending: boolean,
): (() => void) | undefined {
  if (executor.settings.approvals.mode !== "ask") return undefined;
  let offered = false;
  const offer = () => {
    if (offered) return;
    offered = true;
    registerApproveTool(server, executor);
  };
  if (pending) offer();
  return offer;
}
