/**
 * Unit tests of `planSetup()`: client configs written to a temporary HOME and project, scanned
 * as `setup` scans them, then planned. Planning writes nothing; each test checks that too.
 *
 * @module
 */
import { join } from "node:path";
import { parse as parseJsonc } from "jsonc-parser";
import { assert, assertEquals, assertMatch, assertThrows } from "./_assert.ts";
import { type UserDirs, withUserDirs, writeFileWithParents as write } from "./_fs.ts";
import {
  clientConfigs,
  type ClientId,
  scanClientConfig,
  type ScannedConfig,
} from "../src/config/client_configs.ts";
import { tildePath } from "../src/config/paths.ts";
import { defaultClient, planSetup, type PlanSetupOptions } from "../src/cli/setup_plan.ts";
import { formatPlan } from "../src/cli/setup_report.ts";

interface Dirs extends UserDirs {
  /** The environment the scan and the plan see: HOME only. */
  env: Record<string, string>;
}

const LAUNCH = {
  serve: { command: "/opt/deno", args: ["run", "-A", "/src/main.ts", "serve"] },
  sync: { command: "/opt/deno", args: ["run", "-A", "/src/main.ts", "sync"] },
};

function withDirs(fn: (dirs: Dirs) => Promise<void>): Promise<void> {
  return withUserDirs("ce-setup-plan-", (dirs) => fn({ ...dirs, env: { HOME: dirs.home } }));
}

async function scan(dirs: Dirs): Promise<ScannedConfig[]> {
  const configs = clientConfigs({ env: dirs.env, cwd: dirs.project, os: "linux" });
  return await Promise.all(configs.map((c) => scanClientConfig(c, dirs)));
}

/** Plans, and checks that planning left every file as it was. */
async function plan(
  dirs: Dirs,
  client: ClientId,
  options: Partial<PlanSetupOptions> = {},
) {
  const before = await listFiles(dirs.root);
  const planned = planSetup(await scan(dirs), {
    client,
    env: dirs.env,
    os: "linux",
    launch: LAUNCH,
    ...options,
  });
  assertEquals(await listFiles(dirs.root), before, "planning writes nothing");
  return planned;
}

async function listFiles(dir: string): Promise<Map<string, string>> {
  const files = new Map<string, string>();
  for await (const entry of Deno.readDir(dir)) {
    const path = join(dir, entry.name);
    if (entry.isDirectory) { for (const [p, t] of await listFiles(path)) files.set(p, t); }
    else files.set(path, await Deno.readTextFile(path));
  }
  return files;
}

function parse(text: string | undefined): Record<string, Record<string, unknown>> {
  assert(text !== undefined, "a text");
  return parseJsonc(text, [], { allowTrailingComma: true });
}

const SERVE_ENTRY = { type: "stdio", ...LAUNCH.serve };

const CLAUDE = `{
  "numStartups": 4,
  // mine
  "mcpServers": {
    "github": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-github"],
      "env": { "GITHUB_PERSONAL_ACCESS_TOKEN": "\${GITHUB_TOKEN}" },
    },
    "sentry": { "type": "http", "url": "https://mcp.sentry.dev/mcp" },
  },
}
`;

Deno.test("planSetup() moves servers with ${VAR} references verbatim", async () => {
  await withDirs(async (dirs) => {
    const claude = await write(join(dirs.home, ".claude.json"), CLAUDE);
    const planned = await plan(dirs, "claude-code", { move: true });
    assertEquals(planned.moving.map((s) => s.name), ["github", "sentry"]);
    assertEquals([planned.kept, planned.staying], [[], []]);
    assertEquals(planned.entry.action, "add");
    assertEquals(planned.entry.name, "code-executor");

    const own = join(dirs.home, ".config", "code-executor", "mcp.json");
    assertEquals(planned.files.map((f) => [f.path, f.before === undefined, f.mode]), [
      [own, true, 0o600],
      [claude, false, 0o600],
    ]);
    const [ownFile, claudeFile] = planned.files;
    // The reference moves as written: it is expanded where Code Executor runs.
    assertEquals(parse(ownFile.after).mcpServers.github, {
      command: "npx",
      args: ["-y", "@modelcontextprotocol/server-github"],
      env: { GITHUB_PERSONAL_ACCESS_TOKEN: "${GITHUB_TOKEN}" },
    });
    assertEquals(Object.keys(parse(ownFile.after).mcpServers), ["github", "sentry"]);
    assertMatch(ownFile.after, /^\/\/ MCP servers that Code Executor connects to/);
    assertEquals(parse(claudeFile.after).mcpServers, { "code-executor": SERVE_ENTRY });
    assert(claudeFile.after.includes("// mine"), claudeFile.after);
    assertEquals(parse(claudeFile.after).numStartups as unknown, 4);
  });
});

