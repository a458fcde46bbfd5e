/**
 * The trusted runner inside a TypeScript sandbox child (`deno run` with deny-by-default flags).
 *
 * Protocol (JSON lines):
 * - host → runner on stdin: `{"t":"init","nonce","preload"?,"packages"?}` (`packages`: the npm
 *   packages `packages()` lists), then `{"t":"exec","base64","args"?}` (`args`: a skill's
 *   arguments, when the skill runs here as a nested run), then replies.
 * - runner → host on stdout: `<nonce> {"t":"ready"}`, `<nonce> {"t":"out","s":"stdout"|"stderr","d"}`
 *   and finally `<nonce> {"t":"result",...}`.
 *
 * Every line the runner writes starts with the nonce; a line without it was written by user code
 * going around `console` and makes the host fail the run. The nonce is not a secret from the code:
 * a heap snapshot (`node:v8`) shows it, and tests/forged_frames_test.ts forges every frame type
 * with it. So the host treats every frame as forged, and no frame can do more than the code could
 * through the API (output counts against the cap, calls go through the policy, a result ends the
 * run). No policy is enforced here.
 *
 * The result is sent when the event loop has drained (the `unload` event), so work that the code
 * started without awaiting still finishes, as it would in a script. The runner then sleeps in a
 * blocking read of stdin until the host kills it (or closes stdin), so that no more of the code's
 * JavaScript runs and the process is not torn down while the host answers its client.
 *
 * This file must stay self-contained: it may be copied next to a compiled binary, and the child
 * loads exactly this one module before the code. That is why the console, the API, the frame
 * channel and the run's end are one file rather than several.
 *
 * @module
 */

// Captured before user code runs, so that patching globals cannot reach the frame channel.
const encoder = new TextEncoder();
const decoder = new TextDecoder();
const encode = encoder.encode.bind(encoder);
const stringify = JSON.stringify;
const parse = JSON.parse;
const stdoutWriteSync = Deno.stdout.writeSync.bind(Deno.stdout);
const stdinRead = Deno.stdin.read.bind(Deno.stdin);
const stdinReadSync = Deno.stdin.readSync.bind(Deno.stdin);
const stderrWriteSync = Deno.stderr.writeSync.bind(Deno.stderr);
const inspect = Deno.inspect;
const realExit: (code?: number) => never = Deno.exit;
const addListener = globalThis.addEventListener.bind(globalThis);
const apply = Reflect.apply;
const objectKeys = Object.keys;
const sliceString = String.prototype.slice;
const subarray = Uint8Array.prototype.subarray;
const byteLength = Object.getOwnPropertyDescriptor(
  Object.getPrototypeOf(Uint8Array.prototype),
  "byteLength",
)!.get!;
const toBase64 = (Uint8Array.prototype as unknown as { toBase64: () => string }).toBase64;
const isView = ArrayBuffer.isView;

let nonce = "";
let pending = "";

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

// The frame path uses only functions captured above: user code may patch any prototype
// (subarray, the length getter, Object.prototype.toJSON) to read or rewrite frames otherwise.
function writeAll(bytes: Uint8Array, write = stdoutWriteSync): void {
  const total: number = apply(byteLength, bytes, []);
  let offset = 0;
  while (offset < total) {
    offset += write(offset === 0 ? bytes : apply(subarray, bytes, [offset]));
  }
}

/** Fields that carry the code's own data; everything else in a frame is the runner's. */
const DATA_FIELDS = ["value", "args", "d"];

function serialise(fields: Record<string, unknown>): string {
  const names = objectKeys(fields);
  let out = "{";
  for (let i = 0; i < names.length; i++) {
    const name = names[i];
    const value = fields[name];
    if (value === undefined) continue;
    const own = typeof value === "object" && value !== null && !DATA_FIELDS.includes(name);
    out += (out.length > 1 ? "," : "") + stringify(name) + ":" +
      (own ? serialise(value as Record<string, unknown>) : stringify(value));
  }
  return out + "}";
}

function send(frame: Record<string, unknown>): void {
  writeAll(encode(nonce + " " + serialise(frame) + "\n"));
}

const readBuffer = new Uint8Array(64 * 1024);
/** Characters of output per frame. */
const OUT_CHUNK_CHARS = 256 * 1024;

