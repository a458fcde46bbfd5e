/**
 * What tests of the Python child start it from: the runner files, the Deno cache, Pyodide and its
 * memory snapshot (built once, on the first import, and shared with the real server's cache).
 *
 * @module
 */
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { cacheDir } from "../src/config/paths.ts";
import type { PyRunLimits } from "../src/exec/py_sandbox.ts";
import { ensurePyodideSnapshot, findPyodideDir } from "../src/exec/pyodide.ts";
import { createLogger } from "../src/log.ts";

const sandboxDir = fileURLToPath(new URL("../sandbox/", import.meta.url));

/** `sandbox/py_host.ts`. */
export const hostPath = join(sandboxDir, "py_host.ts");
/** `sandbox/py_worker.ts`. */
export const workerPath = join(sandboxDir, "py_worker.ts");
/** The children's Deno cache, as the executor uses it. */
export const denoDir = join(cacheDir(), "deno");
/** Pyodide's package directory; a missing Pyodide fails every test that imports this (none is skipped). */
export const pyodideDir = await findPyodideDir();
/** The memory snapshot children boot from. */
export const snapshotPath = await ensurePyodideSnapshot({
  denoPath: Deno.execPath(),
  hostPath,
  workerPath,
  pyodideDir,
  cacheDir: join(cacheDir(), "pyodide"),
  denoDir,
  log: createLogger("error"),
});
/** Limits for a test run: generous, since the machine may be loaded. */
export const LIMITS: PyRunLimits = { timeoutMs: 20_000, maxOutputBytes: 100 * 1024 };
