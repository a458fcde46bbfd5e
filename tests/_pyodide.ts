/**
 * What tests of the Python child start it from: the runner files, the Deno cache, Pyodide and its
 * memory snapshot (built once, on the first import, and shared with the real server's cache), and
 * a child started from them that leaves nothing behind.
 *
 * @module
 */
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { assert, assertEquals } from "./_assert.ts";
import { leftovers, processGone } from "./_proc.ts";
import { cacheDir } from "../src/config/paths.ts";
import { PyChild, type PyChildOptions, type PyRunLimits } from "../src/exec/python/child.ts";
import { ensurePyodideSnapshot, findPyodideDir } from "../src/exec/python/pyodide.ts";
import { createLogger } from "../src/log.ts";

const sandboxDir = fileURLToPath(new URL("../sandbox/", import.meta.url));

/** `sandbox/py_host.ts`. */
export const hostPath = join(sandboxDir, "py_host.ts");
/** `sandbox/py_worker.ts`. */
export const workerPath = join(sandboxDir, "py_worker.ts");
/** `sandbox/py_inbox.ts`. */
export const inboxPath = join(sandboxDir, "py_inbox.ts");
/** The children's Deno cache, as the executor uses it. */
export const denoDir = join(cacheDir(), "deno");
/** Pyodide's package directory; a missing Pyodide fails every test that imports this (none is skipped). */
export const pyodideDir = await findPyodideDir();
/** The memory snapshot children boot from. */
export const snapshotPath = await ensurePyodideSnapshot({
  denoPath: Deno.execPath(),
  hostPath,
  workerPath,
  inboxPath,
  pyodideDir,
  cacheDir: join(cacheDir(), "pyodide"),
  denoDir,
  log: createLogger("error"),
});
/** Limits for a test run: generous, since the machine may be loaded. */
export const LIMITS: PyRunLimits = { timeoutMs: 20_000, maxOutputBytes: 100 * 1024 };

/**
 * The options a test's Python child starts with: the files, caches and snapshot above, 512 MB.
 *
 * @param tempRoot Where the child makes its sandbox directory.
 * @returns Options for `PyChild.spawn()`; spread over them to change one.
 */
export function testChildOptions(tempRoot: string): PyChildOptions {
  return {
    denoPath: Deno.execPath(),
    hostPath,
    workerPath,
    inboxPath,
    pyodideDir,
    snapshotPath,
    tempRoot,
    denoDir,
    memoryMb: 512,
    log: createLogger("error"),
  };
}

/**
 * Spawns a ready Python child under a fresh temp root, runs `fn`, then disposes of the child and
 * checks that neither its process nor its directory is left.
 *
 * @param options Overrides of the child's options (`session`, `wheels`, `log`, …).
 * @param fn The test body.
 * @returns What `fn` returns.
 */
export async function withPyChild<T>(
  options: Partial<PyChildOptions>,
  fn: (child: PyChild) => Promise<T>,
): Promise<T> {
  const tempRoot = await Deno.makeTempDir({ prefix: "ce-py-" });
  let child: PyChild | undefined;
  try {
    child = await PyChild.spawn({ ...testChildOptions(tempRoot), ...options });
    assert(await child.ready, "the Python child did not start");
    return await fn(child);
  } finally {
    await child?.dispose();
    const left = await leftovers(tempRoot);
    await Deno.remove(tempRoot, { recursive: true });
    assertEquals(left, [], "sandbox directories left behind");
    if (child) assert(await processGone(child.pid), `sandbox process ${child.pid} left behind`);
  }
}
