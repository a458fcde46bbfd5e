/**
 * Local wheels: the pure-Python `*.whl` files of the directories named by `python.wheelDirs`.
 * The host reads them (again when {@linkcode wheelDirsSignature} changes) and hands their bytes to
 * every Python child, which unpacks them into its site-packages ({@linkcode WheelWatch} notices
 * when they change); a child never reads those directories itself and nothing is fetched from a
 * network.
 *
 * @module
 */
import { basename, dirname, join } from "node:path";
import type { Logger } from "../../log.ts";

/** A wheel handed to Python children. */
export interface LocalWheel {
  /** The file name, `<distribution>-<version>-py3-none-any.whl`. */
  name: string;
  /** The file's contents. */
  bytes: Uint8Array;
}

/**
 * The total size of the wheels a Python child is given. Every child unpacks them into its memory:
 * a child's resident memory grows by roughly ten times the size of what it unpacks (copies while
 * the frame is decoded and while Pyodide's in-memory files grow), so 20 MB of uncompressed
 * wheels takes a child from ~185 MB to ~400 MB, near `python.memoryMb`'s default of 512.
 */
export const MAX_WHEEL_BYTES = 20 * 1024 * 1024;

/** Top-level names a wheel may not provide: the sandbox never lets Python code import them. */
const RESERVED_MODULES = new Set(["js", "pyodide_js", "pyodide", "_pyodide", "_pyodide_core"]);

/** Options of {@linkcode readWheels}. */
export interface ReadWheelsOptions {
  /** Where skipped wheels are reported. */
  log: Logger;
  /** Total size of the wheels; {@linkcode MAX_WHEEL_BYTES} by default. */
  maxBytes?: number;
  /** The setting that names the paths, for messages; `python.wheelDirs` by default. */
  setting?: string;
}

const EOCD_SIGNATURE = 0x06054b50;
const CENTRAL_SIGNATURE = 0x02014b50;

/** Lists the entry names of a zip archive from its central directory. */
function zipEntryNames(bytes: Uint8Array): string[] {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let end = -1;
  for (let at = bytes.length - 22; at >= Math.max(0, bytes.length - 22 - 0xffff); at--) {
    if (view.getUint32(at, true) === EOCD_SIGNATURE) {
      end = at;
      break;
    }
  }
  if (end < 0) throw new SyntaxError("Cannot read the wheel: it is not a zip archive");
  const count = view.getUint16(end + 10, true);
  const size = view.getUint32(end + 12, true);
  const offset = view.getUint32(end + 16, true);
  if (count === 0xffff || offset === 0xffffffff) {
    throw new SyntaxError("Cannot read the wheel: ZIP64 archives are not supported");
  }
  if (offset + size > end) {
    throw new SyntaxError("Cannot read the wheel: its central directory is damaged");
  }
  const decoder = new TextDecoder();
  const names: string[] = [];
  let at = offset;
  for (let i = 0; i < count; i++) {
    if (at + 46 > end || view.getUint32(at, true) !== CENTRAL_SIGNATURE) {
      throw new SyntaxError("Cannot read the wheel: its central directory is damaged");
    }
    const nameLength = view.getUint16(at + 28, true);
    names.push(decoder.decode(bytes.subarray(at + 46, at + 46 + nameLength)));
    at += 46 + nameLength + view.getUint16(at + 30, true) + view.getUint16(at + 32, true);
  }
  return names;
}

/**
 * Returns the top-level modules a wheel installs, from the archive's entries: its package
 * directories and top-level `.py` files (the `.dist-info` and `.data` directories excluded).
 * `top_level.txt` is not used: only setuptools writes it.
 *
 * @param bytes The wheel file.
 * @returns The module names, sorted.
 * @throws {SyntaxError} When the bytes are not a zip archive with a `.dist-info` directory.
 */
export function wheelModules(bytes: Uint8Array): string[] {
  const modules = new Set<string>();
  let distInfo = false;
  for (const entry of zipEntryNames(bytes)) {
    const slash = entry.indexOf("/");
    const top = slash < 0 ? entry : entry.slice(0, slash);
    if (top.endsWith(".dist-info")) {
      distInfo = true;
      continue;
    }
    const name = slash >= 0 ? top : top.endsWith(".py") ? top.slice(0, -3) : "";
    if (/^[A-Za-z_][A-Za-z0-9_]*$/.test(name) && name !== "__pycache__") modules.add(name);
  }
  if (!distInfo) throw new SyntaxError("Cannot read the wheel: it has no .dist-info directory");
  return [...modules].sort();
}

