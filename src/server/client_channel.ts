/**
 * Builds the SDK-free {@linkcode ClientChannel} of one `tools/call` from the request handler's
 * context: the client's model (`sampling/createMessage`), its user (`elicitation/create`, one
 * question of the call at a time) and progress notifications for the call's progress token.
 *
 * @module
 */
import type {
  CreateMessageRequestParams,
  McpServer,
  ServerContext,
} from "@modelcontextprotocol/server";
import { estimateTokens } from "../sampling/budget.ts";
import type {
  ClientChannel,
  ElicitationRequest,
  ElicitationResponse,
} from "../sampling/channel.ts";
import type { SamplingRequest, SamplingResponse } from "../sampling/types.ts";

/**
 * The SDK's default timeout of server-to-client requests is 60 s; the session enforces
 * `sampling.requestTimeoutMs` and the run's deadline itself, through the signal.
 */
const NO_SDK_TIMEOUT_MS = 2 ** 31 - 1;

/**
 * Whether the request was sent on the 2026-07-28 protocol era: such requests carry the
 * `io.modelcontextprotocol/*` envelope in `_meta`, which 2025-era clients never send.
 *
 * @param ctx The request handler's context.
 * @returns Whether the request is of the 2026-07-28 era.
 * @internal It takes the MCP SDK's types, which `deno doc --lint` takes for private ones
 * (denoland/deno#27364); the SDK documents them.
 */
export function isModernRequest(ctx: ServerContext): boolean {
  const envelope = ctx.mcpReq.envelope;
  return envelope !== undefined && Object.keys(envelope).length > 0;
}

/**
 * The `sampling/createMessage` params of one request of sandbox code.
 *
 * @param request The request, redacted and capped.
 * @returns The params.
 * @internal It returns the MCP SDK's type, which `deno doc --lint` takes for a private one
 * (denoland/deno#27364); the SDK documents it.
 */
export function samplingParams(request: SamplingRequest): CreateMessageRequestParams {
  return {
    messages: request.messages.map((m) => ({
      role: m.role,
      content: { type: "text" as const, text: m.content },
    })),
    maxTokens: request.maxTokens,
    ...(request.systemPrompt !== undefined ? { systemPrompt: request.systemPrompt } : {}),
    ...(request.model !== undefined
      ? { modelPreferences: { hints: [{ name: request.model }] } }
      : {}),
  };
}

/**
 * The client's `sampling/createMessage` result as sandbox code gets it.
 *
 * @param request What was asked (for the estimate of its tokens).
 * @param result The client's result.
 * @returns The answer.
 * @throws {Error} When the answer has no text.
 */
export function samplingResponse(
  request: SamplingRequest,
  result: { content: unknown; model: string; stopReason?: string },
): SamplingResponse {
  const text = textOf(result.content);
  const prompt = request.messages.map((m) => m.content).join("\n") + (request.systemPrompt ?? "");
  return {
    text,
    model: result.model,
    stopReason: result.stopReason ?? "endTurn",
    usage: { inputTokens: estimateTokens(prompt), outputTokens: estimateTokens(text) },
  };
}

function textOf(content: unknown): string {
  const blocks = Array.isArray(content) ? content : [content];
  const texts = blocks.filter((b): b is { type: "text"; text: string } =>
    typeof b === "object" && b !== null && (b as { type?: unknown }).type === "text" &&
    typeof (b as { text?: unknown }).text === "string"
  ).map((b) => b.text);
  if (texts.length === 0) throw new Error("the client's model answered without text");
  return texts.join("");
}

/**
 * Runs tasks one at a time, in the order they came. A task whose signal aborts while it waits
 * leaves the line at once, and the ones behind it still wait for the task ahead of it.
 */
class Turns {
  #last: Promise<void> = Promise.resolve();

  async take<T>(signal: AbortSignal, task: () => Promise<T>): Promise<T> {
    const ahead = this.#last;
    let release!: () => void;
    const mine = new Promise<void>((resolve) => release = resolve);
    this.#last = ahead.then(() => mine);
    try {
      await untilOrAborted(ahead, signal);
      return await task();
    } finally {
      release();
    }
  }
}

/** Waits for `work`, or rejects with the signal's reason as soon as it aborts. */
function untilOrAborted(work: Promise<void>, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    const abort = () => reject(signal.reason);
    signal.addEventListener("abort", abort, { once: true });
    work.then(() => {
      signal.removeEventListener("abort", abort);
      resolve();
    });
  });
}

/**
 * Builds the channel of one tool call.
 *
 * @param server The MCP server the call arrived on.
 * @param ctx The request handler's context.
 * @returns What sandbox code of this call may ask of the client.
 * @internal It takes the MCP SDK's types, which `deno doc --lint` takes for private ones
 * (denoland/deno#27364); the SDK documents them.
 */
export function clientChannel(server: McpServer, ctx: ServerContext): ClientChannel {
  const channel: ClientChannel = {};
  const modern = isModernRequest(ctx);
  const capabilities = server.server.getClientCapabilities();
  // A 2026-07-28 client that declares the capability is asked through input_required rounds
  // (input_rounds.ts), which replace these two; one that does not cannot be asked.
  const era = (what: string) =>
    `the client speaks MCP 2026-07-28 and did not declare the ${what} capability in its request (see docs/sampling.md)`;

  if (modern) channel.noSampling = era("sampling");
  else if (!capabilities?.sampling) {
    channel.noSampling = "the MCP client did not declare the sampling capability";
  } else {
    channel.sample = async (request, { signal }): Promise<SamplingResponse> => {
      const result = await ctx.mcpReq.requestSampling(samplingParams(request), {
        signal,
        timeout: NO_SDK_TIMEOUT_MS,
      });
      return samplingResponse(request, result);
    };
  }

  if (modern) channel.noElicitation = era("elicitation");
  else if (!capabilities?.elicitation) {
    channel.noElicitation = "the MCP client does not support elicitation (asking its user)";
  } else {
    // `send` rather than `elicitInput`: a bare `elicitation: {}` (declared before form and URL
    // modes existed) means form support, which `elicitInput` does not accept.
    const ask = async (
      question: ElicitationRequest,
      { signal, timeoutMs }: { signal: AbortSignal; timeoutMs: number },
    ): Promise<ElicitationResponse> => {
      const result = await ctx.mcpReq.send({
        method: "elicitation/create",
        params: {
          mode: "form",
          message: question.message,
          requestedSchema: question.requestedSchema,
        },
      }, { signal, timeout: Math.min(timeoutMs, NO_SDK_TIMEOUT_MS) });
      const content = result.content;
      return {
        action: String(result.action),
        ...(content && typeof content === "object" && !Array.isArray(content)
          ? { content: content as Record<string, unknown> }
          : {}),
      };
    };
    // One question of the call's at a time, in order: code that asks, or calls tools that need
    // approval, in parallel would otherwise put as many forms before the person at once as the
    // run may have requests in flight (32).
    const turns = new Turns();
    channel.elicit = (question, options) =>
      turns.take(options.signal, () => ask(question, options));
  }

  const token = ctx.mcpReq._meta?.progressToken;
  if (token !== undefined) {
    let progress = 0;
    channel.progress = (message) => {
      progress++;
      ctx.mcpReq.notify({
        method: "notifications/progress",
        params: { progressToken: token, progress, message },
      }).catch(() => {
        // The client went away; the run is being cancelled.
      });
    };
  }
  return channel;
}
