/**
 * Executor settings: defaults, JSONC files, then environment variables on top.
 *
 * Every value the admin sets here is a ceiling: callers of the MCP tools can only narrow it.
 * Unknown keys and wrong types are errors that name the key and where it came from.
 *
 * @module
 */
import { resolve } from "node:path";
import type { z } from "zod";
import { type Settings, SettingsSchema } from "./settings_schema.ts";
import { isPlainObject } from "../_util.ts";
import { formatJsoncProblem, parseJsoncChecked } from "./jsonc_errors.ts";
import { projectSettingsPath, userSettingsPath } from "./paths.ts";

export { SettingsSchema } from "./settings_schema.ts";
export type { Settings } from "./settings_schema.ts";

/** A settings problem, naming the key and the file or variable it came from. */
export class SettingsError extends Error {
  /**
   * Creates the error; the message is shown to the admin as it is.
   *
   * @param message What is wrong and how to fix it.
   * @param options Standard error options.
   */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "SettingsError";
  }
}

/** Options for {@linkcode loadSettings}. */
export interface LoadSettingsOptions {
  /** Environment to read; defaults to the process environment. */
  env?: Record<string, string>;
  /** Project directory searched for `.code-executor.jsonc`; defaults to the cwd. */
  cwd?: string;
}

/**
 * Turns an environment variable's text into a settings value.
 *
 * @param raw The variable's value.
 * @param name The variable's name, for the error.
 * @returns The value, checked later by {@linkcode SettingsSchema} with the rest.
 * @throws {SettingsError} When the text is not of the variable's kind.
 */
export type EnvParser = (raw: string, name: string) => unknown;

const toInt: EnvParser = (raw, name) => {
  const value = Number(raw);
  if (!Number.isInteger(value)) {
    throw new SettingsError(
      `Invalid environment variable ${name}: expected an integer, got "${raw}"`,
    );
  }
  return value;
};
const toList: EnvParser = (raw) =>
  raw.split(Deno.build.os === "windows" ? /[;,]/ : /[:,]/).map((s) => s.trim()).filter(Boolean);
const toHostList: EnvParser = (raw) => raw.split(/[,\s]+/).filter(Boolean);
const toBool: EnvParser = (raw, name) => {
  if (/^(1|true|yes|on)$/i.test(raw)) return true;
  if (/^(0|false|no|off)$/i.test(raw)) return false;
  throw new SettingsError(
    `Invalid environment variable ${name}: expected true or false, got "${raw}"`,
  );
};

