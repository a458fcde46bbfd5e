/**
 * One error vocabulary. Every `error.type` that the server or its sandbox runners produce is a
 * key of {@linkcode ERROR_TYPES}, with where it comes from, what it means and what the caller
 * should change; the compiler checks every type the host writes ({@linkcode ErrorType}). Any
 * other `error.type` is the name of an exception the code itself raised and did not catch
 * (`ZeroDivisionError`, `NotCapable`, …): a {@linkcode RaisedName}, which only
 * {@linkcode errorTypeOf} makes from what a child reported.
 *
 * Naming: the keys are the wire names, which clients and the code in the sandbox match on, so an
 * existing name never changes; a new one ends in `Error` (`QueueFullError`, not `QueueFull`).
 *
 * {@linkcode CodeExecutorError} is the one error class that crosses a boundary: it carries a
 * type from this set, keeps the error it wraps as `cause`, and renders itself as a failed result
 * or as a reply to sandbox code. The conditions the host reports in many places have one message
 * each: {@linkcode timedOut}, {@linkcode cancelled}, {@linkcode outputTooLarge} and
 * {@linkcode toolResultTooLarge}.
 *
 * @module
 */

/**
 * Where an error type comes from: the step of a run that refuses or stops it (`admission`,
 * `sandbox`), what the code asked for (`python`, `tools`, `sampling`, `skills`, `outputs`), the store
 * replicas share (`state`), or the code itself (`code`).
 */
export type ErrorOrigin =
  | "admission"
  | "sandbox"
  | "python"
  | "tools"
  | "sampling"
  | "skills"
  | "outputs"
  | "state"
  | "code";

/** What an error type means, and what to change when it happens. */
export interface ErrorTypeInfo {
  /** Where it comes from, for grouping (the reference page is grouped by it). */
  origin: ErrorOrigin;
  /** What happened. */
  meaning: string;
  /** What the caller (the model, or the admin where it says so) should change. */
  change: string;
}

