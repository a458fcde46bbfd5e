/**
 * The Python baseline of `bench/run_python.ts`: one shared Pyodide in the server's own process,
 * as the seed product runs Python. Its one tool, `run_python`, runs the code with
 * `pyodide.runPythonAsync` in the one interpreter every call shares: no child process, no
 * Worker, no fresh interpreter, no limits (a loop hangs the server, and the code sees the
 * host's globals). What is left is the cost of an MCP round trip plus Pyodide's own run.
 *
 * ```sh
 * deno run -A bench/_inprocess_pyodide_server.ts   # speaks MCP on stdio, like `main.ts serve`
 * ```
 *
 * The result has the shape of ours (`structuredContent: {ok, returnValue, durationMs}`), so that
 * the bench's client checks and times both the same way.
 *
 * @module
 */
import { dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { McpServer } from "@modelcontextprotocol/server";
import { serveStdio } from "@modelcontextprotocol/server/stdio";
import { loadPyodide } from "pyodide";
import { z } from "zod";

if (import.meta.main) {
  const indexURL = dirname(fileURLToPath(import.meta.resolve("pyodide/package.json"))) + "/";
  const pyodide = await loadPyodide({ indexURL });
  serveStdio(() => {
    const server = new McpServer({ name: "inprocess-pyodide", version: "1.0.0" }, {
      capabilities: { tools: {} },
    });
    server.registerTool("run_python", {
      description: "Runs Python in the server's one shared Pyodide",
      inputSchema: z.object({ code: z.string() }),
    }, async ({ code }) => {
      const started = performance.now();
      try {
        let value = await pyodide.runPythonAsync(code);
        if (value && typeof value === "object" && "toJs" in value) {
          const proxy = value as { toJs(): unknown; destroy(): void };
          value = proxy.toJs();
          proxy.destroy();
        }
        const durationMs = Math.round(performance.now() - started);
        return {
          content: [{ type: "text" as const, text: JSON.stringify(value ?? null) }],
          structuredContent: { ok: true, returnValue: value ?? null, durationMs },
        };
      } catch (error) {
        const message = (error as Error).message;
        return {
          content: [{ type: "text" as const, text: message }],
          structuredContent: { ok: false, error: { type: "PythonError", message } },
          isError: true,
        };
      }
    });
    return server;
  });
}
