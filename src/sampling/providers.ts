/**
 * The fallback for sampling when the MCP client cannot: a provider API over HTTPS, with plain
 * `fetch` and no provider SDK. Three wire formats cover most of the market (`anthropic`,
 * `openai`, `gemini`; `wire_formats.ts` speaks them). The `openai` base URL is configurable, so
 * it also reaches Grok (`https://api.x.ai/v1`), Perplexity (`https://api.perplexity.ai`), and
 * local servers such as Ollama (`http://localhost:11434/v1`) and vLLM
 * (`http://localhost:8000/v1`).
 *
 * This module checks the admin's config, picks the model and the key, and sends each request
 * through `retry.ts`. API keys come from environment variables only; the config names the
 * variable, never the key.
 *
 * @module
 */
import { postJsonWithRetry } from "./retry.ts";
import type { SamplingBackend, SamplingResponse } from "./types.ts";
import { CodeExecutorError } from "../errors.ts";
import {
  buildWireCall,
  parseWireAnswer,
  PROVIDER_NAMES,
  type ProviderName,
} from "./wire_formats.ts";

/**
 * The admin's settings for one provider API. Plain data, so that it can be a section of the
 * settings file.
 */
export interface ProviderConfig {
  /** Which wire format to speak. */
  provider: ProviderName;
  /** The API's base URL; {@linkcode DEFAULT_BASE_URLS} when omitted. */
  baseUrl?: string;
  /** The model used when a request names none; {@linkcode DEFAULT_MODELS} when omitted. */
  model?: string;
  /**
   * The environment variable holding the API key; {@linkcode DEFAULT_KEY_ENVS} when omitted.
   * `""` sends no key, which only an `openai` provider on a loopback `baseUrl` may do (an
   * `openai` provider on a loopback `baseUrl` sends none by default, too).
   */
  apiKeyEnv?: string;
  /** The only models requests may use (exact names); any model when omitted. */
  allowedModels?: string[];
  /** The budget of one request, retries and their waits included (default 60 000). */
  timeoutMs?: number;
  /** Attempts after the first one, on 429, 5xx and network errors (default 2). */
  maxRetries?: number;
  /**
   * `openai` only: the body field for the output-token cap. OpenAI itself deprecated
   * `max_tokens` and its reasoning models refuse it, while most compatible servers (Ollama, vLLM,
   * Perplexity) know only `max_tokens`. Default: `max_completion_tokens` when `baseUrl` is on
   * `api.openai.com`, else `max_tokens`.
   */
  maxTokensField?: "max_tokens" | "max_completion_tokens";
}

/** Default base URLs. */
export const DEFAULT_BASE_URLS: Readonly<Record<ProviderName, string>> = {
  anthropic: "https://api.anthropic.com",
  openai: "https://api.openai.com/v1",
  gemini: "https://generativelanguage.googleapis.com",
};

/**
 * Default models: each provider's fast, inexpensive tier, because sandbox code tends to call the
 * model in a loop (classify each file, summarize each record), and models that do not reason
 * before answering by default, because hidden reasoning spends the small `maxTokens` of such
 * calls and can leave the answer empty. Set `model` for another one (reasoning models work; their
 * reasoning tokens count as output tokens against the budgets).
 */
export const DEFAULT_MODELS: Readonly<Record<ProviderName, string>> = {
  anthropic: "claude-haiku-4-5",
  openai: "gpt-4.1-mini",
  gemini: "gemini-2.5-flash-lite",
};

/** Default key variables, in the order they are tried. */
export const DEFAULT_KEY_ENVS: Readonly<Record<ProviderName, readonly string[]>> = {
  anthropic: ["ANTHROPIC_API_KEY"],
  openai: ["OPENAI_API_KEY"],
  gemini: ["GEMINI_API_KEY", "GOOGLE_API_KEY"],
};

/** Default of {@linkcode ProviderConfig.timeoutMs}. */
export const DEFAULT_PROVIDER_TIMEOUT_MS = 60_000;
/** Default of {@linkcode ProviderConfig.maxRetries}. */
export const DEFAULT_PROVIDER_MAX_RETRIES = 2;

/** Options for {@linkcode createProviderBackend}. */
export interface ProviderBackendOptions {
  /** Reads an environment variable; `Deno.env.get` when omitted. */
  env?: (name: string) => string | undefined;
  /** The fetch to use; the global one when omitted. */
  fetch?: typeof fetch;
  /** Where the config lives in the settings, for messages (default `sampling.provider`). */
  settingsPath?: string;
}

