/**
 * The `DENO_DIR` that sandbox children share, made to keep nothing of a run: no code, no
 * `localStorage` or `caches`.
 *
 * @module
 */
import { dirname, join } from "node:path";

/** The file name of Deno's dependency-analysis cache (Deno 2.x). */
const DEP_ANALYSIS_CACHE = "dep_analysis_cache_v2";

/**
 * Makes a children's `DENO_DIR` keep nothing of a run; called when an executor starts (and by
 * `prepare`) and after each run of a TypeScript child spawned for that run:
 * - `location_data`: where Deno keeps `localStorage` and `caches`, one store for every child
 *   (they run the same file): a run could leave data there for the next one. A plain file in its
 *   place makes both fail; the TypeScript runner also takes them away. (Both kinds of children.)
 * - `gen/data/`: Deno caches the JavaScript it emits for every `data:` module there, the model's
 *   code. Pooled TypeScript children run with the emit cache off; the others' entries are removed.
 *   (A plain file in its place would stop the writes, but Deno then spends ~150 ms retrying.)
 * - `dep_analysis_cache_v2`: Deno records every module it analyses in this SQLite file, keyed by
 *   the specifier, and a `data:` specifier is the code in base64. For TypeScript children
 *   (`inMemoryAnalysis`) a directory in its place makes Deno keep that cache in memory (~0.5 ms
 *   more on a child's first import); Python children import no code as modules and keep the file,
 *   which spares each boot the analysis of Pyodide's modules (~140 ms).
 * In a cache prepared read-only (an image), `prepare` has done this already and nothing changes.
 *
 * @param denoDir A `DENO_DIR` of sandbox children.
 * @param inMemoryAnalysis Whether the dependency-analysis cache must stay off the disk.
 */
export async function sealChildDenoDir(denoDir: string, inMemoryAnalysis: boolean): Promise<void> {
  await Deno.remove(join(denoDir, "gen", "data"), { recursive: true }).catch(() => {});
  await putInPlace(join(denoDir, "location_data"), "file");
  const analysis = join(denoDir, DEP_ANALYSIS_CACHE);
  if (inMemoryAnalysis) {
    await putInPlace(analysis, "directory");
    for (const sidecar of ["-wal", "-shm", "-journal"]) {
      await Deno.remove(analysis + sidecar).catch(() => {});
    }
  } else if (!(await Deno.lstat(join(denoDir, ANALYSIS_PURGED)).catch(() => undefined))) {
    // Until this version TypeScript children shared this directory, and its cache holds the code
    // of their runs: removed once (Deno makes a new one), then a mark says it was.
    for (const suffix of ["", "-wal", "-shm", "-journal"]) {
      await Deno.remove(analysis + suffix, { recursive: true }).catch(() => {});
    }
    await Deno.writeFile(join(denoDir, ANALYSIS_PURGED), new Uint8Array()).catch(() => {});
  }
}

/** The mark that the Python children's dependency-analysis cache holds no TypeScript run's code. */
const ANALYSIS_PURGED = ".code-executor-analysis-purged";

/** Makes `path` a file or a directory of nothing, removing whatever else is there. */
async function putInPlace(path: string, kind: "file" | "directory"): Promise<void> {
  const info = await Deno.lstat(path).catch(() => undefined);
  if (info && (kind === "file" ? info.isFile && info.size === 0 : info.isDirectory)) return;
  try {
    if (info) await Deno.remove(path, { recursive: true });
    await Deno.mkdir(dirname(path), { recursive: true });
    if (kind === "file") await Deno.writeFile(path, new Uint8Array(), { createNew: true });
    else await Deno.mkdir(path);
  } catch {
    // Read-only (prepared in advance), or another host sealed it at the same moment.
  }
}
