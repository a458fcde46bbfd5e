/**
 * Approvals for a client that cannot elicit, end to end over stdio: the pending call is not made,
 * the refusal says how a person approves it, `approve_pending_calls` (offered to this client only)
 * approves it once, and the next identical call goes through exactly once. The model cannot
 * relabel a pending call, replay an approval, or reach the tool from sandbox code.
 *
 * @module
 */
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import {
  type ApprovalServer,
  auditApprovals,
  calls,
  createEntities,
  memoryText,
  startApprovalServer,
} from "./_approvals.ts";
import { eventually } from "./_proc.ts";

const DELETE_ALICE = `
  try {
    await callMCPTool("mcp__memory__delete_entities", { entityNames: ["Alice"] });
    await callMCPTool("mcp__fixture__record", { note: "after approval" });
    return "deleted";
  } catch (error) {
    return [error.name, error.message];
  }`;

type Claim = { calls: Array<{ id: string; call: string }> };

function claimOf(message: string): Claim {
  const match = message.match(/approve_pending_calls with (\{.*?\}\]\}) —/);
  assert(match, `no claim in: ${message}`);
  return JSON.parse(match[1]);
}

async function approve(server: ApprovalServer, claim: Claim) {
  const result = await server.client.callTool({ name: "approve_pending_calls", arguments: claim });
  const text = (result.content as Array<{ text: string }>).map((c) => c.text).join("\n");
  return { ok: result.isError !== true, text };
}

Deno.test("a client without elicitation: refused, approved by approve_pending_calls, then made once", async (t) => {
  const server = await startApprovalServer({ elicit: false });
  try {
    await t.step("approve_pending_calls is not offered before a refusal", async () => {
      const { tools } = await server.client.listTools();
      assertEquals(tools.map((tool) => tool.name), [
        "run_typescript",
        "run_python",
        "search_tools",
      ]);
    });
    let listChanged = 0;
    server.client.setNotificationHandler("notifications/tools/list_changed", () => {
      listChanged++;
    });

    const setup = await server.runTs(`${createEntities(["Alice"])} return "ok";`);
    assertEquals(setup.error, undefined);
    let claim: Claim = { calls: [] };

    await t.step("the call is not made; the refusal says how a person approves it", async () => {
      const result = await server.runTs(DELETE_ALICE);
      const [name, message] = result.returnValue as string[];
      assertEquals(name, "ApprovalDenied");
      assertMatch(message, /A person must approve the call to mcp__memory__delete_entities/);
      assertMatch(message, /does not support elicitation/);
      claim = claimOf(message);
      assertEquals(claim.calls.length, 1);
      assertMatch(
        claim.calls[0].call,
        /^mcp__memory__delete_entities \{"entityNames":\["Alice"\]\}$/,
      );
      assertMatch(await memoryText(server), /"name":"Alice"/);
    });

    await t.step("then approve_pending_calls is offered, annotated destructive", async () => {
      assert(await eventually(() => Promise.resolve(listChanged > 0)), "no tools/list_changed");
      const { tools } = await server.client.listTools();
      const tool = tools.find((tool) => tool.name === "approve_pending_calls");
      assert(tool, `tools: ${tools.map((tool) => tool.name)}`);
      assertEquals(tool.annotations?.destructiveHint, true);
      assert(tool.annotations?.readOnlyHint !== true);
    });

    await t.step("sandbox code cannot reach approve_pending_calls", async () => {
      const result = await server.runTs(`
        try {
          await callMCPTool("approve_pending_calls", ${JSON.stringify(claim)});
          return "reached";
        } catch (error) {
          return error.name;
        }`);
      assert(result.returnValue !== "reached", `returned ${result.returnValue}`);
      const again = await server.runTs(DELETE_ALICE);
      assertEquals((again.returnValue as string[])[0], "ApprovalDenied");
    });

    await t.step("a relabelled call is not approved", async () => {
      const forged = { calls: [{ id: claim.calls[0].id, call: "mcp__memory__read_graph {}" }] };
      const result = await approve(server, forged);
      assertEquals(result.ok, false);
      assertMatch(result.text, /differs from the pending call/);
      const again = await server.runTs(DELETE_ALICE);
      assertEquals((again.returnValue as string[])[0], "ApprovalDenied");
      assertMatch(await memoryText(server), /"name":"Alice"/);
    });

    await t.step("approved: the next identical call goes through, once", async () => {
      const result = await approve(server, claim);
      assertEquals(result.ok, true, result.text);
      assertMatch(result.text, /approved once: mcp__memory__delete_entities/);
      const replay = await approve(server, claim);
      assertEquals(replay.ok, false);

      // The fixture's record call needs approval too (approvals.require): approve it the same way.
      const run = await server.runTs(DELETE_ALICE);
      const [name, message] = run.returnValue as string[];
      assertEquals(name, "ApprovalDenied");
      assertMatch(message, /mcp__fixture__record/);
      assert(!(await memoryText(server)).includes('"name":"Alice"'), "Alice was not deleted");
      assertEquals((await calls(server)).length, 0);
      assertEquals((await approve(server, claimOf(message))).ok, true);

      // The delete's approval is used up: it is asked for again, and the record call goes through.
      await server.runTs(`${createEntities(["Alice"])} return "ok";`);
      const next = await server.runTs(`
        await callMCPTool("mcp__fixture__record", { note: "after approval" });
        try {
          await callMCPTool("mcp__memory__delete_entities", { entityNames: ["Alice"] });
        } catch (error) {
          return error.name;
        }`);
      assertEquals(next.returnValue, "ApprovalDenied");
      assertEquals(await calls(server), ["after approval"]);
      assertMatch(await memoryText(server), /"name":"Alice"/);
    });

    await t.step("read-only calls are made without any approval", async () => {
      const result = await server.runTs(`
        const graph = await callMCPTool("mcp__memory__read_graph", {});
        return await callMCPTool("mcp__everything__echo", { message: "still here" });`);
      assertEquals(result.error, undefined);
      assertMatch(String(result.returnValue), /still here/);
    });

    await t.step("the audit log has each decision and each approval", async () => {
      const records = await auditApprovals(server);
      const lines = records.map((r) => `${r.tool} ${r.decision} ${r.how}`);
      for (
        const expected of [
          "mcp__memory__delete_entities denied pending",
          "mcp__memory__delete_entities approved-once approval-tool",
          "mcp__memory__delete_entities approved approval-tool",
          "mcp__fixture__record approved approval-tool",
        ]
      ) assert(lines.includes(expected), `missing "${expected}" in:\n${lines.join("\n")}`);
    });
  } finally {
    await server.close();
  }
});

Deno.test("approvals.mode deny: the call is never made, and no approval tool is offered", async () => {
  const server = await startApprovalServer({ elicit: false, approvals: { mode: "deny" } });
  try {
    const { tools } = await server.client.listTools();
    assert(!tools.some((tool) => tool.name === "approve_pending_calls"));
    const result = await server.runTs(`${createEntities(["Alice"])}\n${DELETE_ALICE}`);
    const [name, message] = result.returnValue as string[];
    assertEquals(name, "ApprovalDenied");
    assertMatch(message, /approvals\.mode to deny/);
    assertMatch(await memoryText(server), /"name":"Alice"/);
  } finally {
    await server.close();
  }
});
