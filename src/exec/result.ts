/**
 * The result of one execution, shared by the sandboxes and the MCP surface.
 *
 * A tool result reaches the model through one of its two channels, and which one depends on the
 * client. Claude Code (2.1.x, its bundled CLI) gives the model `JSON.stringify(structuredContent)`
 * whenever there is one, drops the text blocks, and turns each `resource_link` into a line
 * `[Resource link: name] uri (description)`; past 25,000 tokens (`MAX_MCP_OUTPUT_TOKENS`) it
 * saves the result to a file and shows the model the start. Cursor and the Copilot CLI prefer
 * `structuredContent` too; Claude Desktop and most agent frameworks read only the text. The SDK's
 * client (and so the Inspector) adds a text block of the JSON when a result has none. So a
 * preview of a kept part, the one part that can be large, is sent once, in `structuredContent`
 * (at most `limits.previewChars`), and the text names the kept output, its size and how to read
 * it; everything else is in both, as the specification asks.
 *
 * @module
 */
import { CodeExecutorError, type ExecutionErrorInfo } from "../errors.ts";
import type { Logger } from "../log.ts";
import type { StdoutTokenizer } from "../privacy/stream.ts";
import type { RunTokenizer } from "../privacy/tokenizer.ts";
import type { KeptOutput } from "./output_store.ts";

/** One upstream tool call made by the code. */
export interface ToolCallRecord {
  /** The full tool name, `mcp__server__tool`. */
  name: string;
  /** Whether the call succeeded. */
  ok: boolean;
  /** How long the call took. */
  durationMs: number;
}

/** The LLM use of one execution (`llm.ask`, `llm.think`). */
export interface SamplingSummary {
  /** Rounds answered. */
  rounds: number;
  /** Input tokens of those rounds (estimated when the backend does not count them). */
  inputTokens: number;
  /** Output tokens of those rounds. */
  outputTokens: number;
}

/**
 * An image the code displayed (`display(data, mimeType)`): MCP `image` content of the result, in
 * the order displayed, or a kept output once it did not fit in `limits.maxOutputBytes`.
 */
export interface ResultImage {
  /** `image/png`, `image/jpeg`, `image/gif`, `image/webp` or `image/svg+xml`. */
  mimeType: string;
  /** Its size in bytes. */
  bytes: number;
  /** The image as base64, when it is shown; never in `structuredContent`. */
  data?: string;
  /** The id of the kept output that holds it, when it did not fit (see `outputs`). */
  output?: string;
}

/** The outcome of running code in a sandbox. */
export interface ExecutionResult {
  /** Whether the code ran to completion without an error. */
  ok: boolean;
  /** Captured standard output: whole, or a preview of it when it is in `outputs`. */
  stdout: string;
  /** Captured standard error: whole, or a preview of it when it is in `outputs`. */
  stderr: string;
  /** The JSON-safe value of a top-level `return` (TypeScript) or last expression (Python). */
  returnValue?: unknown;
  /** Set when `ok` is false. */
  error?: ExecutionErrorInfo;
  /** Wall-clock time from the start of the execution to its result. */
  durationMs: number;
  /** Upstream tool calls, in the order they finished: the first 100 (`MAX_TOOL_CALL_RECORDS`). */
  toolCalls: ToolCallRecord[];
  /** Calls made past the ones in `toolCalls`, counted but not listed. */
  toolCallsOmitted?: number;
  /** Set when stdout or stderr was cut at the cap, or a part is shown as a preview. */
  truncated?: boolean;
  /**
   * Parts that passed `limits.maxOutputBytes` and are kept whole for the run's principal (for
   * `outputs.ttlMs`): read them with `resources/read` or `readOutput(id)` in a later run.
   */
  outputs?: KeptOutput[];
  /** Set when the code asked an LLM. */
  sampling?: SamplingSummary;
  /** Images the code displayed, in order (`display()`). */
  images?: ResultImage[];
}

/**
 * Replaces personal data by placeholders in every string of a result the model reads: output,
 * return value, the error's type (a name the code chose: a class or `error.name`), message and
 * traceback, the tool names of `toolCalls` (what the code called them), and any field added later
 * (`privacy.tokenize`). Only `outputs` is left as it is: the host made its ids and links.
 *
 * @param result The execution result.
 * @param tokenizer The run's tokenizer.
 * @param stdout What detected the run's stdout while it printed; without it, stdout is detected
 *   here whole.
 * @returns The result with placeholders.
 */
export async function tokenizeResult(
  result: ExecutionResult,
  tokenizer: RunTokenizer,
  stdout?: StdoutTokenizer,
): Promise<ExecutionResult> {
  // An image's base64 is not text: a placeholder in it would break the image.
  const { stdout: shown, outputs, images, ...rest } = result;
  // In this order, so that new values are numbered as they always were: the rest, then stdout.
  const tokenized = await tokenizer.value(rest);
  return {
    ...tokenized,
    stdout: stdout ? await stdout.finish(shown) : await tokenizer.text(shown),
    ...(outputs ? { outputs } : {}),
    ...(images ? { images } : {}),
  };
}

