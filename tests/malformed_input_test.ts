/**
 * Malformed MCP input over raw stdio: wrong argument types, oversized code and lines, NUL bytes,
 * invalid UTF-8, lines that are not JSON or not JSON-RPC, and a thousand requests sent without
 * waiting. Each must get a JSON-RPC error or a tool error, and the server must keep serving.
 *
 * The server is driven byte by byte (`deno run -A main.ts serve` with pipes), not through an SDK
 * client, which would refuse to send most of this.
 *
 * @module
 */
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { writeSettings } from "./_env.ts";
import { assertNoSandboxes, exitOrKill } from "./_proc.ts";
import { type RawServe, spawnServe } from "./_stdio_server.ts";
import { initializeRequest } from "./_client.ts";

const MiB = 1024 * 1024;
const encoder = new TextEncoder();

type Message = Record<string, unknown> & {
  id?: unknown;
  result?: Record<string, unknown>;
  error?: { code: number; message: string; data?: unknown };
};

/** A `main.ts serve` process spoken to in raw bytes. */
class RawServer {
  readonly tempDir: string;
  readonly #child: Deno.ChildProcess;
  readonly #writer: WritableStreamDefaultWriter<Uint8Array>;
  readonly #stderr: Promise<string>;
  readonly #pump: Promise<void>;
  readonly #waiters = new Set<() => void>();
  /** Every message the server wrote, in order. */
  readonly messages: Message[] = [];
  /** Lines on stdout that were not JSON (there must be none). */
  readonly notJson: string[] = [];
  #nextId = 1;
  #status: Deno.CommandStatus | undefined;

