/**
 * The trusted controller of a Python sandbox child (`deno run --unstable-worker-options` that may
 * only read the Pyodide package, the memory snapshot, `py_worker.ts` and `py_inbox.ts`, whose
 * path is its first argument). It starts Pyodide Workers and nothing else runs on its thread:
 * the host's frames reach a Worker through the inbox Worker (`sandbox/py_inbox.ts`, the only
 * reader of stdin), and a Worker writes its own frames to stdout.
 *
 * A child serves several runs of one principal, each in a fresh Worker with a fresh interpreter:
 * what the Workers share is what cannot carry state from one run to the next, the compiled
 * `WebAssembly.Module` (code, and what V8 compiled of it), and this process with its
 * permissions. Each Worker reads the snapshot's bytes itself. A session's child keeps its Worker
 * for all of the session's runs.
 *
 * Protocol with the host (JSON lines):
 * - host → child on stdin: `{"t":"init","nonce","indexDir","indexUrl","workerPath","workerUrl",
 *   "snapshotPath"?,"session"?,"allowedImports","wheels"?,"prelude","files"?}` (`files`:
 *   `{"path","url","read"}`, `sandbox/py_files.ts` and the run's granted paths, which the
 *   process may read and the Worker mounts read-only; `wheels`: `[{"name","data"}]`, the files'
 *   bytes in base64; `prelude`: the text of `sandbox/py_prelude.py`, which a Worker runs when it
 *   boots without the snapshot), then per run `{"t":"exec","source",
 *   "args"?}`, `{"t":"reply","id","ok","value"|"error"}` and `{"t":"interrupt"}`; and
 *   `{"t":"next"}` after a run, once the host has seen that run's Worker gone: start the next
 *   interpreter. Between the runs of a session the host stops this process (SIGSTOP).
 * - controller → host on stdout, with the init's nonce, which no Worker ever sees:
 *   `<nonce> {"t":"ready","nonce","bootMs","fromSnapshot","snapshotError"?,"wheelErrors"?}`
 *   when an interpreter is ready (`nonce`: the one its Worker's frames carry; the same line on
 *   stderr, `\0<nonce>\0`, says that everything written to stderr before it has been read),
 *   `{"t":"fatal","message"}` when Python cannot boot, and a `result` with `SandboxCrash` when
 *   the Worker fails during a run.
 * - Worker → host on stdout, with the Worker's nonce: `{"t":"out","s","d"}`,
 *   `{"t":"call","id","op",...}` and one `{"t":"result",...}` per exec (see `py_worker.ts`).
 * - snapshot mode (`{"t":"init","nonce","mode":"snapshot","snapshotOut","prelude","wheels"?,
 *   "preload"?,...}`, run with write access to the snapshot's directory only): boots, runs the
 *   prelude, unpacks the wheels of `python.packages` and imports `preload` (their top-level
 *   modules), writes the snapshot, sends `{"t":"snapshot","bytes","bootMs"}` and exits.
 *
 * Python code can reach its Worker's nonce and write any frame with it: the host treats every
 * frame as forged. What it cannot reach is this thread (the controller's nonce, which marks the
 * boundaries between runs), stdin, or a later run's Worker.
 *
 * This file must stay self-contained: it may be copied next to a compiled binary.
 *
 * @module
 */

// Captured before anything else runs, like the TypeScript runner does.
const encoder = new TextEncoder();
const encode = encoder.encode.bind(encoder);
const stringify = JSON.stringify;
const stdoutWriteSync = Deno.stdout.writeSync.bind(Deno.stdout);
const stderrWriteSync = Deno.stderr.writeSync.bind(Deno.stderr);
const realExit: (code?: number) => never = Deno.exit;

const inboxPath = Deno.args[0];

let nonce = "";

function writeAll(bytes: Uint8Array, write = stdoutWriteSync): void {
  let offset = 0;
  while (offset < bytes.length) {
    offset += write(offset === 0 ? bytes : bytes.subarray(offset));
  }
}

/** Writes a control frame. The leading newline ends whatever a Worker left half written. */
function send(frame: Record<string, unknown>): void {
  writeAll(encode("\n" + nonce + " " + stringify(frame) + "\n"));
}

/** Tells the host that it has read all stderr written before this point. */
function markStderr(): void {
  try {
    writeAll(encode("\0" + nonce + "\0"), stderrWriteSync);
  } catch {
    // Stderr is gone; the host then waits for the end of the stream.
  }
}

/** A Worker's frame nonce: random, made here after the Worker before it is gone. */
function frameNonce(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(18));
  return btoa(String.fromCharCode(...bytes)).replace(/[+/=]/g, "x");
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

/** The init frame, from the inbox, which reads stdin from the first byte on. */
function startInbox(): { inbox: Worker; init: Promise<Record<string, unknown> | undefined> } {
  const inbox = new Worker(new URL(`file://${inboxPath}`).href, {
    type: "module",
    name: "inbox",
    deno: { permissions: readOnly([inboxPath]) },
  } as WorkerOptions);
  const init = new Promise<Record<string, unknown> | undefined>((resolve) => {
    inbox.onmessage = (event: MessageEvent) => {
      const message = event.data as Record<string, unknown>;
      resolve(message?.t === "init" ? message.frame as Record<string, unknown> : undefined);
    };
    inbox.onerror = (event: ErrorEvent) => {
      event.preventDefault();
      resolve(undefined);
    };
  });
  return { inbox, init };
}

