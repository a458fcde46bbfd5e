/**
 * The provider-API fallback for sampling, against a loopback HTTP server that speaks each
 * provider's wire format (the real APIs are not reachable from here): the requests it sends, the
 * answers it maps, and the configurations it refuses.
 *
 * @module
 */
import {
  createProviderBackend,
  type ProviderConfig,
  providerFromEnv,
} from "../src/sampling/providers.ts";
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import {
  backend,
  json,
  KEY,
  REQUEST,
  samplingError,
  signal,
  withServer,
} from "./_provider_server.ts";

Deno.test("createProviderBackend() speaks the Anthropic Messages format", async () => {
  await withServer(
    () =>
      json({
        id: "msg_1",
        type: "message",
        role: "assistant",
        model: "claude-haiku-4-5-20251001",
        content: [
          { type: "thinking", thinking: "hidden" },
          { type: "text", text: "Blue" },
          { type: "text", text: " and green." },
        ],
        stop_reason: "max_tokens",
        usage: { input_tokens: 21, output_tokens: 5 },
      }),
    async (baseUrl, seen) => {
      const answer = await backend({ provider: "anthropic", baseUrl }).createMessage(REQUEST, {
        signal: signal(),
      });
      assertEquals(answer, {
        text: "Blue and green.",
        model: "claude-haiku-4-5-20251001",
        stopReason: "maxTokens",
        usage: { inputTokens: 21, outputTokens: 5 },
      });
      assertEquals(seen.length, 1);
      const [call] = seen;
      assertEquals([call.method, call.path], ["POST", "/v1/messages"]);
      assertEquals(call.headers.get("x-api-key"), KEY);
      assertEquals(call.headers.get("anthropic-version"), "2023-06-01");
      assertEquals(call.headers.get("content-type"), "application/json");
      assertEquals(call.headers.get("authorization"), null);
      assertEquals(call.body, {
        model: "claude-haiku-4-5",
        max_tokens: 64,
        system: "You are terse.",
        messages: REQUEST.messages,
      });
    },
  );
});

Deno.test("createProviderBackend() maps Anthropic's end_turn and omits an absent system prompt", async () => {
  await withServer(
    () =>
      json({
        model: "claude-x",
        content: [{ type: "text", text: "ok" }],
        stop_reason: "end_turn",
        usage: { input_tokens: 3, output_tokens: 1 },
      }),
    async (baseUrl, seen) => {
      const answer = await backend({ provider: "anthropic", baseUrl, model: "claude-x" })
        .createMessage({ messages: [{ role: "user", content: "hi" }], maxTokens: 10 }, {
          signal: signal(),
        });
      assertEquals(answer.stopReason, "endTurn");
      assert(!("system" in seen[0].body), "no system field without a system prompt");
      assertEquals(seen[0].body.model, "claude-x");
    },
  );
});

Deno.test("createProviderBackend() speaks OpenAI-compatible chat completions", async () => {
  await withServer(
    () =>
      json({
        id: "chatcmpl-1",
        object: "chat.completion",
        model: "llama3.2:latest",
        choices: [{
          index: 0,
          message: { role: "assistant", content: "Green." },
          finish_reason: "stop",
        }],
        usage: { prompt_tokens: 30, completion_tokens: 2, total_tokens: 32 },
      }),
    async (baseUrl, seen) => {
      const answer = await backend({
        provider: "openai",
        baseUrl: `${baseUrl}/v1/`,
        model: "llama3.2",
        apiKeyEnv: "OPENAI_API_KEY",
      }).createMessage(REQUEST, { signal: signal() });
      assertEquals(answer, {
        text: "Green.",
        model: "llama3.2:latest",
        stopReason: "endTurn",
        usage: { inputTokens: 30, outputTokens: 2 },
      });
      const [call] = seen;
      assertEquals([call.method, call.path], ["POST", "/v1/chat/completions"]);
      assertEquals(call.headers.get("authorization"), `Bearer ${KEY}`);
      assertEquals(call.body, {
        model: "llama3.2",
        max_tokens: 64,
        messages: [{ role: "system", content: "You are terse." }, ...REQUEST.messages],
      });
    },
  );
});

Deno.test("createProviderBackend() sends no key to a local OpenAI-compatible server unless told to", async () => {
  await withServer(
    () =>
      json({
        model: "m",
        choices: [{ message: { content: "cut" }, finish_reason: "length" }],
        usage: { prompt_tokens: 1, completion_tokens: 64 },
      }),
    async (baseUrl, seen) => {
      const answer = await backend({ provider: "openai", baseUrl, model: "m" }).createMessage(
        REQUEST,
        { signal: signal() },
      );
      assertEquals(answer.stopReason, "maxTokens");
      assertEquals(seen[0].headers.get("authorization"), null);

      await backend({
        provider: "openai",
        baseUrl,
        model: "m",
        apiKeyEnv: "",
        maxTokensField: "max_completion_tokens",
      }).createMessage(REQUEST, { signal: signal() });
      assertEquals(seen[1].headers.get("authorization"), null);
      assertEquals(seen[1].body.max_completion_tokens, 64);
      assert(!("max_tokens" in seen[1].body), "only one token-cap field");
    },
  );
});

