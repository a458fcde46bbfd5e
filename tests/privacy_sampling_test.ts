/**
 * Personal data in `llm.*` rounds (`privacy.redactSampling`), end to end: the real server driven
 * by a real SDK client that answers `sampling/createMessage` from a handler in the test.
 *
 * @module
 */
import { assert, assertEquals } from "./_assert.ts";
import { type ServerHarness, startServer } from "./_stdio_server.ts";

type SamplingParams = {
  messages: Array<{ role: string; content: { type: string; text?: string } }>;
  systemPrompt?: string;
};

const EMAIL = "jane.doe@example.org";
const CARD = "4111 1111 1111 1111";
const PHONE = "+44 20 7946 0958";

/** A server whose client's model echoes the prompt and adds a phone number and an email. */
async function startEchoModel(
  env: Record<string, string> = {},
): Promise<ServerHarness & { seen: SamplingParams[] }> {
  const seen: SamplingParams[] = [];
  const harness = await startServer({
    env: { CODE_EXECUTOR_SAMPLING_ENABLED: "true", ...env },
    client: { capabilities: { sampling: {} } },
    setup(client) {
      client.setRequestHandler("sampling/createMessage", (request) => {
        const params = request.params as unknown as SamplingParams;
        seen.push(params);
        const prompt = params.messages.map((m) => m.content.text).join(" | ");
        return Promise.resolve({
          model: "test-model",
          role: "assistant" as const,
          content: { type: "text" as const, text: `heard: ${prompt}; call ${PHONE} or ${EMAIL}` },
        });
      });
    },
  });
  return { ...harness, seen };
}

const PROMPT_CODE = `return await llm.ask(
  "Write to ${EMAIL} that card ${CARD} was charged",
);`;

Deno.test("llm.ask() sends neither an email nor a card number to the client, and hides them in the answer", async () => {
  const server = await startEchoModel();
  try {
    const result = await server.runTs(PROMPT_CODE);
    assertEquals(result.error, undefined);
    assertEquals(server.seen.length, 1);
    const sent = server.seen[0].messages[0].content.text!;
    assert(!sent.includes(EMAIL) && !sent.includes("4111"), sent);
    assertEquals(sent, "Write to [REDACTED email] that card [REDACTED card] was charged");
    const answer = String(result.returnValue);
    assert(!answer.includes(EMAIL) && !answer.includes("7946"), answer);
    assertEquals(
      answer,
      `heard: ${sent}; call [REDACTED phone] or [REDACTED email]`,
    );
  } finally {
    await server.close();
  }
});

Deno.test("llm.think() redacts personal data in every message", async () => {
  const server = await startEchoModel();
  try {
    const result = await server.runTs(`return (await llm.think({
      messages: [
        { role: "user", content: "SSN 123-45-6789" },
        { role: "assistant", content: "noted" },
        { role: "user", content: "and ${EMAIL}" },
      ],
    })).text;`);
    assertEquals(result.error, undefined);
    const texts = server.seen[0].messages.map((m) => m.content.text);
    assertEquals(texts, ["SSN [REDACTED ssn]", "noted", "and [REDACTED email]"]);
  } finally {
    await server.close();
  }
});

Deno.test("llm.ask() passes personal data on when the admin turns privacy.redactSampling off", async () => {
  const server = await startEchoModel({ CODE_EXECUTOR_PRIVACY_REDACT_SAMPLING: "false" });
  try {
    const result = await server.runTs(PROMPT_CODE);
    assertEquals(result.error, undefined);
    assertEquals(
      server.seen[0].messages[0].content.text,
      `Write to ${EMAIL} that card ${CARD} was charged`,
    );
    assert(String(result.returnValue).endsWith(`call ${PHONE} or ${EMAIL}`));
  } finally {
    await server.close();
  }
});
