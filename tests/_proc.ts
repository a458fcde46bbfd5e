/**
 * Processes as `/proc` shows them (state, CPU time, environment, sandbox children), the sandbox
 * directories a server leaves in its temp directory, and waiting for either to change.
 *
 * @module
 */
import { assert } from "./_assert.ts";
import { CHILD_DIR_PREFIX } from "../src/exec/child/process.ts";

/** A process as `/proc/<pid>/stat` shows it. */
export interface ProcessStat {
  /** Its state: `R` running, `S` sleeping, `T` stopped, `Z` exited but not collected, … */
  state: string;
  /** The CPU time it has used, user plus system over all its threads, in clock ticks. */
  cpuTicks: number;
}

/**
 * Reads a process's state and the CPU time it has used.
 *
 * @param pid The process.
 * @returns Its state and CPU time.
 * @throws {Deno.errors.NotFound} When the process has left the process table.
 */
export async function processStat(pid: number): Promise<ProcessStat> {
  const stat = await Deno.readTextFile(`/proc/${pid}/stat`);
  // The command name (field 2) is in parentheses and may hold spaces: count after it.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return { state: fields[0], cpuTicks: Number(fields[11]) + Number(fields[12]) };
}

/** One thread of a process, as `/proc/<pid>/task/<tid>/stat` shows it. */
export interface ThreadState {
  /** Its name (`comm`): `worker-1` is the Worker that runs Python, `V8 DefaultWorke` V8's. */
  name: string;
  /** Its state, as in {@linkcode ProcessStat}. */
  state: string;
}

/**
 * Reads the state of every thread of a process.
 *
 * @param pid The process.
 * @returns Its threads; none once it has gone.
 */
export async function threadStates(pid: number): Promise<ThreadState[]> {
  const threads: ThreadState[] = [];
  try {
    for await (const entry of Deno.readDir(`/proc/${pid}/task`)) {
      try {
        const stat = await Deno.readTextFile(`/proc/${pid}/task/${entry.name}/stat`);
        const name = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
        threads.push({ name, state: stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0] });
      } catch {
        // The thread ended while we looked.
      }
    }
  } catch {
    // The process has gone.
  }
  return threads;
}

/**
 * Whether a process is idle: looked at a few times, once none of its threads was running. A
 * thread that spins is runnable (`R`) at every look, even while the scheduler runs another; an
 * idle process's threads sleep (`S`) in a wait, or are stopped (`T`). This is a state the kernel
 * reports, not a measure of CPU time. On a loaded machine an idle process's helper threads (GC,
 * compilers) are runnable now and then too: 60 looks leave room for one quiet moment.
 *
 * @param pid The process.
 * @param options `looks` (60 by default) taken `everyMs` apart (50 by default).
 * @returns Whether one look found no thread in `R`; false once the process has gone.
 */
export async function seenIdle(
  pid: number,
  options: { looks?: number; everyMs?: number } = {},
): Promise<boolean> {
  for (let look = 0; look < (options.looks ?? 60); look++) {
    if (look > 0) await new Promise((resolve) => setTimeout(resolve, options.everyMs ?? 50));
    const threads = await threadStates(pid);
    if (threads.length > 0 && threads.every((thread) => thread.state !== "R")) return true;
  }
  return false;
}

/**
 * Measures the CPU time processes use over the next while.
 *
 * @param pids The processes.
 * @param ms How long to watch them.
 * @returns The clock ticks each used in that time, in order.
 */
export async function cpuTicksOver(pids: number[], ms: number): Promise<number[]> {
  const ticks = (pid: number) => processStat(pid).then((stat) => stat.cpuTicks, () => 0);
  const start = await Promise.all(pids.map(ticks));
  await new Promise((resolve) => setTimeout(resolve, ms));
  const end = await Promise.all(pids.map(ticks));
  // A process that ended in the window reads 0: count only what it used before.
  return end.map((used, i) => Math.max(0, used - start[i]));
}

/**
 * Whether a process is running: it exists and is not a zombie (which has exited; only its parent
 * has not collected it yet).
 *
 * @param pid The process.
 * @returns Whether it runs.
 */
export function isAlive(pid: number): Promise<boolean> {
  return processStat(pid).then((stat) => stat.state !== "Z", () => false);
}

/**
 * Keeps the processes that still run.
 *
 * @param pids The processes.
 * @returns Those of them that {@linkcode isAlive} finds running, in order.
 */
export async function livePids(pids: number[]): Promise<number[]> {
  const alive = await Promise.all(pids.map(isAlive));
  return pids.filter((_, i) => alive[i]);
}

/**
 * Whether a process has left the process table: it exited and its parent collected it.
 *
 * @param pid The process.
 * @returns Whether it is gone.
 */
export function processGone(pid: number): Promise<boolean> {
  return Deno.stat(`/proc/${pid}`).then(() => false, () => true);
}

/**
 * Waits until a process no longer runs.
 *
 * @param pid The process.
 * @param timeoutMs How long to wait.
 * @returns Whether it exited in time.
 */