/** Every `error.type` produced by the server and its runners, grouped by origin. */
export const ERROR_TYPES = {
  // Admission: the run is refused before a child is given to it.
  CodeTooLarge: {
    origin: "admission",
    meaning: "The code is larger than limits.maxCodeBytes",
    change: "Send smaller code; read large data through tools or files",
  },
  LimitError: {
    origin: "admission",
    meaning:
      "An argument asks for more than the admin allows (timeoutMs, sampling caps); skills nested past 4 levels or 4 runs at once",
    change:
      "Pass a smaller value, or leave the argument out; end a skill's recursion; await skills",
  },
  RateLimitError: {
    origin: "admission",
    meaning: "Too many executions per minute, or too many calls to one server per minute",
    change: "Retry after the time the message names",
  },
  QueueFullError: {
    origin: "admission",
    meaning: "limits.maxQueued of the caller's runs are already waiting for a free slot",
    change: "Retry when earlier runs finish",
  },
  PermissionError: {
    origin: "admission",
    meaning:
      "`permissions` asks for a host or path the admin does not allow, or the code used access it was not granted",
    change: "Pass what the message names: hosts in permissions.net, paths under ALLOWED_PROJECTS",
  },
  ImportNotAllowedError: {
    origin: "admission",
    meaning:
      "TypeScript code imports a module the server does not offer: an npm package not in sandbox.npmPackages, a jsr:, http(s): or file import",
    change:
      "Import one of the packages the message lists (by name or npm:name@version), node: built-ins, data: URLs, or a file by absolute file: URL under the run's permissions.read; admin: add the package to sandbox.npmPackages",
  },
  ShuttingDown: {
    origin: "admission",
    meaning: "The server is stopping and takes no new runs",
    change: "Retry once the server is back",
  },
  // The sandbox: the run was stopped from outside, or its process failed.
  TimeoutError: {
    origin: "sandbox",
    meaning: "The run passed its wall-clock limit and was stopped (Python is interrupted first)",
    change: "Pass a larger timeoutMs (up to limits.maxTimeoutMs), or do less work per run",
  },
  MemoryLimitError: {
    origin: "sandbox",
    meaning: "The sandbox used more memory than limits.memoryMb (python.memoryMb for Python)",
    change: "Use less memory, or ask the admin to raise the limit",
  },
  OutputLimitError: {
    origin: "sandbox",
    meaning: "Output passed limits.maxOutputBytes and could not be kept (outputs.maxBytes)",
    change: "Print less and return a summary, or write data to a file and return its path",
  },
  Cancelled: {
    origin: "sandbox",
    meaning: "The client cancelled the run, or the request the code was waiting on",
    change: "Nothing: run it again if it is still needed",
  },
  SandboxStartError: {
    origin: "sandbox",
    meaning: "The sandbox process could not be started",
    change: "Admin: check sandbox.denoPath (DENO_PATH) and the server log",
  },
  SandboxCrash: {
    origin: "sandbox",
    meaning: "The sandbox process died before it reported a result",
    change: "Look at the last line of stderr in the message; avoid what crashes the runtime",
  },
  SandboxProtocolError: {
    origin: "sandbox",
    meaning: "The code wrote to the process's stdout directly, or sent a frame too large",
    change: "Print with console.log / print(); pass smaller arguments and return values",
  },
  SandboxExit: {
    origin: "sandbox",
    meaning: "The code called Deno.exit() or sys.exit() with a failure code before it finished",
    change: "Return a value or throw an error instead of exiting",
  },
  SandboxError: {
    origin: "sandbox",
    meaning: "The Python runner itself failed while running the code",
    change: "Retry; report it if it persists",
  },
  UnsettledPromise: {
    origin: "sandbox",
    meaning: "The code awaited a promise that can never settle (nothing else was left to run)",
    change: "Resolve the promise, or do not await it",
  },
  // Python: the runtime and its sessions.
  PythonUnavailable: {
    origin: "python",
    meaning: "Python cannot run on this server (Pyodide or its snapshot is missing)",
    change: "Admin: see the server log; `deno install` fetches Pyodide",
  },
  SessionEnded: {
    origin: "python",
    meaning:
      "The Python session's interpreter was stopped by an earlier limit or crash, or was lost with the replica that held it",
    change:
      "Start a new session (a new session id; after a lost replica, the same id starts afresh)",
  },
  SessionError: {
    origin: "python",
    meaning: "The session id is malformed",
    change: 'Use 1 to 128 letters, digits, "_", ".", ":" or "-"',
  },
  SessionLimitError: {
    origin: "python",
    meaning: "python.maxSessions sessions are open",
    change: "Reuse an open session, or wait until an idle one expires",
  },
  // Tools: a request of the code to an upstream tool, and the checks on its way.
  ToolError: {
    origin: "tools",
    meaning: "The upstream tool reported a failure (isError); the message is the tool's",
    change: "Read the tool's message and fix the arguments or the request",
  },
  ToolCallError: {
    origin: "tools",
    meaning: "The tool call could not be made: no such server or tool, or the server failed",
    change: "Check the name with searchTools / search_tools; retry if the server was down",
  },
  ToolPolicyError: {
    origin: "tools",
    meaning: "The tool is refused by tools.allow, tools.deny, allowedTools or the call cap",
    change: "Call a tool the policy allows; batch the work or split it across runs",
  },
  ToolValidationError: {
    origin: "tools",
    meaning: "The arguments do not match the tool's input schema",
    change: "Fix the arguments; getToolSchema(name) shows the schema",
  },
  ToolResultTooLarge: {
    origin: "tools",
    meaning: "The tool's result is larger than tools.maxResultBytes",
    change: "Ask the tool for less (paging, filters)",
  },
  PlaceholderError: {
    origin: "tools",
    meaning:
      "A tool call's arguments hold a placeholder (`<email_1>`) this caller was never given, or one that expired",
    change: "Run the code that printed it again and use the placeholder it prints now",
  },
  ApprovalDenied: {
    origin: "tools",
    meaning:
      "The call needs a person's approval, and none was given (denied, no answer in time, or no way to ask)",
    change:
      "Catch it and go on without the call, or follow the message to have a person approve it",
  },
  RequestStateRefused: {
    origin: "tools",
    meaning:
      "A 2026-07-28 retry's requestState was altered, expired, replayed, another principal's, or its run is no longer parked (ended, or lost with the replica that held it)",
    change:
      "Run the code again; retry each input_required round once, with its requestState as sent",
  },
  // The shared state store of replicas (`state.url`).
  StateUnavailable: {
    origin: "state",
    meaning:
      "The shared state store (`state.url`) is unreachable or did not answer within `state.timeoutMs`",
    change: "Retry shortly; admin: check the store and `state.url`",
  },
  ReplicaUnreachableError: {
    origin: "state",
    meaning:
      "The replica that holds the live state a request needs (a parked run, a Python session) did not take the forwarded request within http.forwardTimeoutMs, or stopped answering it; it was not sent again",
    change:
      "Retry shortly (the state may still be there); if it persists, run the code again or use a new session id",
  },
  // Sampling and elicitation: the client's model (`llm.*`) and user (`askUser`).
  SamplingDisabled: {
    origin: "sampling",
    meaning: "llm.ask / llm.think are off on this server",
    change: "Admin: set sampling.enabled (CODE_EXECUTOR_SAMPLING_ENABLED=true)",
  },
  SamplingUnavailable: {
    origin: "sampling",
    meaning: "No LLM can answer: the client does not offer sampling and no provider is set",
    change: "Admin: set sampling.provider and its API key",
  },
  SamplingBudgetError: {
    origin: "sampling",
    meaning:
      "The run used up its LLM rounds, tokens or askUser questions (sampling.maxRounds, maxTokens, maxQuestions)",
    change: "Ask fewer or shorter questions, or ask the admin for a larger budget",
  },
  SamplingPolicyError: {
    origin: "sampling",
    meaning: "The LLM request is refused: a system prompt not on the allowlist, or a bad field",
    change: "Use an allowed system prompt (sampling.allowedSystemPrompts) and valid fields",
  },
  SamplingProviderError: {
    origin: "sampling",
    meaning: "The LLM (the client's or the provider's) refused or failed the request",
    change: "Read the message; retry later or ask for less",
  },
  SamplingConfigError: {
    origin: "sampling",
    meaning: "The admin's LLM provider settings are incomplete (for example a missing API key)",
    change: "Admin: fix sampling.provider and its environment variables",
  },
  SamplingTimeoutError: {
    origin: "sampling",
    meaning: "The LLM did not answer within sampling.requestTimeoutMs",
    change: "Ask for less output, or retry",
  },
  ElicitationUnavailable: {
    origin: "sampling",
    meaning: "askUser cannot reach a person: the client cannot ask, or the admin turned it off",
    change: "Go on without asking, or use a client with elicitation",
  },
  ElicitationError: {
    origin: "sampling",
    meaning: "Asking the user failed (the client refused or broke the request)",
    change: "Read the message; go on without the answer or retry",
  },
  // Skills: the saved programs of the `skills` API.
  SkillNotFound: {
    origin: "skills",
    meaning: "No saved skill has that name (or that version, for name@N) for this caller",
    change: "Call skills.list() or search_tools to see the saved skills and their versions",
  },
  SkillInvalid: {
    origin: "skills",
    meaning:
      "A skill is refused: bad name, description, size, language or input schema, or a stored skill's files are malformed or symlinks",
    change: "Change what the message names (name: lowercase a-z, digits, single hyphens)",
  },
  SkillSaveDisabled: {
    origin: "skills",
    meaning: 'Saving skills is off (skills.save "off"), or for the admin only ("admin")',
    change: "Run the program with run_typescript / run_python, or ask the admin",
  },
  // Outputs: the parts of results kept past their cap.
  OutputNotFound: {
    origin: "outputs",
    meaning: "No kept output has that id: never kept, past outputs.ttlMs, or dropped for room",
    change: "Run the code again to produce it, and read it sooner",
  },
  OutputAccessDenied: {
    origin: "outputs",
    meaning: "The kept output belongs to another principal",
    change: "Read only outputs of your own runs",
  },
  // The code's own: a misused in-sandbox function, or what it threw.
  TypeError: {
    origin: "code",
    meaning: "An in-sandbox function got an argument of the wrong kind (also the code's own)",
    change: "Fix the argument the message names",
  },
  Error: {
    origin: "code",
    meaning: "The code threw a plain Error, or something that is not an Error object",
    change: "Read the message; throw Error subclasses with clear messages",
  },
} as const satisfies Record<string, ErrorTypeInfo>;

