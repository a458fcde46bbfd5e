/**
 * The trusted controller of a Python sandbox child (`deno run --unstable-worker-options` that may
 * only read the Pyodide package, the memory snapshot and `py_worker.ts`). Pyodide runs in a Web
 * Worker; this thread owns the frame channel and the interrupt buffer.
 *
 * Protocol with the host (JSON lines, the same frames as `ts_runner.ts`):
 * - host → controller on stdin: `{"t":"init","nonce","indexDir","indexUrl","workerPath","workerUrl",
 *   "snapshotPath"?,"session"?,"allowedImports","wheels"?,"prelude","files"?}` (`files`:
 *   `{"path","url","read"}`, `sandbox/py_files.ts` and the run's granted paths, which the
 *   process may read and the Worker mounts read-only; `wheels`:
 *   `[{"name","data"}]`, the files' bytes in base64; `prelude`: the text of
 *   `sandbox/py_prelude.py`, which the Worker runs when it boots without the snapshot; both read
 *   by the host since this process may not read them), then `{"t":"exec","source","args"?}`
 *   (several in a session; `args`: a skill's arguments when the skill runs as a nested run), `{"t":"reply","id","ok","value"|"error"}` and `{"t":"interrupt"}`. Between the runs
 *   of a session the host stops this process (SIGSTOP) and continues it (SIGCONT) just before
 *   the next `exec`.
 * - controller → host on stdout:
 *   `<nonce> {"t":"ready","bootMs","fromSnapshot","snapshotError"?,"wheelErrors"?}`,
 *   `<nonce> {"t":"out","s","d"}`, `<nonce> {"t":"call","id","op",...}` and one
 *   `<nonce> {"t":"result",...}` per exec. A child that cannot boot sends `{"t":"fatal","message"}`.
 * - snapshot mode (`{"t":"init","nonce","mode":"snapshot","snapshotOut","prelude","wheels"?,
 *   "preload"?,...}`, run with write access to the snapshot's directory only): boots, runs the
 *   prelude, unpacks the wheels of `python.packages` and imports `preload` (their top-level
 *   modules), writes the snapshot, sends `{"t":"snapshot","bytes","bootMs"}` and exits.
 *
 * Python code runs in the Worker and cannot reach this thread's globals, so the nonce stays out
 * of its reach; everything the Worker posts is validated here before it becomes a frame.
 *
 * This file must stay self-contained: it may be copied next to a compiled binary.
 *
 * @module
 */

// Captured before anything else runs, like the TypeScript runner does.
const encoder = new TextEncoder();
const decoder = new TextDecoder();
const encode = encoder.encode.bind(encoder);
const stringify = JSON.stringify;
const parse = JSON.parse;
const stdoutWriteSync = Deno.stdout.writeSync.bind(Deno.stdout);
const stderrWriteSync = Deno.stderr.writeSync.bind(Deno.stderr);
const stdinRead = Deno.stdin.read.bind(Deno.stdin);
const realExit: (code?: number) => never = Deno.exit;

/** Frames the host reads are capped at 8 MB; stay below it with room for escaping. */
const MAX_RESULT_CHARS = 6 * 1024 * 1024;
const OUT_CHUNK_CHARS = 256 * 1024;
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

let nonce = "";
let pending = "";

function writeAll(bytes: Uint8Array, write = stdoutWriteSync): void {
  let offset = 0;
  while (offset < bytes.length) {
    offset += write(offset === 0 ? bytes : bytes.subarray(offset));
  }
}

function send(frame: Record<string, unknown>): void {
  writeAll(encode(nonce + " " + stringify(frame) + "\n"));
}

/**
 * Sends a run's result. The mark before it tells the host that it has read everything this
 * process wrote to stderr, so it can kill a single-use child at once instead of waiting for its
 * exit; Python never sees the nonce, so it cannot forge the mark.
 */
function sendResult(frame: Record<string, unknown>): void {
  try {
    writeAll(encode("\0" + nonce + "\0"), stderrWriteSync);
  } catch {
    // Stderr is gone; the host then waits for the end of the stream.
  }
  send(frame);
}

const readBuffer = new Uint8Array(64 * 1024);

/** Reads the next frame from the host, or null at end of input. */
async function readFrame(): Promise<Record<string, unknown> | null> {
  while (true) {
    const newline = pending.indexOf("\n");
    if (newline >= 0) {
      const line = pending.slice(0, newline);
      pending = pending.slice(newline + 1);
      if (line.trim() === "") continue;
      return parse(line);
    }
    // Only new chunks are searched: an init frame with wheels can be megabytes long.
    const chunks = [pending];
    while (true) {
      const n = await stdinRead(readBuffer);
      if (n === null) return null;
      const chunk = decoder.decode(readBuffer.subarray(0, n), { stream: true });
      chunks.push(chunk);
      if (chunk.includes("\n")) break;
    }
    pending = chunks.join("");
  }
}

