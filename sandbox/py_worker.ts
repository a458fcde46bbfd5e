/**
 * The Web Worker of a Python sandbox child: it boots Pyodide (from a memory snapshot when the
 * controller has one) and runs the model's Python, one run (or a session's runs) per Worker. It
 * is started by `sandbox/py_host.ts` with no permission beyond reading the Pyodide package, the
 * snapshot and this file. The Python half of the sandbox (`sandbox/py_prelude.py`) comes in the
 * `boot` message: the host reads it, so that this process needs no permission to.
 *
 * It owns its run's frame channel: it writes its frames to the child's stdout itself, with the
 * nonce of its `boot` message, and gets the host's through a `MessagePort` from the inbox
 * (`sandbox/py_inbox.ts`), so that neither direction wakes the controller's thread. Its stdin
 * and stderr handles are closed before Python runs: a read left pending here would outlive the
 * Worker and take a later run's frames.
 *
 * Messages:
 * - controller → worker: `{t:"boot", nonce, indexDir, indexUrl, snapshotPath?, makeSnapshot,
 *   session, module?, interrupt, port, allowedImports, wheels, prelude, files?, preload}`
 *   (`module`: the compiled Pyodide Wasm, shared by the process's Workers; `wheels`: `[{name,
 *   bytes}]`; `preload`: the modules a snapshot build imports after unpacking the wheels;
 *   `files`: `{url, read}`, `sandbox/py_files.ts` and the granted paths it mounts; `prelude`: the
 *   text of `sandbox/py_prelude.py`, run only when making the snapshot or booting without one;
 *   `interrupt`: two shared words, Pyodide's interrupt buffer and the count of messages the inbox
 *   has put on `port`, which a call waiting on this thread waits on).
 * - inbox → worker, on `port`: `{t:"exec", source, args?}` (`args`: JSON text, a skill's
 *   arguments), `{t:"reply", id, body}` (`body`: the reply frame's JSON text) and
 *   `{t:"interrupt"}`.
 * - worker → controller: `{t:"ready", bootMs, fromSnapshot, snapshotError?, wheelErrors?}` (or
 *   `{t:"snapshot", bytes}` when asked to make one) and `{t:"fatal", message}`.
 * - worker → host, on stdout: `<nonce> {"t":"out","s","d"}`, `{"t":"call","id","op",...}` and
 *   one `{"t":"result",...}` per exec. After its result a Worker that is not a session's closes
 *   itself, so that nothing it or its code scheduled runs after the run.
 *
 * Python can reach this worker's JavaScript globals (`js`, `pyodide_js`, any JsProxy's
 * `constructor.constructor`), so nothing here is a security boundary: Python can write frames
 * with this Worker's nonce, and the host treats every frame as forged. The process's Deno
 * permissions are the wall, and the controller, which Python cannot reach, marks where one run's
 * frames end and the next Worker's begin.
 *
 * This file must stay self-contained: it may be copied next to a compiled binary.
 *
 * @module
 */

import { receiveMessageOnPort as receiveOnNodePort } from "node:worker_threads";

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
const close = (scope as unknown as { close(): void }).close.bind(scope);
const encoder = new TextEncoder();
const encode = encoder.encode.bind(encoder);
const stringify = JSON.stringify;
const parse = JSON.parse;
const now = performance.now.bind(performance);
const stdoutWriteSync = Deno.stdout.writeSync.bind(Deno.stdout);
/** Takes the next message off a port without the event loop; Deno's takes web MessagePorts too. */
const receiveMessageOnPort = receiveOnNodePort as unknown as (
  port: MessagePort,
) => { message: unknown } | undefined;

// The controller and the inbox own stdin and stderr; this Worker's handles on them go before
// Python runs (a stdin read cannot be cancelled, and would outlive this Worker).
for (const stream of [Deno.stderr, Deno.stdin]) {
  try {
    stream.close();
  } catch {
    // Already closed.
  }
}

/** Frames the host reads are capped at 8 MB; stay below it with room for escaping. */
const MAX_RESULT_CHARS = 6 * 1024 * 1024;
const OUT_CHUNK_CHARS = 256 * 1024;
/** Printed output waits at most this long in the buffer while Python runs without pause. */
const OUT_FLUSH_MS = 10;

let nonce = "";

function send(frame: Record<string, unknown>): void {
  const bytes = encode(nonce + " " + stringify(frame) + "\n");
  let offset = 0;
  while (offset < bytes.length) {
    offset += stdoutWriteSync(offset === 0 ? bytes : bytes.subarray(offset));
  }
}

let outStream: "stdout" | "stderr" = "stdout";
let outText = "";
let outSince = 0;

