/**
 * `setup`: find the MCP servers configured in every client, put Code Executor in front of them
 * in one client's config, optionally move them behind it, offer a daily sync, and check that
 * they answer.
 *
 * What changes is decided by {@linkcode planSetup} (`setup_plan.ts`), which asks nothing and
 * writes nothing; this module asks the questions, shows the plan and writes it. Every write is
 * preceded by a timestamped backup of the file it changes, is atomic, and edits the JSONC text
 * in place (comments and formatting stay). Running it again changes nothing.
 *
 * @module
 */
import { parseArgs } from "node:util";
import {
  CLIENT_IDS,
  clientConfigs,
  type ClientId,
  HTTP_TOKEN_VARIABLE,
  scanClientConfig,
  type ScannedConfig,
} from "../config/client_configs.ts";
import { tildePath } from "../config/paths.ts";
import { backupFile, writeFileAtomic } from "../config/safe_write.ts";
import { discoverUpstreams } from "../config/upstream.ts";
import { plural } from "../_util.ts";
import { addHttpToken } from "./http_token.ts";
import { type Ask, confirm, LinePrompter } from "./setup_prompt.ts";
import { defaultClient, planSetup } from "./setup_plan.ts";
import { formatDiffs, formatPlan, formatScans, type ShowPath } from "./setup_report.ts";
import { type DailySyncPlan, shellLine, sync } from "./sync.ts";

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
  /**
   * The MCP endpoint of a running `serve --http`: write an entry that connects to it, with a
   * bearer token from `CODE_EXECUTOR_HTTP_TOKEN`, instead of one that starts Code Executor.
   */
  http?: string;
  /** Environment for `HOME` and friends; defaults to the process's. */
  env?: Record<string, string>;
  /** Project directory (`.mcp.json`, `.vscode/mcp.json`, `.cursor/mcp.json`); the cwd by default. */
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
  ask?: Ask;
}

