/**
 * Children that die with the server. A child the server started (a sandbox, an upstream stdio
 * server) must not outlive it, even when the server is SIGKILLed (an OOM kill, a client that
 * kills its servers hard) and even when the child is stuck in a busy loop, which no code in the
 * child itself can notice. On Linux the kernel does it: the child is started through util-linux's
 * `setpriv --pdeathsig KILL`, which sets `PR_SET_PDEATHSIG` and then execs the real program, so
 * the kernel SIGKILLs the child the moment the server's thread that spawned it is gone. Deno
 * spawns from the main thread, which lives as long as the process.
 *
 * Where `setpriv` is missing (macOS, Windows, a minimal image), commands run unchanged: idle
 * children still exit when their stdin closes, but a busy one runs on (see SECURITY.md).
 *
 * @module
 */
import { delimiter, isAbsolute, join, resolve } from "node:path";
import { envVar } from "./_util.ts";

let setprivPath: string | null | undefined;

function isFile(path: string): boolean {
  try {
    return Deno.statSync(path).isFile;
  } catch {
    return false;
  }
}

/** Where a program is looked up. */
export interface LookupOptions {
  /** The `PATH` to search; the server's own when omitted. */
  path?: string;
  /** The directory a relative path such as `./server` is taken from; the server's own cwd. */
  cwd?: string;
}

/**
 * Finds a program the way `execvp` would.
 *
 * @param command A name or a path.
 * @param options The `PATH` and working directory to look up from.
 * @returns A path to an existing file, or undefined.
 */
export function findOnPath(command: string, options: LookupOptions = {}): string | undefined {
  if (command.includes("/") || isAbsolute(command)) {
    const path = isAbsolute(command) ? command : resolve(options.cwd ?? Deno.cwd(), command);
    return isFile(path) ? path : undefined;
  }
  for (const dir of (options.path ?? envVar("PATH") ?? "").split(delimiter)) {
    if (!dir) continue;
    const candidate = join(dir, command);
    if (isFile(candidate)) return candidate;
  }
  return undefined;
}

/**
 * Returns the `setpriv` that can set a parent-death signal, checked once per process.
 *
 * @returns Its path, or undefined where it is missing or too old (util-linux before 2.33).
 */
export function parentDeathHelper(): string | undefined {
  if (setprivPath !== undefined) return setprivPath ?? undefined;
  setprivPath = null;
  if (Deno.build.os !== "linux") return undefined;
  const found = ["/usr/bin/setpriv", "/bin/setpriv"].find(isFile) ?? findOnPath("setpriv");
  if (!found) return undefined;
  try {
    const probe = new Deno.Command(found, {
      args: ["--pdeathsig", "KILL", "--", "true"],
      stdin: "null",
      stdout: "null",
      stderr: "null",
    }).outputSync();
    if (probe.success) setprivPath = found;
  } catch {
    // Not runnable here: children are started without it.
  }
  return setprivPath ?? undefined;
}

/** A program and its arguments. */
export interface CommandLine {
  /** The program. */
  command: string;
  /** Its arguments. */
  args: string[];
}

/**
 * Wraps a command so that the kernel kills it when the server dies. Unchanged where that is not
 * possible, or when the program cannot be found (so that spawning reports "not found" as usual).
 *
 * @param command The program: a name looked up on `PATH`, or a path.
 * @param args Its arguments.
 * @param options Where the program is looked up (the child's `PATH` and cwd).
 * @returns The command line to spawn.
 */
export function dieWithParent(
  command: string,
  args: string[],
  options: LookupOptions = {},
): CommandLine {
  const helper = parentDeathHelper();
  if (!helper) return { command, args };
  const program = findOnPath(command, options);
  if (!program) return { command, args };
  return { command: helper, args: ["--pdeathsig", "KILL", "--", program, ...args] };
}
