/**
 * Security corpus for the TypeScript sandbox: each attack is sent through `run_typescript` to one
 * real server (`deno task start` over stdio), must come back as a refused tool result, and is
 * followed by a benign call that proves the server still serves.
 *
 * @module
 */
import { assert, assertEquals, assertMatch, describeResult, type RunResult } from "./_assert.ts";
import { ROOT } from "./_env.ts";
import { assertNoSandboxes, eventually, sandboxDirs, sandboxPids } from "./_proc.ts";
import { type ServerHarness, startServer } from "./_stdio_server.ts";
import { forgedJsonRpcLines, recordInbound } from "./_client.ts";

/** Idle children the server keeps; pinned so that the leftover check can count them. */
const WARM_POOL = 2;
/** Marks every forged message, so that the client's inbound traffic can be searched for it. */
const FORGED = "FORGED-by-sandbox-code";

interface Refusal {
  /** The expected `error.type`, where it is stable. */
  type?: string | RegExp;
  /** Matched against `error.message` followed by the captured stderr. */
  message: RegExp;
}

/** A loopback HTTP server that records every request it gets. */
interface RequestRecorder {
  url: string;
  requests: string[];
  close(): Promise<void>;
}

function startRecorder(status: number): RequestRecorder {
  const requests: string[] = [];
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    (request) => {
      requests.push(new URL(request.url).pathname);
      return new Response(status === 200 ? "export default 1;" : "", { status });
    },
  );
  return {
    url: `http://127.0.0.1:${server.addr.port}`,
    requests,
    close: () => server.shutdown(),
  };
}

function describe(result: RunResult): string {
  return describeResult(result, 300);
}

function assertRefused(result: RunResult, refusal: Refusal): void {
  const context = describe(result);
  assertEquals(result.isError, true, `expected an error result, got ${context}`);
  assertEquals(result.ok, false, context);
  assert(result.error, `expected an error, got ${context}`);
  if (typeof refusal.type === "string") assertEquals(result.error.type, refusal.type, context);
  else if (refusal.type) assertMatch(result.error.type, refusal.type, context);
  assertMatch(`${result.error.message}\n${result.stderr}`, refusal.message, context);
  assertEquals(result.returnValue, undefined, context);
  assert(!/root:.*:0:0:/.test(JSON.stringify(result)), `/etc/passwd leaked: ${context}`);
}

async function assertServing(server: ServerHarness): Promise<void> {
  const result = await server.runTs("return 1 + 1");
  assertEquals(result.isError, false, describe(result));
  assertEquals(result.returnValue, 2, describe(result));
}

async function exists(path: string): Promise<boolean> {
  return await Deno.lstat(path).then(() => true, () => false);
}

/** The npm package names the host itself imports (the host may refresh their metadata). */
async function hostPackages(): Promise<Set<string>> {
  const config = JSON.parse(await Deno.readTextFile(`${ROOT}deno.json`)) as {
    imports: Record<string, string>;
  };
  const names = Object.values(config.imports)
    .filter((target) => target.startsWith("npm:"))
    .map((target) => /^npm:(@[^/]+\/[^@/]+|[^@/]+)/.exec(target)?.[1])
    .filter((name): name is string => name !== undefined);
  return new Set(names);
}

async function cmdline(pid: number): Promise<string> {
  return await Deno.readTextFile(`/proc/${pid}/cmdline`).catch(() => "");
}

Deno.test("run_typescript refuses sandbox escapes and keeps serving after each one", async (t) => {
  const target = startRecorder(200);
  const registry = startRecorder(404);
  const outside = await Deno.makeTempDir({ prefix: "ce-outside-" });
  try {
    const server = await startServer({
      env: {
        NPM_CONFIG_REGISTRY: `${registry.url}/`,
        CODE_EXECUTOR_WARM_POOL: String(WARM_POOL),
      },
    });
    try {
      await attackSequence(t, server, { target, registry, outside });
    } finally {
      await server.close();
    }
  } finally {
    await target.close();
    await registry.close();
    await Deno.remove(outside, { recursive: true });
  }
});

