import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { assert, assertEquals, assertMatch, assertRejects, assertThrows } from "./_assert.ts";
import { type UserDirs, withUserDirs, writeFileWithParents as write } from "./_helpers.ts";
import {
  expandVars,
  UpstreamConfigError,
  type UpstreamServerConfig,
} from "../src/config/server_entry.ts";
import {
  type DiscoverOptions,
  discoverUpstreams,
  type UpstreamConfig,
} from "../src/config/upstream.ts";

function paths(dirs: UserDirs) {
  return {
    desktop: join(dirs.home, ".config", "Claude", "claude_desktop_config.json"),
    claude: join(dirs.home, ".claude.json"),
    cursor: join(dirs.home, ".cursor", "mcp.json"),
    cursorProject: join(dirs.project, ".cursor", "mcp.json"),
    project: join(dirs.project, ".mcp.json"),
    own: join(dirs.home, ".config", "code-executor", "mcp.json"),
    envFile: join(dirs.root, "env-config.jsonc"),
    cli1: join(dirs.root, "cli-1.json"),
    cli2: join(dirs.root, "cli-2.jsonc"),
  };
}

function discover(
  dirs: UserDirs,
  env: Record<string, string> = {},
  options: DiscoverOptions = {},
): Promise<UpstreamConfig> {
  return discoverUpstreams({
    env: { HOME: dirs.home, ...env },
    cwd: dirs.project,
    os: "linux",
    ...options,
  });
}

function server(config: UpstreamConfig, name: string): UpstreamServerConfig {
  const found = config.servers.find((s) => s.name === name);
  assert(found, `expected server "${name}" in ${config.servers.map((s) => s.name).join(", ")}`);
  return found;
}

function brokenError(config: UpstreamConfig, name: string): string {
  const found = config.broken.find((b) => b.name === name);
  assert(found, `expected broken server "${name}"`);
  return found.error;
}

function stdio(command: string): string {
  return JSON.stringify({ command, args: [] });
}

Deno.test("discoverUpstreams() lets later sources win by server name", async () => {
  await withUserDirs("ce-upstream-", async (dirs) => {
    const p = paths(dirs);
    await write(
      p.desktop,
      `{
  // Claude Desktop keeps other settings next to the servers
  "globalShortcut": "Ctrl+Space",
  "mcpServers": {
    "shared": ${stdio("from-desktop")},
    "desktop-only": ${stdio("desktop-only")},
  },
}`,
    );
    await write(
      p.claude,
      `{
  "numStartups": 12,
  "mcpServers": { "shared": ${stdio("from-claude")}, "claude-only": ${stdio("claude-only")} },
  "projects": {}
}`,
    );
    await write(
      p.cursor,
      `{ "mcpServers": { "shared": ${stdio("from-cursor")}, "cursor-only": ${
        stdio("cursor-only")
      } } }`,
    );
    await write(
      p.cursorProject,
      `{ "mcpServers": { "shared": ${stdio("from-cursor-project")}, "cursor-project-only": ${
        stdio("cursor-project-only")
      } } }`,
    );
    await write(
      p.project,
      `{ "mcpServers": { "shared": ${stdio("from-project")}, "project-only": ${
        stdio("project-only")
      } } }`,
    );
    await write(
      p.own,
      `{ "mcpServers": { "shared": ${stdio("from-own")}, "own-only": ${stdio("own-only")} } }`,
    );
    await write(
      p.envFile,
      `/* MCP_CONFIG_PATH */ { "mcpServers": { "shared": ${stdio("from-env")}, "env-only": ${
        stdio("env-only")
      }, } }`,
    );
    await write(
      p.cli1,
      `{ "mcpServers": { "shared": ${stdio("from-cli-1")}, "cli-1-only": ${
        stdio("cli-1-only")
      } } }`,
    );
    await write(
      p.cli2,
      `{ "mcpServers": { "shared": ${stdio("from-cli-2")}, "cli-2-only": ${
        stdio("cli-2-only")
      } } }`,
    );

    const order: Array<[string, string]> = [
      [p.cli2, "from-cli-2"],
      [p.cli1, "from-cli-1"],
      [p.envFile, "from-env"],
      [p.own, "from-own"],
      [p.project, "from-project"],
      [p.cursorProject, "from-cursor-project"],
      [p.cursor, "from-cursor"],
      [p.claude, "from-claude"],
      [p.desktop, "from-desktop"],
    ];
    const env = { MCP_CONFIG_PATH: "../env-config.jsonc" };
    const configPaths = [p.cli1, "../cli-2.jsonc"];

    const all = await discover(dirs, env, { configPaths });
    assertEquals(all.broken, []);
    assertEquals(all.servers.map((s) => s.name), [
      "claude-only",
      "cli-1-only",
      "cli-2-only",
      "cursor-only",
      "cursor-project-only",
      "desktop-only",
      "env-only",
      "own-only",
      "project-only",
      "shared",
    ]);
    assertEquals(
      all.sources.map((s) => [s.kind, s.path, s.found, s.servers]),
      [
        ["claude-desktop", p.desktop, true, 2],
        ["claude-code", p.claude, true, 2],
        ["cursor", p.cursor, true, 2],
        ["cursor-project", p.cursorProject, true, 2],
        ["project", p.project, true, 2],
        ["code-executor", p.own, true, 2],
        ["env", p.envFile, true, 2],
        ["cli", p.cli1, true, 2],
        ["cli", p.cli2, true, 2],
      ],
    );

    // Take the winning file away, one at a time: the next one down wins.
    for (const [index, [file, command]] of order.entries()) {
      const config = await discover(dirs, env, { configPaths });
      const shared = server(config, "shared");
      assertEquals([shared.command, shared.source], [command, file], `step ${index}`);
      if (file === p.envFile || file.startsWith(join(dirs.root, "cli-"))) {
        // Explicit files must exist, so blank them out instead of removing them.
        await Deno.writeTextFile(file, "{}");
      } else {
        await Deno.remove(file);
      }
    }
    const none = await discover(dirs, env, { configPaths });
    assertEquals(none.servers, []);
    assertEquals(
      none.sources.map((s) => s.found),
      [false, false, false, false, false, false, true, true, true],
    );
  });
});

