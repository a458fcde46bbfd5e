/**
 * Tests of `setup --http URL`: the entry that connects a client to a running `serve --http`,
 * written into real files under a temporary HOME (the command line in a child process, and
 * `planSetup()` for every client), with the bearer token named by a variable, never written.
 * The entry Claude Code gets is then used, as Claude Code would expand it, against a real
 * `serve --http` with bearer auth.
 *
 * @module
 */
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { dirname, join, relative } from "node:path";
import { parse as parseJsonc } from "jsonc-parser";
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { homeEnv, ROOT } from "./_env.ts";
import { assertNoSandboxes } from "./_proc.ts";
import { runCommand } from "./_command.ts";
import { snapshotFiles, type UserDirs, withTempDir, withUserDirs } from "./_fs.ts";
import { startHttpServer } from "./_http_server.ts";
import { clientConfigs, type ClientId, scanClientConfig } from "../src/config/client_configs.ts";
import { expandVars } from "../src/config/server_entry.ts";
import { planSetup } from "../src/cli/setup_plan.ts";

const URL_ = "http://127.0.0.1:3333/mcp";
const MAIN = join(ROOT, "main.ts");
const CLAUDE_HEADER = { Authorization: "Bearer ${CODE_EXECUTOR_HTTP_TOKEN}" };
const ENV_HEADER = { Authorization: "Bearer ${env:CODE_EXECUTOR_HTTP_TOKEN}" };

/** What each client gets, and under which key of which file (relative to the temp root). */
const EXPECTED: Record<Exclude<ClientId, "claude-desktop">, {
  file: string;
  key: string;
  entry: Record<string, unknown>;
}> = {
  "claude-code": {
    file: "home/.claude.json",
    key: "mcpServers",
    entry: { type: "http", url: URL_, headers: CLAUDE_HEADER },
  },
  "project": {
    file: "project/.mcp.json",
    key: "mcpServers",
    entry: { type: "http", url: URL_, headers: CLAUDE_HEADER },
  },
  "vscode": {
    file: "project/.vscode/mcp.json",
    key: "servers",
    entry: { type: "http", url: URL_, headers: ENV_HEADER },
  },
  "vscode-user": {
    file: "home/.config/Code/User/mcp.json",
    key: "servers",
    entry: { type: "http", url: URL_, headers: ENV_HEADER },
  },
  "cursor": {
    file: "home/.cursor/mcp.json",
    key: "mcpServers",
    entry: { url: URL_, headers: ENV_HEADER },
  },
  "cursor-project": {
    file: "project/.cursor/mcp.json",
    key: "mcpServers",
    entry: { url: URL_, headers: ENV_HEADER },
  },
  "windsurf": {
    file: "home/.codeium/windsurf/mcp_config.json",
    key: "mcpServers",
    entry: { serverUrl: URL_, headers: ENV_HEADER },
  },
};

async function write(path: string, text: string, mode = 0o600): Promise<string> {
  await Deno.mkdir(dirname(path), { recursive: true });
  await Deno.writeTextFile(path, text);
  await Deno.chmod(path, mode);
  return path;
}

function parse(text: string): Record<string, unknown> {
  const value = parseJsonc(text, [], { allowTrailingComma: true });
  assert(value && typeof value === "object", "a JSON object");
  return value as Record<string, unknown>;
}

function runSetup(dirs: UserDirs, args: string[]) {
  return runCommand(Deno.execPath(), ["run", "-A", MAIN, "setup", ...args], {
    cwd: dirs.project,
    env: homeEnv(dirs.home),
    clearEnv: true,
    timeoutMs: 120_000,
  });
}

function describe(run: { code: number; stdout: string; stderr: string }): string {
  return `exit ${run.code}\nstdout:\n${run.stdout}\nstderr:\n${run.stderr}`;
}

/** Claude Code's file with a stdio entry for this checkout, a neighbour, comments, state. */
const CLAUDE_CODE = `{
  "numStartups": 12,
  // Claude Code keeps its own state next to the servers.
  "mcpServers": {
    "code-executor": {
      "type": "stdio",
      "command": ${JSON.stringify(Deno.execPath())},
      "args": ["run", "-A", ${JSON.stringify(MAIN)}, "serve"],
      "timeout": 90000, // the user's own key
    },
    "memory": { "command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"] },
  },
}
`;

