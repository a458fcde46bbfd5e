/**
 * The interactive `setup` under a pseudo-terminal, answering its prompts as a person would.
 *
 * The terminal comes from util-linux `script` (part of every Debian base system), or from
 * Python's `pty` module where `script` is missing; with neither, the test fails and says so.
 *
 * @module
 */
import { join } from "node:path";
import { parse as parseJsonc } from "jsonc-parser";
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { MEMORY } from "./_pins.ts";
import { homeEnv, ROOT } from "./_env.ts";
import { withUserDirs } from "./_fs.ts";

const DENO = Deno.execPath();
const MAIN = join(ROOT, "main.ts");

function onPath(name: string): string | undefined {
  for (const dir of (Deno.env.get("PATH") ?? "").split(":")) {
    if (!dir) continue;
    try {
      if (Deno.statSync(join(dir, name)).isFile) return join(dir, name);
    } catch {
      // Not here.
    }
  }
  return undefined;
}

function shellQuote(arg: string): string {
  return `'${arg.replaceAll("'", `'\\''`)}'`;
}

/** A command line that runs argv on a new pseudo-terminal, relaying our stdin and stdout. */
function underPty(argv: string[]): string[] {
  const script = onPath("script");
  if (script) return [script, "-qfec", argv.map(shellQuote).join(" "), "/dev/null"];
  const python = onPath("python3");
  if (python) {
    return [
      python,
      "-c",
      "import os, pty, sys; sys.exit(os.waitstatus_to_exitcode(pty.spawn(sys.argv[1:])))",
      ...argv,
    ];
  }
  throw new Error(
    "Cannot run the interactive setup test: neither util-linux `script` nor python3 is installed",
  );
}

/** A process on a pseudo-terminal whose output can be waited for. */
class Terminal {
  #child: Deno.ChildProcess;
  #writer: WritableStreamDefaultWriter<Uint8Array>;
  #output = "";
  #reading: Promise<void>;
  #encoder = new TextEncoder();

  constructor(argv: string[], options: { cwd: string; env: Record<string, string> }) {
    const [command, ...args] = underPty(argv);
    this.#child = new Deno.Command(command, {
      args,
      cwd: options.cwd,
      env: options.env,
      clearEnv: true,
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    this.#writer = this.#child.stdin.getWriter();
    const decoder = new TextDecoder();
    const collect = async (stream: ReadableStream<Uint8Array>) => {
      for await (const chunk of stream) this.#output += decoder.decode(chunk, { stream: true });
    };
    this.#reading = Promise.all([collect(this.#child.stdout), collect(this.#child.stderr)])
      .then(() => {});
  }

  /** Everything printed so far, with the terminal's CR LF turned into LF. */
  get output(): string {
    return this.#output.replaceAll("\r\n", "\n");
  }

  /** Waits until the output after `from` matches, and returns the end of the match. */
  async waitFor(pattern: RegExp, from: number, timeoutMs = 120_000): Promise<number> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const rest = this.output.slice(from);
      const match = pattern.exec(rest);
      if (match) return from + match.index + match[0].length;
      if (Date.now() > deadline) {
        throw new Error(`Timed out waiting for ${pattern} in:\n${this.output}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  /** Types a line. */
  async type(line: string): Promise<void> {
    await this.#writer.write(this.#encoder.encode(`${line}\n`));
  }

  /** Waits for the process to end and returns its exit code. */
  async exit(): Promise<number> {
    const status = await this.#child.status;
    await this.#reading;
    await this.#writer.close().catch(() => {});
    return status.code;
  }

  /** Ends the process if it still runs. */
  async kill(): Promise<void> {
    try {
      this.#child.kill("SIGKILL");
    } catch {
      // Already gone.
    }
    await this.exit().catch(() => {});
  }
}

Deno.test("setup asks on a terminal, takes Enter as the default, and sets up Claude Code", async () => {
  await withUserDirs("ce-setup-pty-", async ({ root, home, project }) => {
    const claudeJson = join(home, ".claude.json");
    const memoryFile = join(root, "memory.jsonl");
    const original = `{
  "numStartups": 9,
  // the one server this user has
  "mcpServers": {
    "memory": {
      "command": ${JSON.stringify(DENO)},
      "args": ["run", "-A", "${MEMORY}"],
      "env": { "MEMORY_FILE_PATH": ${JSON.stringify(memoryFile)} },
    },
  },
}
`;
    await Deno.writeTextFile(claudeJson, original);
    const terminal = new Terminal([DENO, "run", "-A", MAIN, "setup"], {
      cwd: project,
      env: { ...homeEnv(home), SHELL: "/bin/sh", TERM: "dumb" },
    });
    try {
      let at = await terminal.waitFor(/Claude Code +~\/\.claude\.json: 1 server: memory\n/, 0);
      // The client with the most servers is the default: Enter picks it.
      at = await terminal.waitFor(/1\. Claude Code: ~\/\.claude\.json \(default\)\n/, at);
      at = await terminal.waitFor(/Client \[1\]: $/, at);
      await terminal.type("");
      at = await terminal.waitFor(
        /Move 1 server \(memory\) out of ~\/\.claude\.json and behind Code Executor \(into ~\/\.config\/code-executor\/mcp\.json\)\? \[Y\/n\] $/,
        at,
      );
      await terminal.type("");
      // The diff is shown before anything is written.
      at = await terminal.waitFor(/\+\+\+ ~\/\.claude\.json\n/, at);
      at = await terminal.waitFor(/Write these changes\? \[Y\/n\] $/, at);
      assertEquals(await Deno.readTextFile(claudeJson), original);
      await terminal.type("y");
      at = await terminal.waitFor(
        /Install a daily `sync` \(a systemd user timer\)\? \[y\/N\] $/,
        at,
      );
      await terminal.type("");
      // Progress while it connects, then the result.
      at = await terminal.waitFor(/Connecting to 1 server: memory\n/, at);
      at = await terminal.waitFor(/\[1\/1\] memory: \d+ tools/, at);
      at = await terminal.waitFor(/ok {6}memory: \d+ tools\n/, at);
      await terminal.waitFor(/Done\. Restart Claude Code so that it starts Code Executor\.\n/, at);
      assertEquals(await terminal.exit(), 0, terminal.output);

      const text = await Deno.readTextFile(claudeJson);
      assert(text.includes("// the one server this user has"), text);
      const claude = parseJsonc(text, [], { allowTrailingComma: true });
      assertEquals(claude.mcpServers, {
        "code-executor": { type: "stdio", command: DENO, args: ["run", "-A", MAIN, "serve"] },
      });
      assertEquals(claude.numStartups, 9);
      const own = parseJsonc(
        await Deno.readTextFile(join(home, ".config", "code-executor", "mcp.json")),
        [],
        { allowTrailingComma: true },
      );
      assertEquals(Object.keys(own.mcpServers), ["memory"]);
      // No timer was installed: the default answer was no.
      await Deno.stat(join(home, ".config", "systemd")).then(
        () => assert(false, "a systemd unit was written"),
        (error) => assert(error instanceof Deno.errors.NotFound),
      );
      const backups = [...Deno.readDirSync(home)].filter((e) =>
        e.name.startsWith(".claude.json.backup-")
      );
      assertEquals(backups.length, 1);
      assertEquals(await Deno.readTextFile(join(home, backups[0].name)), original);
      assertMatch(
        terminal.output,
        /backed up ~\/\.claude\.json to ~\/\.claude\.json\.backup-\d{8}T\d{6}Z/,
      );
    } finally {
      await terminal.kill();
    }
  });
});
