/**
 * The Web Worker of a Python sandbox child: it boots Pyodide (from a memory snapshot when the
 * controller has one) and runs the model's Python. It is started by `sandbox/py_host.ts` with no
 * permission beyond reading the Pyodide package, the snapshot and this file. The Python half of
 * the sandbox (`sandbox/py_prelude.py`) comes in the `boot` message: the host reads it, so that
 * this process needs no permission to.
 *
 * Messages (structured clone, never trusted by the controller):
 * - controller → worker: `{t:"boot", indexDir, indexUrl, snapshotPath?, makeSnapshot, interrupt,
 *   allowedImports, wheels, prelude, files?, preload}` (`wheels`: `[{name, bytes}]`; `preload`:
 *   the modules a snapshot build imports after unpacking the wheels; `files`: `{url,
 *   read}`, `sandbox/py_files.ts` and the granted paths it mounts; `prelude`: the text of
 *   `sandbox/py_prelude.py`, run only when making the snapshot or booting without one), then
 *   `{t:"exec", source, args?}` (`args`: JSON text, a skill's arguments), `{t:"reply", id, body}`
 *   and `{t:"interrupt"}`.
 * - worker → controller: `{t:"ready", bootMs, fromSnapshot, snapshotError?, wheelErrors?}` (or
 *   `{t:"snapshot", bytes}` when asked to make one), `{t:"out", s, d}`,
 *   `{t:"call", id, op, payload}` (payload is JSON text) and `{t:"result", body}` (JSON text).
 *
 * Python can reach this worker's JavaScript globals (`js`, `pyodide_js`, any JsProxy's
 * `constructor.constructor`), so nothing here is a security boundary: the nonce and the frame
 * channel live in the controller's thread, and the process's Deno permissions are the wall.
 *
 * This file must stay self-contained: it may be copied next to a compiled binary.
 *
 * @module
 */

interface PyProxyFunction {
  (...args: unknown[]): unknown;
}

interface SandboxModule {
  attach: PyProxyFunction;
  interrupt: PyProxyFunction;
  run: (source: string) => Promise<string>;
  run_sync: (source: string, args?: string) => string | undefined;
  warm_up: () => string;
}

interface Pyodide {
  runPython(code: string, options?: { filename?: string; globals?: unknown }): unknown;
  pyimport(name: string): unknown;
  setStdout(options: { write(buffer: Uint8Array): number; isatty?: boolean }): void;
  setStderr(options: { write(buffer: Uint8Array): number; isatty?: boolean }): void;
  setStdin(options: { error: boolean }): void;
  setInterruptBuffer(buffer: Int32Array): void;
  checkInterrupt(): void;
  makeMemorySnapshot(): Uint8Array;
  unpackArchive(buffer: Uint8Array, format: string, options?: { extractDir?: string }): void;
  FS: unknown;
}

type LoadPyodide = (options: Record<string, unknown>) => Promise<Pyodide>;

interface WorkerScope {
  onmessage: ((event: MessageEvent) => void) | null;
  postMessage(message: unknown, transfer?: Transferable[]): void;
}

const scope = globalThis as unknown as WorkerScope;
const post = scope.postMessage.bind(scope);

// Writes from this thread must not reach the child's stdout, which carries the controller's
// frames. Closing the worker's handles stops Deno.stdout, console and process.stdout here; the
// controller's own handles stay open. Raw file descriptor writes (node:fs) remain possible and
// are caught by the host, since they cannot carry the nonce.
for (const stream of [Deno.stdout, Deno.stderr, Deno.stdin]) {
  try {
    stream.close();
  } catch {
    // Already closed.
  }
}

