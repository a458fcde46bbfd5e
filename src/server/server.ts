/**
 * The MCP surface: the tools the model sees, their schemas and their results.
 *
 * @module
 */
import {
  fromJsonSchema,
  McpServer,
  type ServerContext,
  type StandardSchemaWithJSON,
} from "@modelcontextprotocol/server";
import { z } from "zod";
import type { Executor } from "../exec/executor.ts";
import type { PythonRunOptions, RunOptions } from "../exec/run.ts";
import { LOCAL_PRINCIPAL } from "../principals.ts";
import { type ExecutionResult, renderResult } from "../exec/result.ts";
import { ToolPolicy } from "../policy/tool_policy.ts";
import type { SkillStore } from "../skills/store.ts";
import type { Hub } from "../upstream/hub.ts";
import { skillSearchName, skillSignature, toolSignature } from "../upstream/signatures.ts";
import { inertJson, lineCommentText, oneLineDoc } from "../upstream/untrusted_text.ts";
import { type SearchSources, searchToolsAndSkills } from "../exec/requests/tool_search.ts";
import { SERVER_NAME, SERVER_VERSION } from "../version.ts";
import { attachAgentSkills } from "./agent_skills.ts";
import { offerApproveTool } from "./approve_tool.ts";
import { clientChannel } from "./client_channel.ts";
import { outputLinks, registerOutputResources } from "./kept_outputs.ts";
import { runInRounds, takesRounds } from "./input_rounds.ts";
import { refusalOf } from "./forwarding.ts";

/** Name and version reported to clients. */
export const SERVER_INFO = { name: SERVER_NAME, version: SERVER_VERSION } as const;

/**
 * Presents a zod schema without `$schema` in its JSON Schema: 2020-12 is MCP's default dialect,
 * and the URL would cost ~15 tokens per schema in every client's context. Validation stays zod's.
 *
 * The conversion is done once per target and the frozen result shared: `serve --http` builds a
 * server for every 2026-era request, and the SDK converts the called tool's input schema for each
 * of them (to read its `Mcp-Param` headers), which took about 1 ms a request.
 */
function withoutDialect<T extends z.ZodType>(
  schema: T,
): StandardSchemaWithJSON<z.input<T>, z.output<T>> {
  const std = schema["~standard"] as StandardSchemaWithJSON<z.input<T>, z.output<T>>["~standard"];
  const strip = (convert: typeof std.jsonSchema.input): typeof std.jsonSchema.input => {
    const converted = new Map<string, Record<string, unknown>>();
    return (options) => {
      const key = JSON.stringify(options ?? {});
      let json = converted.get(key);
      if (!json) {
        const { $schema: _dialect, ...rest } = convert(options);
        // Frozen, as it is handed out again and again: a caller that changed it would throw.
        json = deepFreeze(rest);
        converted.set(key, json);
      }
      return json;
    };
  };
  return {
    "~standard": {
      ...std,
      jsonSchema: { input: strip(std.jsonSchema.input), output: strip(std.jsonSchema.output) },
    },
  };
}

function deepFreeze<T>(value: T): T {
  if (typeof value === "object" && value !== null && !Object.isFrozen(value)) {
    for (const inner of Object.values(value)) deepFreeze(inner);
    Object.freeze(value);
  }
  return value;
}

const AllowedTools = z.array(z.string()).optional().describe(
  "Globs of tools the code may call (mcp__github__*); narrows the admin's policy",
);
// The real ceiling is the admin's limits.maxTimeoutMs, checked with a clear message.
const TimeoutMs = z.number().int().min(1).max(3_600_000).optional().describe("Default 30000");
// The real ceilings are the admin's sampling.maxRounds / maxTokens, checked with a clear message.
// Offered only when sampling is on: every token of these schemas is in every client's context.
const LlmCaps = {
  sampling: z.object({ maxRounds: z.number().min(1), maxTokens: z.number().min(1) }).partial()
    .optional().describe("Lower the LLM caps"),
};

const RunTypescriptFields = z.object({
  code: z.string().describe("TypeScript module body"),
  allowedTools: AllowedTools,
  timeoutMs: TimeoutMs,
  permissions: z.object({
    net: z.array(z.string()).optional(),
    read: z.array(z.string()).optional(),
    write: z.array(z.string()).optional(),
  }).strict().optional().describe(
    "Extra access within the admin's policy: net hosts (host[:port]); read/write absolute paths under ALLOWED_PROJECTS",
  ),
}).strict();
const RunTypescriptInput = withoutDialect(RunTypescriptFields.extend(LlmCaps));
const RunTypescriptPlainInput = withoutDialect(RunTypescriptFields) as typeof RunTypescriptInput;