function flushOut(): void {
  for (let i = 0; i < outText.length; i += OUT_CHUNK_CHARS) {
    send({ t: "out", s: outStream, d: outText.slice(i, i + OUT_CHUNK_CHARS) });
  }
  outText = "";
}

/**
 * Output is buffered: Python writes line by line, and a frame per line costs a write each. The
 * buffer goes out before any other frame, when it is full, and when it is older than
 * `OUT_FLUSH_MS` at the next write, so that a long run's output still streams (the host counts
 * it against the run's cap and watches it as it comes).
 */
function queueOut(stream: "stdout" | "stderr", data: string): void {
  if (stream !== outStream || outText.length >= OUT_CHUNK_CHARS) flushOut();
  if (outText === "") outSince = now();
  outStream = stream;
  outText += data;
  if (now() - outSince >= OUT_FLUSH_MS) flushOut();
}

function text(value: unknown, max: number): string | undefined {
  return typeof value === "string" ? value.slice(0, max) : undefined;
}

/** The result frame of the runner's JSON text; it is checked here as the host checks it. */
function resultFrame(body: unknown): Record<string, unknown> {
  if (typeof body !== "string" || body.length > MAX_RESULT_CHARS) {
    return {
      t: "result",
      ok: false,
      error: {
        // The type TypeScript reports for a return value past the limit: one condition, one type.
        type: "OutputLimitError",
        message:
          `Return value too large: the value of the last expression or assignment is more than ${MAX_RESULT_CHARS} characters of JSON; return less (a summary, or print part of it)`,
      },
    };
  }
  let parsed: Record<string, unknown>;
  try {
    parsed = parse(body);
  } catch {
    parsed = {};
  }
  if (parsed.ok === true) {
    return parsed.value === undefined
      ? { t: "result", ok: true }
      : { t: "result", ok: true, value: parsed.value };
  }
  const error =
    (typeof parsed.error === "object" && parsed.error !== null ? parsed.error : {}) as Record<
      string,
      unknown
    >;
  const info: Record<string, unknown> = {
    type: text(error.type, 100) ?? "Error",
    message: text(error.message, 64 * 1024) ?? "The code failed without a message",
  };
  const traceback = text(error.traceback, 64 * 1024);
  if (traceback) info.traceback = traceback;
  return { t: "result", ok: false, error: info };
}

