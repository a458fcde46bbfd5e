/**
 * Executor settings: defaults, JSONC files, then environment variables on top.
 *
 * Every value the admin sets here is a ceiling: callers of the MCP tools can only narrow it.
 * Unknown keys and wrong types are errors that name the key and where it came from.
 *
 * @module
 */
import { resolve } from "node:path";
import { parse as parseJsonc, type ParseError, printParseErrorCode } from "jsonc-parser";
import { z } from "zod";
import { isPlainObject } from "../_util.ts";
import { projectSettingsPath, userSettingsPath } from "./paths.ts";

const positiveInt = z.number().int().positive();

const LimitsSchema = z.object({
  /** Default wall-clock limit of one execution. */
  timeoutMs: positiveInt.default(30_000),
  /** The largest `timeoutMs` a caller may ask for. */
  maxTimeoutMs: positiveInt.default(300_000),
  /** Resident memory of one sandbox process, in MB (V8 heap flag and RSS watchdog). */
  memoryMb: z.number().int().min(64).default(256),
  /** Captured bytes per output stream (stdout, stderr) before the run is stopped. */
  maxOutputBytes: positiveInt.default(100 * 1024),
  /** Executions running at once; more are queued. */
  maxConcurrent: positiveInt.default(4),
  /** Executions waiting for a slot before new ones are refused. */
  maxQueued: z.number().int().min(0).default(64),
  /** Size of the `code` argument, in bytes. */
  maxCodeBytes: positiveInt.default(1024 * 1024),
  /** Executions started per minute, across callers; 0 is unlimited. */
  executionsPerMinute: z.number().int().min(0).default(0),
  /** Executions one principal may start per minute; 0 is unlimited. */
  principalExecutionsPerMinute: z.number().int().min(0).default(0),
  /**
   * Executions one principal may run at once; 0 means `maxConcurrent`. Free slots always go first
   * to the waiting principal with the fewest runs, so one caller cannot starve the others.
   */
  principalMaxConcurrent: z.number().int().min(0).default(0),
}).strict();

const SandboxSchema = z.object({
  /** Pre-started TypeScript children for the default permission profile; 0 turns the pool off. */
  warmPool: z.number().int().min(0).max(32).default(2),
  /** The `deno` executable used for sandbox children; found automatically when unset. */
  denoPath: z.string().min(1).optional(),
  /** Where private workspaces are created; the system temp directory when unset. */
  tempDir: z.string().min(1).optional(),
}).strict();

const PermissionsSchema = z.object({
  /** Hosts (`host` or `host:port`) that callers may grant to sandbox code with `permissions.net`. */
  net: z.array(z.string().min(1)).default([]),
}).strict();

const ToolsSchema = z.object({
  /** Globs of upstream tools that may be called (`mcp__github__*`); callers can only narrow it. */
  allow: z.array(z.string().min(1)).default(["*"]),
  /** Globs of upstream tools that may never be called; deny wins over allow. */
  deny: z.array(z.string().min(1)).default([]),
  /** Upstream tool calls one execution may make. */
  maxCallsPerExecution: positiveInt.default(1000),
  /** Calls per minute to any one upstream server, across executions; 0 is unlimited. */
  callsPerMinutePerServer: z.number().int().min(0).default(0),
  /** Time allowed for one upstream call unless the server's config sets `timeout`. */
  callTimeoutMs: positiveInt.default(60_000),
  /** Size of one tool result handed to sandbox code, in bytes (JSON). */
  maxResultBytes: positiveInt.default(5 * 1024 * 1024),
}).strict();

const PythonSchema = z.object({
  /** Whether `run_python` is offered at all. */
  enabled: z.boolean().default(true),
  /** Pre-started Python children (each ~160 MB); 0 turns the pool off. */
  warmPool: z.number().int().min(0).max(16).default(2),
  /** Top-level modules Python code may import, or "*"; a guide, not a wall (see README). */
  allowedImports: z.union([z.literal("*"), z.array(z.string().min(1))]).optional(),
  /** Resident memory of one Python sandbox, in MB (Pyodide itself needs ~160 MB). */
  memoryMb: z.number().int().min(192).default(512),
  /** Time between the interrupt at the deadline and SIGKILL, for code that ignores it. */
  interruptGraceMs: z.number().int().min(0).max(10_000).default(500),
  /** Idle time after which a session's interpreter is discarded. */
  sessionTtlMs: positiveInt.default(600_000),
  /** Sessions open at once. */
  maxSessions: positiveInt.default(8),
  /** Directories of pure-Python wheels (*.whl) to make importable. */
  wheelDirs: z.array(z.string().min(1)).default([]),
}).strict();