Deno.test("setup --http turns Claude Code's stdio entry into an HTTP one, and back", async () => {
  await withUserDirs("ce-setup-http-", async (dirs) => {
    const file = await write(join(dirs.home, ".claude.json"), CLAUDE_CODE);
    const before = await snapshotFiles(dirs.root);

    // --dry-run shows the change as a diff and writes nothing.
    const dry = await runSetup(dirs, [
      "--dry-run",
      "--client",
      "claude-code",
      "--http",
      URL_,
    ]);
    assertEquals(dry.code, 0, describe(dry));
    assertEquals(await snapshotFiles(dirs.root), before);
    assertMatch(dry.stdout, /^--- ~\/\.claude\.json\n\+\+\+ ~\/\.claude\.json$/m);
    assertMatch(
      dry.stdout,
      /update "code-executor" in ~\/\.claude\.json: http:\/\/127\.0\.0\.1:3333\/mcp \(Authorization: Bearer \$\{CODE_EXECUTOR_HTTP_TOKEN\}\)/,
    );
    assertMatch(dry.stdout, /^\+ +"url": "http:\/\/127\.0\.0\.1:3333\/mcp",?$/m);
    assertMatch(dry.stdout, /^- +"command": /m);

    const first = await runSetup(dirs, [
      "--yes",
      "--client",
      "claude-code",
      "--http",
      URL_,
      "--no-check",
    ]);
    assertEquals(first.code, 0, describe(first));
    const text = await Deno.readTextFile(file);
    const servers = parse(text).mcpServers as Record<string, unknown>;
    // The transport's keys are replaced; the user's own key stays; the neighbour is untouched.
    assertEquals(servers["code-executor"], { ...EXPECTED["claude-code"].entry, timeout: 90000 });
    assertEquals(servers.memory, {
      command: "npx",
      args: ["-y", "@modelcontextprotocol/server-memory"],
    });
    assertEquals(parse(text).numStartups, 12);
    assert(text.includes("// Claude Code keeps its own state next to the servers."), text);
    assertEquals((await Deno.stat(file)).mode! & 0o777, 0o600);
    const after = await snapshotFiles(dirs.root);
    const backups = [...after.keys()].filter((p) => p.startsWith("home/.claude.json.backup-"));
    assertEquals(backups.length, 1);
    assertEquals(after.get(backups[0]), CLAUDE_CODE);
    assertMatch(first.stdout, /Set CODE_EXECUTOR_HTTP_TOKEN to the bearer token/);

    // Scanned again, the entry is Code Executor itself: discovery will not call it.
    const scans = await Promise.all(
      clientConfigs({ env: { HOME: dirs.home }, cwd: dirs.project }).map((c) =>
        scanClientConfig(c, { env: { HOME: dirs.home }, cwd: dirs.project })
      ),
    );
    const claude = scans.find((s) => s.client.id === "claude-code")!;
    assertEquals(claude.servers.find((s) => s.name === "code-executor")?.state, "self");

    // Again: nothing to change, no new backup.
    const second = await runSetup(dirs, [
      "--yes",
      "--client",
      "claude-code",
      "--http",
      URL_,
      "--no-check",
    ]);
    assertEquals(second.code, 0, describe(second));
    assertEquals(await snapshotFiles(dirs.root), after);
    assertMatch(second.stdout, /Nothing to change/);

    // Without --http the stdio entry comes back, the user's key still there.
    const back = await runSetup(dirs, ["--yes", "--client", "claude-code", "--no-check"]);
    assertEquals(back.code, 0, describe(back));
    const restored = parse(await Deno.readTextFile(file)).mcpServers as Record<string, unknown>;
    assertEquals(restored["code-executor"], {
      type: "stdio",
      command: Deno.execPath(),
      args: ["run", "-A", MAIN, "serve"],
      timeout: 90000,
    });
  });
});

Deno.test("setup --http writes each client's own HTTP form, naming the token's variable", async () => {
  await withUserDirs("ce-setup-http-", async (dirs) => {
    const env = { HOME: dirs.home };
    // VS Code's project file exists with comments, an input and a server; the rest do not.
    const vscode = `{
  // workspace servers
  "inputs": [{ "type": "promptString", "id": "key", "password": true }],
  "servers": { "fetch": { "type": "stdio", "command": "uvx", "args": ["mcp-server-fetch"] } },
}
`;
    await write(join(dirs.project, ".vscode", "mcp.json"), vscode, 0o644);
    const scans = await Promise.all(
      clientConfigs({ env, cwd: dirs.project, os: "linux" }).map((c) =>
        scanClientConfig(c, { env, cwd: dirs.project })
      ),
    );
    for (const [client, expected] of Object.entries(EXPECTED)) {
      const plan = planSetup(scans, { client: client as ClientId, env, os: "linux", http: URL_ });
      assertEquals(plan.entry.name, "code-executor", client);
      assertEquals(plan.entry.value, expected.entry, client);
      assertEquals(plan.files.length, 1, client);
      const [file] = plan.files;
      assertEquals(relative(dirs.root, file.path), expected.file, client);
      const written = parse(file.after)[expected.key] as Record<string, unknown>;
      assertEquals(written["code-executor"], expected.entry, client);
      // A user's file is private; a project's is meant to be committed: no token is in either.
      assertEquals(file.mode, file.path.startsWith(dirs.project) ? 0o644 : 0o600, client);
      assert(!/Bearer [A-Za-z0-9_-]{16,}/.test(file.after), file.after);
    }
    const vscodePlan = planSetup(scans, { client: "vscode", env, os: "linux", http: URL_ });
    const after = vscodePlan.files[0].after;
    assert(after.includes("// workspace servers"), after);
    assertEquals(parse(after).inputs, parse(vscode).inputs);
    assertEquals(Object.keys(parse(after).servers as object).sort(), ["code-executor", "fetch"]);
  });
});

