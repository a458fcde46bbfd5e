/**
 * The machine a benchmark runs on and its processes, as `/proc` shows them: the load average,
 * CPU and versions, a process's memory, and its tree of descendants, reaped after a close.
 *
 * @module
 */
import { sleep } from "./_stats.ts";

export async function loadAverage(): Promise<string> {
  const text = await Deno.readTextFile("/proc/loadavg").catch(() => "");
  return text.split(" ").slice(0, 3).join(" ") || "unknown";
}

/** The machine a report was measured on. */
export interface MachineInfo {
  /** Logical CPUs. */
  nproc: number;
  /** The CPU's model name. */
  cpu: string;
  /** Deno's version. */
  deno: string;
  /** V8's version. */
  v8: string;
  /** The OS and its release. */
  os: string;
}

/** Describes this machine. */
export async function machineInfo(): Promise<MachineInfo> {
  const cpuinfo = await Deno.readTextFile("/proc/cpuinfo").catch(() => "");
  return {
    nproc: navigator.hardwareConcurrency,
    cpu: /^model name\s*:\s*(.+)$/m.exec(cpuinfo)?.[1]?.trim() ?? "unknown",
    deno: Deno.version.deno,
    v8: Deno.version.v8,
    os: `${Deno.build.os} ${Deno.osRelease()}`,
  };
}

/** The machine a report was measured on, and how busy it was meanwhile. */
export interface MachineReport extends MachineInfo {
  /** {@linkcode loadAverage} before the measurements. */
  loadBefore: string;
  /** {@linkcode loadAverage} after them. */
  loadAfter: string;
}

/**
 * Describes this machine once the measurements are done.
 *
 * @param loadBefore {@linkcode loadAverage} as it was before them.
 * @returns The machine, with the load average before and now.
 */
export async function machineReport(loadBefore: string): Promise<MachineReport> {
  return { ...await machineInfo(), loadBefore, loadAfter: await loadAverage() };
}

/**
 * The machine as the reports' first line names it.
 *
 * @param machine The machine.
 * @returns `N CPUs, model, OS, Deno x (V8 y); load average … before, … after`.
 */
export function machineText(machine: MachineReport): string {
  return `${machine.nproc} CPUs, ${machine.cpu}, ${machine.os}, Deno ${machine.deno} ` +
    `(V8 ${machine.v8}); load average ${machine.loadBefore} before, ${machine.loadAfter} after`;
}

/**
 * Reads the `kB` fields of `/proc/<pid>/status` (VmRSS, RssAnon, VmHWM, …).
 *
 * @param pid The process.
 * @returns Field name → MB.
 * @throws {Error} When the process has gone.
 */
export async function statusMb(pid: number): Promise<Record<string, number>> {
  const status = await Deno.readTextFile(`/proc/${pid}/status`);
  const fields: Record<string, number> = {};
  for (const match of status.matchAll(/^(\w+):\s+(\d+)\s+kB$/gm)) {
    fields[match[1]] = Number(match[2]) / 1024;
  }
  return fields;
}

/**
 * Reads a process's CPU time so far: user and system, all its threads.
 *
 * @param pid The process; `self` for this one.
 * @returns Milliseconds (at the kernel's 10 ms tick).
 * @throws {Error} When the process has gone.
 */
export async function cpuMs(pid: number | "self"): Promise<number> {
  const stat = await Deno.readTextFile(`/proc/${pid}/stat`);
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/**
 * Reads a process's resident set size.
 *
 * @param pid The process.
 * @returns VmRSS in MB.
 * @throws {Error} When the process has gone.
 */
export async function residentMb(pid: number): Promise<number> {
  const rss = (await statusMb(pid)).VmRSS;
  if (rss === undefined) throw new Error(`Cannot read VmRSS of process ${pid}: no VmRSS line`);
  return rss;
}

/**
 * Lists a process's direct children.
 *
 * @param pid The process.
 * @returns Their pids; none once it has gone.
 */
export async function childPids(pid: number): Promise<number[]> {
  const pids: number[] = [];
  try {
    for await (const task of Deno.readDir(`/proc/${pid}/task`)) {
      const text = await Deno.readTextFile(`/proc/${pid}/task/${task.name}/children`)
        .catch(() => "");
      pids.push(...text.split(/\s+/).filter(Boolean).map(Number));
    }
  } catch {
    // The process exited while we looked.
  }
  return pids;
}

/**
 * Lists a process's descendants, breadth first.
 *
 * @param pid The process.
 * @returns Their pids.
 */
async function descendantPids(pid: number): Promise<number[]> {
  const found: number[] = [];
  const queue = [pid];
  while (queue.length > 0) {
    for (const child of await childPids(queue.shift()!)) {
      found.push(child);
      queue.push(child);
    }
  }
  return found;
}

/** The identity of a live process (its start time), or undefined once it has gone. */
async function processStart(pid: number): Promise<string | undefined> {
  try {
    const stat = await Deno.readTextFile(`/proc/${pid}/stat`);
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return fields[0] === "Z" ? undefined : fields[19];
  } catch {
    return undefined;
  }
}

/**
 * Snapshots a process and its descendants, with their start times, so that {@linkcode reap} can
 * tell them from later processes that reuse their pids.
 *
 * @param pid The root.
 * @returns Pid → start time.
 */
export async function processTree(pid: number): Promise<Map<number, string>> {
  const tree = new Map<number, string>();
  for (const each of [pid, ...await descendantPids(pid)]) {
    const start = await processStart(each);
    if (start !== undefined) tree.set(each, start);
  }
  return tree;
}

/**
 * Waits for processes to exit, then SIGKILLs the ones still running (only if their start time
 * shows they are the same processes).
 *
 * @param processes From {@linkcode processTree}.
 * @param graceMs How long they may take.
 * @returns How many had to be killed.
 */
export async function reap(processes: Map<number, string>, graceMs: number): Promise<number> {
  const deadline = Date.now() + graceMs;
  const alive = async () => {
    const left: number[] = [];
    for (const [pid, start] of processes) {
      if (await processStart(pid) === start) left.push(pid);
    }
    return left;
  };
  let left = await alive();
  while (left.length > 0 && Date.now() < deadline) {
    await sleep(50);
    left = await alive();
  }
  for (const pid of left) {
    try {
      Deno.kill(pid, "SIGKILL");
    } catch {
      // It exited in the meantime.
    }
  }
  return left.length;
}

/** A stdio MCP server started by a benchmark, with a connected SDK v2 client. */
