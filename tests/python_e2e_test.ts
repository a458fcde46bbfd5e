/**
 * Acceptance tests of the Python executor through the real MCP server (`deno task start` over
 * stdio, driven by the SDK client): what `run_python` computes, how it reports errors, how it
 * calls upstream MCP servers, that nothing Python does reaches the MCP stream, that runaway code
 * is stopped and leaves the CPU idle, that runs are isolated unless they share a session, and
 * that `PYTHON_ENABLED=false` removes the tool.
 *
 * Every server gets a private HOME (no user configuration leaks in) but the real Deno and
 * code-executor caches, so that the npm servers and the Pyodide snapshot are not built again.
 *
 * @module
 */
import { join } from "node:path";
import {
  assert,
  assertEquals,
  assertFails,
  assertMatch,
  assertReturns as assertRuns,
  describeResult as describe,
  type RunResult,
} from "./_assert.ts";
import { EVERYTHING, MEMORY } from "./_pins.ts";
import { npmServer } from "./_env.ts";
import { eventually, sandboxPids, seenIdle } from "./_proc.ts";
import { withTempDir } from "./_fs.ts";
import { BASIC_PY_CASES } from "./_py_cases.ts";
import { closeAndCheck, type ServerHarness, startServer } from "./_stdio_server.ts";
import { forgedJsonRpcLines, recordInbound } from "./_client.ts";
import { DEFAULT_PYTHON_IMPORTS } from "../src/exec/python/child.ts";

/** Idle Python children the server keeps, so that most runs skip the ~1 s interpreter boot. */
const WARM_POOL = 2;
/** Marks every forged message, so that the client's inbound traffic can be searched for it. */
const FORGED = "FORGED-by-python-code";
const STDIN_MESSAGE =
  "stdin is not available in the sandbox: pass data in the code or through tools";
/** Reaches the worker's JavaScript globals through allowed modules, past the import hook. */
const JS = 'import random\njs = random._os.sys.modules["importlib"].import_module("js")\n';
/** The JavaScript Function constructor, reached through a JsProxy. */
const FUNCTION =
  'import random\nF = random._os.sys.modules["pyodide.ffi"].to_js([]).constructor.constructor\n';

/** Python runs print nothing unless a test says what. */
function assertReturns(result: RunResult, expected: unknown, stdout = ""): void {
  assertRuns(result, expected, { stdout });
}

async function assertServing(server: ServerHarness): Promise<void> {
  assertReturns(await server.runPy("2 + 2"), 4);
}

/** Python sandboxes of this server, found by their working directory inside its temp directory. */
function pythonPids(tempDir: string): Promise<number[]> {
  return sandboxPids(tempDir, ["py_host.ts"]);
}

/** The processes that {@linkcode seenIdle} never finds idle: each has a thread that spins. */
async function spinning(pids: number[]): Promise<number[]> {
  const idle = await Promise.all(pids.map((pid) => seenIdle(pid)));
  return pids.filter((_, i) => !idle[i]);
}

/**
 * Waits until the same sandbox processes are alive before and after a look at each, and every
 * one of them was seen idle.
 *
 * @returns The last look's pids, and those of them that spun.
 */
async function settleIdle(
  tempDir: string,
  timeoutMs: number,
): Promise<{ idle: boolean; pids: number[]; spinning: number[] }> {
  const deadline = Date.now() + timeoutMs;
  let last = { idle: false, pids: [] as number[], spinning: [] as number[] };
  do {
    const before = (await sandboxPids(tempDir)).sort((a, b) => a - b);
    const busy = await spinning(before);
    const after = (await sandboxPids(tempDir)).sort((a, b) => a - b);
    const idle = JSON.stringify(before) === JSON.stringify(after) && busy.length === 0;
    last = { idle, pids: after, spinning: busy };
    if (idle) return last;
  } while (Date.now() < deadline);
  return last;
}

/**
 * Python that binds `data` to the given text as bytes without the text appearing in the source,
 * so that a traceback that quotes the source cannot carry the marker to the client.
 */
function pythonBytes(text: string): string {
  // The messages are ASCII, which btoa takes as it is.
  const b64 = btoa(text);
  return `import base64\ndata = base64.b64decode("${b64}")\n`;
}

