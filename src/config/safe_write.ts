/**
 * Careful writes of the user's config files: a timestamped backup first, then an atomic
 * replacement that keeps the file's mode, so that a crash or a full disk never leaves a config
 * half written.
 *
 * @module
 */
import { basename, dirname, join } from "node:path";

/** Options of {@linkcode writeFileAtomic}. */
export interface AtomicWriteOptions {
  /** Permission bits of a new file; an existing file keeps its own. Default 0o600. */
  mode?: number;
}

/**
 * Replaces a file's contents atomically: the text goes to a temporary file in the same
 * directory (so the rename cannot cross file systems), is flushed to disk, takes the mode of
 * the file it replaces, and is renamed over it. A symlink is followed, so the link stays and
 * its target is replaced. Missing parent directories are created (mode 0o700).
 *
 * @param path The file to write.
 * @param text The new contents.
 * @param options The mode of a new file.
 * @returns The path actually written (the symlink's target for a symlink).
 * @throws {Deno.errors.PermissionDenied} And other file system errors; the original is intact.
 */
export async function writeFileAtomic(
  path: string,
  text: string,
  options: AtomicWriteOptions = {},
): Promise<string> {
  const target = await Deno.realPath(path).catch(() => path);
  const mode = await Deno.stat(target).then(
    (info) => info.mode === null ? options.mode ?? 0o600 : info.mode & 0o7777,
    () => options.mode ?? 0o600,
  );
  await Deno.mkdir(dirname(target), { recursive: true, mode: 0o700 });
  const temp = join(
    dirname(target),
    `.${basename(target)}.${Deno.pid}.${crypto.randomUUID().slice(0, 8)}.tmp`,
  );
  const file = await Deno.open(temp, { write: true, createNew: true, mode: 0o600 });
  let renamed = false;
  try {
    await writeSyncClose(file, text);
    // The mode given at creation is masked by the umask; set it exactly.
    if (Deno.build.os !== "windows") await Deno.chmod(temp, mode);
    await Deno.rename(temp, target);
    renamed = true;
  } finally {
    if (!renamed) await Deno.remove(temp).catch(() => {});
  }
  return target;
}

/**
 * Writes all of a text to a file opened for writing, flushes it to disk and closes it (on every
 * path): a short write is continued, so a full disk fails here rather than truncating the file.
 *
 * @param file The open file; closed when this returns or throws.
 * @param text Its contents.
 * @returns Nothing.
 * @throws {Deno.errors.NoSpaceLeft} And other file system errors.
 */
export async function writeSyncClose(file: Deno.FsFile, text: string): Promise<void> {
  try {
    const bytes = new TextEncoder().encode(text);
    let written = 0;
    while (written < bytes.length) written += await file.write(bytes.subarray(written));
    await file.sync();
  } finally {
    file.close();
  }
}

/**
 * Copies a file to `<file>.backup-<UTC timestamp>` next to it, with the same mode. An existing
 * backup is never overwritten: a second one in the same second gets a `-2` suffix.
 *
 * @param path The file to back up.
 * @param now The time for the name; defaults to now.
 * @returns The backup's path.
 * @throws {Deno.errors.NotFound} When the file does not exist.
 */
export async function backupFile(path: string, now: Date = new Date()): Promise<string> {
  const target = await Deno.realPath(path);
  const bytes = await Deno.readFile(target);
  const info = await Deno.stat(target);
  const stamp = now.toISOString().replace(/[-:]/g, "").replace(/\.\d+Z$/, "Z");
  for (let n = 1;; n++) {
    const backup = `${target}.backup-${stamp}${n === 1 ? "" : `-${n}`}`;
    let file: Deno.FsFile;
    try {
      file = await Deno.open(backup, { write: true, createNew: true, mode: 0o600 });
    } catch (error) {
      if (error instanceof Deno.errors.AlreadyExists) continue;
      throw error;
    }
    try {
      let written = 0;
      while (written < bytes.length) written += await file.write(bytes.subarray(written));
      await file.sync();
    } finally {
      file.close();
    }
    if (Deno.build.os !== "windows" && info.mode !== null) {
      await Deno.chmod(backup, info.mode & 0o7777);
    }
    return backup;
  }
}
