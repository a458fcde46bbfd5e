/**
 * Where the Pyodide package lives on disk, and the memory snapshot that lets a Python child boot
 * in a fraction of a cold load.
 *
 * @module
 */
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { denoCacheDir } from "../../config/paths.ts";
import type { Logger } from "../../log.ts";
import { sha256Hex } from "../../_util.ts";
import { dieWithParent } from "../../parent_death.ts";
import { pythonPrelude } from "../child/files.ts";
import { SANDBOX_RUN_FLAGS } from "../child/process.ts";
import { type LocalWheel, wheelModules } from "./wheels.ts";
// Importing the package's manifest makes Deno install the package with the program (a fresh
// clone's `deno task start` fetches it), and tells where it landed.
import pyodideManifest from "pyodide/package.json" with { type: "json" };

/** The pinned version of the npm package `pyodide` (Python 3.14, standard library only). */
export const PYODIDE_VERSION: string = pyodideManifest.version;

function installedDir(): string | undefined {
  try {
    const url = import.meta.resolve("pyodide/package.json");
    if (!url.startsWith("file:")) return undefined;
    const dir = dirname(fileURLToPath(url));
    // Inside a compiled binary the package is in its embedded file system, which the sandbox
    // child (another process) cannot read: look on disk instead.
    return /deno-compile-/.test(dir) ? undefined : dir;
  } catch {
    return undefined;
  }
}

/** The files a Python child reads from the package. */
const PACKAGE_FILES = [
  "pyodide.mjs",
  "pyodide.asm.mjs",
  "pyodide.asm.wasm",
  "python_stdlib.zip",
  "pyodide-lock.json",
];

/** Options of {@linkcode findPyodideDir} and {@linkcode pyodideCandidates}. */
export interface FindPyodideOptions {
  /** The package version to accept; {@linkcode PYODIDE_VERSION} when omitted. */
  version?: string;
  /** Directories whose `node_modules` may hold the package; the repository root by default. */
  projectRoots?: string[];
  /** Deno's cache directory; `DENO_DIR` or the platform default when omitted. */
  denoDir?: string;
}

/**
 * Returns Deno's default cache directory, where `npm:` packages are stored when a project has no
 * `node_modules` directory.
 *
 * @returns An absolute path, or undefined when no home directory is known.
 */
export function defaultDenoDir(): string | undefined {
  return denoCacheDir();
}

/**
 * Lists the directories where the package may be, most specific first: a project's
 * `node_modules` (as `deno install` lays it out with `nodeModulesDir`), then Deno's npm cache.
 *
 * @param options Version and places to look.
 * @returns Candidate package directories; they may not exist.
 */
export function pyodideCandidates(options: FindPyodideOptions = {}): string[] {
  const version = options.version ?? PYODIDE_VERSION;
  // From a registry (`deno run jsr:…`) there is no checkout whose node_modules could hold it.
  const checkout = new URL("../../../", import.meta.url);
  const roots = options.projectRoots ??
    [...(checkout.protocol === "file:" ? [fileURLToPath(checkout)] : []), Deno.cwd()];
  const out: string[] = [];
  const installed = options.projectRoots ? undefined : installedDir();
  if (installed) out.push(installed);
  for (const root of roots) {
    out.push(join(root, "node_modules", ".deno", `pyodide@${version}`, "node_modules", "pyodide"));
    out.push(join(root, "node_modules", "pyodide"));
  }
  const denoDir = options.denoDir ?? defaultDenoDir();
  if (denoDir) out.push(join(denoDir, "npm", "registry.npmjs.org", "pyodide", version));
  return [...new Set(out)];
}

/**
 * Checks that a directory holds the complete package at the given version.
 *
 * @param dir The directory.
 * @param version The version its `package.json` must name.
 * @returns Whether it does.
 */
export async function isPyodideDir(dir: string, version = PYODIDE_VERSION): Promise<boolean> {
  try {
    const meta = JSON.parse(await Deno.readTextFile(join(dir, "package.json")));
    if (meta?.name !== "pyodide" || meta?.version !== version) return false;
    for (const file of PACKAGE_FILES) {
      if (!(await Deno.stat(join(dir, file))).isFile) return false;
    }
    return true;
  } catch {
    return false;
  }
}

/**
 * Finds the Pyodide package on disk. The child is allowed to read exactly this directory, so the
 * result is the real path (symlinks resolved).
 *
 * @param options Version and places to look.
 * @returns The package directory.
 * @throws {Deno.errors.NotFound} When no candidate holds the package.
 */