export function waitForExit(pid: number, timeoutMs = 5_000): Promise<boolean> {
  return eventually(async () => !(await isAlive(pid)), timeoutMs);
}

/**
 * Lists live processes (other than this one) whose environment has exactly this `NAME=value`:
 * a server's descendants carry its TMPDIR or HOME.
 *
 * @param entry The `NAME=value` entry.
 * @returns Their pids.
 */
export async function pidsWithEnv(entry: string): Promise<number[]> {
  const pids: number[] = [];
  for await (const dir of Deno.readDir("/proc")) {
    if (!/^\d+$/.test(dir.name) || Number(dir.name) === Deno.pid) continue;
    try {
      const environ = new TextDecoder().decode(await Deno.readFile(`/proc/${dir.name}/environ`));
      if (environ.split("\0").includes(entry) && await isAlive(Number(dir.name))) {
        pids.push(Number(dir.name));
      }
    } catch {
      // The process ended while we looked, or is not ours.
    }
  }
  return pids;
}

/**
 * Lists live sandbox processes (TypeScript runners and Python hosts) whose command line or working
 * directory names the given marker.
 *
 * @param marker A string the process's command line or working directory must contain.
 * @param runners Which sandbox entry points count.
 * @returns Their pids.
 */
export async function sandboxPids(
  marker: string,
  runners: string[] = ["ts_runner.ts", "py_host.ts"],
): Promise<number[]> {
  const pids: number[] = [];
  for await (const entry of Deno.readDir("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    try {
      const cmdline = await Deno.readTextFile(`/proc/${entry.name}/cmdline`);
      if (!runners.some((r) => cmdline.includes(r))) continue;
      // Python children may only read the Pyodide files, so their command line does not name
      // their directory; their working directory (the private workspace) does.
      const cwd = await Deno.readLink(`/proc/${entry.name}/cwd`).catch(() => "");
      if (cmdline.includes(marker) || cwd.includes(marker)) pids.push(Number(entry.name));
    } catch {
      // The process ended while we looked.
    }
  }
  return pids;
}

/**
 * Lists what is left in a directory.
 *
 * @param dir The directory.
 * @returns Entry names.
 */
export async function leftovers(dir: string): Promise<string[]> {
  const names: string[] = [];
  try {
    for await (const entry of Deno.readDir(dir)) names.push(entry.name);
  } catch {
    // Already removed.
  }
  return names;
}

/**
 * Lists the sandbox children's private directories in a server's temp directory.
 *
 * @param tempDir The temp directory (TMPDIR, or `sandbox.tempDir`).
 * @returns Their names.
 */
export async function sandboxDirs(tempDir: string): Promise<string[]> {
  return (await leftovers(tempDir)).filter((name) => name.startsWith(CHILD_DIR_PREFIX));
}

/**
 * Polls until `check` returns true or the time is up.
 *
 * @param check The condition.
 * @param timeoutMs How long to wait.
 * @returns Whether the condition held.
 */
export async function eventually(
  check: () => Promise<boolean>,
  timeoutMs = 5_000,
): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return await check();
}

/**
 * Waits for a process to write its pid to a file (an upstream fixture does at start), and reads
 * it.
 *
 * @param file The pid file.
 * @param timeoutMs How long to wait for it.
 * @returns The pid.
 * @throws {AssertionError} When the file is not written in time.
 */
export async function readPidFile(file: string, timeoutMs = 15_000): Promise<number> {
  assert(
    await eventually(() => Deno.stat(file).then(() => true, () => false), timeoutMs),
    `${file} was never written`,
  );
  return Number(await Deno.readTextFile(file));
}

/**
 * Asserts that no sandbox process and no sandbox directory of a server is left in its temp
 * directory, waiting up to `timeoutMs` for them to go.
 *
 * @param tempDir The server's temp directory.
 * @param timeoutMs How long they may take.
 * @throws {AssertionError} When something is still there.
 */
export async function assertNoSandboxes(tempDir: string, timeoutMs = 5_000): Promise<void> {
  const gone = await eventually(
    async () =>
      (await sandboxPids(tempDir)).length === 0 && (await sandboxDirs(tempDir)).length === 0,
    timeoutMs,
  );
  assert(
    gone,
    `left behind: pids ${await sandboxPids(tempDir)}, dirs ${await sandboxDirs(tempDir)}`,
  );
}

/**
 * Waits for a child process to exit, and kills it when it does not in time.
 *
 * @param child The process.
 * @param timeoutMs How long it may take.
 * @returns Its status, or undefined when it had to be killed.
 */
export async function exitOrKill(
  child: Deno.ChildProcess,
  timeoutMs = 10_000,
): Promise<Deno.CommandStatus | undefined> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const status = await Promise.race([
    child.status,
    new Promise<undefined>((resolve) => timer = setTimeout(() => resolve(undefined), timeoutMs)),
  ]);
  clearTimeout(timer);
  if (!status) child.kill("SIGKILL");
  return status;
}
