/**
 * Code Executor: one MCP server that runs the model's code in a sandbox.
 *
 * ```sh
 * deno run -A main.ts [serve] [--config mcp.json]   # stdio MCP server (default)
 * deno run -A main.ts run script.ts                 # run a file in the sandbox
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";
import { doctor } from "./src/cli/doctor.ts";
import { runFile } from "./src/cli/run.ts";
import { serve } from "./src/cli/serve.ts";
import { SettingsError } from "./src/config/settings.ts";
import { SERVER_VERSION } from "./src/version.ts";

const HELP =
  `code-executor ${SERVER_VERSION}: one MCP server that runs code which calls all your others

Usage:
  code-executor [serve] [--config PATH]...   Serve MCP on stdio (the default command)
  code-executor run FILE.ts [--timeout MS] [--json]
                                            Run a TypeScript file in the sandbox
  code-executor doctor [--config PATH]...   Check every configured MCP server and the token savings
  code-executor --help | --version

Options:
  --config PATH   An MCP config file ({"mcpServers": {...}}) with the upstream servers; repeatable
  --timeout MS    Wall-clock limit for run (default: limits.timeoutMs, 30000)
  --json          For run: print the whole result as JSON

Settings come from ~/.config/code-executor/config.jsonc, ./.code-executor.jsonc and
$CODE_EXECUTOR_CONFIG, then environment variables; see README.md.
Logs go to stderr; with serve, stdout carries only MCP messages.
`;

async function main(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      help: { type: "boolean", short: "h" },
      version: { type: "boolean", short: "V" },
      config: { type: "string", multiple: true },
      timeout: { type: "string" },
      json: { type: "boolean" },
    },
  });
  if (values.help) {
    await Deno.stdout.write(new TextEncoder().encode(HELP));
    return 0;
  }
  if (values.version) {
    await Deno.stdout.write(new TextEncoder().encode(`code-executor ${SERVER_VERSION}\n`));
    return 0;
  }
  const [command = "serve", ...rest] = positionals;
  if (command === "serve") {
    if (rest.length > 0) throw new TypeError(`Unexpected argument "${rest[0]}" for serve`);
    await serve({ configPaths: values.config ?? [] });
    return 0;
  }
  if (command === "doctor") {
    if (rest.length > 0) throw new TypeError(`Unexpected argument "${rest[0]}" for doctor`);
    return await doctor({ configPaths: values.config ?? [] });
  }
  if (command === "run") {
    if (rest.length !== 1) throw new TypeError("Usage: code-executor run FILE.ts");
    const timeoutMs = values.timeout === undefined ? undefined : Number(values.timeout);
    if (timeoutMs !== undefined && !(Number.isInteger(timeoutMs) && timeoutMs > 0)) {
      throw new TypeError(
        `Invalid --timeout "${values.timeout}": expected a positive integer of milliseconds`,
      );
    }
    return await runFile(rest[0], { timeoutMs, json: values.json });
  }
  throw new TypeError(`Unknown command "${command}": expected serve, run or doctor (see --help)`);
}

if (import.meta.main) {
  try {
    Deno.exit(await main(Deno.args));
  } catch (error) {
    const known = error instanceof SettingsError || error instanceof TypeError ||
      error instanceof Deno.errors.NotFound;
    console.error(`code-executor: ${known ? (error as Error).message : (error as Error).stack}`);
    Deno.exit(2);
  }
}