Deno.test("createProviderBackend() speaks the Gemini generateContent format", async () => {
  await withServer(
    () =>
      json({
        candidates: [{
          content: {
            role: "model",
            parts: [{ text: "plan", thought: true }, { text: "Yellow" }, { text: "." }],
          },
          finishReason: "MAX_TOKENS",
        }],
        usageMetadata: {
          promptTokenCount: 12,
          candidatesTokenCount: 3,
          thoughtsTokenCount: 4,
          totalTokenCount: 19,
        },
        modelVersion: "gemini-2.5-flash-lite-001",
      }),
    async (baseUrl, seen) => {
      const answer = await backend(
        { provider: "gemini", baseUrl },
        { GEMINI_API_KEY: "", GOOGLE_API_KEY: KEY },
      ).createMessage(REQUEST, { signal: signal() });
      assertEquals(answer, {
        text: "Yellow.",
        model: "gemini-2.5-flash-lite-001",
        stopReason: "maxTokens",
        usage: { inputTokens: 12, outputTokens: 7 },
      });
      const [call] = seen;
      assertEquals(
        [call.method, call.path],
        ["POST", "/v1beta/models/gemini-2.5-flash-lite:generateContent"],
      );
      assertEquals(call.headers.get("x-goog-api-key"), KEY);
      assertEquals(new URL(call.path, baseUrl).searchParams.get("key"), null);
      assertEquals(call.body, {
        contents: [
          { role: "user", parts: [{ text: "Name a colour." }] },
          { role: "model", parts: [{ text: "Red." }] },
          { role: "user", parts: [{ text: "Another one." }] },
        ],
        systemInstruction: { parts: [{ text: "You are terse." }] },
        generationConfig: { maxOutputTokens: 64 },
      });
    },
  );
});

Deno.test("createProviderBackend() maps Gemini's STOP and reports a blocked prompt", async () => {
  await withServer(
    (_seen, index) =>
      index === 0
        ? json({
          candidates: [{ content: { parts: [{ text: "fine" }] }, finishReason: "STOP" }],
          usageMetadata: { promptTokenCount: 2, candidatesTokenCount: 1 },
        })
        : json({ promptFeedback: { blockReason: "SAFETY" } }),
    async (baseUrl) => {
      const gemini = backend({ provider: "gemini", baseUrl, model: "models/gemini-x" });
      const answer = await gemini.createMessage(REQUEST, { signal: signal() });
      assertEquals([answer.text, answer.stopReason, answer.model], ["fine", "endTurn", "gemini-x"]);
      const error = await samplingError(() => gemini.createMessage(REQUEST, { signal: signal() }));
      assertEquals(error.type, "SamplingProviderError");
      assertMatch(
        error.message,
        /was refused: Gemini blocked the prompt \(SAFETY\); change the prompt$/,
      );
    },
  );
});

Deno.test("createProviderBackend() refuses a model outside allowedModels", async () => {
  await withServer(() => new Response("unused"), async (baseUrl, seen) => {
    const limited = backend({
      provider: "anthropic",
      baseUrl,
      model: "claude-haiku-4-5",
      allowedModels: ["claude-haiku-4-5"],
    });
    const error = await samplingError(() =>
      limited.createMessage({ ...REQUEST, model: "claude-opus-4-1" }, { signal: signal() })
    );
    assertEquals(error.type, "SamplingPolicyError");
    assertMatch(
      error.message,
      /^Cannot use model "claude-opus-4-1": it is not in sampling\.provider\.allowedModels \(claude-haiku-4-5\)/,
    );
    const defaultOutside = backend({ provider: "openai", baseUrl, allowedModels: ["x"] });
    const second = await samplingError(() =>
      defaultOutside.createMessage(REQUEST, { signal: signal() })
    );
    assertMatch(second.message, /Cannot use model "gpt-4\.1-mini"/);
    assertEquals(seen.length, 0);
  });
});

