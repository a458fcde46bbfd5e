/**
 * `discoverUpstreams()`: which source wins by server name, JSONC, names, variables, disabled
 * entries and its own entry.
 *
 * @module
 */
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { assertEquals, assertMatch, assertThrows } from "./_assert.ts";
import { withUserDirs, writeFileWithParents as write } from "./_fs.ts";
import { expandVars, UpstreamConfigError } from "../src/config/server_entry.ts";
import { discoverUpstreams } from "../src/config/upstream.ts";
import { brokenError, discover, paths, server, stdio, writeServers } from "./_upstream_config.ts";

/** Writes a config with a server `shared` (its command says which source it came from) and one of its own. */
function writeSharedAndOwn(path: string, from: string, own: string): Promise<string> {
  return write(path, `{ "mcpServers": { "shared": ${stdio(from)}, "${own}": ${stdio(own)} } }`);
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
    await writeSharedAndOwn(p.cursor, "from-cursor", "cursor-only");
    await writeSharedAndOwn(p.cursorProject, "from-cursor-project", "cursor-project-only");
    await writeSharedAndOwn(p.project, "from-project", "project-only");
    await writeSharedAndOwn(p.own, "from-own", "own-only");
    await write(
      p.envFile,
      `/* MCP_CONFIG_PATH */ { "mcpServers": { "shared": ${stdio("from-env")}, "env-only": ${
        stdio("env-only")
      }, } }`,
    );
    await writeSharedAndOwn(p.cli1, "from-cli-1", "cli-1-only");
    await writeSharedAndOwn(p.cli2, "from-cli-2", "cli-2-only");

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
    await writeServers(p.project, {
      "zeta.tools": { command: "z" },
      "Alpha Server": { command: "a" },
      "my-server_2": { url: "https://example.com/mcp" },
    });
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
    await writeServers(p.project, {
      github: {
        command: "npx",
        args: ["-y", "@modelcontextprotocol/server-github"],
        env: { GITHUB_TOKEN: "${GITHUB_TOKEN}" },
      },
      remote: { type: "sse", url: "https://example.com/sse?key=${REMOTE_KEY}" },
      fine: { command: "ok" },
    });
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
    await writeServers(p.cursor, { github: { command: "gh" }, slack: { command: "slack" } });
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
    await writeServers(p.project, {
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
      // A server whose data directory holds the name is not Code Executor.
      "notes": {
        command: "npx",
        args: ["-y", "server-filesystem", "/home/u/code-executor-notes"],
      },
    });
    const config = await discover(dirs);
    assertEquals(config.servers.map((s) => s.name), [
      "code-executor-ish-name",
      "notes",
      "other-main",
    ]);
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
    assertEquals(config.sources.find((s) => s.kind === "project")?.servers, 3);
  });
});