function describe(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

function forwardConsole(): void {
  const out = (stream: "stdout" | "stderr") => (...args: unknown[]) => {
    const text = args.map((a) => typeof a === "string" ? a : Deno.inspect(a)).join(" ");
    post({ t: "out", s: stream, d: text + "\n" });
  };
  const log = out("stdout");
  const error = out("stderr");
  const replacement = { log, info: log, debug: log, error, warn: error, trace: error };
  Object.defineProperty(globalThis, "console", {
    value: replacement,
    writable: true,
    configurable: true,
  });
}
forwardConsole();

let pyodide: Pyodide | undefined;
let sandbox: SandboxModule | undefined;
let interruptBuffer: Int32Array | undefined;
let booting: Promise<void> | undefined;
const pending = new Map<number, (body: string) => void>();
let nextId = 1;

function writer(stream: "stdout" | "stderr") {
  const decoder = new TextDecoder();
  return {
    isatty: false,
    write(buffer: Uint8Array): number {
      const text = decoder.decode(buffer, { stream: true });
      if (text) post({ t: "out", s: stream, d: text });
      return buffer.length;
    },
  };
}

/** Sleeps without burning CPU; an interrupt wakes it and raises KeyboardInterrupt. */
function sleep(seconds: number): void {
  const buffer = interruptBuffer!;
  const deadline = performance.now() + seconds * 1000;
  while (true) {
    const left = deadline - performance.now();
    if (left <= 0) return;
    if (Atomics.wait(buffer, 0, 0, Math.min(left, 2 ** 31)) === "not-equal") break;
  }
  pyodide!.checkInterrupt();
}

const PAGE = 4096;

function zeroPage(words: Uint32Array, page: number): boolean {
  const end = (page + 1) * (PAGE / 4);
  for (let i = page * (PAGE / 4); i < end; i++) if (words[i] !== 0) return false;
  return true;
}

/**
 * Makes restoring the snapshot skip the pages that are zero both in the snapshot and in the fresh
 * Wasm memory. Copying them would make half of the snapshot's 30 MB resident for nothing.
 *
 * @returns A function that puts the original copy back.
 */
function sparseRestore(): () => void {
  const original = Int8Array.prototype.set;
  const minimum = 8 * 1024 * 1024;
  Int8Array.prototype.set = function (
    this: Int8Array,
    source: ArrayLike<number>,
    offset = 0,
  ): void {
    const fits = source instanceof Uint8Array && source.length >= minimum && offset === 0 &&
      this.byteOffset === 0 && source.byteOffset % 4 === 0 && source.length % PAGE === 0 &&
      this.length >= source.length;
    if (!fits) return original.call(this, source, offset);
    const bytes = source as Uint8Array;
    const from = new Uint32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4);
    const to = new Uint32Array(this.buffer, 0, bytes.length / 4);
    for (let page = 0; page < bytes.length / PAGE; page++) {
      if (zeroPage(from, page) && zeroPage(to, page)) continue;
      original.call(this, bytes.subarray(page * PAGE, (page + 1) * PAGE), page * PAGE);
    }
  } as typeof Int8Array.prototype.set;
  return () => {
    Int8Array.prototype.set = original;
  };
}

/**
 * Makes Pyodide's `WebAssembly.instantiate(bytes, imports)` compile first and instantiate the
 * module second: V8 then compiles lazily, which saves ~300 ms of the boot.
 *
 * @returns A function that puts the original back.
 */
function lazyInstantiate(): () => void {
  const original = WebAssembly.instantiate;
  const split = async (source: unknown, imports?: WebAssembly.Imports) => {
    if (!(source instanceof ArrayBuffer || ArrayBuffer.isView(source))) {
      return await (original as (s: unknown, i?: WebAssembly.Imports) => Promise<unknown>)(
        source,
        imports,
      );
    }
    const module = await WebAssembly.compile(source as BufferSource);
    return { module, instance: await original(module, imports) };
  };
  WebAssembly.instantiate = split as typeof WebAssembly.instantiate;
  return () => {
    WebAssembly.instantiate = original;
  };
}

function request(op: string, payload: string): Promise<string> {
  const id = nextId++;
  return new Promise((resolve) => {
    pending.set(id, resolve);
    post({ t: "call", id, op, payload });
  });
}