/** Decodes the wheels of the init frame; a malformed entry is reported, not fatal. */
function decodeWheels(raw: unknown): {
  wheels: Array<{ name: string; bytes: Uint8Array }>;
  errors: string[];
} {
  const wheels: Array<{ name: string; bytes: Uint8Array }> = [];
  const errors: string[] = [];
  for (const wheel of Array.isArray(raw) ? raw : []) {
    const name = text(wheel?.name, 300) ?? "a wheel without a name";
    try {
      wheels.push({ name, bytes: Uint8Array.fromBase64(String(wheel?.data)) });
    } catch (error) {
      errors.push(`Cannot install ${name}: ${(error as Error).message}`);
    }
  }
  return { wheels, errors };
}

/** The run's granted paths (`init.files`), which the Worker may read and mounts read-only. */
function grantedFiles(raw: unknown): { path: string; url: string; read: string[] } | undefined {
  const { path, url, read } = (raw ?? {}) as Record<string, unknown>;
  if (typeof path !== "string" || typeof url !== "string" || !Array.isArray(read)) return;
  const paths = read.filter((entry): entry is string => typeof entry === "string");
  return paths.length > 0 ? { path, url, read: paths } : undefined;
}

function text(value: unknown, max: number): string | undefined {
  return typeof value === "string" ? value.slice(0, max) : undefined;
}

let outStream: "stdout" | "stderr" = "stdout";
let outText = "";
let outTimer: ReturnType<typeof setTimeout> | undefined;

function flushOut(): void {
  if (outTimer !== undefined) clearTimeout(outTimer);
  outTimer = undefined;
  for (let i = 0; i < outText.length; i += OUT_CHUNK_CHARS) {
    send({ t: "out", s: outStream, d: outText.slice(i, i + OUT_CHUNK_CHARS) });
  }
  outText = "";
}

/** Output is coalesced: Python writes line by line, and a frame per line is slow. */
function queueOut(stream: "stdout" | "stderr", data: string): void {
  if (stream !== outStream || outText.length >= OUT_CHUNK_CHARS) flushOut();
  outStream = stream;
  outText += data;
  outTimer ??= setTimeout(flushOut, 0);
}

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

function callFrame(message: Record<string, unknown>): Record<string, unknown> | undefined {
  const { id, op, payload } = message;
  if (typeof id !== "number" || !Number.isSafeInteger(id) || typeof payload !== "string") return;
  if (typeof op !== "string" || !OPS.includes(op)) return;
  let fields: Record<string, unknown>;
  try {
    fields = parse(payload);
  } catch {
    return;
  }
  if (typeof fields !== "object" || fields === null) return;
  const frame: Record<string, unknown> = { t: "call", id, op };
  for (const name of CALL_FIELDS) {
    if (fields[name] !== undefined && fields[name] !== null) frame[name] = fields[name];
  }
  return frame;
}

async function writeSnapshot(path: string, bytes: Uint8Array): Promise<void> {
  const temp = `${path}.${crypto.randomUUID()}.tmp`;
  try {
    await Deno.writeFile(temp, bytes, { mode: 0o600 });
    await Deno.rename(temp, path);
  } catch (error) {
    await Deno.remove(temp).catch(() => {});
    throw error;
  }
}

