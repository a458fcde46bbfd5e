"""The Python half of the sandbox: the API user code sees, the import policy, and the runner.

sandbox/py_worker.ts runs this file once per interpreter, as the module ``_sandbox``, before the
memory snapshot is taken (or at a cold boot). The host reads it and sends it in the ``init`` frame,
so the sandbox process needs no permission to read it. Nothing here is a security boundary: the
process's Deno permissions are (see SECURITY.md).

It is one module because it becomes one: the API, the import guard and the runner share module
state (the bridge, the allowed imports, the run's globals and its pending handles), and the
snapshot holds exactly this module.
"""
import ast as _ast
import asyncio as _asyncio
import binascii as _binascii
import builtins as _builtins
import io as _io
import json as _json
import sys as _sys
import time as _time
import traceback as _traceback
import weakref as _weakref
import linecache as _linecache
from _pyodide._base import should_quiet as _should_quiet
from pyodide.webloop import WebLoop as _WebLoop

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

# Timer handles (call_soon, call_later, call_at) scheduled and not yet run: WebLoop keeps no list
# of its own, it hands each handle to a JavaScript setTimeout, which drops it once run.
_scheduled = _weakref.WeakSet()
_web_call_later = _WebLoop.call_later


def _internal(callback):
    # Steps and wake-ups of tasks and futures, and the loop's own bookkeeping: cancelling them
    # would leave a cancelled task waiting forever for the step that delivers its CancelledError.
    return isinstance(getattr(callback, "__self__", None), (_asyncio.Future, _WebLoop))


def _call_later(self, delay, callback, *args, context=None):
    handle = _web_call_later(self, delay, callback, *args, context=context)
    if not _internal(callback):
        _scheduled.add(handle)
    return handle


_WebLoop.call_later = _call_later  # call_soon and call_at go through call_later too.


class ToolCallError(Exception):
    """A request to the host failed; the class name is the host's error type."""


class ToolError(ToolCallError):
    """An upstream tool reported a failure (isError); the message is the tool's."""


class ApprovalDenied(ToolCallError):
    """A call that needed a person's approval was not approved; the code may catch it."""


_error_classes = {
    "ToolError": ToolError,
    "ToolCallError": ToolCallError,
    "ApprovalDenied": ApprovalDenied,
}


def _error_class(kind):
    if not isinstance(kind, str) or not kind.isidentifier():
        return ToolCallError
    if kind not in _error_classes:
        _error_classes[kind] = type(kind, (ToolCallError,), {"__module__": "builtins"})
    return _error_classes[kind]


def _alone():
    # Nothing but this task could run while it waits: no other task, and no callback of the code's
    # scheduled. Then the reply is waited for on this thread, which costs a call no turn of the
    # event loop; otherwise the others go on while it waits.
    me = _asyncio.current_task()
    for task in _asyncio.all_tasks():
        if task is not me:
            return False
    return not any(not handle.cancelled() for handle in _scheduled)


async def _request(op, payload):
    try:
        text = _json.dumps(payload, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise TypeError(f"Tool arguments must be JSON-serializable: {error}") from None
    if _alone():
        reply = _json.loads(_bridge.requestBlocking(op, text))
    else:
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


async def read_output(id):
    """Returns the whole text of an output a run of yours kept (its id or URI, from `outputs`)."""
    return await _request("output", {"name": id})


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


# What display() takes, with the first bytes of each raster format; the host checks them again.
_IMAGE_SIGNATURES = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),
    "image/svg+xml": None,
}
MAX_IMAGE_BYTES = 4 * 1024 * 1024
MAX_IMAGES = 32
_shown_images = 0


