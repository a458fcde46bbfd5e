/**
 * What one execution may ask of the world beyond its tools: LLM rounds (`llm.ask`,
 * `llm.think`), questions to the user (`askUser`) and progress reports (`progress`). Requests
 * come from sandbox frames and are untrusted; the budget, the system-prompt allowlist,
 * redaction and the audit trail are all applied here.
 *
 * Routing: the MCP client's own model first (`sampling/createMessage`), then the admin's
 * provider API, else a clear error.
 *
 * @module
 */
import type { Settings } from "../config/settings.ts";
import type { AuditLog } from "../policy/audit.ts";
import { redact, redactText } from "../redact.ts";
import { type BudgetCaps, estimateTokens, SamplingBudget, type SamplingTotals } from "./budget.ts";
import type { ClientChannel } from "./channel.ts";
import { checkQuestion, checkSampling } from "./rules.ts";
import type { SamplingBackend, SamplingRequest, SamplingResponse } from "./types.ts";
import { CodeExecutorError } from "../errors.ts";

/** Progress notifications one execution may send; later ones are dropped. */
export const MAX_PROGRESS_NOTIFICATIONS = 1000;

/** The schema of a free-text `askUser` question. */
const FREE_TEXT_SCHEMA = {
  type: "object",
  properties: { answer: { type: "string", title: "Answer" } },
  required: ["answer"],
};

/** Options of {@linkcode ClientSession}. */
export interface ClientSessionOptions {
  /** The admin's `sampling` settings. */
  settings: Settings["sampling"];
  /** This execution's caps (the admin's, possibly lowered by the caller). */
  caps: BudgetCaps;
  /** The MCP client of the tool call; none for command-line runs. */
  channel?: ClientChannel;
  /** The provider API used when the client cannot sample. */
  fallback?: SamplingBackend;
  /** Where each round is recorded. */
  audit?: AuditLog;
  /** The execution's id in the audit log. */
  executionId: string;
  /** Aborted when the execution ends or is cancelled: requests in flight are abandoned. */
  signal: AbortSignal;
  /** How long a question to the user may wait (the run's own deadline still applies). */
  elicitationTimeoutMs: number;
  /**
   * Takes personal data out of a prompt or an answer (`privacy.redactSampling`), after secrets
   * are redacted; none leaves personal data as it is.
   */
  scrubPersonalData?: (text: string) => string;
}

/** The client-facing requests of one execution. */
export class ClientSession {
  #options: ClientSessionOptions;
  #budget: SamplingBudget;
  #progressSent = 0;
  #questions = 0;

  /**
   * Creates the session of one execution, with its own sampling budget.
   *
   * @param options Settings, caps, the client channel, the fallback and the audit log.
   */
  constructor(options: ClientSessionOptions) {
    this.#options = options;
    this.#budget = new SamplingBudget(options.caps);
  }

  /** Rounds and tokens used so far. */
  get totals(): SamplingTotals {
    return this.#budget.totals;
  }

  /**
   * Answers one request frame's op.
   *
   * @param op `sample`, `elicit` or `progress`.
   * @param args The frame's `args` (untrusted).
   * @returns The value for the sandbox.
   * @throws {CodeExecutorError} With a type sandbox code sees as the error's name.
   */
  handle(op: string, args: unknown): Promise<unknown> {
    switch (op) {
      case "sample":
        return this.#sample(args);
      case "elicit":
        return this.#elicit(args);
      case "progress":
        this.#userProgress(args);
        return Promise.resolve(null);
      default:
        return Promise.reject(
          new CodeExecutorError("TypeError", `Unknown sandbox request "${op}"`),
        );
    }
  }

  /**
   * Reports a tool call as progress.
   *
   * @param name The tool's full name.
   */
  toolCall(name: string): void {
    this.#progress(`Calling ${name}`);
  }