Deno.test("planSetup() keeps servers with literal secrets, client variables or disabled, and says why", async () => {
  await withDirs(async (dirs) => {
    await write(
      join(dirs.project, ".vscode", "mcp.json"),
      `{
  "servers": {
    "perplexity": { "command": "npx", "env": { "KEY": "\${input:perplexity-key}" } },
    "here": { "command": "node", "args": ["\${workspaceFolder}/server.js"] },
    "slack": { "command": "npx", "env": { "SLACK_BOT_TOKEN": "xoxb-2215469912-8812734512-Zq3PkzE0yEhVxtAqQ1Rm" } },
    "off": { "command": "npx", "disabled": true },
    "bad": { "command": 42 },
    "fetch": { "type": "stdio", "command": "uvx", "args": ["mcp-server-fetch"] },
  },
}
`,
    );
    const planned = await plan(dirs, "vscode", { move: true });
    assertEquals(planned.moving.map((s) => s.name), ["fetch"]);
    assertEquals(
      planned.staying.map((s) => [s.name, s.reason]),
      [
        ["perplexity", "client-variable"],
        ["here", "client-variable"],
        ["slack", "secret"],
        ["off", "disabled"],
        ["bad", "broken"],
      ],
    );
    const message = (name: string) => planned.staying.find((s) => s.name === name)?.message ?? "";
    assertMatch(
      message("perplexity"),
      /\$\{input:perplexity-key\}, which only VS Code can fill in/,
    );
    assertMatch(message("slack"), /write "\$\{SLACK_BOT_TOKEN\}" there instead/);
    assertMatch(message("bad"), /"command" must be a non-empty string/);
    // The secret stays in the client's file only.
    assert(!planned.files[0].after.includes("xoxb-"), planned.files[0].after);
    const servers = parse(planned.files[1].after).servers;
    assertEquals(Object.keys(servers).sort(), [
      "bad",
      "code-executor",
      "here",
      "off",
      "perplexity",
      "slack",
    ]);
  });
});

Deno.test("planSetup() without move keeps the movable servers and changes only the entry", async () => {
  await withDirs(async (dirs) => {
    const claude = await write(join(dirs.home, ".claude.json"), CLAUDE);
    const planned = await plan(dirs, "claude-code");
    assertEquals(planned.moving, []);
    assertEquals(planned.kept.map((s) => s.name), ["github", "sentry"]);
    assertEquals(planned.files.map((f) => f.path), [claude]);
    assertEquals(Object.keys(parse(planned.files[0].after).mcpServers), [
      "code-executor",
      "github",
      "sentry",
    ]);
  });
});

Deno.test("planSetup() plans no file when the entry is there and nothing moves", async () => {
  await withDirs(async (dirs) => {
    await write(
      join(dirs.home, ".cursor", "mcp.json"),
      JSON.stringify({ mcpServers: { "code-executor": LAUNCH.serve } }),
    );
    const planned = await plan(dirs, "cursor", { move: true });
    assertEquals(planned.entry.action, "unchanged");
    assertEquals(planned.files, []);
  });
});

Deno.test("planSetup() updates a stale entry under its own name and keeps keys the user added", async () => {
  await withDirs(async (dirs) => {
    await write(
      join(dirs.home, ".claude.json"),
      `{ "mcpServers": { "Code-Executor": { "type": "stdio", "command": "deno", "args": ["run", "/old/code-executor/main.ts"], "env": { "A": "1" } } } }`,
    );
    const planned = await plan(dirs, "claude-code");
    assertEquals([planned.entry.name, planned.entry.action], ["Code-Executor", "update"]);
    assertEquals(parse(planned.files[0].after).mcpServers, {
      "Code-Executor": { ...SERVE_ENTRY, env: { A: "1" } },
    });
  });
});

Deno.test("planSetup() leaves a server whose name Code Executor's file already uses differently", async () => {
  await withDirs(async (dirs) => {
    await write(join(dirs.home, ".claude.json"), CLAUDE);
    const own = await write(
      join(dirs.home, ".config", "code-executor", "mcp.json"),
      `{ "mcpServers": { "github": { "command": "gh-mcp" }, "sentry": { "type": "http", "url": "https://mcp.sentry.dev/mcp" } } }`,
    );
    const planned = await plan(dirs, "claude-code", { move: true });
    assertEquals(planned.staying.map((s) => [s.name, s.reason]), [["github", "conflict"]]);
    assertMatch(planned.staying[0].message, /already has a different "github"/);
    // The same entry is there already: it leaves the client, and the own file stays as it is.
    assertEquals(planned.moving.map((s) => s.name), ["sentry"]);
    assertEquals(planned.files.map((f) => f.path), [join(dirs.home, ".claude.json")]);
    assert(!planned.files.some((f) => f.path === own), "the own file is unchanged");
  });
});