def display(data, mime_type):
    """Adds an image to the result, after its text, in the order displayed; returns None.

    ``data``: the image's bytes (PNG, JPEG, GIF or WebP; SVG as bytes or text), or the base64 of
    a raster image as text (as MCP tool results carry it). ``mime_type``: ``"image/png"``,
    ``"image/jpeg"``, ``"image/gif"``, ``"image/webp"`` or ``"image/svg+xml"``. An image past the
    result's output cap is kept and linked instead; one that cannot be kept stops the run.
    """
    global _shown_images
    usage = "display(data, mime_type)"
    if mime_type not in _IMAGE_SIGNATURES:
        raise TypeError(f"{usage}: mime_type must be one of {', '.join(_IMAGE_SIGNATURES)}, "
                        f"got {mime_type!r:.100}")
    if isinstance(data, str) and mime_type == "image/svg+xml":
        data = data.encode("utf-8")
    elif isinstance(data, str):
        try:
            data = _binascii.a2b_base64(data, strict_mode=True)
        except (_binascii.Error, ValueError):
            raise TypeError(f"{usage}: a {mime_type} image given as text must be base64; pass "
                            "its bytes instead") from None
    elif isinstance(data, (bytearray, memoryview)):
        data = bytes(data)
    elif not isinstance(data, bytes):
        raise TypeError(f"{usage}: data must be bytes (the image), or str (SVG text, or base64), "
                        f"not {type(data).__name__}")
    if not data:
        raise TypeError(f"{usage}: the image is empty")
    if len(data) > MAX_IMAGE_BYTES:
        raise TypeError(f"{usage}: the image is {len(data)} bytes, more than {MAX_IMAGE_BYTES}; "
                        "make it smaller")
    signatures = _IMAGE_SIGNATURES[mime_type]
    if signatures and not data.startswith(signatures):
        raise TypeError(f"{usage}: the bytes are not {mime_type}: they do not start with the "
                        "format's signature")
    if mime_type == "image/webp" and data[8:12] != b"WEBP":
        raise TypeError(f"{usage}: the bytes are not image/webp: they do not start with the "
                        "format's signature")
    if _shown_images >= MAX_IMAGES:
        raise TypeError(f"{usage}: a run shows at most {MAX_IMAGES} images; combine them")
    _shown_images += 1
    text = _json.dumps({"args": {"mimeType": mime_type,
                                 "data": _binascii.b2a_base64(data, newline=False).decode("ascii")}})
    # Not awaited, like progress(): the host takes images in the order they come, with the output.
    _bridge.request("display", text)


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

def _write_output(reply):
    for name, stream in (("stdout", _sys.stdout), ("stderr", _sys.stderr)):
        text = reply.get(name)
        if isinstance(text, str) and text:
            stream.write(text)
    # Images the skill showed are the caller's now, checked and counted again by the host.
    for image in reply.get("images") or ():
        _bridge.request("display", _json.dumps({"args": image}))


_skill_runners = {}


async def _run_skill(reply, depth):
    """Runs a Python skill's body here, as the host sent it: ``args`` in scope, last expression out.

    The body gets a namespace of its own (the API, ``args``, and the ``skills`` of the next depth),
    so that it neither sees nor changes the caller's globals.
    """
    ref = reply.get("ref") if isinstance(reply.get("ref"), str) else "skill"
    source = str(reply.get("source", ""))
    # A loop of calls compiles the body once (a compile took several ms of each call).
    runner = _skill_runners.get((ref, source))
    if runner is None:
        if len(_skill_runners) >= 32:
            _skill_runners.clear()
        runner = _skill_runners[(ref, source)] = _compile(source, f"skill:{ref}")
    namespace = {"__name__": "__skill__", "__builtins__": _builtins, **API,
                 "skills": _Skills(depth), "args": reply.get("args")}
    return await runner.run_async(namespace)


class _Skills:
    """Saved programs: ``save``, ``list``, ``call("name@1", args)`` and ``skills.<name>(**args)``."""
    __slots__ = ("_depth",)

    def __init__(self, depth):
        self._depth = depth

    async def save(self, skill=None, /, **fields):
        """Saves a program as a skill (name, description, input_schema, code, language)."""
        spec = dict(skill or {})
        spec.update(fields)
        if "input_schema" in spec:
            spec["inputSchema"] = spec.pop("input_schema")
        return await _request("skill", {"action": "save", "args": spec})

    async def list(self):
        """Lists the skills this caller can call: name, version, description, language."""
        return await _request("skill", {"action": "list"})

    async def call(self, ref, args=None, /, **kwargs):
        """Calls a skill by name ("name" is the latest version, "name@1" the first)."""
        merged = dict(args or {})
        merged.update(kwargs)
        reply = await _request("skill", {"action": "call", "name": ref, "args": merged,
                                         "depth": self._depth})
        if reply.get("mode") == "inline":
            return await _run_skill(reply, self._depth + 1)
        # A skill in the other language ran as a nested run; what it printed is the caller's now.
        _write_output(reply)
        return reply.get("value")

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        # Skill names are lowercase words joined by hyphens: skills.page_issues is "page-issues".
        ref = name.replace("_", "-")

        async def call(args=None, /, **kwargs):
            return await self.call(ref, args, **kwargs)

        call.__name__ = call.__qualname__ = name
        return call

    def __getitem__(self, name):
        return self.__getattr__(name)

    def __repr__(self):
        return "<skills>"