export async function findPyodideDir(options: FindPyodideOptions = {}): Promise<string> {
  const version = options.version ?? PYODIDE_VERSION;
  const candidates = pyodideCandidates(options);
  for (const dir of candidates) {
    if (await isPyodideDir(dir, version)) return await Deno.realPath(dir);
  }
  throw new Deno.errors.NotFound(
    `Cannot find the Pyodide package (npm:pyodide@${version}): run "deno install" in the project, or "deno cache npm:pyodide@${version}"; looked in ${
      candidates.join(", ")
    }`,
  );
}

/** Options of {@linkcode buildPyodideSnapshot} and {@linkcode ensurePyodideSnapshot}. */
export interface SnapshotOptions {
  /** The `deno` executable. */
  denoPath: string;
  /** Path of `sandbox/py_host.ts`. */
  hostPath: string;
  /** Path of `sandbox/py_worker.ts`; its text is part of the snapshot's key. */
  workerPath: string;
  /** Path of `sandbox/py_inbox.ts`, which reads the builder's `init` frame. */
  inboxPath: string;
  /** The Pyodide package directory, from {@linkcode findPyodideDir}. */
  pyodideDir: string;
  /** Directory the snapshot is written to; the builder may write nothing else. */
  cacheDir: string;
  /** Deno's cache directory for children. */
  denoDir: string;
  /** Where to report a failed build. */
  log: Logger;
  /** How long the build may take; 120 s by default. */
  timeoutMs?: number;
  /** Aborting it kills the build (server shutdown). */
  signal?: AbortSignal;
  /** Wheels of `python.packages`: unpacked and imported before the snapshot is taken. */
  packages?: readonly LocalWheel[];
}

/** What a build produced. */
export interface SnapshotBuild {
  /** The snapshot file. */
  path: string;
  /** Its size. */
  bytes: number;
  /** Time the builder spent booting Pyodide, running the prelude and taking the snapshot. */
  bootMs: number;
  /** Wall-clock time of the whole build, process start included. */
  totalMs: number;
}

/**
 * Returns the snapshot's file name for this Pyodide version, Deno version, worker and prelude
 * (`sandbox/py_prelude.py`, which runs before the snapshot is taken): a change to any of them
 * makes a new snapshot.
 *
 * @param options The locations.
 * @returns The path, which may not exist yet.
 */
export async function snapshotPath(
  options: Pick<SnapshotOptions, "workerPath" | "pyodideDir" | "cacheDir" | "packages">,
): Promise<string> {
  const meta = JSON.parse(await Deno.readTextFile(join(options.pyodideDir, "package.json")));
  const worker = await Deno.readTextFile(options.workerPath);
  const prelude = sha256Hex(await pythonPrelude());
  const packages = (options.packages ?? []).map((wheel) =>
    `${wheel.name}:${sha256Hex(wheel.bytes)}`
  );
  const hash = sha256Hex(
    `${meta.version}\0${Deno.version.deno}\0${worker}\0${prelude}${
      packages.length > 0 ? `\0${packages.join("\0")}` : ""
    }`,
  );
  return join(options.cacheDir, `pyodide-${meta.version}-${hash.slice(0, 16)}.snapshot`);
}

/**
 * Builds the memory snapshot in a short-lived child that may write only to the cache directory.
 *
 * @param options The locations.
 * @returns The build.
 * @throws {Error} When the child fails or takes longer than `timeoutMs`.
 */
