/**
 * The files a sandbox child is started from: the `deno` executable, the runners under
 * `sandbox/` (written to the cache directory when the program does not run from a checkout),
 * and what dead hosts left behind.
 *
 * @module
 */
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { cacheDir } from "../../config/paths.ts";
import type { Settings } from "../../config/settings.ts";
import type { Logger } from "../../log.ts";
import { sha256Hex } from "../../_util.ts";
import { HAS_PROC, killProcessesIn, processExists } from "./_os.ts";
import { CHILD_DIR_PREFIX } from "./process.ts";
// Text imports put the sandbox files in the module graph: `deno publish` checks and ships them,
// `deno run jsr:…` and `deno install -g` cache them with the program, `deno compile` embeds them.
// A child cannot load them from an https: URL (it runs with --no-remote), so they are written
// to disk when the program does not run from a checkout.
import tsRunner from "../../../sandbox/ts_runner.ts" with { type: "text" };
import pyHost from "../../../sandbox/py_host.ts" with { type: "text" };
import pyWorker from "../../../sandbox/py_worker.ts" with { type: "text" };
import pyInbox from "../../../sandbox/py_inbox.ts" with { type: "text" };
import pyFiles from "../../../sandbox/py_files.ts" with { type: "text" };
import pyPrelude from "../../../sandbox/py_prelude.py" with { type: "text" };

const SANDBOX_TEXT: Readonly<Record<string, string>> = {
  "ts_runner.ts": tsRunner,
  "py_host.ts": pyHost,
  "py_worker.ts": pyWorker,
  "py_inbox.ts": pyInbox,
  "py_files.ts": pyFiles,
  "py_prelude.py": pyPrelude,
};

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
  /**
   * The Python children's (and the snapshot builder's) `DENO_DIR`: `deno` under
   * {@linkcode SandboxLocations.cacheDir}, where Pyodide's package is found too.
   */
  denoDir: string;
  /**
   * The TypeScript children's `DENO_DIR`: `deno-ts` under {@linkcode SandboxLocations.cacheDir}.
   * Apart from the Python one, so that its dependency-analysis cache can live in memory (it would
   * hold every run's code) while Python children keep theirs on disk (they analyse Pyodide's large
   * modules at each boot: ~140 ms more in memory). See `sealChildDenoDir`.
   */
  tsDenoDir: string;
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
    tsDenoDir: join(cache, "deno-ts"),
    tempRoot: settings.sandbox.tempDir ?? tmpdir(),
    runnerPath: await sandboxFile("ts_runner.ts", join(cache, "sandbox")),
  };
}

/**
 * Returns the runner's path on disk. From a checkout that is the file under `sandbox/`; when the
 * program's modules come from a registry (`deno run jsr:…`, `deno install -g`) or from inside a
 * compiled binary, the runner's text is written to `cacheDir` first (once per content: the name
 * holds its hash), where a child `deno` can load it.
 *
 * @param name The file under `sandbox/`.
 * @param cacheDir Where to write the runner when there is no checkout.
 * @returns An absolute path.
 * @throws {Deno.errors.NotFound} When `name` is not a file under `sandbox/`.
 * @throws {Deno.errors.PermissionDenied} When the runner is not in `cacheDir` yet and the
 *   directory is not writable.
 */
export async function sandboxFile(name: string, cacheDir: string): Promise<string> {
  const text = sandboxText(name);
  const local = checkoutPath(new URL(`../../../sandbox/${name}`, import.meta.url));
  if (local) return local;
  const target = join(cacheDir, `${sha256Hex(text).slice(0, 16)}-${name}`);
  // A read-only cache prepared in advance (a container image) already holds the file.
  if (await Deno.readTextFile(target).then((old) => old === text, () => false)) return target;
  await Deno.mkdir(dirname(target), { recursive: true });
  // Write and rename, so that another host starting at the same time never runs half a file.
  const temp = `${target}.${crypto.randomUUID()}.tmp`;
  try {
    await Deno.writeTextFile(temp, text);
    await Deno.rename(temp, target);
  } catch (error) {
    await Deno.remove(temp).catch(() => {});
    throw error;
  }
  return target;
}

/** The path of a module URL in a checkout, or undefined for a registry or a compiled binary. */
function checkoutPath(url: URL): string | undefined {
  if (url.protocol !== "file:") return undefined;
  const path = fileURLToPath(url);
  // A compiled binary serves its modules from a virtual directory named deno-compile-<name>,
  // which a child (another process) cannot read.
  return /deno-compile-/.test(path) ? undefined : path;
}

function sandboxText(name: string): string {
  if (!Object.hasOwn(SANDBOX_TEXT, name)) {
    throw new Deno.errors.NotFound(`No file sandbox/${name} in this program`);
  }
  return SANDBOX_TEXT[name];
}

/**
 * Returns the Python half of the sandbox, `sandbox/py_prelude.py`, as this program was built with
 * it. Python children get it in their `init` frame and run it when they boot without the memory
 * snapshot; the snapshot is keyed by its hash.
 *
 * @returns The prelude's text.
 */
export function pythonPrelude(): Promise<string> {
  return Promise.resolve(pyPrelude);
}

/**
 * Removes private directories left by a host that died without cleaning up (SIGKILL), and kills
 * the children still working in them.
 *
 * @param tempRoot The directory children are created in.
 * @param log Where removals are reported.
 */
export async function removeStaleDirs(tempRoot: string, log: Logger): Promise<void> {
  if (!HAS_PROC) return;
  const stale: string[] = [];
  try {
    for await (const entry of Deno.readDir(tempRoot)) {
      const match = new RegExp(`^${CHILD_DIR_PREFIX}(\\d+)-`).exec(entry.name);
      if (!match || !entry.isDirectory || Number(match[1]) === Deno.pid) continue;
      if (await processExists(Number(match[1]))) continue;
      // Compared below with working directories, which the kernel reports resolved.
      const dir = join(tempRoot, entry.name);
      stale.push(await Deno.realPath(dir).catch(() => dir));
    }
  } catch {
    // An unreadable temp root only means nothing is cleaned.
  }
  if (stale.length === 0) return;
  await killProcessesIn(stale, log);
  for (const dir of stale) {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
    log.debug(`Removed stale sandbox directory ${basename(dir)}`);
  }
}
