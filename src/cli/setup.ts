/**
 * `setup`: find the MCP servers configured in every client, put Code Executor in front of them
 * in one client's config, optionally move them behind it, offer a daily sync, and check that
 * they answer.
 *
 * Every write is preceded by a timestamped backup of the file it changes, is atomic, and edits
 * the JSONC text in place (comments and formatting stay). Running it again changes nothing.
 *
 * @module
 */
import { parseArgs } from "node:util";
import {
  CLIENT_IDS,
  clientConfigs,
  type ClientId,
  moveBlocker,
  scanClientConfig,
  type ScannedConfig,
  type ScannedServer,
  selfEntry,
  selfLaunchCommand,
} from "../config/client_configs.ts";
import { removeProperty, setProperty } from "../config/jsonc_edit.ts";
import { tildePath } from "../config/paths.ts";
import { backupFile, writeFileAtomic } from "../config/safe_write.ts";
import { unifiedDiff } from "../config/text_diff.ts";
import { discoverUpstreams } from "../config/upstream.ts";
import { canonicalJson, isPlainObject, plural } from "../_util.ts";
import { dailySyncPlan, shellLine, sync } from "./sync.ts";

/** Options of {@linkcode setup}. */
export interface SetupOptions {
  /** The client to configure; asked (or the one with the most servers) when omitted. */
  client?: ClientId;
  /** Move the client's other servers behind Code Executor; asked when omitted (no with `yes`). */
  move?: boolean;
  /** Install the daily sync; asked when omitted (no with `yes`). */
  installSync?: boolean;
  /** Run the scheduler's activation commands (`systemctl --user enable --now …`); default true. */
  enableSync?: boolean;
  /** Connect to the servers afterwards to cache their tools and write wrappers; default true. */
  check?: boolean;
  /** Print what would change (as diffs) and write nothing. */
  dryRun?: boolean;
  /** Environment for `HOME` and friends; defaults to the process's. */
  env?: Record<string, string>;
  /** Project directory (`.mcp.json`, `.vscode/mcp.json`); defaults to the cwd. */
  cwd?: string;
  /** Operating system whose locations and scheduler to use; defaults to `Deno.build.os`. */
  os?: typeof Deno.build.os;
}

/** Where `setup` talks to the user. */
export interface SetupIO {
  /** Writes report text. */
  write(text: string): void;
  /** Writes progress text (stderr). */
  progress(text: string): void;
  /** Asks a question and returns the answer line; absent when not interactive. */
  ask?(question: string): Promise<string>;
}

/** A planned change of one file. */
interface FileChange {
  path: string;
  /** The text now, undefined for a new file. */
  before: string | undefined;
  /** Computes the new text from the current one (applied again to a fresh read before writing). */
  edit: (text: string | undefined) => string;
  /** Mode of a new file. */
  mode: number;
}

const OWN_TEMPLATE =
  `// MCP servers that Code Executor connects to (code-executor setup moves servers here).
// Same format as a client's config; \${VAR} references are expanded when Code Executor starts.
{
  "mcpServers": {}
}
`;

/**
 * The `setup` command line. Interactive on a terminal; with `--yes`, or without a terminal and
 * with `--dry-run`, it takes the defaults and the flags.
 *
 * @param args The arguments after `setup`.
 * @returns The exit code.
 * @throws {TypeError} For unknown options, an unknown client, or answers needed without a terminal.
 */