export async function buildPyodideSnapshot(options: SnapshotOptions): Promise<SnapshotBuild> {
  const started = performance.now();
  await Deno.mkdir(options.cacheDir, { recursive: true });
  const path = await snapshotPath(options);
  const nonce = crypto.randomUUID();
  const read = [options.pyodideDir, options.workerPath, options.inboxPath, options.cacheDir];
  const { command, args } = dieWithParent(options.denoPath, [
    ...SANDBOX_RUN_FLAGS,
    "--unstable-worker-options",
    `--allow-read=${read.join(",")}`,
    `--allow-write=${options.cacheDir}`,
    options.hostPath,
    options.inboxPath,
  ]);
  const process = new Deno.Command(command, {
    args,
    cwd: options.cacheDir,
    clearEnv: true,
    env: { DENO_DIR: options.denoDir, NO_COLOR: "1", DENO_NO_UPDATE_CHECK: "1" },
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const kill = () => {
    try {
      process.kill("SIGKILL");
    } catch {
      // Already gone.
    }
  };
  const timer = setTimeout(kill, options.timeoutMs ?? 120_000);
  options.signal?.addEventListener("abort", kill);
  if (options.signal?.aborted) kill();
  try {
    const writer = process.stdin.getWriter();
    await writer.write(new TextEncoder().encode(
      JSON.stringify({
        t: "init",
        nonce,
        mode: "snapshot",
        indexDir: options.pyodideDir,
        indexUrl: pathToFileURL(join(options.pyodideDir, "/")).href,
        workerPath: options.workerPath,
        workerUrl: pathToFileURL(options.workerPath).href,
        snapshotOut: path,
        prelude: await pythonPrelude(),
        ...packagesInit(options.packages ?? []),
      }) + "\n",
    ));
    await writer.close().catch(() => {});
    const output = await process.output();
    const lines = new TextDecoder().decode(output.stdout).split("\n");
    for (const line of lines) {
      if (!line.startsWith(`${nonce} `)) continue;
      const frame = JSON.parse(line.slice(nonce.length + 1));
      if (frame.t === "snapshot") {
        return {
          path,
          bytes: frame.bytes,
          bootMs: frame.bootMs,
          totalMs: Math.round(performance.now() - started),
        };
      }
      if (frame.t === "fatal") {
        throw new Error(`Cannot build the Pyodide snapshot: ${frame.message}`);
      }
    }
    const stderr = new TextDecoder().decode(output.stderr).trim().split("\n").at(-1) ?? "";
    const how = output.signal ? `was killed by ${output.signal}` : `exited with ${output.code}`;
    throw new Error(
      `Cannot build the Pyodide snapshot: the builder ${how}${stderr ? `: ${stderr}` : ""}`,
    );
  } finally {
    clearTimeout(timer);
    options.signal?.removeEventListener("abort", kill);
  }
}

/** The `wheels` and `preload` fields of a snapshot build's `init`: what it unpacks and imports. */
function packagesInit(packages: readonly LocalWheel[]): Record<string, unknown> {
  if (packages.length === 0) return {};
  return {
    wheels: packages.map((wheel) => ({ name: wheel.name, data: wheel.bytes.toBase64() })),
    preload: [...new Set(packages.flatMap((wheel) => wheelModules(wheel.bytes)))],
  };
}

const SNAPSHOT_UNUSED_MS = 7 * 24 * 60 * 60 * 1000;

/**
 * Snapshots of earlier versions or preludes are 30 MB each; those not used for a week go. (Other
 * checkouts or versions sharing the cache keep theirs: each use refreshes a snapshot's mtime.)
 */
async function removeOldSnapshots(dir: string, keep: string): Promise<void> {
  for await (const entry of Deno.readDir(dir)) {
    const path = join(dir, entry.name);
    if (path === keep || !/^pyodide-.*\.snapshot$/.test(entry.name)) continue;
    const info = await Deno.stat(path).catch(() => undefined);
    if (info?.mtime && Date.now() - info.mtime.getTime() > SNAPSHOT_UNUSED_MS) {
      await Deno.remove(path).catch(() => {});
    }
  }
}

/**
 * Returns the snapshot file, building it on first use. A failed build is logged and children
 * then boot without a snapshot (slower, same behaviour). Concurrent builds are harmless: each
 * writes a temporary file and renames it into place.
 *
 * @param options The locations.
 * @returns The snapshot's path, or undefined when there is none.
 */
export async function ensurePyodideSnapshot(
  options: SnapshotOptions,
): Promise<string | undefined> {
  try {
    const path = await snapshotPath(options);
    if (await Deno.stat(path).then((s) => s.isFile && s.size > 0, () => false)) {
      const now = new Date();
      await Deno.utime(path, now, now).catch(() => {});
      return path;
    }
    // The one slow step of a first start (and of the first after an upgrade): say so, or a
    // person watching the terminal sees nothing for a quarter of a minute.
    options.log.info(
      "Preparing the Python snapshot, first start only (about 10 s; run_python waits for it) …",
    );
    const made = await buildPyodideSnapshot(options);
    await removeOldSnapshots(options.cacheDir, made.path);
    options.log.info(
      `Python snapshot ready in ${(made.totalMs / 1000).toFixed(1)} s (${
        (made.bytes / 2 ** 20).toFixed(0)
      } MiB, ${made.path})`,
    );
    return made.path;
  } catch (error) {
    if (!options.signal?.aborted) {
      options.log.warn(
        `Python children will boot without a memory snapshot (slower): ${(error as Error).message}`,
      );
    }
    return undefined;
  }
}
