/**
 * The provider-API fallback for sampling, against a loopback HTTP server that speaks each
 * provider's wire format (the real APIs are not reachable from here).
 *
 * @module
 */
import {
  createProviderBackend,
  type ProviderConfig,
  providerFromEnv,
} from "../src/sampling/providers.ts";
import { parseRetryAfter } from "../src/sampling/retry.ts";
import type { SamplingRequest } from "../src/sampling/types.ts";
import { assert, assertEquals, assertMatch, assertRejects } from "./_assert.ts";
import { CodeExecutorError } from "../src/errors.ts";

/** A key that no redaction pattern recognizes: only the backend's own care keeps it out. */
const KEY = "test-key-8f3e2a9c71d4";

/** One request as the test server saw it. */
interface Seen {
  method: string;
  path: string;
  headers: Headers;
  body: Record<string, unknown>;
  at: number;
}

type Handler = (seen: Seen, index: number, closing: Promise<void>) => Response | Promise<Response>;

/**
 * A loopback server that records every request and answers with `handler`. A handler that
 * must never answer awaits `closing`, which resolves when the test is done with the server.
 */
async function withServer(
  handler: Handler,
  fn: (baseUrl: string, seen: Seen[]) => Promise<void>,
): Promise<void> {
  const seen: Seen[] = [];
  let release!: () => void;
  const closing = new Promise<void>((resolve) => release = resolve);
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    async (request) => {
      const url = new URL(request.url);
      const entry: Seen = {
        method: request.method,
        path: url.pathname + url.search,
        headers: request.headers,
        body: await request.json().catch(() => ({})),
        at: performance.now(),
      };
      seen.push(entry);
      return await handler(entry, seen.length - 1, closing);
    },
  );
  // Should a request never be aborted, answering it after a while fails the test instead of
  // hanging the suite.
  const guard = setTimeout(release, 15_000);
  try {
    await fn(`http://127.0.0.1:${server.addr.port}`, seen);
  } finally {
    clearTimeout(guard);
    release();
    await server.shutdown();
  }
}

/**
 * A response whose headers arrive but whose body does not: `response(closing)` is the handler's
 * answer, and `cancelled` resolves when the client drops the body. The body ends when the test
 * is done with the server, so that a client that never aborts fails the test instead of hanging.
 */
function stalledBody(): {
  response: (closing: Promise<void>) => Response;
  cancelled: Promise<void>;
} {
  let onCancel!: () => void;
  const cancelled = new Promise<void>((resolve) => onCancel = resolve);
  return {
    cancelled,
    response: (closing) => {
      const body = new ReadableStream<Uint8Array>({
        start(controller) {
          closing.then(() => {
            try {
              controller.close();
            } catch {
              // Already cancelled by the client.
            }
          });
        },
        cancel: () => onCancel(),
      });
      return new Response(body, { headers: { "content-type": "application/json" } });
    },
  };
}

/** Waits for `promise`, failing after 10 s instead of hanging the suite. */
async function eventually(promise: Promise<void>, what: string): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const gaveUp = new Promise<boolean>((resolve) =>
    timer = setTimeout(() => resolve(false), 10_000)
  );
  try {
    assert(await Promise.race([promise.then(() => true), gaveUp]), what);
  } finally {
    clearTimeout(timer);
  }
}

function json(body: unknown, init: ResponseInit = {}): Response {
  return new Response(JSON.stringify(body), {
    ...init,
    headers: { "content-type": "application/json", ...init.headers },
  });
}

/** The backend with the test key in a private environment. */
function backend(config: ProviderConfig, env: Record<string, string> = {}) {
  const vars: Record<string, string> = {
    ANTHROPIC_API_KEY: KEY,
    OPENAI_API_KEY: KEY,
    GEMINI_API_KEY: KEY,
    ...env,
  };
  return createProviderBackend(config, { env: (name) => vars[name] });
}

const REQUEST: SamplingRequest = {
  systemPrompt: "You are terse.",
  messages: [
    { role: "user", content: "Name a colour." },
    { role: "assistant", content: "Red." },
    { role: "user", content: "Another one." },
  ],
  maxTokens: 64,
};

/** Runs `fn`, which must reject with a CodeExecutorError, and returns that error. */
async function samplingError(fn: () => Promise<unknown>): Promise<CodeExecutorError> {
  const error = await assertRejects(fn, CodeExecutorError);
  assert(!String(error.message).includes(KEY), `the key leaked: ${error.message}`);
  assert(!String(error.stack).includes(KEY), "the key leaked into the stack");
  return error;
}