skills = _Skills(0)

API = {
    "skills": skills,
    "call_mcp_tool": call_mcp_tool,
    "discover_mcp_tools": discover_mcp_tools,
    "search_tools": search_tools,
    "get_tool_schema": get_tool_schema,
    "read_output": read_output,
    "tools": tools,
    "ToolError": ToolError,
    "ToolCallError": ToolCallError,
    "ApprovalDenied": ApprovalDenied,
    "llm": llm,
    "ask_user": ask_user,
    "progress": progress,
    "display": display,
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


# Pyodide's CodeRunner (eval_code's) raises this with the value of the last expression.
_Result = _builtins.___EvalCodeResultException[0]


def _located(node, at):
    """Gives the nodes of ``node`` that have no position the position of ``at``."""
    for child in _ast.walk(node):
        if "lineno" in child._attributes and getattr(child, "lineno", None) is None:
            child.lineno, child.col_offset = at.lineno, at.col_offset
            child.end_lineno, child.end_col_offset = at.end_lineno, at.end_col_offset
    return node


class _Runner:
    """Compiled code: what Pyodide's CodeRunner does, without parsing the source twice.

    CodeRunner tokenizes the whole source in Python for a trailing semicolon, deep-copies a
    template tree and walks the whole tree to fill in positions: per run a few ms of pure-Python
    work that grows with the source (~2x the compile of a 100-line script). The value of the last
    expression is returned the same way (raised as ``_Result``), and the same code is made.
    """

    def __init__(self, source, filename=FILENAME):
        self.source = source
        self.filename = filename
        mod = compile(source, filename, "exec",
                      _ast.PyCF_ONLY_AST | _ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        body = mod.body
        # Pyodide would read back the name of a bare annotation (`y: int`), which is unbound.
        if body and isinstance(body[-1], _ast.AnnAssign) and body[-1].value is None:
            body.append(_located(_ast.Pass(), body[-1]))
        # `1 + 1;` returns nothing, as in Pyodide; only a source with a `;` is tokenized.
        if body and not (";" in source and _should_quiet(source)):
            last = body[-1]
            # An assignment last (`x = 1 + 2`, `a = b = 5`, `y: int = 4`, `n += 1`) returns the
            # value of its target name, like a last expression, as models expect of run_python.
            target = (last.targets[0] if isinstance(last, _ast.Assign)
                      else last.target if isinstance(last, (_ast.AugAssign, _ast.AnnAssign))
                      else None)
            if isinstance(target, _ast.Name):
                last = _located(_ast.Expr(_ast.Name(target.id, _ast.Load())), last)
                body.append(last)
            if isinstance(last, _ast.Expr):
                result = _ast.Subscript(_ast.Name("___EvalCodeResultException", _ast.Load()),
                                        _ast.Constant(0), _ast.Load())
                body[-1] = _located(_ast.Raise(_ast.Call(result, [last.value], [])), last)
        self.code = compile(mod, filename, "exec", _ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)

    def _lines(self):
        source = self.source
        # Tracebacks show the code's lines (a skill's under its own name, `skill:name@1`).
        _linecache.cache[self.filename] = [lambda: source]

    def run(self, namespace):
        self._lines()
        try:
            eval(self.code, namespace)
        except _Result as result:
            return result.value
        return None

    async def run_async(self, namespace):
        self._lines()
        try:
            coroutine = eval(self.code, namespace)
            if coroutine:
                await coroutine
        except _Result as result:
            return result.value
        return None


def _compile(source, filename=FILENAME):
    return _Runner(source, filename)


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
        # The same type as TypeScript's Deno.exit(n): one condition, one error.type.
        return _json.dumps({"ok": False, "error": {
            "type": "SandboxExit",
            "message": f"The code called exit({error.code!r}) before it finished: end normally "
                       "or raise an exception instead",
        }})
    return _json.dumps({"ok": False, "error": _describe(error)})


def _success(value):
    if value is None:
        return '{"ok": true}'
    return '{"ok": true, "value": ' + _to_json(value) + "}"


# How long run() lets the tasks it cancelled run their except and finally blocks. Unwinding a
# task that awaited a sleep or a tool call takes one turn of the event loop (a few ms).
UNWIND_SECONDS = 0.05


def _loop():
    try:
        return _asyncio.get_event_loop()
    except RuntimeError:
        return None


def _cancel_background(current):
    """Cancels the work a run left behind, so that it cannot run between calls or in the next one.

    Every pending timer handle and every pending task except ``current`` (the run itself) is
    cancelled. A task that never started ends at its next step without running any of its code.

    Returns:
        The tasks cancelled.
    """
    for handle in list(_scheduled):
        handle.cancel()
    _scheduled.clear()
    loop = _loop()
    tasks = [task for task in (_asyncio.all_tasks(loop) if loop else ())
             if task is not current and not task.done()]
    for task in tasks:
        task.cancel()
    return tasks


# Code compiled by run_sync that awaits at top level, for run() to finish.
_awaiting = None


def run_sync(source, args=None):
    """Runs one execution that does not await at top level; returns the result as JSON text.

    Code that awaits at top level is compiled and kept, and None is returned: run() runs it on
    the event loop. Going through the event loop costs a one-liner 10 ms or more. ``args`` (JSON
    text) is given to a skill run as a nested run: it becomes the global ``args``.
    """
    global _awaiting, _interrupted, _shown_images
    _interrupted = False
    _shown_images = 0
    _awaiting = None
    try:
        try:
            if args is not None:
                _globals["args"] = _json.loads(args)
            runner = _compile(source)
            # CO_COROUTINE: the module body awaits, so eval() returns a coroutine.
            if runner.code.co_flags & 0x80:
                _awaiting = runner
                return None
            value = runner.run(_globals)
        finally:
            if _awaiting is None:
                # The event loop has not turned during the run: the tasks it created never
                # started, so cancelling them is all it takes.
                _cancel_background(None)
                _flush()
    except BaseException as error:
        return _failure(error)
    return _success(value)


def warm_up():
    """Runs 1 + 1 the way run_sync runs code, in a namespace of its own; nothing stays behind.

    With a lower V8 tiering budget, this makes V8 optimize the interpreter's hot Wasm functions
    before the child is ready rather than during the first run (15-30 ms of a one-liner).
    """
    runner = _compile("1 + 1")
    body = _success(runner.run({"__name__": "__main__", "__builtins__": _builtins}))
    # As run_sync does at the end of every run: the first call of this path in a fresh child took
    # ~9 ms (a warm one-liner went from 7 to 16 ms when it was added), nearly all of it here.
    _cancel_background(None)
    _flush()
    _linecache.cache.pop(FILENAME, None)
    return body


async def _settle_background(current):
    """Cancels what the run left behind and lets the cancelled tasks unwind, for a bounded time."""
    tasks = _cancel_background(current)
    if tasks:
        await _asyncio.wait(tasks, timeout=UNWIND_SECONDS)
        # What their except and finally blocks scheduled, and the tasks that did not finish.
        _cancel_background(current)


async def run(source):
    """Runs one execution on the event loop (top-level await); returns the result as JSON text."""
    global _awaiting, _current, _interrupted, _shown_images
    runner, _awaiting = _awaiting, None
    current = _current = _asyncio.current_task()
    try:
        try:
            if runner is None:
                _interrupted = False
                _shown_images = 0
                runner = _compile(source)
            value = await runner.run_async(_globals)
        finally:
            _current = None
            await _settle_background(current)
            _flush()
    except BaseException as error:
        return _failure(error)
    return _success(value)
