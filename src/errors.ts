/**
 * One error vocabulary. Every `error.type` that the server or its sandbox runners produce is a
 * key of {@linkcode ERROR_TYPES}, with what it means and what the caller should change; the
 * README's table is this one (a test compares them). Any other `error.type` is the name of an
 * exception the code itself raised and did not catch (`ZeroDivisionError`, `RangeError`, …).
 *
 * {@linkcode CodeExecutorError} is the one error class that crosses a boundary: it carries a
 * type from this set, keeps the error it wraps as `cause`, and renders itself as a failed result
 * or as a reply to sandbox code.
 *
 * @module
 */

/** What an error type means, and what to change when it happens. */
export interface ErrorTypeInfo {
  /** What happened. */
  meaning: string;
  /** What the caller (the model, or the admin where it says so) should change. */
  change: string;
}

/** Every `error.type` produced by the server and its runners. */
export const ERROR_TYPES = {
  TimeoutError: {
    meaning: "The run passed its wall-clock limit and was stopped (Python is interrupted first)",
    change: "Pass a larger timeoutMs (up to limits.maxTimeoutMs), or do less work per run",
  },
  MemoryLimitError: {
    meaning: "The sandbox used more memory than limits.memoryMb (python.memoryMb for Python)",
    change: "Use less memory, or ask the admin to raise the limit",
  },
  OutputLimitError: {
    meaning: "Output passed limits.maxOutputBytes and could not be kept (outputs.maxBytes)",
    change: "Print less and return a summary, or write data to a file and return its path",
  },
  OutputNotFound: {
    meaning: "No kept output has that id: never kept, past outputs.ttlMs, or dropped for room",
    change: "Run the code again to produce it, and read it sooner",
  },
  OutputAccessDenied: {
    meaning: "The kept output belongs to another principal",
    change: "Read only outputs of your own runs",
  },
  CodeTooLarge: {
    meaning: "The code is larger than limits.maxCodeBytes",
    change: "Send smaller code; read large data through tools or files",
  },
  LimitError: {
    meaning:
      "An argument asks for more than the admin allows (timeoutMs, sampling caps); skills nested past 4 levels or 4 runs at once",
    change:
      "Pass a smaller value, or leave the argument out; end a skill's recursion; await skills",
  },
  RateLimitError: {
    meaning: "Too many executions per minute, or too many calls to one server per minute",
    change: "Retry after the time the message names",
  },
  QueueFullError: {
    meaning: "limits.maxQueued of the caller's runs are already waiting for a free slot",
    change: "Retry when earlier runs finish",
  },
  Cancelled: {
    meaning: "The client cancelled the run, or the request the code was waiting on",
    change: "Nothing: run it again if it is still needed",
  },
  ShuttingDown: {
    meaning: "The server is stopping and takes no new runs",
    change: "Retry once the server is back",
  },
  PermissionError: {
    meaning:
      "`permissions` asks for a host or path the admin does not allow, or the code used access it was not granted",
    change: "Pass what the message names: hosts in permissions.net, paths under ALLOWED_PROJECTS",
  },
  SandboxStartError: {
    meaning: "The sandbox process could not be started",
    change: "Admin: check sandbox.denoPath (DENO_PATH) and the server log",
  },
  SandboxCrash: {
    meaning: "The sandbox process died before it reported a result",
    change: "Look at the last line of stderr in the message; avoid what crashes the runtime",
  },
  SandboxProtocolError: {
    meaning: "The code wrote to the process's stdout directly, or sent a frame too large",
    change: "Print with console.log / print(); pass smaller arguments and return values",
  },
  SandboxExit: {
    meaning: "The code called Deno.exit() or sys.exit() with a failure code before it finished",
    change: "Return a value or throw an error instead of exiting",
  },
  SandboxError: {
    meaning: "The Python runner itself failed while running the code",
    change: "Retry; report it if it persists",
  },
  UnsettledPromise: {
    meaning: "The code awaited a promise that can never settle (nothing else was left to run)",
    change: "Resolve the promise, or do not await it",
  },
  PythonUnavailable: {
    meaning: "Python cannot run on this server (Pyodide or its snapshot is missing)",
    change: "Admin: see the server log; `deno install` fetches Pyodide",
  },
  SessionEnded: {
    meaning: "The Python session's interpreter was stopped by an earlier limit or crash",
    change: "Start a new session (a new session id)",
  },
  SessionError: {
    meaning: "The session id is malformed",
    change: 'Use 1 to 128 letters, digits, "_", ".", ":" or "-"',
  },
  SessionLimitError: {
    meaning: "python.maxSessions sessions are open",
    change: "Reuse an open session, or wait until an idle one expires",
  },
  ToolError: {
    meaning: "The upstream tool reported a failure (isError); the message is the tool's",
    change: "Read the tool's message and fix the arguments or the request",
  },
  ApprovalDenied: {
    meaning:
      "The call needs a person's approval, and none was given (denied, no answer in time, or no way to ask)",
    change:
      "Catch it and go on without the call, or follow the message to have a person approve it",
  },
  RequestStateRefused: {
    meaning:
      "A 2026-07-28 retry's requestState was altered, expired, replayed, another principal's, or its run is no longer parked here",
    change:
      "Run the code again; retry each input_required round once, with its requestState as sent",
  },
  ToolCallError: {
    meaning: "The tool call could not be made: no such server or tool, or the server failed",
    change: "Check the name with searchTools / search_tools; retry if the server was down",
  },
  ToolPolicyError: {
    meaning: "The tool is refused by tools.allow, tools.deny, allowedTools or the call cap",
    change: "Call a tool the policy allows; batch the work or split it across runs",
  },
  PlaceholderError: {
    meaning:
      "A tool call's arguments hold a placeholder (`<email_1>`) this caller was never given, or one that expired",
    change: "Run the code that printed it again and use the placeholder it prints now",
  },
  ToolValidationError: {
    meaning: "The arguments do not match the tool's input schema",
    change: "Fix the arguments; getToolSchema(name) shows the schema",
  },
  SkillNotFound: {
    meaning: "No saved skill has that name (or that version, for name@N) for this caller",
    change: "Call skills.list() or search_tools to see the saved skills and their versions",
  },
  SkillInvalid: {
    meaning:
      "A skill is refused: bad name, description, size, language or input schema, or a stored skill's files are malformed or symlinks",
    change: "Change what the message names (name: lowercase a-z, digits, single hyphens)",
  },
  SkillSaveDisabled: {
    meaning: 'Saving skills is off (skills.save "off"), or for the admin only ("admin")',
    change: "Run the program with run_typescript / run_python, or ask the admin",
  },
  ToolResultTooLarge: {
    meaning: "The tool's result is larger than tools.maxResultBytes",
    change: "Ask the tool for less (paging, filters)",
  },
  TypeError: {
    meaning: "An in-sandbox function got an argument of the wrong kind (also the code's own)",
    change: "Fix the argument the message names",
  },
  SamplingDisabled: {
    meaning: "llm.ask / llm.think are off on this server",
    change: "Admin: set sampling.enabled (CODE_EXECUTOR_SAMPLING_ENABLED=true)",
  },
  SamplingUnavailable: {
    meaning: "No LLM can answer: the client does not offer sampling and no provider is set",
    change: "Admin: set sampling.provider and its API key",
  },
  SamplingBudgetError: {
    meaning: "The run used up its LLM rounds or tokens (sampling.maxRounds, maxTokens)",
    change: "Ask fewer or shorter questions, or ask the admin for a larger budget",
  },
  SamplingPolicyError: {
    meaning: "The LLM request is refused: a system prompt not on the allowlist, or a bad field",
    change: "Use an allowed system prompt (sampling.allowedSystemPrompts) and valid fields",
  },
  SamplingProviderError: {
    meaning: "The LLM (the client's or the provider's) refused or failed the request",
    change: "Read the message; retry later or ask for less",
  },
  SamplingConfigError: {
    meaning: "The admin's LLM provider settings are incomplete (for example a missing API key)",
    change: "Admin: fix sampling.provider and its environment variables",
  },
  SamplingTimeoutError: {
    meaning: "The LLM did not answer within sampling.requestTimeoutMs",
    change: "Ask for less output, or retry",
  },
  ElicitationUnavailable: {
    meaning: "askUser cannot reach a person: the client cannot ask, or the admin turned it off",
    change: "Go on without asking, or use a client with elicitation",
  },
  ElicitationError: {
    meaning: "Asking the user failed (the client refused or broke the request)",
    change: "Read the message; go on without the answer or retry",
  },
  Error: {
    meaning: "The code threw a plain Error, or something that is not an Error object",
    change: "Read the message; throw Error subclasses with clear messages",
  },
} as const satisfies Record<string, ErrorTypeInfo>;

/**
 * Why a run was stopped from outside: the error an abort signal carries (the server shutting
 * down), or a plain cancellation.
 *
 * @param signal The aborted signal.
 * @param cancelled The message of a plain cancellation.
 * @returns The error to report.
 */
export function abortError(signal: AbortSignal | undefined, cancelled: string): CodeExecutorError {
  const reason = signal?.reason;
  return reason instanceof CodeExecutorError
    ? reason
    : new CodeExecutorError("Cancelled", cancelled);
}

/** A type of {@linkcode ERROR_TYPES}. */
export type ErrorType = keyof typeof ERROR_TYPES;

/** What went wrong in an execution, in a form the model can act on. */
export interface ExecutionErrorInfo {
  /** A type of {@linkcode ERROR_TYPES}, or the name of the code's own uncaught exception. */
  type: string;
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
      error: { type: this.type, message: this.message },
      durationMs: 0,
      toolCalls: [],
    };
  }

  /**
   * Renders the error as the reply to a request of sandbox code, which rethrows it there.
   *
   * @returns The reply body.
   */
  toReply(): { ok: false; error: { type: ErrorType; message: string } } {
    return { ok: false, error: { type: this.type, message: this.message } };
  }
}
