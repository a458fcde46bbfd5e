/**
 * `setup --move`: the servers move into Code Executor's own file with their `${VAR}` references
 * and without literal secrets, keep each client file's comments and keys, and are then callable
 * through a real Code Executor server.
 *
 * @module
 */
import { join, relative } from "node:path";
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { EVERYTHING, MEMORY } from "./_pins.ts";
import { homeEnv } from "./_env.ts";
import { describeRun as describe } from "./_command.ts";
import { snapshotFiles, type UserDirs, withUserDirs } from "./_fs.ts";
import { startServer } from "./_stdio_server.ts";
import {
  backupsOf,
  codeExecutor,
  comments,
  DENO,
  escape,
  parse,
  runSetup,
  seed,
  SERVE,
  write,
} from "./_setup.ts";

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
      "args": ["run", "-A", "${MEMORY}"],
      "env": { "MEMORY_FILE_PATH": ${JSON.stringify(memoryFile)} },
    },
    "everything": { "command": ${JSON.stringify(DENO)}, "args": ["run", "-A", "${EVERYTHING}"] },
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
      "args": ["run", "-A", "${MEMORY}"],
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
      "args": ["run", "-A", "${MEMORY}"],
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
