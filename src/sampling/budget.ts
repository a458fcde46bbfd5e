/**
 * The LLM budget of one execution: rounds and tokens, with the admin's values as ceilings.
 *
 * @module
 */
import type { SamplingUsage } from "./types.ts";
import { CodeExecutorError } from "../errors.ts";

/**
 * Estimates the tokens of a text when the backend does not count them (the MCP client's
 * `sampling/createMessage` result carries no usage): about four characters per token.
 *
 * @param text The text.
 * @returns A whole number of tokens, at least 1 for non-empty text.
 */
export function estimateTokens(text: string): number {
  return Math.ceil(text.length / 4);
}

/** Caps of one execution. */
export interface BudgetCaps {
  /** LLM rounds. */
  maxRounds: number;
  /** Input plus output tokens. */
  maxTokens: number;
}

/** What an execution used, as reported in its result. */
export interface SamplingTotals {
  /** Rounds that were answered. */
  rounds: number;
  /** Input tokens of those rounds. */
  inputTokens: number;
  /** Output tokens of those rounds. */
  outputTokens: number;
}

/**
 * Counts the rounds and tokens of one execution and refuses a round that would pass a cap.
 *
 * @example
 * ```ts
 * const budget = new SamplingBudget({ maxRounds: 10, maxTokens: 10_000 });
 * const input = estimateTokens(prompt);
 * const maxTokens = budget.reserve(input, 1024);
 * // … one round …
 * budget.settle(input + maxTokens, { inputTokens: 40, outputTokens: 300 });
 * ```
 */
export class SamplingBudget {
  #caps: BudgetCaps;
  #started = 0;
  #totals: SamplingTotals = { rounds: 0, inputTokens: 0, outputTokens: 0 };
  #reserved = 0;

  /**
   * Creates the budget of one execution, with nothing spent.
   *
   * @param caps The caps in force for this execution.
   */
  constructor(caps: BudgetCaps) {
    this.#caps = caps;
  }

  /** What has been used so far. */
  get totals(): SamplingTotals {
    return { ...this.#totals };
  }

  /**
   * Takes one round from the budget and sizes its output.
   *
   * @param inputTokens The estimated input of the round.
   * @param wantedOutput The output tokens the call asks for.
   * @returns The output tokens the round may produce.
   * @throws {CodeExecutorError} `SamplingBudgetError` when the rounds or the tokens are used up.
   */
  reserve(inputTokens: number, wantedOutput: number): number {
    const { maxRounds, maxTokens } = this.#caps;
    if (this.#started >= maxRounds) {
      throw new CodeExecutorError(
        "SamplingBudgetError",
        `Cannot ask the LLM: this execution already made ${maxRounds} rounds, its cap (sampling.maxRounds); batch the questions into fewer rounds or split the work across runs`,
      );
    }
    const used = this.#totals.inputTokens + this.#totals.outputTokens + this.#reserved;
    const room = maxTokens - used - inputTokens;
    if (room < 1) {
      throw new CodeExecutorError(
        "SamplingBudgetError",
        `Cannot ask the LLM: this round needs about ${inputTokens} input tokens and the execution has ${
          Math.max(0, maxTokens - used)
        } of its ${maxTokens} tokens left (sampling.maxTokens); send shorter prompts or split the work across runs`,
      );
    }
    const output = Math.min(wantedOutput, room);
    this.#started++;
    this.#reserved += inputTokens + output;
    return output;
  }

  /**
   * Settles a reserved round with what it really used.
   *
   * @param reserved What {@linkcode SamplingBudget.reserve} set aside (input estimate + output).
   * @param usage The round's usage, or undefined when it failed.
   */
  settle(reserved: number, usage: SamplingUsage | undefined): void {
    this.#reserved = Math.max(0, this.#reserved - reserved);
    if (!usage) return;
    this.#totals.rounds++;
    this.#totals.inputTokens += usage.inputTokens;
    this.#totals.outputTokens += usage.outputTokens;
  }
}
