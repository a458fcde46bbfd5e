/**
 * `prepare`: fetches and builds, ahead of time, everything the server would otherwise fetch or
 * build on first use, through the server's own code paths: the modules loaded on demand, the
 * sandbox runners compiled into the children's Deno cache, the Pyodide package and its memory
 * snapshot. A container image runs it at build time, so that a server with a read-only cache
 * (and another user) answers its first `run_python` from the snapshot.
 *
 * @module
 */
import { join } from "node:path";
import { loadSettings } from "../config/settings.ts";
import { createLogger, type Logger } from "../log.ts";
import { PyChild } from "../exec/python/child.ts";
import { type PythonRuntime, startPythonRuntime } from "../exec/python/runtime.ts";
import { type SandboxLocations, sandboxLocations } from "../exec/child/files.ts";
import { sealChildDenoDir, TsChild } from "../exec/typescript/child.ts";
import { wrapTypescript } from "../exec/typescript/source.ts";

/** Options of {@linkcode prepare}. */
export interface PrepareOptions {
  /** Where progress lines go; stdout by default. */
  write?: (line: string) => void;
  /** Where the executor's warnings go; a stderr logger by default. */
  log?: Logger;
}

/** How long a sandbox run of `prepare` may take; a cold first run is well under it. */
const RUN_TIMEOUT_MS = 60_000;

/** The subdirectories of the cache that `prepare` fills; nothing private is in them. */
const PREPARED_DIRS = ["sandbox", "deno", "pyodide"];

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
  const warnings: string[] = [];
  const base = options.log ?? createLogger();
  const log: Logger = {
    ...base,
    warn: (message) => {
      warnings.push(message);
      base.warn(message);
    },
  };
  try {
    const { settings } = await loadSettings();
    write(`Modules loaded on demand: ${await loadOnDemandModules()}`);
    const where = await sandboxLocations(settings);
    write(`TypeScript: ${await prepareTypescript(where, settings.limits.memoryMb, log)}`);
    if (settings.python.enabled) {
      const closing = new AbortController();
      try {
        const started = performance.now();
        const runtime = await startPythonRuntime({
          ...where,
          settings,
          log,
          closing: closing.signal,
        });
        try {
          const snapshotDir = join(where.cacheDir, "pyodide");
          write(`Python: ${await preparePython(runtime, snapshotDir, started, warnings)}`);
        } finally {
          await runtime.pool.close();
        }
      } finally {
        closing.abort();
      }
    } else {
      write("Python: skipped (python.enabled is false)");
    }
    const dirs = [];
    for (const name of PREPARED_DIRS) {
      const dir = join(where.cacheDir, name);
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
 * Runs code in a TypeScript child spawned for it, as the server does for a run with its own
 * permissions: such a child writes the runner's compiled JavaScript to the children's Deno cache
 * (pooled children do not), which later children then read.
 */
async function prepareTypescript(
  where: SandboxLocations,
  memoryMb: number,
  log: Logger,
): Promise<string> {
  const started = performance.now();
  const cannotStart = (why: string) =>
    new PrepareError(
      `Cannot start a TypeScript sandbox (deno at "${where.denoPath}"${why}): set sandbox.denoPath or DENO_PATH to a working Deno ${Deno.version.deno}`,
    );
  const child = await TsChild.spawn({ ...where, denoDir: where.tsDenoDir, memoryMb, log }).catch(
    (error) => {
      throw cannotStart(`: ${(error as Error).message}`);
    },
  );
  try {
    if (!(await child.ready)) throw cannotStart("");
    const result = await child.run(wrapTypescript("return 6 * 7"), {
      timeoutMs: RUN_TIMEOUT_MS,
      maxOutputBytes: 64 * 1024,
    });
    if (!result.ok || result.returnValue !== 42) {
      throw new PrepareError(
        `A TypeScript sandbox did not run code: ${
          result.error ? `${result.error.type}: ${result.error.message}` : JSON.stringify(result)
        }`,
      );
    }
  } finally {
    await child.dispose();
    await sealChildDenoDir(where.tsDenoDir, true);
    await sealChildDenoDir(where.denoDir, false);
  }
  return `the runner is compiled into ${where.tsDenoDir}; a run took ${
    Math.round(performance.now() - started)
  } ms`;
}

/**
 * Checks what `startPythonRuntime` found and built: a snapshot, and a child that boots from it
 * and runs code.
 */
async function preparePython(
  runtime: PythonRuntime,
  snapshotDir: string,
  started: number,
  warnings: string[],
): Promise<string> {
  const { snapshotPath, pyodideDir } = runtime.base;
  if (!snapshotPath) {
    // ensurePyodideSnapshot reports why as a warning, which starts with what it means for the
    // server ("Python children will boot without a memory snapshot (slower): …").
    const reason = warnings.at(-1)?.replace(/^Python children will boot [^:]*: /, "");
    throw new PrepareError(
      `Cannot build the Pyodide memory snapshot in ${snapshotDir}: ${
        reason ?? "no reason was given"
      }`,
    );
  }
  const readyMs = Math.round(performance.now() - started);
  const child = await PyChild.spawn(runtime.base);
  try {
    if (!(await child.ready)) {
      throw new PrepareError(`Cannot start a Python sandbox: ${warnings.at(-1) ?? "no reason"}`);
    }
    if (!child.boot?.fromSnapshot) {
      throw new PrepareError(
        `A Python sandbox booted without the snapshot ${snapshotPath}: ${
          child.boot?.snapshotError ?? "no reason was given"
        }`,
      );
    }
    const result = await child.run("6 * 7", {
      timeoutMs: RUN_TIMEOUT_MS,
      maxOutputBytes: 64 * 1024,
    });
    if (!result.ok || result.returnValue !== 42) {
      throw new PrepareError(
        `A Python sandbox did not run code: ${
          result.error ? `${result.error.type}: ${result.error.message}` : JSON.stringify(result)
        }`,
      );
    }
  } finally {
    await child.dispose();
  }
  const bytes = (await Deno.stat(snapshotPath)).size;
  return `Pyodide in ${pyodideDir}; snapshot ${snapshotPath} (${
    (bytes / 1e6).toFixed(1)
  } MB, ready after ${readyMs} ms); a child booted from it and ran code`;
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