async function main(): Promise<void> {
  const init = await readFrame();
  if (!init || init.t !== "init" || typeof init.nonce !== "string") realExit(70);
  nonce = init.nonce as string;
  const indexDir = String(init.indexDir);
  const workerPath = String(init.workerPath);
  const snapshotMode = init.mode === "snapshot";
  const session = init.session === true;

  const interrupt = new SharedArrayBuffer(4);
  const signal = new Int32Array(interrupt);
  // The Worker reads the snapshot itself, while it imports Pyodide: reading 30 MB in a fresh
  // process takes 40-90 ms, and Pyodide needs the bytes only once its Wasm module is loaded.
  const snapshotPath = !snapshotMode && typeof init.snapshotPath === "string"
    ? init.snapshotPath
    : undefined;

  // In snapshot mode the wheels are those of python.packages, imported before the snapshot.
  const { wheels, errors: wheelErrors } = decodeWheels(init.wheels);
  delete init.wheels;
  const readyWheelErrors = (reported: unknown) => {
    const all = [...wheelErrors, ...(Array.isArray(reported) ? reported : [])]
      .map((error) => text(error, 2000)).filter((error) => error !== undefined).slice(0, 20);
    return all.length > 0 ? all : undefined;
  };

  const files = grantedFiles(init.files);
  const worker = new Worker(String(init.workerUrl), {
    type: "module",
    name: "python",
    deno: {
      permissions: {
        // With files, the process may read its own paths and the run's grants, less what the host
        // denied under them, which only inheriting keeps (a list of its own cannot hold a deny).
        read: files
          ? "inherit"
          : snapshotPath
          ? [indexDir, workerPath, snapshotPath]
          : [indexDir, workerPath],
        write: false,
        net: false,
        env: false,
        run: false,
        ffi: false,
        sys: false,
        import: false,
      },
    },
  } as WorkerOptions);

  let running = false;
  let booted = false;
  // A single-use child stays put after its result, relaying nothing more, until the host kills
  // it: exiting at once would tear down the ~160 MB process on the CPUs the host needs to send the
  // response (see ts_runner.ts). A closed stdin (the host died) still ends it.
  let finished = false;
  const fail = (message: string) => {
    if (finished) realExit(0);
    flushOut();
    if (running) {
      sendResult({ t: "result", ok: false, error: { type: "SandboxCrash", message } });
    } else send({ t: "fatal", message });
    realExit(1);
  };

  worker.onerror = (event: ErrorEvent) => {
    event.preventDefault();
    fail(`The Python worker failed: ${event.message}`);
  };
  worker.onmessageerror = () => fail("The Python worker sent a message that cannot be read");
  worker.onmessage = async (event: MessageEvent) => {
    const message = event.data as Record<string, unknown>;
    if (finished || typeof message !== "object" || message === null) return;
    switch (message.t) {
      case "out":
        if ((message.s === "stdout" || message.s === "stderr") && typeof message.d === "string") {
          queueOut(message.s, message.d);
        }
        break;
      case "call": {
        const frame = callFrame(message);
        if (frame) {
          flushOut();
          send(frame);
        }
        break;
      }
      case "result":
        if (!running) break;
        running = false;
        flushOut();
        sendResult(resultFrame(message.body));
        if (!session) finished = true;
        break;
      case "ready":
        if (booted) break;
        booted = true;
        send({
          t: "ready",
          bootMs: typeof message.bootMs === "number" ? Math.round(message.bootMs) : undefined,
          fromSnapshot: message.fromSnapshot === true,
          snapshotError: text(message.snapshotError, 2000),
          wheelErrors: readyWheelErrors(message.wheelErrors),
        });
        break;
      case "snapshot":
        if (!snapshotMode || booted || !(message.bytes instanceof Uint8Array)) break;
        booted = true;
        try {
          await writeSnapshot(String(init.snapshotOut), message.bytes);
          send({
            t: "snapshot",
            bytes: message.bytes.length,
            bootMs: typeof message.bootMs === "number" ? Math.round(message.bootMs) : undefined,
          });
          realExit(0);
        } catch (error) {
          fail(`Cannot write the snapshot: ${(error as Error).message}`);
        }
        break;
      case "fatal":
        if (!booted) fail(text(message.message, 2000) ?? "Pyodide did not start");
        break;
    }
  };

  const transfer = wheels.map((wheel) => wheel.bytes.buffer as ArrayBuffer);
  worker.postMessage({
    t: "boot",
    indexDir,
    indexUrl: init.indexUrl,
    snapshotPath,
    makeSnapshot: snapshotMode,
    interrupt,
    allowedImports: init.allowedImports ?? [],
    wheels,
    prelude: init.prelude,
    files: files && { url: files.url, read: files.read },
    preload: snapshotMode && Array.isArray(init.preload) ? init.preload.map(String) : [],
  }, transfer);
  delete init.prelude;
  // The snapshot builder's stdin is closed after init; the Worker decides when it ends.
  if (snapshotMode) return;

  while (true) {
    const frame = await readFrame();
    if (frame === null) realExit(0);
    if (finished) continue;
    if (frame.t === "exec" && typeof frame.source === "string") {
      if (running) continue;
      running = true;
      Atomics.store(signal, 0, 0);
      const args = frame.args === undefined ? undefined : stringify(frame.args);
      worker.postMessage({ t: "exec", source: frame.source, args });
    } else if (frame.t === "reply" && typeof frame.id === "number") {
      const body = stringify({ ok: frame.ok === true, value: frame.value, error: frame.error });
      worker.postMessage({ t: "reply", id: frame.id, body });
    } else if (frame.t === "interrupt") {
      // SIGINT for running Python, a wake-up for time.sleep, a message for awaiting code.
      Atomics.store(signal, 0, 2);
      Atomics.notify(signal, 0);
      worker.postMessage({ t: "interrupt" });
    }
  }
}

main();