/** Environment variables and the settings keys they override. */
export const ENV_OVERRIDES: ReadonlyArray<[string, string[], EnvParser]> = [
  ["ALLOWED_PROJECTS", ["allowedProjects"], toList],
  ["CODE_EXECUTOR_TIMEOUT_MS", ["limits", "timeoutMs"], toInt],
  ["CODE_EXECUTOR_MAX_TIMEOUT_MS", ["limits", "maxTimeoutMs"], toInt],
  ["CODE_EXECUTOR_MEMORY_MB", ["limits", "memoryMb"], toInt],
  ["CODE_EXECUTOR_MAX_OUTPUT_BYTES", ["limits", "maxOutputBytes"], toInt],
  ["CODE_EXECUTOR_PREVIEW_CHARS", ["limits", "previewChars"], toInt],
  ["CODE_EXECUTOR_OUTPUTS_MAX_BYTES", ["outputs", "maxBytes"], toInt],
  ["CODE_EXECUTOR_OUTPUTS_MAX_TOTAL_BYTES", ["outputs", "maxTotalBytes"], toInt],
  ["CODE_EXECUTOR_OUTPUTS_TTL_MS", ["outputs", "ttlMs"], toInt],
  ["CODE_EXECUTOR_MAX_CONCURRENT", ["limits", "maxConcurrent"], toInt],
  ["CODE_EXECUTOR_EXECUTIONS_PER_MINUTE", ["limits", "executionsPerMinute"], toInt],
  ["CODE_EXECUTOR_WARM_POOL", ["sandbox", "warmPool"], toInt],
  ["CODE_EXECUTOR_NPM_PACKAGES", ["sandbox", "npmPackages"], toHostList],
  ["CODE_EXECUTOR_ALLOWED_HOSTS", ["permissions", "net"], toHostList],
  ["DENO_PATH", ["sandbox", "denoPath"], (raw) => raw],
  ["PYTHON_ENABLED", ["python", "enabled"], toBool],
  ["ENABLE_AUDIT_LOG", ["audit", "enabled"], toBool],
  ["AUDIT_LOG_PATH", ["audit", "path"], (raw) => raw],
  ["CODE_EXECUTOR_APPROVALS_MODE", ["approvals", "mode"], (raw) => raw.trim().toLowerCase()],
  ["CODE_EXECUTOR_APPROVALS_TIMEOUT_MS", ["approvals", "timeoutMs"], toInt],
  ["CODE_EXECUTOR_APPROVALS_STATE_KEY", ["approvals", "stateKey"], (raw) => raw],
  ["CODE_EXECUTOR_PYTHON_WARM_POOL", ["python", "warmPool"], toInt],
  ["CODE_EXECUTOR_PYTHON_WARM_POOL_BURST", ["python", "warmPoolBurst"], toInt],
  ["CODE_EXECUTOR_PYTHON_RUNS_PER_CHILD", ["python", "runsPerChild"], toInt],
  ["CODE_EXECUTOR_SAMPLING_ENABLED", ["sampling", "enabled"], toBool],
  ["CODE_EXECUTOR_MAX_SAMPLING_ROUNDS", ["sampling", "maxRounds"], toInt],
  ["CODE_EXECUTOR_MAX_SAMPLING_TOKENS", ["sampling", "maxTokens"], toInt],
  ["CODE_EXECUTOR_SAMPLING_TIMEOUT_MS", ["sampling", "requestTimeoutMs"], toInt],
  [
    "CODE_EXECUTOR_AI_PROVIDER",
    ["sampling", "provider", "provider"],
    (raw) => raw.trim().toLowerCase(),
  ],
  ["CODE_EXECUTOR_AI_MODEL", ["sampling", "provider", "model"], (raw) => raw],
  ["CODE_EXECUTOR_PRIVACY_REDACT_SAMPLING", ["privacy", "redactSampling"], toBool],
  ["CODE_EXECUTOR_PRIVACY_TOKENIZE", ["privacy", "tokenize"], toBool],
  ["CODE_EXECUTOR_SKILLS_SAVE", ["skills", "save"], (raw) => raw.trim().toLowerCase()],
  ["CODE_EXECUTOR_SKILLS_DIR", ["skills", "userDir"], (raw) => raw],
  ["CODE_EXECUTOR_SKILLS_SHARED_DIR", ["skills", "sharedDir"], (raw) => raw],
  ["CODE_EXECUTOR_HTTP_HOST", ["http", "host"], (raw) => raw],
  ["CODE_EXECUTOR_HTTP_PORT", ["http", "port"], toInt],
  ["CODE_EXECUTOR_HTTP_PATH", ["http", "path"], (raw) => raw],
  ["CODE_EXECUTOR_HTTP_PUBLIC_URL", ["http", "publicUrl"], (raw) => raw],
  ["CODE_EXECUTOR_HTTP_AUTH", ["http", "auth"], (raw) => raw.trim().toLowerCase()],
  ["CODE_EXECUTOR_HTTP_TOKENS_FILE", ["http", "tokensFile"], (raw) => raw],
  ["CODE_EXECUTOR_HTTP_ALLOWED_HOSTS", ["http", "allowedHosts"], toHostList],
  ["CODE_EXECUTOR_HTTP_ALLOWED_ORIGINS", ["http", "allowedOrigins"], toHostList],
  ["CODE_EXECUTOR_HTTP_DRAIN_MS", ["http", "drainMs"], toInt],
  ["CODE_EXECUTOR_HTTP_REPLICA_ID", ["http", "replicaId"], (raw) => raw.trim()],
  ["CODE_EXECUTOR_HTTP_INTERNAL_URL", ["http", "internalUrl"], (raw) => raw.trim()],
  ["CODE_EXECUTOR_HTTP_FORWARD_TIMEOUT_MS", ["http", "forwardTimeoutMs"], toInt],
  ["CODE_EXECUTOR_HTTP_METRICS", ["http", "metrics"], (raw) => raw.trim().toLowerCase()],
  ["CODE_EXECUTOR_HTTP_METRICS_PORT", ["http", "metricsPort"], toInt],
  ["CODE_EXECUTOR_OAUTH_ISSUER", ["http", "oauth", "issuer"], (raw) => raw],
  ["CODE_EXECUTOR_OAUTH_AUDIENCE", ["http", "oauth", "audience"], (raw) => raw],
  ["CODE_EXECUTOR_OAUTH_SCOPES", ["http", "oauth", "scopes"], toHostList],
  ["CODE_EXECUTOR_AI_BASE_URL", ["sampling", "provider", "baseUrl"], (raw) => raw],
  ["CODE_EXECUTOR_STATE_URL", ["state", "url"], (raw) => raw.trim()],
  ["CODE_EXECUTOR_STATE_KEY", ["state", "key"], (raw) => raw],
  ["CODE_EXECUTOR_STATE_TIMEOUT_MS", ["state", "timeoutMs"], toInt],
];

