/**
 * The Web Worker of a Python sandbox child: it boots Pyodide (from a memory snapshot when the
 * controller has one) and runs the model's Python. It is started by `sandbox/py_host.ts` with no
 * permission beyond reading the Pyodide package, the snapshot and this file.
 *
 * Messages (structured clone, never trusted by the controller):
 * - controller → worker: `{t:"boot", indexDir, indexUrl, snapshotPath?, makeSnapshot, interrupt,
 *   allowedImports, wheels}` (`wheels`: `[{name, bytes}]`), then `{t:"exec", source}`,
 *   `{t:"reply", id, body}` and `{t:"interrupt"}`.
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

/** The Python code run at boot, before the memory snapshot is taken. */
const PRELUDE = String.raw`
import ast as _ast
import asyncio as _asyncio
import builtins as _builtins
import io as _io
import json as _json
import sys as _sys
import time as _time
import traceback as _traceback
from _pyodide._base import CodeRunner as _CodeRunner

for _name in ("collections", "datetime", "decimal", "functools", "itertools", "math", "re",
              "statistics", "string", "textwrap", "typing", "dataclasses", "linecache"):
    __import__(_name)

FILENAME = "code.py"
STDIN_MESSAGE = "stdin is not available in the sandbox: pass data in the code or through tools"
NEVER = frozenset(("js", "pyodide_js", "pyodide", "_pyodide", "_pyodide_core", "_sandbox"))

_bridge = None
_armed = False
_allowed = None
_globals = None
_current = None
_interrupted = False
_real_import = _builtins.__import__


def _trusted_file(filename):
    return filename.startswith("/lib/python") or filename.startswith("<frozen ") or filename == "<sandbox>"


def _refusal(top):
    if top in NEVER:
        return (f"Import of {top} is not allowed: the sandbox never gives Python code access to "
                f"{', '.join(sorted(NEVER - {'_sandbox'}))}")
    return f"Import of {top} is not allowed: allowed imports are {', '.join(sorted(_allowed))}"


def _from_user_code():
    # Armed once the interpreter is attached: Pyodide's own boot imports run as "<string>" too.
    if not _armed:
        return False
    try:
        return not _trusted_file(_sys._getframe(2).f_code.co_filename)
    except ValueError:
        return False  # Called from C or JavaScript with no Python caller: Pyodide itself.


def _guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
    if level == 0 and isinstance(name, str) and _from_user_code():
        top = name.partition(".")[0]
        if top in NEVER or (_allowed is not None and top not in _allowed):
            raise ImportError(_refusal(top), name=name)
    return _real_import(name, globals, locals, fromlist, level)


_builtins.__import__ = _guarded_import


class _NoStdin(_io.TextIOBase):
    def readable(self):
        return True

    def read(self, size=-1):
        raise OSError(STDIN_MESSAGE)

    def readline(self, size=-1):
        raise OSError(STDIN_MESSAGE)

    def readlines(self, hint=-1):
        raise OSError(STDIN_MESSAGE)

    def fileno(self):
        raise OSError(STDIN_MESSAGE)


def _input(prompt=""):
    raise OSError(STDIN_MESSAGE)


_sys.stdin = _NoStdin()
_builtins.input = _input


def _sleep(secs):
    if not isinstance(secs, (int, float)):
        raise TypeError(f"'{type(secs).__name__}' object cannot be interpreted as an integer or float")
    if secs != secs or secs < 0:
        raise ValueError("sleep length must be non-negative")
    _bridge.sleep(float(secs))


_time.sleep = _sleep


class ToolCallError(Exception):
    """A request to the host failed; the class name is the host's error type."""


class ToolError(ToolCallError):
    """An upstream tool reported a failure (isError); the message is the tool's."""


_error_classes = {"ToolError": ToolError, "ToolCallError": ToolCallError}


def _error_class(kind):
    if not isinstance(kind, str) or not kind.isidentifier():
        return ToolCallError
    if kind not in _error_classes:
        _error_classes[kind] = type(kind, (ToolCallError,), {"__module__": "builtins"})
    return _error_classes[kind]


async def _request(op, payload):
    try:
        text = _json.dumps(payload, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise TypeError(f"Tool arguments must be JSON-serializable: {error}") from None
    reply = _json.loads(await _bridge.request(op, text))
    if reply.get("ok") is True:
        return reply.get("value")
    error = reply.get("error") if isinstance(reply.get("error"), dict) else {}
    message = error.get("message") if isinstance(error.get("message"), str) else "The request failed"
    raise _error_class(error.get("type"))(message)


async def call_mcp_tool(name, args=None):
    """Calls an upstream MCP tool by its full name, mcp__<server>__<tool>."""
    return await _request("call", {"name": name, "args": {} if args is None else args})


async def discover_mcp_tools(search=None, server=None):
    """Lists the upstream tools this execution may call."""
    return await _request("discover", {"search": search, "server": server})


async def search_tools(query, limit=10):
    """Finds upstream tools by keywords."""
    return await _request("search", {"query": query, "limit": limit})


async def get_tool_schema(name):
    """Returns an upstream tool's schemas and signature."""
    return await _request("schema", {"name": name})


def _llm_args(messages, system_prompt, max_tokens, model):
    args = {"messages": messages, "systemPrompt": system_prompt, "maxTokens": max_tokens,
            "model": model}
    return {key: value for key, value in args.items() if value is not None}


class _Llm:
    """The LLM of the MCP client, or the admin's provider API; the server enforces the budget."""
    __slots__ = ()

    async def ask(self, prompt, system_prompt=None, max_tokens=None, model=None):
        """Asks one question; returns the answer's text."""
        args = _llm_args([{"role": "user", "content": prompt}], system_prompt, max_tokens, model)
        return (await _request("sample", {"args": args}))["text"]

    async def think(self, messages=None, system_prompt=None, max_tokens=None, model=None):
        """Sends a conversation; returns {text, model, stopReason, usage}.

        Takes keywords, or one dict shaped like TypeScript's options ({"messages": ...}).
        """
        if isinstance(messages, dict):
            return await _request("sample", {"args": messages})
        return await _request("sample", {"args": _llm_args(messages, system_prompt, max_tokens, model)})

    def __repr__(self):
        return "<llm>"


llm = _Llm()


async def ask_user(message, schema=None):
    """Asks the client's user; returns {action, content}."""
    return await _request("elicit", {"args": {"message": message, "schema": schema}})


def progress(done, total=None, message=None):
    """Reports progress to the client without waiting for it; returns None."""
    for name, value in (("done", done), ("total", total)):
        if value is None and name == "total":
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            raise TypeError(f"progress(done, total=None, message=None): {name} must be a number")
    if message is not None and not isinstance(message, str):
        raise TypeError("progress(done, total=None, message=None): message must be a string")
    try:
        text = _json.dumps({"args": {"done": done, "total": total, "message": message}},
                           allow_nan=False)
    except (TypeError, ValueError) as error:
        raise TypeError(f"progress(done, total=None, message=None): {error}") from None
    _bridge.request("progress", text)


class _ServerTools:
    __slots__ = ("_server",)

    def __init__(self, server):
        self._server = server

    def __getattr__(self, tool):
        if tool.startswith("__"):
            raise AttributeError(tool)
        server = self._server

        async def call(args=None, /, **kwargs):
            merged = dict(args or {})
            merged.update(kwargs)
            return await _request("proxy", {"server": server, "tool": tool, "args": merged})

        call.__name__ = call.__qualname__ = tool
        return call

    def __getitem__(self, tool):
        return self.__getattr__(tool)

    def __repr__(self):
        return f"<tools.{self._server}>"


class _Tools:
    __slots__ = ()

    def __getattr__(self, server):
        if server.startswith("__"):
            raise AttributeError(server)
        return _ServerTools(server)

    def __getitem__(self, server):
        return _ServerTools(server)

    def __repr__(self):
        return "<tools>"


tools = _Tools()

API = {
    "call_mcp_tool": call_mcp_tool,
    "discover_mcp_tools": discover_mcp_tools,
    "search_tools": search_tools,
    "get_tool_schema": get_tool_schema,
    "tools": tools,
    "ToolError": ToolError,
    "ToolCallError": ToolCallError,
    "llm": llm,
    "ask_user": ask_user,
    "progress": progress,
}


def attach(bridge, allowed_json):
    """Connects the booted interpreter to this worker; runs after every boot."""
    global _bridge, _allowed, _globals, _armed
    _bridge = bridge
    allowed = _json.loads(allowed_json)
    _allowed = None if allowed == "*" else frozenset(allowed)
    _globals = {"__name__": "__main__", "__builtins__": _builtins, **API}
    # A memory snapshot freezes the random state of modules imported while it was made.
    if "random" in _sys.modules:
        _sys.modules["random"].seed()
    _sys.stdout.reconfigure(line_buffering=True)
    _sys.stderr.reconfigure(line_buffering=True)
    _armed = True


def interrupt():
    """Stops code that waits (await) rather than runs; running code gets KeyboardInterrupt."""
    global _interrupted
    if _current is not None and not _current.done():
        _interrupted = True
        _current.cancel()


def _keep(frame):
    # Pyodide adds the JavaScript frames of calls into JavaScript (file://..., node:...).
    name = frame.filename
    return (name != "<sandbox>" and "/_pyodide/" not in name and "/pyodide/" not in name
            and "://" not in name and not name.startswith("node:"))


def _trim(te, seen):
    if id(te) in seen:
        return
    seen.add(id(te))
    te.stack = _traceback.StackSummary.from_list([f for f in te.stack if _keep(f)])
    for other in (te.__cause__, te.__context__):
        if other is not None:
            _trim(other, seen)
    for other in getattr(te, "exceptions", None) or ():
        _trim(other, seen)


def _describe(error):
    if _interrupted and isinstance(error, _asyncio.CancelledError):
        replacement = KeyboardInterrupt()
        replacement.__traceback__ = error.__traceback__
        error = replacement
    te = _traceback.TracebackException.from_exception(error)
    _trim(te, set())
    message = str(error) if not isinstance(error, SyntaxError) else (error.msg or str(error))
    if isinstance(error, SyntaxError) and error.lineno:
        message = f"{message} ({error.filename}, line {error.lineno})"
    return {
        "type": type(error).__name__,
        "message": message or type(error).__name__,
        "traceback": "".join(te.format()),
    }


def _fallback(value):
    if isinstance(value, (set, frozenset)):
        return list(value)
    return repr(value)


def _finite(value):
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def _to_json(value):
    """JSON text of a value: unknown objects become their repr, NaN and infinities null."""
    try:
        try:
            return _json.dumps(value, default=_fallback, allow_nan=False)
        except ValueError:
            return _json.dumps(_finite(value), default=_fallback, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return _json.dumps(repr(value))


def _compile(source):
    return _CodeRunner(source, filename=FILENAME, dedent=False,
                       flags=_ast.PyCF_ALLOW_TOP_LEVEL_AWAIT).compile()


def _flush():
    for stream in (_sys.stdout, _sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


def _failure(error):
    if isinstance(error, SystemExit):
        if error.code is None or error.code == 0:
            return _json.dumps({"ok": True})
        return _json.dumps({"ok": False, "error": {
            "type": "SystemExit",
            "message": f"The code called exit({error.code!r}): raise an exception or end normally instead",
        }})
    return _json.dumps({"ok": False, "error": _describe(error)})


def _success(value):
    if value is None:
        return '{"ok": true}'
    return '{"ok": true, "value": ' + _to_json(value) + "}"


# Code compiled by run_sync that awaits at top level, for run() to finish.
_awaiting = None


def run_sync(source):
    """Runs one execution that does not await at top level; returns the result as JSON text.

    Code that awaits at top level is compiled and kept, and None is returned: run() runs it on
    the event loop. Going through the event loop costs a one-liner 10 ms or more.
    """
    global _awaiting, _interrupted
    _interrupted = False
    _awaiting = None
    try:
        try:
            runner = _compile(source)
            # CO_COROUTINE: the module body awaits, so eval() returns a coroutine.
            if runner.code is not None and runner.code.co_flags & 0x80:
                _awaiting = runner
                return None
            value = runner.run(_globals)
        finally:
            if _awaiting is None:
                _flush()
    except BaseException as error:
        return _failure(error)
    return _success(value)


def warm_up():
    """Runs 1 + 1 the way run_sync runs code, in a namespace of its own; nothing stays behind.

    With a lower V8 tiering budget, this makes V8 optimize the interpreter's hot Wasm functions
    before the child is ready rather than during the first run (15-30 ms of a one-liner).
    """
    import linecache
    runner = _compile("1 + 1")
    body = _success(runner.run({"__name__": "__main__", "__builtins__": _builtins}))
    _flush()
    linecache.cache.pop(FILENAME, None)
    return body


async def run(source):
    """Runs one execution on the event loop (top-level await); returns the result as JSON text."""
    global _awaiting, _current, _interrupted
    runner, _awaiting = _awaiting, None
    _current = _asyncio.current_task()
    try:
        try:
            if runner is None:
                _interrupted = False
                runner = _compile(source)
            value = await runner.run_async(_globals)
        finally:
            _current = None
            _flush()
    except BaseException as error:
        return _failure(error)
    return _success(value)
`;