Deno.test("createProviderBackend() names the variable to set when the key is missing", async () => {
  await withServer(() => new Response("unused"), async (baseUrl, seen) => {
    const anthropic = createProviderBackend({
      provider: "anthropic",
      baseUrl: "https://127.0.0.1:9",
    }, {
      env: () => undefined,
    });
    const error = await samplingError(() => anthropic.createMessage(REQUEST, { signal: signal() }));
    assertEquals(error.type, "SamplingConfigError");
    assertMatch(error.message, /set the environment variable ANTHROPIC_API_KEY/);

    const gemini = createProviderBackend({ provider: "gemini", baseUrl }, { env: () => "  " });
    const second = await samplingError(() => gemini.createMessage(REQUEST, { signal: signal() }));
    assertMatch(second.message, /set the environment variable GEMINI_API_KEY or GOOGLE_API_KEY/);

    const custom = createProviderBackend({ provider: "openai", baseUrl, apiKeyEnv: "MY_LLM_KEY" }, {
      env: () => undefined,
    });
    const third = await samplingError(() => custom.createMessage(REQUEST, { signal: signal() }));
    assertMatch(third.message, /set the environment variable MY_LLM_KEY/);
    assertEquals(seen.length, 0);
  });
});

Deno.test("createProviderBackend() retries an unreachable provider, then says so", async () => {
  const closed = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    () => new Response(),
  );
  const port = closed.addr.port;
  await closed.shutdown();
  const error = await samplingError(() =>
    backend({ provider: "anthropic", baseUrl: `http://127.0.0.1:${port}`, maxRetries: 1 })
      .createMessage(REQUEST, { signal: signal() })
  );
  assertEquals(error.type, "SamplingProviderError");
  assertMatch(error.message, /failed after 2 attempts: .*cannot reach the provider/);
});

Deno.test("createProviderBackend() reports an answer that is not the provider's format", async () => {
  await withServer(
    (_seen, index) => index === 0 ? new Response("<html>proxy</html>") : json({ hello: 1 }),
    async (baseUrl) => {
      const openai = backend({ provider: "openai", baseUrl });
      const first = await samplingError(() => openai.createMessage(REQUEST, { signal: signal() }));
      assertMatch(first.message, /answer is not JSON: <html>proxy<\/html>/);
      const second = await samplingError(() => openai.createMessage(REQUEST, { signal: signal() }));
      assertMatch(second.message, /the answer has no choices; check sampling\.provider\.baseUrl/);
    },
  );
});

Deno.test("createProviderBackend() rejects configs that would leak the key or cannot work", () => {
  const cases: Array<[ProviderConfig, RegExp]> = [
    [{ provider: "openai", baseUrl: "http://api.example.com/v1" }, /must use https/],
    [{ provider: "anthropic", baseUrl: "https://user:pw@api.example.com" }, /credentials/],
    [{ provider: "anthropic", apiKeyEnv: "" }, /only allowed for an openai provider/],
    [{ provider: "openai", apiKeyEnv: "" }, /only allowed for an openai provider on a localhost/],
    [{ provider: "openai", apiKeyEnv: "sk-real-key" }, /expected an environment variable name/],
    [{ provider: "gemini", timeoutMs: 0 }, /timeoutMs: expected a positive integer/],
    [{ provider: "gemini", maxRetries: -1 }, /maxRetries: expected an integer/],
    [{ provider: "mistral" as "openai" }, /provider: expected one of anthropic, openai, gemini/],
  ];
  for (const [config, pattern] of cases) {
    let thrown: unknown;
    try {
      createProviderBackend(config, { env: () => KEY });
    } catch (error) {
      thrown = error;
    }
    assert(thrown instanceof TypeError, `no TypeError for ${JSON.stringify(config)}`);
    assertMatch(thrown.message, pattern);
    assert(!thrown.message.includes(KEY));
  }
});

Deno.test("providerFromEnv() reads the seed product's variables", () => {
  assertEquals(providerFromEnv({}), undefined);
  assertEquals(providerFromEnv({ CODE_EXECUTOR_AI_PROVIDER: "" }), undefined);
  assertEquals(providerFromEnv({ CODE_EXECUTOR_AI_PROVIDER: "Anthropic" }), {
    provider: "anthropic",
  });
  assertEquals(
    providerFromEnv({
      CODE_EXECUTOR_AI_PROVIDER: "openai",
      CODE_EXECUTOR_AI_MODEL: "grok-4",
      CODE_EXECUTOR_AI_BASE_URL: "https://api.x.ai/v1",
    }),
    { provider: "openai", model: "grok-4", baseUrl: "https://api.x.ai/v1" },
  );
  let thrown: unknown;
  try {
    providerFromEnv({ CODE_EXECUTOR_AI_PROVIDER: "mistral" });
  } catch (error) {
    thrown = error;
  }
  assert(thrown instanceof TypeError);
  assertMatch(thrown.message, /^Invalid environment variable CODE_EXECUTOR_AI_PROVIDER/);
});
