/**
 * The shapes shared by every way of reaching an LLM from sandbox code: the MCP client's own
 * model (sampling) and the provider APIs used as a fallback.
 *
 * @module
 */

/** One message of a conversation; only text is exchanged with sandbox code. */
export interface SamplingMessage {
  /** Who said it; system prompts travel separately, in {@linkcode SamplingRequest.systemPrompt}. */
  role: "user" | "assistant";
  /** The text. */
  content: string;
}

/** A request for one completion, after the host has checked it against the admin's rules. */
export interface SamplingRequest {
  /** The conversation so far. */
  messages: SamplingMessage[];
  /** The system prompt, already checked against the admin's allowlist. */
  systemPrompt?: string;
  /** The most output tokens this round may produce. */
  maxTokens: number;
  /** A model name; the backend's default when omitted. */
  model?: string;
}

/** Token counts of one round, as the backend reported them (estimated when it did not). */
export interface SamplingUsage {
  /** Prompt tokens. */
  inputTokens: number;
  /** Completion tokens. */
  outputTokens: number;
}

/** The answer to a {@linkcode SamplingRequest}. */
export interface SamplingResponse {
  /** The completion's text. */
  text: string;
  /** The model that answered. */
  model: string;
  /** Why generation stopped (`endTurn`, `maxTokens`, `stopSequence`, or the backend's word). */
  stopReason: string;
  /** Token counts. */
  usage: SamplingUsage;
}

/** Something that can answer sampling requests: the MCP client, or a provider API. */
export interface SamplingBackend {
  /** Where the answers come from, for the audit log: `client` or a provider id. */
  readonly name: string;
  /**
   * Asks for one completion.
   *
   * @param request The checked request.
   * @param options `signal` cancels the request (the run ended or was cancelled).
   * @returns The completion.
   * @throws {CodeExecutorError} When the backend refuses or fails; the message says what to change.
   */
  createMessage(
    request: SamplingRequest,
    options: { signal: AbortSignal },
  ): Promise<SamplingResponse>;
}
