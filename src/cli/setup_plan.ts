/**
 * What `setup` will do, decided without asking anyone and without touching a file: from the
 * scanned client configs and the answers, which files change and into what, which servers move
 * behind Code Executor, which stay and why, and the daily sync. `setup.ts` asks the questions,
 * shows this plan and writes it.
 *
 * @module
 */
import {
  type ClientConfig,
  type ClientId,
  moveBlocker,
  type MoveBlockReason,
  type ScannedConfig,
  type ScannedServer,
  selfEntry,
  selfHttpEntry,
} from "../config/client_configs.ts";
import { type LaunchCommand, selfLaunchCommand } from "../config/self_launch.ts";
import { removeProperty, setProperty } from "../config/jsonc_edit.ts";
import { tildePath } from "../config/paths.ts";
import { canonicalJson, isPlainObject } from "../_util.ts";
import { type DailySyncPlan, dailySyncPlan } from "./sync.ts";

/** Options of {@linkcode planSetup}: the answers, and where and how Code Executor runs. */
export interface PlanSetupOptions {
  /** The client whose config gets the `code-executor` entry. */
  client: ClientId;
  /** Move the client's other servers behind Code Executor; default false. */
  move?: boolean;
  /** Install the daily sync; default false. */
  installSync?: boolean;
  /** Environment for `HOME` and friends; defaults to the process's. */
  env?: Record<string, string>;
  /** Operating system whose scheduler to use; defaults to `Deno.build.os`. */
  os?: typeof Deno.build.os;
  /** The command lines that start `serve` and `sync`; this program's by default. */
  launch?: { serve: LaunchCommand; sync: LaunchCommand };
  /**
   * The MCP endpoint of a running `serve --http`: the entry connects to it (with a bearer token
   * from `CODE_EXECUTOR_HTTP_TOKEN`) instead of starting Code Executor.
   */
  http?: string;
}

/** The `code-executor` entry in the client's config. */
export interface PlannedEntry {
  /** The entry's key: that of an existing entry for Code Executor, else `code-executor`. */
  name: string;
  /** Whether the entry is new, changes, or is already as it should be. */
  action: "add" | "update" | "unchanged";
  /**
   * The entry as it should be. Keys the user added to an existing entry stay too, except those of
   * the other transport when it changes (`command`, `args`, … for `url`, and the reverse).
   */
  value: Record<string, unknown>;
  /** How the client reaches Code Executor: the command line it starts, or the URL. */
  target: { launch: LaunchCommand } | { url: string };
  /** A stdio entry for Code Executor under another name, which the HTTP entry replaces. */
  replaces?: string;
}

/** Why a server stays in the client's config whatever the answers. */
export type StayReason =
  | MoveBlockReason
  /** Code Executor's own file already has a different entry of that name. */
  | "conflict"
  /** Code Executor's own file cannot be read or parsed. */
  | "own-unreadable";

/** A server that stays in the client's config, and why. */
export interface StayingServer {
  /** The entry's key. */
  name: string;
  /** The kind of reason. */
  reason: StayReason;
  /** The reason for people. */
  message: string;
}

/** A file the plan changes. */
export interface PlannedFile {
  /** Absolute path. */
  path: string;
  /** The text as scanned; undefined for a new file. */
  before: string | undefined;
  /** The text after the change. */
  after: string;
  /** Permission bits of a new file (an existing file keeps its own). */
  mode: number;
  /**
   * Makes the same change to any current text: clients rewrite their configs while they run, so
   * the change is applied again to what is on disk just before writing.
   */
  edit(text: string | undefined): string;
}

/** The daily sync, and whether to install it. */
export interface PlannedSync extends DailySyncPlan {
  /** Whether it is installed. */
  install: boolean;
}

/** What `setup` will do. */
export interface SetupPlan {
  /** The client's config, as scanned. */
  target: ScannedConfig;
  /** Code Executor's own upstream file, as scanned. */
  own: ScannedConfig;
  /** The `code-executor` entry. */
  entry: PlannedEntry;
  /** Servers that move into Code Executor's own file, in the client's order. */
  moving: ScannedServer[];
  /** Servers that could move but stay, because moving was not asked for. */
  kept: ScannedServer[];
  /** Servers that stay whatever the answer, with the reason. */
  staying: StayingServer[];
  /** The files that change, Code Executor's own file first; none when there is nothing to do. */
  files: PlannedFile[];
  /** The daily sync. */
  sync: PlannedSync;
}