  private constructor(tempDir: string, serve: RawServe) {
    this.tempDir = tempDir;
    this.#child = serve.child;
    this.#writer = serve.writer;
    this.#stderr = serve.stderr;
    this.#pump = this.#read();
    serve.child.status.then((status) => this.#status = status);
  }

  /**
   * Starts a server with a private temp directory and HOME, and does the `initialize`
   * handshake by hand.
   */
  static async start(settings?: Record<string, unknown>): Promise<RawServer> {
    const tempDir = await Deno.makeTempDir({ prefix: "ce-raw-" });
    const env: Record<string, string> = {};
    if (settings) env.CODE_EXECUTOR_CONFIG = await writeSettings(tempDir, settings);
    const server = new RawServer(
      tempDir,
      spawnServe(tempDir, { home: tempDir, sharedCache: true, env }),
    );
    const { params } = initializeRequest("raw");
    const init = await server.request("initialize", params);
    if (!init.result) {
      await server.close();
      throw new Error(`initialize failed: ${JSON.stringify(init)}`);
    }
    await server.send({ jsonrpc: "2.0", method: "notifications/initialized" });
    return server;
  }

  async #read(): Promise<void> {
    let held = new Uint8Array(0);
    for await (const chunk of this.#child.stdout) {
      const joined = new Uint8Array(held.length + chunk.length);
      joined.set(held);
      joined.set(chunk, held.length);
      let start = 0;
      for (let at = joined.indexOf(10); at >= 0; at = joined.indexOf(10, start)) {
        const line = new TextDecoder().decode(joined.subarray(start, at));
        start = at + 1;
        try {
          this.messages.push(JSON.parse(line));
        } catch {
          this.notJson.push(line.slice(0, 200));
        }
      }
      held = joined.slice(start);
      for (const wake of this.#waiters) wake();
    }
    if (held.length > 0) this.notJson.push(new TextDecoder().decode(held).slice(0, 200));
    for (const wake of this.#waiters) wake();
  }

  /** Whether the process has exited. */
  get exited(): boolean {
    return this.#status !== undefined;
  }

  /** Writes bytes to the server's stdin as they are. */
  async write(bytes: string | Uint8Array): Promise<void> {
    await this.#writer.write(typeof bytes === "string" ? encoder.encode(bytes) : bytes);
  }

  /** Writes one message as a JSON line. */
  async send(message: unknown): Promise<void> {
    await this.write(JSON.stringify(message) + "\n");
  }

  /** A fresh request id. */
  id(): number {
    return this.#nextId++;
  }

  /** Sends a request and waits for its response. */
  async request(method: string, params?: unknown, timeoutMs = 30_000): Promise<Message> {
    const id = this.id();
    await this.send({ jsonrpc: "2.0", id, method, ...(params === undefined ? {} : { params }) });
    return await this.response(id, timeoutMs);
  }

  /** Calls a tool and waits for its response. */
  callTool(name: string, args: unknown, timeoutMs?: number): Promise<Message> {
    return this.request("tools/call", { name, arguments: args }, timeoutMs);
  }

  /** The responses (results and errors) that carry this id. */
  responsesTo(id: unknown): Message[] {
    return this.messages.filter((m) => m.id === id && ("result" in m || "error" in m));
  }

  /** Waits until `check` holds over the messages so far, or the time is up. */
  async until(check: () => boolean, timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (!check()) {
      if (this.exited || Date.now() > deadline) return check();
      let timer: ReturnType<typeof setTimeout> | undefined;
      let wake: () => void = () => {};
      await new Promise<void>((resolve) => {
        wake = resolve;
        this.#waiters.add(wake);
        timer = setTimeout(resolve, Math.min(200, Math.max(0, deadline - Date.now())));
      });
      clearTimeout(timer);
      this.#waiters.delete(wake);
    }
    return true;
  }

  /** Waits for the response to a request. */
  async response(id: unknown, timeoutMs = 30_000): Promise<Message> {
    await this.until(() => this.responsesTo(id).length > 0, timeoutMs);
    const found = this.responsesTo(id)[0];
    if (!found) {
      throw new Error(
        `No response to ${JSON.stringify(id)} within ${timeoutMs} ms (server ${
          this.exited ? `exited: ${JSON.stringify(this.#status)}` : "running"
        })\n${(await this.#stderrIfExited()).slice(-2000)}`,
      );
    }
    return found;
  }

  async #stderrIfExited(): Promise<string> {
    return this.exited ? await this.#stderr : "";
  }

  /** Checks that the server still answers a request and a run. */
  async assertServing(): Promise<void> {
    if (this.exited) throw new Error(`The server exited:\n${await this.#stderr}`);
    const list = await this.request("tools/list");
    const names = (list.result?.tools as Array<{ name: string }> | undefined)?.map((t) => t.name);
    assertEquals(names?.includes("run_typescript"), true, JSON.stringify(list));
    const run = await this.callTool("run_typescript", { code: "return 40 + 2" });
    assertEquals(structured(run).returnValue, 42, JSON.stringify(run));
  }

  /**
   * Closes stdin like a client that is done, waits for the server to exit, and checks that it
   * left no sandbox process or directory behind and wrote nothing but JSON on stdout.
   */
  async close(): Promise<{ status: Deno.CommandStatus; stderr: string }> {
    await this.#writer.close().catch(() => {});
    const exited = await exitOrKill(this.#child) !== undefined;
    const status = await this.#child.status;
    await this.#pump;
    const stderr = await this.#stderr;
    try {
      assert(exited, `the server did not exit at end of input:\n${stderr}`);
      await assertNoSandboxes(this.tempDir);
      assertEquals(this.notJson, [], "the server wrote lines that are not JSON to stdout");
    } finally {
      await Deno.remove(this.tempDir, { recursive: true });
    }
    return { status, stderr };
  }
}

/** Runs `fn` against a fresh {@linkcode RawServer}, then closes it and checks that it exited 0. */
async function withRawServer(fn: (server: RawServer) => Promise<void>): Promise<void> {
  const server = await RawServer.start();
  try {
    await fn(server);
  } finally {
    const { status, stderr } = await server.close();
    assertEquals(status.code, 0, stderr);
  }
}

function structured(message: Message): Record<string, unknown> {
  return (message.result?.structuredContent ?? {}) as Record<string, unknown>;
}

/** The text of a response: a JSON-RPC error's message or a tool result's text. */
function errorText(message: Message): string {
  if (message.error) return message.error.message;
  const content = (message.result?.content ?? []) as Array<{ text?: string }>;
  return content.map((block) => block.text ?? "").join("\n");
}

/** Asserts a JSON-RPC error, or a tool result with `isError`, whose text matches. */
function assertRefused(message: Message, pattern: RegExp): void {
  const context = JSON.stringify(message).slice(0, 1000);
  assert(
    message.error !== undefined || message.result?.isError === true,
    `expected an error, got ${context}`,
  );
  assertMatch(errorText(message), pattern, context);
}

/** Sends raw bytes that end with a request line, and returns that request's id. */
async function rawRequest(server: RawServer, before: string | Uint8Array): Promise<number> {
  await server.write(before);
  const id = server.id();
  await server.send({ jsonrpc: "2.0", id, method: "tools/list" });
  return id;
}

/** The JSON-RPC parse errors (no id, or a null id) the server has sent. */
function parseErrors(server: RawServer): Message[] {
  return server.messages.filter((m) => m.error?.code === -32700 && m.id === null);
}

Deno.test("serve answers malformed tools/call arguments with errors and keeps serving", (t) =>
  withRawServer(async (server) => {
    const cases: Array<[string, Record<string, unknown>, RegExp]> = [
      ["code as a number", { code: 42 }, /\bcode\b/],
      ["timeoutMs as a string", { code: "return 1", timeoutMs: "soon" }, /\btimeoutMs\b/],
      ["allowedTools as a string", { code: "return 1", allowedTools: "x" }, /\ballowedTools\b/],
      ["a missing code", { timeoutMs: 1000 }, /\bcode\b/],
      ["an unknown argument", { code: "return 1", colour: "blue" }, /\bcolour\b/],
      ["permissions as an array", { code: "return 1", permissions: ["net"] }, /\bpermissions\b/],
      ["a negative timeoutMs", { code: "return 1", timeoutMs: -5 }, /\btimeoutMs\b/],
    ];
    for (const [name, args, pattern] of cases) {
      await t.step(`refuses ${name}`, async () => {
        assertRefused(await server.callTool("run_typescript", args), pattern);
        await server.assertServing();
      });
    }

    await t.step("refuses arguments that are not an object", async () => {
      for (const args of ["code", [1, 2], 42, null]) {
        const response = await server.callTool("run_typescript", args);
        assertRefused(response, /argument|code|object|expected/i);
      }
      await server.assertServing();
    });

    await t.step("refuses an unknown tool, naming it", async () => {
      assertRefused(await server.callTool("no_such_tool", { code: "return 1" }), /no_such_tool/);
      assertRefused(await server.callTool("", {}), /tool/i);
      await server.assertServing();
    });

    await t.step("runs code with JSON-escaped NUL characters in strings", async () => {
      const response = await server.callTool("run_typescript", {
        code: 'const s = "a\u0000b";\nconsole.log(s);\nreturn [s.length, s.charCodeAt(1)];',
      });
      assertEquals(structured(response).returnValue, [3, 0], JSON.stringify(response));
      assertEquals(structured(response).stdout, "a\u0000b\n");
      await server.assertServing();
    });

    await t.step("reports a NUL character outside a string as a syntax error", async () => {
      const response = await server.callTool("run_typescript", { code: "return 1\u0000+ 2" });
      assertRefused(response, /SyntaxError|Invalid character|Unexpected/i);
      await server.assertServing();
    });

    await t.step("refuses code over limits.maxCodeBytes, naming the setting", async () => {
      const response = await server.callTool("run_typescript", {
        code: `// ${"x".repeat(1.5 * MiB)}\nreturn 1`,
      });
      assertRefused(
        response,
        /^\[error\] CodeTooLarge: Code is \d+ bytes, more than limits\.maxCodeBytes \(1048576\)/m,
      );
      await server.assertServing();
    });
  }));

Deno.test("serve answers lines that are not JSON-RPC with JSON-RPC errors and keeps serving", (t) =>
  withRawServer(async (server) => {
    const notJson: Array<[string, string | Uint8Array]> = [
      ["a line that is not JSON", "hello, server\n"],
      ["raw NUL bytes", new Uint8Array([0, 0, 0, 10])],
      [
        "a JSON line with a raw NUL inside a string",
        '{"jsonrpc":"2.0","id":"nul","method":"\0"}\n',
      ],
      ["half a JSON object", '{"jsonrpc":"2.0","id":\n'],
      ["invalid UTF-8 bytes", new Uint8Array([0xff, 0xfe, 0xc3, 0x28, 0x80, 10])],
    ];
    for (const [name, bytes] of notJson) {
      await t.step(`answers ${name} with a parse error`, async () => {
        const before = parseErrors(server).length;
        const id = await rawRequest(server, bytes);
        await server.response(id);
        assertEquals(
          parseErrors(server).length,
          before + 1,
          `no -32700 parse error for ${JSON.stringify(bytes)}`,
        );
        await server.assertServing();
      });
    }

    await t.step("runs code whose JSON line has invalid UTF-8 inside a string", async () => {
      const id = server.id();
      const head = encoder.encode(
        `{"jsonrpc":"2.0","id":${id},"method":"tools/call","params":{"name":"run_typescript","arguments":{"code":"return '`,
      );
      const tail = encoder.encode(`'.length"}}}\n`);
      await server.write(new Uint8Array([...head, 0xff, 0xc3, 0x28, ...tail]));
      const response = await server.response(id);
      // Invalid bytes are either refused or read as U+FFFD; the request is answered either way.
      assertEquals(server.responsesTo(id).length, 1);
      if (!response.error) assert(response.result, JSON.stringify(response));
      await server.assertServing();
    });

    const invalid: Array<[string, unknown, unknown]> = [
      ["a request whose method is not a string", { jsonrpc: "2.0", id: "m", method: 42 }, "m"],
      ["a request without jsonrpc", { id: "v", method: "tools/list" }, "v"],
      ["a request with an object id", { jsonrpc: "2.0", id: { a: 1 }, method: "tools/list" }, null],
    ];
    for (const [name, message, id] of invalid) {
      await t.step(`answers ${name} with an invalid-request error`, async () => {
        const probe = await rawRequest(server, JSON.stringify(message) + "\n");
        await server.response(probe);
        const errors = server.messages.filter((m) =>
          // JSON-RPC 2.0: an id that cannot be told is answered with "id": null, not left out.
          m.error?.code === -32600 && m.id === id
        );
        assertEquals(errors.length, 1, `no -32600 error with id ${JSON.stringify(id)}`);
        await server.assertServing();
      });
    }

    await t.step(
      "answers JSON that is not a message with errors, and skips blank lines",
      async () => {
        const invalidRequests = () =>
          server.messages.filter((m) => m.error?.code === -32600 && m.id === null).length;
        const before = invalidRequests();
        const id = await rawRequest(server, '{"hello":"world"}\n[]\n42\n\n\r\n   \n');
        assertEquals((await server.response(id)).id, id);
        assertEquals(invalidRequests(), before + 3, "JSON that is not a message went unanswered");
        await server.assertServing();
      },
    );

    await t.step("answers an unknown method with method-not-found", async () => {
      const response = await server.request("no/such/method", {});
      assertEquals(response.error?.code, -32601, JSON.stringify(response));
      await server.assertServing();
    });
  }));

Deno.test("serve refuses 10 MB of code in one line and keeps serving", () =>
  withRawServer(async (server) => {
    const id = server.id();
    await server.send({
      jsonrpc: "2.0",
      id,
      method: "tools/call",
      params: {
        name: "run_typescript",
        arguments: { code: `// ${"x".repeat(10 * MiB)}\nreturn 1` },
      },
    });
    const response = await server.response(id, 30_000);
    assertRefused(response, /limits\.maxCodeBytes/);
    await server.assertServing();
  }));

Deno.test("serve answers 20 MB without a newline with an error and keeps serving", () =>
  withRawServer(async (server) => {
    const before = server.messages.length;
    // In pieces, so that a server that stops reading does not block this test's write.
    const piece = "y".repeat(MiB);
    for (let i = 0; i < 20 && !server.exited; i++) {
      await server.write(piece).catch(() => {});
    }
    const id = await rawRequest(server, "\n").catch(() => -1);
    assert(id > 0, "the server stopped reading its input");
    await server.response(id, 30_000);
    assert(
      server.messages.slice(before).some((m) => m.error && (m.id ?? null) === null),
      "no error for the oversized line",
    );
    await server.assertServing();
  }));

Deno.test("serve answers 1,000 requests sent without waiting, each exactly once", () =>
  withRawServer(async (server) => {
    const runs = new Map<number, number>();
    const unknownTools = new Set<number>();
    const lines: string[] = [];
    const ids: number[] = [];
    for (let i = 0; i < 1000; i++) {
      const id = server.id();
      ids.push(id);
      let message: Record<string, unknown> = { jsonrpc: "2.0", id, method: "tools/list" };
      const call = (name: string, args: Record<string, unknown>) =>
        message = { ...message, method: "tools/call", params: { name, arguments: args } };
      if (i % 100 === 0) {
        runs.set(id, i);
        call("run_typescript", { code: `return ${i}` });
      } else if (i % 10 === 0) {
        call("search_tools", { query: `q${i}` });
      } else if (i % 3 !== 1) {
        unknownTools.add(id);
        call(`no_such_tool_${i}`, {});
      }
      lines.push(JSON.stringify(message));
    }
    await server.write(lines.join("\n") + "\n");
    const all = await server.until(
      () => ids.every((id) => server.responsesTo(id).length > 0),
      60_000,
    );
    const missing = ids.filter((id) => server.responsesTo(id).length === 0);
    assert(all, `${missing.length} requests were not answered, e.g. ${missing.slice(0, 5)}`);
    // Let any duplicate arrive before counting.
    await new Promise((resolve) => setTimeout(resolve, 300));
    const twice = ids.filter((id) => server.responsesTo(id).length !== 1);
    assertEquals(twice, [], "requests answered more than once");
    const known = new Set<unknown>([...ids, 1]);
    const strays = server.messages.filter((m) =>
      ("result" in m || "error" in m) && !known.has(m.id)
    );
    assertEquals(strays, [], "responses to ids that were never sent");
    for (const [id, i] of runs) {
      const response = server.responsesTo(id)[0];
      assertEquals(structured(response).returnValue, i, JSON.stringify(response).slice(0, 500));
    }
    for (const id of unknownTools) assertRefused(server.responsesTo(id)[0], /no_such_tool_\d+/);
    await server.assertServing();
  }));
