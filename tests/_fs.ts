/**
 * Temporary directories for a test (a plain one, or a user's HOME and project), files written
 * where a client keeps them, and a directory's files read back.
 *
 * @module
 */
import { dirname, join, relative } from "node:path";

/**
 * Runs `fn` with a fresh temporary directory, and removes it afterwards.
 *
 * @param prefix The directory name's prefix.
 * @param fn The test body.
 * @returns What `fn` returns.
 */
export async function withTempDir<T>(prefix: string, fn: (dir: string) => Promise<T>): Promise<T> {
  const dir = await Deno.makeTempDir({ prefix });
  try {
    return await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** The directories of a test that plays a user: a HOME and a project under one temp root. */
export interface UserDirs {
  /** The temp root, as its real path. */
  root: string;
  /** `<root>/home`, empty. */
  home: string;
  /** `<root>/project`, empty. */
  project: string;
}

/**
 * Runs `fn` with a fresh temp root holding an empty `home/` and `project/`, and removes it
 * afterwards. The root is its real path, so that paths compare equal where the temp directory is
 * behind a symlink.
 *
 * @param prefix The root's name prefix.
 * @param fn The test body.
 * @returns What `fn` returns.
 */
export async function withUserDirs<T>(
  prefix: string,
  fn: (dirs: UserDirs) => Promise<T>,
): Promise<T> {
  const root = await Deno.realPath(await Deno.makeTempDir({ prefix }));
  const dirs = { root, home: join(root, "home"), project: join(root, "project") };
  try {
    await Deno.mkdir(dirs.home);
    await Deno.mkdir(dirs.project);
    return await fn(dirs);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
}

/**
 * Writes a text file, creating the directories it goes in: a user's config where the client
 * keeps it.
 *
 * @param path The file.
 * @param text Its contents.
 * @param options `mode`: the file's permission bits, set whatever the umask.
 * @returns The path.
 */
export async function writeFileWithParents(
  path: string,
  text: string,
  options: { mode?: number } = {},
): Promise<string> {
  await Deno.mkdir(dirname(path), { recursive: true });
  await Deno.writeTextFile(path, text);
  if (options.mode !== undefined) await Deno.chmod(path, options.mode);
  return path;
}

/**
 * Every file under a directory (`.cache` directories aside), by relative path, with its text.
 *
 * @param root The directory.
 * @returns The files.
 */
export async function snapshotFiles(root: string): Promise<Map<string, string>> {
  const files = new Map<string, string>();
  const walk = async (dir: string) => {
    for await (const entry of Deno.readDir(dir)) {
      const path = join(dir, entry.name);
      if (entry.isDirectory) {
        if (entry.name !== ".cache") await walk(path);
      } else files.set(relative(root, path), await Deno.readTextFile(path));
    }
  };
  await walk(root);
  return files;
}
