/**
 * `sync`: re-scan the configured servers, list every server's tools again into the schema
 * cache, and regenerate the typed wrappers. Also what `setup` installs to run daily: a systemd
 * user timer on Linux, a launchd agent on macOS, a Task Scheduler task on Windows.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { join } from "node:path";
import { loadSettings } from "../config/settings.ts";
import { discoverUpstreams } from "../config/upstream.ts";
import type { LaunchCommand } from "../config/self_launch.ts";
import {
  cacheDir,
  defaultWrappersDir,
  homeDir,
  launchAgentsDir,
  macLogsDir,
  systemdUserDir,
} from "../config/paths.ts";
import { createLogger, type Logger } from "../log.ts";
import { openHub } from "../upstream/hub.ts";
import { plural } from "../_util.ts";
import { generateWrappers } from "./wrappers.ts";

/** Options of {@linkcode sync}. */
export interface SyncOptions {
  /** Upstream config files given with `--config`. */
  configPaths?: string[];
  /** Where the wrappers go; `~/.code-executor/wrappers` by default. */
  out?: string;
  /** Skip the wrappers (only refresh the schema cache). */
  skipWrappers?: boolean;
  /** Progress lines (one per server as it answers); nothing when omitted. */
  progress?: (line: string) => void;
  /** Where problems are logged. */
  log?: Logger;
  /** The project directory (for `.mcp.json`); defaults to the cwd. */
  cwd?: string;
}

/** One server's outcome in a {@linkcode SyncReport}. */
export interface SyncedServer {
  /** The server's name. */
  name: string;
  /** Number of tools listed, when it answered. */
  tools?: number;
  /** Why it did not answer. */
  error?: string;
  /** Time to connect and list, in milliseconds. */
  ms: number;
}

/** What {@linkcode sync} did. */
export interface SyncReport {
  /** Every configured server, sorted by name. */
  servers: SyncedServer[];
  /** Entries that could not be used, as messages. */
  broken: string[];
  /** Wrapper files written and left as they were, when wrappers were generated. */
  wrappers?: { written: string[]; unchanged: string[] };
  /** Why the wrappers could not be generated. */
  wrappersError?: string;
}

/**
 * Discovers the servers as `serve` does, connects to each (in parallel), lists its tools into
 * the on-disk schema cache that `serve` loads, and regenerates the wrappers. A server that fails
 * is reported and does not stop the others.
 *
 * @param options Config files, wrapper directory and progress output.
 * @returns What was refreshed.
 */
export async function sync(options: SyncOptions = {}): Promise<SyncReport> {
  const log = options.log ?? createLogger("error");
  const progress = options.progress ?? (() => {});
  const { settings } = await loadSettings();
  const upstream = await discoverUpstreams({
    configPaths: options.configPaths ?? [],
    cwd: options.cwd,
  });
  const report: SyncReport = {
    servers: [],
    broken: upstream.broken.map((b) => b.error),
  };
  const names = upstream.servers.map((s) => s.name);
  const hub = await openHub(upstream, settings, { log, cacheDir: cacheDir() });
  try {
    if (names.length > 0) {
      progress(
        `Connecting to ${plural(names.length, "server")}: ${names.join(", ")}`,
      );
    }
    let done = 0;
    await Promise.all(names.map(async (name) => {
      const started = performance.now();
      // refresh() lists even when the cache already has the server, and saves the cache.
      await hub.catalog.refresh(name);
      const ms = Math.round(performance.now() - started);
      const summary = hub.catalog.summary().find((s) => s.name === name);
      const entry: SyncedServer = { name, ms };
      if (summary?.tools !== undefined && summary.error === undefined) entry.tools = summary.tools;
      else entry.error = summary?.error ?? "no tools listed";
      report.servers.push(entry);
      done++;
      progress(
        `  [${done}/${names.length}] ${name}: ${
          entry.error === undefined ? `${entry.tools} tools` : `failed: ${entry.error}`
        } (${(ms / 1000).toFixed(1)} s)`,
      );
    }));
    report.servers.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    if (!options.skipWrappers) {
      const out = options.out ?? defaultWrappersDir();
      try {
        // The connections just listed are reused: no server is started a second time.
        const generated = await generateWrappers({ out, hub, log });
        report.wrappers = { written: generated.written, unchanged: generated.unchanged };
        progress(
          `Wrappers in ${out}: ${report.wrappers.written.length} written, ${report.wrappers.unchanged.length} unchanged`,
        );
      } catch (error) {
        report.wrappersError = (error as Error).message;
        progress(`Cannot generate the wrappers: ${report.wrappersError}`);
      }
    }
  } finally {
    await hub.close();
  }
  return report;
}

/**
 * The `sync` command line: `sync [--config PATH]... [--out DIR] [--no-wrappers]`. Progress
 * goes to stderr, the summary to stdout.
 *
 * @param args The arguments after `sync`.
 * @returns The exit code: 0 when every server answered, 1 otherwise.
 * @throws {TypeError} For an unknown option.
 */
export async function syncCommand(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      config: { type: "string", multiple: true },
      out: { type: "string" },
      "no-wrappers": { type: "boolean" },
    },
  });
  if (positionals.length > 0) {
    throw new TypeError(`Unexpected argument "${positionals[0]}" for sync`);
  }
  const encoder = new TextEncoder();
  const report = await sync({
    configPaths: values.config ?? [],
    out: values.out,
    skipWrappers: values["no-wrappers"],
    progress: (line) => Deno.stderr.writeSync(encoder.encode(`${line}\n`)),
  });
  const ok = report.servers.filter((s) => s.error === undefined);
  const lines = [
    `Synced ${ok.length} of ${report.servers.length} servers` +
    (report.servers.length ? `: ${ok.map((s) => `${s.name} (${s.tools} tools)`).join(", ")}` : ""),
  ];
  for (const s of report.servers) if (s.error !== undefined) lines.push(`  ${s.name}: ${s.error}`);
  for (const message of report.broken) lines.push(`  ${message}`);
  await Deno.stdout.write(encoder.encode(lines.join("\n") + "\n"));
  return ok.length === report.servers.length && report.broken.length === 0 ? 0 : 1;
}