/** Takes the next frame out of what has been read, or undefined when no whole line is there. */
function takeFrame(): Record<string, unknown> | undefined {
  while (true) {
    const newline = pending.indexOf("\n");
    if (newline < 0) return undefined;
    const line = pending.slice(0, newline);
    pending = pending.slice(newline + 1);
    if (line.trim() !== "") return parse(line);
  }
}

/** Adds `n` bytes read into the buffer to `chunks`; true once a line is complete. */
function took(chunks: string[], n: number): boolean {
  const chunk = decoder.decode(readBuffer.subarray(0, n), { stream: true });
  chunks.push(chunk);
  return chunk.includes("\n");
}

/** Reads the next frame from the host, or null at end of input. */
async function readFrame(): Promise<Record<string, unknown> | null> {
  while (true) {
    const frame = takeFrame();
    if (frame !== undefined) return frame;
    // Only new chunks are searched: a reply (readOutput) can be megabytes long.
    const chunks = [pending];
    while (true) {
      const n = await stdinRead(readBuffer);
      if (n === null) return null;
      if (took(chunks, n)) break;
    }
    pending = chunks.join("");
  }
}

/**
 * Reads the next frame with the main thread blocked in the read: for `init` and `exec`, which
 * the child waits for with nothing else to do. The blocking read wakes as soon as the bytes
 * arrive; an awaited read goes through Deno's I/O threads and the event loop first (~0.5 ms, and
 * more for the first one, which starts a thread).
 */
function readFrameSync(): Record<string, unknown> | null {
  while (true) {
    const frame = takeFrame();
    if (frame !== undefined) return frame;
    const chunks = [pending];
    while (true) {
      const n = stdinReadSync(readBuffer);
      if (n === null) return null;
      if (took(chunks, n)) break;
    }
    pending = chunks.join("");
  }
}

function format(args: unknown[]): string {
  return args.map((a) => typeof a === "string" ? a : inspect(a, { colors: false, depth: 6 }))
    .join(" ");
}

function installConsole(): void {
  // One huge print goes out in pieces: a frame must stay under the host's frame limit, and the
  // host stops the run at limits.maxOutputBytes anyway.
  const out = (stream: "stdout" | "stderr") => (...args: unknown[]) => {
    const text = indent + format(args) + "\n";
    for (let i = 0; i < text.length; i += OUT_CHUNK_CHARS) {
      send({ t: "out", s: stream, d: apply(sliceString, text, [i, i + OUT_CHUNK_CHARS]) });
    }
  };
  const log = out("stdout");
  const error = out("stderr");
  let indent = "";
  const counts = new Map<string, number>();
  const timers = new Map<string, number>();
  const replacement = {
    log,
    info: log,
    debug: log,
    dir: (value: unknown) => log(value),
    dirxml: log,
    table: (value: unknown) => log(value),
    error,
    warn: error,
    trace: (...args: unknown[]) => error(format(["Trace:", ...args]), new Error().stack ?? ""),
    assert: (condition: unknown, ...args: unknown[]) => {
      if (!condition) error("Assertion failed:", ...args);
    },
    count: (label = "default") => {
      const n = (counts.get(label) ?? 0) + 1;
      counts.set(label, n);
      log(`${label}: ${n}`);
    },
    countReset: (label = "default") => counts.delete(label),
    group: (...args: unknown[]) => {
      if (args.length) log(...args);
      indent += "  ";
    },
    groupCollapsed: (...args: unknown[]) => replacement.group(...args),
    groupEnd: () => {
      indent = indent.slice(2);
    },
    time: (label = "default") => timers.set(label, performance.now()),
    timeLog: (label = "default", ...args: unknown[]) => {
      const start = timers.get(label);
      if (start !== undefined) {
        log(`${label}: ${(performance.now() - start).toFixed(3)}ms`, ...args);
      }
    },
    timeEnd: (label = "default") => {
      replacement.timeLog(label);
      timers.delete(label);
    },
    clear: () => {},
  };
  Object.defineProperty(globalThis, "console", {
    value: replacement,
    writable: true,
    configurable: true,
  });
}

/** Makes a value JSON-safe; values JSON cannot represent become readable strings. */
function toJsonSafe(value: unknown): Json | undefined {
  if (value === undefined) return undefined;
  if (typeof value === "function" || typeof value === "symbol") return inspect(value);
  try {
    const text = stringify(value, (_key, v) => {
      if (typeof v === "bigint") return `${v}n`;
      if (v instanceof Map) return Object.fromEntries(v);
      if (v instanceof Set) return [...v];
      if (typeof v === "function" || typeof v === "symbol") return inspect(v);
      if (v instanceof Error) return { name: v.name, message: v.message };
      return v;
    });
    return text === undefined ? inspect(value) : parse(text);
  } catch {
    return inspect(value, { colors: false, depth: 6 });
  }
}