interface KeySource {
  /** The key, or undefined when none is sent. */
  key?: string;
  /** The variable it came from. */
  env?: string;
}

/**
 * Creates a sampling backend that calls a provider API.
 *
 * The config is checked here; the API key is read from the environment on each request, so a
 * missing key is reported to the code that asked (naming the variable to set), not at startup.
 *
 * @example
 * ```ts
 * const backend = createProviderBackend({ provider: "anthropic", allowedModels: ["claude-haiku-4-5"] });
 * const answer = await backend.createMessage(
 *   { messages: [{ role: "user", content: "Say hi" }], maxTokens: 50 },
 *   { signal: AbortSignal.timeout(30_000) },
 * );
 * ```
 *
 * @param config The provider settings.
 * @param options Where to read the environment, the fetch to use, and the settings path.
 * @returns The backend; its `name` is the provider's.
 * @throws {TypeError} When the config is invalid (unknown provider, bad or non-HTTPS remote
 * `baseUrl`, `apiKeyEnv: ""` where a key is needed, bad numbers).
 */
export function createProviderBackend(
  config: ProviderConfig,
  options: ProviderBackendOptions = {},
): SamplingBackend {
  const settingsPath = options.settingsPath ?? "sampling.provider";
  const checked = checkConfig(config, settingsPath);
  const env = options.env ?? ((name: string) => Deno.env.get(name));
  const doFetch = options.fetch ?? fetch;
  return {
    name: checked.provider,
    async createMessage(request, { signal }): Promise<SamplingResponse> {
      const model = modelName(checked.provider, request.model ?? checked.model);
      if (checked.allowedModels && !checked.allowedModels.includes(model)) {
        throw new CodeExecutorError(
          "SamplingPolicyError",
          `Cannot use model "${model}": it is not in ${settingsPath}.allowedModels (${
            checked.allowedModels.join(", ") || "empty"
          }); ask for one of those or ask the admin to add it`,
        );
      }
      const source = keyOf(checked, env);
      const call = buildWireCall(request, {
        provider: checked.provider,
        baseUrl: checked.baseUrl,
        model,
        key: source.key,
        maxTokensField: checked.maxTokensField,
      });
      const raw = await postJsonWithRetry(call.url, {
        headers: call.headers,
        body: call.body,
        signal,
        timeoutMs: checked.timeoutMs,
        maxRetries: checked.maxRetries,
        provider: checked.provider,
        settingsPath,
        secrets: source.key ? [source.key] : [],
        apiKeyEnv: source.env,
        fetch: doFetch,
      });
      try {
        return parseWireAnswer(raw, { provider: checked.provider, model, request });
      } catch (error) {
        if (error instanceof CodeExecutorError) throw error;
        throw new CodeExecutorError(
          "SamplingProviderError",
          `Sampling request to ${checked.provider} failed: ${
            error instanceof Error ? error.message : String(error)
          }; check ${settingsPath}.baseUrl points at a ${checked.provider} API`,
          { cause: error },
        );
      }
    },
  };
}

/**
 * Builds a {@linkcode ProviderConfig} from the seed product's environment variables:
 * `CODE_EXECUTOR_AI_PROVIDER` (`anthropic`, `openai` or `gemini`), and optionally
 * `CODE_EXECUTOR_AI_MODEL` and `CODE_EXECUTOR_AI_BASE_URL`.
 *
 * @param env The environment.
 * @returns The config, or undefined when `CODE_EXECUTOR_AI_PROVIDER` is unset or empty.
 * @throws {TypeError} When `CODE_EXECUTOR_AI_PROVIDER` names no known provider.
 */
export function providerFromEnv(
  env: Record<string, string | undefined>,
): ProviderConfig | undefined {
  const provider = env.CODE_EXECUTOR_AI_PROVIDER?.trim().toLowerCase();
  if (!provider) return undefined;
  if (!isProviderName(provider)) {
    throw new TypeError(
      `Invalid environment variable CODE_EXECUTOR_AI_PROVIDER: expected one of ${
        PROVIDER_NAMES.join(", ")
      }, got "${env.CODE_EXECUTOR_AI_PROVIDER}"`,
    );
  }
  const config: ProviderConfig = { provider };
  const model = env.CODE_EXECUTOR_AI_MODEL?.trim();
  if (model) config.model = model;
  const baseUrl = env.CODE_EXECUTOR_AI_BASE_URL?.trim();
  if (baseUrl) config.baseUrl = baseUrl;
  return config;
}

