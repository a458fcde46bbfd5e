/**
 * The settings' schema: every key, its type, its default and what it means. The admin's values
 * are ceilings that callers of the MCP tools can only narrow; unknown keys are errors.
 *
 * Each key's meaning is its `description` (zod's `.meta()`), the one place it is written:
 * `z.toJSONSchema` carries it, and `docs/generate.ts` renders `docs/settings.md` from that.
 *
 * @module
 */
import { z } from "zod";

const positiveInt = z.number().int().positive();

const LimitsSchema = z.object({
  timeoutMs: positiveInt.default(30_000).meta({
    description:
      "Default wall-clock limit of one execution; a call's `timeoutMs` may ask for up to `limits.maxTimeoutMs`.",
  }),
  maxTimeoutMs: positiveInt.default(300_000).meta({
    description: "The largest `timeoutMs` a caller may ask for.",
  }),
  memoryMb: z.number().int().min(64).default(256).meta({
    description:
      "Memory of one TypeScript sandbox, in MB: V8's heap flag and a watchdog on the child's resident memory (ArrayBuffers and Wasm are outside the heap).",
  }),
  maxOutputBytes: positiveInt.default(100 * 1024).meta({
    description:
      "Bytes a result shows of stdout, stderr and the return value's JSON together; a part past it is kept whole (`outputs.*`) and shown as a preview with a link.",
  }),
  previewChars: positiveInt.default(20_000).meta({
    description:
      "Characters a result shows of a part kept whole (`outputs.*`), its stdout and stderr previews together; sent once, in `structuredContent` (the text block names the kept output instead). Well under what clients pass to the model: Claude Code cuts a tool result at 25,000 tokens.",
  }),
  maxConcurrent: positiveInt.default(4).meta({
    description: "Executions running at once; more wait in a queue.",
  }),
  maxQueued: z.number().int().min(0).default(64).meta({
    description: "Executions waiting for a slot before new ones are refused (`QueueFullError`).",
  }),
  maxCodeBytes: positiveInt.default(1024 * 1024).meta({
    description: "Size of the `code` argument, in bytes (`CodeTooLarge` past it).",
  }),
  executionsPerMinute: z.number().int().min(0).default(0).meta({
    description:
      "Executions started per minute, across callers (and across replicas with `state.url`); 0 is unlimited. A refusal says when to retry.",
  }),
  principalExecutionsPerMinute: z.number().int().min(0).default(0).meta({
    description:
      "Executions one principal (an HTTP caller) may start per minute (across replicas with `state.url`); 0 is unlimited.",
  }),
  principalMaxConcurrent: z.number().int().min(0).default(0).meta({
    description:
      "Executions one HTTP principal may hold at once, parked and held runs included; 0 is half of `limits.maxConcurrent` (at least 1), so that one principal always leaves slots for others. Free slots go first to the waiting principal with the fewest runs. `local` (stdio, HTTP without auth) is alone in its process and may use every slot. With `state.url`, a value set here holds across replicas as well (a run waits, queued, for its principal's place); the default is a share of each replica's slots.",
  }),
  maxParkedMs: positiveInt.default(300_000).meta({
    description:
      "The most time a run of a 2026-07-28 client may spend parked between `input_required` rounds, in all, counted from its first question; past it the run is ended. Each question also has its own timeout (`approvals.timeoutMs`, `sampling.requestTimeoutMs`, the run's `timeoutMs`).",
  }),
}).strict();

const OutputsSchema = z.object({
  maxBytes: z.number().int().min(0).default(32 * 1024 * 1024).meta({
    description:
      "The largest stdout, stderr or return value kept whole when it passes `limits.maxOutputBytes` (the result shows a preview and a `resource_link`); printing past it stops the run with `OutputLimitError`. 0 keeps nothing: printing past `limits.maxOutputBytes` stops the run.",
  }),
  maxTotalBytes: z.number().int().min(0).default(128 * 1024 * 1024).meta({
    description:
      "What all kept outputs, and those of runs still printing, hold together in the server's memory; the oldest are dropped first.",
  }),
  ttlMs: positiveInt.default(900_000).meta({
    description: "How long a kept output can be read (`OutputNotFound` after it).",
  }),
}).strict();