/**
 * Renders a result as compact text for clients that do not read `structuredContent`: all of it,
 * except the previews of kept parts, which are in `structuredContent` only (see the module
 * documentation); the text names each kept part instead.
 *
 * @param result The execution result.
 * @returns Human- and model-readable text.
 */
export function renderResult(result: ExecutionResult): string {
  const parts: string[] = [];
  const kept = new Set(result.outputs?.map((output) => output.part));
  if (result.stdout && !kept.has("stdout")) parts.push(result.stdout.replace(/\n$/, ""));
  if (result.stderr && !kept.has("stderr")) {
    parts.push(`[stderr]\n${result.stderr.replace(/\n$/, "")}`);
  }
  if (result.returnValue !== undefined) {
    parts.push(`[return] ${JSON.stringify(result.returnValue)}`);
  }
  if (result.error) {
    parts.push(`[error] ${result.error.type}: ${result.error.message}`);
    const traceback = result.error.traceback &&
      withoutMessageLine(result.error.traceback, result.error.message);
    if (traceback) parts.push(traceback);
  }
  (result.images ?? []).forEach((image, index) => {
    if (image.output === undefined) {
      parts.push(`[image ${index + 1}: ${image.mimeType}, ${image.bytes} bytes, after this text]`);
    }
  });
  for (const output of result.outputs ?? []) {
    if (output.part === "image") {
      const index = result.images?.findIndex((image) => image.output === output.id) ?? -1;
      parts.push(
        `[image ${
          index + 1
        } (${output.mimeType}) kept whole: ${output.uri}, read with resources/read; it passed limits.maxOutputBytes]`,
      );
      continue;
    }
    const what = output.part === "returnValue" ? "the return value (JSON)" : output.part;
    const preview = output.part === "returnValue" ? "" : result[output.part];
    const shown = preview
      ? `; structuredContent.${output.part} shows its first ${preview.length} characters`
      : "";
    parts.push(
      `[${what} kept whole: ${output.bytes} bytes, ${output.uri}; a later run reads it with readOutput("${output.id}") / read_output(…)${shown}]`,
    );
  }
  if (result.truncated && !result.outputs) parts.push("[output truncated]");
  const count = result.toolCalls.length + (result.toolCallsOmitted ?? 0);
  const calls = count ? `, ${count} tool calls` : "";
  const llm = result.sampling
    ? `, ${result.sampling.rounds} LLM rounds (${
      result.sampling.inputTokens + result.sampling.outputTokens
    } tokens)`
    : "";
  parts.push(`[${result.ok ? "ok" : "failed"} in ${result.durationMs} ms${calls}${llm}]`);
  return parts.join("\n");
}

/**
 * Removes from a traceback the line that repeats the error's message (`TypeError: boom` at the
 * top of a JavaScript stack, `ZeroDivisionError: division by zero` at the end of a Python
 * traceback): the `[error]` line already says it, and every failed run would pay for it twice.
 *
 * @param traceback The traceback.
 * @param message The error's message.
 * @returns The traceback without that line.
 */
export function withoutMessageLine(traceback: string, message: string): string {
  if (!message) return traceback;
  for (
    let at = traceback.lastIndexOf(message);
    at > 0;
    at = traceback.lastIndexOf(message, at - 1)
  ) {
    const lineStart = traceback.lastIndexOf("\n", at - 1) + 1;
    // Only a header line, `Name: message`, where Name is an exception's (dotted) name.
    if (!/^[\w.]+: $/.test(traceback.slice(lineStart, at))) continue;
    const end = traceback.indexOf("\n", at + message.length);
    const rest = end < 0 ? "" : traceback.slice(end + 1);
    return (traceback.slice(0, lineStart) + rest).replace(/\n+$/, "");
  }
  return traceback;
}

/**
 * A run that failed in the server: a refusal is its own result, anything else a start error
 * (logged with its stack).
 *
 * @param error What was thrown.
 * @param log The server log.
 * @returns The run's result.
 */
export function failedInServer(error: unknown, log: Logger): ExecutionResult {
  if (error instanceof CodeExecutorError) return error.toResult();
  log.error(`Execution failed inside the server: ${(error as Error).stack ?? error}`);
  return new CodeExecutorError(
    "SandboxStartError",
    `Cannot run the code: ${
      (error as Error).message
    }; check sandbox.denoPath (DENO_PATH) and the server log`,
    { cause: error },
  ).toResult();
}

/**
 * A result that cannot be shown because its personal data could not be replaced by placeholders
 * (the shared store is away): nothing of it is, only why.
 *
 * @param result The run's result.
 * @param error Why it could not be tokenized.
 * @returns The result to send instead.
 */
export function withheld(result: ExecutionResult, error: unknown): ExecutionResult {
  const cause = CodeExecutorError.from(error, "StateUnavailable");
  return {
    ok: false,
    stdout: "",
    stderr: "",
    durationMs: result.durationMs,
    toolCalls: [],
    error: new CodeExecutorError(
      "StateUnavailable",
      `The run ended, but its result is withheld: its personal data could not be replaced by placeholders (privacy.tokenize). ${cause.message}`,
      { cause },
    ).toInfo(),
  };
}