Deno.test("planSetup() moves nothing while Code Executor's own file cannot be parsed", async () => {
  await withDirs(async (dirs) => {
    await write(join(dirs.home, ".claude.json"), CLAUDE);
    await write(join(dirs.home, ".config", "code-executor", "mcp.json"), "{ nope");
    const planned = await plan(dirs, "claude-code", { move: true });
    assertEquals(planned.moving, []);
    assertEquals(planned.staying.map((s) => s.reason), ["own-unreadable", "own-unreadable"]);
    assertMatch(planned.staying[0].message, /~\/\.config\/code-executor\/mcp\.json cannot be read/);
  });
});

Deno.test("planSetup() throws when the client's config cannot be parsed, naming the fix", async () => {
  await withDirs(async (dirs) => {
    await write(join(dirs.home, ".cursor", "mcp.json"), "{ broken");
    const scans = await scan(dirs);
    const { message } = assertThrows(
      () => planSetup(scans, { client: "cursor", env: dirs.env, os: "linux", launch: LAUNCH }),
      TypeError,
    );
    assertMatch(
      message,
      /^Cannot set up Cursor until its config file is fixed: Cannot parse .*mcp\.json:1:3: /,
    );
  });
});

Deno.test("planSetup() creates a missing config with the entry, private unless it is a project's", async () => {
  await withDirs(async (dirs) => {
    const user = await plan(dirs, "windsurf");
    assertEquals(user.files.map((f) => [f.path, f.before, f.mode]), [
      [join(dirs.home, ".codeium", "windsurf", "mcp_config.json"), undefined, 0o600],
    ]);
    assertEquals(parse(user.files[0].after), { mcpServers: { "code-executor": LAUNCH.serve } });

    const project = await plan(dirs, "vscode");
    assertEquals(project.files.map((f) => [f.path, f.mode]), [
      [join(dirs.project, ".vscode", "mcp.json"), 0o644],
    ]);
    assertEquals(parse(project.files[0].after), { servers: { "code-executor": SERVE_ENTRY } });
  });
});

Deno.test("planSetup() writes VS Code's user file under servers and Cursor's project file shared", async () => {
  await withDirs(async (dirs) => {
    const user = await plan(dirs, "vscode-user");
    assertEquals(user.files.map((f) => [f.path, f.before, f.mode]), [
      [join(dirs.home, ".config", "Code", "User", "mcp.json"), undefined, 0o600],
    ]);
    assertEquals(parse(user.files[0].after), { servers: { "code-executor": SERVE_ENTRY } });

    const project = await plan(dirs, "cursor-project");
    assertEquals(project.files.map((f) => [f.path, f.mode]), [
      [join(dirs.project, ".cursor", "mcp.json"), 0o644],
    ]);
    assertEquals(parse(project.files[0].after), {
      mcpServers: { "code-executor": LAUNCH.serve },
    });
  });
});

Deno.test("planSetup() moves from VS Code's user file what only VS Code variables keep back", async () => {
  await withDirs(async (dirs) => {
    const path = await write(
      join(dirs.home, ".config", "Code", "User", "mcp.json"),
      `// user servers
{
  "servers": {
    "fetch": { "type": "stdio", "command": "uvx", "args": ["mcp-server-fetch"] },
    "files": { "command": "npx", "args": ["server-filesystem", "\${userHome}/notes"] },
  },
}
`,
    );
    const planned = await plan(dirs, "vscode-user", { move: true });
    assertEquals(planned.moving.map((s) => s.name), ["fetch"]);
    assertEquals(planned.staying.map((s) => [s.name, s.reason]), [["files", "client-variable"]]);
    assertMatch(planned.staying[0].message, /\$\{userHome\}, which only VS Code can fill in/);
    const userFile = planned.files.find((f) => f.path === path);
    assert(userFile, "VS Code's user file changes");
    assert(userFile.after.startsWith("// user servers\n"), userFile.after);
    assertEquals(Object.keys(parse(userFile.after).servers), ["code-executor", "files"]);
  });
});

