/**
 * The settings' schema: every key, its type, its default and what it means. The admin's values
 * are ceilings that callers of the MCP tools can only narrow; unknown keys are errors.
 *
 * @module
 */
import { z } from "zod";

const positiveInt = z.number().int().positive();

const LimitsSchema = z.object({
  /** Default wall-clock limit of one execution. */
  timeoutMs: positiveInt.default(30_000),
  /** The largest `timeoutMs` a caller may ask for. */
  maxTimeoutMs: positiveInt.default(300_000),
  /** Resident memory of one sandbox process, in MB (V8 heap flag and RSS watchdog). */
  memoryMb: z.number().int().min(64).default(256),
  /**
   * Bytes a result shows of stdout, stderr and the return value's JSON together; a part past it is
   * kept whole (`outputs`) and shown as a preview.
   */
  maxOutputBytes: positiveInt.default(100 * 1024),
  /**
   * Characters a result shows of a part kept whole (`outputs`), its stdout and stderr previews
   * together; sent once, in `structuredContent` (the text block names the kept output instead).
   * Well under what clients pass to the model: Claude Code cuts a tool result at 25,000 tokens.
   */
  previewChars: positiveInt.default(20_000),
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

const OutputsSchema = z.object({
  /**
   * The largest stdout, stderr or return value kept whole when it passes `limits.maxOutputBytes`
   * (the result shows a preview and links to it); printing past it stops the run. 0 keeps nothing:
   * printing past `limits.maxOutputBytes` stops the run.
   */
  maxBytes: z.number().int().min(0).default(32 * 1024 * 1024),
  /** What all kept outputs (and those of runs in progress) hold together; the oldest go first. */
  maxTotalBytes: z.number().int().min(0).default(128 * 1024 * 1024),
  /** How long an output is kept. */
  ttlMs: positiveInt.default(900_000),
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

const ApprovalsSchema = z.object({
  /**
   * `ask`: a person approves each upstream call that needs approval (see `require`); `deny`: such
   * calls are never made; `off`: no call needs approval.
   */
  mode: z.enum(["ask", "deny", "off"]).default("ask"),
  /**
   * Globs of upstream tools that need approval besides those their server annotates
   * `destructiveHint: true` (and not `readOnlyHint: true`).
   */
  require: z.array(z.string().min(1)).default([]),
  /** Globs of upstream tools that never need approval; waive wins over require and annotations. */
  waive: z.array(z.string().min(1)).default([]),
  /** How long a call waits for a person's answer; no answer within it is a denial. */
  timeoutMs: positiveInt.default(120_000),
  /**
   * The key (at least 32 characters) of the HMAC that protects the `requestState` of parked
   * 2026-07-28 runs; replicas behind one endpoint share it. A random key per process when unset.
   */
  stateKey: z.string().min(32).optional(),
}).strict();

const PythonSchema = z.object({
  /** Whether `run_python` is offered at all. */
  enabled: z.boolean().default(true),
  /** Pre-started Python children (each ~160 MB); 0 turns the pool off. */
  warmPool: z.number().int().min(0).max(16).default(2),
  /**
   * Children the Python pool may keep beyond `warmPool` under a burst: each run that finds the
   * pool empty adds one, and refills boot side by side. 0 keeps the pool at `warmPool`.
   */
  warmPoolBurst: z.number().int().min(0).max(16).default(2),
  /** Time without a Python run after which the pool shrinks back to `warmPool`. */
  warmPoolIdleMs: positiveInt.default(30_000),
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
  /**
   * This replica's name behind a load balancer: the 2025-era session ids it mints start with
   * `<replicaId>.`, so that the balancer can route a session to its replica by that prefix.
   */
  replicaId: z.string().regex(
    /^[A-Za-z0-9_-]{1,63}$/,
    'must be 1 to 63 letters, digits, "_" or "-" (it starts session ids, before a ".")',
  ).optional(),
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

const PrivacySchema = z.object({
  /** The kinds of personal data looked for (placeholders are named after them: `<email_1>`). */
  categories: z.array(z.enum(["email", "phone", "card", "iban", "ssn", "ip"])).default([
    "email",
    "phone",
    "card",
    "iban",
    "ssn",
    "ip",
  ]),
  /** The region (ISO 3166) of phone numbers written without `+`. */
  phoneRegion: z.string().regex(/^[A-Z]{2}$/, "must be an ISO 3166 code such as US").default("US"),
  /**
   * IP ranges (CIDR) that are never personal data; loopback, unspecified and the documentation
   * ranges when unset.
   */
  ignoredIpRanges: z.array(z.string().min(1)).optional(),
  /** Personal data in `llm.ask`/`llm.think` prompts and answers is redacted, like secrets. */
  redactSampling: z.boolean().default(true),
  /**
   * Personal data in what a run returns to the model is replaced by placeholders (`<email_1>`),
   * which the host turns back into the values in tool-call arguments.
   */
  tokenize: z.boolean().default(false),
  /** Upstream servers whose results sandbox code sees with the real values (tokenize only). */
  rawServers: z.array(z.string().min(1)).default([]),
  /** How long a placeholder lives after its last use. */
  ttlMs: positiveInt.default(3_600_000),
  /** Placeholders kept per principal; the least recently used go first. */
  maxValuesPerPrincipal: positiveInt.default(10_000),
}).strict();

const SkillsSchema = z.object({
  /**
   * Saving skills from code: `on`; `off` (none); `admin` (only the principals of `admins`, and the
   * `code-executor skills import` command; on stdio, only that command).
   */
  save: z.enum(["on", "off", "admin"]).default("on"),
  /** The project's skills, relative to the server's working directory. */
  projectDir: z.string().min(1).default(".code-executor/skills"),
  /** The user's skills; `~/.config/code-executor/skills` when unset. */
  userDir: z.string().min(1).optional(),
  /** HTTP with authentication: the skills every principal sees (the admin's); `userDir` when unset. */
  sharedDir: z.string().min(1).optional(),
  /** HTTP with authentication: one directory per principal for its own saves; `~/.code-executor/skills` when unset. */
  principalsDir: z.string().min(1).optional(),
  /** Where a new name saved on stdio (or HTTP without authentication) goes. */
  saveTo: z.enum(["user", "project"]).default("user"),
  /** HTTP principals whose saves go to `sharedDir` and who may save when `save` is `admin`. */
  admins: z.array(z.string().min(1)).default([]),
  /** The largest program, in bytes. */
  maxCodeBytes: positiveInt.max(4 * 1024 * 1024).default(256 * 1024),
  /** The largest input schema, in bytes of JSON. */
  maxSchemaBytes: positiveInt.max(1024 * 1024).default(64 * 1024),
  /** Versions kept of one name; a save past it is refused until old ones are removed. */
  maxVersions: positiveInt.max(10_000).default(100),
  /** Names in one directory; a save of a new name past it is refused. */
  maxSkills: positiveInt.max(100_000).default(1_000),
}).strict();

/**
 * The schema of the settings object, with defaults.
 *
 * @internal Its type is zod's inference, too long to write out; `deno doc --lint` asks for it
 * and takes zod's types for private ones (denoland/deno#27364).
 */
export const SettingsSchema = z.object({
  limits: LimitsSchema.prefault({}),
  outputs: OutputsSchema.prefault({}),
  sandbox: SandboxSchema.prefault({}),
  permissions: PermissionsSchema.prefault({}),
  tools: ToolsSchema.prefault({}),
  approvals: ApprovalsSchema.prefault({}),
  python: PythonSchema.prefault({}),
  audit: AuditSchema.prefault({}),
  sampling: SamplingSchema.prefault({}),
  http: HttpSchema.prefault({}),
  privacy: PrivacySchema.prefault({}),
  skills: SkillsSchema.prefault({}),
  /** Directories under which callers may grant read or write access (`ALLOWED_PROJECTS`). */
  allowedProjects: z.array(z.string().min(1)).default([]),
}).strict();

/**
 * Fully resolved executor settings.
 *
 * @internal Inferred from {@linkcode SettingsSchema} by zod, whose types `deno doc --lint` takes
 * for private ones (denoland/deno#27364); every key is documented in the schema.
 */
export type Settings = z.infer<typeof SettingsSchema>;
