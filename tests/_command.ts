/**
 * Command-line processes run to their end: their exit code and output, and how an assertion
 * message shows them.
 *
 * @module
 */

/** What a finished command-line process did. */
export interface CommandRun {
  /** Its exit code. */
  code: number;
  /** Its standard output. */
  stdout: string;
  /** Its standard error. */
  stderr: string;
}

/** Options for {@linkcode runCommand}. */
export interface RunCommandOptions {
  /** The working directory; this process's by default. */
  cwd?: string;
  /** Variables to set. */
  env?: Record<string, string>;
  /** Start from an empty environment rather than this process's. */
  clearEnv?: boolean;
  /** Kill the process after this long, so that a hang fails the test instead of the suite. */
  timeoutMs?: number;
  /** Text written to its stdin, which is then closed; without it, stdin is `/dev/null`. */
  input?: string;
}

/**
 * Runs a command, with `options.input` or nothing on its stdin, and waits for it to exit.
 *
 * @param command The executable.
 * @param args Its arguments.
 * @param options Working directory, environment, time limit and stdin.
 * @returns Exit code and output.
 */
export async function runCommand(
  command: string,
  args: string[],
  options: RunCommandOptions = {},
): Promise<CommandRun> {
  const abort = new AbortController();
  const timer = options.timeoutMs === undefined
    ? undefined
    : setTimeout(() => abort.abort(), options.timeoutMs);
  try {
    const piped = pipedCommand(command, args, options, abort.signal);
    if (options.input === undefined) return decodeOutput(await piped.output());
    const child = piped.spawn();
    const writer = child.stdin.getWriter();
    // A command that exits without reading all of it breaks the pipe: its exit code and stderr
    // say why, and it is waited for either way.
    await writer.write(new TextEncoder().encode(options.input))
      .then(() => writer.close())
      .catch(() => {});
    return decodeOutput(await child.output());
  } finally {
    clearTimeout(timer);
  }
}

/**
 * A command whose stdout and stderr are piped to this process, and its stdin too when
 * `options.input` is given (the caller writes it); else its stdin is `/dev/null`.
 *
 * @param command The executable.
 * @param args Its arguments.
 * @param options Working directory, environment, and whether there is input (`timeoutMs` is
 *   the caller's to apply).
 * @param signal Kills the process when aborted.
 * @returns The command, not yet started.
 */
export function pipedCommand(
  command: string,
  args: string[],
  options: Omit<RunCommandOptions, "timeoutMs">,
  signal?: AbortSignal,
): Deno.Command {
  return new Deno.Command(command, {
    args,
    cwd: options.cwd,
    env: options.env,
    clearEnv: options.clearEnv,
    stdin: options.input === undefined ? "null" : "piped",
    stdout: "piped",
    stderr: "piped",
    signal,
  });
}

/**
 * Decodes a finished process's exit code and piped output as text.
 *
 * @param output What `Deno.Command#output()` or `ChildProcess#output()` resolved to.
 * @returns Exit code, stdout and stderr.
 */
export function decodeOutput(output: Deno.CommandOutput): CommandRun {
  const decoder = new TextDecoder();
  return {
    code: output.code,
    stdout: decoder.decode(output.stdout),
    stderr: decoder.decode(output.stderr),
  };
}

/**
 * Renders a command's run for assertion messages.
 *
 * @param run The run.
 * @returns Exit code, stdout and stderr.
 */
export function describeRun(run: CommandRun): string {
  return `exit code ${run.code}\nstdout:\n${run.stdout}\nstderr:\n${run.stderr}`;
}

/**
 * Reads a process's piped output to its end as text, so the pipe never fills and blocks it.
 *
 * @param stream The piped stdout or stderr.
 * @param chunks Receives each decoded piece as it comes; join them for the text so far.
 * @returns Settles when the stream has ended.
 */
function collectText(stream: ReadableStream<Uint8Array>, chunks: string[]): Promise<void> {
  return stream.pipeThrough(new TextDecoderStream()).pipeTo(
    new WritableStream({ write: (chunk) => void chunks.push(chunk) }),
  );
}

/** A process started by {@linkcode spawnReadingStderr}. */
export interface StderrReadProcess {
  /** The process. */
  child: Deno.ChildProcess;
  /** Its stderr so far, in decoded pieces. */
  stderr: string[];
  /** Settles when its stderr has ended. */
  drained: Promise<void>;
}

/**
 * Starts a long-running process with no stdin and reads its stderr as it comes, for a server
 * whose log says when it is ready and why it failed.
 *
 * @param command The executable.
 * @param options Arguments, environment and stdout (`null` unless given).
 * @returns The process, its stderr so far and when that has ended.
 */
export function spawnReadingStderr(
  command: string,
  options: Omit<Deno.CommandOptions, "stdin" | "stderr">,
): StderrReadProcess {
  const child = new Deno.Command(command, {
    stdout: "null",
    ...options,
    stdin: "null",
    stderr: "piped",
  }).spawn();
  const stderr: string[] = [];
  return { child, stderr, drained: collectText(child.stderr, stderr) };
}

/**
 * Whether a command runs and exits 0, its output dropped: a check that a program a test needs is
 * installed.
 *
 * @param command The executable.
 * @param args Its arguments.
 * @returns False too when the executable is not found.
 */
export async function commandSucceeds(command: string, args: string[]): Promise<boolean> {
  try {
    return (await new Deno.Command(command, { args, stdout: "null", stderr: "null" }).output())
      .success;
  } catch {
    return false;
  }
}

/**
 * Warns once, at a test file's top, why the tests that need a missing program are skipped.
 *
 * @param installed Whether the program is installed.
 * @param missing What is missing and how to install it.
 * @returns `installed`, for the skipped tests' `ignore: !installed`.
 */
export function warnUnless(installed: boolean, missing: string): boolean {
  if (!installed) console.warn(missing);
  return installed;
}
