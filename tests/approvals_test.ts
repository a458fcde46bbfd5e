/**
 * Approvals end to end over stdio: the real server (`deno task start`) with server-everything,
 * server-memory (their real annotations) and the fixture (a tool without annotations, named by an
 * `approvals.require` glob) behind it, driven by a real SDK client that answers form elicitation
 * from the test. What the upstream servers really received is read on their side: server-memory's
 * data file (MEMORY_FILE_PATH) and the fixture's call log.
 *
 * @module
 */
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import {
  auditApprovals,
  calls,
  choose,
  createEntities,
  memoryText,
  startApprovalServer,
} from "./_approvals.ts";
import { eventually, processStat, sandboxPids } from "./_proc.ts";

Deno.test("approvals with a client that answers elicitation", async (t) => {
  const server = await startApprovalServer();
  try {
    await t.step("read-only tools are never asked about", async () => {
      const result = await server.runTs(`
        await callMCPTool("mcp__everything__echo", { message: "hi" });
        await callMCPTool("mcp__everything__get-sum", { a: 1, b: 2 });
        await callMCPTool("mcp__memory__read_graph", {});
        await callMCPTool("mcp__memory__search_nodes", { query: "x" });
        ${createEntities(["Alice", "Bob", "Carol", "Dan", "Eve"])}
        return "ok";`);
      assertEquals(result.error, undefined);
      assertEquals(server.asked.length, 0);
      assertMatch(await memoryText(server), /"name":"Eve"/);
    });

    await t.step("approve: the call is made once", async () => {
      server.answer = choose("approve");
      const result = await server.runTs(`
        await callMCPTool("mcp__memory__delete_entities", { entityNames: ["Alice"] });
        await callMCPTool("mcp__fixture__record", { note: "approved ${"x".repeat(300)}" });
        return "done";`);
      assertEquals(result.error, undefined);
      assertEquals(result.returnValue, "done");
      assertEquals(server.asked.length, 2);
      const [memory, fixture] = server.asked.map((q) => q.message);
      const field = (server.asked[0].requestedSchema.properties as Record<string, unknown>)
        .decision as { enum: string[] };
      assertEquals(field.enum, ["approve", "deny", "approve_run"]);
      assertMatch(memory, /"delete_entities" of the MCP server "memory"/);
      assertMatch(memory, /destructiveHint/);
      assertMatch(memory, /"entityNames":\["Alice"\]/);
      assertMatch(fixture, /approvals\.require rule "mcp__fixture__rec\*"/);
      assertMatch(fixture, /… \(309 bytes in all\)/);
      assert(!(await memoryText(server)).includes('"name":"Alice"'), "Alice was not deleted");
      assertEquals((await calls(server)).length, 1);
    });

    await t.step(
      "deny: the code catches ApprovalDenied and nothing reaches the server",
      async () => {
        server.asked.length = 0;
        server.answer = choose("deny");
        const result = await server.runTs(`
        const caught = [];
        for (const [name, args] of [
          ["mcp__memory__delete_entities", { entityNames: ["Bob"] }],
          ["mcp__fixture__record", { note: "denied", password: "hunter2-secret" }],
        ]) {
          try {
            await callMCPTool(name, args);
          } catch (error) {
            caught.push([error instanceof ApprovalDenied, error.name, error.message]);
          }
        }
        try {
          await tools.memory.deleteEntities({ entityNames: ["Bob"] });
        } catch (error) {
          caught.push([error instanceof ApprovalDenied, error.name, error.message]);
        }
        return caught;`);
        assertEquals(result.error, undefined);
        const caught = result.returnValue as Array<[boolean, string, string]>;
        assertEquals(caught.map(([is, name]) => [is, name]), [
          [true, "ApprovalDenied"],
          [true, "ApprovalDenied"],
          [true, "ApprovalDenied"],
        ]);
        assertEquals(server.asked.length, 3);
        assertMatch(caught[0][2], /denied the call to mcp__memory__delete_entities/);
        assertMatch(await memoryText(server), /"name":"Bob"/);
        assertEquals((await calls(server)).length, 1);
        assert(!server.asked[1].message.includes("hunter2"), "a secret was shown");
      },
    );

    await t.step("for the rest of the run: asked once in the run, again in the next", async () => {
      server.asked.length = 0;
      server.answer = choose("approve_run");
      const result = await server.runTs(`
        for (const name of ["Bob", "Carol", "Dan"]) {
          await callMCPTool("mcp__memory__delete_entities", { entityNames: [name] });
        }
        return "done";`);
      assertEquals(result.error, undefined);
      assertEquals(server.asked.length, 1);
      const text = await memoryText(server);
      for (const name of ["Bob", "Carol", "Dan"]) assert(!text.includes(`"name":"${name}"`));
      server.answer = choose("deny");
      const next = await server.runTs(`
        try {
          await callMCPTool("mcp__memory__delete_entities", { entityNames: ["Eve"] });
        } catch (error) {
          return error.name;
        }`);
      assertEquals(next.returnValue, "ApprovalDenied");
      assertEquals(server.asked.length, 2);
      assertMatch(await memoryText(server), /"name":"Eve"/);
    });

    await t.step(
      "Python catches ApprovalDenied; an approved call from Python is made",
      async () => {
        server.answer = choose("deny");
        const result = await server.runPy(`
try:
    await call_mcp_tool("mcp__memory__delete_entities", {"entityNames": ["Eve"]})
    outcome = "called"
except ApprovalDenied as error:
    outcome = type(error).__name__ + ": " + str(error)
outcome`);
        assertEquals(result.error, undefined);
        assertMatch(String(result.returnValue), /^ApprovalDenied: The user denied/);
        assertMatch(await memoryText(server), /"name":"Eve"/);

        server.answer = choose("approve");
        const approved = await server.runPy(`
await tools.memory.delete_entities(entityNames=["Eve"])
"deleted"`);
        assertEquals(approved.error, undefined);
        assertEquals(approved.returnValue, "deleted");
        assert(!(await memoryText(server)).includes('"name":"Eve"'), "Eve was not deleted");
      },
    );

    await t.step("every decision is audited", async () => {
      const records = await auditApprovals(server);
      const decisions = records.map((r) => `${r.tool} ${r.decision} ${r.how}`);
      assert(
        decisions.includes("mcp__memory__delete_entities approved elicitation"),
        decisions.join("\n"),
      );
      assert(decisions.includes("mcp__fixture__record denied elicitation"), decisions.join("\n"));
      assert(decisions.includes("mcp__memory__delete_entities approved earlier-in-run"));
      assert(records.some((r) => r.scope === "run" && r.how === "elicitation"));
      for (const record of records) {
        assertEquals(record.principal, "local");
        assertMatch(String(record.argumentDigest), /^sha256:[0-9a-f]{64}$/);
      }
    });

    await t.step("the approval tool is not offered to a client that can elicit", async () => {
      const { tools } = await server.client.listTools();
      assert(!tools.some((tool) => tool.name === "approve_pending_calls"));
    });
  } finally {
    await server.close();
  }
});

