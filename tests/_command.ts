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
}

/**
 * Runs a command with no stdin and waits for it to exit.
 *
 * @param command The executable.
 * @param args Its arguments.
 * @param options Working directory, environment and time limit.
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
    const output = await new Deno.Command(command, {
      args,
      cwd: options.cwd,
      env: options.env,
      clearEnv: options.clearEnv,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
      signal: abort.signal,
    }).output();
    const decoder = new TextDecoder();
    return {
      code: output.code,
      stdout: decoder.decode(output.stdout),
      stderr: decoder.decode(output.stderr),
    };
  } finally {
    clearTimeout(timer);
  }
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