/**
 * Says why a wheel's file name does not name a pure-Python wheel for Python 3.
 *
 * @param name The file name.
 * @returns The reason, or undefined when the wheel fits.
 */
export function impureWheelReason(name: string): string | undefined {
  const parts = name.slice(0, -".whl".length).split("-");
  if (!name.endsWith(".whl") || parts.length < 5 || parts.length > 6) {
    return "the file name is not <name>-<version>-<python>-<abi>-<platform>.whl";
  }
  const [python, abi, platform] = parts.slice(-3);
  if (abi !== "none" || platform !== "any") {
    return `it is built for ${abi}-${platform}, and only pure-Python wheels (none-any) can be loaded`;
  }
  if (!python.split(".").some((tag) => /^(py3\d*|cp3\d+|py)$/.test(tag))) {
    return `it is built for ${python}, not Python 3`;
  }
  return undefined;
}

function distribution(name: string): string {
  return name.split("-")[0].toLowerCase().replace(/[-_.]+/g, "_");
}

function megabytes(bytes: number): string {
  return `${Math.round(bytes / 1024 / 102.4) / 10} MB`;
}

/**
 * Reads the pure-Python wheels of the directories named by `python.wheelDirs`: each directory's
 * `*.whl` files (not its subdirectories), sorted by name, directories in the order given. A wheel
 * that is not pure Python, cannot be read as a zip archive, would provide a module the sandbox
 * reserves, or repeats a distribution seen before is skipped with a warning.
 *
 * @param dirs The directories.
 * @param options The logger and the size limit.
 * @returns The wheels, in the order they are to be installed.
 * @throws {Error} When a directory cannot be read or the wheels are larger than `maxBytes`.
 */
export async function readWheels(
  dirs: readonly string[],
  options: ReadWheelsOptions,
): Promise<LocalWheel[]> {
  const maxBytes = options.maxBytes ?? MAX_WHEEL_BYTES;
  const wheels: LocalWheel[] = [];
  const seen = new Map<string, string>();
  let total = 0;
  const setting = options.setting ?? "python.wheelDirs";
  for (let dir of dirs) {
    const names: string[] = [];
    try {
      // A path of `python.packages` may name one wheel file.
      if (dir.endsWith(".whl") && (await Deno.stat(dir)).isFile) {
        names.push(basename(dir));
        dir = dirname(dir);
      } else {
        for await (const entry of Deno.readDir(dir)) {
          if (entry.name.endsWith(".whl") && !entry.isDirectory) names.push(entry.name);
        }
      }
    } catch (error) {
      throw new Error(
        `Cannot read the ${setting} ${options.setting ? "path" : "directory"} "${dir}": ${
          (error as Error).message
        }`,
      );
    }
    for (const name of names.sort()) {
      const path = join(dir, name);
      const skip = (why: string) => options.log.warn(`Skipping the wheel ${path}: ${why}`);
      const impure = impureWheelReason(name);
      if (impure) {
        skip(impure);
        continue;
      }
      const first = seen.get(distribution(name));
      if (first) {
        skip(`${first} is the same distribution and comes first`);
        continue;
      }
      let bytes: Uint8Array;
      try {
        const info = await Deno.stat(path);
        if (!info.isFile) continue;
        total += info.size;
        if (total > maxBytes) {
          throw new RangeError(
            `The wheels in ${setting} are larger than ${
              megabytes(maxBytes)
            } (reached at ${path}): every Python sandbox holds them in memory, so keep fewer or smaller wheels there`,
          );
        }
        bytes = await Deno.readFile(path);
      } catch (error) {
        if (error instanceof RangeError) throw error;
        skip((error as Error).message);
        continue;
      }
      let modules: string[];
      try {
        modules = wheelModules(bytes);
      } catch (error) {
        skip((error as Error).message.replace(/^Cannot read the wheel: /, ""));
        continue;
      }
      const reserved = modules.filter((module) => RESERVED_MODULES.has(module));
      if (reserved.length > 0) {
        skip(`it provides ${reserved.join(", ")}, which the sandbox reserves`);
        continue;
      }
      seen.set(distribution(name), name);
      wheels.push({ name, bytes });
      options.log.debug(
        `Python sandboxes get the wheel ${path} (${bytes.length} bytes, modules ${
          modules.join(", ") || "none"
        })`,
      );
    }
  }
  return wheels;
}