function describeError(error: unknown): { type: string; message: string; traceback?: string } {
  if (error instanceof Error) {
    return {
      type: error.name || "Error",
      message: error.message,
      traceback: typeof error.stack === "string" ? error.stack : undefined,
    };
  }
  return { type: "Error", message: `Uncaught ${inspect(error, { colors: false })}` };
}

// Requests to the host. Stdin is read only while a request is pending, so that an idle child
// lets its event loop drain and the run end.
let nextId = 1;
const pendingRequests = new Map<
  number,
  { resolve(v: unknown): void; reject(e: Error): void; origin: Error }
>();
let reading = false;

/** An upstream tool reported a failure (`isError`); the message is the tool's. */
class ToolError extends Error {
  /** @param message The upstream tool's error text. */
  constructor(message: string) {
    super(message);
    this.name = "ToolError";
  }
}

/**
 * A call that needed a person's approval was not approved; code may catch it
 * (`e instanceof ApprovalDenied`) and go on without the call.
 */
class ApprovalDenied extends Error {
  /** @param message Why, and how a person can approve the call. */
  constructor(message: string) {
    super(message);
    this.name = "ApprovalDenied";
  }
}

/** Builds the error for a failed request, with the stack of the code that made it. */
function remoteError(error: { type?: unknown; message?: unknown }, origin: Error): Error {
  const message = typeof error?.message === "string" ? error.message : "The request failed";
  const made = error?.type === "ToolError"
    ? new ToolError(message)
    : error?.type === "ApprovalDenied"
    ? new ApprovalDenied(message)
    : new Error(message);
  if (typeof error?.type === "string") made.name = error.type;
  const frames = (origin.stack ?? "").split("\n").slice(1).join("\n");
  made.stack = `${made.name}: ${message}${frames ? "\n" + frames : ""}`;
  return made;
}

async function pumpReplies(): Promise<void> {
  if (reading) return;
  reading = true;
  try {
    while (pendingRequests.size > 0) {
      const frame = await readFrame();
      if (frame === null) {
        for (const pending of pendingRequests.values()) {
          pending.reject(new Error("The host closed the connection"));
        }
        pendingRequests.clear();
        return;
      }
      if (frame.t !== "reply" || typeof frame.id !== "number") continue;
      const pending = pendingRequests.get(frame.id);
      if (!pending) continue;
      pendingRequests.delete(frame.id);
      if (frame.ok === true) pending.resolve(frame.value);
      else {
        pending.reject(
          remoteError(frame.error as { type?: unknown; message?: unknown }, pending.origin),
        );
      }
    }
  } finally {
    reading = false;
  }
}

function request(op: string, payload: Record<string, unknown>): Promise<unknown> {
  const id = nextId++;
  const origin = new Error();
  const promise = new Promise<unknown>((resolve, reject) => {
    pendingRequests.set(id, { resolve, reject, origin });
  });
  send({ t: "call", id, op, ...payload });
  pumpReplies();
  return promise;
}

/** How the host answers a skill call: the body to run here, or the other language's result. */
type SkillReply =
  | { mode: "inline"; ref: string; lineOffset: number; base64: string; args: unknown }
  | {
    mode: "result";
    value: unknown;
    stdout?: string;
    stderr?: string;
    images?: Array<{ mimeType: string; data: string }>;
  };

/** Names of the `skills` object itself; a skill with one of these names is reached by `call`. */
const SKILL_METHODS = ["save", "list", "call"];
/** A skill's name as code may write it: lowercase words joined by hyphens or underscores. */
const SKILL_NAME = /^[a-z0-9]+(?:[-_][a-z0-9]+)*$/;
/** Lowercase names that runtimes look up on any object (reserved as skill names too). */
const NOT_SKILLS = ["then", "constructor", "prototype"];

/**
 * The `skills` object that code at one nesting depth sees: a skill's body gets the next depth's,
 * so that the host can bound how deep skills call skills (it counts the levels it runs itself).
 */