Deno.test("discoverUpstreams() replaces a whole entry rather than merging its keys", async () => {
  await withUserDirs("ce-upstream-", async (dirs) => {
    const p = paths(dirs);
    await write(
      p.cursor,
      JSON.stringify({
        mcpServers: { github: { command: "gh-mcp", args: ["--old"], env: { A: "1" }, cwd: "/x" } },
      }),
    );
    await write(p.project, JSON.stringify({ mcpServers: { github: { command: "gh-mcp-2" } } }));
    const config = await discover(dirs);
    assertEquals(config.servers, [
      { name: "github", transport: "stdio", command: "gh-mcp-2", source: p.project },
    ]);
  });
});

Deno.test("discoverUpstreams() lets the ~/.claude.json project entry beat its top level", async () => {
  await withUserDirs("ce-upstream-", async (dirs) => {
    const p = paths(dirs);
    const other = join(dirs.root, "other-project");
    await write(
      p.claude,
      JSON.stringify(
        {
          mcpServers: { shared: { command: "top" }, "top-only": { command: "top-only" } },
          projects: {
            [dirs.project]: {
              allowedTools: [],
              mcpServers: { shared: { command: "project" }, "project-only": { command: "p" } },
            },
            [other]: { mcpServers: { "other-only": { command: "other" } } },
          },
        },
        null,
        2,
      ),
    );
    const config = await discover(dirs);
    assertEquals(config.servers.map((s) => s.name), ["project-only", "shared", "top-only"]);
    assertEquals(server(config, "shared").command, "project");
    assertEquals(server(config, "shared").source, p.claude);
    assertEquals(config.sources[1].servers, 3);
  });
});

