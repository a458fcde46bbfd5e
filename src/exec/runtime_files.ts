/**
 * The files a sandbox child is started from: the `deno` executable, the runners under
 * `sandbox/` (copied out of a compiled binary when need be), and what dead hosts left behind.
 *
 * @module
 */
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { cacheDir } from "../config/paths.ts";
import type { Settings } from "../config/settings.ts";
import type { Logger } from "../log.ts";
import { sha256Hex } from "../_util.ts";
import { CHILD_DIR_PREFIX } from "./sandbox_process.ts";

/**
 * Finds the `deno` executable for sandbox children.
 *
 * @param configured `sandbox.denoPath` from the settings.
 * @returns The path or command name to run.
 */
export function findDeno(configured?: string): string {
  if (configured) return configured;
  const self = Deno.execPath();
  return /^deno(\.exe)?$/i.test(basename(self)) ? self : "deno";
}

/** Where an executor's sandbox children are started from and what they may write. */
export interface SandboxLocations {
  /** The `deno` executable of the children. */
  denoPath: string;
  /** Code Executor's cache directory: runner copies, the children's Deno cache, the snapshot. */
  cacheDir: string;
  /** The children's `DENO_DIR`: `deno` under {@linkcode SandboxLocations.cacheDir}. */
  denoDir: string;
  /** Where children's private directories are made: `sandbox.tempDir`, else the temp root. */
  tempRoot: string;
  /** `sandbox/ts_runner.ts` on disk. */
  runnerPath: string;
}

/**
 * Finds the locations of an executor's sandbox children under the settings. The server and
 * `prepare` both take them from here, so that what `prepare` caches is what the server reads
 * (the snapshot's and the emitted runners' paths are part of their cache keys).
 *
 * @param settings The admin's settings (`sandbox.denoPath`, `sandbox.tempDir`).
 * @returns The locations.
 */
export async function sandboxLocations(settings: Settings): Promise<SandboxLocations> {
  const cache = cacheDir();
  return {
    denoPath: findDeno(settings.sandbox.denoPath),
    cacheDir: cache,
    denoDir: join(cache, "deno"),
    tempRoot: settings.sandbox.tempDir ?? tmpdir(),
    runnerPath: await sandboxFile("ts_runner.ts", join(cache, "sandbox")),
  };
}

/**
 * Returns the runner's path on disk. Inside a compiled binary the runner is embedded, so it is
 * copied to a cache directory first, where a child `deno` can load it.
 *
 * @param name The file under `sandbox/`.
 * @param cacheDir Where to copy an embedded runner.
 * @returns An absolute path.
 */
export async function sandboxFile(name: string, cacheDir: string): Promise<string> {
  const url = new URL(`../../sandbox/${name}`, import.meta.url);
  const path = fileURLToPath(url);
  if (!/deno-compile-/.test(path)) return path;
  const text = await Deno.readTextFile(url);
  const target = join(cacheDir, `${sha256Hex(text).slice(0, 16)}-${name}`);
  await Deno.mkdir(dirname(target), { recursive: true });
  await Deno.writeTextFile(target, text);
  return target;
}

/**
 * Reads a file under `sandbox/` as text, from a checkout or from inside a compiled binary (built
 * with `--include sandbox/`). It is for files the host hands to a child, which then needs no
 * permission to read them.
 *
 * @param name The file under `sandbox/`.
 * @returns Its text.
 * @throws {Deno.errors.NotFound} When the file is missing (a binary compiled without it).
 */
export function readSandboxText(name: string): Promise<string> {
  return Deno.readTextFile(new URL(`../../sandbox/${name}`, import.meta.url));
}

let prelude: Promise<string> | undefined;

/**
 * Returns the Python half of the sandbox, `sandbox/py_prelude.py`, read once. Python children get
 * it in their `init` frame and run it when they boot without the memory snapshot; the snapshot is
 * keyed by its hash.
 *
 * @returns The prelude's text.
 * @throws {Deno.errors.NotFound} When the file is missing.
 */
export function pythonPrelude(): Promise<string> {
  prelude ??= readSandboxText("py_prelude.py").catch((error) => {
    prelude = undefined;
    throw error;
  });
  return prelude;
}

/**
 * Removes private directories left by a host that died without cleaning up (SIGKILL), and kills
 * the children still working in them.
 *
 * @param tempRoot The directory children are created in.
 * @param log Where removals are reported.
 */
export async function removeStaleDirs(tempRoot: string, log: Logger): Promise<void> {
  if (Deno.build.os !== "linux") return;
  const stale: string[] = [];
  try {
    for await (const entry of Deno.readDir(tempRoot)) {
      const match = new RegExp(`^${CHILD_DIR_PREFIX}(\\d+)-`).exec(entry.name);
      if (!match || !entry.isDirectory || Number(match[1]) === Deno.pid) continue;
      const alive = await Deno.stat(`/proc/${match[1]}`).then(() => true, () => false);
      if (alive) continue;
      // Compared below with working directories, which the kernel reports resolved.
      const dir = join(tempRoot, entry.name);
      stale.push(await Deno.realPath(dir).catch(() => dir));
    }
  } catch {
    // An unreadable temp root only means nothing is cleaned.
  }
  if (stale.length === 0) return;
  await killChildrenIn(stale, log);
  for (const dir of stale) {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
    log.debug(`Removed stale sandbox directory ${basename(dir)}`);
  }
}

/**
 * Kills the processes whose working directory is inside one of `dirs`. A child notices that its
 * host died when its stdin ends, but a session's child that the host stopped (SIGSTOP) between
 * two runs cannot: it would stay stopped, holding its memory, until something kills it.
 */
async function killChildrenIn(dirs: string[], log: Logger): Promise<void> {
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
