/**
 * A `main.ts serve` on stdio with a private HOME, driven by the SDK client, whose stderr (the
 * server's log) a test reads: for the tests of what the server tells about its configuration and
 * its upstream servers.
 *
 * @module
 */
import { Client } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import type { RunResult } from "./_assert.ts";
import { ROOT, serverEnv } from "./_env.ts";
import { resultText } from "./_client.ts";
import type { ExecutionResult } from "../src/exec/result.ts";

/** A running `main.ts serve` with a connected client. */
export interface StdioServer {
  /** The connected client. */
  client: Client;
  /** Everything the server wrote to stderr so far. */
  stderr(): string;
  /** The `run_typescript` tool's description, as `tools/list` gives it now. */
  runTypescriptDescription(): Promise<string>;
  /** Calls `search_tools` and returns its text. */
  searchTools(query: string): Promise<string>;
  /** Calls `run_typescript`. */
  runTs(code: string): Promise<RunResult>;
  /** Closes the client, which ends the server, and removes its temp directory. */
  close(): Promise<void>;
}

/**
 * Starts `deno run -A main.ts serve` in the repository with a private HOME (the caller's caches)
 * and its own TMPDIR, and connects a client.
 *
 * @param options The HOME, the arguments after `serve` (`--config`), more variables.
 * @returns The server.
 * @throws {Error} With the server's stderr, when the client cannot connect.
 */
export async function startStdioServer(
  options: { home: string; args?: string[]; env?: Record<string, string> },
): Promise<StdioServer> {
  const tempDir = await Deno.makeTempDir({ prefix: "ce-stdio-" });
  const chunks: string[] = [];
  const transport = new StdioClientTransport({
    command: Deno.execPath(),
    args: ["run", "-A", "main.ts", "serve", ...(options.args ?? [])],
    cwd: ROOT,
    env: { ...serverEnv(tempDir, { home: options.home, sharedCache: true }), ...options.env },
    stderr: "pipe",
  });
  const decoder = new TextDecoder();
  transport.stderr?.on("data", (chunk: Uint8Array) => chunks.push(decoder.decode(chunk)));
  const client = new Client({ name: "code-executor-tests", version: "1.0.0" });
  try {
    await client.connect(transport);
  } catch (error) {
    await Deno.remove(tempDir, { recursive: true }).catch(() => {});
    throw new Error(`Cannot start the server: ${(error as Error).message}\n${chunks.join("")}`);
  }
  return {
    client,
    stderr: () => chunks.join(""),
    async runTypescriptDescription() {
      const { tools } = await client.listTools();
      return tools.find((tool) => tool.name === "run_typescript")?.description ?? "";
    },
    async searchTools(query) {
      return resultText(await client.callTool({ name: "search_tools", arguments: { query } }));
    },
    async runTs(code) {
      const result = await client.callTool({ name: "run_typescript", arguments: { code } });
      return {
        ...(result.structuredContent as unknown as ExecutionResult),
        isError: result.isError === true,
      };
    },
    async close() {
      await client.close();
      await Deno.remove(tempDir, { recursive: true }).catch(() => {});
    },
  };
}