export async function setupCommand(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      client: { type: "string" },
      yes: { type: "boolean", short: "y" },
      "dry-run": { type: "boolean" },
      move: { type: "boolean" },
      "no-move": { type: "boolean" },
      sync: { type: "boolean" },
      "no-sync": { type: "boolean" },
      "no-enable": { type: "boolean" },
      "no-check": { type: "boolean" },
      project: { type: "string" },
    },
  });
  if (positionals.length > 0) {
    throw new TypeError(`Unexpected argument "${positionals[0]}" for setup`);
  }
  const client = values.client;
  if (client !== undefined && !(CLIENT_IDS as readonly string[]).includes(client)) {
    throw new TypeError(`Unknown client "${client}": expected one of ${CLIENT_IDS.join(", ")}`);
  }
  const interactive = !values.yes && Deno.stdin.isTerminal();
  if (!interactive && !values.yes && !values["dry-run"]) {
    throw new TypeError(
      "Cannot ask the setup questions: stdin is not a terminal; pass --yes (with --client, --move, --sync as wanted) or --dry-run",
    );
  }
  const encoder = new TextEncoder();
  const prompter = interactive ? new LinePrompter() : undefined;
  try {
    return await setup({
      client: client as ClientId | undefined,
      move: values.move ? true : values["no-move"] ? false : undefined,
      installSync: values.sync ? true : values["no-sync"] ? false : undefined,
      enableSync: !values["no-enable"],
      check: !values["no-check"],
      dryRun: values["dry-run"],
      // `deno task` runs in the repository; INIT_CWD is where the user typed the command.
      cwd: values.project ?? Deno.env.get("INIT_CWD"),
    }, {
      write: (text) => Deno.stdout.writeSync(encoder.encode(text)),
      progress: (text) => Deno.stderr.writeSync(encoder.encode(text)),
      ask: prompter ? (question) => prompter.ask(question) : undefined,
    });
  } finally {
    await prompter?.close();
  }
}

/**
 * Runs the setup: scan, choose, plan, show, write, schedule, check. Questions go through
 * `io.ask` when it is given; otherwise the options and the defaults decide.
 *
 * @param options What to do, and where.
 * @param io Output and questions.
 * @returns The exit code: 0 on success (also when there was nothing to change).
 * @throws {TypeError} When no client is given and no client config exists, or the chosen
 *   client's config cannot be parsed.
 */