const OAuthSchema = z.object({
  /** The authorization server's issuer URL; its metadata names the JWKS. */
  issuer: z.url(),
  /** The JWKS URL, when the issuer's metadata cannot be fetched at start. */
  jwksUri: z.url().optional(),
  /** The expected `aud`; this server's resource URL (`http.publicUrl`) when unset. */
  audience: z.string().min(1).optional(),
  /** Scopes every token must carry. */
  scopes: z.array(z.string().min(1)).default([]),
  /** JWS algorithms accepted (never `none`, never HMAC with a public key). */
  algorithms: z.array(
    z.enum([
      "RS256",
      "RS384",
      "RS512",
      "PS256",
      "PS384",
      "PS512",
      "ES256",
      "ES384",
      "ES512",
      "EdDSA",
    ]),
  )
    .min(1).default(["RS256", "PS256", "ES256", "EdDSA"]),
  /** The least time between two fetches of the JWKS for an unknown `kid`. */
  jwksCooldownMs: z.number().int().min(0).default(30_000),
  /** Clock skew allowed for `exp` and `nbf`, in seconds. */
  clockToleranceSec: z.number().int().min(0).max(300).default(5),
}).strict();

const HttpSchema = z.object({
  /** The address to listen on; loopback by default. */
  host: z.string().min(1).default("127.0.0.1"),
  /** The port; 0 picks a free one. */
  port: z.number().int().min(0).max(65535).default(3333),
  /** The MCP endpoint's path. */
  path: z.string().regex(/^\/[^?#]*$/, "must start with / and hold no query").default("/mcp"),
  /** The URL clients reach the endpoint at (behind a proxy); `http://host:port/path` when unset. */
  publicUrl: z.url().optional(),
  /** More `Host` names (no port) accepted besides the bound host (and localhost names on loopback). */
  allowedHosts: z.array(z.string().min(1)).default([]),
  /** Browser `Origin` hosts accepted (no port); the bound host's and localhost names on loopback. */
  allowedOrigins: z.array(z.string().min(1)).default([]),
  /** `auto`: `bearer` when tokens are set, `oauth` when `http.oauth` is, else `none`. */
  auth: z.enum(["auto", "none", "bearer", "oauth"]).default("auto"),
  /** A file (mode 0600) with one `principal token` pair a line. */
  tokensFile: z.string().min(1).optional(),
  /** OAuth 2.1 resource-server settings. */
  oauth: OAuthSchema.optional(),
  /** How long runs in flight may finish after SIGTERM/SIGINT before they are stopped. */
  drainMs: z.number().int().min(0).default(10_000),
  /** The largest request body; room for `limits.maxCodeBytes` of code when unset. */
  maxBodyBytes: positiveInt.optional(),
  /** Time allowed to receive a request's body. */
  bodyTimeoutMs: positiveInt.default(30_000),
  /**
   * Requests handled at once, open event streams included; more get 503, except `/healthz`,
   * `/readyz` and the requests of open 2025-era sessions.
   */
  maxRequests: positiveInt.default(256),
  /** 2025-era sessions open at once; a new one past it gets 503. */
  maxSessions: positiveInt.default(100),
  /** Idle time after which a 2025-era session is closed. */
  sessionIdleMs: positiveInt.default(30 * 60_000),
}).strict();

const AuditSchema = z.object({
  /** Whether executions and tool calls are recorded. */
  enabled: z.boolean().default(true),
  /** The JSONL file; `~/.code-executor/audit.jsonl` when unset. */
  path: z.string().min(1).optional(),
  /** Size at which the file is rotated. */
  maxBytes: positiveInt.default(10 * 1024 * 1024),
  /** Files kept, the current one included. */
  maxFiles: positiveInt.default(5),
  /** Record the code itself, not only its SHA-256. */
  includeCode: z.boolean().default(false),
}).strict();

const ProviderSchema = z.object({
  /** Which wire format: Anthropic Messages, OpenAI-compatible chat completions, or Gemini. */
  provider: z.enum(["anthropic", "openai", "gemini"]),
  /** The API's base URL (HTTPS, or http on loopback); each provider's public one when unset. */
  baseUrl: z.url().optional(),
  /** The model used when sandbox code names none; the provider's default when unset. */
  model: z.string().min(1).optional(),
  /** The environment variable holding the API key; the provider's usual one when unset. */
  apiKeyEnv: z.string().optional(),
  /** Models sandbox code may ask for; any when unset. */
  allowedModels: z.array(z.string().min(1)).optional(),
  /** Time allowed for one request, retries included (default 60000). */
  timeoutMs: positiveInt.optional(),
  /** Retries after a 429, a 5xx or a network error (default 2). */
  maxRetries: z.number().int().min(0).max(10).optional(),
  /** `openai` only: the body field of the output cap. */
  maxTokensField: z.enum(["max_tokens", "max_completion_tokens"]).optional(),
}).strict();

const SamplingSchema = z.object({
  /** Whether sandbox code may ask an LLM (`llm.ask`, `llm.think`) at all. */
  enabled: z.boolean().default(false),
  /** LLM rounds one execution may make; callers can only lower it. */
  maxRounds: positiveInt.default(10),
  /** Input plus output tokens one execution may use; callers can only lower it. */
  maxTokens: positiveInt.default(10_000),
  /** Output tokens of a round whose call does not say. */
  defaultMaxTokens: positiveInt.default(1024),
  /** Time allowed for one round, through the client or a provider. */
  requestTimeoutMs: positiveInt.default(60_000),
  /** System prompts sandbox code may use, verbatim; `"*"` allows any. None by default. */
  allowedSystemPrompts: z.array(z.string().min(1)).default([]),
  /** Record prompt and answer text (redacted) in the audit log, not only sizes. */
  auditPrompts: z.boolean().default(false),
  /** Whether `askUser` may send elicitation requests to the client. */
  elicitation: z.boolean().default(true),
  /** The provider API used when the client cannot sample; none by default. */
  provider: ProviderSchema.optional(),
}).strict();

/** The schema of the settings object, with defaults. */
export const SettingsSchema = z.object({
  limits: LimitsSchema.prefault({}),
  sandbox: SandboxSchema.prefault({}),
  permissions: PermissionsSchema.prefault({}),
  tools: ToolsSchema.prefault({}),
  python: PythonSchema.prefault({}),
  audit: AuditSchema.prefault({}),
  sampling: SamplingSchema.prefault({}),
  http: HttpSchema.prefault({}),
  /** Directories under which callers may grant read or write access (`ALLOWED_PROJECTS`). */
  allowedProjects: z.array(z.string().min(1)).default([]),
}).strict();

/** Fully resolved executor settings. */
export type Settings = z.infer<typeof SettingsSchema>;

/** A settings problem, naming the key and the file or variable it came from. */
export class SettingsError extends Error {
  /**
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

type EnvParser = (raw: string, name: string) => unknown;

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
  ["CODE_EXECUTOR_MAX_CONCURRENT", ["limits", "maxConcurrent"], toInt],
  ["CODE_EXECUTOR_EXECUTIONS_PER_MINUTE", ["limits", "executionsPerMinute"], toInt],
  ["CODE_EXECUTOR_WARM_POOL", ["sandbox", "warmPool"], toInt],
  ["CODE_EXECUTOR_ALLOWED_HOSTS", ["permissions", "net"], toHostList],
  ["DENO_PATH", ["sandbox", "denoPath"], (raw) => raw],
  ["PYTHON_ENABLED", ["python", "enabled"], toBool],
  ["ENABLE_AUDIT_LOG", ["audit", "enabled"], toBool],
  ["AUDIT_LOG_PATH", ["audit", "path"], (raw) => raw],
  ["CODE_EXECUTOR_PYTHON_WARM_POOL", ["python", "warmPool"], toInt],
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
  ["CODE_EXECUTOR_HTTP_HOST", ["http", "host"], (raw) => raw],
  ["CODE_EXECUTOR_HTTP_PORT", ["http", "port"], toInt],
  ["CODE_EXECUTOR_HTTP_PATH", ["http", "path"], (raw) => raw],
  ["CODE_EXECUTOR_HTTP_PUBLIC_URL", ["http", "publicUrl"], (raw) => raw],
  ["CODE_EXECUTOR_HTTP_AUTH", ["http", "auth"], (raw) => raw.trim().toLowerCase()],
  ["CODE_EXECUTOR_HTTP_TOKENS_FILE", ["http", "tokensFile"], (raw) => raw],
  ["CODE_EXECUTOR_HTTP_ALLOWED_HOSTS", ["http", "allowedHosts"], toHostList],
  ["CODE_EXECUTOR_HTTP_ALLOWED_ORIGINS", ["http", "allowedOrigins"], toHostList],
  ["CODE_EXECUTOR_HTTP_DRAIN_MS", ["http", "drainMs"], toInt],
  ["CODE_EXECUTOR_OAUTH_ISSUER", ["http", "oauth", "issuer"], (raw) => raw],
  ["CODE_EXECUTOR_OAUTH_AUDIENCE", ["http", "oauth", "audience"], (raw) => raw],
  ["CODE_EXECUTOR_OAUTH_SCOPES", ["http", "oauth", "scopes"], toHostList],
  ["CODE_EXECUTOR_AI_BASE_URL", ["sampling", "provider", "baseUrl"], (raw) => raw],
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
 * @throws {SettingsError} When the text is not valid JSONC.
 */
export function parseJsoncText(text: string, source: string): unknown {
  const errors: ParseError[] = [];
  const value = parseJsonc(text, errors, { allowTrailingComma: true, disallowComments: false });
  if (errors.length > 0) {
    const first = errors[0];
    const line = text.slice(0, first.offset).split("\n").length;
    throw new SettingsError(
      `Cannot parse ${source}: ${printParseErrorCode(first.error)} at line ${line}`,
    );
  }
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
  return { settings: resolveSettings(merged, sources.join(" + ") || "defaults"), sources };
}

function resolveMaybe(cwd: string, env: Record<string, string>): string | undefined {
  return env.CODE_EXECUTOR_CONFIG ? resolve(cwd, env.CODE_EXECUTOR_CONFIG) : undefined;
}