const SandboxSchema = z.object({
  warmPool: z.number().int().min(0).max(32).default(2).meta({
    description:
      "Pre-started TypeScript children for the default permission profile; 0 turns the pool off.",
  }),
  denoPath: z.string().min(1).optional().meta({
    description: "The `deno` executable for sandbox children; the running `deno` when unset.",
  }),
  tempDir: z.string().min(1).optional().meta({
    description: "Where the private workspaces are created; the system temp directory when unset.",
  }),
  npmPackages: z.array(
    z.string().regex(
      // An npm name (lowercase, optionally @scope/) and an exact version: a range would resolve
      // to a different release on each fetch, and children resolve offline.
      /^(?:@[a-z0-9][a-z0-9._~-]*\/)?[a-z0-9][a-z0-9._~-]*@\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?$/,
      "must be an npm package at an exact version, name@x.y.z (e.g. csv-parse@7.0.3)",
    ),
  ).max(64).default([]).refine(
    (specs) =>
      new Set(specs.map((spec) => spec.slice(0, spec.lastIndexOf("@")))).size === specs.length,
    "names each package once: a run imports one version of a package",
  ).meta({
    description:
      "npm packages that TypeScript code may import, at exact versions (`csv-parse@7.0.3`): fetched once into the children's cache (at start, or by `code-executor prepare`), read offline by every child, imported as `npm:csv-parse@7.0.3` or by name (`csv-parse`, `csv-parse/sync`). Their code runs with the run's permissions, no more (docs/libraries.md). Any other npm, jsr, http(s) or file import is refused.",
  }),
}).strict();

const PermissionsSchema = z.object({
  net: z.array(z.string().min(1)).default([]).meta({
    description:
      "Hosts (`host` or `host:port`) that callers may grant to sandbox code with `permissions.net`.",
  }),
}).strict();

const ToolsSchema = z.object({
  allow: z.array(z.string().min(1)).default(["*"]).meta({
    description:
      "Globs of upstream tools that may be called (`mcp__github__*`); a call's `allowedTools` can only narrow it.",
  }),
  deny: z.array(z.string().min(1)).default([]).meta({
    description: "Globs of upstream tools that may never be called; deny wins over allow.",
  }),
  maxCallsPerExecution: positiveInt.default(1000).meta({
    description: "Upstream tool calls one execution may make.",
  }),
  callsPerMinutePerServer: z.number().int().min(0).default(0).meta({
    description: "Calls per minute to any one upstream server, across executions; 0 is unlimited.",
  }),
  callTimeoutMs: positiveInt.default(60_000).meta({
    description: "Time allowed for one upstream call; a server entry's `timeout` overrides it.",
  }),
  maxResultBytes: positiveInt.default(5 * 1024 * 1024).meta({
    description:
      "Size of one tool result handed to sandbox code, in bytes of JSON (`ToolResultTooLarge` past it).",
  }),
}).strict();

const ApprovalsSchema = z.object({
  mode: z.enum(["ask", "deny", "off"]).default("ask").meta({
    description:
      "`ask`: a person approves each upstream call that needs approval; `deny`: such calls are never made; `off`: no call needs approval.",
  }),
  require: z.array(z.string().min(1)).default([]).meta({
    description:
      "Globs of upstream tools that need approval besides those their server annotates `destructiveHint: true` (and not `readOnlyHint: true`).",
  }),
  waive: z.array(z.string().min(1)).default([]).meta({
    description:
      "Globs of upstream tools that never need approval; waive wins over require and annotations.",
  }),
  timeoutMs: positiveInt.default(120_000).meta({
    description:
      "How long a call waits for a person's answer; no answer within it is a denial. The wait does not count against the run's `timeoutMs`.",
  }),
  stateKey: z.string().min(32).optional().meta({
    description:
      "The key (at least 32 characters) of the HMAC-SHA256 that protects the `requestState` of parked 2026-07-28 runs; replicas behind one endpoint share it. A random key per process when unset.",
  }),
}).strict();

