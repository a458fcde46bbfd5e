/**
 * Code Executor: one MCP server that runs the model's code in a sandbox.
 *
 * ```sh
 * deno run -A main.ts [serve] [--config mcp.json]   # stdio MCP server (default)
 * deno run -A main.ts run script.ts                 # run a file in the sandbox
 * ```
 *
 * From JSR, installed as a `code-executor` command, then put in front of a client's servers:
 *
 * ```sh
 * deno install -g -A --unstable-no-legacy-abort -n code-executor jsr:@code-executor/code-executor
 * code-executor setup
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";
import { doctor } from "./src/cli/doctor.ts";
import { runFile } from "./src/cli/run.ts";
import { serve } from "./src/cli/serve.ts";
import { SettingsError } from "./src/config/settings.ts";
import { UpstreamConfigError } from "./src/config/server_entry.ts";
import { CodeExecutorError } from "./src/errors.ts";
import { SERVER_VERSION } from "./src/version.ts";
import { flushLogs } from "./src/log.ts";

const HELP =
  `code-executor ${SERVER_VERSION}: one MCP server that runs code which calls all your others

Usage:
  code-executor [serve] [--config PATH]...   Serve MCP on stdio (the default command)
  code-executor serve --http [--host H] [--port N] [--config PATH]...
                                            Serve MCP over Streamable HTTP (default
                                            127.0.0.1:3333/mcp; auth: CODE_EXECUTOR_HTTP_TOKEN,
                                            http.tokensFile or http.oauth)
  code-executor run FILE.ts [--timeout MS] [--json]
                                            Run a TypeScript file in the sandbox
  code-executor doctor [--config PATH]...   Check every configured MCP server and the token savings
  code-executor doctor --http URL           Check CODE_EXECUTOR_HTTP_TOKEN (or no token) against a
                                            running serve --http at URL; says why a refusal
  code-executor prepare                     Fetch and build now what the server would on first use
                                            (modules, the sandbox runners, the Python snapshot),
                                            readable by every user; exits 1 when it cannot
  code-executor setup [--client ID] [--move] [--sync] [--yes] [--dry-run] [--http URL]
                                            Find your MCP servers and put Code Executor in front
                                            of them in a client's config (asks on a terminal)
  code-executor setup --http-token [--principal NAME [--tokens-file PATH]]
                                            Print a new bearer token for serve --http; with a
                                            principal, also add it to the tokens file (0600;
                                            default http.tokensFile)
  code-executor sync [--config PATH]... [--out DIR] [--no-wrappers]
                                            Re-list every server's tools into the cache and
                                            regenerate the wrappers
  code-executor wrappers [--config PATH]... [--out DIR] [--only SERVER]...
                                            Generate typed TypeScript and Python wrappers for
                                            every server's tools (default ~/.code-executor/wrappers)
  code-executor skills list | show NAME[@N] | rm NAME | export NAME[@N] DIR | import DIR
                                            The saved skills (--principal P: an HTTP principal's)
  code-executor --help | --version

Options:
  --config PATH   An MCP config file ({"mcpServers": {...}}) with the upstream servers; repeatable
  --timeout MS    Wall-clock limit for run (default: limits.timeoutMs, 30000)
  --json          For run: print the whole result as JSON
  --http          For serve: Streamable HTTP instead of stdio
  --host H        For serve --http: the address to listen on (http.host)
  --port N        For serve --http: the port (http.port; 0 picks a free one)

Setup options:
  --client ID     claude-code, claude-desktop, cursor (~/.cursor/mcp.json), cursor-project
                  (.cursor/mcp.json), vscode (.vscode/mcp.json), vscode-user (VS Code's user
                  mcp.json), windsurf or project (.mcp.json)
  --move          Move the client's other servers into ~/.config/code-executor/mcp.json
  --sync          Install a daily sync (systemd user timer, launchd agent or Task Scheduler)
  --yes, -y       No questions: the defaults and the flags decide
  --dry-run       Print the changes as diffs and write nothing
  --no-check      Do not connect to the servers afterwards
  --no-enable     Write the daily sync's files but do not run systemctl/launchctl
  --project DIR   The project for .mcp.json, .vscode/mcp.json and .cursor/mcp.json (default: the
                  current directory)
  --http URL      Connect the client to a running serve --http at URL (with the bearer token from
                  CODE_EXECUTOR_HTTP_TOKEN) instead of having it start Code Executor

Settings come from ~/.config/code-executor/config.jsonc, ./.code-executor.jsonc and
$CODE_EXECUTOR_CONFIG, then environment variables; see docs/settings.md.
Logs go to stderr; with serve, stdout carries only MCP messages.
`;

async function main(args: string[]): Promise<number> {
  if (
    (args[0] === "setup" || args[0] === "sync") && args.some((a) => a === "--help" || a === "-h")
  ) {
    await Deno.stdout.write(new TextEncoder().encode(HELP));
    return 0;
  }
  // These commands have options of their own. They are loaded on demand so that `serve` does not
  // pay for their modules (config editing, code generation) at start-up or in memory.
  if (args[0] === "setup") {
    return await (await import("./src/cli/setup.ts")).setupCommand(args.slice(1));
  }
  if (args[0] === "sync") {
    return await (await import("./src/cli/sync.ts")).syncCommand(args.slice(1));
  }
  if (args[0] === "wrappers") {
    return await (await import("./src/cli/wrappers.ts")).wrappersCommand(args.slice(1));
  }
  if (args[0] === "skills") {
    return await (await import("./src/cli/skills.ts")).skillsCommand(args.slice(1));
  }
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      help: { type: "boolean", short: "h" },
      version: { type: "boolean", short: "V" },
      config: { type: "string", multiple: true },
      timeout: { type: "string" },
      json: { type: "boolean" },
      http: { type: "boolean" },
      host: { type: "string" },
      port: { type: "string" },
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
    const port = values.port === undefined ? undefined : Number(values.port);
    if (port !== undefined && !(Number.isInteger(port) && port >= 0 && port <= 65535)) {
      throw new TypeError(`Invalid --port "${values.port}": expected 0 to 65535`);
    }
    await serve({ configPaths: values.config ?? [], http: values.http, host: values.host, port });
    return 0;
  }
  if (command === "doctor") {
    if (values.http) {
      if (rest.length !== 1) throw new TypeError("Usage: code-executor doctor --http URL");
      const { checkHttpToken } = await import("./src/cli/doctor_http.ts");
      return await checkHttpToken(rest[0], { env: Deno.env.toObject() });
    }
    if (rest.length > 0) throw new TypeError(`Unexpected argument "${rest[0]}" for doctor`);
    return await doctor({ configPaths: values.config ?? [] });
  }
  if (command === "prepare") {
    if (rest.length > 0) throw new TypeError(`Unexpected argument "${rest[0]}" for prepare`);
    return await (await import("./src/cli/prepare.ts")).prepare();
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
  throw new TypeError(
    `Unknown command "${command}": expected serve, run, doctor, prepare, setup, sync, wrappers or skills (see --help)`,
  );
}

if (import.meta.main) {
  try {
    const code = await main(Deno.args);
    await flushLogs();
    Deno.exit(code);
  } catch (error) {
    // A StateUnavailable at the start (state.url) says what to change, as these do.
    const known = error instanceof SettingsError || error instanceof UpstreamConfigError ||
      error instanceof TypeError || error instanceof Deno.errors.NotFound ||
      error instanceof CodeExecutorError;
    console.error(`code-executor: ${known ? (error as Error).message : (error as Error).stack}`);
    await flushLogs();
    Deno.exit(2);
  }
}