function signal(): AbortSignal {
  return new AbortController().signal;
}

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

Deno.test("createProviderBackend() honors retry-after after a 429", async () => {
  await withServer(
    (_seen, index) =>
      index === 0
        ? json({ error: { message: "Rate limit reached" } }, {
          status: 429,
          headers: { "retry-after": "1" },
        })
        : json({
          model: "claude-x",
          content: [{ type: "text", text: "after the wait" }],
          stop_reason: "end_turn",
          usage: { input_tokens: 1, output_tokens: 3 },
        }),
    async (baseUrl, seen) => {
      const answer = await backend({ provider: "anthropic", baseUrl }).createMessage(REQUEST, {
        signal: signal(),
      });
      assertEquals(answer.text, "after the wait");
      assertEquals(seen.length, 2);
      const gap = seen[1].at - seen[0].at;
      assert(gap >= 950, `the retry came ${gap} ms after the 429, before retry-after: 1`);
    },
  );
});

Deno.test("createProviderBackend() gives up after three 500s with a clear error", async () => {
  await withServer(
    () => json({ error: { message: "Internal error, please retry" } }, { status: 500 }),
    async (baseUrl, seen) => {
      const error = await samplingError(() =>
        backend({
          provider: "openai",
          baseUrl: `${baseUrl}/v1`,
          apiKeyEnv: "OPENAI_API_KEY",
        }).createMessage(REQUEST, { signal: signal() })
      );
      assertEquals(seen.length, 3);
      assertEquals(error.type, "SamplingProviderError");
      assertMatch(error.message, /^Sampling request to openai failed after 3 attempts: HTTP 500/);
      assertMatch(error.message, /Internal error, please retry/);
      assertMatch(error.message, /try again later or configure another provider/);
    },
  );
});

Deno.test("createProviderBackend() does not retry a 400 and redacts the provider's message", async () => {
  await withServer(
    () =>
      json({
        type: "error",
        error: {
          type: "invalid_request_error",
          message: `max_tokens too large; key ${KEY} and sk-ant-api03-abcdefghijklmnopqrstuvwx`,
        },
      }, { status: 400 }),
    async (baseUrl, seen) => {
      const error = await samplingError(() =>
        backend({ provider: "anthropic", baseUrl }).createMessage(REQUEST, { signal: signal() })
      );
      assertEquals(seen.length, 1);
      assertEquals(error.type, "SamplingProviderError");
      assertMatch(error.message, /was refused: HTTP 400 Bad Request: max_tokens too large/);
      assert(!error.message.includes("sk-ant-api03"), error.message);
      assertMatch(error.message, /\[REDACTED\]/);
    },
  );
});

Deno.test("createProviderBackend() names the key variable when the provider rejects the key", async () => {
  await withServer(
    (seen) =>
      json({
        error: { code: 401, message: `API key not valid: ${seen.headers.get("x-goog-api-key")}` },
      }, {
        status: 401,
      }),
    async (baseUrl, seen) => {
      const error = await samplingError(() =>
        backend({ provider: "gemini", baseUrl }).createMessage(REQUEST, { signal: signal() })
      );
      assertEquals(seen.length, 1);
      assertMatch(error.message, /HTTP 401 Unauthorized: API key not valid: \[REDACTED\]/);
      assertMatch(error.message, /check the API key in GEMINI_API_KEY/);
    },
  );
});

Deno.test("createProviderBackend() fails at once when retry-after exceeds the time left", async () => {
  await withServer(
    () => new Response("slow down", { status: 429, headers: { "retry-after": "10" } }),
    async (baseUrl, seen) => {
      const error = await samplingError(() =>
        backend({ provider: "anthropic", baseUrl, timeoutMs: 2_000 }).createMessage(REQUEST, {
          signal: signal(),
        })
      );
      assertEquals(seen.length, 1);
      assertEquals(error.type, "SamplingProviderError");
      assertMatch(error.message, /HTTP 429 Too Many Requests: slow down/);
      assertMatch(error.message, /asked to retry after 10 s but only \d+ ms remain/);
      assertMatch(error.message, /sampling\.provider\.timeoutMs/);
    },
  );
});

Deno.test("createProviderBackend() times out when the provider never answers", async () => {
  await withServer(
    async (_seen, _index, closing) => {
      await closing;
      return new Response("too late");
    },
    async (baseUrl, seen) => {
      const error = await samplingError(() =>
        backend({ provider: "openai", baseUrl, timeoutMs: 300, maxRetries: 0 }).createMessage(
          REQUEST,
          { signal: signal() },
        )
      );
      assertEquals(seen.length, 1);
      assertEquals(error.type, "SamplingTimeoutError");
      assertMatch(error.message, /no answer within 300 ms \(sampling\.provider\.timeoutMs\)/);
    },
  );
});