/**
 * Describes the `*.whl` files of the directories as {@linkcode readWheels} would see them, from
 * their names, sizes, modification times and inodes, without reading them: when it changes, the
 * wheels are to be read again. `code-executor sync` writes a wheel to a temporary file and renames
 * it into place, which gives it a new inode even when its size and time look the same.
 *
 * @param dirs The directories of `python.wheelDirs`.
 * @returns A string that changes when a wheel is added, removed or rewritten.
 */
export async function wheelDirsSignature(dirs: readonly string[]): Promise<string> {
  const parts: string[] = [];
  for (const dir of dirs) {
    const names: string[] = [];
    try {
      for await (const entry of Deno.readDir(dir)) {
        if (entry.name.endsWith(".whl")) names.push(entry.name);
      }
    } catch (error) {
      parts.push(`${dir}\0${(error as Error).name}`);
      continue;
    }
    for (const name of names.sort()) {
      const info = await Deno.stat(join(dir, name)).catch(() => undefined);
      parts.push(
        `${dir}\0${name}\0${info?.size}\0${info?.mtime?.getTime()}\0${info?.ino ?? ""}`,
      );
    }
  }
  return parts.join("\n");
}

/** How often {@linkcode WheelWatch} looks at the wheel directories, at most. */
const WHEEL_CHECK_MS = 1_000;

/**
 * Notices when the wheels of `python.wheelDirs` change and reads them again. Looking costs a
 * directory listing and a stat per wheel; it happens when a run starts, at most once a second.
 */
export class WheelWatch {
  #dirs: readonly string[];
  #signature: string;
  #log: Logger;
  #changed: (wheels: LocalWheel[]) => void;
  #checkedAt = performance.now();
  #checking: Promise<void> | undefined;

  /**
   * Starts watching from the state the wheels were read in.
   *
   * @param options `python.wheelDirs`, the {@linkcode wheelDirsSignature} of the wheels as read,
   * where changes and failures are reported, and what receives the wheels read again.
   */
  constructor(options: {
    dirs: readonly string[];
    signature: string;
    log: Logger;
    changed: (wheels: LocalWheel[]) => void;
  }) {
    this.#dirs = options.dirs;
    this.#signature = options.signature;
    this.#log = options.log;
    this.#changed = options.changed;
  }

  /** Reads the wheels again if they changed; concurrent callers share one look. */
  check(): Promise<void> {
    if (this.#dirs.length === 0) return Promise.resolve();
    if (this.#checking) return this.#checking;
    if (performance.now() - this.#checkedAt < WHEEL_CHECK_MS) return Promise.resolve();
    this.#checking = this.#look().finally(() => {
      this.#checkedAt = performance.now();
      this.#checking = undefined;
    });
    return this.#checking;
  }

  async #look(): Promise<void> {
    const signature = await wheelDirsSignature(this.#dirs);
    if (signature === this.#signature) return;
    // Whatever the outcome, this state of the files is dealt with: a failure is not retried
    // (and logged) every second, and the next change is picked up.
    this.#signature = signature;
    let wheels: LocalWheel[];
    try {
      wheels = await readWheels(this.#dirs, { log: this.#log });
    } catch (error) {
      this.#log.warn(
        `Python sandboxes keep the wheels they had: the changed python.wheelDirs cannot be used: ${
          (error as Error).message
        }`,
      );
      return;
    }
    this.#log.info(
      `python.wheelDirs changed: new Python sandboxes get ${wheels.length} wheel(s) (${
        wheels.map((wheel) => wheel.name).join(", ") || "none"
      }); open sessions keep theirs`,
    );
    this.#changed(wheels);
  }
}