Deno.test("discoverUpstreams() finds the ~/.claude.json project entry through a symlinked cwd", async () => {
  await withUserDirs("ce-upstream-", async (dirs) => {
    const p = paths(dirs);
    const link = join(dirs.root, "link-to-project");
    await Deno.symlink(dirs.project, link);
    await write(
      p.claude,
      JSON.stringify({
        mcpServers: { shared: { command: "top" } },
        projects: { [dirs.project]: { mcpServers: { shared: { command: "by-realpath" } } } },
      }),
    );
    const viaLink = await discoverUpstreams({ env: { HOME: dirs.home }, cwd: link, os: "linux" });
    assertEquals(server(viaLink, "shared").command, "by-realpath");

    // An entry under the exact spelling of the cwd wins over the realpath's entry.
    await write(
      p.claude,
      JSON.stringify({
        projects: {
          [dirs.project]: { mcpServers: { shared: { command: "by-realpath" } } },
          [link]: { mcpServers: { shared: { command: "by-link" } } },
        },
      }),
    );
    const exact = await discoverUpstreams({ env: { HOME: dirs.home }, cwd: link, os: "linux" });
    assertEquals(server(exact, "shared").command, "by-link");
  });
});

Deno.test("discoverUpstreams() reads JSONC with comments, trailing commas and unknown keys", async () => {
  await withUserDirs("ce-upstream-", async (dirs) => {
    const p = paths(dirs);
    await write(
      p.project,
      `// Project servers, checked in
{
  "$schema": "https://example.com/mcp.schema.json",
  "mcpServers": {
    /* the filesystem server */
    "filesystem": {
      "command": "npx",
      "args": [
        "-y",
        "@modelcontextprotocol/server-filesystem",
        "/srv/data", // trailing comma next
      ],
      "autoApprove": ["read_file"],
      "alwaysAllow": [],
      "description": "Files",
    },
  },
}
`,
    );
    const config = await discover(dirs);
    assertEquals(config.broken, []);
    assertEquals(config.servers, [{
      name: "filesystem",
      transport: "stdio",
      command: "npx",
      args: ["-y", "@modelcontextprotocol/server-filesystem", "/srv/data"],
      source: p.project,
    }]);
    assertEquals(config.sources.find((s) => s.kind === "project")?.servers, 1);
  });
});

Deno.test("discoverUpstreams() keeps server names verbatim and sorts servers by name", async () => {
  await withUserDirs("ce-upstream-", async (dirs) => {
    const p = paths(dirs);
    await write(
      p.project,
      JSON.stringify({
        mcpServers: {
          "zeta.tools": { command: "z" },
          "Alpha Server": { command: "a" },
          "my-server_2": { url: "https://example.com/mcp" },
        },
      }),
    );
    const config = await discover(dirs);
    assertEquals(config.servers.map((s) => s.name), ["Alpha Server", "my-server_2", "zeta.tools"]);
  });
});

Deno.test("discoverUpstreams() expands ${VAR} and ${VAR:-default} in every expandable field", async () => {
  await withUserDirs("ce-upstream-", async (dirs) => {
    const p = paths(dirs);
    await write(
      p.project,
      `{
  "mcpServers": {
    "local": {
      "command": "\${TOOLS}/bin/server",
      "args": ["--root", "\${HOME}/data", "--mode=\${MODE:-fast}", "cost: $5", "\${EMPTY:-fallback}"],
      "env": { "GITHUB_TOKEN": "\${GITHUB_TOKEN}", "LEVEL": "\${LEVEL:-info}", "RAW": "a$b" },
      "cwd": "\${HOME}/work",
    },
    "remote": {
      "type": "http",
      "url": "https://\${API_HOST:-api.example.com}/mcp?team=\${TEAM}",
      "headers": { "Authorization": "Bearer \${API_TOKEN}", "X-Empty": "\${EMPTY}" },
    },
  },
}`,
    );
    const config = await discover(dirs, {
      TOOLS: "/opt/tools",
      GITHUB_TOKEN: "ghp_secret",
      TEAM: "core",
      API_TOKEN: "tok123",
      EMPTY: "",
    });
    assertEquals(config.broken, []);
    assertEquals(server(config, "local"), {
      name: "local",
      transport: "stdio",
      command: "/opt/tools/bin/server",
      args: ["--root", `${dirs.home}/data`, "--mode=fast", "cost: $5", "fallback"],
      env: { GITHUB_TOKEN: "ghp_secret", LEVEL: "info", RAW: "a$b" },
      cwd: `${dirs.home}/work`,
      source: p.project,
    });
    assertEquals(server(config, "remote"), {
      name: "remote",
      transport: "http",
      url: "https://api.example.com/mcp?team=core",
      headers: { Authorization: "Bearer tok123", "X-Empty": "" },
      source: p.project,
    });
  });
});