export async function setup(options: SetupOptions, io: SetupIO): Promise<number> {
  const env = options.env ?? Deno.env.toObject();
  const cwd = options.cwd ?? Deno.cwd();
  const os = options.os ?? Deno.build.os;
  const show = (path: string) => tildePath(path, env);
  const ask = io.ask;
  const dryRun = options.dryRun === true;

  const configs = clientConfigs({ env, cwd, os });
  const scans = await Promise.all(configs.map((c) => scanClientConfig(c, { env, cwd })));
  const own = scans.find((s) => s.client.id === "code-executor")!;
  const clients = scans.filter((s) => s.client.id !== "code-executor");

  io.write(
    `${dryRun ? "Code Executor setup (dry run: nothing is written)" : "Code Executor setup"}\n\n`,
  );
  io.write("MCP client configs:\n");
  const width = Math.max(...scans.map((s) => s.client.label.length));
  for (const scan of scans) {
    io.write(
      `  ${scan.client.label.padEnd(width)}  ${show(scan.client.path)}: ${describeScan(scan)}\n`,
    );
  }

  const chosen = await chooseClient(clients, options.client, ask, io, show);
  const target = clients.find((s) => s.client.id === chosen)!;
  if (target.error) {
    throw new TypeError(
      `Cannot set up ${target.client.label}: ${target.error}; fix the file first`,
    );
  }
  io.write(`\nClient: ${target.client.label} (${show(target.client.path)})\n`);

  const launch = selfLaunchCommand("serve");
  const desired = selfEntry(chosen, launch);
  const selfName = target.servers.find((s) => s.state === "self")?.name ?? "code-executor";
  const existing = target.servers.find((s) => s.name === selfName)?.raw;
  const entryEdits = entryChanges(existing, desired);

  // Which servers could move, and why the others cannot.
  const ownEntries = new Map(own.servers.map((s) => [s.name, s.raw]));
  const candidates: ScannedServer[] = [];
  const blocked: Array<[string, string]> = [];
  for (const server of target.servers) {
    if (server.state === "self") continue;
    let reason = own.error
      ? `${show(own.client.path)} cannot be read (${own.error}); fix it first`
      : moveBlocker(server, target.client);
    if (
      !reason && ownEntries.has(server.name) && !sameJson(ownEntries.get(server.name), server.raw)
    ) {
      reason = `${show(own.client.path)} already has a different "${server.name}"`;
    }
    if (reason) blocked.push([server.name, reason]);
    else candidates.push(server);
  }
  let move = options.move;
  if (candidates.length === 0) move = false;
  else if (move === undefined) {
    move = ask
      ? await confirm(
        ask,
        `Move ${plural(candidates.length, "server")} (${
          candidates.map((s) => s.name).join(", ")
        }) ` +
          `out of ${show(target.client.path)} and behind Code Executor (into ${
            show(own.client.path)
          })?`,
        true,
      )
      : false;
  }
  const moving = move ? candidates : [];

  const changes: FileChange[] = [];
  if (moving.length > 0) {
    changes.push({
      path: own.client.path,
      before: own.text,
      mode: 0o600,
      edit: (text) => {
        let out = text ?? OWN_TEMPLATE;
        // Each insertion goes first in its object: insert in reverse to keep the client's order.
        for (const server of [...moving].reverse()) {
          if (ownEntries.has(server.name)) continue;
          out = setProperty(out, ["mcpServers", server.name], server.raw);
        }
        return out;
      },
    });
  }
  changes.push({
    path: target.client.path,
    before: target.text,
    mode: target.client.project ? 0o644 : 0o600,
    edit: (text) => {
      let out = text ?? "{}\n";
      for (const [path, value] of entryEdits) {
        out = setProperty(out, [target.client.key, selfName, ...path], value);
      }
      for (const server of moving) out = removeProperty(out, [...server.section, server.name]);
      return out;
    },
  });
  const pending = changes.filter((c) => c.edit(c.before) !== c.before);

  io.write("\nPlan:\n");
  if (entryEdits.length === 0) {
    io.write(`  "${selfName}" is already in ${show(target.client.path)}\n`);
  } else {
    io.write(
      `  ${existing === undefined ? "add" : "update"} "${selfName}" ${
        existing === undefined ? "to" : "in"
      } ${show(target.client.path)}: ${shellLine([launch.command, ...launch.args])}\n`,
    );
  }
  for (const server of moving) {
    io.write(`  move "${server.name}" to ${show(own.client.path)}\n`);
  }
  if (!move && candidates.length > 0) {
    io.write(
      `  keep ${candidates.map((s) => `"${s.name}"`).join(", ")} in ${
        show(target.client.path)
      } (move them with --move)\n`,
    );
  }
  for (const [name, reason] of blocked) io.write(`  not moving "${name}": ${reason}\n`);

  const showDiffs = dryRun || ask !== undefined;
  if (showDiffs && pending.length > 0) {
    io.write("\n");
    for (const change of pending) {
      io.write(unifiedDiff(change.before ?? "", change.edit(change.before), {
        fromName: change.before === undefined ? "/dev/null" : show(change.path),
        toName: show(change.path),
      }));
    }
  }

  let wrote = false;
  if (pending.length === 0) {
    io.write(`\nNothing to change in the client configs.\n`);
  } else if (!dryRun) {
    const go = ask ? await confirm(ask, "Write these changes?", true) : true;
    if (!go) {
      io.write("Nothing was written.\n");
      return 1;
    }
    io.write("\n");
    for (const change of pending) await applyChange(change, io, show);
    wrote = true;
  }

  // The daily sync.
  const plan = dailySyncPlan(os, { launch: selfLaunchCommand("sync"), env });
  let install = options.installSync;
  if (install === undefined) {
    install = ask
      ? await confirm(ask, `Install a daily \`sync\` (${plan.description})?`, false)
      : false;
  }
  if (install) {
    const scheduleChanges: FileChange[] = plan.files.map((file) => ({
      path: file.path,
      before: readTextOrUndefined(file.path),
      mode: 0o644,
      edit: () => file.text,
    }));
    const changed = scheduleChanges.filter((c) => c.edit(c.before) !== c.before);
    io.write(`\nDaily sync: ${plan.description}\n`);
    if (dryRun) {
      for (const file of plan.files) io.write(`\n${show(file.path)}:\n${file.text}`);
      io.write(`\nthen: ${plan.commands.map(shellLine).join(" && ")}\n`);
    } else {
      for (const change of changed) await applyChange(change, io, show);
      if (plan.files.length > 0 && changed.length === 0) {
        io.write(`  already installed (${plan.files.map((f) => show(f.path)).join(", ")})\n`);
      } else {
        await activate(plan.commands, options.enableSync !== false, io);
      }
    }
  } else if (dryRun) {
    io.write(`\nDaily sync: not requested (--sync would install ${plan.description})\n`);
  }

  if (dryRun) return 0;

  // Connect to what is now behind Code Executor, so that its tools are cached and wrapped.
  if (options.check !== false) {
    const upstream = await discoverUpstreams({ env, cwd, os });
    if (upstream.servers.length > 0) {
      io.write("\nChecking the servers behind Code Executor:\n");
      const report = await sync({ cwd, progress: (line) => io.progress(`${line}\n`) });
      for (const server of report.servers) {
        io.write(
          server.error === undefined
            ? `  ok      ${server.name}: ${server.tools} tools\n`
            : `  failed  ${server.name}: ${server.error}\n`,
        );
      }
      for (const message of report.broken) io.write(`  broken  ${message}\n`);
      if (report.wrappers) {
        io.write(
          `  wrappers: ${report.wrappers.written.length} files written, ${report.wrappers.unchanged.length} unchanged\n`,
        );
      }
      if (report.wrappersError) io.write(`  wrappers not generated: ${report.wrappersError}\n`);
    }
  }
  io.write(
    wrote
      ? `\nDone. Restart ${target.client.label} so that it starts Code Executor.\n`
      : "\nDone.\n",
  );
  return 0;
}