/**
 * Returns the settings files that apply, lowest precedence first.
 *
 * @param env The environment to read `HOME`, `XDG_CONFIG_HOME` and `CODE_EXECUTOR_CONFIG` from.
 * @param cwd The project directory.
 * @returns Paths, which may not exist (except `CODE_EXECUTOR_CONFIG`, which must).
 */
export function settingsFiles(env: Record<string, string>, cwd: string): string[] {
  const files: string[] = [];
  const user = userSettingsPath(env);
  if (user) files.push(user);
  files.push(projectSettingsPath(cwd));
  if (env.CODE_EXECUTOR_CONFIG) files.push(resolve(cwd, env.CODE_EXECUTOR_CONFIG));
  return files;
}

/**
 * Parses JSONC text (comments and trailing commas allowed).
 *
 * @param text The file's contents.
 * @param source The file name, for error messages.
 * @returns The parsed value.
 * @throws {SettingsError} When the text is not valid JSONC: `Cannot parse FILE:LINE:COLUMN:`,
 *   what is wrong in words, then the line with a caret under the place.
 */
export function parseJsoncText(text: string, source: string): unknown {
  const { value, problem } = parseJsoncChecked(text);
  if (problem) throw new SettingsError(formatJsoncProblem(source, problem));
  return value;
}

function deepMerge(
  base: Record<string, unknown>,
  top: Record<string, unknown>,
): Record<string, unknown> {
  const out: Record<string, unknown> = { ...base };
  for (const [key, value] of Object.entries(top)) {
    out[key] = isPlainObject(value) && isPlainObject(out[key])
      ? deepMerge(out[key] as Record<string, unknown>, value)
      : value;
  }
  return out;
}

function setPath(target: Record<string, unknown>, path: string[], value: unknown): void {
  let node = target;
  for (const key of path.slice(0, -1)) {
    if (!isPlainObject(node[key])) node[key] = {};
    node = node[key] as Record<string, unknown>;
  }
  node[path[path.length - 1]] = value;
}

