/**
 * Tests of `setup` and `sync` on a temporary HOME seeded with realistic client configs: the real
 * command line in a child process writes each client's entry, backs up, is idempotent, shows a
 * dry run, finds the project's file, writes the daily sync, and asks for flags without a
 * terminal.
 *
 * @module
 */
import { Client } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { join, relative } from "node:path";
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { MEMORY } from "./_pins.ts";
import { homeEnv } from "./_env.ts";
import { describeRun as describe } from "./_command.ts";
import { snapshotFiles, withUserDirs } from "./_fs.ts";
import {
  backupsOf,
  codeExecutor,
  comments,
  DENO,
  escape,
  MAIN,
  parse,
  runSetup,
  seed,
  SERVE,
  write,
} from "./_setup.ts";

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

Deno.test("setup picks the project's .cursor/mcp.json by default, and sync reads it too", async () => {
  await withUserDirs("ce-setup-", async (dirs) => {
    await write(
      join(dirs.project, ".cursor", "mcp.json"),
      `{ "mcpServers": { "memory": { "command": ${
        JSON.stringify(DENO)
      }, "args": ["run", "-A", "${MEMORY}"], "env": { "MEMORY_FILE_PATH": ${
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
