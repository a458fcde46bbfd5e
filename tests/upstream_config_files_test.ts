/**
 * `discoverUpstreams()` and the client files: where each OS keeps Claude Desktop's, the files
 * left to setup, malformed and missing files, invalid fields, transports, the hash, and HOME.
 *
 * @module
 */
import { join } from "node:path";
import { assert, assertEquals, assertMatch, assertRejects } from "./_assert.ts";
import { withUserDirs, writeFileWithParents as write } from "./_fs.ts";
import { UpstreamConfigError } from "../src/config/server_entry.ts";
import { discoverUpstreams } from "../src/config/upstream.ts";
import {
  brokenError,
  discover,
  escapeRegExp,
  paths,
  server,
  writeServers,
} from "./_upstream_config.ts";

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
    await writeServers(p.project, {
      "url-only": { url: "https://mcp.example.com/mcp" },
      "streamable-http": { type: "streamable-http", url: "https://a.example.com/mcp" },
      "streamable-camel": { type: "streamableHttp", url: "http://localhost:3000/mcp" },
      "http": { type: "http", url: "https://b.example.com/mcp", timeout: 5000 },
      "sse": { type: "sse", url: "https://c.example.com/sse", headers: { "X-Key": "k" } },
      "stdio-explicit": { type: "stdio", command: "srv", timeoutMs: 1500, timeout: 9 },
      "command-only": { command: "srv" },
    });
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
