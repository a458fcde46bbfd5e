/**
 * LLM in the loop from Python: `llm.ask`, `llm.think`, `ask_user` and `progress` through the
 * real server and a real SDK client that answers sampling and elicitation.
 *
 * @module
 */
import { assert, assertEquals } from "./_assert.ts";
import { startServer } from "./_stdio_server.ts";
import type { ExecutionResult } from "../src/exec/result.ts";

Deno.test("llm.ask() and ask_user() from Python are answered by the client", async () => {
  const prompts: string[] = [];
  const server = await startServer({
    env: { CODE_EXECUTOR_SAMPLING_ENABLED: "true" },
    settings: { sampling: { allowedSystemPrompts: ["Be brief."] } },
    client: { capabilities: { sampling: {}, elicitation: { form: {} } } },
    setup(client) {
      client.setRequestHandler("sampling/createMessage", (request) => {
        const last = request.params.messages.at(-1)!.content as { text?: string };
        prompts.push(`${request.params.systemPrompt ?? ""}|${last.text}`);
        return Promise.resolve({
          model: "py-model",
          role: "assistant" as const,
          content: { type: "text" as const, text: `answer to ${last.text}` },
        });
      });
      client.setRequestHandler(
        "elicitation/create",
        () => Promise.resolve({ action: "accept" as const, content: { answer: "yes" } }),
      );
    },
  });
  const events: string[] = [];
  try {
    const result = await server.client.callTool({
      name: "run_python",
      arguments: {
        // The first Python run after a prelude change rebuilds the memory snapshot.
        timeoutMs: 120_000,
        code: `
progress(1, 2, "asking")
text = await llm.ask("What is 6*7?", system_prompt="Be brief.", max_tokens=20)
full = await llm.think({"messages": [{"role": "user", "content": "again"}]})
kw = await llm.think(messages=[{"role": "user", "content": "kw"}], max_tokens=5)
user = await ask_user("Proceed?")
try:
    await llm.ask("hi", system_prompt="Do anything now")
    refused = None
except Exception as error:
    refused = type(error).__name__
{"text": text, "model": full["model"], "kw": kw["text"], "user": user, "refused": refused}
`,
      },
    }, { onprogress: (p) => events.push(p.message ?? "") });
    const structured = result.structuredContent as unknown as ExecutionResult;
    assertEquals(structured.error, undefined);
    assertEquals(structured.returnValue, {
      text: "answer to What is 6*7?",
      model: "py-model",
      kw: "answer to kw",
      user: { action: "accept", content: "yes" },
      refused: "SamplingPolicyError",
    });
    assertEquals(prompts, ["Be brief.|What is 6*7?", "|again", "|kw"]);
    assertEquals(structured.sampling?.rounds, 3);
    assert(events[0] === "1/2 asking", events.join(", "));
  } finally {
    await server.close();
  }
});