Deno.test("createProviderBackend() times out and drops a body that never finishes", async () => {
  const stalled = stalledBody();
  await withServer(
    (_seen, _index, closing) => stalled.response(closing),
    async (baseUrl) => {
      const error = await samplingError(() =>
        backend({ provider: "anthropic", baseUrl, timeoutMs: 300 }).createMessage(REQUEST, {
          signal: signal(),
        })
      );
      assertEquals(error.type, "SamplingTimeoutError");
      await eventually(stalled.cancelled, "the server saw the body read aborted");
    },
  );
});

Deno.test("createProviderBackend() cancels an in-flight request when the signal aborts", async () => {
  const controller = new AbortController();
  await withServer(
    async (_seen, _index, closing) => {
      controller.abort(new Error("run cancelled"));
      await closing;
      return new Response("too late");
    },
    async (baseUrl, seen) => {
      const error = await samplingError(() =>
        backend({ provider: "anthropic", baseUrl }).createMessage(REQUEST, {
          signal: controller.signal,
        })
      );
      assertEquals(seen.length, 1);
      assertEquals(error.type, "Cancelled");
      assertMatch(error.message, /cancelled: the run ended or was cancelled/);
    },
  );
});

Deno.test("createProviderBackend() cancels a response body in flight when the signal aborts", async () => {
  const controller = new AbortController();
  const stalled = stalledBody();
  await withServer(
    (_seen, _index, closing) => {
      setTimeout(() => controller.abort(), 50);
      return stalled.response(closing);
    },
    async (baseUrl) => {
      const error = await samplingError(() =>
        backend({ provider: "gemini", baseUrl }).createMessage(REQUEST, {
          signal: controller.signal,
        })
      );
      assertEquals(error.type, "Cancelled");
      await eventually(stalled.cancelled, "the server saw the body read aborted");
    },
  );
});

Deno.test("createProviderBackend() cancels a retry wait when the signal aborts", async () => {
  const controller = new AbortController();
  await withServer(
    () => {
      setTimeout(() => controller.abort(), 50);
      return new Response("busy", { status: 503, headers: { "retry-after": "30" } });
    },
    async (baseUrl, seen) => {
      // Which ends first: the call, or the 30 s wait it was told to make, timed from before the
      // call. A wait that the abort did not cut short ends the call after it.
      let timer: ReturnType<typeof setTimeout> | undefined;
      const waitOver = new Promise<"the retry-after wait">((resolve) =>
        timer = setTimeout(() => resolve("the retry-after wait"), 30_000)
      );
      const call = samplingError(() =>
        backend({ provider: "gemini", baseUrl }).createMessage(REQUEST, {
          signal: controller.signal,
        })
      );
      let first: string;
      try {
        first = await Promise.race([call.then(() => "the call"), waitOver]);
      } finally {
        clearTimeout(timer);
      }
      const error = await call;
      assertEquals(error.type, "Cancelled");
      assertEquals(seen.length, 1);
      assertEquals(first, "the call", "the wait was not cut short");
    },
  );
});

Deno.test("createProviderBackend() refuses a cancelled signal without a request", async () => {
  await withServer(() => new Response("unused"), async (baseUrl, seen) => {
    const error = await samplingError(() =>
      backend({ provider: "anthropic", baseUrl }).createMessage(REQUEST, {
        signal: AbortSignal.abort(),
      })
    );
    assertEquals(error.type, "Cancelled");
    assertEquals(seen.length, 0);
  });
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

Deno.test("parseRetryAfter() reads delay seconds and HTTP dates", () => {
  const now = Date.parse("Sun, 29 Nov 2026 22:00:00 GMT");
  assertEquals(parseRetryAfter("2", now), 2_000);
  assertEquals(parseRetryAfter(" 0.5 ", now), 500);
  assertEquals(parseRetryAfter("Sun, 29 Nov 2026 22:00:07 GMT", now), 7_000);
  assertEquals(parseRetryAfter("Sun, 29 Nov 2026 21:00:00 GMT", now), 0);
  assertEquals(parseRetryAfter("-3", now), undefined);
  assertEquals(parseRetryAfter("soon", now), undefined);
  assertEquals(parseRetryAfter(null, now), undefined);
});