Deno.test("planSetup() keeps Cursor servers that use ${workspaceFolder}, which only Cursor fills in", async () => {
  await withDirs(async (dirs) => {
    await write(
      join(dirs.project, ".cursor", "mcp.json"),
      `{
  "mcpServers": {
    "local": { "command": "node", "args": ["\${workspaceFolder}/tools/mcp.js"] },
    "home": { "command": "\${userHome}/bin/mcp" },
    "fetch": { "command": "uvx", "args": ["mcp-server-fetch"] },
  },
}
`,
    );
    const planned = await plan(dirs, "cursor-project", { move: true });
    assertEquals(planned.moving.map((s) => s.name), ["fetch"]);
    assertEquals(planned.staying.map((s) => [s.name, s.reason]), [
      ["local", "client-variable"],
      ["home", "client-variable"],
    ]);
    assertMatch(planned.staying[0].message, /\$\{workspaceFolder\}, which only Cursor can fill in/);
  });
});

Deno.test("planSetup() edits the text on disk again, keeping what a client wrote since the scan", async () => {
  await withDirs(async (dirs) => {
    await write(join(dirs.home, ".claude.json"), CLAUDE);
    const planned = await plan(dirs, "claude-code", { move: true });
    const claudeFile = planned.files[1];
    const rewritten = CLAUDE.replace('"numStartups": 4', '"numStartups": 5');
    const after = parse(claudeFile.edit(rewritten));
    assertEquals([after.numStartups as unknown, after.mcpServers], [5, {
      "code-executor": SERVE_ENTRY,
    }]);
  });
});

Deno.test("planSetup() plans the daily sync for the OS and installs it only when asked", async () => {
  await withDirs(async (dirs) => {
    const scans = await scan(dirs);
    const base = { client: "claude-code" as const, env: dirs.env, launch: LAUNCH };
    const linux = planSetup(scans, { ...base, os: "linux" });
    assertEquals(linux.sync.install, false);
    assertEquals(linux.sync.description, "a systemd user timer");
    assertEquals(linux.sync.files.map((f) => f.path), [
      join(dirs.home, ".config", "systemd", "user", "code-executor-sync.service"),
      join(dirs.home, ".config", "systemd", "user", "code-executor-sync.timer"),
    ]);
    assertMatch(linux.sync.files[0].text, /^ExecStart=\/opt\/deno run -A \/src\/main\.ts sync$/m);
    const mac = planSetup(scans, { ...base, os: "darwin", installSync: true });
    assertEquals(mac.sync.install, true);
    assertEquals(mac.sync.commands, [["launchctl", "load", "-w", mac.sync.files[0].path]]);
  });
});

Deno.test("defaultClient() picks the config with the most servers, Code Executor aside", async () => {
  await withDirs(async (dirs) => {
    assertEquals(defaultClient(await scan(dirs)), undefined);
    await write(join(dirs.home, ".claude.json"), CLAUDE);
    await write(
      join(dirs.project, ".cursor", "mcp.json"),
      `// the project's servers
{ "mcpServers": { "a": { "command": "a" }, "b": { "command": "b" }, "c": { "command": "c" } } }`,
    );
    await write(
      join(dirs.home, ".config", "code-executor", "mcp.json"),
      `{ "mcpServers": { "1": { "command": "1" }, "2": { "command": "2" }, "3": { "command": "3" }, "4": { "command": "4" } } }`,
    );
    assertEquals(defaultClient(await scan(dirs)), "cursor-project");
    await write(join(dirs.home, ".cursor", "mcp.json"), "{ broken");
    assertEquals(defaultClient(await scan(dirs)), "cursor-project");
  });
});

Deno.test("formatPlan() says what happens to the entry and to each server, and why", async () => {
  await withDirs(async (dirs) => {
    await write(join(dirs.home, ".claude.json"), CLAUDE);
    await write(
      join(dirs.home, ".config", "code-executor", "mcp.json"),
      `{ "mcpServers": { "github": { "command": "gh-mcp" } } }`,
    );
    const show = (path: string) => tildePath(path, dirs.env);
    const kept = formatPlan(await plan(dirs, "claude-code"), show);
    assertEquals(
      kept,
      `
Plan:
  add "code-executor" to ~/.claude.json: /opt/deno run -A /src/main.ts serve
  keep "sentry" in ~/.claude.json (move them with --move)
  not moving "github": ~/.config/code-executor/mcp.json already has a different "github"
`,
    );
    const moved = formatPlan(await plan(dirs, "claude-code", { move: true }), show);
    assertMatch(moved, /^ {2}move "sentry" to ~\/\.config\/code-executor\/mcp\.json$/m);
  });
});