function skillsAt(depth: number): Record<string, unknown> {
  const call = async (ref: string, args?: Record<string, unknown>) => {
    const reply = await request("skill", {
      action: "call",
      name: ref,
      args: args ?? {},
      depth,
    }) as SkillReply;
    if (reply.mode === "inline") {
      // Named in the URL so that the host can point a stack trace at the skill's own lines.
      const module = await import(
        `data:application/typescript;skill=${reply.ref};offset=${reply.lineOffset};base64,${reply.base64}`
      );
      return await module.default(reply.args, skillsAt(depth + 1));
    }
    // The other language's run printed this; it is the caller's output now.
    for (const [stream, text] of [["stdout", reply.stdout], ["stderr", reply.stderr]]) {
      for (let i = 0; text && i < text.length; i += OUT_CHUNK_CHARS) {
        send({ t: "out", s: stream, d: apply(sliceString, text, [i, i + OUT_CHUNK_CHARS]) });
      }
    }
    for (const image of reply.images ?? []) await request("display", { args: image });
    return reply.value;
  };
  const methods: Record<string, unknown> = {
    save: (skill: Record<string, unknown>) => request("skill", { action: "save", args: skill }),
    list: () => request("skill", { action: "list" }),
    call,
  };
  return new Proxy(methods, {
    get(target, name) {
      if (typeof name !== "string") return undefined;
      if (SKILL_METHODS.includes(name)) return target[name];
      // Only what can name a skill is one: `toJSON`, `then`, `constructor` and the like, which
      // JSON.stringify(), await and inspection look up, are not there (as on a plain object).
      if (!SKILL_NAME.test(name) || NOT_SKILLS.includes(name)) return undefined;
      // Skill names are lowercase words joined by hyphens: `skills.page_issues` is "page-issues".
      return (args?: Record<string, unknown>) => call(name.replaceAll("_", "-"), args);
    },
  });
}

const topSkills = skillsAt(0);

/** What `display()` takes; the host checks each image again (its type, bytes and size). */
const IMAGE_TYPES = ["image/png", "image/jpeg", "image/gif", "image/webp", "image/svg+xml"];
/** The largest image, in bytes: its frame (base64 in JSON) stays under the host's 8 MiB. */
const MAX_IMAGE_BYTES = 4 * 1024 * 1024;

/** An image's bytes as base64, from what `display()` was given. */
function imageBase64(data: unknown, mimeType: string): string {
  if (typeof data === "string") {
    // SVG is text; a raster image given as a string is its base64 (as MCP tool results carry it).
    if (mimeType === "image/svg+xml") return apply(toBase64, encode(data), []);
    return data;
  }
  if (data instanceof ArrayBuffer) return apply(toBase64, new Uint8Array(data), []);
  if (isView(data)) {
    const view = data as ArrayBufferView;
    return apply(toBase64, new Uint8Array(view.buffer, view.byteOffset, view.byteLength), []);
  }
  throw new TypeError(
    "display(data, mimeType): data must be the image's bytes (a Uint8Array) or a string (SVG text, or the base64 of a raster image)",
  );
}

/** What `packages()` returns: the npm packages the server offers (`sandbox.npmPackages`). */
type PackageInfo = { name: string; version: string; specifier: string; description?: string };