async function chooseClient(
  clients: ScannedConfig[],
  given: ClientId | undefined,
  ask: SetupIO["ask"],
  io: SetupIO,
  show: (path: string) => string,
): Promise<ClientId> {
  if (given) return given;
  const found = clients.filter((s) => s.found && !s.error);
  const usable = (s: ScannedConfig) => s.servers.filter((x) => x.state !== "self").length;
  const best = [...found].sort((a, b) => usable(b) - usable(a))[0];
  if (!ask) {
    if (!best) {
      throw new TypeError(
        `No MCP client config found: pass --client (${CLIENT_IDS.join(", ")}) to create one`,
      );
    }
    return best.client.id as ClientId;
  }
  const fallback = best?.client.id ?? "claude-code";
  io.write("\nWhich client should start Code Executor?\n");
  clients.forEach((scan, i) => {
    const mark = scan.client.id === fallback ? " (default)" : "";
    io.write(`  ${i + 1}. ${scan.client.label}: ${show(scan.client.path)}${mark}\n`);
  });
  for (;;) {
    const answer = (await ask(`Client [${
      clients.findIndex((c) => c.client.id === fallback) + 1
    }]: `)).trim();
    if (answer === "") return fallback as ClientId;
    const byNumber = clients[Number(answer) - 1];
    if (/^\d+$/.test(answer) && byNumber) return byNumber.client.id as ClientId;
    const byName = clients.find((c) => c.client.id === answer.toLowerCase());
    if (byName) return byName.client.id as ClientId;
    io.write(
      `  "${answer}" is not one of the choices: type a number from 1 to ${clients.length}\n`,
    );
  }
}

async function confirm(
  ask: NonNullable<SetupIO["ask"]>,
  question: string,
  fallback: boolean,
): Promise<boolean> {
  for (;;) {
    const answer = (await ask(`${question} [${fallback ? "Y/n" : "y/N"}] `)).trim().toLowerCase();
    if (answer === "") return fallback;
    if (answer === "y" || answer === "yes") return true;
    if (answer === "n" || answer === "no") return false;
  }
}

async function applyChange(
  change: FileChange,
  io: SetupIO,
  show: (path: string) => string,
): Promise<void> {
  // Clients rewrite their configs while they run (Claude Code does, often): edit what is on disk
  // now, not what was scanned.
  const current = readTextOrUndefined(change.path);
  const after = change.edit(current);
  if (after === current) return;
  if (current !== undefined) {
    const backup = await backupFile(change.path);
    io.write(`  backed up ${show(change.path)} to ${show(backup)}\n`);
  }
  await writeFileAtomic(change.path, after, { mode: change.mode });
  io.write(`  ${current === undefined ? "created" : "updated"} ${show(change.path)}\n`);
}

