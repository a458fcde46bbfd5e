/**
 * The baseline server of `bench/run_typescript.ts`: a naive spawn-per-call MCP server, as a first
 * prototype of this product would be written. Its one tool, `run_typescript`, wraps the code in
 * an async function, runs it with a fresh `deno run` of a `data:` URL per call (no permissions,
 * no prompt), and returns what the process printed. No sandbox directory, no pool, no limits, no
 * output capture protocol: what is left is the cost of an MCP round trip plus a Deno start.
 *
 * ```sh
 * deno run -A bench/_naive_server.ts   # speaks MCP on stdio, like `main.ts serve`
 * ```
 *
 * @module
 */
import { Buffer } from "node:buffer";
import { McpServer } from "@modelcontextprotocol/server";
import { serveStdio } from "@modelcontextprotocol/server/stdio";
import { z } from "zod";

const decoder = new TextDecoder();

/**
 * Wraps the model's code so that a top-level `return` works and its value is printed as JSON.
 *
 * @param code TypeScript with an optional top-level `return`.
 * @returns A module that prints the returned value.
 */
export function wrapNaive(code: string): string {
  return `const value = await (async () => {\n${code}\n})();\nconsole.log(JSON.stringify(value));\n`;
}

/**
 * Runs code in a fresh `deno run` of a `data:` URL.
 *
 * @param code TypeScript with an optional top-level `return`.
 * @returns What the process printed, and whether it succeeded.
 */
export async function runNaive(code: string): Promise<{ ok: boolean; text: string }> {
  const url = "data:application/typescript;base64," +
    Buffer.from(wrapNaive(code), "utf8").toString("base64");
  const output = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--no-prompt", "--no-config", "-q", url],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = decoder.decode(output.stdout) + decoder.decode(output.stderr);
  return { ok: output.success, text };
}

if (import.meta.main) {
  serveStdio(() => {
    const server = new McpServer({ name: "naive-spawn-per-call", version: "1.0.0" }, {
      capabilities: { tools: {} },
    });
    server.registerTool("run_typescript", {
      description: "Runs TypeScript in a fresh Deno process and returns what it printed",
      inputSchema: z.object({ code: z.string() }),
    }, async ({ code }) => {
      const { ok, text } = await runNaive(code);
      return { content: [{ type: "text" as const, text }], isError: !ok };
    });
    return server;
  });
}
