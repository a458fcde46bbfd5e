/**
 * Tests of `setup` and `sync` on a temporary HOME seeded with realistic client configs
 * (comments, trailing commas, keys the clients keep next to their servers): the real command
 * line in a child process, and the moved servers called through a real Code Executor server.
 *
 * @module
 */
import { Client } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { join, relative } from "node:path";
import { createScanner, parse as parseJsonc } from "jsonc-parser";
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import {
  type CommandRun,
  describeRun as describe,
  EVERYTHING,
  homeEnv,
  MEMORY,
  ROOT,
  runCommand,
  snapshotFiles,
  startServer,
  type UserDirs,
  withUserDirs,
  writeFileWithParents,
} from "./_helpers.ts";
import { THIRD_PARTY_CONFIG } from "./_third_party.ts";
import { dailySyncPlan } from "../src/cli/sync.ts";
import { unifiedDiff } from "../src/config/text_diff.ts";
import { backupFile, writeFileAtomic } from "../src/config/safe_write.ts";
import { removeProperty, setProperty } from "../src/config/jsonc_edit.ts";

const DENO = Deno.execPath();
const MAIN = join(ROOT, "main.ts");

/** The entry setup writes when it runs from this checkout. */
const SERVE = { command: DENO, args: ["run", "-A", MAIN, "serve"] };

interface Seeded extends UserDirs {
  files: Record<"claude-code" | "cursor" | "claude-desktop" | "vscode", string>;
}

