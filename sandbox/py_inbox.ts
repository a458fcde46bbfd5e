/**
 * The reader of a Python sandbox child's stdin: a Web Worker of `sandbox/py_host.ts` that owns
 * the host's frames from the first byte to the last. It hands each frame to whoever it is for
 * without waking the child's main thread: `exec`, `reply` and `interrupt` to the Pyodide Worker
 * of the current run, through a `MessagePort` the controller gives it with each new Worker;
 * `init` and `next` to the controller.
 *
 * It reads synchronously (`readSync`), so that a frame wakes this thread directly, and only while
 * a Worker is attached. Nothing else in the process reads stdin: a read left pending by a Worker
 * that is gone would take the next run's frames with it (a read cannot be cancelled), so the
 * Pyodide Workers close their stdin handle before Python runs, and Python code never reaches
 * this Worker.
 *
 * Messages:
 * - controller → inbox: `{t:"attach", port, interrupt}`: the current Worker's port and its shared
 *   words (the interrupt buffer, and a count of the messages put on the port, bumped and notified
 *   after each one for a Worker that waits for a reply on its own thread); reading goes on until
 *   the host's next `next` frame.
 * - inbox → controller: `{t:"init", frame}` (the first frame, read before any attach), `{t:"next"}`
 *   (the host wants a fresh interpreter; reading stops until the next attach) and `{t:"eof"}`.
 * - inbox → Worker: `{t:"exec", source, args?}`, `{t:"reply", id, body}` (the frame's own JSON
 *   text, which Python parses; only the id is read here) and `{t:"interrupt"}`.
 *
 * This file must stay self-contained: it may be copied next to a compiled binary.
 *
 * @module
 */

interface InboxScope {
  onmessage: ((event: MessageEvent) => void) | null;
  postMessage(message: unknown): void;
}

const scope = globalThis as unknown as InboxScope;
const readSync = Deno.stdin.readSync.bind(Deno.stdin);
const decoder = new TextDecoder();
const buffer = new Uint8Array(64 * 1024);
/** The host writes `reply` frames with these keys first, so the id is read without a parse. */
const REPLY_PREFIX = '{"t":"reply","id":';

let pending = "";
let port: MessagePort | undefined;
let interrupt: Int32Array | undefined;
/** Counts the messages put on `port`: a Worker that waits for a reply on its thread waits on it. */
let posted: Int32Array | undefined;

/** Puts a message on the run's port and wakes a Worker that waits for one on its thread. */
function post(message: Record<string, unknown>): void {
  if (!port) return;
  port.postMessage(message);
  if (posted) {
    Atomics.add(posted, 0, 1);
    Atomics.notify(posted, 0);
  }
}

/** Reads the next line; undefined at the end of stdin. Lines may be megabytes long (wheels). */
function readLine(): string | undefined {
  while (true) {
    const newline = pending.indexOf("\n");
    if (newline >= 0) {
      const line = pending.slice(0, newline);
      pending = pending.slice(newline + 1);
      return line;
    }
    // Only new chunks are searched for the newline.
    const chunks = [pending];
    while (true) {
      const n = readSync(buffer);
      if (n === null) return undefined;
      const chunk = decoder.decode(buffer.subarray(0, n), { stream: true });
      chunks.push(chunk);
      if (chunk.includes("\n")) break;
    }
    pending = chunks.join("");
  }
}

/** Hands one frame on; returns false when reading is to stop (`next`). */
function dispatch(line: string): boolean {
  if (line.startsWith(REPLY_PREFIX)) {
    const id = Number.parseInt(line.slice(REPLY_PREFIX.length, REPLY_PREFIX.length + 20), 10);
    if (Number.isSafeInteger(id)) post({ t: "reply", id, body: line });
    return true;
  }
  if (line.trim() === "") return true;
  let frame: Record<string, unknown>;
  try {
    frame = JSON.parse(line);
  } catch {
    return true;
  }
  switch (frame?.t) {
    case "exec":
      if (typeof frame.source === "string") {
        post({
          t: "exec",
          source: frame.source,
          args: frame.args === undefined ? undefined : JSON.stringify(frame.args),
        });
      }
      return true;
    case "interrupt":
      // SIGINT for running Python and a wake-up for time.sleep; the message is for code that
      // awaits, which the Worker cancels.
      if (interrupt) {
        Atomics.store(interrupt, 0, 2);
        Atomics.notify(interrupt, 0);
      }
      post({ t: "interrupt" });
      return true;
    case "next":
      scope.postMessage({ t: "next" });
      return false;
    default:
      return true;
  }
}

function read(): void {
  while (true) {
    const line = readLine();
    if (line === undefined) {
      scope.postMessage({ t: "eof" });
      return;
    }
    if (!dispatch(line)) return;
  }
}

scope.onmessage = (event: MessageEvent) => {
  const message = event.data as Record<string, unknown>;
  if (message?.t !== "attach") return;
  port?.close();
  port = message.port as MessagePort;
  interrupt = new Int32Array(message.interrupt as SharedArrayBuffer, 0, 1);
  posted = new Int32Array(message.interrupt as SharedArrayBuffer, 4, 1);
  read();
};

const init = readLine();
if (init === undefined) scope.postMessage({ t: "eof" });
else {
  let frame: unknown;
  try {
    frame = JSON.parse(init);
  } catch {
    frame = undefined;
  }
  scope.postMessage({ t: "init", frame });
}