async function activate(commands: string[][], enable: boolean, io: SetupIO): Promise<void> {
  if (commands.length === 0) return;
  const runnable = enable && commands.every((argv) => onPath(argv[0]));
  if (!runnable) {
    io.write(`  to activate it, run: ${commands.map(shellLine).join(" && ")}\n`);
    return;
  }
  for (const argv of commands) {
    const output = await new Deno.Command(argv[0], {
      args: argv.slice(1),
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).output();
    if (!output.success) {
      const detail = new TextDecoder().decode(output.stderr).trim();
      io.write(
        `  "${shellLine(argv)}" failed (${
          detail || `exit code ${output.code}`
        }); run it yourself: ${commands.map(shellLine).join(" && ")}\n`,
      );
      return;
    }
  }
  io.write(`  activated: ${commands.map(shellLine).join(" && ")}\n`);
}

function onPath(command: string): boolean {
  const separator = Deno.build.os === "windows" ? ";" : ":";
  for (const dir of (Deno.env.get("PATH") ?? "").split(separator)) {
    if (!dir) continue;
    for (const suffix of Deno.build.os === "windows" ? [".exe", ".cmd", ""] : [""]) {
      try {
        if (Deno.statSync(`${dir}/${command}${suffix}`).isFile) return true;
      } catch {
        // Not in this directory.
      }
    }
  }
  return false;
}

function describeScan(scan: ScannedConfig): string {
  if (!scan.found) return "not found";
  if (scan.error) return `unreadable: ${scan.error}`;
  if (scan.servers.length === 0) return "no servers";
  const names = scan.servers.map((s) =>
    s.state === "usable"
      ? s.missing?.length
        ? `${s.name} (needs ${s.missing.map((v) => `\${${v}}`).join(", ")})`
        : s.name
      : s.state === "self"
      ? `${s.name} (this server)`
      : s.state === "disabled"
      ? `${s.name} (disabled)`
      : `${s.name} (broken)`
  );
  return `${plural(scan.servers.length, "server")}: ${names.join(", ")}`;
}

/** The edits that turn an existing entry into the desired one, keeping keys the user added. */
function entryChanges(
  existing: unknown,
  desired: Record<string, unknown>,
): Array<[string[], unknown]> {
  if (!isPlainObject(existing)) return [[[], desired]];
  return Object.entries(desired)
    .filter(([key, value]) => !sameJson(existing[key], value))
    .map(([key, value]) => [[key], value]);
}

function readTextOrUndefined(path: string): string | undefined {
  try {
    return Deno.readTextFileSync(path);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return undefined;
    throw error;
  }
}

function sameJson(a: unknown, b: unknown): boolean {
  return canonicalJson(a) === canonicalJson(b);
}

/** Reads answers from a terminal, one line per question. */
class LinePrompter {
  #reader = Deno.stdin.readable.getReader();
  #decoder = new TextDecoder();
  #buffer = "";
  #encoder = new TextEncoder();

  /**
   * Prints the question and waits for a line.
   *
   * @param question The prompt, printed as is.
   * @returns The line, without its end.
   * @throws {Error} When stdin ends before a line arrives.
   */
  async ask(question: string): Promise<string> {
    Deno.stdout.writeSync(this.#encoder.encode(question));
    for (;;) {
      const newline = this.#buffer.indexOf("\n");
      if (newline >= 0) {
        const line = this.#buffer.slice(0, newline).replace(/\r$/, "");
        this.#buffer = this.#buffer.slice(newline + 1);
        return line;
      }
      const { value, done } = await this.#reader.read();
      if (done) throw new Error("Setup stopped: the terminal closed before the answer");
      this.#buffer += this.#decoder.decode(value, { stream: true });
    }
  }

  /** Releases stdin. */
  async close(): Promise<void> {
    await this.#reader.cancel().catch(() => {});
  }
}