Deno.test("expandVars() expands variables and throws UpstreamConfigError naming the place", () => {
  const env = { A: "1", EMPTY: "" };
  assertEquals(expandVars("x${A}y${B:-2}z", env, "here"), "x1y2z");
  assertEquals(expandVars("${EMPTY:-d}|${EMPTY}", env, "here"), "d|");
  assertEquals(expandVars("$A ${} ${1X} $ {A}", env, "here"), "$A ${} ${1X} $ {A}");
  assertEquals(expandVars("${B:-}", env, "here"), "");
  const { message } = assertThrows(
    () => expandVars("${MISSING}", env, '"args[0]" of MCP server "s" in /f.json'),
    UpstreamConfigError,
  );
  assertEquals(
    message,
    'Cannot expand ${MISSING} in "args[0]" of MCP server "s" in /f.json: the variable is not set; set it or write ${MISSING:-default}',
  );
});

Deno.test("discoverUpstreams() marks a server broken when a variable without default is unset", async () => {
  await withUserDirs("ce-upstream-", async (dirs) => {
    const p = paths(dirs);
    await write(
      p.project,
      JSON.stringify({
        mcpServers: {
          github: {
            command: "npx",
            args: ["-y", "@modelcontextprotocol/server-github"],
            env: { GITHUB_TOKEN: "${GITHUB_TOKEN}" },
          },
          remote: { type: "sse", url: "https://example.com/sse?key=${REMOTE_KEY}" },
          fine: { command: "ok" },
        },
      }),
    );
    const config = await discover(dirs);
    assertEquals(config.servers.map((s) => s.name), ["fine"]);
    assertEquals(config.broken.map((b) => [b.name, b.source]), [
      ["github", p.project],
      ["remote", p.project],
    ]);
    assertEquals(
      brokenError(config, "github"),
      `Cannot expand \${GITHUB_TOKEN} in "env.GITHUB_TOKEN" of MCP server "github" in ${p.project}: the variable is not set; set it or write \${GITHUB_TOKEN:-default}`,
    );
    assertMatch(brokenError(config, "remote"), /\$\{REMOTE_KEY\} in "url" of MCP server "remote"/);
    assertEquals(config.sources.find((s) => s.kind === "project")?.servers, 1);
  });
});

Deno.test("discoverUpstreams() leaves out disabled entries, also over earlier sources", async () => {
  await withUserDirs("ce-upstream-", async (dirs) => {
    const p = paths(dirs);
    await write(
      p.cursor,
      JSON.stringify({ mcpServers: { github: { command: "gh" }, slack: { command: "slack" } } }),
    );
    await write(
      p.project,
      `{ "mcpServers": {
        "github": { "command": "gh", "disabled": true },
        "off": { "command": "\${UNSET}", "args": 42, "disabled": true },
        "on": { "command": "on", "disabled": false },
      } }`,
    );
    const config = await discover(dirs);
    assertEquals(config.servers.map((s) => s.name), ["on", "slack"]);
    assertEquals(config.broken, []);
    assertEquals(config.skipped, [
      { name: "github", source: p.project, reason: "disabled" },
      { name: "off", source: p.project, reason: "disabled" },
    ]);
  });
});

