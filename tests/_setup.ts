/**
 * What the tests of `setup` and `sync` share: a temporary HOME seeded with realistic client
 * configs (comments, trailing commas, keys the clients keep next to their servers), the command
 * line run in a child process, and readers of what it wrote.
 *
 * @module
 */
import { join } from "node:path";
import { createScanner, parse as parseJsonc } from "jsonc-parser";
import { assert } from "./_assert.ts";
import { homeEnv, ROOT } from "./_env.ts";
import { type CommandRun, runCommand } from "./_command.ts";
import { type UserDirs, writeFileWithParents } from "./_fs.ts";

/** The Deno that runs the tests, and the commands they start. */
export const DENO = Deno.execPath();
/** This checkout's `main.ts`. */
export const MAIN = join(ROOT, "main.ts");

/** The entry setup writes when it runs from this checkout. */
export const SERVE = { command: DENO, args: ["run", "-A", MAIN, "serve"] };

/** The user directories after {@linkcode seed}, with the client files it wrote. */
export interface Seeded extends UserDirs {
  files: Record<"claude-code" | "cursor" | "claude-desktop" | "vscode", string>;
}

/** Writes a client's config with the mode a user's file would have (setup must keep it). */
export function write(path: string, text: string, mode = 0o644): Promise<string> {
  return writeFileWithParents(path, text, { mode });
}

const CLAUDE_CODE = `{
  "numStartups": 57,
  "installMethod": "native",
  "autoUpdates": false,
  // Claude Code keeps its own state around the servers.
  "tipsHistory": { "memory-command": 12, "new-user-warmup": 1 },
  "mcpServers": {
    "github": {
      "type": "stdio",
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-github"],
      "env": { "GITHUB_PERSONAL_ACCESS_TOKEN": "\${GITHUB_TOKEN}" },
    },
    "sentry": { "type": "http", "url": "https://mcp.sentry.dev/mcp" }, // remote
  },
  "projects": {
    "/home/you/work/api": {
      "allowedTools": [],
      "mcpServers": { "postgres": { "command": "npx", "args": ["-y", "pg-mcp"] } },
      "hasTrustDialogAccepted": true,
    },
  },
}
`;

const CURSOR = `// Cursor: global MCP servers
{
  "mcpServers": {
    "linear": { "url": "https://mcp.linear.app/sse" },
    /* Slack holds a literal token, as many real configs do. */
    "slack": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-slack"],
      "env": { "SLACK_BOT_TOKEN": "xoxb-2215469912-8812734512-Zq3PkzE0yEhVxtAqQ1Rm", "SLACK_TEAM_ID": "T01234567" }
    },
  },
}
`;

const CLAUDE_DESKTOP = `{
\t"globalShortcut": "Alt+Space",
\t"mcpServers": {
\t\t"filesystem": {
\t\t\t"command": "npx",
\t\t\t"args": ["-y", "@modelcontextprotocol/server-filesystem", "/home/you/Documents"]
\t\t},
\t\t"puppeteer": { "command": "npx", "args": ["-y", "@modelcontextprotocol/server-puppeteer"], "disabled": true }
\t},
\t"preferences": { "menuBarEnabled": true }
}
`;

const VSCODE = `{
  // VS Code: workspace servers live under "servers", with "inputs" for secrets.
  "inputs": [
    { "type": "promptString", "id": "perplexity-key", "description": "Perplexity API Key", "password": true },
  ],
  "servers": {
    "perplexity": {
      "type": "stdio",
      "command": "npx",
      "args": ["-y", "server-perplexity-ask"],
      "env": { "PERPLEXITY_API_KEY": "\${input:perplexity-key}" },
    },
    "fetch": { "type": "stdio", "command": "uvx", "args": ["mcp-server-fetch"] },
  },
}
`;

/** Writes the four clients' configs (Claude Code, Cursor, Claude Desktop, VS Code) into HOME. */
export async function seed(dirs: UserDirs): Promise<Seeded> {
  return {
    ...dirs,
    files: {
      "claude-code": await write(join(dirs.home, ".claude.json"), CLAUDE_CODE, 0o600),
      "cursor": await write(join(dirs.home, ".cursor", "mcp.json"), CURSOR, 0o600),
      "claude-desktop": await write(
        join(dirs.home, ".config", "Claude", "claude_desktop_config.json"),
        CLAUDE_DESKTOP,
      ),
      "vscode": await write(join(dirs.project, ".vscode", "mcp.json"), VSCODE),
    },
  };
}

/** Runs `main.ts <args>` as a user would: in the project, with nothing but the private HOME. */
export function codeExecutor(dirs: UserDirs, args: string[]): Promise<CommandRun> {
  return runCommand(DENO, ["run", "-A", MAIN, ...args], {
    cwd: dirs.project,
    env: homeEnv(dirs.home),
    clearEnv: true,
  });
}

/** Runs `main.ts setup <args>` as {@linkcode codeExecutor} does. */
export function runSetup(dirs: UserDirs, args: string[]): Promise<CommandRun> {
  return codeExecutor(dirs, ["setup", ...args]);
}

/** The backups setup made of a file, among the files of a snapshot. */
export function backupsOf(files: Map<string, string>, file: string): string[] {
  return [...files.keys()].filter((p) => p.startsWith(`${file}.backup-`));
}

/** Parses a client file as the clients do: JSONC with trailing commas. */
export function parse(text: string): Record<string, unknown> {
  const value = parseJsonc(text, [], { allowTrailingComma: true });
  assert(value && typeof value === "object", "a JSON object");
  return value as Record<string, unknown>;
}

/** The comments of a JSONC text, in order. */
export function comments(text: string): string[] {
  const scanner = createScanner(text, false);
  const found: string[] = [];
  // SyntaxKind is a const enum, which isolated modules cannot read: 12 and 13 are the comments,
  // 17 the end.
  for (let kind: number = scanner.scan(); kind !== 17; kind = scanner.scan()) {
    if (kind === 12 || kind === 13) {
      found.push(scanner.getTokenValue());
    }
  }
  return found;
}

/** Escapes text for use inside a regular expression. */
export function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