interface PyProxyFunction {
  (...args: unknown[]): unknown;
}

interface SandboxModule {
  attach: PyProxyFunction;
  interrupt: PyProxyFunction;
  run: (source: string) => Promise<string>;
  run_sync: (source: string) => string | undefined;
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
      runPrelude(made);
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
      runPrelude(pyodide);
    }
  } finally {
    restoreInstantiate();
  }
  interruptBuffer = new Int32Array(message.interrupt as SharedArrayBuffer, 0, 1);
  pyodide.setInterruptBuffer(interruptBuffer);
  pyodide.setStdout(writer("stdout"));
  pyodide.setStderr(writer("stderr"));
  pyodide.setStdin({ error: true });
  const wheelErrors = installWheels(pyodide, message.wheels);
  delete message.wheels;
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

function runPrelude(target: Pyodide): void {
  const namespace = target.runPython(
    "import sys, types\nsys.modules['_sandbox'] = types.ModuleType('_sandbox')\nsys.modules['_sandbox'].__dict__",
  ) as { destroy(): void };
  try {
    target.runPython(PRELUDE, { globals: namespace, filename: "<sandbox>" });
  } finally {
    namespace.destroy();
  }
}

async function exec(source: string): Promise<void> {
  let body: string;
  try {
    await booting;
    body = sandbox!.run_sync(source) ?? await sandbox!.run(source);
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
      exec(String(message.source));
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
