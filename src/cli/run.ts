/**
 * `run FILE.ts`: runs a file through the same sandbox as `run_typescript` and prints its result.
 *
 * @module
 */
import { loadSettings } from "../config/settings.ts";
import { personalDataFinder } from "../privacy/redaction.ts";
import { Executor } from "../exec/executor.ts";
import { createLogger } from "../log.ts";
import { SkillStore } from "../skills/store.ts";

/** Options of {@linkcode runFile}. */
export interface RunFileOptions {
  /** Wall-clock limit in milliseconds. */
  timeoutMs?: number;
  /** Print the whole result as JSON instead of the program's output. */
  json?: boolean;
}

/**
 * Runs a TypeScript file in a sandbox child and prints its output.
 *
 * @param file Path of the TypeScript file.
 * @param options Timeout and output format.
 * @returns The process exit code: 0 when the code succeeded, 1 otherwise.
 */
export async function runFile(file: string, options: RunFileOptions = {}): Promise<number> {
  const log = createLogger();
  const code = await Deno.readTextFile(file);
  const { settings } = await loadSettings();
  // The same skills as the server's, so that a program that calls skills runs here too.
  const skills = new SkillStore(settings.skills, {
    log,
    personalData: personalDataFinder(settings.privacy),
  });
  const executor = await Executor.create({
    ...settings,
    sandbox: { ...settings.sandbox, warmPool: 0 },
  }, { log, skills });
  const abort = new AbortController();
  const onSignal = () => abort.abort();
  Deno.addSignalListener("SIGINT", onSignal);
  try {
    const result = await executor.runTypescript(code, {
      timeoutMs: options.timeoutMs,
      signal: abort.signal,
    });
    const encoder = new TextEncoder();
    if (options.json) {
      await Deno.stdout.write(encoder.encode(JSON.stringify(result, null, 2) + "\n"));
    } else {
      await Deno.stdout.write(encoder.encode(result.stdout));
      await Deno.stderr.write(encoder.encode(result.stderr));
      if (result.returnValue !== undefined) {
        await Deno.stdout.write(encoder.encode(JSON.stringify(result.returnValue, null, 2) + "\n"));
      }
      if (result.error) {
        const detail = result.error.traceback ?? `${result.error.type}: ${result.error.message}`;
        await Deno.stderr.write(encoder.encode(`${detail}\n`));
      }
    }
    return result.ok ? 0 : 1;
  } finally {
    Deno.removeSignalListener("SIGINT", onSignal);
    await executor.close();
  }
}
