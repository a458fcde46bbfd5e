/**
 * The third-party programs the tests run (the npm MCP servers, the conformance suite, the
 * Inspector CLI, oidc-provider): the Deno config they run under, and a run that survives a
 * first-run hang.
 *
 * `third_party/deno.json` maps, and `third_party/deno.lock` locks, the npm packages that only tests
 * use. They stay out of the project's `deno.json` and `deno.lock` because a `deno run` installs
 * every package its lockfile names, reachable or not: with them in the project's lock, a user's
 * first `deno task start` installed 146 npm packages instead of 26 (measured with an empty
 * `DENO_DIR`). A test-only package run from the repository without this config would be written
 * into the project's lock, so every Deno run of one passes {@linkcode THIRD_PARTY_CONFIG}.
 *
 * @module
 */
import { fileURLToPath } from "node:url";
import { decodeOutput, pipedCommand } from "./_command.ts";

/** `tests/third_party/deno.json`, for `deno run --config` of a test-only npm package. */
export const THIRD_PARTY_CONFIG = fileURLToPath(new URL("third_party/deno.json", import.meta.url));

/** A finished run: exit code and output. */
export interface ThirdPartyRun {
  /** The exit code. */
  code: number;
  /** Everything printed on stdout. */
  stdout: string;
  /** Everything printed on stderr. */
  stderr: string;
}

/** Where the first-run hang and its workaround are written up. */
const HANG_DOC = "docs/deno-first-run-hang.md";

/** Options for {@linkcode runThirdParty}. */
export interface ThirdPartyRunOptions {
  /** What runs, for messages: `the conformance suite (list)`. */
  name: string;
  /** The working directory. */
  cwd?: string;
  /** Environment variables. */
  env?: Record<string, string>;
  /** Start from an empty environment plus `env`. */
  clearEnv?: boolean;
  /**
   * How long the first attempt may run. Past it the run is taken for a first-run hang, killed and
   * retried once.
   */
  firstAttemptMs: number;
  /**
   * Ends the first attempt early when its processes have used no CPU for this long (Linux): a
   * deadlocked `deno` sits at exactly zero, a download does not. Only for a program that does its
   * own work: a client waiting for a server uses no CPU either.
   */
  stallMs?: number;
  /** How long the retry may run. */
  retryMs: number;
}

/** How a first attempt ended when it did not end by itself. */
interface Stopped {
  reason: string;
  run: ThirdPartyRun;
}

/**
 * Runs a third-party program whose first run may hang: a short first attempt, then one retry with
 * a longer bound, and a message naming the cause on stderr when the retry was needed.
 *
 * The hang this is for: on Deno 2.8.2 to 2.9.6, the first `deno run --no-config` of the
 * conformance CLI after `deno cache` deadlocks while it loads CommonJS modules
 * (`docs/deno-first-run-hang.md`); the killed attempt leaves Deno's analyses cached, so the retry
 * runs. It is bounded the same way for any third-party program whose first run may hang.
 *
 * @param command The program.
 * @param args Its arguments.
 * @param options Bounds, environment and the name for messages.
 * @returns The exit code and output of the attempt that ended by itself.
 * @throws {Error} When the retry did not end within `retryMs` either.
 */
export async function runThirdParty(
  command: string,
  args: string[],
  options: ThirdPartyRunOptions,
): Promise<ThirdPartyRun> {
  const first = await attempt(command, args, options, options.firstAttemptMs, options.stallMs);
  if (!("reason" in first)) return first;
  const cause = `${options.name}: its first attempt ${first.reason}; retrying once. ` +
    `A first \`deno run\` of an npm CLI that was fetched but never run can deadlock in Deno ` +
    `2.8.2 to 2.9.6 (${HANG_DOC}); the killed attempt leaves what it analysed cached.`;
  console.error(cause);
  const second = await attempt(command, args, options, options.retryMs, undefined);
  if (!("reason" in second)) return second;
  throw new Error(
    `${cause}\nThe retry ${second.reason}, too: this is not the known first-run hang, or the ` +
      `machine is too busy for the bounds (firstAttemptMs ${options.firstAttemptMs}, retryMs ` +
      `${options.retryMs}).\nFirst attempt: ${render(first.run)}\nRetry: ${render(second.run)}`,
  );
}

function render(run: ThirdPartyRun): string {
  return `exit code ${run.code}\nstdout:\n${run.stdout.slice(-4000)}\nstderr:\n${
    run.stderr.slice(-4000)
  }`;
}

