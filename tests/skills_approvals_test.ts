/**
 * Approvals reach into skills: a destructive call made by a skill in the other language (a nested
 * run) asks the caller's user, exactly as the caller's own call would, and while the person
 * decides both the caller and the nested run are held (their clocks stopped).
 *
 * @module
 */
import { join } from "node:path";
import { assert, assertEquals, assertMatch, describeResult } from "./_assert.ts";
import { choose, createEntities, memoryText, startApprovalServer } from "./_approvals.ts";
import { withTempDir } from "./_fs.ts";

Deno.test("skills: a nested run's destructive call asks the caller's user, and the wait holds both runs", async () => {
  await withTempDir("ce-skills-approvals-", async (dir) => {
    const server = await startApprovalServer({
      settings: {
        skills: { projectDir: join(dir, "project-skills"), userDir: join(dir, "user-skills") },
      },
    });
    try {
      const saved = await server.runTs(`
        ${createEntities(["Ann", "Ben"])}
        return await skills.save({
          name: "forget",
          description: "Deletes a memory entity",
          language: "python",
          inputSchema: { type: "object", properties: { name: { type: "string" } }, required: ["name"] },
          code: 'await call_mcp_tool("mcp__memory__delete_entities", {"entityNames": [args["name"]]})\\n"forgot " + args["name"]',
        });`);
      assertEquals(saved.ok, true, describeResult(saved));
      assertEquals(server.asked.length, 0);

      server.answer = choose("deny");
      const denied = await server.runTs(`
        try {
          return await skills.forget({ name: "Ann" });
        } catch (error) {
          return [error.name, error.message];
        }`);
      const [name, message] = denied.returnValue as string[];
      assertEquals(name, "ApprovalDenied", describeResult(denied));
      assertMatch(message, /denied the call to mcp__memory__delete_entities/);
      assertEquals(server.asked.length, 1);
      assertMatch(server.asked[0].message, /"delete_entities" of the MCP server "memory"/);
      assertMatch(await memoryText(server), /"name":"Ann"/);
      assertEquals(denied.toolCalls.map((c) => [c.name, c.ok]), [
        ["mcp__memory__delete_entities", false],
      ]);

      // The person takes longer than the caller's whole timeout: the wait counts for neither run.
      server.answer = async () => {
        await new Promise((resolve) => setTimeout(resolve, 12_000));
        return { action: "accept", content: { decision: "approve" } };
      };
      const approved = await server.runTs('return await skills.forget({ name: "Ann" });', {
        timeoutMs: 8_000,
      });
      assertEquals(approved.returnValue, "forgot Ann", describeResult(approved));
      assertEquals(server.asked.length, 2);
      assert(!(await memoryText(server)).includes('"name":"Ann"'), "Ann was not deleted");
      assertMatch(await memoryText(server), /"name":"Ben"/);
    } finally {
      await server.close();
    }
  });
});