function describe(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

function forwardConsole(): void {
  const out = (stream: "stdout" | "stderr") => (...args: unknown[]) => {
    const text = args.map((a) => typeof a === "string" ? a : Deno.inspect(a)).join(" ");
    queueOut(stream, text + "\n");
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
/** How many messages the inbox has put on `port` (word 1 of the `interrupt` buffer). */
let posted: Int32Array | undefined;
let port: MessagePort | undefined;
let booting: Promise<void> | undefined;
let session = false;
const pending = new Map<number, (body: string) => void>();
// Ids start at a random point: a reply meant for another Worker can never match one of these.
let nextId = 1 + Math.floor(Math.random() * 2 ** 40);

function writer(stream: "stdout" | "stderr") {
  const decoder = new TextDecoder();
  return {
    isatty: false,
    write(buffer: Uint8Array): number {
      const text = decoder.decode(buffer, { stream: true });
      if (text) queueOut(stream, text);
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

/** Frees the memory of bytes no one reads again, without waiting for a collection. */
function freeBytes(bytes: unknown): void {
  const buffer = ArrayBuffer.isView(bytes) ? bytes.buffer : bytes;
  if (buffer instanceof ArrayBuffer && !buffer.detached) buffer.transfer(0);
}

/** Pyodide's own Wasm is megabytes; the small modules it instantiates are left alone. */
const PYODIDE_WASM_MIN_BYTES = 1024 * 1024;

/**
 * Makes Pyodide's `WebAssembly.instantiate(bytes, imports)` instantiate the module the
 * controller compiled for every Worker of the process: its code, and what V8 optimized of it
 * while earlier runs ran, is shared, so neither the compile nor the tier-up is paid again.
 * Without one, it compiles first and instantiates second: V8 then compiles lazily, which saves
 * ~300 ms of a boot.
 *
 * @param shared The controller's module, if it has one.
 * @returns A function that puts the original back.
 */
function lazyInstantiate(shared: WebAssembly.Module | undefined): () => void {
  const original = WebAssembly.instantiate;
  const split = async (source: unknown, imports?: WebAssembly.Imports) => {
    const bytes = source instanceof ArrayBuffer || ArrayBuffer.isView(source);
    if (!bytes || (source as ArrayBuffer).byteLength < PYODIDE_WASM_MIN_BYTES) {
      return await (original as (s: unknown, i?: WebAssembly.Imports) => Promise<unknown>)(
        source,
        imports,
      );
    }
    const module = shared ?? await WebAssembly.compile(source as BufferSource);
    const instance = await original(module, imports);
    // Pyodide read the file for nothing when the module is shared: free the 10 MB now.
    if (shared) freeBytes(source);
    return { module, instance };
  };
  WebAssembly.instantiate = split as typeof WebAssembly.instantiate;
  return () => {
    WebAssembly.instantiate = original;
  };
}

const OPS = [
  "call",
  "proxy",
  "discover",
  "search",
  "schema",
  "sample",
  "elicit",
  "progress",
  "display",
  "output",
  "skill",
];
const CALL_FIELDS = [
  "name",
  "args",
  "server",
  "tool",
  "search",
  "query",
  "limit",
  "action",
  "depth",
];

/** Builds a request of the prelude's as a `call` frame and writes it, with the output before it. */
function sendCall(op: string, payload: string): number {
  if (!OPS.includes(op)) throw new TypeError(`Unknown request ${op}`);
  const fields = parse(payload) as Record<string, unknown>;
  const id = nextId++;
  const frame: Record<string, unknown> = { t: "call", id, op };
  for (const name of CALL_FIELDS) {
    if (fields[name] !== undefined && fields[name] !== null) frame[name] = fields[name];
  }
  flushOut();
  send(frame);
  return id;
}

/** Sends a request of the prelude's as a `call` frame; resolves with the reply frame's text. */
function request(op: string, payload: string): Promise<string> {
  try {
    const id = sendCall(op, payload);
    return new Promise((resolve) => pending.set(id, resolve));
  } catch (error) {
    return Promise.reject(error);
  }
}

/**
 * Sends a request and waits for its reply on this thread: the prelude's path when the run's task
 * is the only one, so that nothing else could have run meanwhile. A reply then costs one wake-up
 * of this thread, not a port message through the event loop and a turn of Python's event loop
 * (~0.4 ms a call). Other messages that come first are handled as they would have been; an
 * interrupt raises KeyboardInterrupt here.
 *
 * @returns The reply frame's JSON text.
 */
function requestBlocking(op: string, payload: string): string {
  const id = sendCall(op, payload);
  let seen = Atomics.load(posted!, 0);
  while (true) {
    const received = receiveMessageOnPort(port!);
    if (received) {
      const message = received.message as Record<string, unknown>;
      if (message?.t === "reply" && message.id === id) return String(message.body);
      if (message?.t === "interrupt") {
        Atomics.store(interruptBuffer!, 0, 2);
        pyodide!.checkInterrupt();
      }
      onFrame({ data: message } as MessageEvent);
      continue;
    }
    Atomics.wait(posted!, 0, seen);
    seen = Atomics.load(posted!, 0);
  }
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
  const restoreInstantiate = lazyInstantiate(
    message.module instanceof WebAssembly.Module ? message.module : undefined,
  );
  delete message.module;
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
        freeBytes(await snapshot);
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
  posted = new Int32Array(message.interrupt as SharedArrayBuffer, 4, 1);
  pyodide.setInterruptBuffer(interruptBuffer);
  pyodide.setStdout(writer("stdout"));
  pyodide.setStderr(writer("stderr"));
  pyodide.setStdin({ error: true });
  await mountGranted(pyodide, message.files);
  const wheelErrors = installWheels(pyodide, message.wheels);
  delete message.wheels;
  delete message.prelude;
  sandbox = pyodide.pyimport("_sandbox") as SandboxModule;
  sandbox.attach(
    { sleep, request, requestBlocking },
    JSON.stringify(message.allowedImports ?? []),
  );
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
    body = stringify({
      ok: false,
      error: { type: "SandboxError", message: `The Python runner failed: ${describe(error)}` },
    });
  }
  flushOut();
  send(resultFrame(body));
  // The run is over: nothing that it left scheduled (JavaScript timers or promises reached
  // through the js bridge) may run after its result. close() stops this isolate at once.
  if (!session) close();
}

function onFrame(event: MessageEvent): void {
  const message = event.data as Record<string, unknown>;
  switch (message?.t) {
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
}

scope.onmessage = (event: MessageEvent) => {
  const message = event.data as Record<string, unknown>;
  if (message?.t !== "boot" || booting) return;
  nonce = String(message.nonce);
  session = message.session === true;
  if (message.port instanceof MessagePort) {
    port = message.port;
    port.onmessage = onFrame;
  }
  booting = boot(message).catch((error) => {
    post({ t: "fatal", message: describe(error) });
  });
};