const RunPythonFields = z.object({
  code: z.string().describe("Python 3 source"),
  allowedTools: AllowedTools,
  timeoutMs: TimeoutMs,
  // x-mcp-header: 2026-07-28 HTTP clients repeat the id in an Mcp-Param-Session header, on which
  // a load balancer hashes to keep a session on the replica that holds it (docs/DEPLOY.md).
  session: z.string().meta({ "x-mcp-header": "Session" }).optional().describe(
    "Keep variables between calls under this id",
  ),
  // Described by the tool's text ("like run_typescript"): every token here is in every context.
  permissions: z.object({ read: z.array(z.string()).optional() }).strict().optional(),
}).strict();
const RunPythonInput = withoutDialect(RunPythonFields.extend(LlmCaps));
const RunPythonPlainInput = withoutDialect(RunPythonFields) as typeof RunPythonInput;

const SearchToolsInput = withoutDialect(
  z.object({
    // x-mcp-header: HTTP clients of 2026-07-28 repeat the query in an Mcp-Param-Query header,
    // which proxies can route on; the SDK checks that the two agree.
    query: z.string().meta({ "x-mcp-header": "Query" }).describe(
      "Words to match in tool names and descriptions; empty lists all",
    ),
    limit: z.number().int().min(1).max(100).optional().describe("Default 10"),
    detail: z.enum(["names", "signatures", "schemas"]).optional().describe("Default signatures"),
  }).strict(),
);

// Hand-written rather than derived from zod: this schema is in every client's context twice,
// and the derived one (additionalProperties, nested item schemas) costs twice the tokens. Rare
// fields (toolCallsOmitted, outputs: 14 tokens in tools/list) are left out, which the schema
// allows; a kept output is also a resource_link in the content.
// Built once per variant: compiling it takes ~0.5 ms, and HTTP's 2026-era requests each build a
// server of their own.
const executionOutputs = new Map<boolean, ReturnType<typeof buildExecutionOutput>>();

function executionOutput(llm: boolean) {
  let output = executionOutputs.get(llm);
  if (!output) executionOutputs.set(llm, output = buildExecutionOutput(llm));
  return output;
}

function buildExecutionOutput(llm: boolean) {
  return fromJsonSchema<ExecutionResult>({
    type: "object",
    properties: {
      ok: { type: "boolean" },
      stdout: { type: "string" },
      stderr: { type: "string" },
      returnValue: {},
      error: { type: "object" },
      durationMs: { type: "number" },
      toolCalls: { type: "array" },
      truncated: { type: "boolean" },
      ...(llm ? { sampling: { type: "object" } } : {}),
    },
    required: ["ok", "stdout", "stderr", "durationMs", "toolCalls"],
  });
}

const RUN_TYPESCRIPT_DESCRIPTION = [
  "Run TypeScript in a fresh Deno sandbox; only what it prints or returns comes back.",
  "Top-level await works; `return x` sets returnValue (JSON); console.log is captured.",
  "Call MCP tools: await callMCPTool('mcp__<server>__<tool>', args) or",
  "await tools.<server>.<toolInCamelCase>(args); results are structuredContent or text;",
  "a failing tool throws ToolError. Find tools: await searchTools('query') (signatures),",
  "discoverMCPTools({search, server}), getToolSchema(name), or search_tools.",
  "No env, subprocesses, network or files outside the private cwd unless `permissions` grants them.",
  "display(bytes | svgText, mimeType) adds an image (PNG, JPEG, GIF, WebP, SVG) to the result.",
].join("\n");

/** The npm packages code may import (`sandbox.npmPackages`), for the tool's description. */
function describePackages(specs: readonly string[]): string {
  return specs.length
    ? `\nnpm packages (import by name, e.g. from "${
      specs[0].slice(0, specs[0].lastIndexOf("@"))
    }"): ${specs.join(", ")}; packages() describes them. No other npm, jsr, URL or file imports.`
    : "";
}

const LLM_DESCRIPTION =
  "\nawait llm.ask(prompt, {systemPrompt?, maxTokens?}) → text; llm.think({messages, ...}) → {text, usage}; askUser(msg, schema?); progress(done, total?).";