/** A file a daily-sync schedule consists of. */
export interface ScheduleFile {
  /** Absolute path. */
  path: string;
  /** Contents. */
  text: string;
}

/** How to run `sync` once a day on one operating system. */
export interface DailySyncPlan {
  /** What it is, for people ("a systemd user timer"). */
  description: string;
  /** Files to write. */
  files: ScheduleFile[];
  /** Commands that activate it, to run after the files are written. */
  commands: string[][];
}

/** The systemd timer's unit name. */
export const SYSTEMD_TIMER = "code-executor-sync.timer";
const SYSTEMD_SERVICE = "code-executor-sync.service";
const LAUNCHD_LABEL = "dev.code-executor.sync";
const SCHTASKS_NAME = "Code Executor sync";

/**
 * Describes the daily sync for an operating system: a systemd user timer (service + timer under
 * `$XDG_CONFIG_HOME/systemd/user`) on Linux, a launchd agent in `~/Library/LaunchAgents` on
 * macOS, a `schtasks /Create` command on Windows.
 *
 * @param os The operating system.
 * @param options The `sync` command line and the environment (`HOME`, `XDG_CONFIG_HOME`).
 * @returns The files and commands.
 * @throws {TypeError} When no home directory is known.
 */
export function dailySyncPlan(
  os: typeof Deno.build.os,
  options: { launch: LaunchCommand; env: Record<string, string> },
): DailySyncPlan {
  const { launch, env } = options;
  if (!homeDir(env)) {
    throw new TypeError("Cannot plan the daily sync: HOME is not set; set HOME (or USERPROFILE)");
  }
  if (os === "darwin") {
    const path = join(launchAgentsDir(env)!, `${LAUNCHD_LABEL}.plist`);
    const args = [launch.command, ...launch.args]
      .map((arg) => `    <string>${xmlEscape(arg)}</string>`).join("\n");
    const variables = Object.entries(launch.env ?? {}).map(([name, value]) =>
      `    <key>${xmlEscape(name)}</key>\n    <string>${xmlEscape(value)}</string>\n`
    ).join("");
    const text = `<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
  <key>Label</key>
  <string>${LAUNCHD_LABEL}</string>
  <key>ProgramArguments</key>
  <array>
${args}
  </array>
${
      variables && `  <key>EnvironmentVariables</key>\n  <dict>\n${variables}  </dict>\n`
    }  <key>StartCalendarInterval</key>
  <dict>
    <key>Hour</key>
    <integer>9</integer>
    <key>Minute</key>
    <integer>0</integer>
  </dict>
  <key>StandardErrorPath</key>
  <string>${xmlEscape(join(macLogsDir(env)!, "code-executor-sync.log"))}</string>
</dict>
</plist>
`;
    return {
      description: "a launchd agent",
      files: [{ path, text }],
      commands: [["launchctl", "load", "-w", path]],
    };
  }
  if (os === "windows") {
    const command = [launch.command, ...launch.args].map(windowsQuote).join(" ");
    return {
      description: "a Task Scheduler task",
      files: [],
      commands: [[
        "schtasks",
        "/Create",
        "/F",
        "/SC",
        "DAILY",
        "/ST",
        "09:00",
        "/TN",
        SCHTASKS_NAME,
        "/TR",
        command,
      ]],
    };
  }
  const dir = systemdUserDir(env)!;
  const execStart = [launch.command, ...launch.args].map(systemdQuote).join(" ");
  const environment = Object.entries(launch.env ?? {})
    .map(([name, value]) => `Environment=${systemdQuote(`${name}=${value}`)}\n`).join("");
  return {
    description: "a systemd user timer",
    files: [
      {
        path: join(dir, SYSTEMD_SERVICE),
        text: `[Unit]
Description=Code Executor: refresh MCP server schemas and wrappers

[Service]
Type=oneshot
${environment}ExecStart=${execStart}
`,
      },
      {
        path: join(dir, SYSTEMD_TIMER),
        text: `[Unit]
Description=Run code-executor sync daily

[Timer]
OnCalendar=daily
Persistent=true
RandomizedDelaySec=1h

[Install]
WantedBy=timers.target
`,
      },
    ],
    commands: [
      ["systemctl", "--user", "daemon-reload"],
      ["systemctl", "--user", "enable", "--now", SYSTEMD_TIMER],
    ],
  };
}

/**
 * Quotes a command for showing it to a person to paste into a POSIX shell.
 *
 * @param argv The command and its arguments.
 * @returns One line.
 */
export function shellLine(argv: string[]): string {
  return argv.map((arg) =>
    /^[A-Za-z0-9_./:=@%+,-]+$/.test(arg) ? arg : `'${arg.replaceAll("'", `'\\''`)}'`
  )
    .join(" ");
}

function systemdQuote(arg: string): string {
  const escaped = arg.replaceAll("%", "%%");
  return /^[A-Za-z0-9_./:=@+,-]+$/.test(escaped)
    ? escaped
    : `"${escaped.replaceAll("\\", "\\\\").replaceAll('"', '\\"')}"`;
}

function windowsQuote(arg: string): string {
  return /^[A-Za-z0-9_./:=@\\+,-]+$/.test(arg) ? arg : `"${arg.replaceAll('"', '\\"')}"`;
}

function xmlEscape(text: string): string {
  return text.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;");
}
