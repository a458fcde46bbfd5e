/**
 * The wire formats of the provider APIs that sampling falls back to: how a
 * {@linkcode SamplingRequest} becomes one HTTPS call to each, and how each one's answer becomes a
 * {@linkcode SamplingResponse}, with its stop reason and token usage in MCP's terms.
 *
 * - `anthropic`: the Anthropic Messages API (`/v1/messages`).
 * - `openai`: OpenAI-compatible chat completions (`/chat/completions`).
 * - `gemini`: the Gemini API's `generateContent`.
 *
 * Which provider, base URL and key to use is decided by `providers.ts`; sending and retrying is
 * `retry.ts`.
 *
 * @module
 */
import { CodeExecutorError } from "../errors.ts";
import type { SamplingRequest, SamplingResponse } from "./types.ts";

/** The provider APIs a provider config can name, one wire format each. */
export type ProviderName = "anthropic" | "openai" | "gemini";

/** The provider names, for settings schemas and messages. */
export const PROVIDER_NAMES: readonly ProviderName[] = ["anthropic", "openai", "gemini"];

/** One HTTPS request to a provider API: a JSON POST. */
export interface WireCall {
  /** The endpoint. */
  url: string;
  /** The request headers, the API key's included. */
  headers: Record<string, string>;
  /** The JSON body. */
  body: unknown;
}

/** Where a request goes and what the provider needs besides the request itself. */
export interface WireTarget {
  /** Which wire format to speak. */
  provider: ProviderName;
  /** The API's base URL, without a trailing slash. */
  baseUrl: string;
  /** The model, as the provider spells it. */
  model: string;
  /** The API key, or undefined when none is sent. */
  key?: string;
  /** `openai` only: the body field for the output-token cap. */
  maxTokensField: "max_tokens" | "max_completion_tokens";
}

/** What reading an answer needs besides the answer. */
export interface WireAnswerOptions {
  /** Which wire format the answer is in. */
  provider: ProviderName;
  /** The model that was asked for; reported when the answer names none. */
  model: string;
  /** The request, whose size estimates the input tokens when the answer reports no usage. */
  request: SamplingRequest;
}

/**
 * Builds the provider API call for one sampling request.
 *
 * @param request The request.
 * @param target The provider, base URL, model and key.
 * @returns The URL, headers and JSON body to POST.
 */
export function buildWireCall(request: SamplingRequest, target: WireTarget): WireCall {
  const { key, model } = target;
  const json = { "content-type": "application/json" };
  switch (target.provider) {
    case "anthropic":
      return {
        url: `${target.baseUrl}/v1/messages`,
        headers: { ...json, "x-api-key": key ?? "", "anthropic-version": "2023-06-01" },
        body: {
          model,
          max_tokens: request.maxTokens,
          ...(request.systemPrompt ? { system: request.systemPrompt } : {}),
          messages: request.messages.map(({ role, content }) => ({ role, content })),
        },
      };
    case "openai":
      return {
        url: `${target.baseUrl}/chat/completions`,
        headers: key ? { ...json, authorization: `Bearer ${key}` } : json,
        body: {
          model,
          [target.maxTokensField]: request.maxTokens,
          messages: [
            ...(request.systemPrompt ? [{ role: "system", content: request.systemPrompt }] : []),
            ...request.messages.map(({ role, content }) => ({ role, content })),
          ],
        },
      };
    case "gemini":
      return {
        url: `${target.baseUrl}/v1beta/models/${encodeURIComponent(model)}:generateContent`,
        headers: { ...json, "x-goog-api-key": key ?? "" },
        body: {
          contents: request.messages.map(({ role, content }) => ({
            role: role === "assistant" ? "model" : "user",
            parts: [{ text: content }],
          })),
          ...(request.systemPrompt
            ? { systemInstruction: { parts: [{ text: request.systemPrompt }] } }
            : {}),
          generationConfig: { maxOutputTokens: request.maxTokens },
        },
      };
  }
}

const STOP_REASONS: Record<string, string> = {
  // Anthropic
  end_turn: "endTurn",
  max_tokens: "maxTokens",
  stop_sequence: "stopSequence",
  // OpenAI-compatible
  stop: "endTurn",
  length: "maxTokens",
  // Gemini
  STOP: "endTurn",
  MAX_TOKENS: "maxTokens",
};