/** A type of {@linkcode ERROR_TYPES}. */
export type ErrorType = keyof typeof ERROR_TYPES;

/**
 * The name of an exception the code in a sandbox raised (`ZeroDivisionError`): not a key of
 * {@linkcode ERROR_TYPES}, and made only by {@linkcode errorTypeOf}, from what a child reported.
 */
export type RaisedName = string & { readonly __brand: "RaisedName" };

/** Characters of a reported error type kept: a child may report anything. */
const MAX_TYPE_CHARS = 100;

/**
 * The one door for an error type a child reported, which is untrusted: a string, bounded, and
 * `Error` when there is none.
 *
 * @param reported The `type` of a child's error, as parsed.
 * @returns A type of {@linkcode ERROR_TYPES}, or the name of the code's own exception.
 */
export function errorTypeOf(reported: unknown): ErrorType | RaisedName {
  if (typeof reported !== "string" || reported.length === 0) return "Error";
  const name = reported.slice(0, MAX_TYPE_CHARS);
  return Object.hasOwn(ERROR_TYPES, name) ? name as ErrorType : name as RaisedName;
}

/** What went wrong in an execution, in a form the model can act on. */
export interface ExecutionErrorInfo {
  /** A type of {@linkcode ERROR_TYPES}, or the name of the code's own uncaught exception. */
  type: ErrorType | RaisedName;
  /** What failed and what to change. */
  message: string;
  /** The stack trace, pointing at the code's own line numbers where possible. */
  traceback?: string;
}

