/**
 * Host directories in Pyodide's file system, read-only: `py_worker.ts` imports this file only
 * when a run was granted paths to read (`permissions.read`), and mounts each at its own path.
 *
 * The file system type here reads through Deno's synchronous file APIs, one path component at a
 * time: `..` and symlinks are resolved by Emscripten's path walk inside the virtual tree (a
 * symlink is shown as a symlink, never followed on the host), so a path can only name a host file
 * under a mount. Every operation that would change a file fails with `EROFS`. Beneath it the
 * process's Deno permissions (read on the granted paths only) hold for code that reaches
 * JavaScript, as they do for TypeScript.
 *
 * This file must stay self-contained: it may be copied next to a compiled binary.
 *
 * @module
 */

/** The parts of Emscripten's `FS` this file uses. */
interface EmscriptenFS {
  createNode(parent: FsNode | null, name: string, mode: number, dev?: number): FsNode;
  mkdirTree(path: string): void;
  mount(type: unknown, opts: Record<string, unknown>, mountpoint: string): unknown;
  isDir(mode: number): boolean;
  isFile(mode: number): boolean;
  isLink(mode: number): boolean;
  ErrnoError: new (errno: number) => Error;
}

interface FsNode {
  parent: FsNode;
  name: string;
  mode: number;
  id: number;
  mount: { opts: { root: string; only?: string[] } };
  node_ops: unknown;
  stream_ops: unknown;
}

interface FsStream {
  node: FsNode;
  flags: number;
  position: number;
  file?: Deno.FsFile;
}

/** Emscripten's errno values (`ERRNO_CODES`), not the host's. */
const ENOENT = 44;
const EACCES = 2;
const EIO = 29;
const EISDIR = 31;
const ENOTDIR = 54;
const EINVAL = 28;
const EROFS = 69;

/** Open flags that ask for more than reading: O_WRONLY, O_RDWR, O_CREAT, O_TRUNC, O_APPEND. */
const WRITE_FLAGS = 1 | 2 | 64 | 512 | 1024;

/** What a Worker needs of Pyodide to mount. */
export interface PyodideFS {
  /** Emscripten's file system. */
  FS: unknown;
}

/**
 * Mounts each path read-only at the same path of Pyodide's file system. A file is shown alone in
 * its directory (the directory's other entries stay hidden).
 *
 * @param pyodide The interpreter.
 * @param paths Absolute real paths, as the host granted them.
 */