async function attempt(
  command: string,
  args: string[],
  options: ThirdPartyRunOptions,
  limitMs: number,
  stallMs: number | undefined,
): Promise<ThirdPartyRun | Stopped> {
  const child = pipedCommand(command, args, options).spawn();
  const output = child.output();
  const started = Date.now();
  let reason: string | undefined;
  let lastTicks = -1;
  let idleSince = started;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const exited = output.then(() => true);
  try {
    while (reason === undefined) {
      const tick = new Promise<false>((resolve) => timer = setTimeout(() => resolve(false), 1000));
      if (await Promise.race([exited, tick])) break;
      const now = Date.now();
      const ticks = treeCpuTicks(child.pid);
      if (ticks !== lastTicks) {
        lastTicks = ticks;
        idleSince = now;
      }
      if (now - started >= limitMs) {
        reason = `did not end in ${Math.round(limitMs / 1000)} s (${describeTree(child.pid)})`;
      } else if (stallMs !== undefined && ticks >= 0 && now - idleSince >= stallMs) {
        reason = `used no CPU for ${Math.round(stallMs / 1000)} s, ${
          Math.round((now - started) / 1000)
        } s after its start (${describeTree(child.pid)})`;
      }
    }
  } finally {
    clearTimeout(timer);
  }
  if (reason !== undefined) await stop(child, exited);
  const run = decodeOutput(await output);
  return reason === undefined ? run : { reason, run };
}

/** SIGTERM to the program and what it started, then SIGKILL to what is left after 5 s. */
async function stop(child: Deno.ChildProcess, exited: Promise<boolean>): Promise<void> {
  const tree = descendants(child.pid);
  for (const signal of ["SIGTERM", "SIGKILL"] as const) {
    for (const pid of [child.pid, ...tree]) {
      try {
        Deno.kill(pid, signal);
      } catch {
        // Already gone.
      }
    }
    let timer: ReturnType<typeof setTimeout> | undefined;
    const grace = new Promise<false>((resolve) => timer = setTimeout(() => resolve(false), 5000));
    const gone = await Promise.race([exited, grace]);
    clearTimeout(timer);
    if (gone) return;
  }
}

/** Pids below `root`, from `/proc` (empty elsewhere). */
function descendants(root: number): number[] {
  const parents = new Map<number, number[]>();
  try {
    for (const entry of Deno.readDirSync("/proc")) {
      if (!/^\d+$/.test(entry.name)) continue;
      const stat = readStat(Number(entry.name));
      if (!stat) continue;
      const list = parents.get(stat.ppid) ?? [];
      list.push(Number(entry.name));
      parents.set(stat.ppid, list);
    }
  } catch {
    return [];
  }
  const out: number[] = [];
  const queue = [root];
  while (queue.length > 0) {
    for (const pid of parents.get(queue.shift()!) ?? []) {
      out.push(pid);
      queue.push(pid);
    }
  }
  return out;
}

/** `/proc/<pid>/stat`'s parent, state and user+system CPU ticks; undefined when unreadable. */
function readStat(pid: number): { ppid: number; state: string; ticks: number } | undefined {
  try {
    const text = Deno.readTextFileSync(`/proc/${pid}/stat`);
    // The command name (field 2) may hold spaces and parentheses: fields count from its end.
    const fields = text.slice(text.lastIndexOf(")") + 2).split(" ");
    return {
      state: fields[0],
      ppid: Number(fields[1]),
      ticks: Number(fields[11]) + Number(fields[12]),
    };
  } catch {
    return undefined;
  }
}

/** CPU ticks of a process and its descendants; -1 when `/proc` cannot tell. */
function treeCpuTicks(root: number): number {
  const own = readStat(root);
  if (!own) return -1;
  return descendants(root).reduce((sum, pid) => sum + (readStat(pid)?.ticks ?? 0), own.ticks);
}

/** What the processes were doing: state, CPU time and kernel wait channel of each. */
function describeTree(root: number): string {
  const parts: string[] = [];
  for (const pid of [root, ...descendants(root)]) {
    const stat = readStat(pid);
    if (!stat) continue;
    let wchan = "";
    try {
      wchan = Deno.readTextFileSync(`/proc/${pid}/wchan`).trim();
    } catch {
      // Not Linux, or gone.
    }
    parts.push(
      `pid ${pid} state ${stat.state}, ${stat.ticks} CPU ticks${wchan ? `, in ${wchan}` : ""}`,
    );
  }
  return parts.length > 0 ? parts.join("; ") : "no /proc to look at";
}
