/**
 * The provider-API fallback for sampling when the provider is slow or refuses: retries after
 * 429s and 5xx (honouring `retry-after`), its timeouts, and cancellation of a request, a body or
 * a retry wait in flight.
 *
 * @module
 */
import { parseRetryAfter } from "../src/sampling/retry.ts";
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
