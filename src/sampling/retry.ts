/**
 * One JSON POST to a provider API, with an overall deadline, cancellation and retries on 429
 * and 5xx that honor `retry-after`. Every failure becomes a {@linkcode CodeExecutorError} whose
 * message is redacted and never contains the API key.
 *
 * @module
 */
import { redactText } from "../redact.ts";
import { CodeExecutorError } from "../errors.ts";

/** The longest `retry-after` this client waits; a provider asking for more fails the request. */
export const MAX_RETRY_AFTER_MS = 60_000;

/** The first backoff delay when the provider gives no `retry-after`; it doubles each attempt. */
const BASE_BACKOFF_MS = 500;
/** The longest backoff delay without `retry-after`. */
const MAX_BACKOFF_MS = 8_000;
/** How much of a successful response body is read: provider answers are far smaller. */
const MAX_RESPONSE_BYTES = 8 * 1024 * 1024;
/** How much of an error body is read for the error message. */
const MAX_ERROR_BODY_BYTES = 16 * 1024;
/** How much of the provider's error text goes into our message. */
const MAX_ERROR_DETAIL_CHARS = 500;

/** Options for {@linkcode postJsonWithRetry}. */
export interface PostJsonOptions {
  /** Request headers (the auth header included). */
  headers: Record<string, string>;
  /** The JSON body. */
  body: unknown;
  /** The caller's signal: aborting it cancels the request and any retry wait at once. */
  signal: AbortSignal;
  /** The whole call's budget, all attempts and waits included. */
  timeoutMs: number;
  /** Attempts after the first one, on 429, 5xx and network errors. */
  maxRetries: number;
  /** The provider's name for messages (`anthropic`, `openai`, `gemini`). */
  provider: string;
  /** Where the settings live, for messages (`sampling.provider`). */
  settingsPath: string;
  /** Strings that must never appear in an error message (the API key). */
  secrets: string[];
  /** The variable the key came from, for a 401/403 message; undefined when no key is sent. */
  apiKeyEnv?: string;
  /** The fetch to use. */
  fetch: typeof fetch;
}

interface AttemptFailure {
  /** HTTP status, or 0 for a network error. */
  status: number;
  /** The redacted detail (provider message or network error). */
  detail: string;
  /** The delay the provider asked for, in ms. */
  retryAfterMs?: number;
}

/**
 * POSTs a JSON body and returns the parsed JSON of a 2xx answer, retrying 429, 5xx and network
 * errors with exponential backoff or the provider's `retry-after` / `retry-after-ms`.
 *
 * @param url The endpoint.
 * @param options Body, headers, budget, retries and the caller's signal.
 * @returns The parsed response body.
 * @throws {CodeExecutorError} `SamplingTimeoutError` when `timeoutMs` runs out,
 * `Cancelled` when `signal` aborts, `SamplingProviderError` for a refused request,
 * exhausted retries or an answer that is not JSON.
 */
export async function postJsonWithRetry(url: string, options: PostJsonOptions): Promise<unknown> {
  const { signal } = options;
  throwIfCancelled(options);
  const started = Date.now();
  // A cleared timer rather than AbortSignal.timeout(): a server makes many of these calls, and a
  // finished one should not leave a timer behind until its deadline.
  const deadline = new AbortController();
  const timer = setTimeout(
    () => deadline.abort(new DOMException("Deadline reached", "TimeoutError")),
    options.timeoutMs,
  );
  const combined = AbortSignal.any([signal, deadline.signal]);
  const body = JSON.stringify(options.body);
  const attempts = options.maxRetries + 1;
  try {
    for (let attempt = 1;; attempt++) {
      const outcome = await attemptOnce(url, body, combined, deadline.signal, options);
      if ("value" in outcome) return outcome.value;
      const last = outcome.failure;
      if (!isRetryable(last.status)) throw refused(last, options);
      if (attempt >= attempts) throw exhausted(last, attempts, options);
      const remaining = options.timeoutMs - (Date.now() - started);
      const wait = last.retryAfterMs ?? backoffMs(attempt);
      if (last.retryAfterMs !== undefined && wait > Math.min(MAX_RETRY_AFTER_MS, remaining)) {
        throw retryAfterTooLong(last, wait, remaining, options);
      }
      // No room for another attempt: report what the provider said rather than a timeout.
      if (wait >= remaining) throw exhausted(last, attempt, options);
      await sleep(wait, combined);
      throwIfStopped(options, deadline.signal, undefined);
    }
  } finally {
    clearTimeout(timer);
  }
}

