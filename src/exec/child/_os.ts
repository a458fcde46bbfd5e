/**
 * What the host needs of the operating system to watch and stop its children, where that is not
 * the same everywhere: resident memory and threads from Linux's `/proc`, stop and continue
 * signals (none on Windows), and the processes a dead host left. Elsewhere each is a no-op or
 * reports that it cannot tell.
 *
 * @module
 */
import { setPriority } from "node:os";
import type { Logger } from "../../log.ts";

/** Whether `/proc` describes the processes (Linux). */
export const HAS_PROC: boolean = Deno.build.os === "linux";

/**
 * Reads a process's resident memory.
 *
 * @param pid The process.
 * @returns Its resident set in MB, or undefined when it cannot be read (gone, or no `/proc`).
 */
export async function residentMb(pid: number): Promise<number | undefined> {
  try {
    const statm = await Deno.readTextFile(`/proc/${pid}/statm`);
    return (Number(statm.split(" ")[1]) * 4096) / (1024 * 1024);
  } catch {
    return undefined;
  }
}

/**
 * Reads the names of a process's threads (Linux), as the kernel reports them (`comm`, at most 15
 * characters).
 *
 * @param pid The process.
 * @returns The names, or undefined when they cannot be read (gone, or no `/proc`).
 */
export async function threadNames(pid: number): Promise<string[] | undefined> {
  if (!HAS_PROC) return undefined;
  try {
    const names: string[] = [];
    for await (const entry of Deno.readDir(`/proc/${pid}/task`)) {
      // A thread that ends meanwhile has no name to report.
      const comm = await Deno.readTextFile(`/proc/${pid}/task/${entry.name}/comm`).catch(() => "");
      if (comm) names.push(comm.trimEnd());
    }
    return names;
  } catch {
    return undefined;
  }
}

/**
 * Lowers the priority of the threads of a process whose name starts with `namePrefix` (Linux);
 * best effort, since the process or a thread may already be gone.
 *
 * @param pid The process.
 * @param options The thread name's prefix and the nice value to give them.
 */
export function lowerThreadPriority(
  pid: number,
  options: { namePrefix: string; nice: number },
): void {
  if (!HAS_PROC) return;
  (async () => {
    for await (const entry of Deno.readDir(`/proc/${pid}/task`)) {
      const comm = await Deno.readTextFile(`/proc/${pid}/task/${entry.name}/comm`).catch(() => "");
      if (!comm.startsWith(options.namePrefix)) continue;
      try {
        setPriority(Number(entry.name), options.nice);
      } catch {
        // The thread or the process has exited.
      }
    }
  })().catch(() => {});
}

/**
 * Stops (SIGSTOP) or continues (SIGCONT) a process. Does nothing on Windows, which has neither.
 *
 * @param process The child.
 * @param signal Which.
 */
export function stopOrContinue(process: Deno.ChildProcess, signal: "SIGSTOP" | "SIGCONT"): void {
  if (Deno.build.os === "windows") return;
  try {
    process.kill(signal);
  } catch {
    // Already gone.
  }
}

/**
 * Tells whether a process exists.
 *
 * @param pid The process.
 * @returns Whether `/proc` has it; false without `/proc`.
 */
export function processExists(pid: number): Promise<boolean> {
  return Deno.stat(`/proc/${pid}`).then(() => true, () => false);
}

/**
 * Kills the processes whose working directory is inside one of `dirs`. A child notices that its
 * host died when its stdin ends, but a session's child that the host stopped (SIGSTOP) between
 * two runs cannot: it would stay stopped, holding its memory, until something kills it.
 *
 * @param dirs Directories, as the kernel reports them (resolved).
 * @param log Where each kill is reported.
 */
export async function killProcessesIn(dirs: string[], log: Logger): Promise<void> {
  try {
    for await (const entry of Deno.readDir("/proc")) {
      if (!/^\d+$/.test(entry.name)) continue;
      const cwd = await Deno.readLink(`/proc/${entry.name}/cwd`).catch(() => "");
      if (!dirs.some((dir) => cwd.startsWith(`${dir}/`))) continue;
      try {
        Deno.kill(Number(entry.name), "SIGKILL");
        log.debug(`Killed sandbox process ${entry.name}, left behind by a host that died`);
      } catch {
        // It ended meanwhile.
      }
    }
  } catch {
    // Without /proc there is nothing to find.
  }
}