async function boot(message: Record<string, unknown>): Promise<void> {
  const started = performance.now();
  // Read while Pyodide's modules load; loadPyodide awaits it only before instantiating the Wasm.
  const snapshot = typeof message.snapshotPath === "string"
    ? Deno.readFile(message.snapshotPath).catch((error: Error) => {
      throw new Error(`Cannot read the snapshot: ${error.message}`);
    })
    : undefined;
  // A failed read is reported below, when the boot falls back to a cold load.
  snapshot?.catch(() => {});
  const module = await import(new URL("pyodide.mjs", String(message.indexUrl)).href) as {
    loadPyodide: LoadPyodide;
  };
  const base = {
    indexURL: `${String(message.indexDir)}/`,
    env: { HOME: "/home/pyodide" },
    args: [],
  };
  const restoreInstantiate = lazyInstantiate();
  let fromSnapshot = false;
  let snapshotError: string | undefined;
  try {
    if (message.makeSnapshot === true) {
      const made = await module.loadPyodide({ ...base, _makeSnapshot: true });
      runPrelude(made, message.prelude);
      preloadPackages(made, message.wheels, message.preload);
      const bytes = made.makeMemorySnapshot();
      post({ t: "snapshot", bytes, bootMs: performance.now() - started }, [
        bytes.buffer as ArrayBuffer,
      ]);
      return;
    }
    if (snapshot) {
      const restore = sparseRestore();
      try {
        pyodide = await module.loadPyodide({ ...base, _loadSnapshot: snapshot });
        fromSnapshot = true;
        // Pyodide keeps its options; the snapshot's 30 MB would stay alive with them.
        const api = (pyodide as unknown as { _api?: { config?: Record<string, unknown> } })._api;
        if (api?.config) api.config._loadSnapshot = undefined;
      } catch (error) {
        snapshotError = describe(error);
      } finally {
        restore();
      }
    }
    if (!pyodide) {
      pyodide = await module.loadPyodide(base);
      runPrelude(pyodide, message.prelude);
    }
  } finally {
    restoreInstantiate();
  }
  interruptBuffer = new Int32Array(message.interrupt as SharedArrayBuffer, 0, 1);
  pyodide.setInterruptBuffer(interruptBuffer);
  pyodide.setStdout(writer("stdout"));
  pyodide.setStderr(writer("stderr"));
  pyodide.setStdin({ error: true });
  await mountGranted(pyodide, message.files);
  const wheelErrors = installWheels(pyodide, message.wheels);
  delete message.wheels;
  delete message.prelude;
  sandbox = pyodide.pyimport("_sandbox") as SandboxModule;
  sandbox.attach({ sleep, request }, JSON.stringify(message.allowedImports ?? []));
  sandbox.warm_up();
  post({
    t: "ready",
    bootMs: performance.now() - started,
    fromSnapshot,
    snapshotError,
    wheelErrors: wheelErrors.length > 0 ? wheelErrors : undefined,
  });
}

/**
 * Unpacks the admin's wheels into site-packages. They are applied to every interpreter after
 * boot, never baked into the snapshot, so changing them does not rebuild it. A wheel that cannot
 * be unpacked is reported and left out (what it had unpacked may stay): the interpreter works
 * without it, and the host logs why.
 *
 * @returns One message per wheel that failed.
 */
function installWheels(target: Pyodide, wheels: unknown): string[] {
  if (!Array.isArray(wheels) || wheels.length === 0) return [];
  const errors: string[] = [];
  const sitePackages = String(target.runPython("__import__('site').getsitepackages()[0]"));
  for (const wheel of wheels as Array<{ name?: unknown; bytes?: unknown }>) {
    const name = String(wheel?.name);
    try {
      if (!(wheel?.bytes instanceof Uint8Array)) throw new TypeError("no bytes were received");
      target.unpackArchive(wheel.bytes, "wheel", { extractDir: sitePackages });
    } catch (error) {
      // A Python error's message is its whole traceback; its last line says what failed.
      const last = describe(error).trim().split("\n").at(-1)?.trim();
      errors.push(`Cannot install ${name}: ${last}`);
    }
  }
  // The import system notices new entries by the directory's mtime, which may not have ticked.
  target.runPython(
    `(lambda f: f and f.invalidate_caches())(__import__('sys').path_importer_cache.get(${
      JSON.stringify(sitePackages)
    }))`,
  );
  return errors;
}