/** The name Code Executor's own entry gets, and which discovery skips as itself. */
const SELF_NAME = "code-executor";

const OWN_TEMPLATE =
  `// MCP servers that Code Executor connects to (code-executor setup moves servers here).
// Same format as a client's config; \${VAR} references are expanded when Code Executor starts.
{
  "mcpServers": {}
}
`;

/**
 * Plans the setup of one client: the `code-executor` entry in its config, the servers that move
 * from it into Code Executor's own upstream file (entries with `${VAR}` references move as
 * written), those that stay (literal secrets, variables only the client fills in, disabled or
 * broken entries, a different entry of the same name already in Code Executor's file), and the
 * daily sync. Reads no file and asks nothing.
 *
 * @param scans Every client config and Code Executor's own file, as `scanClientConfig` read them.
 * @param options The client, the answers, the environment and the command lines.
 * @returns The plan.
 * @throws {TypeError} When the client's config cannot be parsed, when the scans lack the client
 *   or Code Executor's own file, or when no home directory is known.
 * @example
 * ```ts
 * const scans = await Promise.all(clientConfigs().map((c) => scanClientConfig(c)));
 * const plan = planSetup(scans, { client: "cursor", move: true });
 * for (const file of plan.files) console.log(file.path, file.after);
 * ```
 */
export function planSetup(scans: ScannedConfig[], options: PlanSetupOptions): SetupPlan {
  const env = options.env ?? Deno.env.toObject();
  const show = (path: string) => tildePath(path, env);
  const target = scans.find((s) => s.client.id === options.client);
  const own = scans.find((s) => s.client.id === "code-executor");
  if (!target || !own) {
    throw new TypeError(
      `Cannot plan the setup of "${options.client}": the scans lack ${
        target ? "Code Executor's own file" : "that client's config"
      }; scan every file of clientConfigs()`,
    );
  }
  if (target.error) {
    throw new TypeError(
      `Cannot set up ${target.client.label} until its config file is fixed: ${target.error}`,
    );
  }
  const launch = options.launch ??
    { serve: selfLaunchCommand("serve"), sync: selfLaunchCommand("sync") };
  const entry = plannedEntry(
    target,
    options.http === undefined
      ? { value: selfEntry(options.client, launch.serve), target: { launch: launch.serve } }
      : { value: selfHttpEntry(options.client, options.http), target: { url: options.http } },
  );
  const { movable, staying } = sortServers(target, own, show);
  const moving = options.move ? movable : [];
  const files = [
    ...(moving.length > 0 ? [ownFile(own, moving)] : []),
    targetFile(target, entry, moving),
  ].filter((file) => file.after !== file.before);
  const schedule = dailySyncPlan(options.os ?? Deno.build.os, { launch: launch.sync, env });
  return {
    target,
    own,
    entry,
    moving,
    kept: options.move ? [] : movable,
    staying,
    files,
    sync: { ...schedule, install: options.installSync === true },
  };
}

/**
 * Picks the client to set up when none is given: the one whose config has the most servers
 * (Code Executor itself aside), the first in `CLIENT_IDS` order on a tie.
 *
 * @param scans Every client config, as scanned; Code Executor's own file is ignored.
 * @returns The client, or undefined when no client config exists or can be read.
 */
export function defaultClient(scans: ScannedConfig[]): ClientId | undefined {
  const usable = (s: ScannedConfig) => s.servers.filter((x) => x.state !== "self").length;
  const found = scans.filter((s) => s.client.id !== "code-executor" && s.found && !s.error);
  const best = [...found].sort((a, b) => usable(b) - usable(a))[0];
  return best?.client.id as ClientId | undefined;
}

function plannedEntry(
  target: ScannedConfig,
  desired: Pick<PlannedEntry, "value" | "target">,
): PlannedEntry {
  // Discovery knows an HTTP entry for Code Executor by its name only (a URL does not say whose
  // it is), so that entry is always "code-executor"; a stdio one keeps the name it has.
  const self = target.servers.find((s) => s.state === "self")?.name;
  const name = "url" in desired.target ? SELF_NAME : self ?? SELF_NAME;
  const existing = target.servers.find((s) => s.name === name)?.raw;
  const action = existing === undefined
    ? "add"
    : entryEdits(existing, desired.value).length > 0
    ? "update"
    : "unchanged";
  const replaces = self !== undefined && self !== name ? self : undefined;
  return { name, action, ...desired, ...(replaces ? { replaces } : {}) };
}

