/**
 * `run_typescript` / `run_python` for a 2026-07-28 client that can answer questions: the run's
 * questions to the client (`llm.ask`, `askUser`, a person's approval) come back as an
 * `input_required` result, and the client's retry (the answers and the same `requestState`)
 * resumes the run parked in the executor (`src/exec/parked_runs.ts`). The per-request MCP server
 * of `serve --http` keeps nothing: any request of the same principal that reaches this process
 * can resume the run.
 *
 * @module
 */
import {
  type InputRequest,
  inputRequired,
  type InputRequiredResult,
  inputResponse,
  type ServerContext,
} from "@modelcontextprotocol/server";
import { CodeExecutorError } from "../errors.ts";
import type { Executor } from "../exec/executor.ts";
import type { PythonRunOptions } from "../exec/run.ts";
import type { InputAnswer, InputAsk, RunStep } from "../exec/parked_runs.ts";
import type { ExecutionResult } from "../exec/result.ts";
import { isModernRequest, samplingParams, samplingResponse } from "./client_channel.ts";

const CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities";

/**
 * What the 2026-07-28 request's client can answer, or undefined for a request that takes the
 * ordinary path (a 2025-era request, or a client that can answer nothing).
 */
function askable(ctx: ServerContext): { sampling: boolean; elicitation: boolean } | undefined {
  if (!isModernRequest(ctx)) return undefined;
  const envelope = ctx.mcpReq.envelope as Record<string, unknown> | undefined;
  const declared = envelope?.[CLIENT_CAPABILITIES] as Record<string, unknown> | undefined;
  const elicitation = declared?.elicitation as Record<string, unknown> | undefined;
  const can = {
    sampling: declared?.sampling !== undefined,
    // A bare `elicitation: {}` means form mode; a client of URL mode alone cannot answer forms.
    elicitation: elicitation !== undefined &&
      (Object.keys(elicitation).length === 0 || elicitation.form !== undefined),
  };
  return can.sampling || can.elicitation ? can : undefined;
}

/**
 * Whether this `tools/call` is a round of a parked run or starts one.
 *
 * @param ctx The request handler's context.
 * @returns Whether {@linkcode runInRounds} serves it.
 * @internal It takes the MCP SDK's types, which `deno doc --lint` takes for private ones
 * (denoland/deno#27364); the SDK documents them.
 */
export function takesRounds(ctx: ServerContext): boolean {
  return typeof ctx.mcpReq.requestState() === "string" || askable(ctx) !== undefined;
}

function toInputRequest(ask: InputAsk): InputRequest {
  if (ask.kind === "sampling") return inputRequired.createMessage(samplingParams(ask.request));
  // Built by hand: the SDK's `elicit` rejects `enumNames`, which 2025-06-18 clients need.
  return {
    method: "elicitation/create",
    params: {
      mode: "form",
      message: ask.request.message,
      requestedSchema: ask.request.requestedSchema,
    },
  } as InputRequest;
}

/** The retry's `inputResponses` as the parked run takes them; unknown keys are ignored there. */
function answersOf(ctx: ServerContext, asked: Map<string, InputAsk>): Map<string, InputAnswer> {
  const answers = new Map<string, InputAnswer>();
  for (const key of Object.keys(ctx.mcpReq.inputResponses ?? {})) {
    const view = inputResponse(ctx.mcpReq.inputResponses, key);
    if (view.kind === "elicit") {
      const content = view.content;
      answers.set(key, {
        kind: "elicitation",
        response: {
          action: String(view.action),
          ...(content && typeof content === "object" && !Array.isArray(content)
            ? { content: content as Record<string, unknown> }
            : {}),
        },
      });
    } else if (view.kind === "sampling") {
      const ask = asked.get(key);
      const request = ask?.kind === "sampling" ? ask.request : { messages: [], maxTokens: 0 };
      try {
        answers.set(key, { kind: "sampling", response: samplingResponse(request, view.result) });
      } catch (error) {
        answers.set(key, { kind: "failed", message: (error as Error).message });
      }
    }
  }
  return answers;
}

async function callDigest(tool: string, args: unknown): Promise<string> {
  const bytes = new TextEncoder().encode(`${tool}\0${JSON.stringify(args)}`);
  const hash = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return Array.from(hash.slice(0, 16), (b) => b.toString(16).padStart(2, "0")).join("");
}

/** One `tools/call` served in rounds, for {@linkcode runInRounds}. */
export interface RoundCall<R> {
  /**
   * The request handler's context.
   *
   * @internal The MCP SDK's type, which `deno doc --lint` takes for a private one
   * (denoland/deno#27364); the SDK documents it.
   */
  ctx: ServerContext;
  /** The tool called. */
  tool: string;
  /** Its arguments (a retry must repeat them). */
  args: unknown;
  /** The run's options (principal, client channel, limits). */
  options: PythonRunOptions;
  /** Starts the run with the options the conversation adds. */
  run: (options: PythonRunOptions) => Promise<ExecutionResult>;
  /** Renders a finished run as the tool's result. */
  toResult: (result: ExecutionResult) => R;
}

/**
 * Starts or resumes a run of a 2026-07-28 client in `input_required` rounds.
 *
 * @param executor The executor, which keeps the parked runs.
 * @param call The request, the run and how its result is rendered.
 * @returns The tool's result, or the next `input_required` round.
 * @internal It returns the MCP SDK's type, which `deno doc --lint` takes for a private one
 * (denoland/deno#27364); the SDK documents it.
 */
export async function runInRounds<R>(
  executor: Executor,
  call: RoundCall<R>,
): Promise<R | InputRequiredResult> {
  const { ctx, options, run, toResult } = call;
  const parked = executor.parkedRuns;
  const principal = options.principal!;
  const digest = await callDigest(call.tool, call.args);
  const state = ctx.mcpReq.requestState();
  let step: RunStep;
  try {
    if (typeof state === "string") {
      step = await parked.resume(state, {
        principal,
        call: digest,
        answers: (asked) => answersOf(ctx, asked),
        signal: options.signal,
        progress: options.client?.progress,
      });
    } else {
      step = await parked.start({
        principal,
        call: digest,
        base: options.client ?? {},
        can: askable(ctx)!,
        samplingTimeoutMs: executor.settings.sampling.requestTimeoutMs,
        signal: options.signal,
      }, (channel, hold, ended) => run({ ...options, client: channel, hold, signal: ended }));
    }
  } catch (error) {
    if (error instanceof CodeExecutorError) return toResult(error.toResult());
    throw error;
  }
  if ("done" in step) return toResult(step.done);
  return inputRequired({
    inputRequests: Object.fromEntries(
      Object.entries(step.input.asks).map(([key, ask]) => [key, toInputRequest(ask)]),
    ),
    requestState: step.input.requestState,
  });
}