/**
 * An error with a type from {@linkcode ERROR_TYPES} that crosses a boundary: a run that is
 * refused or cannot start, a request of sandbox code that fails. It renders itself as what the
 * other side expects, and keeps the error it replaces as `cause`.
 *
 * @example
 * ```ts
 * throw new CodeExecutorError("LimitError", "timeoutMs 90000 is above the admin's maximum", {
 *   cause: error,
 * });
 * ```
 */
export class CodeExecutorError extends Error {
  /** The stable error type. */
  readonly type: ErrorType;

  /**
   * Creates an error of one of the closed set of types.
   *
   * @param type The error type.
   * @param message What failed and which setting or argument to change.
   * @param options The error this one wraps, if any.
   */
  constructor(type: ErrorType, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "CodeExecutorError";
    this.type = type;
  }

  /**
   * Renders the error as the failed result of a run that did not start or was refused.
   *
   * @returns A result with `ok: false`, empty output and this error.
   */
  toResult(): {
    ok: false;
    stdout: string;
    stderr: string;
    error: ExecutionErrorInfo;
    durationMs: number;
    toolCalls: never[];
  } {
    return {
      ok: false,
      stdout: "",
      stderr: "",
      error: this.toInfo(),
      durationMs: 0,
      toolCalls: [],
    };
  }

  /**
   * Renders the error as the `error` of a result.
   *
   * @returns Its type and message.
   */
  toInfo(): { type: ErrorType; message: string } {
    return { type: this.type, message: this.message };
  }

  /**
   * The error as a `CodeExecutorError`: itself if it is one, else one of `type` with its message,
   * keeping it as `cause`.
   *
   * @param error What was thrown.
   * @param type The type for an error that is not a `CodeExecutorError`.
   * @returns The error.
   */
  static from(error: unknown, type: ErrorType): CodeExecutorError {
    if (error instanceof CodeExecutorError) return error;
    return new CodeExecutorError(type, (error as Error)?.message ?? String(error), {
      cause: error,
    });
  }

  /**
   * Renders the error as the reply to a request of sandbox code, which rethrows it there.
   *
   * @returns The reply body.
   */
  toReply(): { ok: false; error: { type: ErrorType; message: string } } {
    return { ok: false, error: this.toInfo() };
  }
}

/** The remedy of a run that ran out of time, unless the caller names another. */
const MORE_TIME =
  "pass a larger timeoutMs (up to the admin's limits.maxTimeoutMs) or do less work per run";

/**
 * A run that passed its wall-clock limit (`TimeoutError`).
 *
 * @param ms The limit the caller set.
 * @param options What the run was waiting for when it ran out (`while …`), and what to do
 *   instead of the usual remedy.
 * @returns The error.
 */
export function timedOut(
  ms: number,
  options: { during?: string; change?: string } = {},
): CodeExecutorError {
  const during = options.during ? ` ${options.during}` : "";
  return new CodeExecutorError(
    "TimeoutError",
    `Execution timed out after ${ms} ms${during}: ${options.change ?? MORE_TIME}`,
  );
}

/**
 * A run stopped from outside: the error its abort signal carries (the server shutting down), or
 * a plain cancellation (`Cancelled`).
 *
 * @param signal The aborted signal, if it may carry a reason.
 * @param options What the run was doing (`while queued`).
 * @returns The error.
 */
export function cancelled(
  signal?: AbortSignal,
  options: { during?: string } = {},
): CodeExecutorError {
  const reason = signal?.reason;
  if (reason instanceof CodeExecutorError) return reason;
  const during = options.during ? ` ${options.during}` : "";
  return new CodeExecutorError("Cancelled", `The execution was cancelled${during}`);
}

/**
 * Output past its cap (`OutputLimitError`): printed output or the return value.
 *
 * @param what What passed which setting, with the sizes.
 * @param change What to do about it.
 * @returns The error.
 */
export function outputTooLarge(what: string, change: string): CodeExecutorError {
  return new CodeExecutorError("OutputLimitError", `Output limit exceeded: ${what}; ${change}`);
}

/**
 * An upstream result past `tools.maxResultBytes` (`ToolResultTooLarge`).
 *
 * @param tool The tool's full name.
 * @param limit Its size as known (`123 bytes`, or `more than 456 bytes`) and the setting's value.
 * @returns The error.
 */
export function toolResultTooLarge(
  tool: string,
  limit: { size: string; maxResultBytes: number },
): CodeExecutorError {
  return new CodeExecutorError(
    "ToolResultTooLarge",
    `The result of ${tool} is ${limit.size}, more than tools.maxResultBytes (${limit.maxResultBytes}); ask the tool for less (paging, filters)`,
  );
}