export function mountHostPaths(pyodide: PyodideFS, paths: readonly string[]): void {
  const FS = pyodide.FS as EmscriptenFS;
  const errno = (code: number) => new FS.ErrnoError(code);
  const fail = (error: unknown): never => {
    if (error instanceof FS.ErrnoError) throw error;
    if (error instanceof Deno.errors.NotFound) throw errno(ENOENT);
    if (error instanceof Deno.errors.NotADirectory) throw errno(ENOTDIR);
    if (error instanceof Deno.errors.IsADirectory) throw errno(EISDIR);
    if (error instanceof Deno.errors.PermissionDenied || error instanceof Deno.errors.NotCapable) {
      throw errno(EACCES);
    }
    throw errno(EIO);
  };
  const hostPath = (node: FsNode): string => {
    const parts: string[] = [];
    while (node.parent !== node) {
      parts.push(node.name);
      node = node.parent;
    }
    const root = node.mount.opts.root;
    return parts.length === 0 ? root : `${root === "/" ? "" : root}/${parts.reverse().join("/")}`;
  };
  const modeOf = (info: Deno.FileInfo): number => {
    // Only what Emscripten can show: directories, regular files and symlinks; no write bits.
    const type = info.isSymlink ? 0o120000 : info.isDirectory ? 0o040000 : 0o100000;
    return type | ((info.mode ?? 0o444) & 0o555);
  };
  const readOnly = () => {
    throw errno(EROFS);
  };
  const node_ops = {
    getattr(node: FsNode) {
      let info: Deno.FileInfo;
      try {
        info = Deno.lstatSync(hostPath(node));
      } catch (error) {
        return fail(error);
      }
      const epoch = new Date(0);
      return {
        dev: info.dev,
        ino: node.id,
        mode: modeOf(info),
        nlink: info.nlink ?? 1,
        uid: info.uid ?? 0,
        gid: info.gid ?? 0,
        rdev: 0,
        size: info.size,
        atime: info.atime ?? epoch,
        mtime: info.mtime ?? epoch,
        ctime: info.ctime ?? info.mtime ?? epoch,
        blksize: info.blksize ?? 4096,
        blocks: info.blocks ?? Math.ceil(info.size / 512),
      };
    },
    setattr: readOnly,
    lookup(parent: FsNode, name: string) {
      const only = parent.parent === parent ? parent.mount.opts.only : undefined;
      if (only && !only.includes(name)) throw errno(ENOENT);
      let info: Deno.FileInfo;
      try {
        info = Deno.lstatSync(`${hostPath(parent)}/${name}`);
      } catch (error) {
        // An entry the host denied (a symlink out of ALLOWED_PROJECTS) is listed, as Deno lists
        // it to TypeScript, and every use of it fails.
        if (error instanceof Deno.errors.NotCapable) return createNode(parent, name, 0o100000);
        return fail(error);
      }
      if (!info.isFile && !info.isDirectory && !info.isSymlink) throw errno(EACCES);
      return createNode(parent, name, modeOf(info));
    },
    readdir(node: FsNode) {
      const only = node.parent === node ? node.mount.opts.only : undefined;
      try {
        const names = [...Deno.readDirSync(hostPath(node))].map((entry) => entry.name);
        return [".", "..", ...(only ? names.filter((name) => only.includes(name)) : names)];
      } catch (error) {
        return fail(error);
      }
    },
    readlink(node: FsNode) {
      try {
        return Deno.readLinkSync(hostPath(node));
      } catch (error) {
        return fail(error);
      }
    },
    mknod: readOnly,
    rename: readOnly,
    unlink: readOnly,
    rmdir: readOnly,
    symlink: readOnly,
  };
  const stream_ops = {
    open(stream: FsStream) {
      if (stream.flags & WRITE_FLAGS) throw errno(EROFS);
      if (!FS.isFile(stream.node.mode)) return;
      try {
        stream.file = Deno.openSync(hostPath(stream.node), { read: true });
      } catch (error) {
        fail(error);
      }
    },
    close(stream: FsStream) {
      try {
        stream.file?.close();
      } catch {
        // Already closed.
      }
      stream.file = undefined;
    },
    read(
      stream: FsStream,
      buffer: Int8Array | Uint8Array,
      offset: number,
      length: number,
      position: number,
    ) {
      const file = stream.file;
      if (!file) throw errno(EISDIR);
      try {
        file.seekSync(position, Deno.SeekMode.Start);
        // The buffer is a view of Wasm memory (an Int8Array), which Deno's read does not take.
        const scratch = new Uint8Array(Math.min(length, 1 << 20));
        let done = 0;
        while (done < length) {
          const n = file.readSync(scratch.subarray(0, Math.min(scratch.length, length - done)));
          if (n === null || n === 0) break;
          new Uint8Array(buffer.buffer, buffer.byteOffset + offset + done, n)
            .set(scratch.subarray(0, n));
          done += n;
        }
        return done;
      } catch (error) {
        return fail(error);
      }
    },
    write: readOnly,
    llseek(stream: FsStream, offset: number, whence: number) {
      let position = offset;
      if (whence === 1) position += stream.position;
      else if (whence === 2 && stream.file) {
        try {
          position += stream.file.statSync().size;
        } catch (error) {
          fail(error);
        }
      }
      if (position < 0) throw errno(EINVAL);
      return position;
    },
  };
  const createNode = (parent: FsNode | null, name: string, mode: number): FsNode => {
    const node = FS.createNode(parent, name, mode);
    node.node_ops = node_ops;
    node.stream_ops = stream_ops;
    return node;
  };
  const HOSTFS = {
    mount() {
      return createNode(null, "/", 0o040555);
    },
  };

  const files = new Map<string, string[]>();
  const dirs: string[] = [];
  for (const path of paths) {
    let info: Deno.FileInfo;
    try {
      info = Deno.statSync(path);
    } catch {
      continue;
    }
    if (info.isDirectory) {
      dirs.push(path);
    } else {
      const cut = path.lastIndexOf("/");
      const dir = cut <= 0 ? "/" : path.slice(0, cut);
      files.set(dir, [...(files.get(dir) ?? []), path.slice(cut + 1)]);
    }
  }
  const covered = (path: string, by: string[]) =>
    by.some((dir) => dir !== path && (dir === "/" || path.startsWith(`${dir}/`)));
  // A grant under another grant is already shown by the outer mount.
  for (const dir of dirs) {
    if (covered(dir, dirs)) continue;
    FS.mkdirTree(dir);
    FS.mount(HOSTFS, { root: dir }, dir);
  }
  for (const [dir, only] of files) {
    if (covered(dir, dirs) || dirs.includes(dir)) continue;
    FS.mkdirTree(dir);
    FS.mount(HOSTFS, { root: dir, only }, dir);
  }
}