/** Compiles Pyodide's Wasm once for every Worker of this process; undefined if it cannot. */
async function compileModule(indexDir: string): Promise<WebAssembly.Module | undefined> {
  try {
    const bytes = await Deno.readFile(`${indexDir}/pyodide.asm.wasm`);
    const module = await WebAssembly.compile(bytes);
    // The module keeps its own copy; this idle thread might not collect the 10 MB for long.
    bytes.buffer.transfer(0);
    return module;
  } catch {
    // Each Worker then compiles its own, as Pyodide does by default.
    return undefined;
  }
}

async function main(): Promise<void> {
  const { inbox, init: initFrame } = startInbox();
  const init = await initFrame;
  if (!init || init.t !== "init" || typeof init.nonce !== "string") realExit(70);
  nonce = init.nonce as string;
  const indexDir = String(init.indexDir);
  const workerPath = String(init.workerPath);
  const snapshotMode = init.mode === "snapshot";
  const session = init.session === true;
  const prelude = init.prelude;
  // A Worker reads the snapshot itself, while it imports Pyodide: the bytes are needed only once
  // its Wasm module is loaded, and then only for the copy into the interpreter's memory.
  const snapshotPath = !snapshotMode && typeof init.snapshotPath === "string"
    ? init.snapshotPath
    : undefined;
  // In snapshot mode the wheels are those of python.packages, imported before the snapshot.
  const { wheels, errors: wheelErrors } = decodeWheels(init.wheels);
  const files = grantedFiles(init.files);
  const readyWheelErrors = (reported: unknown) => {
    const all = [...wheelErrors, ...(Array.isArray(reported) ? reported : [])]
      .map((error) => text(error, 2000)).filter((error) => error !== undefined).slice(0, 20);
    return all.length > 0 ? all : undefined;
  };
  const module = snapshotMode ? undefined : await compileModule(indexDir);

  let worker: Worker | undefined;
  let workerNonce = "";
  let booted = false;
  const fail = (message: string) => {
    if (booted) {
      send({ t: "result", ok: false, error: { type: "SandboxCrash", message } });
    } else send({ t: "fatal", message });
    realExit(1);
  };

  const startWorker = () => {
    booted = false;
    workerNonce = frameNonce();
    // Word 0: the interrupt buffer (SIGINT); word 1: how many messages the inbox has put on the
    // run's port, which a Worker waiting for a reply on its own thread waits on.
    const interrupt = new SharedArrayBuffer(8);
    const channel = new MessageChannel();
    const next = new Worker(String(init.workerUrl), {
      type: "module",
      name: "python",
      deno: {
        // With files, the process may read its own paths and the run's grants, less what the
        // host denied under them, which only inheriting keeps (a list cannot hold a deny).
        permissions: readOnly(
          files
            ? "inherit"
            : snapshotPath
            ? [indexDir, workerPath, snapshotPath]
            : [indexDir, workerPath],
        ),
      },
    } as WorkerOptions);
    worker = next;
    next.onerror = (event: ErrorEvent) => {
      event.preventDefault();
      if (worker === next) fail(`The Python worker failed: ${event.message}`);
    };
    next.onmessageerror = () => {
      if (worker === next) fail("The Python worker sent a message that cannot be read");
    };
    next.onmessage = async (event: MessageEvent) => {
      const message = event.data as Record<string, unknown>;
      if (worker !== next || typeof message !== "object" || message === null) return;
      switch (message.t) {
        case "ready":
          if (booted) break;
          booted = true;
          markStderr();
          send({
            t: "ready",
            nonce: workerNonce,
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
    // Each interpreter gets its own copy of the wheels: unpacking them is part of its boot.
    const own = wheels.map((wheel) => ({ name: wheel.name, bytes: wheel.bytes.slice() }));
    next.postMessage({
      t: "boot",
      nonce: workerNonce,
      indexDir,
      indexUrl: init.indexUrl,
      snapshotPath,
      makeSnapshot: snapshotMode,
      session,
      module,
      interrupt,
      port: channel.port2,
      allowedImports: init.allowedImports ?? [],
      wheels: own,
      prelude,
      files: files && { url: files.url, read: files.read },
      preload: snapshotMode && Array.isArray(init.preload) ? init.preload.map(String) : [],
    }, [channel.port2, ...own.map((wheel) => wheel.bytes.buffer as ArrayBuffer)]);
    if (!snapshotMode) {
      inbox.postMessage({ t: "attach", port: channel.port1, interrupt }, [channel.port1]);
    }
  };

  inbox.onmessage = (event: MessageEvent) => {
    const message = event.data as Record<string, unknown>;
    if (message?.t === "eof") realExit(0);
    // The host has seen the last run's Worker gone (it sends `next` only then, and never to a
    // session's child): the next run gets an interpreter that nothing has run in.
    if (message?.t === "next" && !session) {
      worker?.terminate();
      startWorker();
    }
  };
  inbox.onerror = (event: ErrorEvent) => {
    event.preventDefault();
    fail(`The frame reader failed: ${event.message}`);
  };
  delete init.wheels;
  startWorker();
}

main();

/** A Worker's permissions: to read what is named (or what the child may), and nothing else. */
function readOnly(read: string[] | "inherit"): Record<string, unknown> {
  return {
    read,
    write: false,
    net: false,
    env: false,
    run: false,
    ffi: false,
    sys: false,
    import: false,
  };
}