Deno.test('setup --http replaces a stdio entry of another name with "code-executor"', async () => {
  await withUserDirs("ce-setup-http-", async (dirs) => {
    const env = { HOME: dirs.home };
    await write(
      join(dirs.home, ".cursor", "mcp.json"),
      `{ "mcpServers": { "ce": { "command": ${
        JSON.stringify(Deno.execPath())
      }, "args": ["run", "-A", ${JSON.stringify(MAIN)}, "serve"] } } }\n`,
    );
    const scans = await Promise.all(
      clientConfigs({ env, cwd: dirs.project }).map((c) =>
        scanClientConfig(c, { env, cwd: dirs.project })
      ),
    );
    const plan = planSetup(scans, { client: "cursor", env, http: URL_ });
    assertEquals([plan.entry.name, plan.entry.action, plan.entry.replaces], [
      "code-executor",
      "add",
      "ce",
    ]);
    // Discovery knows an HTTP entry for itself by the name only: the old name goes.
    assertEquals(parse(plan.files[0].after).mcpServers, {
      "code-executor": EXPECTED.cursor.entry,
    });
  });
});

Deno.test("setup --http refuses Claude Desktop and URLs that are not http(s), writing nothing", async () => {
  await withUserDirs("ce-setup-http-", async (dirs) => {
    const desktop = await write(
      join(dirs.home, ".config", "Claude", "claude_desktop_config.json"),
      `{ "mcpServers": {} }\n`,
    );
    const before = await snapshotFiles(dirs.root);
    const refused = await runSetup(dirs, ["--yes", "--client", "claude-desktop", "--http", URL_]);
    assertEquals(refused.code, 2, describe(refused));
    assertMatch(
      refused.stderr,
      /Cannot write an HTTP entry for Claude Desktop: .* Run setup without --http .*mcp-remote/,
    );
    const bad = await runSetup(dirs, ["--yes", "--client", "cursor", "--http", "ftp://host/mcp"]);
    assertEquals(bad.code, 2, describe(bad));
    assertMatch(bad.stderr, /Invalid --http "ftp:\/\/host\/mcp": expected the URL of a running/);
    assertEquals(await snapshotFiles(dirs.root), before);
    assertEquals(await Deno.readTextFile(desktop), `{ "mcpServers": {} }\n`);
  });
});

Deno.test("the entry setup --http writes for Claude Code reaches serve --http with its bearer token", async () => {
  await withTempDir("ce-setup-http-serve-", async (tempDir) => {
    const home = join(tempDir, "home");
    await Deno.mkdir(home);
    const token = crypto.randomUUID().replaceAll("-", "");
    const server = await startHttpServer({
      tempDir,
      home,
      sharedCache: true,
      env: { CODE_EXECUTOR_HTTP_TOKEN: token },
    });
    try {
      const scans = await Promise.all(
        clientConfigs({ env: { HOME: home }, cwd: tempDir }).map((c) =>
          scanClientConfig(c, { env: { HOME: home }, cwd: tempDir })
        ),
      );
      const entry = planSetup(scans, {
        client: "claude-code",
        env: { HOME: home },
        http: server.url.href,
      }).entry.value as { url: string; headers: Record<string, string> };
      // As Claude Code expands it: ${VAR} from the environment it runs in.
      const connect = async (value: string) => {
        const headers = Object.fromEntries(
          Object.entries(entry.headers).map((
            [k, v],
          ) => [k, expandVars(v, { CODE_EXECUTOR_HTTP_TOKEN: value }, k)]),
        );
        const client = new Client({ name: "setup-http-test", version: "1" });
        await client.connect(
          new StreamableHTTPClientTransport(new URL(entry.url), { requestInit: { headers } }),
        );
        return client;
      };
      const client = await connect(token);
      try {
        const result = await client.callTool({
          name: "run_typescript",
          arguments: { code: "return 6 * 7" },
        });
        assertEquals((result.structuredContent as { returnValue?: unknown }).returnValue, 42);
      } finally {
        await client.close();
      }
      let refused: unknown;
      try {
        await (await connect("not-the-token")).close();
      } catch (error) {
        refused = error;
      }
      assertMatch(String(refused), /invalid_token/);
    } finally {
      const status = await server.close();
      assert(status?.success, `serve --http did not exit cleanly:\n${server.stderr()}`);
    }
    await assertNoSandboxes(tempDir);
    assert(!server.stderr().includes(token), "the token is never logged");
  });
});