async function attemptOnce(
  url: string,
  body: string,
  signal: AbortSignal,
  deadline: AbortSignal,
  options: PostJsonOptions,
): Promise<{ value: unknown } | { failure: AttemptFailure }> {
  let response: Response;
  try {
    response = await options.fetch(url, { method: "POST", headers: options.headers, body, signal });
  } catch (error) {
    throwIfStopped(options, deadline, error);
    return { failure: { status: 0, detail: clean(errorText(error), options.secrets) } };
  }
  if (response.ok) return { value: await readJson(response, options, deadline) };
  return { failure: await failureOf(response, options, deadline) };
}

/**
 * Parses a `retry-after` value: delay seconds (decimals allowed) or an HTTP date.
 *
 * @param value The header value.
 * @param now The current time in ms since the epoch.
 * @returns The delay in ms (at least 0), or undefined when the value is neither form.
 */
export function parseRetryAfter(
  value: string | null,
  now: number = Date.now(),
): number | undefined {
  if (value === null) return undefined;
  const text = value.trim();
  if (/^\d+(\.\d+)?$/.test(text)) return Math.ceil(Number(text) * 1000);
  if (!/[a-z]/i.test(text)) return undefined;
  const date = Date.parse(text);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}

function retryAfterOf(headers: Headers): number | undefined {
  const ms = headers.get("retry-after-ms");
  if (ms !== null && /^\d+(\.\d+)?$/.test(ms.trim())) return Math.ceil(Number(ms.trim()));
  return parseRetryAfter(headers.get("retry-after"));
}

function isRetryable(status: number): boolean {
  return status === 0 || status === 429 || status >= 500;
}

function backoffMs(attempt: number): number {
  const exponential = Math.min(MAX_BACKOFF_MS, BASE_BACKOFF_MS * 2 ** (attempt - 1));
  // Jitter spreads the retries of concurrent runs that failed together.
  return Math.round(exponential * (0.5 + Math.random() * 0.5));
}

function throwIfCancelled(options: PostJsonOptions): void {
  if (options.signal.aborted) {
    throw new CodeExecutorError(
      "Cancelled",
      `Sampling request to ${options.provider} cancelled: the run ended or was cancelled`,
      { cause: options.signal.reason },
    );
  }
}

/** Turns an abort into the right error; anything else is left to the caller. */
function throwIfStopped(options: PostJsonOptions, deadline: AbortSignal, cause: unknown): void {
  throwIfCancelled(options);
  if (deadline.aborted) throw timedOut(options, cause);
}

function timedOut(options: PostJsonOptions, cause?: unknown): CodeExecutorError {
  return new CodeExecutorError(
    "SamplingTimeoutError",
    `Sampling request to ${options.provider} timed out: no answer within ${options.timeoutMs} ms ` +
      `(${options.settingsPath}.timeoutMs); raise that setting or ask for fewer tokens`,
    { cause },
  );
}

async function readJson(
  response: Response,
  options: PostJsonOptions,
  deadline: AbortSignal,
): Promise<unknown> {
  let text: string;
  try {
    text = await readCapped(response, MAX_RESPONSE_BYTES);
  } catch (error) {
    throwIfStopped(options, deadline, error);
    throw new CodeExecutorError(
      "SamplingProviderError",
      `Sampling request to ${options.provider} failed: reading the answer failed: ${
        clean(errorText(error), options.secrets)
      }`,
    );
  }
  try {
    return JSON.parse(text);
  } catch {
    throw new CodeExecutorError(
      "SamplingProviderError",
      `Sampling request to ${options.provider} failed: HTTP ${response.status} answer is not ` +
        `JSON: ${clean(text, options.secrets)}; check ${options.settingsPath}.baseUrl`,
    );
  }
}