const RUN_PYTHON_DESCRIPTION = [
  "Run Python 3 (Pyodide, stdlib) like run_typescript: top-level await; the last expression",
  "is returnValue; print() is captured. Same API in snake_case: await call_mcp_tool(name, args),",
  "await tools.<server>.<tool>(**args), search_tools, discover_mcp_tools, get_tool_schema;",
  "ToolError. Imports: common pure-data modules only (json, re, math, datetime, collections, ...).",
  "display(data, mime_type) adds an image (PNG, JPEG, GIF, WebP bytes; SVG text) to the result.",
].join("\n");

function describeServers(hub: Hub | undefined): string {
  // A config file that does not parse may hold the servers the user means: say which, so that
  // neither the model nor the user takes "none configured" for the truth.
  const files = hub?.config.sources.filter((s) => s.error).map((s) => s.path) ?? [];
  const skipped = files.length
    ? `\nSkipped config files (see code-executor doctor): ${files.join(", ")}`
    : "";
  if (!hub || hub.pool.names.length === 0) {
    return (skipped
      ? "\nNo MCP servers are usable."
      : "\nNo MCP servers are configured (see code-executor setup).") + skipped;
  }
  const parts = hub.catalog.summary().map((s) =>
    s.error
      ? `${s.name} (down)`
      : s.tools !== undefined
      ? `${s.name} (${s.tools})`
      : s.loading
      ? `${s.name} (loading)`
      : s.name
  );
  const broken = hub.config.broken.map((b) => `${b.name} (misconfigured)`);
  return `\nServers (tools): ${[...parts, ...broken].join(", ")}${skipped}`;
}

/** What the server needs from the rest of the program. */
export interface ServerDeps {
  /** Runs code. */
  executor: Executor;
  /** The upstream servers, if any are configured. */
  hub?: Hub;
  /** Built for one 2026-era HTTP request (no initialize, no client capabilities). */
  perRequest?: boolean;
  /** For one 2026-era request: its principal has a call pending (`approvalsPending`). */
  approvalsPending?: boolean;
  /** Saved skills, served as MCP Agent Skills and found by `search_tools`. */
  skills?: SkillStore;
}

/** A created server and a hook to call when the upstream tool lists change. */
export interface CodeExecutorServer {
  /**
   * The MCP server instance.
   *
   * @internal It is the MCP SDK's type, which `deno doc --lint` takes for a private one
   * (denoland/deno#27364); the SDK documents it.
   */
  server: McpServer;
  /** Refreshes descriptions that list the servers; the client is told the list changed. */
  refresh(): void;
}

/**
 * What every run of one tool call shares: who asks (the principal of an HTTP token, `local` on
 * stdio), its cancellation (the request's, and over HTTP the connection's: a 2025-era session
 * does not abort the request when the client drops its stream) and its client channel.
 */
function callOptions(
  server: McpServer,
  ctx: ServerContext,
  offerApproval: (() => void) | undefined,
): Pick<RunOptions, "signal" | "client" | "principal"> {
  const request = ctx.http?.req?.signal;
  const client = clientChannel(server, ctx);
  if (offerApproval) client.offerApproval = offerApproval;
  return {
    signal: request ? AbortSignal.any([ctx.mcpReq.signal, request]) : ctx.mcpReq.signal,
    client,
    principal: ctx.http?.authInfo?.clientId ?? LOCAL_PRINCIPAL,
  };
}

/** Code can do anything its tools can: clients should treat a run as a destructive action. */
const RUN_ANNOTATIONS = {
  readOnlyHint: false,
  destructiveHint: true,
  idempotentHint: false,
  openWorldHint: true,
} as const;

/**
 * A run's result as MCP content: the text, then each image displayed, in order (an `image`, or a
 * `resource_link` to one kept past the cap), then the links to the other kept parts. The images'
 * base64 is in the content only: `structuredContent` describes them, as some clients give the
 * model its JSON.
 */
function toToolResult(result: ExecutionResult) {
  type Link = ReturnType<typeof outputLinks>[number];
  const links = outputLinks(result.outputs);
  const kept = new Map<string, Link>();
  (result.outputs ?? []).forEach((output, i) => kept.set(output.id, links[i]));
  const content: Array<
    { type: "text"; text: string } | { type: "image"; data: string; mimeType: string } | Link
  > = [{ type: "text", text: renderResult(result) }];
  for (const image of result.images ?? []) {
    const link = image.output === undefined ? undefined : kept.get(image.output);
    if (image.data !== undefined) {
      content.push({ type: "image", data: image.data, mimeType: image.mimeType });
    } else if (link) content.push(link);
    if (image.output !== undefined) kept.delete(image.output);
  }
  content.push(...kept.values());
  const structured = result.images
    ? { ...result, images: result.images.map(({ data: _data, ...image }) => image) }
    : result;
  return {
    content,
    structuredContent: structured as unknown as Record<string, unknown>,
    isError: !result.ok,
  };
}