Deno.test("waiting for a person does not count against timeoutMs; no answer in approvals.timeoutMs is a denial", async () => {
  const server = await startApprovalServer({
    approvals: { timeoutMs: 4_000 },
    sandbox: { warmPool: 0 },
  });
  try {
    // Start server-memory first: the timed run below should spend its 1.5 s on its own work.
    assertEquals(
      (await server.runTs(`${createEntities(["Zed", "Yan"])} return 1;`)).returnValue,
      1,
    );
    // The sandbox's state, looked at while the person decides (the warm pool is off: it is the
    // run's own).
    const heldStates = new Set<string>();
    server.answer = async () => {
      const pids = await sandboxPids(server.tempDir);
      // SIGSTOP takes effect a moment after the hold sends it.
      await eventually(async () => (await processStat(pids[0])).state === "T");
      // Twelve looks, 3 s in all: longer than the run's timeoutMs.
      for (let look = 0; look < 12; look++) {
        for (const pid of pids) heldStates.add((await processStat(pid)).state);
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
      return { action: "accept", content: { decision: "approve" } };
    };
    // While the person decides, the run is stopped (SIGSTOP): a timer loop beside the held call
    // does not run, and the wait does not count against the run's 1.5 s timeoutMs.
    const slow = await server.runTs(
      `let ticks = 0;
      let stop = false;
      const spin = (async () => {
        while (!stop) {
          ticks++;
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
      })();
      const started = Date.now();
      await callMCPTool("mcp__memory__delete_entities", { entityNames: ["Zed"] });
      stop = true;
      await spin;
      return { ticks, waited: Date.now() - started };`,
      { timeoutMs: 1_500 },
    );
    assertEquals(slow.error, undefined);
    const { ticks, waited } = slow.returnValue as { ticks: number; waited: number };
    assert(waited >= 2_900, `waited ${waited} ms`);
    assertEquals(
      [...heldStates],
      ["T"],
      `the sandbox was not stopped while it was held (its timer loop ticked ${ticks} times)`,
    );
    assert(!(await memoryText(server)).includes('"name":"Zed"'), "Zed was not deleted");

    let cancelled = false;
    server.answer = (_params, signal) =>
      new Promise((resolve) => {
        signal.addEventListener("abort", () => {
          cancelled = true;
          resolve({ action: "cancel" });
        });
      });
    const started = performance.now();
    const result = await server.runTs(`
      try {
        await callMCPTool("mcp__memory__delete_entities", { entityNames: ["Yan"] });
      } catch (error) {
        return [error.name, error.message];
      }`);
    assert(performance.now() - started >= 4_000, "denied before approvals.timeoutMs");
    const [name, message] = result.returnValue as string[];
    assertEquals(name, "ApprovalDenied");
    assertMatch(message, /within approvals\.timeoutMs \(4000 ms\)/);
    assertMatch(await memoryText(server), /"name":"Yan"/);
    assert(await eventually(() => Promise.resolve(cancelled)), "the question was not withdrawn");
    assert(
      await eventually(async () => (await sandboxPids(server.tempDir)).length === 0),
      "a sandbox child is left running",
    );
  } finally {
    await server.close();
  }
});