async function failureOf(
  response: Response,
  options: PostJsonOptions,
  deadline: AbortSignal,
): Promise<AttemptFailure> {
  const retryAfterMs = retryAfterOf(response.headers);
  let text = "";
  try {
    text = await readCapped(response, MAX_ERROR_BODY_BYTES);
  } catch (error) {
    throwIfStopped(options, deadline, error);
  }
  const status = `HTTP ${response.status}${response.statusText ? ` ${response.statusText}` : ""}`;
  const message = providerMessage(text);
  return {
    status: response.status,
    detail: clean(message ? `${status}: ${message}` : status, options.secrets),
    retryAfterMs,
  };
}

/** Pulls `error.message` out of the error bodies of all three providers, else the raw text. */
function providerMessage(text: string): string {
  try {
    const parsed: unknown = JSON.parse(text);
    const error = (parsed as { error?: unknown })?.error;
    if (typeof error === "string") return error;
    const message = (error as { message?: unknown })?.message;
    if (typeof message === "string") return message;
  } catch {
    // Not JSON: the text itself is the detail.
  }
  return text.trim();
}

/** Reads at most `limit` bytes of a body as text; the rest is cancelled. */
async function readCapped(response: Response, limit: number): Promise<string> {
  if (!response.body) return "";
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    while (size < limit) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
      size += value.byteLength;
    }
  } finally {
    if (size >= limit) await reader.cancel().catch(() => {});
    reader.releaseLock();
  }
  const bytes = new Uint8Array(Math.min(size, limit));
  let offset = 0;
  for (const chunk of chunks) {
    const part = chunk.subarray(0, bytes.byteLength - offset);
    bytes.set(part, offset);
    offset += part.byteLength;
  }
  return new TextDecoder().decode(bytes);
}

function refused(failure: AttemptFailure, options: PostJsonOptions): CodeExecutorError {
  let hint: string;
  if ((failure.status === 401 || failure.status === 403) && options.apiKeyEnv) {
    hint = `check the API key in ${options.apiKeyEnv}`;
  } else if (failure.status === 401 || failure.status === 403) {
    hint = `the server wants an API key: set ${options.settingsPath}.apiKeyEnv to the variable ` +
      "that holds it";
  } else if (failure.status === 404) {
    hint = `check ${options.settingsPath}.baseUrl and the model name`;
  } else {
    hint = "change the request (model, prompt or maxTokens)";
  }
  return new CodeExecutorError(
    "SamplingProviderError",
    `Sampling request to ${options.provider} was refused: ${failure.detail}; ${hint}`,
  );
}

function exhausted(
  failure: AttemptFailure,
  attempts: number,
  options: PostJsonOptions,
): CodeExecutorError {
  const hint = failure.status === 429
    ? "the provider is rate limiting: wait, make fewer sampling calls, or raise the account's limit"
    : failure.status === 0
    ? `cannot reach the provider: check ${options.settingsPath}.baseUrl and the network`
    : "the provider is failing or overloaded: try again later or configure another provider";
  return new CodeExecutorError(
    "SamplingProviderError",
    `Sampling request to ${options.provider} failed after ${attempts} attempt${
      attempts === 1 ? "" : "s"
    }: ${failure.detail}; ${hint}`,
  );
}

function retryAfterTooLong(
  failure: AttemptFailure,
  wait: number,
  remaining: number,
  options: PostJsonOptions,
): CodeExecutorError {
  const limit = remaining < MAX_RETRY_AFTER_MS
    ? `only ${Math.max(0, Math.round(remaining))} ms remain of ${options.settingsPath}.timeoutMs`
    : `this client waits at most ${MAX_RETRY_AFTER_MS / 1000} s`;
  return new CodeExecutorError(
    "SamplingProviderError",
    `Sampling request to ${options.provider} failed: ${failure.detail}; the provider asked to ` +
      `retry after ${Math.ceil(wait / 1000)} s but ${limit}; try again later`,
  );
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** Redacts secret-looking text and the given secrets, and shortens the result. */
function clean(text: string, secrets: string[]): string {
  let out = text;
  for (const secret of secrets) {
    if (secret.length >= 4) out = out.split(secret).join("[REDACTED]");
  }
  out = redactText(out).replace(/\s+/g, " ").trim();
  return out.length > MAX_ERROR_DETAIL_CHARS ? `${out.slice(0, MAX_ERROR_DETAIL_CHARS)}…` : out;
}

/** Waits `ms`, or less when `signal` aborts (then resolves; the caller checks why). */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });
}