/** A change of one file: the path, the mode of a new file, and the edit to make. */
interface FileEdit {
  path: string;
  mode: number;
  edit: (text: string | undefined) => string;
}

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
      http: { type: "string" },
      "http-token": { type: "boolean" },
      principal: { type: "string" },
      "tokens-file": { type: "string" },
    },
  });
  if (positionals.length > 0) {
    throw new TypeError(`Unexpected argument "${positionals[0]}" for setup`);
  }
  const encoder = new TextEncoder();
  if (values["http-token"]) {
    return await addHttpToken({ principal: values.principal, tokensFile: values["tokens-file"] }, {
      write: (text) => Deno.stdout.writeSync(encoder.encode(text)),
      progress: (text) => Deno.stderr.writeSync(encoder.encode(text)),
    });
  }
  if (values.principal !== undefined || values["tokens-file"] !== undefined) {
    throw new TypeError("--principal and --tokens-file go with --http-token");
  }
  const client = values.client;
  if (client !== undefined && !(CLIENT_IDS as readonly string[]).includes(client)) {
    throw new TypeError(`Unknown client "${client}": expected one of ${CLIENT_IDS.join(", ")}`);
  }
  const http = values.http === undefined ? undefined : endpointUrl(values.http);
  const interactive = !values.yes && Deno.stdin.isTerminal();
  if (!interactive && !values.yes && !values["dry-run"]) {
    throw new TypeError(
      "Cannot ask the setup questions: stdin is not a terminal; pass --yes (with --client, --move, --sync as wanted) or --dry-run",
    );
  }
  const prompter = interactive ? new LinePrompter() : undefined;
  try {
    return await setup({
      client: client as ClientId | undefined,
      move: values.move ? true : values["no-move"] ? false : undefined,
      installSync: values.sync ? true : values["no-sync"] ? false : undefined,
      enableSync: !values["no-enable"],
      check: !values["no-check"],
      dryRun: values["dry-run"],
      http,
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
 * @returns The exit code: 0 on success (also when there was nothing to change), 1 when the
 *   person declined to write the changes.
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

  const scans = await Promise.all(
    clientConfigs({ env, cwd, os }).map((c) => scanClientConfig(c, { env, cwd })),
  );
  io.write(
    `${dryRun ? "Code Executor setup (dry run: nothing is written)" : "Code Executor setup"}\n\n`,
  );
  io.write(formatScans(scans, show));

  const client = await chooseClient(scans, options.client, io, show);
  const answers = {
    client,
    move: options.move,
    installSync: options.installSync,
    env,
    os,
    http: options.http,
  };
  let plan = planSetup(scans, answers);
  io.write(`\nClient: ${plan.target.client.label} (${show(plan.target.client.path)})\n`);
  if (options.move === undefined && plan.kept.length > 0 && ask) {
    const names = plan.kept.map((s) => s.name).join(", ");
    const move = await confirm(
      ask,
      `Move ${plural(plan.kept.length, "server")} (${names}) out of ${
        show(plan.target.client.path)
      } and behind Code Executor (into ${show(plan.own.client.path)})?`,
      true,
    );
    plan = planSetup(scans, { ...answers, move });
  }
  io.write(formatPlan(plan, show));
  if (dryRun || ask !== undefined) io.write(formatDiffs(plan, show));

  let wrote = false;
  if (plan.files.length === 0) {
    io.write(`\nNothing to change in the client configs.\n`);
  } else if (!dryRun) {
    const go = ask ? await confirm(ask, "Write these changes?", true) : true;
    if (!go) {
      io.write("Nothing was written.\n");
      return 1;
    }
    io.write("\n");
    for (const file of plan.files) await applyChange(file, io, show);
    wrote = true;
  }

  let install = options.installSync;
  if (install === undefined) {
    install = ask
      ? await confirm(ask, `Install a daily \`sync\` (${plan.sync.description})?`, false)
      : false;
  }
  await scheduleSync(
    plan.sync,
    { install, dryRun, enable: options.enableSync !== false },
    io,
    show,
  );
  if (dryRun) return 0;

  // Connect to what is now behind Code Executor, so that its tools are cached and wrapped.
  if (options.check !== false) await checkServers({ env, cwd, os }, io);
  const app = plan.target.client.app;
  if (options.http !== undefined) {
    io.write(
      `\nDone. Set ${HTTP_TOKEN_VARIABLE} to the bearer token of the server at ${options.http} where ${app} runs (not needed when the server runs without auth), then ${
        wrote ? `restart ${app}` : `${app} connects to it`
      }.\n`,
    );
    return 0;
  }
  io.write(
    wrote ? `\nDone. Restart ${app} so that it starts Code Executor.\n` : "\nDone.\n",
  );
  return 0;
}

/**
 * Checks the URL given with `--http`.
 *
 * @param raw The option's value.
 * @returns The URL, normalised.
 * @throws {TypeError} When it is not an absolute http or https URL.
 */
function endpointUrl(raw: string): string {
  let url: URL | undefined;
  try {
    url = new URL(raw);
  } catch {
    // Reported below.
  }
  if (!url || (url.protocol !== "http:" && url.protocol !== "https:")) {
    throw new TypeError(
      `Invalid --http "${raw}": expected the URL of a running serve --http, such as http://127.0.0.1:3333/mcp`,
    );
  }
  return url.href;
}

async function chooseClient(
  scans: ScannedConfig[],
  given: ClientId | undefined,
  io: SetupIO,
  show: ShowPath,
): Promise<ClientId> {
  if (given) return given;
  const best = defaultClient(scans);
  const ask = io.ask;
  if (!ask) {
    if (!best) {
      throw new TypeError(
        `No MCP client config found: pass --client (${CLIENT_IDS.join(", ")}) to create one`,
      );
    }
    return best;
  }
  const clients = scans.filter((s) => s.client.id !== "code-executor");
  const fallback = best ?? "claude-code";
  io.write("\nWhich client should start Code Executor?\n");
  clients.forEach((scan, i) => {
    const mark = scan.client.id === fallback ? " (default)" : "";
    io.write(`  ${i + 1}. ${scan.client.label}: ${show(scan.client.path)}${mark}\n`);
  });
  const fallbackNumber = clients.findIndex((c) => c.client.id === fallback) + 1;
  for (;;) {
    const answer = (await ask(`Client [${fallbackNumber}]: `)).trim();
    if (answer === "") return fallback;
    const byNumber = clients[Number(answer) - 1];
    if (/^\d+$/.test(answer) && byNumber) return byNumber.client.id as ClientId;
    const byName = clients.find((c) => c.client.id === answer.toLowerCase());
    if (byName) return byName.client.id as ClientId;
    io.write(
      `  "${answer}" is not one of the choices: type a number from 1 to ${clients.length}\n`,
    );
  }
}

async function scheduleSync(
  plan: DailySyncPlan,
  options: { install: boolean; dryRun: boolean; enable: boolean },
  io: SetupIO,
  show: ShowPath,
): Promise<void> {
  if (!options.install) {
    if (options.dryRun) {
      io.write(`\nDaily sync: not requested (--sync would install ${plan.description})\n`);
    }
    return;
  }
  io.write(`\nDaily sync: ${plan.description}\n`);
  if (options.dryRun) {
    for (const file of plan.files) io.write(`\n${show(file.path)}:\n${file.text}`);
    io.write(`\nthen: ${plan.commands.map(shellLine).join(" && ")}\n`);
    return;
  }
  const changed = plan.files.filter((file) => readTextOrUndefined(file.path) !== file.text);
  for (const file of changed) {
    await applyChange({ path: file.path, mode: 0o644, edit: () => file.text }, io, show);
  }
  if (plan.files.length > 0 && changed.length === 0) {
    io.write(`  already installed (${plan.files.map((f) => show(f.path)).join(", ")})\n`);
  } else {
    await activate(plan.commands, options.enable, io);
  }
}

async function checkServers(
  where: { env: Record<string, string>; cwd: string; os: typeof Deno.build.os },
  io: SetupIO,
): Promise<void> {
  const upstream = await discoverUpstreams(where);
  if (upstream.servers.length === 0) return;
  io.write("\nChecking the servers behind Code Executor:\n");
  const report = await sync({ cwd: where.cwd, progress: (line) => io.progress(`${line}\n`) });
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

async function applyChange(
  change: FileEdit,
  io: SetupIO,
  show: ShowPath,
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

function readTextOrUndefined(path: string): string | undefined {
  try {
    return Deno.readTextFileSync(path);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return undefined;
    throw error;
  }
}