function installApi(packages: PackageInfo[]): void {
  const callMCPTool = (name: string, args?: Record<string, unknown>) =>
    request("call", { name, args: args ?? {} });
  const discoverMCPTools = (options: { search?: string; server?: string } = {}) =>
    request("discover", { search: options?.search, server: options?.server });
  const searchTools = (query: string, limit = 10) => request("search", { query, limit });
  const getToolSchema = (name: string) => request("schema", { name });
  const readOutput = (id: string) => request("output", { name: id });
  const serverProxy = (server: string) =>
    new Proxy({}, {
      get(_target, tool) {
        if (typeof tool !== "string" || tool === "then") return undefined;
        return (args?: Record<string, unknown>) =>
          request("proxy", { server, tool, args: args ?? {} });
      },
    });
  const tools = new Proxy({}, {
    get(_target, server) {
      if (typeof server !== "string" || server === "then") return undefined;
      return serverProxy(server);
    },
  });
  // LLM, user and progress requests carry the code's data under `args`, like tool calls; the
  // host checks every field.
  type LlmOptions = { systemPrompt?: string; maxTokens?: number; model?: string };
  const llm = Object.freeze({
    ask: async (prompt: string, options: LlmOptions = {}) => {
      const reply = await request("sample", {
        args: {
          messages: [{ role: "user", content: prompt }],
          systemPrompt: options?.systemPrompt,
          maxTokens: options?.maxTokens,
          model: options?.model,
        },
      }) as { text: string };
      return reply.text;
    },
    think: (options: LlmOptions & { messages: unknown[] }) => request("sample", { args: options }),
  });
  const askUser = (message: string, schema?: Record<string, unknown>) =>
    request("elicit", { args: { message, schema } });
  const progress = async (done: number, total?: number, message?: string) => {
    await request("progress", { args: { done, total, message } });
  };
  // An image of the result, after its text, in the order displayed: MCP `image` content, or a
  // `resource_link` to it once the run's output passes limits.maxOutputBytes.
  const display = async (data: Uint8Array | ArrayBuffer | string, mimeType: string) => {
    if (typeof mimeType !== "string" || !IMAGE_TYPES.includes(mimeType)) {
      throw new TypeError(
        `display(data, mimeType): mimeType must be one of ${IMAGE_TYPES.join(", ")}, got ${
          typeof mimeType === "string" ? stringify(mimeType.slice(0, 100)) : typeof mimeType
        }`,
      );
    }
    const base64 = imageBase64(data, mimeType);
    if (base64.length > Math.ceil(MAX_IMAGE_BYTES / 3) * 4) {
      throw new TypeError(
        `display(data, mimeType): the image is larger than ${MAX_IMAGE_BYTES} bytes; make it smaller (fewer pixels, or JPEG)`,
      );
    }
    await request("display", { args: { mimeType, data: base64 } });
  };
  const listPackages = () => packages.map((pkg) => ({ ...pkg }));
  const api: Record<string, unknown> = {
    skills: topSkills,
    callMCPTool,
    discoverMCPTools,
    searchTools,
    getToolSchema,
    readOutput,
    tools,
    ToolError,
    ApprovalDenied,
    llm,
    askUser,
    progress,
    display,
    packages: listPackages,
  };
  for (const [name, value] of Object.entries(api)) {
    Object.defineProperty(globalThis, name, { value, writable: true, configurable: true });
  }
}

/**
 * Makes a Worker option that the sandbox refuses an error the code can catch. Deno exits the
 * whole process (code 70) when a Worker asks for `deno.permissions` without
 * `--unstable-worker-options`, which the sandbox never passes: a Worker runs with the sandbox's own
 * permissions. Code that digs the original constructor out only crashes its own child.
 */
function guardWorker(): void {
  const Original = globalThis.Worker;
  if (typeof Original !== "function") return;
  const Guarded = new Proxy(Original, {
    construct(target, args, newTarget) {
      const options = args[1] as { deno?: { permissions?: unknown } } | undefined;
      if (options?.deno?.permissions !== undefined) {
        throw new TypeError(
          "Cannot create a Worker with deno.permissions: the sandbox does not offer the option; a Worker runs with the sandbox's own permissions, so leave it out",
        );
      }
      return Reflect.construct(target, args, newTarget);
    },
  });
  Object.defineProperty(globalThis, "Worker", {
    value: Guarded,
    writable: true,
    configurable: true,
  });
}

/**
 * Takes `localStorage` and `caches` away, as where a browser has no storage (`typeof localStorage`
 * is "undefined"): Deno keeps both on disk under the child's `DENO_DIR`, one store for every child
 * (they all run this file), so a run could leave data for the next run, of another principal too.
 * The host also makes that directory refuse them (`sealChildDenoDir`). `sessionStorage` lives in
 * the child's memory and stays.
 */
function removeWebStorage(): void {
  for (const name of ["localStorage", "caches"]) Reflect.deleteProperty(globalThis, name);
}

/**
 * Sleeps until the host kills the child, or closes stdin (the host died): exiting right after the
 * result would tear the process down on the CPUs that the host needs for its response (~2 ms of
 * a warm call on 2 vCPUs). The main thread stays blocked, so none of the code's callbacks run.
 */
function park(): void {
  try {
    while (stdinReadSync(readBuffer) !== null) {
      // Late replies to requests the code did not await: nothing to do with them.
    }
  } catch {
    // The code closed stdin: exit now.
  }
}

/**
 * Runs once, in a pooled child, the code paths of a run that V8 compiles lazily on first use,
 * so that they are compiled before the code arrives rather than while it waits: event dispatch
 * (the `unload` that sends the result took 1-1.5 ms the first time), the raw stderr write of the
 * mark, and the conversion of the return value.
 */