const PythonSchema = z.object({
  enabled: z.boolean().default(true).meta({
    description: "Whether `run_python` is offered at all.",
  }),
  warmPool: z.number().int().min(0).max(16).default(1).meta({
    description:
      "Python interpreters kept ready for the next run, each in a child of about 150 MB: children started ahead of need, and children kept for the caller they served; 0 turns the pool off.",
  }),
  // 3: with `limits.maxConcurrent`'s 4, a burst of four callers finds four interpreters; four
  // concurrent callers got 4.24 and 4.68 runs/s against 3.04 and 2.74 with 2 (bench/RESULTS.md).
  warmPoolBurst: z.number().int().min(0).max(16).default(3).meta({
    description:
      "Interpreters the Python pool may keep beyond `python.warmPool` under a burst: each run that finds none ready adds one, and refills boot side by side. 0 keeps the pool at `python.warmPool`.",
  }),
  runsPerChild: z.number().int().min(1).max(10_000).default(100).meta({
    description:
      "Runs one Python child serves, one after the other and each in a fresh interpreter, for one caller only, before it is replaced; 1 makes every child single-use. A child is replaced at once after a run that was stopped (time, memory or output limit, cancel) or crashed.",
  }),
  childMaxAgeMs: positiveInt.default(900_000).meta({
    description:
      "Age after which a Python child takes no further run: it is replaced after the run in progress.",
  }),
  warmPoolIdleMs: positiveInt.default(30_000).meta({
    description:
      "Time after the last Python run (with no new one) at which a grown pool shrinks back to `python.warmPool`.",
  }),
  allowedImports: z.union([z.literal("*"), z.array(z.string().min(1))]).optional().meta({
    description: 'Top-level modules Python code may import, or `"*"` for any: a guide, not a wall.',
  }),
  memoryMb: z.number().int().min(192).default(512).meta({
    description:
      "Resident memory of one Python sandbox, in MB (Pyodide itself takes about 160 MB).",
  }),
  interruptGraceMs: z.number().int().min(0).max(10_000).default(500).meta({
    description:
      "Time between the interrupt at the deadline and SIGKILL, for code that does not stop.",
  }),
  sessionTtlMs: positiveInt.default(600_000).meta({
    description: "Idle time after which a session's interpreter is discarded.",
  }),
  maxSessions: positiveInt.default(8).meta({
    description: "Python sessions open at once (`SessionLimitError` past it).",
  }),
  principalMaxSessions: z.number().int().min(0).default(0).meta({
    description:
      "Python sessions one HTTP principal may keep open; 0 is half of `python.maxSessions` (at least 1), so that one principal always leaves room for others. `local` may use them all.",
  }),
  wheelDirs: z.array(z.string().min(1)).default([]).meta({
    description:
      "Directories of pure-Python wheels (`*-none-any.whl`, at most 20 MB in all) that every Python sandbox unpacks; their top-level packages become importable.",
  }),
  packages: z.array(z.string().min(1)).default([]).meta({
    description:
      "Pure-Python wheels (`.whl` files, or directories of them) imported into the Python snapshot, so that importing them costs a run nothing; their top-level packages become importable. A change rebuilds the snapshot at the next start.",
  }),
}).strict();

const OAuthSchema = z.object({
  issuer: z.url().meta({
    description: "The authorization server's issuer URL; its metadata names the JWKS.",
  }),
  jwksUri: z.url().optional().meta({
    description:
      "The JWKS URL, when the issuer's metadata cannot be fetched at start; from the metadata when unset.",
  }),
  audience: z.string().min(1).optional().meta({
    description:
      "The `aud` every token must name; the resource URL (`http.publicUrl`, else the bound URL) when unset.",
  }),
  scopes: z.array(z.string().min(1)).default([]).meta({
    description: "Scopes every token must carry (else 403 `insufficient_scope`).",
  }),
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
    .min(1).default(["RS256", "PS256", "ES256", "EdDSA"]).meta({
      description: "JWS algorithms accepted: asymmetric ones only, never `none` or HMAC.",
    }),
  jwksCooldownMs: z.number().int().min(0).default(30_000).meta({
    description: "The least time between two fetches of the JWKS for an unknown `kid`.",
  }),
  clockToleranceSec: z.number().int().min(0).max(300).default(5).meta({
    description: "Clock skew allowed for `exp` and `nbf`, in seconds.",
  }),
}).strict();