Deno.test("run_python computes, calls upstream tools, stays contained and isolated through the MCP server", async (t) => {
  await withTempDir("ce-python-home-", async (home) => {
    const server = await startServer({
      home,
      sharedCache: true,
      upstream: {
        everything: npmServer(EVERYTHING),
        memory: npmServer(MEMORY, { env: { MEMORY_FILE_PATH: join(home, "memory.jsonl") } }),
      },
      env: { CODE_EXECUTOR_PYTHON_WARM_POOL: String(WARM_POOL) },
      settings: {
        // A generous grace: the interrupt, not the kill after it, must stop the runaway code,
        // however loaded the machine (at 500 ms a loaded CI run once saw the kill first).
        python: {
          allowedImports: [...DEFAULT_PYTHON_IMPORTS, "sys", "builtins"],
          interruptGraceMs: 3_000,
        },
      },
    });
    try {
      await pythonSequence(t, server);
    } finally {
      await t.step("no sandbox process or directory outlives the server", async () => {
        await closeAndCheck(server);
      });
    }
  });
});

async function pythonSequence(t: Deno.TestContext, server: ServerHarness): Promise<void> {
  const { inbound, errors: clientErrors } = recordInbound(server.client);

  await t.step("tools/list offers run_python by default, between the other two", async () => {
    const { tools } = await server.client.listTools();
    assertEquals(tools.map((tool) => tool.name), ["run_typescript", "run_python", "search_tools"]);
    const run = tools.find((tool) => tool.name === "run_python");
    assertEquals(Object.keys(run?.inputSchema.properties ?? {}).sort(), [
      "allowedTools",
      "code",
      "permissions",
      "session",
      "timeoutMs",
    ]);
  });

  await t.step("returns the last expression and captures print()", async () => {
    const cases: Array<[string, unknown, string]> = [
      ...BASIC_PY_CASES,
      [
        "import asyncio\nasync def double(n):\n    await asyncio.sleep(0.01)\n    return n * 2\nawait double(21)",
        42,
        "",
      ],
    ];
    for (const [code, value, stdout] of cases) {
      assertReturns(await server.runPy(code), value, stdout);
    }
  });

  await t.step(
    "reports NameError, ZeroDivisionError and SyntaxError at the code's lines",
    async () => {
      const name = await server.runPy("a = 1\n\ndef f():\n    return missing\n\nf()");
      assertFails(name, "NameError", /^name 'missing' is not defined$/);
      const traceback = name.error?.traceback ?? "";
      assertMatch(traceback, /File "code\.py", line 6, in <module>/, describe(name));
      assertMatch(traceback, /File "code\.py", line 4, in f/, describe(name));
      assert(!/_pyodide|pyodide\/|<sandbox>/.test(traceback), traceback);

      const zero = await server.runPy("x = 1\ny = x / 0");
      assertFails(zero, "ZeroDivisionError", /division by zero/);
      assertMatch(zero.error?.traceback ?? "", /File "code\.py", line 2/, describe(zero));

      const syntax = await server.runPy("x = 1\ny = (x +\n");
      assertFails(syntax, "SyntaxError", /code\.py, line 2/);
    },
  );

  await t.step("refuses imports outside the allowlist with the list in the message", async () => {
    const os = await server.runPy("import os");
    assertFails(os, "ImportError", /^Import of os is not allowed: allowed imports are .*\bjson\b/);
  });

  await t.step("one program chains memory and everything tools", async () => {
    const result = await server.runPy(
      [
        "created = await tools.memory.create_entities(entities=[",
        '    {"name": "Ada", "entityType": "person", "observations": ["wrote the first program"]},',
        "])",
        "graph = await tools.memory.read_graph()",
        'total = await call_mcp_tool("mcp__everything__get-sum", {"a": 2, "b": 3})',
        'print("entities:", len(graph["entities"]))',
        "{",
        '    "created": [e["name"] for e in created["entities"]],',
        '    "graph": [[e["name"], e["entityType"], e["observations"]] for e in graph["entities"]],',
        '    "sum": total,',
        "}",
      ].join("\n"),
    );
    assertReturns(result, {
      created: ["Ada"],
      graph: [["Ada", "person", ["wrote the first program"]]],
      sum: "The sum of 2 and 3 is 5.",
    }, "entities: 1\n");
    assertEquals(
      result.toolCalls.map((call) => [call.name, call.ok]),
      [
        ["mcp__memory__create_entities", true],
        ["mcp__memory__read_graph", true],
        ["mcp__everything__get-sum", true],
      ],
      describe(result),
    );
    for (const call of result.toolCalls) assert(call.durationMs >= 0, describe(result));
  });

  await t.step("arguments that break the tool's schema raise ToolValidationError", async () => {
    const result = await server.runPy(
      [
        "try:",
        '    await call_mcp_tool("mcp__everything__get-sum", {"a": "two", "b": 3})',
        "except ToolCallError as error:",
        "    caught = [type(error).__name__, str(error)]",
        "caught",
      ].join("\n"),
    );
    assertEquals(result.isError, false, describe(result));
    const [type, message] = result.returnValue as [string, string];
    assertEquals(type, "ToolValidationError", describe(result));
    assertMatch(message, /number/, describe(result));
    assertEquals(result.toolCalls.map((call) => [call.name, call.ok]), [
      ["mcp__everything__get-sum", false],
    ]);
  });

  await t.step("input() and sys.stdin raise a clear OSError", async () => {
    for (
      const code of [
        "input('name? ')",
        "import sys\nsys.stdin.readline()",
        // What a user of the default import list can reach without importing sys.
        "import random\nrandom._os.sys.stdin.readline()",
      ]
    ) {
      const result = await server.runPy(code);
      assertFails(result, "OSError");
      assertEquals(result.error?.message, STDIN_MESSAGE, code);
    }
    await assertServing(server);
  });

  const forged = forgedJsonRpcLines(FORGED);
  const forgedSet = new Set(forged.map((line) => JSON.stringify(JSON.parse(line))));
  const payload = forged.join("\n") + "\n";
  const attempts: Array<[string, string, (result: RunResult) => void]> = [
    [
      "js.Deno.stdout.writeSync",
      `${pythonBytes(payload)}${JS}js.Deno.stdout.writeSync(js.Uint8Array.new(data))`,
      // The Worker writes its run's frames itself (issue 27), so the handle is open; a line
      // without the Worker's nonce is no frame.
      (result) => assertFails(result, "SandboxProtocolError"),
    ],
    [
      "node:fs writeSync(1, …)",
      `${pythonBytes(payload)}${FUNCTION}fs = await F('return import("node:fs")')()\n` +
      "fs.writeSync(1, data.decode())",
      (result) => assertFails(result, "SandboxProtocolError", /raw bytes|frame/i),
    ],
    [
      "node:fs writeSync(1, …) with a controller result frame",
      `${
        pythonBytes(JSON.stringify({ t: "result", ok: true, value: FORGED }) + "\n")
      }${FUNCTION}fs = await F('return import("node:fs")')()\nfs.writeSync(1, data.decode())`,
      (result) => assertFails(result, "SandboxProtocolError"),
    ],
  ];
  for (const [how, code, check] of attempts) {
    await t.step(`a JSON-RPC message forged with ${how} never reaches the client`, async () => {
      const result = await server.runPy(code);
      check(result);
      assert(!JSON.stringify(result).includes(FORGED), describe(result));
      await assertServing(server);
      const last = inbound.at(-1) as { result?: { structuredContent?: { returnValue?: unknown } } };
      assertEquals(last.result?.structuredContent?.returnValue, 4, "the hook missed a response");
      const seen = inbound.filter((message) =>
        forgedSet.has(JSON.stringify(message)) || JSON.stringify(message).includes(FORGED)
      );
      assertEquals(seen, []);
      assertEquals(clientErrors, []);
      const ids = inbound.filter((m) => "id" in m && !("method" in m)).map((m) => m.id);
      assertEquals(new Set(ids).size, ids.length, `a response id arrived twice: ${ids}`);
    });
  }

  await t.step("stops runaway code at timeoutMs and leaves the CPU idle", async () => {
    const poolFull = () =>
      eventually(async () => (await pythonPids(server.tempDir)).length === WARM_POOL, 15_000);
    const runaways: Array<[string, RegExp | undefined]> = [
      ["while True:\n    pass", /File "code\.py", line [12], in <module>/],
      ["sum(range(10**12))", undefined],
      ["import time\ntime.sleep(100)", /File "code\.py", line 2, in <module>/],
    ];
    for (const [code, traceback] of runaways) {
      // From a booted (idle) warm child, so that the limit stops the code, not an interpreter's
      // boot.
      assert(await poolFull(), `the warm pool holds ${await pythonPids(server.tempDir)}`);
      await settleIdle(server.tempDir, 15_000);
      let done = false;
      const running = server.runPy(code, { timeoutMs: 1_500 }).finally(() => done = true);
      let busy: number[] | undefined;
      const seen = new Set<number>();
      if (code.startsWith("while")) {
        // The probe must see the loop spin, or its "idle" below would mean nothing. It looks for
        // longer than the run lasts, so the children it looked at count as seen.
        await new Promise((resolve) => setTimeout(resolve, 200));
        const during = await pythonPids(server.tempDir);
        for (const pid of during) seen.add(pid);
        busy = await spinning(during);
      }
      while (!done) {
        for (const pid of await pythonPids(server.tempDir)) seen.add(pid);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      const result = await running;
      // The limit's own error; a traceback shows that the interrupt, not the kill, stopped it.
      assertFails(result, "TimeoutError", /timed out after 1500 ms/);
      if (traceback) assertMatch(result.error?.traceback ?? "", traceback, describe(result));
      if (busy !== undefined) assert(busy.length > 0, "the probe never saw the busy loop spin");
      // The child that ran the code is gone.
      const killed = await eventually(async () => {
        const alive = await pythonPids(server.tempDir);
        return [...seen].some((pid) => !alive.includes(pid));
      });
      assert(killed, `every child seen during the run outlived it: ${[...seen]}`);
    }

    // Only the warm pool's idle children may remain, and they must not be spinning.
    assert(await poolFull(), `Python children left: ${await pythonPids(server.tempDir)}`);
    const quiet = await settleIdle(server.tempDir, 15_000);
    assert(quiet.idle, `sandboxes ${quiet.pids}: ${quiet.spinning} never seen idle`);
    const left = await pythonPids(server.tempDir);
    assertEquals(left.length, WARM_POOL, `Python children left: ${left}`);
    await assertServing(server);
  });

  await t.step("a monkeypatch and a global of one run are gone in the next", async () => {
    const patched = await server.runPy(
      "import builtins\nbuiltins.len = lambda x: 42\nsecret = 1\nlen([])",
    );
    assertReturns(patched, 42);
    const next = await server.runPy("[len([1, 2]), 'secret' in globals()]");
    assertReturns(next, [2, false]);
  });

  await t.step("a session keeps its variables; two sessions do not share them", async () => {
    assertReturns(
      await server.runPy("x = 41\nprint('set')", { session: "a" }),
      undefined,
      "set\n",
    );
    assertReturns(await server.runPy("x + 1", { session: "a" }), 42);
    assertReturns(
      await server.runPy("y = 'b'\n'x' in globals()", { session: "b" }),
      false,
    );
    assertReturns(await server.runPy("[x, 'y' in globals()]", { session: "a" }), [41, false]);
    assertReturns(await server.runPy("y", { session: "b" }), "b");
    // Each session is its own interpreter process, next to the warm pool's.
    const sessions = await eventually(async () =>
      (await pythonPids(server.tempDir)).length >= WARM_POOL + 2
    );
    assert(sessions, `Python children: ${await pythonPids(server.tempDir)}`);
  });
}

Deno.test("PYTHON_ENABLED=false removes run_python and starts no Python sandbox", async () => {
  await withTempDir("ce-python-home-", async (home) => {
    const server = await startServer({
      home,
      sharedCache: true,
      env: {
        PYTHON_ENABLED: "false",
        CODE_EXECUTOR_PYTHON_WARM_POOL: String(WARM_POOL),
      },
    });
    try {
      const { tools } = await server.client.listTools();
      assertEquals(tools.map((tool) => tool.name), ["run_typescript", "search_tools"]);

      const ts = await server.runTs("return 6 * 7");
      assertEquals(ts.isError, false, JSON.stringify(ts));
      assertEquals(ts.returnValue, 42);

      let refused: unknown;
      const call = await server.client.callTool({ name: "run_python", arguments: { code: "1" } })
        .catch((error: Error) => {
          refused = error;
          return undefined;
        });
      assert(
        refused !== undefined || call?.isError === true,
        `run_python answered: ${JSON.stringify(call)}`,
      );
      assertEquals(await pythonPids(server.tempDir), []);
    } finally {
      await closeAndCheck(server);
    }
  });
});
