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
  }, (args, ctx: ServerContext) => {
    const principal = ctx.http?.authInfo?.clientId ?? LOCAL_PRINCIPAL;
    // The refusal reached the client through the run's result, tokenized for this principal.
    const results = executor.pendingApprovals.approve(
      principal,
      args.calls,
      Date.now(),
      (text) => executor.tokenizeForClient(text, principal),
    );
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
 * Offers `approve_pending_calls` only where it is needed, so that `tools/list` stays small: on a
 * server built for one 2026-era request (whose clients cannot be asked today) while some call is
 * pending; to a 2025-era client when one of its calls is first refused for want of a person (the
 * client gets `notifications/tools/list_changed`). Nothing when approvals are not `ask`.
 *
 * @param server The MCP server.
 * @param executor The executor.
 * @param perRequest Built for a single 2026-era request.
 * @returns What the client channel calls at a refusal; undefined when there is nothing to offer.
 * @internal It takes the MCP SDK's types (see {@linkcode registerApproveTool}).
 */
export function offerApproveTool(
  server: McpServer,
  executor: Executor,
  perRequest: boolean,
): (() => void) | undefined {
  if (executor.settings.approvals.mode !== "ask") return undefined;
  let offered = false;
  const offer = () => {
    if (offered) return;
    offered = true;
    registerApproveTool(server, executor);
  };
  if (perRequest && executor.pendingApprovals.active) offer();
  return offer;
}