const HttpSchema = z.object({
  host: z.string().min(1).default("127.0.0.1").meta({
    description:
      "`serve --http`: the address to listen on (`--host` wins); beyond loopback only with authentication.",
  }),
  port: z.number().int().min(0).max(65535).default(3333).meta({
    description: "The port (`--port` wins); 0 picks a free one.",
  }),
  path: z.string().regex(/^\/[^?#]*$/, "must start with / and hold no query").default("/mcp")
    .meta({ description: "The MCP endpoint's path; other paths get 404." }),
  publicUrl: z.url().optional().meta({
    description:
      "The URL clients reach the endpoint at (behind a proxy): the OAuth resource URL and expected audience, and its host is accepted in `Host`. `http://host:port/path` when unset.",
  }),
  allowedHosts: z.array(z.string().min(1)).default([]).meta({
    description:
      "More `Host` names (no port) accepted besides the bound host (and the localhost names on loopback); others get 403.",
  }),
  allowedOrigins: z.array(z.string().min(1)).default([]).meta({
    description:
      "Browser `Origin` hosts (no port) accepted besides the bound host (and the localhost names on loopback); others get 403.",
  }),
  auth: z.enum(["auto", "none", "bearer", "oauth"]).default("auto").meta({
    description:
      "`auto`: `bearer` when a token is set, else `oauth` when `http.oauth` is, else `none`.",
  }),
  tokensFile: z.string().min(1).optional().meta({
    description: "Bearer tokens: a file of mode 0600 with one `principal token` pair a line.",
  }),
  oauth: OAuthSchema.optional().meta({
    description: "OAuth 2.1 resource-server settings; setting `issuer` turns OAuth on.",
  }),
  replicaId: z.string().regex(
    /^[A-Za-z0-9_-]{1,63}$/,
    'must be 1 to 63 letters, digits, "_" or "-" (it starts session ids, before a ".")',
  ).optional().meta({
    description:
      "Behind a load balancer, this replica's name: the 2025-era session ids it mints start with `<replicaId>.`, and its parked runs' `requestState` names it, so that a request for them that reaches another replica is forwarded here (with `state.url`). Unique per replica; with `state.url` and unset, `<hostname>-<6 random hex digits>`.",
  }),
  internalUrl: z.url().optional().meta({
    description:
      "With `state.url`: the URL of this replica's MCP endpoint for the other replicas, which forward to it the requests for the live state it holds (its parked runs, Python sessions and 2025-era sessions). Registered in the store with a heartbeat; its host is accepted in `Host`. Unset: `http://<http.host>:<port><http.path>`, a wildcard host (0.0.0.0, ::) replaced by this machine's first non-loopback address.",
  }),
  forwardTimeoutMs: positiveInt.default(30_000).meta({
    description:
      "How long a replica waits for the owner of live state to take a forwarded request (the owner answers it with an event stream at once), and the longest silence of that stream beyond its 15 s keep-alives; past either the caller gets `ReplicaUnreachableError`, and nothing is sent again.",
  }),
  drainMs: z.number().int().min(0).default(10_000).meta({
    description:
      "After SIGTERM or SIGINT, how long runs in flight may finish before they are stopped.",
  }),
  maxBodyBytes: positiveInt.optional().meta({
    description:
      "The largest request body (larger gets 413); when unset, 10 MiB or room for `limits.maxCodeBytes` of code, whichever is larger.",
  }),
  bodyTimeoutMs: positiveInt.default(30_000).meta({
    description: "Time allowed to receive a request's body; slower gets 408.",
  }),
  maxRequests: positiveInt.default(256).meta({
    description:
      "Requests handled at once, open event streams included; more get 503, except `/healthz`, `/readyz` and the requests of open 2025-era sessions.",
  }),
  principalMaxRequests: z.number().int().min(0).default(0).meta({
    description:
      "Requests one HTTP principal may have in flight, its open sessions' included (the exemption of `http.maxRequests` does not apply to it); 0 is half of `http.maxRequests` (at least 1). Past it that principal gets 503 and others are still served.",
  }),
  maxSessions: positiveInt.default(100).meta({
    description: "2025-era sessions open at once; a new one past it gets 503.",
  }),
  principalMaxSessions: z.number().int().min(0).default(0).meta({
    description:
      "2025-era sessions one HTTP principal may keep open; 0 is half of `http.maxSessions` (at least 1). Past it that principal's initialize gets 503 and others can still open theirs.",
  }),
  sessionIdleMs: positiveInt.default(30 * 60_000).meta({
    description: "Idle time after which a 2025-era session is closed.",
  }),
  metrics: z.enum(["auth", "loopback", "off"]).default("auth").meta({
    description:
      "`GET /metrics` (Prometheus text format). `auth`: on the MCP port, with the same authentication as the MCP endpoint. `loopback`: only on `127.0.0.1:<http.metricsPort>`, without authentication, and not on the MCP port. `off`: nowhere.",
  }),
  metricsPort: z.number().int().min(0).max(65535).default(9464).meta({
    description:
      "With `http.metrics` `loopback`: the port on 127.0.0.1 that serves `/metrics`; 0 picks a free one (the log says which).",
  }),
}).strict();

const AuditSchema = z.object({
  enabled: z.boolean().default(true).meta({
    description: "Whether executions and tool calls are recorded.",
  }),
  path: z.string().min(1).optional().meta({
    description: "The JSONL file (mode 0600); `~/.code-executor/audit.jsonl` when unset.",
  }),
  maxBytes: positiveInt.default(10 * 1024 * 1024).meta({
    description: "Size at which the file rotates (`.1` is the newest old file).",
  }),
  maxFiles: positiveInt.default(5).meta({ description: "Files kept, the current one included." }),
  includeCode: z.boolean().default(false).meta({
    description: "Record the code itself, not only its SHA-256.",
  }),
}).strict();

const ProviderSchema = z.object({
  provider: z.enum(["anthropic", "openai", "gemini"]).meta({
    description:
      "The wire format: Anthropic Messages, OpenAI-compatible chat completions (OpenAI, Grok, Perplexity, Ollama, vLLM: set `baseUrl`), or Gemini.",
  }),
  baseUrl: z.url().optional().meta({
    description:
      "The API's base URL (HTTPS, or http on loopback); the provider's public one when unset.",
  }),
  model: z.string().min(1).optional().meta({
    description: "The model used when sandbox code names none; the provider's default when unset.",
  }),
  apiKeyEnv: z.string().optional().meta({
    description:
      "The environment variable that holds the API key (keys are read from the environment only); `ANTHROPIC_API_KEY`, `OPENAI_API_KEY`, or `GEMINI_API_KEY` then `GOOGLE_API_KEY` when unset.",
  }),
  allowedModels: z.array(z.string().min(1)).optional().meta({
    description: "Models sandbox code may ask for (exact names); any when unset.",
  }),
  timeoutMs: positiveInt.optional().meta({
    description:
      "Time allowed for one request, retries and their waits included; 60000 when unset.",
  }),
  maxRetries: z.number().int().min(0).max(10).optional().meta({
    description: "Retries after a 429, a 5xx or a network error; 2 when unset.",
  }),
  maxTokensField: z.enum(["max_tokens", "max_completion_tokens"]).optional().meta({
    description:
      "`openai` only: the body field of the output cap; `max_completion_tokens` on `api.openai.com`, else `max_tokens`, when unset.",
  }),
}).strict();

const SamplingSchema = z.object({
  enabled: z.boolean().default(false).meta({
    description: "Whether sandbox code may ask an LLM (`llm.ask`, `llm.think`) at all.",
  }),
  maxRounds: positiveInt.default(10).meta({
    description:
      "LLM rounds one execution may make (a failed round counts); a call can only lower it.",
  }),
  maxTokens: positiveInt.default(10_000).meta({
    description: "Input plus output tokens one execution may use; a call can only lower it.",
  }),
  defaultMaxTokens: positiveInt.default(1024).meta({
    description: "Output tokens of a round whose call gives no `maxTokens`.",
  }),
  requestTimeoutMs: positiveInt.default(60_000).meta({
    description: "Time allowed for one round, through the client or a provider.",
  }),
  allowedSystemPrompts: z.array(z.string().min(1)).default([]).meta({
    description:
      'System prompts sandbox code may use, verbatim; `"*"` allows any. None by default.',
  }),
  auditPrompts: z.boolean().default(false).meta({
    description: "Also record prompt and answer text (redacted) in the audit log, not only sizes.",
  }),
  elicitation: z.boolean().default(true).meta({
    description: "Whether `askUser` may ask the client's user (elicitation requests).",
  }),
  maxQuestions: positiveInt.default(20).meta({
    description:
      "`askUser` questions one execution may ask, nested skill runs included; the ones past it fail with `SamplingBudgetError` without reaching anyone.",
  }),
  provider: ProviderSchema.optional().meta({
    description:
      "The provider API that answers `llm.*` when the client cannot sample; none by default.",
  }),
}).strict();

const PrivacySchema = z.object({
  categories: z.array(z.enum(["email", "phone", "card", "iban", "ssn", "ip"])).default([
    "email",
    "phone",
    "card",
    "iban",
    "ssn",
    "ip",
  ]).meta({
    description:
      "The kinds of personal data looked for; placeholders are named after them (`<email_1>`).",
  }),
  phoneRegion: z.string().regex(/^[A-Z]{2}$/, "must be an ISO 3166 code such as US").default("US")
    .meta({ description: "The region (ISO 3166) of phone numbers written without `+`." }),
  ignoredIpRanges: z.array(z.string().min(1)).optional().meta({
    description:
      "IP ranges (CIDR) never taken for personal data; loopback, unspecified and the documentation ranges when unset.",
  }),
  redactSampling: z.boolean().default(true).meta({
    description: "Redact personal data, like secrets, in `llm.*` prompts and answers.",
  }),
  tokenize: z.boolean().default(false).meta({
    description:
      "Replace personal data in what a run returns to the model by placeholders (`<email_1>`), which the host turns back into the values in tool-call arguments.",
  }),
  rawServers: z.array(z.string().min(1)).default([]).meta({
    description:
      "Upstream servers whose results sandbox code sees with the real values (with `privacy.tokenize`; the model still sees placeholders).",
  }),
  ttlMs: positiveInt.default(3_600_000).meta({
    description: "How long a placeholder lives after its last use.",
  }),
  maxValuesPerPrincipal: positiveInt.default(10_000).meta({
    description: "Placeholders kept per principal; the least recently used go first.",
  }),
}).strict();

const SkillsSchema = z.object({
  save: z.enum(["on", "off", "admin"]).default("on").meta({
    description:
      "Saving skills from code: `on`; `off`; `admin` (only the principals of `skills.admins`, and `code-executor skills import`; on stdio, only that command).",
  }),
  projectDir: z.string().min(1).default(".code-executor/skills").meta({
    description:
      "The project's skills, relative to the server's working directory; they win over the user's on a name clash.",
  }),
  userDir: z.string().min(1).optional().meta({
    description:
      "The user's skills, where new names saved on stdio go (`skills.saveTo`); `~/.config/code-executor/skills` when unset.",
  }),
  sharedDir: z.string().min(1).optional().meta({
    description:
      "HTTP with authentication: the skills every principal sees, where admins' saves go; `skills.userDir` when unset.",
  }),
  principalsDir: z.string().min(1).optional().meta({
    description:
      "HTTP with authentication: one directory per principal for its own saves; `~/.code-executor/skills` when unset.",
  }),
  saveTo: z.enum(["user", "project"]).default("user").meta({
    description: "Where a new name saved on stdio (or over HTTP without authentication) goes.",
  }),
  admins: z.array(z.string().min(1)).default([]).meta({
    description:
      "HTTP principals whose saves go to `skills.sharedDir` and who may save when `skills.save` is `admin`.",
  }),
  maxCodeBytes: positiveInt.max(4 * 1024 * 1024).default(256 * 1024).meta({
    description: "The largest program of a skill, in bytes.",
  }),
  maxSchemaBytes: positiveInt.max(1024 * 1024).default(64 * 1024).meta({
    description: "The largest input schema of a skill, in bytes of JSON.",
  }),
  maxVersions: positiveInt.max(10_000).default(100).meta({
    description: "Versions kept of one name; a save past it is refused until old ones are removed.",
  }),
  maxSkills: positiveInt.max(100_000).default(1_000).meta({
    description: "Names in one skills directory; a save of a new name past it is refused.",
  }),
}).strict();

const StateSchema = z.object({
  url: z.string().regex(
    /^rediss?:\/\/[^\s]+$/,
    "must be a redis:// or rediss:// URL, for example redis://127.0.0.1:6379",
  ).optional().meta({
    description:
      "The shared state store of replicas behind one endpoint: a Redis 7 or Valkey URL, `redis://[user:password@]host:port[/db]` or `rediss://…` (TLS). Placeholders, kept outputs, pending approvals, per-principal limits and HTTP principals' skills are then shared by every replica using it; skills live as long as the store keeps its data (give it persistence, `appendonly yes`, for them to outlive a restart). Unset: all of it stays in this process (one machine). Needs `state.key`.",
  }),
  key: z.string().min(32).optional().meta({
    description:
      "The secret (at least 32 characters, the same on every replica) from which the keys that encrypt what is kept in the store and authenticate replicas to each other are derived; a random one per process without `state.url`. Generate it once, for example with `openssl rand -base64 32`.",
  }),
  timeoutMs: positiveInt.max(60_000).default(1_000).meta({
    description:
      "How long one round trip to the store may take; past it the request that needed the store fails with `StateUnavailable` (nothing waits for a store that does not answer).",
  }),
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
  state: StateSchema.prefault({}),
  allowedProjects: z.array(z.string().min(1)).default([]).meta({
    description:
      "Directories under which callers may grant read and write paths (resolved with realpath).",
  }),
}).strict();

/**
 * Fully resolved executor settings.
 *
 * @internal Inferred from {@linkcode SettingsSchema} by zod, whose types `deno doc --lint` takes
 * for private ones (denoland/deno#27364); every key is described in the schema.
 */
export type Settings = z.infer<typeof SettingsSchema>;
