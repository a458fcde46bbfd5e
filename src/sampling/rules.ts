/**
 * Checks what sandbox code asks of the LLM and of the user against the admin's rules. The
 * input comes from a sandbox frame and is hostile: every field is checked for its type, unknown
 * fields are refused, and every system prompt, wherever it hides, must be on the allowlist.
 *
 * @module
 */
import type { SamplingMessage } from "./types.ts";
import { CodeExecutorError } from "../errors.ts";

/** Characters of text one round may send (prompts and system prompt together). */
export const MAX_PROMPT_CHARS = 1_000_000;
/** Messages one round may send. */
export const MAX_MESSAGES = 200;

/** A sampling call after its shape is checked; `maxTokens` is still what the code asked for. */
export interface CheckedSampling {
  /** The conversation, user and assistant turns only. */
  messages: SamplingMessage[];
  /** The one system prompt, allowlisted. */
  systemPrompt?: string;
  /** Output tokens the code asked for. */
  maxTokens?: number;
  /** The model the code asked for. */
  model?: string;
}

const SAMPLE_FIELDS = new Set(["messages", "systemPrompt", "maxTokens", "model"]);
const MESSAGE_FIELDS = new Set(["role", "content"]);

function refuse(message: string): never {
  throw new CodeExecutorError("TypeError", message);
}

function plainObject(value: unknown, what: string): Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    refuse(`${what} must be an object`);
  }
  return value as Record<string, unknown>;
}

function onlyFields(value: Record<string, unknown>, allowed: Set<string>, what: string): void {
  const extra = Object.keys(value).filter((key) => !allowed.has(key));
  if (extra.length > 0) {
    refuse(`${what} has unknown fields: ${extra.map((k) => JSON.stringify(k)).join(", ")}`);
  }
}

function checkSystemPrompt(text: string, allowed: readonly string[]): void {
  if (allowed.includes("*") || allowed.includes(text)) return;
  throw new CodeExecutorError(
    "SamplingPolicyError",
    allowed.length === 0
      ? "System prompt refused: the admin allows no system prompts (sampling.allowedSystemPrompts); put the instructions in the user message"
      : `System prompt refused: it is not one of the ${allowed.length} in sampling.allowedSystemPrompts (they must match verbatim); use one of them or put the instructions in the user message`,
  );
}

/**
 * Checks the arguments of `llm.ask` / `llm.think` from a sandbox frame.
 *
 * A message whose role is `system` (any spelling, since a backend may not care) counts as a
 * system prompt: it must be allowlisted like `systemPrompt`, and it travels as the system
 * prompt, never inside the conversation. One round has at most one distinct system prompt.
 *
 * @param raw The frame's `args` (untrusted).
 * @param allowedSystemPrompts `sampling.allowedSystemPrompts`.
 * @returns The checked call.
 * @throws {CodeExecutorError} `TypeError` for a malformed call, `SamplingPolicyError` for a refused
 *   system prompt.
 */
export function checkSampling(
  raw: unknown,
  allowedSystemPrompts: readonly string[],
): CheckedSampling {
  const args = plainObject(raw, "The LLM call's options");
  onlyFields(args, SAMPLE_FIELDS, "The LLM call's options");
  if (!Array.isArray(args.messages) || args.messages.length === 0) {
    refuse("messages must be a non-empty array of { role, content }");
  }
  if (args.messages.length > MAX_MESSAGES) {
    refuse(`messages has ${args.messages.length} entries, more than ${MAX_MESSAGES}`);
  }
  const systems = new Set<string>();
  if (args.systemPrompt !== undefined && args.systemPrompt !== null) {
    if (typeof args.systemPrompt !== "string") refuse("systemPrompt must be a string");
    systems.add(args.systemPrompt);
  }
  const messages: SamplingMessage[] = [];
  for (const [i, entry] of (args.messages as unknown[]).entries()) {
    const message = plainObject(entry, `messages[${i}]`);
    onlyFields(message, MESSAGE_FIELDS, `messages[${i}]`);
    const { role, content } = message;
    if (typeof content !== "string") refuse(`messages[${i}].content must be a string`);
    if (typeof role !== "string") refuse(`messages[${i}].role must be "user" or "assistant"`);
    const normalized = role.trim().toLowerCase();
    if (normalized === "system" || normalized === "developer") {
      systems.add(content);
      continue;
    }
    if (role !== "user" && role !== "assistant") {
      refuse(`messages[${i}].role must be "user" or "assistant", got ${JSON.stringify(role)}`);
    }
    messages.push({ role, content });
  }
  for (const text of systems) checkSystemPrompt(text, allowedSystemPrompts);
  if (systems.size > 1) {
    throw new CodeExecutorError(
      "SamplingPolicyError",
      "System prompt refused: a round may carry one system prompt, and this one has several (systemPrompt and system messages); send one",
    );
  }
  if (messages.length === 0) refuse("messages must contain at least one user message");
  const chars = messages.reduce((n, m) => n + m.content.length, 0) +
    [...systems].reduce((n, s) => n + s.length, 0);
  if (chars > MAX_PROMPT_CHARS) {
    refuse(`The prompt is ${chars} characters, more than ${MAX_PROMPT_CHARS}; send less text`);
  }
  const checked: CheckedSampling = { messages };
  const [systemPrompt] = systems;
  if (systemPrompt !== undefined) checked.systemPrompt = systemPrompt;
  if (args.maxTokens !== undefined && args.maxTokens !== null) {
    if (!Number.isSafeInteger(args.maxTokens) || (args.maxTokens as number) < 1) {
      refuse("maxTokens must be a positive integer");
    }
    checked.maxTokens = args.maxTokens as number;
  }
  if (args.model !== undefined && args.model !== null) {
    if (typeof args.model !== "string" || args.model.length === 0 || args.model.length > 200) {
      refuse("model must be a non-empty string of at most 200 characters");
    }
    checked.model = args.model;
  }
  return checked;
}

/** A checked `askUser` call. */
export interface CheckedQuestion {
  /** What to ask. */
  message: string;
  /** The answer's schema; absent for a free-text answer. */
  schema?: Record<string, unknown>;
}

/**
 * Checks the arguments of `askUser` from a sandbox frame. The schema must be a flat object
 * schema, as `elicitation/create` requires; the client checks the details.
 *
 * @param raw The frame's `args` (untrusted).
 * @returns The checked question.
 * @throws {CodeExecutorError} `TypeError` for a malformed call.
 */
export function checkQuestion(raw: unknown): CheckedQuestion {
  const args = plainObject(raw, "askUser's arguments");
  onlyFields(args, new Set(["message", "schema"]), "askUser's arguments");
  if (typeof args.message !== "string" || args.message.length === 0) {
    refuse("askUser's message must be a non-empty string");
  }
  if (args.message.length > 10_000) refuse("askUser's message must be at most 10000 characters");
  if (args.schema === undefined || args.schema === null) return { message: args.message };
  const schema = plainObject(args.schema, "askUser's schema");
  if (schema.type !== "object" || typeof schema.properties !== "object" || !schema.properties) {
    refuse(
      'askUser\'s schema must be a JSON Schema object: { type: "object", properties: { name: { type: "string" } }, required?: [...] }',
    );
  }
  if (JSON.stringify(schema).length > 64 * 1024) refuse("askUser's schema is too large");
  return { message: args.message, schema };
}