Deno.test("discoverUpstreams() skips its own entry by name and by command", async () => {
  await withUserDirs("ce-upstream-", async (dirs) => {
    const p = paths(dirs);
    const main = fileURLToPath(new URL("../main.ts", import.meta.url));
    const repo = dirname(main);
    await write(
      p.project,
      JSON.stringify({
        mcpServers: {
          "Code-Executor": { command: "deno", args: ["run", "-A", "/anywhere/main.ts"] },
          "via-npx": { command: "npx", args: ["-y", "code-executor-mcp"] },
          "via-binary": { command: "/usr/local/bin/code-executor" },
          "via-path": { command: "deno", args: ["run", "-A", "/src/code-executor/main.ts"] },
          "via-var": { command: "deno", args: ["run", "${CE_HOME:-/opt/code-executor}/main.ts"] },
          "via-main": { command: "deno", args: ["run", "-A", main, "serve"] },
          "via-relative": { command: "deno", args: ["run", "-A", "main.ts"], cwd: repo },
          "via-file-url": {
            command: "deno",
            args: ["run", new URL("../main.ts", import.meta.url)],
          },
          "other-main": { command: "deno", args: ["run", "-A", join(dirs.root, "main.ts")] },
          "code-executor-ish-name": { command: "python", args: ["server.py"] },
        },
      }),
    );
    const config = await discover(dirs);
    assertEquals(config.servers.map((s) => s.name), ["code-executor-ish-name", "other-main"]);
    assertEquals(config.broken, []);
    assertEquals(
      config.skipped?.map((s) => [s.name, s.reason]),
      [
        ["Code-Executor", "self"],
        ["via-binary", "self"],
        ["via-file-url", "self"],
        ["via-main", "self"],
        ["via-npx", "self"],
        ["via-path", "self"],
        ["via-relative", "self"],
        ["via-var", "self"],
      ],
    );
    assertEquals(config.sources.find((s) => s.kind === "project")?.servers, 2);
  });
});

Deno.test("discoverUpstreams() reads Claude Desktop's config where each OS keeps it", async () => {
  await withUserDirs("ce-upstream-", async (dirs) => {
    const entry = (command: string) => JSON.stringify({ mcpServers: { desk: { command } } });
    const mac = await write(
      join(dirs.home, "Library", "Application Support", "Claude", "claude_desktop_config.json"),
      entry("mac"),
    );
    const appData = join(dirs.root, "AppData", "Roaming");
    const windows = await write(
      join(appData, "Claude", "claude_desktop_config.json"),
      entry("win"),
    );
    const xdg = join(dirs.root, "xdg");
    const linux = await write(join(xdg, "Claude", "claude_desktop_config.json"), entry("linux"));

    const onMac = await discover(dirs, {}, { os: "darwin" });
    assertEquals([server(onMac, "desk").command, onMac.sources[0].path], ["mac", mac]);

    const onWindows = await discoverUpstreams({
      env: { USERPROFILE: dirs.home, APPDATA: appData },
      cwd: dirs.project,
      os: "windows",
    });
    assertEquals([server(onWindows, "desk").command, onWindows.sources[0].path], ["win", windows]);
    assertEquals(onWindows.sources[1].path, join(dirs.home, ".claude.json"));

    const onLinux = await discover(dirs, { XDG_CONFIG_HOME: xdg });
    assertEquals([server(onLinux, "desk").command, onLinux.sources[0].path], ["linux", linux]);

    const defaultLinux = await discover(dirs);
    assertEquals(defaultLinux.sources[0], {
      path: join(dirs.home, ".config", "Claude", "claude_desktop_config.json"),
      kind: "claude-desktop",
      found: false,
      servers: 0,
    });
  });
});

Deno.test("discoverUpstreams() leaves VS Code's and Windsurf's files to setup", async () => {
  await withUserDirs("ce-upstream-", async (dirs) => {
    const servers = (name: string) => JSON.stringify({ servers: { [name]: { command: name } } });
    await write(join(dirs.home, ".config", "Code", "User", "mcp.json"), servers("vscode-user"));
    await write(join(dirs.project, ".vscode", "mcp.json"), servers("vscode-project"));
    await write(
      join(dirs.home, ".codeium", "windsurf", "mcp_config.json"),
      JSON.stringify({ mcpServers: { windsurf: { command: "w" } } }),
    );
    await write(
      paths(dirs).cursorProject,
      '{ "mcpServers": { "cursor-project": { "command": "c" } } }',
    );
    const config = await discover(dirs);
    assertEquals(config.servers.map((s) => s.name), ["cursor-project"]);
    assertEquals(
      config.sources.map((s) => s.kind),
      ["claude-desktop", "claude-code", "cursor", "cursor-project", "project", "code-executor"],
    );
  });
});

