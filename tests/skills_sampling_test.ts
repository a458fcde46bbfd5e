/**
 * A skill draws on its caller's LLM budget: `llm.ask` inside a skill, in the caller's language and
 * in the other one (a nested run), goes to the caller's client and counts against the caller's
 * `sampling.maxRounds`, so that a skill cannot ask more than its caller may.
 *
 * @module
 */
import { join } from "node:path";
import { assertEquals, describeResult } from "./_assert.ts";
import { withTempDir } from "./_fs.ts";
import { startServer } from "./_stdio_server.ts";

Deno.test("skills: llm.ask inside a skill counts against the caller's sampling budget", async () => {
  await withTempDir("ce-skills-sampling-", async (dir) => {
    const prompts: string[] = [];
    const server = await startServer({
      env: { CODE_EXECUTOR_SAMPLING_ENABLED: "true" },
      settings: {
        skills: { projectDir: join(dir, "project-skills"), userDir: join(dir, "user-skills") },
      },
      client: { capabilities: { sampling: {} } },
      setup(client) {
        client.setRequestHandler("sampling/createMessage", (request) => {
          const last = request.params.messages.at(-1)!.content as { text?: string };
          prompts.push(String(last.text));
          return Promise.resolve({
            model: "test-model",
            role: "assistant" as const,
            content: { type: "text" as const, text: `answer to ${last.text}` },
          });
        });
      },
    });
    try {
      for (
        const [name, language, code] of [
          ["ask-ts", "typescript", "return await llm.ask(args.q);"],
          ["ask-py", "python", 'await llm.ask(args["q"])'],
        ]
      ) {
        const saved = await server.runTs(
          `return await skills.save(${
            JSON.stringify({ name, language, code, description: "Asks" })
          });`,
        );
        assertEquals(saved.ok, true, describeResult(saved));
      }
      // Two rounds allowed: the caller's own question and one skill's; the next is refused.
      const code = (callee: string) => `
        const own = await llm.ask("own");
        const first = await skills.${callee}({ q: "first" });
        let second;
        try {
          second = await skills.${callee}({ q: "second" });
        } catch (error) {
          second = error.name;
        }
        return [own, first, second];`;
      for (const callee of ["ask_ts", "ask_py"]) {
        prompts.length = 0;
        const result = await server.runTs(code(callee), { sampling: { maxRounds: 2 } });
        assertEquals(
          result.returnValue,
          ["answer to own", "answer to first", "SamplingBudgetError"],
          describeResult(result),
        );
        assertEquals(result.sampling?.rounds, 2, describeResult(result));
        assertEquals(prompts, ["own", "first"]);
      }
    } finally {
      await server.close();
    }
  });
});