function describeIssues(error: z.ZodError, source: string): string {
  return error.issues.map((issue) => {
    const path = issue.path.join(".");
    if (issue.code === "unrecognized_keys") {
      const keys = issue.keys.map((k) => (path ? `${path}.${k}` : k));
      return `Unknown setting ${keys.map((k) => `"${k}"`).join(", ")} in ${source}`;
    }
    return `Invalid setting "${path}" in ${source}: ${issue.message}`;
  }).join("; ");
}

/**
 * Validates a raw settings object and applies defaults.
 *
 * @param raw The merged raw settings.
 * @param source Where the values came from, for error messages.
 * @returns The resolved settings.
 * @throws {SettingsError} On an unknown key, a wrong type or inconsistent limits.
 */
export function resolveSettings(raw: unknown, source = "settings"): Settings {
  const parsed = SettingsSchema.safeParse(raw ?? {});
  if (!parsed.success) throw new SettingsError(describeIssues(parsed.error, source));
  const settings = parsed.data;
  if (settings.limits.timeoutMs > settings.limits.maxTimeoutMs) {
    throw new SettingsError(
      `Invalid setting "limits.timeoutMs" in ${source}: ${settings.limits.timeoutMs} is above limits.maxTimeoutMs (${settings.limits.maxTimeoutMs})`,
    );
  }
  return settings;
}

/**
 * Loads settings: defaults, then the JSONC files of {@linkcode settingsFiles}, then the
 * environment variables of {@linkcode ENV_OVERRIDES}.
 *
 * @param options Where to look.
 * @returns The resolved settings and the files that were read.
 * @throws {SettingsError} Naming the file or variable and the key at fault.
 */
export async function loadSettings(
  options: LoadSettingsOptions = {},
): Promise<{ settings: Settings; sources: string[] }> {
  const env = options.env ?? Deno.env.toObject();
  const cwd = options.cwd ?? Deno.cwd();
  let merged: Record<string, unknown> = {};
  const sources: string[] = [];
  for (const file of settingsFiles(env, cwd)) {
    let text: string;
    try {
      text = await Deno.readTextFile(file);
    } catch (error) {
      if (error instanceof Deno.errors.NotFound && file !== resolveMaybe(cwd, env)) continue;
      throw new SettingsError(`Cannot read settings file ${file}: ${(error as Error).message}`, {
        cause: error,
      });
    }
    const value = parseJsoncText(text, file);
    if (!isPlainObject(value)) {
      throw new SettingsError(`Invalid settings file ${file}: the top level must be an object`);
    }
    // Validate each file on its own so that an error names the file it is in.
    resolveSettings(value, file);
    merged = deepMerge(merged, value);
    sources.push(file);
  }
  const fromEnv: Record<string, unknown> = {};
  const envNames: string[] = [];
  for (const [name, path, parse] of ENV_OVERRIDES) {
    const raw = env[name];
    if (raw === undefined || raw === "") continue;
    setPath(fromEnv, path, parse(raw, name));
    envNames.push(name);
  }
  if (envNames.length > 0) {
    resolveSettings(deepMerge(merged, fromEnv), `environment (${envNames.join(", ")})`);
    merged = deepMerge(merged, fromEnv);
    sources.push(`env:${envNames.join(",")}`);
  }
  const source = sources.join(" + ") || "defaults";
  const settings = resolveSettings(merged, source);
  // Checked on the merged settings only: the URL may come from a file and the key from the
  // environment (a Kubernetes Secret).
  if (settings.state.url !== undefined && settings.state.key === undefined) {
    throw new SettingsError(
      `Missing setting "state.key" in ${source}: state.url is set, and every replica using the store needs the same secret of at least 32 characters to encrypt what it keeps there and to authenticate the others (set state.key or CODE_EXECUTOR_STATE_KEY, for example to the output of \`openssl rand -base64 32\`)`,
    );
  }
  return { settings, sources };
}

function resolveMaybe(cwd: string, env: Record<string, string>): string | undefined {
  return env.CODE_EXECUTOR_CONFIG ? resolve(cwd, env.CODE_EXECUTOR_CONFIG) : undefined;
}