Deno.test("discoverUpstreams() records a malformed client file and still uses the others", async () => {
  await withUserDirs("ce-upstream-", async (dirs) => {
    const p = paths(dirs);
    await write(p.desktop, '{ "mcpServers": { "desk": { "command": "d" } } }');
    await write(p.claude, '{ "mcpServers": { "broken-json": { "command": "x" } ');
    await write(p.cursor, '{ "mcpServers": ["not", "an", "object"] }');
    await write(p.project, '[{ "mcpServers": {} }]');
    const config = await discover(dirs);
    assertEquals(config.servers.map((s) => s.name), ["desk"]);
    const [desktop, claude, cursor, cursorProject, project] = config.sources;
    assertEquals([desktop.found, desktop.servers, desktop.error], [true, 1, undefined]);
    assertEquals([cursorProject.kind, cursorProject.found], ["cursor-project", false]);
    assertEquals([claude.found, claude.servers], [true, 0]);
    assertMatch(claude.error ?? "", new RegExp(`^Cannot parse ${escapeRegExp(p.claude)}:1:\\d+: `));
    assertEquals(
      cursor.error,
      `Invalid MCP config file ${p.cursor}: "mcpServers" must be an object`,
    );
    assertEquals(
      project.error,
      `Invalid MCP config file ${p.project}: the top level must be an object`,
    );
  });
});

Deno.test("discoverUpstreams() throws naming an explicit file that is malformed or missing", async () => {
  await withUserDirs("ce-upstream-", async (dirs) => {
    const p = paths(dirs);
    await write(p.project, '{ "mcpServers": { "fine": { "command": "ok" } } }');
    await write(p.cli1, '{ "mcpServers": { "a": { "command": "x" }, } // unclosed');
    const { message: malformed } = await assertRejects(
      () => discover(dirs, {}, { configPaths: [p.cli1] }),
      UpstreamConfigError,
    );
    assertMatch(malformed, new RegExp(`^Cannot parse ${escapeRegExp(p.cli1)}:1:\\d+: `));

    await write(p.cli2, '{ "mcpServers": "github" }');
    const { message: notObject } = await assertRejects(
      () => discover(dirs, {}, { configPaths: [p.cli2] }),
      UpstreamConfigError,
    );
    assertEquals(notObject, `Invalid MCP config file ${p.cli2}: "mcpServers" must be an object`);

    const missing = join(dirs.root, "nope.json");
    const { message: notFound } = await assertRejects(
      () => discover(dirs, {}, { configPaths: [missing] }),
      UpstreamConfigError,
    );
    assertEquals(notFound, `Cannot read MCP config file ${missing}: the file does not exist`);

    await write(p.envFile, "{ not json");
    const { message: fromEnv } = await assertRejects(
      () => discover(dirs, { MCP_CONFIG_PATH: p.envFile }),
      UpstreamConfigError,
    );
    assertMatch(fromEnv, new RegExp(`^Cannot parse ${escapeRegExp(p.envFile)}:1:\\d+: `));
  });
});