interface CheckedConfig {
  provider: ProviderName;
  baseUrl: string;
  model: string;
  /** Variables to try in order; empty when no key is sent. */
  keyEnvs: readonly string[];
  allowedModels?: string[];
  timeoutMs: number;
  maxRetries: number;
  maxTokensField: "max_tokens" | "max_completion_tokens";
}

function isProviderName(value: string): value is ProviderName {
  return (PROVIDER_NAMES as readonly string[]).includes(value);
}

function isLoopback(url: URL): boolean {
  const host = url.hostname.replace(/^\[|\]$/g, "");
  return host === "localhost" || host === "::1" || /^127(\.\d{1,3}){3}$/.test(host);
}

function checkConfig(config: ProviderConfig, path: string): CheckedConfig {
  if (!isProviderName(String(config.provider))) {
    throw new TypeError(
      `Invalid ${path}.provider: expected one of ${PROVIDER_NAMES.join(", ")}, got "${
        String(config.provider)
      }"`,
    );
  }
  const provider = config.provider;
  const baseUrl = (config.baseUrl ?? DEFAULT_BASE_URLS[provider]).replace(/\/+$/, "");
  let url: URL;
  try {
    url = new URL(baseUrl);
  } catch {
    throw new TypeError(`Invalid ${path}.baseUrl: "${baseUrl}" is not a URL`);
  }
  const loopback = isLoopback(url);
  if (url.protocol !== "https:" && !(url.protocol === "http:" && loopback)) {
    throw new TypeError(
      `Invalid ${path}.baseUrl: "${baseUrl}" must use https (plain http only on localhost), ` +
        "so that the API key and prompts are not sent in the clear",
    );
  }
  if (url.username || url.password) {
    throw new TypeError(
      `Invalid ${path}.baseUrl: it must not contain credentials; put the key in an environment ` +
        `variable named by ${path}.apiKeyEnv`,
    );
  }
  let keyEnvs: readonly string[];
  if (config.apiKeyEnv === "") {
    if (provider !== "openai" || !loopback) {
      throw new TypeError(
        `Invalid ${path}.apiKeyEnv: "" (no key) is only allowed for an openai provider on a ` +
          "localhost baseUrl; name the environment variable that holds the key",
      );
    }
    keyEnvs = [];
  } else if (config.apiKeyEnv !== undefined) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(config.apiKeyEnv)) {
      throw new TypeError(
        `Invalid ${path}.apiKeyEnv: expected an environment variable name, got "${config.apiKeyEnv}"`,
      );
    }
    keyEnvs = [config.apiKeyEnv];
  } else {
    // A local server needs no key, and must not receive the user's OpenAI key either.
    keyEnvs = provider === "openai" && loopback ? [] : DEFAULT_KEY_ENVS[provider];
  }
  const timeoutMs = config.timeoutMs ?? DEFAULT_PROVIDER_TIMEOUT_MS;
  if (!Number.isInteger(timeoutMs) || timeoutMs <= 0) {
    throw new TypeError(`Invalid ${path}.timeoutMs: expected a positive integer, got ${timeoutMs}`);
  }
  const maxRetries = config.maxRetries ?? DEFAULT_PROVIDER_MAX_RETRIES;
  if (!Number.isInteger(maxRetries) || maxRetries < 0 || maxRetries > 10) {
    throw new TypeError(
      `Invalid ${path}.maxRetries: expected an integer from 0 to 10, got ${maxRetries}`,
    );
  }
  const model = modelName(provider, config.model ?? DEFAULT_MODELS[provider]);
  if (!model) throw new TypeError(`Invalid ${path}.model: expected a model name`);
  return {
    provider,
    baseUrl,
    model,
    keyEnvs,
    allowedModels: config.allowedModels?.map((name) => modelName(provider, name)),
    timeoutMs,
    maxRetries,
    maxTokensField: config.maxTokensField ??
      (url.hostname === "api.openai.com" ? "max_completion_tokens" : "max_tokens"),
  };
}

/** Gemini names models `models/<id>` in some places; both spellings mean the same model. */
function modelName(provider: ProviderName, name: string): string {
  return provider === "gemini" ? name.replace(/^models\//, "") : name;
}

function keyOf(config: CheckedConfig, env: (name: string) => string | undefined): KeySource {
  if (config.keyEnvs.length === 0) return {};
  for (const name of config.keyEnvs) {
    const key = env(name)?.trim();
    if (key) return { key, env: name };
  }
  throw new CodeExecutorError(
    "SamplingConfigError",
    `Cannot call ${config.provider}: no API key; set the environment variable ${
      config.keyEnvs.join(" or ")
    } for the server (keys are read from the environment only)`,
  );
}
