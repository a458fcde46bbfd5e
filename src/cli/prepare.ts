/**
 * `prepare`: fetches and builds, ahead of time, everything the server would otherwise fetch or
 * build on first use, through the server's own code paths: the modules loaded on demand, the
 * sandbox runners compiled into the children's Deno cache, the npm packages of
 * `sandbox.npmPackages` (fetched, then loaded offline in a child), the Pyodide package and its
 * memory snapshot. A container image runs it at build time, so that a server with a read-only cache
 * (and another user) answers its first `run_python` from the snapshot.
 *
 * @module
 */
import { join } from "node:path";
import { cacheDir } from "../config/paths.ts";
import { loadSettings } from "../config/settings.ts";
import { createLogger, type Logger } from "../log.ts";
import { Executor } from "../exec/executor.ts";
import type { LanguageRuntime } from "../exec/runtime.ts";

/** Options of {@linkcode prepare}. */
export interface PrepareOptions {
  /** Where progress lines go; stdout by default. */
  write?: (line: string) => void;
  /** Where the executor's warnings go; a stderr logger by default. */
  log?: Logger;
}

/**
 * The subdirectories of the cache that `prepare` fills; nothing private is in them (`deno-ts`:
 * the TypeScript runner compiled, and the npm packages of `sandbox.npmPackages`).
 */
const PREPARED_DIRS = ["sandbox", "deno", "deno-ts", "pyodide"];

/** A step that could not be done, with what to do about it. */
class PrepareError extends Error {
  override name = "PrepareError";
}

/**
 * Prepares the server's caches and reports each step. On success the directories it filled
 * (`sandbox/`, `deno/` and `pyodide/` under Code Executor's cache directory) are readable by
 * every user: they hold package files, compiled runners and the snapshot of a fresh interpreter,
 * and an image built as root runs its server as another user.
 *
 * @param options Where to report.
 * @returns The exit code: 0 when everything is ready, 1 otherwise (the reason on stderr).
 */
export async function prepare(options: PrepareOptions = {}): Promise<number> {
  const write = options.write ?? ((line: string) => console.log(line));
  const log = options.log ?? createLogger();
  try {
    const { settings } = await loadSettings();
    write(`Modules loaded on demand: ${await loadOnDemandModules()}`);
    // The server's own start-up, without its warm pools: each runtime then builds what it needs.
    const executor = await Executor.create(settings, { log, warmPools: false });
    try {
      write(`TypeScript: ${await prepared(executor.runtime("typescript"))}`);
      write(
        settings.python.enabled
          ? `Python: ${await prepared(executor.runtime("python"))}`
          : "Python: skipped (python.enabled is false)",
      );
    } finally {
      await executor.close();
    }
    const dirs = [];
    for (const name of PREPARED_DIRS) {
      const dir = join(cacheDir(), name);
      if (await shareReadable(dir)) dirs.push(dir);
    }
    write(`Readable by every user: ${dirs.join(", ")}`);
    return 0;
  } catch (error) {
    const known = error instanceof PrepareError;
    console.error(
      `code-executor prepare: ${known ? (error as Error).message : (error as Error).stack}`,
    );
    return 1;
  }
}

/** Runs a language's `prepare`; what fails there is reported by its message. */
async function prepared(runtime: LanguageRuntime): Promise<string> {
  try {
    return await runtime.prepare();
  } catch (error) {
    throw new PrepareError((error as Error).message, { cause: error });
  }
}

/**
 * Loads the modules that commands load on demand, so that a server started with `--cached-only`
 * finds them (and Deno has compiled them).
 */
async function loadOnDemandModules(): Promise<string> {
  const modules = [
    import("./setup.ts"),
    import("./sync.ts"),
    import("./wrappers.ts"),
    import("gpt-tokenizer/encoding/o200k_base"),
  ];
  try {
    await Promise.all(modules);
  } catch (error) {
    throw new PrepareError(`Cannot load a module of a command: ${(error as Error).message}`, {
      cause: error,
    });
  }
  return "setup, sync, wrappers, gpt-tokenizer";
}

/**
 * Gives everyone read access (and search access to directories) under `dir`, as `chmod -R a+rX`
 * does: the snapshot is written 0600, and a umask may have narrowed the rest.
 *
 * @returns Whether `dir` exists.
 */
async function shareReadable(dir: string): Promise<boolean> {
  const info = await Deno.lstat(dir).catch(() => undefined);
  if (!info || info.isSymlink || info.mode === null) return false;
  const wanted = info.isDirectory || (info.mode & 0o111) !== 0 ? 0o555 : 0o444;
  if ((info.mode & wanted) !== wanted) {
    try {
      await Deno.chmod(dir, (info.mode & 0o7777) | wanted);
    } catch (error) {
      throw new PrepareError(
        `Cannot make ${dir} readable by every user: ${(error as Error).message}`,
        { cause: error },
      );
    }
  }
  if (info.isDirectory) {
    for await (const entry of Deno.readDir(dir)) await shareReadable(join(dir, entry.name));
  }
  return true;
}