Deno.test("discoverUpstreams() reports invalid field types as broken, naming the key", async () => {
  await withUserDirs("ce-upstream-", async (dirs) => {
    const p = paths(dirs);
    const entries: Record<string, [unknown, string]> = {
      "args-not-array": [{ command: "x", args: "--flag" }, '"args" must be an array of strings'],
      "args-number": [{ command: "x", args: ["a", 1] }, '"args" must be an array of strings'],
      "command-number": [{ command: 42 }, '"command" must be a non-empty string'],
      "command-missing": [{ type: "stdio", args: [] }, '"command" must be a non-empty string'],
      "env-number": [{ command: "x", env: { PORT: 8080 } }, '"env.PORT" must be a string'],
      "env-array": [{ command: "x", env: ["A=1"] }, '"env" must be an object of strings'],
      "cwd-number": [{ command: "x", cwd: 1 }, '"cwd" must be a string'],
      "url-garbage": [{ type: "http", url: "not a url" }, '"url" must be an absolute http or'],
      "url-ftp": [{ url: "ftp://example.com/" }, '"url" must be an http or https URL, not ftp:'],
      "url-missing": [{ type: "sse" }, '"url" must be an http or https URL'],
      "headers-number": [
        { type: "http", url: "https://e.com", headers: { "X-N": 1 } },
        '"headers.X-N" must be a string',
      ],
      "type-unknown": [{ type: "websocket", url: "wss://e.com" }, '"type" must be "stdio"'],
      "timeout-negative": [{ command: "x", timeout: -1 }, '"timeout" must be a positive number'],
      "timeoutms-string": [{ command: "x", timeoutMs: "5s" }, '"timeoutMs" must be a positive'],
      "neither": [{ args: ["x"] }, 'it needs "command" (stdio) or "url" (http, sse)'],
      "not-object": ["npx server", "the entry must be an object"],
    };
    const mcpServers = Object.fromEntries(Object.entries(entries).map(([k, [v]]) => [k, v]));
    mcpServers.good = { command: "good" };
    await write(p.project, JSON.stringify({ mcpServers }, null, 2));
    const config = await discover(dirs);
    assertEquals(config.servers.map((s) => s.name), ["good"]);
    assertEquals(config.broken.map((b) => b.name), Object.keys(entries).sort());
    for (const [name, [, detail]] of Object.entries(entries)) {
      const error = brokenError(config, name);
      const prefix = `Invalid MCP server "${name}" in ${p.project}: `;
      assert(error.startsWith(prefix + detail), `${name}: ${error}`);
    }
  });
});

Deno.test("discoverUpstreams() names the ~/.claude.json project in a broken entry's error", async () => {
  await withUserDirs("ce-upstream-", async (dirs) => {
    const p = paths(dirs);
    await write(
      p.claude,
      JSON.stringify({
        mcpServers: { github: { command: "gh", args: "oops" } },
        projects: { [dirs.project]: { mcpServers: { local: { command: "x", env: { A: 1 } } } } },
      }),
    );
    const config = await discover(dirs);
    assertEquals(
      brokenError(config, "github"),
      `Invalid MCP server "github" in ${p.claude}: "args" must be an array of strings`,
    );
    assertEquals(
      brokenError(config, "local"),
      `Invalid MCP server "local" in ${p.claude} (projects["${dirs.project}"]): "env.A" must be a string`,
    );
    assertEquals(config.broken.map((b) => b.source), [p.claude, p.claude]);
  });
});

Deno.test("discoverUpstreams() detects http and sse servers and normalises type", async () => {
  await withUserDirs("ce-upstream-", async (dirs) => {
    const p = paths(dirs);
    await write(
      p.project,
      JSON.stringify({
        mcpServers: {
          "url-only": { url: "https://mcp.example.com/mcp" },
          "streamable-http": { type: "streamable-http", url: "https://a.example.com/mcp" },
          "streamable-camel": { type: "streamableHttp", url: "http://localhost:3000/mcp" },
          "http": { type: "http", url: "https://b.example.com/mcp", timeout: 5000 },
          "sse": { type: "sse", url: "https://c.example.com/sse", headers: { "X-Key": "k" } },
          "stdio-explicit": { type: "stdio", command: "srv", timeoutMs: 1500, timeout: 9 },
          "command-only": { command: "srv" },
        },
      }),
    );
    const config = await discover(dirs);
    assertEquals(config.broken, []);
    const transports = Object.fromEntries(config.servers.map((s) => [s.name, s.transport]));
    assertEquals(transports, {
      "command-only": "stdio",
      "http": "http",
      "sse": "sse",
      "stdio-explicit": "stdio",
      "streamable-camel": "http",
      "streamable-http": "http",
      "url-only": "http",
    });
    assertEquals(server(config, "http").timeoutMs, 5000);
    assertEquals(server(config, "stdio-explicit").timeoutMs, 1500);
    assertEquals(server(config, "sse"), {
      name: "sse",
      transport: "sse",
      url: "https://c.example.com/sse",
      headers: { "X-Key": "k" },
      source: p.project,
    });
  });
});