function warmUp(): void {
  const noop = () => {};
  const type = "code-executor-warm-up";
  addListener(type, noop);
  globalThis.dispatchEvent(new Event(type, { cancelable: true }));
  globalThis.removeEventListener(type, noop);
  stderrWriteSync(new Uint8Array(0));
  toJsonSafe({ warm: [1, "1", null] });
}

type Outcome =
  | { state: "running" }
  | { state: "returned"; value: unknown }
  | { state: "threw"; error: unknown };

async function main(): Promise<void> {
  const init = readFrameSync();
  if (!init || init.t !== "init" || typeof init.nonce !== "string") realExit(70);
  nonce = (init as { nonce: string }).nonce;
  // The first TypeScript import pays for setting up the module loader, and the first module of
  // the wrapper's shape for its compile paths; a pooled child pays both before the code arrives.
  if (init.preload === true) {
    // `export default async function () {\nconst warm: number = 1;\nreturn warm;\n}\n`, encoded
    // here: btoa() loads its code on first use (~4 ms).
    const warm = await import(
      "data:application/typescript;base64,ZXhwb3J0IGRlZmF1bHQgYXN5bmMgZnVuY3Rpb24gKCkgewpjb25zdCB3YXJtOiBudW1iZXIgPSAxOwpyZXR1cm4gd2FybTsKfQo="
    );
    await warm.default();
    warmUp();
  }
  // Everything up to `ready` does not depend on the code, so a pooled child does it while idle.
  installConsole();
  const packages = (init as { packages?: unknown }).packages;
  installApi(Array.isArray(packages) ? packages as PackageInfo[] : []);
  guardWorker();
  removeWebStorage();

  let started = false;
  let outcome: Outcome = { state: "running" };
  let exitCode: number | undefined;
  let finished = false;
  const finish = () => {
    // Before the code (the host went away while the child waited) there is nothing to report.
    if (finished || !started) return;
    finished = true;
    // The mark tells the host it has read everything written to stderr before the result, so it
    // need not wait for the exit. Code that forges it early only loses some of its own stderr.
    try {
      writeAll(encode("\0" + nonce + "\0"), stderrWriteSync);
    } catch {
      // The code closed stderr; the host then waits for the end of the stream.
    }
    if (exitCode !== undefined && outcome.state === "running") {
      send({
        t: "result",
        ok: false,
        error: {
          type: "SandboxExit",
          message:
            `Deno.exit(${exitCode}) was called before the code finished: return a value or throw an error instead`,
        },
      });
    } else if (outcome.state === "returned") {
      const value = toJsonSafe(outcome.value);
      send(value === undefined ? { t: "result", ok: true } : { t: "result", ok: true, value });
    } else if (outcome.state === "threw") {
      send({ t: "result", ok: false, error: describeError(outcome.error) });
    } else {
      send({
        t: "result",
        ok: false,
        error: {
          type: "UnsettledPromise",
          message:
            "The code awaited a promise that can never settle (nothing else was left to run)",
        },
      });
    }
    park();
  };

  addListener("error", (event: ErrorEvent) => {
    event.preventDefault();
    if (outcome.state !== "threw") outcome = { state: "threw", error: event.error };
  });
  addListener("unhandledrejection", (event: PromiseRejectionEvent) => {
    event.preventDefault();
    if (outcome.state !== "threw") outcome = { state: "threw", error: event.reason };
  });
  addListener("unload", finish);

  Deno.exit = ((code?: number) => {
    exitCode = code ?? 0;
    finish();
    realExit(exitCode);
  }) as typeof Deno.exit;
  send({ t: "ready" });

  const exec = readFrameSync();
  if (!exec || exec.t !== "exec" || typeof exec.base64 !== "string") realExit(0);
  started = true;
  // The host encodes the source: the first btoa() in a fresh child costs ~2 ms.
  const url = "data:application/typescript;base64," + (exec as { base64: string }).base64;
  try {
    const module = await import(url);
    // A skill in the other language runs here as a nested run: its arguments come with the code.
    const value = await module.default((exec as { args?: unknown }).args, topSkills);
    if (outcome.state === "running") outcome = { state: "returned", value };
  } catch (error) {
    if (outcome.state === "running") outcome = { state: "threw", error };
  }
}

main();
