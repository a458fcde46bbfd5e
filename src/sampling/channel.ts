/**
 * What the MCP layer offers one execution, without the SDK: the client's model, questions to
 * the user, and progress notifications. `src/server/` builds it from the request's context.
 *
 * @module
 */
import type { SamplingRequest, SamplingResponse } from "./types.ts";

/** A question for the user (`elicitation/create`, form mode). */
export interface ElicitationRequest {
  /** What to ask, already redacted. */
  message: string;
  /** A flat JSON Schema object of the answer's fields. */
  requestedSchema: Record<string, unknown>;
}

/** The user's answer. */
export interface ElicitationResponse {
  /** `accept`, `decline` or `cancel`. */
  action: string;
  /** The answer's fields when accepted. */
  content?: Record<string, unknown>;
}

/** The client's side of one tool call, as far as sandbox code may reach it. */
export interface ClientChannel {
  /**
   * Asks the client's model for one completion (`sampling/createMessage`); absent when the
   * client cannot sample.
   */
  sample?(request: SamplingRequest, options: { signal: AbortSignal }): Promise<SamplingResponse>;
  /** Why {@linkcode ClientChannel.sample} is absent, for the error sandbox code sees. */
  noSampling?: string;
  /** Asks the user (`elicitation/create`); absent when the client cannot elicit. */
  elicit?(
    request: ElicitationRequest,
    options: { signal: AbortSignal; timeoutMs: number },
  ): Promise<ElicitationResponse>;
  /** Why {@linkcode ClientChannel.elicit} is absent. */
  noElicitation?: string;
  /**
   * `sample` and `elicit` are answered in `input_required` rounds (a 2026-07-28 client's parked
   * run), not by requests to the client.
   */
  inRounds?: boolean;
  /**
   * Called when a call was refused because a person must approve it and this client cannot be
   * asked: the server then offers `approve_pending_calls` to the client.
   */
  offerApproval?(): void;
  /**
   * Sends `notifications/progress` with the next progress value; absent when the tool call
   * carried no progress token.
   */
  progress?(message: string): void;
}