/** Writes a client's config with the mode a user's file would have (setup must keep it). */
function write(path: string, text: string, mode = 0o644): Promise<string> {
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

async function seed(dirs: UserDirs): Promise<Seeded> {
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
function codeExecutor(dirs: UserDirs, args: string[]): Promise<CommandRun> {
  return runCommand(DENO, ["run", "-A", MAIN, ...args], {
    cwd: dirs.project,
    env: homeEnv(dirs.home),
    clearEnv: true,
  });
}

function runSetup(dirs: UserDirs, args: string[]): Promise<CommandRun> {
  return codeExecutor(dirs, ["setup", ...args]);
}

function backupsOf(files: Map<string, string>, file: string): string[] {
  return [...files.keys()].filter((p) => p.startsWith(`${file}.backup-`));
}

function parse(text: string): Record<string, unknown> {
  const value = parseJsonc(text, [], { allowTrailingComma: true });
  assert(value && typeof value === "object", "a JSON object");
  return value as Record<string, unknown>;
}

function comments(text: string): string[] {
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

const CLIENTS = [
  { id: "claude-code", key: "mcpServers", typed: true },
  { id: "cursor", key: "mcpServers", typed: false },
  { id: "claude-desktop", key: "mcpServers", typed: false },
  { id: "vscode", key: "servers", typed: true },
] as const;

for (const client of CLIENTS) {
  Deno.test(`setup --yes --client ${client.id} writes the entry, backs up, and is idempotent`, async () => {
    await withUserDirs("ce-setup-", async (dirs) => {
      const seeded = await seed(dirs);
      const file = seeded.files[client.id];
      const rel = relative(dirs.root, file);
      const before = await snapshotFiles(dirs.root);
      const original = before.get(rel)!;

      const first = await runSetup(dirs, ["--yes", "--client", client.id, "--no-check"]);
      assertEquals(first.code, 0, describe(first));
      const after = await snapshotFiles(dirs.root);
      const text = after.get(rel)!;

      // The entry is the command that starts this checkout.
      const parsed = parse(text);
      const servers = parsed[client.key] as Record<string, unknown>;
      assertEquals(
        servers["code-executor"],
        client.typed ? { type: "stdio", ...SERVE } : SERVE,
        describe(first),
      );
      // Everything else means what it meant, comments included.
      delete servers["code-executor"];
      assertEquals(parsed, parse(original));
      if (client.id === "claude-desktop") {
        // Claude Desktop reads its file with JSON.parse: it must stay strict JSON.
        assertEquals(JSON.parse(text)[client.key]["code-executor"], SERVE);
      } else assert(comments(original).length > 0, "the seeded file has comments");
      for (const comment of comments(original)) {
        assert(text.includes(comment), `comment lost: ${comment}\n${text}`);
      }
      // The mode of the file is kept.
      assertEquals(
        (await Deno.stat(file)).mode! & 0o777,
        client.id === "cursor" || client.id === "claude-code" ? 0o600 : 0o644,
      );

      // One backup, equal to the original; no other file touched.
      const backups = backupsOf(after, rel);
      assertEquals(backups.length, 1, [...after.keys()].join("\n"));
      assertEquals(after.get(backups[0]), original);
      for (const [path, content] of before) {
        if (path !== rel) assertEquals(after.get(path), content, path);
      }
      assertEquals(after.size, before.size + 1, [...after.keys()].join("\n"));
      assertMatch(first.stdout, new RegExp(`backed up .*${escape(rel.split("/").pop()!)}`));

      // A second run changes nothing and makes no backup.
      const second = await runSetup(dirs, ["--yes", "--client", client.id, "--no-check"]);
      assertEquals(second.code, 0, describe(second));
      assertEquals(await snapshotFiles(dirs.root), after);
      assertMatch(second.stdout, /is already in/);
      assertMatch(second.stdout, /Nothing to change/);
    });
  });
}

Deno.test("setup --dry-run writes nothing and prints the diff and the daily sync", async () => {
  await withUserDirs("ce-setup-", async (dirs) => {
    await seed(dirs);
    const before = await snapshotFiles(dirs.root);
    const outcome = await runSetup(dirs, [
      "--dry-run",
      "--client",
      "claude-code",
      "--move",
      "--sync",
    ]);
    assertEquals(outcome.code, 0, describe(outcome));
    assertEquals(await snapshotFiles(dirs.root), before);
    const out = outcome.stdout;
    assertMatch(out, /^--- ~\/\.claude\.json$/m);
    assertMatch(out, /^\+\+\+ ~\/\.claude\.json$/m);
    assertMatch(out, /^\+ {4}"code-executor": \{$/m);
    // The servers move to Code Executor's own file, a new one.
    assertMatch(out, /^--- \/dev\/null\n\+\+\+ ~\/\.config\/code-executor\/mcp\.json$/m);
    assertMatch(out, /^- {4}"github": \{$/m);
    assertMatch(
      out,
      /^\+ {6}"env": \{\n\+ {8}"GITHUB_PERSONAL_ACCESS_TOKEN": "\$\{GITHUB_TOKEN\}"$/m,
    );
    // The per-project servers of Claude Code stay where they are.
    assert(!/^[-+].*postgres/m.test(out), out);
    assertMatch(out, /~\/\.config\/systemd\/user\/code-executor-sync\.timer:\n\[Unit\]/);
    assertMatch(out, /OnCalendar=daily/);
    assertMatch(out, /ExecStart=.*main\.ts sync$/m);
    assertMatch(out, /systemctl --user enable --now code-executor-sync\.timer/);
  });
});

Deno.test("setup --move keeps ${VAR} references and refuses to copy literal secrets", async () => {
  await withUserDirs("ce-setup-", async (dirs) => {
    const seeded = await seed(dirs);
    const cursor = await runSetup(dirs, ["--yes", "--client", "cursor", "--move", "--no-check"]);
    assertEquals(cursor.code, 0, describe(cursor));
    const own = join(dirs.home, ".config", "code-executor", "mcp.json");
    const ownText = await Deno.readTextFile(own);
    assertEquals(Object.keys(parse(ownText).mcpServers as object), ["linear"]);
    assertEquals((await Deno.stat(own)).mode! & 0o777, 0o600);
    // Slack's token stays in Cursor's file only, and the user is told what to do.
    assert(!ownText.includes("xoxb-"), ownText);
    const cursorConfig = parse(await Deno.readTextFile(seeded.files.cursor));
    assertEquals(Object.keys(cursorConfig.mcpServers as object).sort(), ["code-executor", "slack"]);
    assertMatch(cursor.stdout, /not moving "slack": "env\.SLACK_BOT_TOKEN" holds a literal secret/);
    assertMatch(
      cursor.stdout,
      /write "\$\{SLACK_BOT_TOKEN\}" there instead, export SLACK_BOT_TOKEN/,
    );
    assert(!cursor.stdout.includes("xoxb-"), "the secret is never printed");

    // Claude Code's github entry moves with its reference as written.
    const claude = await runSetup(dirs, [
      "--yes",
      "--client",
      "claude-code",
      "--move",
      "--no-check",
    ]);
    assertEquals(claude.code, 0, describe(claude));
    const moved = parse(await Deno.readTextFile(own)).mcpServers as Record<string, unknown>;
    assertEquals(moved.github, {
      type: "stdio",
      command: "npx",
      args: ["-y", "@modelcontextprotocol/server-github"],
      env: { GITHUB_PERSONAL_ACCESS_TOKEN: "${GITHUB_TOKEN}" },
    });
    assertEquals(Object.keys(moved).sort(), ["github", "linear", "sentry"]);
    const claudeConfig = parse(await Deno.readTextFile(seeded.files["claude-code"]));
    assertEquals(Object.keys(claudeConfig.mcpServers as object), ["code-executor"]);
    // The project's own servers stay with the project.
    assertEquals(
      Object.keys(
        (claudeConfig.projects as Record<string, Record<string, unknown>>)["/home/you/work/api"]
          .mcpServers as object,
      ),
      ["postgres"],
    );
    // The own file was backed up before its second change.
    const backups = [...(await snapshotFiles(dirs.root)).keys()].filter((p) =>
      p.includes("code-executor/mcp.json.backup-")
    );
    assertEquals(backups.length, 1);

    // Claude Desktop's file is strict JSON and stays so; its disabled entry stays where it is.
    const desktop = await runSetup(dirs, [
      "--yes",
      "--client",
      "claude-desktop",
      "--move",
      "--no-check",
    ]);
    assertEquals(desktop.code, 0, describe(desktop));
    const desktopConfig = JSON.parse(await Deno.readTextFile(seeded.files["claude-desktop"]));
    assertEquals(Object.keys(desktopConfig.mcpServers).sort(), ["code-executor", "puppeteer"]);
    assertEquals(desktopConfig.preferences, { menuBarEnabled: true });
    assertMatch(desktop.stdout, /not moving "puppeteer": it is disabled/);

    // VS Code's ${input:…} cannot be filled in by Code Executor: that server stays.
    const vscode = await runSetup(dirs, ["--yes", "--client", "vscode", "--move", "--no-check"]);
    assertEquals(vscode.code, 0, describe(vscode));
    assertMatch(
      vscode.stdout,
      /not moving "perplexity": .*\$\{input:perplexity-key\}, which only VS Code can fill in/,
    );
    const servers = parse(await Deno.readTextFile(seeded.files.vscode)).servers as object;
    assertEquals(Object.keys(servers).sort(), ["code-executor", "perplexity"]);
  });
});

Deno.test("setup --move round-trips: the moved servers are callable through Code Executor", async () => {
  await withUserDirs("ce-setup-", async (dirs) => {
    const memoryFile = join(dirs.root, "memory.jsonl");
    const claudeJson = await write(
      join(dirs.home, ".claude.json"),
      `{
  "numStartups": 3,
  // two real servers from npm
  "mcpServers": {
    "memory": {
      "type": "stdio",
      "command": ${JSON.stringify(DENO)},
      "args": ["run", "-A", "--config", ${JSON.stringify(THIRD_PARTY_CONFIG)}, "${MEMORY}"],
      "env": { "MEMORY_FILE_PATH": ${JSON.stringify(memoryFile)} },
    },
    "everything": { "command": ${JSON.stringify(DENO)}, "args": ["run", "-A", "--config", ${
        JSON.stringify(THIRD_PARTY_CONFIG)
      }, "${EVERYTHING}"] },
  },
}
`,
      0o600,
    );
    const first = await runSetup(dirs, ["--yes", "--client", "claude-code", "--move"]);
    assertEquals(first.code, 0, describe(first));
    // setup checked both servers after moving them, with progress on stderr.
    assertMatch(first.stdout, /ok {6}everything: \d+ tools/);
    assertMatch(first.stdout, /ok {6}memory: \d+ tools/);
    assertMatch(first.stderr, /Connecting to 2 servers: everything, memory/);
    const claude = parse(await Deno.readTextFile(claudeJson));
    assertEquals(claude.mcpServers, { "code-executor": { type: "stdio", ...SERVE } });
    assert((await Deno.readTextFile(claudeJson)).includes("// two real servers from npm"));
    const own = join(dirs.home, ".config", "code-executor", "mcp.json");
    assertEquals(
      Object.keys(parse(await Deno.readTextFile(own)).mcpServers as object).sort(),
      ["everything", "memory"],
    );

    const second = await runSetup(dirs, [
      "--yes",
      "--client",
      "claude-code",
      "--move",
      "--no-check",
    ]);
    assertEquals(second.code, 0, describe(second));
    assertMatch(second.stdout, /Nothing to change/);
    assertMatch(first.stdout, /wrappers: \d+ files written/);

    // sync lists the tools again into the cache that serve loads.
    const catalog = join(dirs.home, ".cache", "code-executor", "catalog");
    await Deno.remove(catalog, { recursive: true });
    const synced = await codeExecutor(dirs, ["sync"]);
    assertEquals(synced.code, 0, describe(synced));
    assertMatch(
      synced.stdout,
      /^Synced 2 of 2 servers: everything \(\d+ tools\), memory \(\d+ tools\)$/m,
    );
    const cached = [...Deno.readDirSync(catalog)].map((e) =>
      Deno.readTextFileSync(join(catalog, e.name))
    );
    assertEquals(cached.length, 1);
    assertMatch(cached[0], /"read_graph"/);
    assertMatch(cached[0], /"get-sum"/);

    // The server the client would start: HOME is the temp home, nothing passed with --config.
    const server = await startServer({ env: homeEnv(dirs.home) });
    try {
      const result = await server.runTs(`
        await callMCPTool("mcp__memory__create_entities", {
          entities: [{ name: "setup", entityType: "test", observations: ["moved"] }],
        });
        const graph = await callMCPTool("mcp__memory__read_graph", {});
        const sum = await callMCPTool("mcp__everything__get-sum", { a: 2, b: 3 });
        return { entities: graph.entities.map((e) => e.name), sum };
      `);
      assertEquals(result.isError, false, JSON.stringify(result));
      const value = result.returnValue as { entities: string[]; sum: unknown };
      assertEquals(value.entities, ["setup"]);
      assertMatch(JSON.stringify(value.sum), /5/);
    } finally {
      await server.close();
    }
    assertMatch(await Deno.readTextFile(memoryFile), /"moved"/);
  });
});

/** The client configs setup scans besides the original four: each with a server that moves. */
const MORE_CLIENTS = [
  {
    id: "vscode-user",
    label: "VS Code (user)",
    app: "VS Code",
    key: "servers",
    typed: true,
    path: (dirs: UserDirs) => join(dirs.home, ".config", "Code", "User", "mcp.json"),
    mode: 0o600,
    text: (memoryFile: string) =>
      `// VS Code: user-level MCP servers
{
  "inputs": [
    { "type": "promptString", "id": "search-key", "description": "Search API key", "password": true },
  ],
  "servers": {
    "memory": {
      "type": "stdio",
      "command": ${JSON.stringify(DENO)},
      "args": ["run", "-A", "--config", ${JSON.stringify(THIRD_PARTY_CONFIG)}, "${MEMORY}"],
      "env": { "MEMORY_FILE_PATH": ${JSON.stringify(memoryFile)} }, // where the graph lives
    },
    "search": {
      "type": "http",
      "url": "https://search.example.com/mcp",
      "headers": { "Authorization": "Bearer \${input:search-key}" },
    },
  },
  "chat.mcp.discovery.enabled": false,
}
`,
    stays:
      /not moving "search": "headers\.Authorization" uses \$\{input:search-key\}, which only VS Code can fill in/,
  },
  {
    id: "cursor-project",
    label: "Cursor (project)",
    app: "Cursor",
    key: "mcpServers",
    typed: false,
    path: (dirs: UserDirs) => join(dirs.project, ".cursor", "mcp.json"),
    mode: 0o644,
    text: (memoryFile: string) =>
      `{
  // Cursor: this project's servers
  "mcpServers": {
    "memory": {
      "command": ${JSON.stringify(DENO)},
      "args": ["run", "-A", "--config", ${JSON.stringify(THIRD_PARTY_CONFIG)}, "${MEMORY}"],
      "env": { "MEMORY_FILE_PATH": ${JSON.stringify(memoryFile)} },
    },
    /* Cursor's own variable syntax */
    "docs": { "command": "/nonexistent/docs-mcp", "args": ["--token", "\${env:DOCS_TOKEN}"] },
  },
  "projectNotes": "kept as is",
}
`,
    stays:
      /not moving "docs": "args\[1\]" uses \$\{env:DOCS_TOKEN\}, which only Cursor can fill in/,
  },
] as const;

for (const client of MORE_CLIENTS) {
  Deno.test(`setup --client ${client.id} --move round-trips and keeps the file's comments and keys`, async () => {
    await withUserDirs("ce-setup-", async (dirs) => {
      const file = await write(
        client.path(dirs),
        client.text(join(dirs.root, "memory.jsonl")),
        client.mode,
      );
      const original = await Deno.readTextFile(file);
      const before = await snapshotFiles(dirs.root);

      // The scan lists the file and its servers; a dry run writes nothing.
      const dry = await runSetup(dirs, ["--dry-run", "--client", client.id, "--move"]);
      assertEquals(dry.code, 0, describe(dry));
      assertMatch(
        dry.stdout,
        new RegExp(`^  ${escape(client.label)} +\\S*mcp\\.json: 2 servers: memory, \\w+$`, "m"),
      );
      assertMatch(dry.stdout, /^ {2}move "memory" to ~\/\.config\/code-executor\/mcp\.json$/m);
      assertEquals(await snapshotFiles(dirs.root), before);

      // The real run moves memory, and its check reaches memory behind Code Executor.
      const first = await runSetup(dirs, ["--yes", "--client", client.id, "--move"]);
      assertEquals(first.code, 0, describe(first));
      assertMatch(first.stdout, client.stays);
      assertMatch(first.stdout, /ok {6}memory: \d+ tools/);
      assertMatch(first.stdout, new RegExp(`Done\\. Restart ${client.app} so that`));
      const text = await Deno.readTextFile(file);
      const parsed = parse(text);
      const servers = parsed[client.key] as Record<string, unknown>;
      assertEquals(Object.keys(servers).sort(), [
        "code-executor",
        client.id === "vscode-user" ? "search" : "docs",
      ]);
      assertEquals(servers["code-executor"], client.typed ? { type: "stdio", ...SERVE } : SERVE);
      // Everything but the two entries means what it meant, comments and unknown keys included.
      const expected = parse(original);
      const expectedServers = expected[client.key] as Record<string, unknown>;
      delete expectedServers.memory;
      expectedServers["code-executor"] = servers["code-executor"];
      assertEquals(parsed, expected);
      for (const comment of comments(original)) {
        if (comment.includes("where the graph lives")) continue; // it went with its entry
        assert(text.includes(comment), `comment lost: ${comment}\n${text}`);
      }
      assertEquals((await Deno.stat(file)).mode! & 0o777, client.mode);
      const own = parse(
        await Deno.readTextFile(join(dirs.home, ".config", "code-executor", "mcp.json")),
      );
      assertEquals(
        (own.mcpServers as Record<string, unknown>).memory,
        (parse(original)[client.key] as Record<string, unknown>).memory,
      );
      const after = await snapshotFiles(dirs.root);
      assertEquals(backupsOf(after, relative(dirs.root, file)).length, 1);

      const second = await runSetup(dirs, ["--yes", "--client", client.id, "--move", "--no-check"]);
      assertEquals(second.code, 0, describe(second));
      assertMatch(second.stdout, /Nothing to change/);
    });
  });
}

Deno.test("setup picks the project's .cursor/mcp.json by default, and sync reads it too", async () => {
  await withUserDirs("ce-setup-", async (dirs) => {
    await write(
      join(dirs.project, ".cursor", "mcp.json"),
      `{ "mcpServers": { "memory": { "command": ${
        JSON.stringify(DENO)
      }, "args": ["run", "-A", "--config", ${
        JSON.stringify(THIRD_PARTY_CONFIG)
      }, "${MEMORY}"], "env": { "MEMORY_FILE_PATH": ${
        JSON.stringify(join(dirs.root, "memory.jsonl"))
      } } } } }`,
    );
    // Without --client, the one config with servers is the default.
    const outcome = await runSetup(dirs, ["--yes", "--no-check"]);
    assertEquals(outcome.code, 0, describe(outcome));
    assertMatch(
      outcome.stdout,
      /^Client: Cursor \(project\) \(.*\/project\/\.cursor\/mcp\.json\)$/m,
    );
    assertMatch(outcome.stdout, /keep "memory" in .*\.cursor\/mcp\.json \(move them with --move\)/);
    // Discovery, which serve and sync share, reads the project's Cursor file like Cursor does.
    const synced = await codeExecutor(dirs, ["sync", "--no-wrappers"]);
    assertEquals(synced.code, 0, describe(synced));
    assertMatch(synced.stdout, /^Synced 1 of 1 servers?: memory \(\d+ tools\)$/m);
  });
});

Deno.test("setup --sync --no-enable writes the systemd units once and says how to start them", async () => {
  await withUserDirs("ce-setup-", async (dirs) => {
    await seed(dirs);
    const first = await runSetup(dirs, [
      "--yes",
      "--client",
      "cursor",
      "--sync",
      "--no-enable",
      "--no-check",
    ]);
    assertEquals(first.code, 0, describe(first));
    const unitDir = join(dirs.home, ".config", "systemd", "user");
    const service = await Deno.readTextFile(join(unitDir, "code-executor-sync.service"));
    assertMatch(
      service,
      new RegExp(`^ExecStart=${escape(DENO)} run -A ${escape(MAIN)} sync$`, "m"),
    );
    assertMatch(
      await Deno.readTextFile(join(unitDir, "code-executor-sync.timer")),
      /^OnCalendar=daily$/m,
    );
    assertMatch(
      first.stdout,
      /to activate it, run: systemctl --user daemon-reload && systemctl --user enable --now code-executor-sync\.timer/,
    );
    const after = await snapshotFiles(dirs.root);
    const second = await runSetup(dirs, [
      "--yes",
      "--client",
      "cursor",
      "--sync",
      "--no-enable",
      "--no-check",
    ]);
    assertEquals(second.code, 0, describe(second));
    assertMatch(second.stdout, /already installed/);
    assertEquals(await snapshotFiles(dirs.root), after);
  });
});

Deno.test("setup without a terminal and without --yes asks for flags instead of guessing", async () => {
  await withUserDirs("ce-setup-", async (dirs) => {
    await seed(dirs);
    const before = await snapshotFiles(dirs.root);
    const outcome = await runSetup(dirs, ["--client", "cursor"]);
    assertEquals(outcome.code, 2, describe(outcome));
    assertMatch(
      outcome.stderr,
      /Cannot ask the setup questions: stdin is not a terminal; pass --yes/,
    );
    assertEquals(await snapshotFiles(dirs.root), before);
  });
});

Deno.test("serve without any config starts and says on stderr how to run setup", async () => {
  await withUserDirs("ce-setup-", async (dirs) => {
    const transport = new StdioClientTransport({
      command: DENO,
      args: ["run", "-A", MAIN, "serve"],
      cwd: dirs.project,
      env: {
        ...homeEnv(dirs.home),
        TMPDIR: dirs.root,
        CODE_EXECUTOR_WARM_POOL: "0",
        CODE_EXECUTOR_PYTHON_WARM_POOL: "0",
        ENABLE_AUDIT_LOG: "false",
      },
      stderr: "pipe",
    });
    const stderr: string[] = [];
    transport.stderr?.on(
      "data",
      (chunk: Uint8Array) => stderr.push(new TextDecoder().decode(chunk)),
    );
    const client = new Client({ name: "setup-test", version: "1.0.0" });
    await client.connect(transport);
    try {
      const tools = await client.listTools();
      assertEquals(tools.tools.map((t) => t.name).sort(), [
        "run_python",
        "run_typescript",
        "search_tools",
      ]);
      assertMatch(stderr.join(""), /No MCP servers are configured.*code-executor setup/);
      assertMatch(stderr.join(""), /deno task setup/);
    } finally {
      await client.close();
    }
  });
});

Deno.test("unifiedDiff() shows changed lines with context and line numbers", () => {
  const lines = Array.from({ length: 20 }, (_, i) => `line ${i + 1}`);
  const changed = lines.map((line, i) => (i === 4 ? "LINE 5" : line));
  changed.push("line 21");
  assertEquals(
    unifiedDiff(lines.join("\n") + "\n", changed.join("\n") + "\n", { fromName: "x", toName: "x" }),
    [
      "--- x",
      "+++ x",
      "@@ -2,7 +2,7 @@",
      " line 2",
      " line 3",
      " line 4",
      "-line 5",
      "+LINE 5",
      " line 6",
      " line 7",
      " line 8",
      "@@ -18,3 +18,4 @@",
      " line 18",
      " line 19",
      " line 20",
      "+line 21",
      "",
    ].join("\n"),
  );
  // Changes closer than twice the context share a hunk.
  assertEquals(
    unifiedDiff("a\nb\nc\nd\n", "A\nb\nc\nD\n"),
    "--- a\n+++ b\n@@ -1,4 +1,4 @@\n-a\n+A\n b\n c\n-d\n+D\n",
  );
  assertEquals(unifiedDiff("same\n", "same\n"), "");
  assertEquals(
    unifiedDiff("", "new\n", { fromName: "/dev/null", toName: "n" }),
    "--- /dev/null\n+++ n\n@@ -0,0 +1 @@\n+new\n",
  );
});

Deno.test("setProperty() and removeProperty() change only the property's own text", () => {
  const text = `{
  // servers
  "mcpServers": {
    "github": { "command": "npx" }, // c1
    "memory": {
      "command": "npx"
    } // c2
  },
  "inline": { "a": 1, "b": 2 },
  "empty": {}
}
`;
  // The last entry goes with its comment and the comma before it: strict JSON stays strict.
  assertEquals(
    removeProperty(text, ["mcpServers", "memory"]),
    text.replace(', // c1\n    "memory": {\n      "command": "npx"\n    } // c2\n', " // c1\n"),
  );
  assertEquals(
    removeProperty(text, ["mcpServers", "github"]),
    text.replace('    "github": { "command": "npx" }, // c1\n', ""),
  );
  assertEquals(removeProperty(text, ["inline", "b"]), text.replace('"a": 1, "b": 2', '"a": 1'));
  assertEquals(removeProperty(text, ["inline", "a"]), text.replace('"a": 1, "b": 2', '"b": 2'));
  assertEquals(removeProperty(text, ["nothing", "here"]), text);
  assertEquals(
    setProperty(text, ["mcpServers", "x"], { args: ["a"] }),
    text.replace(
      '"mcpServers": {\n',
      '"mcpServers": {\n    "x": {\n      "args": [\n        "a"\n      ]\n    },\n',
    ),
  );
  assertEquals(
    setProperty(text, ["inline", "c"], [1]),
    text.replace('{ "a": 1', '{ "c": [1], "a": 1'),
  );
  assertEquals(
    setProperty(text, ["empty", "k"], true),
    text.replace('"empty": {}', '"empty": {\n    "k": true\n  }'),
  );
  assertEquals(setProperty(text, ["inline", "a"], 3), text.replace('"a": 1', '"a": 3'));
  assertEquals(
    setProperty('{\n\t"x": 1\n}\n', ["servers", "s"], { a: 1 }),
    '{\n\t"servers": {\n\t\t"s": {\n\t\t\t"a": 1\n\t\t}\n\t},\n\t"x": 1\n}\n',
  );
});

Deno.test("writeFileAtomic() keeps the mode, follows symlinks and leaves no temp file", async () => {
  await withUserDirs("ce-setup-", async (dirs) => {
    const real = await write(join(dirs.root, "dotfiles", "mcp.json"), "{}\n", 0o640);
    const link = join(dirs.home, "mcp.json");
    await Deno.symlink(real, link);
    const written = await writeFileAtomic(link, '{ "a": 1 }\n');
    assertEquals(written, real);
    assert((await Deno.lstat(link)).isSymlink, "the link stays a link");
    assertEquals(await Deno.readTextFile(real), '{ "a": 1 }\n');
    assertEquals((await Deno.stat(real)).mode! & 0o777, 0o640);
    const fresh = await writeFileAtomic(join(dirs.root, "new", "file.json"), "{}\n", {
      mode: 0o600,
    });
    assertEquals((await Deno.stat(fresh)).mode! & 0o777, 0o600);
    assertEquals([...(await snapshotFiles(join(dirs.root, "dotfiles"))).keys()], ["mcp.json"]);

    const now = new Date("2026-01-02T03:04:05.678Z");
    const one = await backupFile(real, now);
    const two = await backupFile(real, now);
    assertEquals([one, two], [
      `${real}.backup-20260102T030405Z`,
      `${real}.backup-20260102T030405Z-2`,
    ]);
    assertEquals(await Deno.readTextFile(two), '{ "a": 1 }\n');
    assertEquals((await Deno.stat(two)).mode! & 0o777, 0o640);
  });
});

Deno.test("dailySyncPlan() describes systemd, launchd and Task Scheduler", () => {
  const launch = {
    command: "/opt/deno",
    args: ["run", "-A", "/src/code executor/main.ts", "sync"],
  };
  const env = { HOME: "/home/you" };
  const linux = dailySyncPlan("linux", { launch, env });
  assertEquals(linux.files.map((f) => f.path), [
    "/home/you/.config/systemd/user/code-executor-sync.service",
    "/home/you/.config/systemd/user/code-executor-sync.timer",
  ]);
  assertMatch(
    linux.files[0].text,
    /^ExecStart=\/opt\/deno run -A "\/src\/code executor\/main\.ts" sync$/m,
  );
  const mac = dailySyncPlan("darwin", { launch, env: { HOME: "/Users/you" } });
  assertEquals(mac.files[0].path, "/Users/you/Library/LaunchAgents/dev.code-executor.sync.plist");
  assertMatch(mac.files[0].text, /<string>\/src\/code executor\/main\.ts<\/string>/);
  assertEquals(mac.commands, [["launchctl", "load", "-w", mac.files[0].path]]);
  const windows = dailySyncPlan("windows", { launch, env: { USERPROFILE: "C:\\Users\\you" } });
  assertEquals(windows.files, []);
  assertEquals(windows.commands[0].slice(0, 5), ["schtasks", "/Create", "/F", "/SC", "DAILY"]);
  assertEquals(windows.commands[0].at(-1), '/opt/deno run -A "/src/code executor/main.ts" sync');
});

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