/** Shows the run's granted paths (`permissions.read`) read-only, with `py_files.ts`. */
async function mountGranted(target: Pyodide, files: unknown): Promise<void> {
  const { url, read } = (files ?? {}) as { url?: unknown; read?: unknown };
  if (typeof url !== "string" || !Array.isArray(read) || read.length === 0) return;
  const module = await import(url) as {
    mountHostPaths(pyodide: Pyodide, paths: string[]): void;
  };
  module.mountHostPaths(target, read.map(String));
}

/**
 * Unpacks the wheels of `python.packages` and imports their modules, so that the snapshot holds
 * them imported: a run's `import` of one then finds it in `sys.modules`. The files themselves
 * are not in the snapshot (it holds the Wasm memory, not the file system), so every child unpacks
 * the wheels again after it boots, for the submodules and data files that load later.
 *
 * @throws {Error} When a wheel cannot be unpacked or a module cannot be imported: the build
 * fails, and the host names the wheel.
 */
function preloadPackages(target: Pyodide, wheels: unknown, preload: unknown): void {
  const errors = installWheels(target, wheels);
  if (errors.length > 0) throw new Error(errors.join("; "));
  const names = Array.isArray(preload) ? preload.map(String) : [];
  if (names.length === 0) return;
  target.runPython(
    `import importlib as _i\nfor _n in ${
      JSON.stringify(names)
    }:\n    _i.import_module(_n)\ndel _i, _n`,
    { filename: "<python.packages>" },
  );
}

function runPrelude(target: Pyodide, prelude: unknown): void {
  if (typeof prelude !== "string" || prelude === "") {
    throw new TypeError("Cannot boot Python without a snapshot: the host sent no prelude");
  }
  const namespace = target.runPython(
    "import sys, types\nsys.modules['_sandbox'] = types.ModuleType('_sandbox')\nsys.modules['_sandbox'].__dict__",
  ) as { destroy(): void };
  try {
    target.runPython(prelude, { globals: namespace, filename: "<sandbox>" });
  } finally {
    namespace.destroy();
  }
}

async function exec(source: string, args: unknown): Promise<void> {
  let body: string;
  try {
    await booting;
    // A skill run as a nested run gets its arguments as `args` (JSON text, or nothing at all).
    const done = typeof args === "string"
      ? sandbox!.run_sync(source, args)
      : sandbox!.run_sync(source);
    body = done ?? await sandbox!.run(source);
  } catch (error) {
    body = JSON.stringify({
      ok: false,
      error: { type: "SandboxError", message: `The Python runner failed: ${describe(error)}` },
    });
  }
  post({ t: "result", body });
}

scope.onmessage = (event: MessageEvent) => {
  const message = event.data as Record<string, unknown>;
  switch (message?.t) {
    case "boot":
      booting ??= boot(message).catch((error) => {
        post({ t: "fatal", message: describe(error) });
      });
      break;
    case "exec":
      exec(String(message.source), message.args);
      break;
    case "reply": {
      const resolve = pending.get(message.id as number);
      if (resolve) {
        pending.delete(message.id as number);
        resolve(String(message.body));
      }
      break;
    }
    case "interrupt":
      // No Python frame is running while a message is handled, so the pending signal can be
      // replaced by cancelling the awaited task.
      if (interruptBuffer) Atomics.store(interruptBuffer, 0, 0);
      sandbox?.interrupt();
      break;
  }
};