function sortServers(
  target: ScannedConfig,
  own: ScannedConfig,
  show: (path: string) => string,
): { movable: ScannedServer[]; staying: StayingServer[] } {
  const ownEntries = new Map(own.servers.map((s) => [s.name, s.raw]));
  const movable: ScannedServer[] = [];
  const staying: StayingServer[] = [];
  for (const server of target.servers) {
    if (server.state === "self") continue;
    const blocker: { reason: StayReason; message: string } | undefined = own.error
      ? {
        reason: "own-unreadable",
        message: `${show(own.client.path)} cannot be read; fix it first: ${own.error}`,
      }
      : moveBlocker(server, target.client);
    if (blocker) staying.push({ name: server.name, ...blocker });
    else if (ownEntries.has(server.name) && !sameJson(ownEntries.get(server.name), server.raw)) {
      staying.push({
        name: server.name,
        reason: "conflict",
        message: `${show(own.client.path)} already has a different "${server.name}"`,
      });
    } else movable.push(server);
  }
  return { movable, staying };
}

function ownFile(own: ScannedConfig, moving: ScannedServer[]): PlannedFile {
  const present = new Set(own.servers.map((s) => s.name));
  const edit = (text: string | undefined) => {
    let out = text ?? OWN_TEMPLATE;
    // Each insertion goes first in its object: insert in reverse to keep the client's order.
    for (const server of [...moving].reverse()) {
      if (present.has(server.name)) continue;
      out = setProperty(out, ["mcpServers", server.name], server.raw);
    }
    return out;
  };
  // Like the user-level client configs the servers come from, the file is private to the user.
  return plannedFile(own.client, own.text, 0o600, edit);
}

function targetFile(
  target: ScannedConfig,
  entry: PlannedEntry,
  moving: ScannedServer[],
): PlannedFile {
  const { client } = target;
  const existing = target.servers.find((s) => s.name === entry.name)?.raw;
  const edits = entryEdits(existing, entry.value);
  const edit = (text: string | undefined) => {
    let out = text ?? "{}\n";
    for (const [path, value] of edits) {
      out = setProperty(out, [client.key, entry.name, ...path], value);
    }
    if (entry.replaces) out = removeProperty(out, [client.key, entry.replaces]);
    for (const server of moving) out = removeProperty(out, [...server.section, server.name]);
    return out;
  };
  // A project's file is meant to be committed and shared; a user's file is private.
  return plannedFile(client, target.text, client.project ? 0o644 : 0o600, edit);
}

function plannedFile(
  client: ClientConfig,
  before: string | undefined,
  mode: number,
  edit: (text: string | undefined) => string,
): PlannedFile {
  return { path: client.path, before, after: edit(before), mode, edit };
}

/** The keys that say how a client reaches a server, by transport. */
const STDIO_KEYS = ["command", "args", "env", "cwd"];
const REMOTE_KEYS = ["url", "serverUrl", "headers"];

/**
 * The edits that turn an existing entry into the desired one, keeping keys the user added. When
 * the transport changes, the entry is replaced whole: the other transport's keys go, and the
 * user's other keys (`disabled`, `timeout`, …) follow the desired ones.
 */
function entryEdits(
  existing: unknown,
  desired: Record<string, unknown>,
): Array<[string[], unknown]> {
  if (!isPlainObject(existing)) return [[[], desired]];
  const remote = REMOTE_KEYS.some((key) => key in desired);
  if ((remote ? STDIO_KEYS : REMOTE_KEYS).some((key) => key in existing)) {
    const transportKeys = new Set([...STDIO_KEYS, ...REMOTE_KEYS, "type"]);
    const kept = Object.entries(existing).filter(([key]) =>
      !transportKeys.has(key) && !(key in desired)
    );
    return [[[], { ...desired, ...Object.fromEntries(kept) }]];
  }
  return Object.entries(desired)
    .filter(([key, value]) => !sameJson(existing[key], value))
    .map(([key, value]) => [[key], value]);
}

function sameJson(a: unknown, b: unknown): boolean {
  return canonicalJson(a) === canonicalJson(b);
}