function stopReasonOf(raw: unknown): string {
  if (typeof raw !== "string" || raw === "") return "unknown";
  return Object.hasOwn(STOP_REASONS, raw) ? STOP_REASONS[raw] : raw;
}

type Json = Record<string, unknown>;

function object(value: unknown, what: string): Json {
  if (value && typeof value === "object" && !Array.isArray(value)) return value as Json;
  throw new TypeError(`the answer has no ${what}`);
}

function count(value: unknown): number | undefined {
  return typeof value === "number" && Number.isFinite(value) && value >= 0 ? value : undefined;
}

/** About four characters per token: used only when the provider reports no usage. */
function estimateTokens(text: string): number {
  return Math.ceil(text.length / 4);
}

/**
 * Reads a provider API's answer.
 *
 * @param raw The parsed JSON body of the answer.
 * @param options The provider, the model asked for, and the request.
 * @returns The text, the model that answered, the stop reason in MCP's terms and the token usage
 * (estimated at about four characters a token when the provider reports none).
 * @throws {TypeError} When the answer does not have the provider's shape.
 * @throws {CodeExecutorError} `SamplingProviderError` when Gemini blocked the prompt.
 */
export function parseWireAnswer(raw: unknown, options: WireAnswerOptions): SamplingResponse {
  const { provider, model, request } = options;
  const body = object(raw, "JSON object");
  let text: string;
  let stopReason: string;
  let answeredBy: unknown;
  let input: number | undefined;
  let output: number | undefined;
  switch (provider) {
    case "anthropic": {
      if (!Array.isArray(body.content)) throw new TypeError("the answer has no content array");
      text = body.content
        .filter((block): block is Json => object(block, "content block").type === "text")
        .map((block) => String(block.text ?? ""))
        .join("");
      stopReason = stopReasonOf(body.stop_reason);
      answeredBy = body.model;
      const usage = body.usage as Json | undefined;
      input = count(usage?.input_tokens);
      output = count(usage?.output_tokens);
      break;
    }
    case "openai": {
      const choices = body.choices;
      if (!Array.isArray(choices) || choices.length === 0) {
        throw new TypeError("the answer has no choices");
      }
      const choice = object(choices[0], "choice");
      const message = object(choice.message, "message in its first choice");
      const content = message.content ?? message.refusal ?? "";
      text = typeof content === "string" ? content : JSON.stringify(content);
      stopReason = stopReasonOf(choice.finish_reason);
      answeredBy = body.model;
      const usage = body.usage as Json | undefined;
      input = count(usage?.prompt_tokens);
      output = count(usage?.completion_tokens);
      break;
    }
    case "gemini": {
      const candidates = body.candidates;
      if (!Array.isArray(candidates) || candidates.length === 0) {
        const feedback = body.promptFeedback as Json | undefined;
        if (feedback?.blockReason) {
          throw new CodeExecutorError(
            "SamplingProviderError",
            `Sampling request to gemini was refused: Gemini blocked the prompt (${
              String(feedback.blockReason).slice(0, 100)
            }); change the prompt`,
          );
        }
        throw new TypeError("the answer has no candidates");
      }
      const candidate = object(candidates[0], "candidate");
      const parts = (candidate.content as Json | undefined)?.parts;
      text = Array.isArray(parts)
        ? parts
          .map((part) => object(part, "content part"))
          .filter((part) => typeof part.text === "string" && part.thought !== true)
          .map((part) => part.text as string)
          .join("")
        : "";
      stopReason = stopReasonOf(candidate.finishReason);
      answeredBy = body.modelVersion;
      const usage = body.usageMetadata as Json | undefined;
      input = count(usage?.promptTokenCount);
      // Thinking tokens are billed as output but reported apart; the budgets must see them.
      const answer = count(usage?.candidatesTokenCount);
      output = answer === undefined ? undefined : answer + (count(usage?.thoughtsTokenCount) ?? 0);
      break;
    }
  }
  return {
    text,
    model: typeof answeredBy === "string" && answeredBy ? answeredBy : model,
    stopReason,
    usage: {
      inputTokens: input ??
        estimateTokens(
          (request.systemPrompt ?? "") + request.messages.map((m) => m.content).join(""),
        ),
      outputTokens: output ?? estimateTokens(text),
    },
  };
}