/** Characters of a down server's error in `search_tools`: its cause, stderr tail and hint fit. */
const MAX_ERROR_LINE = 1_200;

/**
 * The text `search_tools` returns: upstream tools and the caller's saved skills, ranked together.
 *
 * @param sources The hub (its catalog), the admin's policy and the caller's skills.
 * @param query Words to look for.
 * @param limit How many results.
 * @param detail Names, signatures or schemas.
 * @returns The text.
 */
export async function searchToolsText(
  sources: SearchSources & { hub?: Hub },
  query: string,
  limit: number,
  detail: "names" | "signatures" | "schemas",
): Promise<string> {
  const { hub } = sources;
  const noServers = !hub || hub.pool.names.length === 0;
  const skippedFiles = (hub?.config.sources ?? []).filter((s) => s.error).map((s) =>
    `// Skipped config file ${s.path} (see code-executor doctor)`
  );
  const noneConfigured = skippedFiles.length
    ? "no MCP servers are usable"
    : "no MCP servers are configured";
  if (noServers && !sources.skills) {
    return skippedFiles.length
      ? ["No MCP servers are usable.", ...skippedFiles].join("\n")
      : "No MCP servers are configured.";
  }
  const found = await searchToolsAndSkills(
    { ...sources, catalog: noServers ? undefined : hub.catalog },
    query,
    limit,
  );
  const unavailable = [
    ...(noServers
      ? []
      : hub.catalog.summary().filter((s) => s.error).map((s) =>
        `// ${oneLineDoc(s.error!, MAX_ERROR_LINE)}`
      )),
    ...skippedFiles,
  ];
  if (found.length === 0) {
    const none = noServers
      ? `No tools or skills match "${query}" (${noneConfigured}).`
      : `No tools or skills match "${query}".`;
    return [none, ...unavailable].join("\n");
  }
  const body = found.map((hit) => {
    if (hit.kind === "skill") {
      const skill = hit.skill;
      if (detail === "names") return skillSearchName(skill);
      if (detail === "schemas") {
        return inertJson({
          name: skillSearchName(skill),
          kind: "skill",
          description: skill.description,
          inputSchema: skill.inputSchema,
        });
      }
      return skillSignature(skill);
    }
    const entry = hit.entry;
    // Upstream text: names and descriptions stay inert in what the model reads (untrusted_text.ts).
    if (detail === "names") return lineCommentText(entry.fullName);
    if (detail === "schemas") {
      return inertJson({
        name: entry.fullName,
        description: entry.description,
        inputSchema: entry.inputSchema,
        ...(entry.outputSchema ? { outputSchema: entry.outputSchema } : {}),
      });
    }
    return toolSignature(entry);
  });
  return [...body, ...unavailable].join(detail === "signatures" ? "\n\n" : "\n");
}

/** The arguments every run tool takes. */
interface RunArgs {
  code: string;
  allowedTools?: string[];
  timeoutMs?: number;
  sampling?: { maxRounds?: number; maxTokens?: number };
}

/** What tells `run_typescript` from `run_python`: its name, texts, schema and language. */
interface RunTool<A extends RunArgs> {
  name: string;
  title: string;
  description: string;
  inputSchema: StandardSchemaWithJSON<A, A>;
  /** The options only this language takes (`permissions`, `session`). */
  options(args: A): RunOptions & PythonRunOptions;
  /** Runs the code in this language. */
  run(code: string, options: RunOptions & PythonRunOptions): Promise<ExecutionResult>;
}

/**
 * Registers a run tool: its options from the arguments and the call, and its run either at once
 * or in `input_required` rounds (2026-07-28 clients that sample or elicit).
 */