Deno.test("discoverUpstreams() reads only explicit files when includeClientConfigs is false", async () => {
  await withUserDirs("ce-upstream-", async (dirs) => {
    const p = paths(dirs);
    await write(p.desktop, '{ "mcpServers": { "desk": { "command": "d" } } }');
    await write(p.claude, '{ "mcpServers": { "claude": { "command": "c" } } }');
    await write(p.cursor, '{ "mcpServers": { "cursor": { "command": "c" } } }');
    await write(p.project, '{ "mcpServers": { "project": { "command": "p" } } }');
    await write(p.envFile, '{ "mcpServers": { "env": { "command": "e" } } }');
    await write(p.cli1, '{ "mcpServers": { "cli": { "command": "c" } } }');
    const config = await discover(
      dirs,
      { MCP_CONFIG_PATH: p.envFile },
      { includeClientConfigs: false, configPaths: [p.cli1] },
    );
    assertEquals(config.servers.map((s) => s.name), ["cli", "env"]);
    assertEquals(config.sources.map((s) => s.kind), ["env", "cli"]);
  });
});

Deno.test("discoverUpstreams() changes hash when an entry changes, not for order or comments", async () => {
  await withUserDirs("ce-upstream-", async (dirs) => {
    const p = paths(dirs);
    await write(
      p.project,
      `{ "mcpServers": {
        "a": { "command": "a", "args": ["1", "2"], "env": { "X": "1", "Y": "2" } },
        "b": { "url": "https://b.example.com/mcp" },
      } }`,
    );
    const first = await discover(dirs);
    assertMatch(first.hash, /^[0-9a-f]{64}$/);

    await write(
      p.project,
      `// reordered, with comments
{
  "mcpServers": {
    "b": { "type": "http", "url": "https://b.example.com/mcp", "note": "ignored key" },
    /* a */ "a": { "env": { "Y": "2", "X": "1" }, "args": ["1", "2"], "command": "a" },
  },
}`,
    );
    const reordered = await discover(dirs);
    assertEquals(reordered.hash, first.hash);

    // The same servers from another file hash the same: `source` is not part of the hash.
    await Deno.remove(p.project);
    await write(
      p.cursor,
      '{ "mcpServers": { "a": { "command": "a", "args": ["1", "2"], ' +
        '"env": { "X": "1", "Y": "2" } }, "b": { "url": "https://b.example.com/mcp" } } }',
    );
    const moved = await discover(dirs);
    assertEquals(moved.hash, first.hash);

    await write(
      p.cursor,
      '{ "mcpServers": { "a": { "command": "a", "args": ["2", "1"], ' +
        '"env": { "X": "1", "Y": "2" } }, "b": { "url": "https://b.example.com/mcp" } } }',
    );
    const argsSwapped = await discover(dirs);
    assert(argsSwapped.hash !== first.hash, "args order is part of the config");

    const otherVar = await discover(dirs, { UNUSED: "1" });
    assertEquals(otherVar.hash, argsSwapped.hash);

    await write(p.cursor, '{ "mcpServers": { "a": { "command": "a", "env": { "T": "${T}" } } } }');
    const withT1 = await discover(dirs, { T: "one" });
    const withT2 = await discover(dirs, { T: "two" });
    assert(withT1.hash !== withT2.hash, "the hash covers expanded values");

    await Deno.remove(p.cursor);
    const empty = await discover(dirs);
    assert(empty.hash !== first.hash);
    assertMatch(empty.hash, /^[0-9a-f]{64}$/);
  });
});

Deno.test("discoverUpstreams() takes HOME from USERPROFILE and copes without either", async () => {
  await withUserDirs("ce-upstream-", async (dirs) => {
    const p = paths(dirs);
    await write(p.claude, '{ "mcpServers": { "claude": { "command": "c" } } }');
    await write(p.project, '{ "mcpServers": { "project": { "command": "p" } } }');
    const viaProfile = await discoverUpstreams({
      env: { USERPROFILE: dirs.home },
      cwd: dirs.project,
      os: "linux",
    });
    assertEquals(viaProfile.servers.map((s) => s.name), ["claude", "project"]);

    const homeless = await discoverUpstreams({ env: {}, cwd: dirs.project, os: "linux" });
    assertEquals(homeless.servers.map((s) => s.name), ["project"]);
    assertEquals(homeless.sources.map((s) => s.kind), ["cursor-project", "project"]);
  });
});

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
