/**
 * The MCP surface: the tools the model sees, their schemas and their results.
 *
 * @module
 */
import { McpServer } from "@modelcontextprotocol/server";
import { z } from "zod";
import type { Executor } from "../exec/executor.ts";
import { type ExecutionResult, renderResult } from "../exec/result.ts";
import { ToolPolicy } from "../policy/tool_policy.ts";
import type { Hub } from "../upstream/hub.ts";
import { toolSignature } from "../upstream/signatures.ts";
import { SERVER_VERSION } from "../version.ts";

/** Name and version reported to clients. */
export const SERVER_INFO = { name: "code-executor", version: SERVER_VERSION } as const;

const PermissionsInput = z.object({
  net: z.array(z.string()).optional().describe(
    "Hosts (host or host:port) from the admin's allowlist",
  ),
  read: z.array(z.string()).optional().describe("Absolute paths under ALLOWED_PROJECTS to read"),
  write: z.array(z.string()).optional().describe("Absolute paths under ALLOWED_PROJECTS to write"),
}).strict();

const RunTypescriptInput = z.object({
  code: z.string().describe("TypeScript to run as a module body; top-level await and return work"),
  allowedTools: z.array(z.string()).optional().describe(
    "Globs of tools the code may call, e.g. mcp__github__*; narrows the admin's policy",
  ),
  timeoutMs: z.number().int().positive().optional().describe("Wall-clock limit (default 30000)"),
  permissions: PermissionsInput.optional().describe(
    "Extra access beyond the private working directory; only narrows the admin's policy",
  ),
}).strict();

const ToolCallOutput = z.object({ name: z.string(), ok: z.boolean(), durationMs: z.number() });

const ExecutionOutput = z.object({
  ok: z.boolean(),
  stdout: z.string(),
  stderr: z.string(),
  returnValue: z.unknown().optional(),
  error: z.object({
    type: z.string(),
    message: z.string(),
    traceback: z.string().optional(),
  }).optional(),
  durationMs: z.number(),
  toolCalls: z.array(ToolCallOutput),
  truncated: z.boolean().optional(),
});

const SearchToolsInput = z.object({
  query: z.string().describe("Words to look for in tool names and descriptions; empty lists all"),
  limit: z.number().int().positive().max(100).optional().describe("Most results (default 10)"),
  detail: z.enum(["names", "signatures", "schemas"]).optional().describe(
    "names, TypeScript signatures (default) or full JSON Schemas",
  ),
}).strict();

const RUN_TYPESCRIPT_DESCRIPTION = [
  "Run TypeScript in a fresh Deno sandbox; only what it prints or returns comes back.",
  "Module body: top-level await; `return x` sets returnValue (JSON). console.log is captured.",
  "Call MCP tools from the code: await callMCPTool('mcp__<server>__<tool>', args), or",
  "await tools.<server>.<toolInCamelCase>(args). Results are structuredContent or text;",
  "a failing tool throws ToolError. Find tools with await searchTools('query') (signatures),",
  "discoverMCPTools({search, server}) or getToolSchema(name); or use search_tools.",
  "No env, subprocesses, network or files outside the private cwd unless `permissions` grants them.",
].join("\n");

function describeServers(hub: Hub | undefined): string {
  if (!hub || hub.pool.names.length === 0) {
    return "\nNo MCP servers are configured (see code-executor setup).";
  }
  const parts = hub.catalog.summary().map((s) =>
    s.error ? `${s.name} (unavailable)` : s.tools === undefined ? s.name : `${s.name} (${s.tools})`
  );
  const broken = hub.config.broken.map((b) => `${b.name} (misconfigured)`);
  return `\nServers (tools): ${[...parts, ...broken].join(", ")}`;
}

/** What the server needs from the rest of the program. */
export interface ServerDeps {
  /** Runs code. */
  executor: Executor;
  /** The upstream servers, if any are configured. */
  hub?: Hub;
}

/** A created server and a hook to call when the upstream tool lists change. */
export interface CodeExecutorServer {
  /** The MCP server instance. */
  server: McpServer;
  /** Refreshes descriptions that list the servers; the client is told the list changed. */
  refresh(): void;
}

function toToolResult(result: ExecutionResult) {
  return {
    content: [{ type: "text" as const, text: renderResult(result) }],
    structuredContent: result as unknown as Record<string, unknown>,
    isError: !result.ok,
  };
}

async function searchToolsText(
  hub: Hub | undefined,
  policy: ToolPolicy,
  query: string,
  limit: number,
  detail: "names" | "signatures" | "schemas",
): Promise<string> {
  if (!hub || hub.pool.names.length === 0) return "No MCP servers are configured.";
  // Tools the admin refuses are left out: every run would refuse them. They are dropped after
  // ranking, so ask for all of them and cut afterwards.
  const found = (await hub.catalog.search(query, { limit: Number.MAX_SAFE_INTEGER }))
    .filter((entry) => policy.check(entry.fullName) === undefined)
    .slice(0, limit);
  const unavailable = hub.catalog.summary().filter((s) => s.error)
    .map((s) => `// ${s.error}`);
  if (found.length === 0) {
    return [`No tools match "${query}".`, ...unavailable].join("\n");
  }
  const body = found.map((entry) => {
    if (detail === "names") return entry.fullName;
    if (detail === "schemas") {
      return JSON.stringify({
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

/**
 * Builds one MCP server instance with the executor's tools registered in a fixed order.
 *
 * @param deps The executor and the upstream hub.
 * @returns The server, and a hook for upstream changes.
 */
export function createServer(deps: ServerDeps): CodeExecutorServer {
  const server = new McpServer(SERVER_INFO, {
    capabilities: { tools: { listChanged: true } },
    instructions:
      "Write a short program instead of calling many tools: run_typescript runs it in a sandbox and returns only what it prints.",
  });

  const adminPolicy = new ToolPolicy(deps.executor.settings.tools);

  const runTypescript = server.registerTool("run_typescript", {
    title: "Run TypeScript",
    description: RUN_TYPESCRIPT_DESCRIPTION + describeServers(deps.hub),
    inputSchema: RunTypescriptInput,
    outputSchema: ExecutionOutput,
    annotations: {
      title: "Run TypeScript",
      readOnlyHint: false,
      destructiveHint: true,
      idempotentHint: false,
      openWorldHint: true,
    },
  }, async (args, ctx) => {
    const result = await deps.executor.runTypescript(args.code, {
      allowedTools: args.allowedTools,
      timeoutMs: args.timeoutMs,
      permissions: args.permissions,
      signal: ctx.mcpReq.signal,
    });
    return toToolResult(result);
  });

  server.registerTool("search_tools", {
    title: "Search MCP tools",
    description:
      "Find tools of the configured MCP servers by keyword; returns TypeScript signatures to use in run_typescript.",
    inputSchema: SearchToolsInput,
    annotations: { title: "Search MCP tools", readOnlyHint: true, openWorldHint: false },
  }, async (args) => {
    const text = await searchToolsText(
      deps.hub,
      adminPolicy,
      args.query,
      args.limit ?? 10,
      args.detail ?? "signatures",
    );
    return { content: [{ type: "text" as const, text }] };
  });

  let described = describeServers(deps.hub);
  return {
    server,
    refresh() {
      const next = describeServers(deps.hub);
      if (next === described) return;
      described = next;
      runTypescript.update({ description: RUN_TYPESCRIPT_DESCRIPTION + next });
    },
  };
}