function registerRunTool<A extends RunArgs>(
  server: McpServer,
  shared: {
    executor: Executor;
    output: ReturnType<typeof executionOutput>;
    offerApproval: (() => void) | undefined;
  },
  tool: RunTool<A>,
) {
  return server.registerTool(tool.name, {
    title: tool.title,
    description: tool.description,
    inputSchema: tool.inputSchema,
    outputSchema: shared.output,
    annotations: RUN_ANNOTATIONS,
  }, async (args, ctx) => {
    // The live state this call needs was lost with its replica, or cannot be found: nothing runs.
    const refused = refusalOf(ctx.http?.authInfo);
    if (refused) return toToolResult(refused.toResult());
    const options = {
      allowedTools: args.allowedTools,
      timeoutMs: args.timeoutMs,
      ...tool.options(args),
      sampling: args.sampling,
      ...callOptions(server, ctx, shared.offerApproval),
    };
    const run = (o: RunOptions & PythonRunOptions) => tool.run(args.code, o);
    if (takesRounds(ctx)) {
      const call = { ctx, tool: tool.name, args, options, run, toResult: toToolResult };
      return await runInRounds(shared.executor, call);
    }
    return toToolResult(await run(options));
  });
}

/**
 * Builds one MCP server instance with the executor's tools registered in a fixed order.
 *
 * @param deps The executor and the upstream hub.
 * @returns The server, and a hook for upstream changes.
 */
export function createServer(deps: ServerDeps): CodeExecutorServer {
  const server = new McpServer(SERVER_INFO, {
    // Logging and prompts are declared (empty) so that generic clients and the conformance suite
    // find the standard methods answered; resources are the kept outputs (kept_outputs.ts).
    capabilities: { tools: { listChanged: true }, logging: {}, prompts: {}, resources: {} },
    instructions:
      "Write a short program instead of calling many tools: run_typescript runs it in a sandbox and returns only what it prints.",
  });

  registerOutputResources(server, {
    list: (principal) => deps.executor.outputs.list(principal),
    read: (idOrUri, principal) => deps.executor.outputs.read(idOrUri, principal),
  });
  if (deps.skills) attachAgentSkills(server, deps.skills);
  const adminPolicy = new ToolPolicy(deps.executor.settings.tools);
  const sampling = deps.executor.settings.sampling.enabled;
  const extras = describePackages(deps.executor.settings.sandbox.npmPackages) +
    (sampling ? LLM_DESCRIPTION : "");
  const output = executionOutput(sampling);
  const offerApproval = offerApproveTool(
    server,
    deps.executor,
    deps.perRequest === true && deps.approvalsPending === true,
  );

  const run = { executor: deps.executor, output, offerApproval };
  const runTypescript = registerRunTool(server, run, {
    name: "run_typescript",
    title: "Run TypeScript",
    description: RUN_TYPESCRIPT_DESCRIPTION + extras + describeServers(deps.hub),
    inputSchema: sampling ? RunTypescriptInput : RunTypescriptPlainInput,
    options: (args) => ({ permissions: args.permissions }),
    run: (code, options) => deps.executor.runTypescript(code, options),
  });
  if (deps.executor.settings.python.enabled) {
    registerRunTool(server, run, {
      name: "run_python",
      title: "Run Python",
      description: RUN_PYTHON_DESCRIPTION + (sampling ? " Also llm, ask_user, progress." : ""),
      inputSchema: sampling ? RunPythonInput : RunPythonPlainInput,
      options: (args) => ({ session: args.session, permissions: args.permissions }),
      run: (code, options) => deps.executor.runPython(code, options),
    });
  }

  server.registerTool("search_tools", {
    title: "Search MCP tools",
    description:
      "Find tools of the configured MCP servers, and saved skills, by keyword; returns TypeScript signatures to use in run_typescript.",
    inputSchema: SearchToolsInput,
    annotations: { readOnlyHint: true, openWorldHint: false },
  }, async (args, ctx) => {
    const principal = ctx.http?.authInfo?.clientId ?? LOCAL_PRINCIPAL;
    const skills = deps.skills;
    const text = await searchToolsText(
      {
        hub: deps.hub,
        policy: adminPolicy,
        skills: skills ? () => skills.list(principal) : undefined,
      },
      args.query,
      args.limit ?? 10,
      args.detail ?? "signatures",
    );
    // Skills' and upstreams' text (privacy.tokenize): as placeholders, like a run's result.
    return {
      content: [{
        type: "text" as const,
        text: await deps.executor.tokenizeForClient(text, principal),
      }],
    };
  });

  let described = describeServers(deps.hub);
  return {
    server,
    refresh() {
      const next = describeServers(deps.hub);
      if (next === described) return;
      described = next;
      runTypescript.update({ description: RUN_TYPESCRIPT_DESCRIPTION + extras + next });
    },
  };
}