// One server for the whole sequence: the benign call after each attack proves that the same
// process survived it.
async function attackSequence(
  t: Deno.TestContext,
  server: ServerHarness,
  { target, registry, outside }: {
    target: RequestRecorder;
    registry: RequestRecorder;
    outside: string;
  },
): Promise<void> {
  const { inbound, errors: clientErrors } = recordInbound(server.client);

  const refuses = (
    name: string,
    code: string,
    refusal: Refusal,
    options: {
      args?: Record<string, unknown>;
      after?: (result: RunResult) => void | Promise<void>;
    } = {},
  ) =>
    t.step(name, async () => {
      const result = await server.runTs(code, options.args);
      assertRefused(result, refusal);
      await options.after?.(result);
      await assertServing(server);
    });

  await refuses(
    "refuses to read /etc/passwd via Deno.readTextFile",
    'return await Deno.readTextFile("/etc/passwd");',
    { type: "PermissionError", message: /Requires read access to "\/etc\/passwd"/ },
  );
  await refuses(
    "refuses to read /etc/passwd via node:fs",
    'import { readFileSync } from "node:fs";\nreturn readFileSync("/etc/passwd", "utf8");',
    { type: "PermissionError", message: /Requires read access to "\/etc\/passwd"/ },
  );
  // File imports named in the code are refused before the run; the child's read permission
  // refuses the ones the code computes.
  await refuses(
    "refuses to read /etc/passwd via a static text import",
    'import text from "file:///etc/passwd" with { type: "text" };\nreturn text;',
    { type: "ImportNotAllowedError", message: /"file:\/\/\/etc\/passwd" is a file/ },
  );
  await refuses(
    "refuses to read /etc/passwd via a static text import of the bare path",
    'import text from "/etc/passwd" with { type: "text" };\nreturn text;',
    { type: "ImportNotAllowedError", message: /"\/etc\/passwd" is a file/ },
  );
  await refuses(
    "refuses to read /etc/passwd via a literal dynamic import",
    'const m = await import("file:///etc/passwd", { with: { type: "text" } });\nreturn m.default;',
    { type: "ImportNotAllowedError", message: /"file:\/\/\/etc\/passwd" is a file/ },
  );
  // A data: module is allowed, and its own static imports are the child's to check.
  await refuses(
    "refuses to read /etc/passwd via a static import inside an imported data: module",
    "import text from \"data:text/javascript,import t from 'file:///etc/passwd' with { type: 'text' }; export default t;\";\nreturn text;",
    { message: /Requires read access to "\/etc\/passwd"/ },
  );
  // The user module is a data: URL, against which an absolute path does not resolve; if the
  // code were ever loaded from a file: URL instead, the read check must refuse it.
  await refuses(
    "refuses to read /etc/passwd via a computed import of the bare path",
    'const path = ["", "etc", "passwd"].join("/");\n' +
      'return (await import(path, { with: { type: "text" } })).default;',
    { message: /Requires read access to "\/etc\/passwd"|invalid URL|Relative import path/ },
  );
  await refuses(
    "refuses to read /etc/passwd via a computed dynamic import",
    'const url = ["file://", "/etc/", "passwd"].join("");\n' +
      'return (await import(url, { with: { type: "text" } })).default;',
    { message: /Requires read access to "\/etc\/passwd"/ },
  );
  await refuses(
    "refuses to read /etc/passwd via fetch of a file: URL",
    'return await (await fetch("file:///etc/passwd")).text();',
    { type: "PermissionError", message: /Requires read access to "\/etc\/passwd"/ },
  );
  await refuses(
    "refuses to hard-link /etc/passwd into the workspace",
    'await Deno.link("/etc/passwd", "passwd");\nreturn await Deno.readTextFile("passwd");',
    { type: "PermissionError", message: /Requires read access to "\/etc\/passwd"/ },
  );
  await refuses(
    "refuses to list the directory around the workspace",
    'return [...Deno.readDirSync("..")].map((entry) => entry.name);',
    { type: "PermissionError", message: /Requires read access to "\.\."/ },
  );
  await refuses(
    "refuses Deno.env.get",
    'return Deno.env.get("HOME");',
    { type: "PermissionError", message: /Requires env access to "HOME"/ },
  );
  await refuses(
    "refuses Deno.env.toObject",
    "return Deno.env.toObject();",
    { type: "PermissionError", message: /Requires env access/ },
  );
  // With a cleared environment there is no PATH, so Deno cannot resolve "id" before it checks
  // the run permission; the absolute-path variant below shows the permission check itself.
  await refuses(
    "refuses new Deno.Command by name",
    'return (await new Deno.Command("id").output()).code;',
    { type: /^(PermissionError|NotFound)$/, message: /Requires run access|Failed to spawn 'id'/ },
  );
  await refuses(
    "refuses new Deno.Command of the deno executable by absolute path",
    `const out = await new Deno.Command(${
      JSON.stringify(Deno.execPath())
    }, { args: ["eval", "console.log(1)"] }).output();\nreturn out.code;`,
    { type: "PermissionError", message: /Requires run access/ },
  );
  await refuses(
    "refuses node:child_process",
    'import { execSync } from "node:child_process";\nreturn String(execSync("id"));',
    { type: "PermissionError", message: /Requires (run|env) access/ },
  );
  await refuses(
    "refuses to kill the host process",
    'Deno.kill(Deno.ppid, "SIGKILL");\nreturn "killed";',
    { type: "PermissionError", message: /Requires run access/ },
  );
  const port = new URL(target.url).port;
  await refuses(
    "refuses fetch to a loopback server",
    `return await (await fetch("${target.url}/")).text();`,
    {
      type: "PermissionError",
      message: new RegExp(`Requires net access to "127\\.0\\.0\\.1:${port}"`),
    },
  );
  await refuses(
    "refuses a raw TCP connection to a loopback server",
    `const conn = await Deno.connect({ hostname: "127.0.0.1", port: ${port} });\nconn.close();`,
    { type: "PermissionError", message: /Requires net access/ },
  );
  await refuses(
    "refuses fetch to the cloud metadata address",
    'return await (await fetch("http://169.254.169.254/latest/meta-data/")).text();',
    { type: "PermissionError", message: /Requires net access to "169\.254\.169\.254:80"/ },
  );
  await refuses(
    "refuses to listen on a port",
    "const listener = Deno.listen({ port: 0 });\nlistener.close();",
    { type: "PermissionError", message: /Requires net access/ },
  );
  await t.step("the loopback target received no request", () => {
    assertEquals(target.requests, []);
  });

  await refuses(
    "refuses an npm: import before the run",
    'import isOdd from "npm:is-odd";\nreturn isOdd(3);',
    {
      type: "ImportNotAllowedError",
      message: /"npm:is-odd" is not one of the npm packages offered.*sandbox\.npmPackages is empty/,
    },
  );
  await refuses(
    "refuses a computed npm: import without contacting a registry",
    'const name = ["is", "odd"].join("-");\nreturn (await import(`npm:${name}`)).default(3);',
    { message: /npm specifiers were requested.*--no-npm/ },
    {
      after: async () => {
        // The host process itself inherits NPM_CONFIG_REGISTRY and may refresh the metadata of
        // its own dependencies in the background; anything else would come from the sandbox.
        const own = await hostPackages();
        const asked = registry.requests.map((path) => decodeURIComponent(path.slice(1)));
        assertEquals(asked.filter((name) => !own.has(name)), []);
      },
    },
  );
  await refuses(
    "refuses an https: import before the run",
    'import x from "https://example.com/x.ts";\nreturn x;',
    {
      type: "ImportNotAllowedError",
      message: /"https:\/\/example\.com\/x\.ts" is a remote module/,
    },
  );
  await refuses(
    "refuses a jsr: import before the run",
    'import { join } from "jsr:@std/path@1";\nreturn join("a", "b");',
    { type: "ImportNotAllowedError", message: /"jsr:@std\/path@1" is a JSR module/ },
  );
  await refuses(
    "refuses a computed https: import",
    'const url = ["https:", "", "example.com", "x.ts"].join("/");\nreturn (await import(url)).default;',
    { message: /remote specifier was requested.*--no-remote/ },
  );
  await refuses(
    "refuses a computed http: import from a loopback server",
    `const url = [${
      JSON.stringify(target.url)
    }, "x.ts"].join("/");\nreturn (await import(url)).default;`,
    { message: /remote specifier was requested.*--no-remote/ },
    { after: () => assertEquals(target.requests, []) },
  );
  await refuses(
    "refuses Deno.dlopen",
    'return String(Deno.dlopen("libc.so.6", {}));',
    { type: "PermissionError", message: /Requires ffi access/ },
  );
  const planted = `${outside}/planted.txt`;
  await refuses(
    "refuses to write outside the workspace",
    `await Deno.writeTextFile(${JSON.stringify(planted)}, "planted");\nreturn "written";`,
    { type: "PermissionError", message: /Requires write access/ },
    { after: async () => assert(!(await exists(planted)), `${planted} was written`) },
  );
  await refuses(
    "refuses to create a symlink to /",
    'await Deno.symlink("/", "root");\nreturn await Deno.readTextFile("root/etc/passwd");',
    { type: "PermissionError", message: /Deno\.symlink\(\) requires|Requires (read|write) access/ },
  );
  await refuses(
    "refuses to change directory to /",
    'Deno.chdir("/");\nreturn Deno.readTextFileSync("etc/passwd");',
    { type: "PermissionError", message: /Requires read access to "\/"/ },
  );
  // Deno would end the whole child when code asks for Worker permissions without
  // --unstable-worker-options; the runner refuses the option first with a TypeError the code can
  // catch. Either way the worker never reads the file.
  await refuses(
    "refuses a Worker that asks for more permissions",
    [
      'const source = "postMessage(await Deno.readTextFile(\\"/etc/passwd\\"))";',
      'const worker = new Worker("data:text/javascript," + encodeURIComponent(source), {',
      '  type: "module",',
      "  deno: { permissions: { read: true } },",
      "});",
      "return await new Promise((resolve, reject) => {",
      "  worker.onmessage = (event) => { worker.terminate(); resolve(event.data); };",
      "  worker.onerror = (event) => { worker.terminate(); reject(new Error(event.message)); };",
      "});",
    ].join("\n"),
    { type: "TypeError", message: /Cannot create a Worker with deno\.permissions/ },
  );
  await refuses(
    "reports Deno.exit(0) before any output as SandboxExit",
    "Deno.exit(0);",
    { type: "SandboxExit", message: /Deno\.exit\(0\) was called before the code finished/ },
  );
  await refuses(
    "reports process.exit from node:process as an exit",
    'import process from "node:process";\nprocess.exit(0);',
    { type: /^(SandboxExit|SandboxCrash)$/, message: /exit|exited/ },
  );

  await t.step("kills a busy loop at timeoutMs", async () => {
    // The limit's own error: nothing else ends an endless loop, which would hang the test.
    const result = await server.runTs("while (true) {}", { timeoutMs: 1_000 });
    assertRefused(result, { type: "TimeoutError", message: /timed out after 1000 ms/ });
    await assertServing(server);
  });
  await refuses(
    "kills a 1 GiB ArrayBuffer that is touched",
    "const bytes = new Uint8Array(2 ** 30).fill(1);\nreturn bytes.length;",
    { type: "MemoryLimitError", message: /Memory limit exceeded/ },
  );
  await refuses(
    "stops a 50 MB print loop at the output cap",
    'const line = "x".repeat(999);\nfor (let i = 0; i < 50_000; i++) console.log(line);\nreturn 1;',
    { type: "OutputLimitError", message: /Output limit exceeded: stdout/ },
    {
      after: (result) => {
        assertEquals(result.truncated, true);
        // What reaches the model is a preview of limits.previewChars (20,000 by default).
        const chars = result.stdout.length;
        assert(chars <= 20_000 && chars > 19_000, `stdout shows ${chars} characters`);
      },
    },
  );
  await refuses(
    "stops a 50 MB raw stderr flood at the output cap",
    'const chunk = new TextEncoder().encode("e".repeat(1 << 20));\n' +
      "for (let i = 0; i < 50; i++) Deno.stderr.writeSync(chunk);\nreturn 1;",
    { type: "OutputLimitError", message: /Output limit exceeded: stderr/ },
    {
      after: (result) => {
        assertEquals(result.truncated, true);
        assert(result.stderr.length <= 100 * 1024, `stderr kept ${result.stderr.length}`);
      },
    },
  );

  const forgedLines = forgedJsonRpcLines(FORGED).join("\n") + "\n";
  await refuses(
    "refuses forged JSON-RPC messages written to stdout",
    `Deno.stdout.writeSync(new TextEncoder().encode(${
      JSON.stringify(forgedLines)
    }));\nreturn "${FORGED}";`,
    { type: "SandboxProtocolError", message: /raw bytes/ },
  );
  await t.step("the client never sees a forged message", async () => {
    const result = await server.runTs('return "own-" + 6 * 7;');
    assertEquals(result.isError, false, describe(result));
    assertEquals(result.returnValue, "own-42");
    const seen = inbound.filter((message) => JSON.stringify(message).includes(FORGED));
    assertEquals(seen, []);
    assertEquals(clientErrors.filter((message) => message.includes(FORGED)), []);
  });
  await refuses(
    "refuses a runner frame without the nonce",
    `Deno.stdout.writeSync(new TextEncoder().encode(${
      JSON.stringify(JSON.stringify({ t: "result", ok: true, value: FORGED }) + "\n")
    }));\nreturn 1;`,
    { type: "SandboxProtocolError", message: /raw bytes/ },
  );
  await refuses(
    "refuses 50 MB written to stdout without a newline",
    "Deno.stdout.writeSync(new Uint8Array(50 * 1024 * 1024).fill(65));\nreturn 1;",
    { type: "SandboxProtocolError", message: /frame larger than/ },
  );
  // The runner must not hand its frame bytes to anything user code can patch. (The nonce is no
  // secret, see forged_frames_test.ts; these check that patched prototypes see no frame.)
  await refuses(
    "refuses a runner frame forged with a nonce read through Uint8Array.prototype.subarray",
    [
      "const original = Uint8Array.prototype.subarray;",
      'let seen = "";',
      "Uint8Array.prototype.subarray = function (...args) {",
      "  seen ||= new TextDecoder().decode(this);",
      "  return original.apply(this, args);",
      "};",
      'console.log("hello");',
      "Uint8Array.prototype.subarray = original;",
      'const nonce = seen.split(" ")[0];',
      `const frame = { t: "result", ok: true, value: "${FORGED}" };`,
      "Deno.stdout.writeSync(new TextEncoder().encode(`${nonce} ${JSON.stringify(frame)}\\n`));",
      'return "own";',
    ].join("\n"),
    { type: "SandboxProtocolError", message: /raw bytes/ },
  );
  await refuses(
    "refuses a runner frame forged with a nonce read through the TypedArray length getter",
    [
      "const proto = Object.getPrototypeOf(Uint8Array.prototype);",
      'const length = Object.getOwnPropertyDescriptor(proto, "length");',
      'let seen = "";',
      'Object.defineProperty(proto, "length", {',
      "  configurable: true,",
      "  get() {",
      "    if (!seen && this.byteLength > 0) seen = new TextDecoder().decode(this);",
      "    return length.get.call(this);",
      "  },",
      "});",
      'console.log("hello");',
      'Object.defineProperty(proto, "length", length);',
      'const nonce = seen.split(" ")[0];',
      `const frame = { t: "result", ok: true, value: "${FORGED}" };`,
      "Deno.stdout.writeSync(new TextEncoder().encode(`${nonce} ${JSON.stringify(frame)}\\n`));",
      'return "own";',
    ].join("\n"),
    { type: "SandboxProtocolError", message: /raw bytes/ },
  );
  await refuses(
    "keeps Deno.exit a SandboxExit when Object.prototype.toJSON rewrites frames",
    [
      'Object.defineProperty(Object.prototype, "toJSON", {',
      "  configurable: true,",
      `  value: () => ({ t: "result", ok: true, value: "${FORGED}" }),`,
      "});",
      "Deno.exit(3);",
    ].join("\n"),
    { type: "SandboxExit", message: /Deno\.exit\(3\) was called/ },
  );

  await t.step("leaves only the warm pool's idle children between runs", async () => {
    const settled = await eventually(async () => {
      const dirs = await sandboxDirs(server.tempDir);
      const pids = await sandboxPids(server.tempDir);
      return dirs.length === WARM_POOL && pids.length === WARM_POOL;
    });
    const dirs = await sandboxDirs(server.tempDir);
    const pids = await sandboxPids(server.tempDir);
    assert(settled, `expected ${WARM_POOL} idle children, found dirs ${dirs} and pids ${pids}`);
    for (const pid of pids) {
      const line = await cmdline(pid);
      assert(dirs.some((dir) => line.includes(dir)), `sandbox ${pid} has no directory: ${line}`);
    }
  });

  await t.step("removes every sandbox process and directory on shutdown", async () => {
    await server.client.close();
    await assertNoSandboxes(server.tempDir);
  });
}