  #progress(message: string): void {
    const send = this.#options.channel?.progress;
    if (!send || this.#options.signal.aborted) return;
    if (this.#progressSent >= MAX_PROGRESS_NOTIFICATIONS) return;
    this.#progressSent++;
    send(redactText(message));
  }

  #userProgress(raw: unknown): void {
    const args = (typeof raw === "object" && raw !== null ? raw : {}) as Record<string, unknown>;
    const { done, total, message } = args;
    if (typeof done !== "number" || !Number.isFinite(done)) {
      throw new CodeExecutorError(
        "TypeError",
        "progress(done, total?, message?): done must be a number",
      );
    }
    if (
      total !== undefined && total !== null &&
      (typeof total !== "number" || !Number.isFinite(total))
    ) {
      throw new CodeExecutorError(
        "TypeError",
        "progress(done, total?, message?): total must be a number",
      );
    }
    if (message !== undefined && message !== null && typeof message !== "string") {
      throw new CodeExecutorError(
        "TypeError",
        "progress(done, total?, message?): message must be a string",
      );
    }
    const count = typeof total === "number" ? `${done}/${total}` : `${done}`;
    this.#progress(message ? `${count} ${message.slice(0, 500)}` : count);
  }

  #backend(): SamplingBackend {
    const { channel, fallback } = this.#options;
    if (channel?.sample) {
      const sample = channel.sample.bind(channel);
      return { name: "client", createMessage: (request, options) => sample(request, options) };
    }
    if (fallback) return fallback;
    const why = channel?.noSampling ??
      "this execution has no MCP client (it was started from the command line)";
    throw new CodeExecutorError(
      "SamplingUnavailable",
      `Cannot ask the LLM: ${why}, and no provider API is configured; the admin can set sampling.provider (or CODE_EXECUTOR_AI_PROVIDER and its API key)`,
    );
  }

  async #sample(raw: unknown): Promise<unknown> {
    const { settings, signal } = this.#options;
    if (!settings.enabled) {
      throw new CodeExecutorError(
        "SamplingDisabled",
        "Cannot ask the LLM: sampling is off on this server; the admin turns it on with sampling.enabled (CODE_EXECUTOR_SAMPLING_ENABLED=true)",
      );
    }
    const checked = checkSampling(raw, settings.allowedSystemPrompts);
    const backend = this.#backend();
    const scrub = this.#scrub;
    const messages = checked.messages.map((m) => ({ role: m.role, content: scrub(m.content) }));
    const systemPrompt = checked.systemPrompt === undefined
      ? undefined
      : scrub(checked.systemPrompt);
    const inputTokens = estimateTokens(
      messages.map((m) => m.content).join("\n") + (systemPrompt ?? ""),
    );
    const maxTokens = this.#budget.reserve(
      inputTokens,
      checked.maxTokens ?? settings.defaultMaxTokens,
    );
    const request: SamplingRequest = { messages, maxTokens };
    if (systemPrompt !== undefined) request.systemPrompt = systemPrompt;
    if (checked.model !== undefined) request.model = checked.model;
    const round = this.#budget.totals.rounds + 1;
    this.#progress(`LLM round ${round} of at most ${this.#options.caps.maxRounds}`);

    const started = performance.now();
    const timeout = new AbortController();
    const timer = setTimeout(() => timeout.abort(), settings.requestTimeoutMs);
    let response: SamplingResponse | undefined;
    let failure: CodeExecutorError | undefined;
    try {
      response = await backend.createMessage(request, {
        signal: AbortSignal.any([signal, timeout.signal]),
      });
    } catch (error) {
      failure = this.#failure(error, backend, timeout.signal.aborted);
    } finally {
      clearTimeout(timer);
      this.#budget.settle(inputTokens + maxTokens, response?.usage);
    }
    const answer = response && scrub(response.text);
    this.#record(backend, request, round, performance.now() - started, answer, response, failure);
    if (failure || !response) throw failure;
    return {
      text: answer,
      model: response.model,
      stopReason: response.stopReason,
      usage: { ...response.usage },
    };
  }

  /** Secrets, then personal data when the admin asks for it. */
  #scrub = (text: string): string => {
    const redacted = redactText(text);
    return this.#options.scrubPersonalData?.(redacted) ?? redacted;
  };

  #failure(error: unknown, backend: SamplingBackend, timedOut: boolean): CodeExecutorError {
    if (timedOut) {
      return new CodeExecutorError(
        "SamplingTimeoutError",
        `The LLM (${backend.name}) did not answer within sampling.requestTimeoutMs (${this.#options.settings.requestTimeoutMs} ms); ask for less output or retry`,
        { cause: error },
      );
    }
    if (this.#options.signal.aborted) {
      return new CodeExecutorError(
        "Cancelled",
        "The LLM request was cancelled: the execution ended",
        { cause: error },
      );
    }
    if (error instanceof CodeExecutorError) return error;
    return new CodeExecutorError(
      "SamplingProviderError",
      `The LLM request failed (${backend.name}): ${
        redactText(error instanceof Error ? error.message : String(error))
      }`,
      { cause: error },
    );
  }

  #record(
    backend: SamplingBackend,
    request: SamplingRequest,
    round: number,
    ms: number,
    answer: string | undefined,
    response: SamplingResponse | undefined,
    failure: CodeExecutorError | undefined,
  ): void {
    const { audit, executionId, settings } = this.#options;
    if (!audit) return;
    audit.record({
      kind: "sampling",
      executionId,
      round,
      backend: backend.name,
      model: response?.model ?? request.model ?? null,
      inputTokens: response?.usage.inputTokens ?? 0,
      outputTokens: response?.usage.outputTokens ?? 0,
      ms: Math.round(ms),
      ok: failure === undefined,
      ...(failure ? { errorType: failure.type } : {}),
      ...(settings.auditPrompts
        ? {
          systemPrompt: request.systemPrompt ?? null,
          messages: redact(request.messages),
          ...(answer !== undefined ? { answer } : {}),
        }
        : {}),
    });
  }

  async #elicit(raw: unknown): Promise<unknown> {
    const { settings, channel, signal, audit, executionId } = this.#options;
    if (!settings.elicitation) {
      throw new CodeExecutorError(
        "ElicitationUnavailable",
        "Cannot ask the user: the admin turned askUser off (sampling.elicitation)",
      );
    }
    const question = checkQuestion(raw);
    if (!channel?.elicit) {
      throw new CodeExecutorError(
        "ElicitationUnavailable",
        `Cannot ask the user: ${
          channel?.noElicitation ??
            "this execution has no MCP client (it was started from the command line)"
        }; pass the information in the code instead`,
      );
    }
    // Each question puts a form before a person; without a cap, a loop against a client that
    // answers at once (an auto-decline) asks thousands in one run.
    const max = settings.maxQuestions;
    if (this.#questions >= max) {
      throw new CodeExecutorError(
        "SamplingBudgetError",
        `Cannot ask the user: this execution already asked ${max} questions, its cap (sampling.maxQuestions); ask for several fields in one question (a schema) or split the work across runs`,
      );
    }
    this.#questions++;
    const started = performance.now();
    let action = "error";
    try {
      const answer = await channel.elicit({
        message: redactText(question.message),
        requestedSchema: question.schema ?? FREE_TEXT_SCHEMA,
      }, { signal, timeoutMs: this.#options.elicitationTimeoutMs });
      action = answer.action;
      const content = question.schema ? answer.content : answer.content?.answer;
      return content === undefined ? { action } : { action, content };
    } catch (error) {
      if (signal.aborted) {
        throw new CodeExecutorError(
          "Cancelled",
          "The question was cancelled: the execution ended",
          { cause: error },
        );
      }
      throw new CodeExecutorError(
        "ElicitationError",
        `Cannot ask the user: ${
          redactText(error instanceof Error ? error.message : String(error))
        }`,
        { cause: error },
      );
    } finally {
      audit?.record({
        kind: "elicitation",
        executionId,
        action,
        ms: Math.round(performance.now() - started),
      });
    }
  }
}
