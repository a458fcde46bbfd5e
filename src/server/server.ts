/**
 * The MCP surface: the tools the model sees, their schemas and their results.
 *
 * @module
 */
import { McpServer } from "@modelcontextprotocol/server";
import { z } from "zod";
import type { Executor } from "../exec/executor.ts";
import { type ExecutionResult, renderResult } from "../exec/result.ts";

/** Name and version reported to clients. */
export const SERVER_INFO = { name: "code-executor", version: "0.1.0" } as const;

const PermissionsInput = z.object({
  net: z.array(z.string()).optional().describe(
    "Hosts (host or host:port) from the admin's allowlist",
  ),
  read: z.array(z.string()).optional().describe("Absolute paths under ALLOWED_PROJECTS to read"),
  write: z.array(z.string()).optional().describe("Absolute paths under ALLOWED_PROJECTS to write"),
}).strict();

const RunTypescriptInput = z.object({
  code: z.string().describe("TypeScript to run as a module body; top-level await and return work"),
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

const RUN_TYPESCRIPT_DESCRIPTION = [
  "Run TypeScript in a fresh Deno sandbox and get back what it prints.",
  "The code is a module body: top-level await works; `return x` sets returnValue (JSON).",
  "console.log/error are captured. The cwd is a private temp dir; no env, no subprocesses,",
  "no network and no files outside it unless `permissions` grants them within the admin's policy.",
  "Print or return only what you need: that is all that comes back.",
].join("\n");

/** What the server needs from the rest of the program. */
export interface ServerDeps {
  /** Runs code. */
  executor: Executor;
}

function toToolResult(result: ExecutionResult) {
  return {
    content: [{ type: "text" as const, text: renderResult(result) }],
    structuredContent: result as unknown as Record<string, unknown>,
    isError: !result.ok,
  };
}

/**
 * Builds one MCP server instance with the executor's tools registered in a fixed order.
 *
 * @param deps The executor.
 * @returns A server ready to connect to a transport.
 */
export function createServer(deps: ServerDeps): McpServer {
  const server = new McpServer(SERVER_INFO, {
    capabilities: { tools: { listChanged: true } },
    instructions:
      "Write a short program instead of calling many tools: run_typescript runs it in a sandbox and returns only what it prints.",
  });

  server.registerTool("run_typescript", {
    title: "Run TypeScript",
    description: RUN_TYPESCRIPT_DESCRIPTION,
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
      timeoutMs: args.timeoutMs,
      permissions: args.permissions,
      signal: ctx.mcpReq.signal,
    });
    return toToolResult(result);
  });

  return server;
}
