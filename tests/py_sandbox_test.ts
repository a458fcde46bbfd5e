import { join } from "node:path";
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { seenIdle, threadStates } from "./_proc.ts";
import { LIMITS, pyodideDir, withPyChild } from "./_pyodide.ts";
import { BASIC_PY_CASES } from "./_py_cases.ts";
import {
  DEFAULT_PYTHON_IMPORTS,
  type PyChildOptions,
  type PyRunLimits,
} from "../src/exec/python/child.ts";
import {
  findPyodideDir,
  isPyodideDir,
  PYODIDE_VERSION,
  pyodideCandidates,
} from "../src/exec/python/pyodide.ts";
import type { ExecutionResult } from "../src/exec/result.ts";

function runPy(
  code: string,
  limits: Partial<PyRunLimits> = {},
  options: Partial<PyChildOptions> = {},
): Promise<ExecutionResult> {
  return withPyChild(options, (child) => child.run(code, { ...LIMITS, ...limits }));
}

Deno.test({
  name:
    "findPyodideDir() finds the pinned package and pyodideCandidates() lists node_modules first",
  async fn() {
    assert(await isPyodideDir(pyodideDir!, PYODIDE_VERSION));
    assert(!(await isPyodideDir(pyodideDir!, "0.0.1")));
    const candidates = pyodideCandidates({ projectRoots: ["/p"], denoDir: "/d" });
    assertEquals(candidates, [
      `/p/node_modules/.deno/pyodide@${PYODIDE_VERSION}/node_modules/pyodide`,
      "/p/node_modules/pyodide",
      `/d/npm/registry.npmjs.org/pyodide/${PYODIDE_VERSION}`,
    ]);
  },
});

Deno.test("findPyodideDir() names the install command when the package is missing", async () => {
  const empty = await Deno.makeTempDir({ prefix: "ce-py-missing-" });
  try {
    let message = "";
    await findPyodideDir({ projectRoots: [empty], denoDir: empty }).catch((error) => {
      message = error.message;
    });
    assertMatch(message, /Cannot find the Pyodide package \(npm:pyodide@314\.0\.7\): run/);
  } finally {
    await Deno.remove(empty, { recursive: true });
  }
});

Deno.test({
  name: "PyChild boots from the memory snapshot",
  async fn() {
    await withPyChild({}, (child) => {
      assertEquals(child.boot?.fromSnapshot, true);
      assertEquals(child.boot?.snapshotError, undefined);
      return Promise.resolve();
    });
  },
});

Deno.test({
  name: "PyChild boots cold when the snapshot is unusable, and says why",
  async fn() {
    const broken = await Deno.makeTempFile({ prefix: "ce-py-snapshot-" });
    try {
      await Deno.writeFile(broken, new Uint8Array(4096).fill(7));
      const result = await withPyChild({ snapshotPath: broken }, (child) => {
        assertEquals(child.boot?.fromSnapshot, false);
        assertMatch(child.boot?.snapshotError ?? "", /magic number/);
        return child.run("6 * 7", LIMITS);
      });
      assertEquals(result.returnValue, 42);
    } finally {
      await Deno.remove(broken);
    }
  },
});

Deno.test({
  name: "PyChild.run() returns the last expression and captures print()",
  async fn() {
    const cases: Array<[string, unknown, string]> = [
      ...BASIC_PY_CASES,
      ['{"a": (1, 2), "b": {3}, "c": float("nan"), "d": None}', {
        a: [1, 2],
        b: [3],
        c: null,
        d: null,
      }, ""],
      ["import datetime\ndatetime.date(2020, 1, 2)", "datetime.date(2020, 1, 2)", ""],
      [
        "import asyncio\nasync def f(n):\n    await asyncio.sleep(0.01)\n    return n * 2\nawait f(21)",
        42,
        "",
      ],
    ];
    for (const [code, value, stdout] of cases) {
      const result = await runPy(code);
      assertEquals(result.ok, true, `${code}: ${JSON.stringify(result.error)}`);
      assertEquals(result.returnValue, value, code);
      assertEquals(result.stdout, stdout, code);
    }
  },
});

Deno.test({
  name: "PyChild.run() reports errors with tracebacks at the code's own lines",
  async fn() {
    const name = await runPy("a = 1\n\ndef f():\n    return missing\n\nf()");
    assertEquals(name.ok, false);
    assertEquals(name.error?.type, "NameError");
    assertEquals(name.error?.message, "name 'missing' is not defined");
    assertMatch(name.error?.traceback ?? "", /File "code\.py", line 6, in <module>/);
    assertMatch(name.error?.traceback ?? "", /File "code\.py", line 4, in f/);
    assert(!/_pyodide|pyodide\/|<sandbox>/.test(name.error?.traceback ?? ""));

    const zero = await runPy("x = 1\ny = x / 0");
    assertEquals(zero.error?.type, "ZeroDivisionError");
    assertMatch(zero.error?.traceback ?? "", /line 2/);

    const syntax = await runPy("x = 1\ny = (x +\n");
    assertEquals(syntax.error?.type, "SyntaxError");
    assertMatch(syntax.error?.message ?? "", /code\.py, line 2/);
  },
});

Deno.test({
  name: "PyChild.run() refuses imports outside the allowlist and never allows js",
  async fn() {
    const os = await runPy("import os");
    assertEquals(os.error?.type, "ImportError");
    assertMatch(
      os.error?.message ?? "",
      /^Import of os is not allowed: allowed imports are .*collections, .*datetime/,
    );
    for (
      const code of [
        "import js",
        "import pyodide_js",
        "from pyodide.ffi import to_js",
        "__import__('js')",
      ]
    ) {
      const result = await runPy(code, {}, { allowedImports: "*" });
      assertEquals(result.error?.type, "ImportError", code);
      assertMatch(result.error?.message ?? "", /is not allowed/, code);
    }
    const all = await runPy("import os\nos.sep", {}, { allowedImports: "*" });
    assertEquals(all.returnValue, "/");
    const indirect = await runPy("import json\njson.dumps({'a': 1})");
    assertEquals(indirect.returnValue, '{"a": 1}');
  },
});

Deno.test({
  name: "PyChild.run() makes stdin raise a clear error",
  async fn() {
    for (const code of ["input('name? ')", "import sys\nsys.stdin.readline()"]) {
      const result = await runPy(code, {}, { allowedImports: [...DEFAULT_PYTHON_IMPORTS, "sys"] });
      assertEquals(result.error?.type, "OSError", code);
      assertEquals(
        result.error?.message,
        "stdin is not available in the sandbox: pass data in the code or through tools",
      );
    }
  },
});

/** Reaches the worker's JavaScript globals through allowed modules, bypassing the import hook. */
const JS = 'import random\njs = random._os.sys.modules["importlib"].import_module("js")\n';
const FUNCTION =
  'import random\nF = random._os.sys.modules["pyodide.ffi"].to_js([]).constructor.constructor\n';

Deno.test({
  name: "PyChild: escapes through JavaScript are stopped by the process permissions",
  async fn() {
    const canary = join(await Deno.makeTempDir({ prefix: "ce-py-canary-" }), "written");
    let requests = 0;
    const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, () => {
      requests++;
      return new Response("reached");
    });
    try {
      const port = server.addr.port;
      const cases = [
        `${JS}js.Deno.readTextFileSync("/etc/passwd")`,
        `${FUNCTION}F('return Deno.readTextFileSync("/etc/passwd")')()`,
        `import random\nimportlib = random._os.sys.modules["importlib"]\nimportlib.import_module("js").Deno.readTextFileSync("/etc/passwd")`,
        `${JS}js.Deno.env.toObject()`,
        `${JS}js.Deno.Command.new("/usr/bin/id").outputSync()`,
        `${JS}js.Deno.writeTextFileSync(${JSON.stringify(canary)}, "x")`,
        `${JS}await js.fetch("http://127.0.0.1:${port}/")`,
        `${FUNCTION}await F('return fetch("http://127.0.0.1:${port}/")')()`,
        `${FUNCTION}await F('return import("npm:is-odd")')()`,
        `import random\nrun_js = random._os.sys.modules["pyodide.code"].run_js\nawait run_js('import("node:child_process").then(m => m.execSync("id"))')`,
      ];
      for (const code of cases) {
        const result = await runPy(code, { timeoutMs: 10_000 });
        assertEquals(result.ok, false, `${code} succeeded: ${JSON.stringify(result.returnValue)}`);
        assert(!/root:|uid=/.test(JSON.stringify(result)), code);
        assertMatch(
          `${result.error?.type}: ${result.error?.message}`,
          /NotCapable|PermissionDenied|Requires|not allowed|denied|unsupported scheme|npm/i,
          code,
        );
      }
      assertEquals(requests, 0, "the loopback server was reached");
      assert(!(await Deno.stat(canary).then(() => true, () => false)), "the canary was written");
    } finally {
      await server.shutdown();
      await Deno.remove(join(canary, ".."), { recursive: true });
    }
  },
});

Deno.test({
  name: "PyChild: what Python writes to the child's stdout itself fails its run",
  async fn() {
    // The Worker writes its run's frames itself (issue 27), so Python can reach the handle; a
    // line without the Worker's nonce is no frame.
    const direct = await runPy(`${JS}js.Deno.stdout.writeSync(js.Uint8Array.new(b"x\\n"))`);
    assertEquals(direct.ok, false);
    assertEquals(direct.error?.type, "SandboxProtocolError");
    const log = await runPy(`${JS}js.console.log("via console")\n1`);
    assertEquals(log.stdout, "via console\n");
    // Raw descriptor writes cannot be closed off inside the worker; without the nonce the host
    // rejects them.
    const raw = await runPy(
      `${FUNCTION}fs = await F('return import("node:fs")')()\nfs.writeSync(1, "forged\\n")`,
    );
    assertEquals(raw.ok, false);
    assertEquals(raw.error?.type, "SandboxProtocolError");
  },
});

Deno.test({
  name: "PyChild.run() stops runaway code by timeoutMs plus the grace period",
  async fn() {
    const cases: Array<[string, RegExp | undefined]> = [
      ["x = 0\nwhile True:\n    x += 1", /File "code\.py", line [23], in <module>/],
      ["sum(range(10**12))", undefined],
      [
        "while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass",
        undefined,
      ],
      ["import time\ntime.sleep(100)", /File "code\.py", line 2, in <module>\n {4}time\.sleep/],
      ["import asyncio\nawait asyncio.sleep(100)", /line 2/],
    ];
    for (const [code, traceback] of cases) {
      // Code that the interrupt stops gets a long grace, so that a loaded machine does not turn
      // its traceback into a kill; code that ignores the interrupt is killed after the default.
      const result = await runPy(code, {
        timeoutMs: 1_500,
        graceMs: traceback ? 5_000 : undefined,
      });
      assertEquals(result.ok, false, code);
      assertEquals(result.error?.type, "TimeoutError", code);
      assertMatch(result.error?.message ?? "", /timed out after 1500 ms/);
      // A traceback shows that the interrupt stopped the code; without one it was killed after
      // the grace. A child that ignored the interrupt and was never killed would hang here.
      if (traceback) assertMatch(result.error?.traceback ?? "", traceback, code);
    }
  },
});

Deno.test({
  name: "PyChild: time.sleep() does not burn CPU",
  async fn() {
    await withPyChild({}, async (child) => {
      let done = false;
      const running = child.run("import time\ntime.sleep(3)\n'slept'", LIMITS)
        .finally(() => done = true);
      await new Promise((r) => setTimeout(r, 300));
      // A sleep that spins keeps the Python thread runnable at every look; one that waits lets
      // every thread sleep.
      const idle = await seenIdle(child.pid);
      const sleptMeanwhile = !done;
      const result = await running;
      assertEquals(result.returnValue, "slept");
      assert(sleptMeanwhile, "the sleep ended before the child was looked at");
      assert(
        idle,
        `a thread ran through the sleep: ${JSON.stringify(await threadStates(child.pid))}`,
      );
    });
  },
});

Deno.test({
  name: "PyChild.run() stops memory bombs and print floods",
  async fn() {
    // The timeout is far beyond what either limit takes to fire, so that only the limit can end
    // these runs.
    const bomb = await runPy("x = []\nwhile True:\n    x.append(bytearray(10**6))", {
      timeoutMs: 60_000,
    }, { memoryMb: 400 });
    assertEquals(bomb.ok, false);
    assertEquals(bomb.error?.type, "MemoryLimitError", JSON.stringify(bomb.error));

    const flood = await runPy("while True:\n    print('x' * 1000)", {
      timeoutMs: 60_000,
      maxOutputBytes: 50 * 1024 * 1024,
    });
    assertEquals(flood.ok, false);
    assertEquals(flood.error?.type, "OutputLimitError", JSON.stringify(flood.error));

    const capped = await runPy("for i in range(10**6):\n    print(i)", { maxOutputBytes: 1000 });
    assertEquals(capped.error?.type, "OutputLimitError");
    assertEquals(capped.truncated, true);
    assertEquals(new TextEncoder().encode(capped.stdout).length, 1000);
  },
});

Deno.test({
  name: "PyChild: each child starts with a fresh interpreter",
  async fn() {
    const first = await runPy(
      "import builtins\nbuiltins.len = lambda x: 42\nsecret = 1\nlen([])",
      {},
      {
        allowedImports: "*",
      },
    );
    assertEquals(first.returnValue, 42);
    const second = await runPy("[len([1, 2]), 'secret' in globals()]");
    assertEquals(second.returnValue, [2, false]);
    // The snapshot must not hand every child the same random state.
    const draws = await Promise.all([1, 2].map(() => runPy("import random\nrandom.random()")));
    assert(draws[0].returnValue !== draws[1].returnValue, "two children drew the same number");
  },
});

Deno.test({
  name: "PyChild with session keeps globals across runs",
  async fn() {
    await withPyChild({ session: true }, async (child) => {
      const first = await child.run("x = 41\nprint('set')", LIMITS);
      assertEquals(first.stdout, "set\n");
      const second = await child.run("x + 1", LIMITS);
      assertEquals(second.returnValue, 42);
      const failed = await child.run("x / 0", LIMITS);
      assertEquals(failed.error?.type, "ZeroDivisionError");
      const interrupted = await child.run("while True:\n    x += 1", { ...LIMITS, timeoutMs: 800 });
      assertEquals(interrupted.error?.type, "TimeoutError");
      const after = await child.run("x > 42", LIMITS);
      assertEquals(after.returnValue, true);
      const killed = await child.run("sum(range(10**12))", { ...LIMITS, timeoutMs: 500 });
      assertEquals(killed.error?.type, "TimeoutError");
      const ended = await child.run("x", LIMITS);
      assertEquals(ended.error?.type, "SessionEnded");
    });
  },
});

Deno.test({
  name: "PyChild.run() sends tool calls as call frames and raises ToolError",
  async fn() {
    const frames: Array<Record<string, unknown>> = [];
    const onRequest = (frame: Record<string, unknown>) => {
      frames.push(frame);
      if (frame.op === "call" && frame.name === "mcp__s__broken") {
        return Promise.resolve({ ok: false, error: { type: "ToolError", message: "it broke" } });
      }
      if (frame.op === "call" && frame.name === "mcp__s__denied") {
        return Promise.resolve({
          ok: false,
          error: { type: "ToolPolicyError", message: "not in allowedTools" },
        });
      }
      return Promise.resolve({ ok: true, value: { echo: frame } });
    };
    const code = [
      'a = await call_mcp_tool("mcp__s__t", {"n": 1})',
      "b = await tools.everything.get_sum(a=1, b=2)",
      'h = await tools["my-server"]["tool.name"]({"q": "x"})',
      'c = await discover_mcp_tools(search="x")',
      'd = await search_tools("files", limit=3)',
      'e = await get_tool_schema("mcp__s__t")',
      "try:",
      '    await call_mcp_tool("mcp__s__broken")',
      "except ToolError as error:",
      "    f = str(error)",
      "try:",
      '    await call_mcp_tool("mcp__s__denied")',
      "except ToolCallError as error:",
      "    g = [type(error).__name__, str(error)]",
      '[a["echo"]["args"], b["echo"]["tool"], c["echo"]["op"], d["echo"]["limit"], e["echo"]["op"], f, g]',
    ].join("\n");
    const result = await runPy(code, { onRequest });
    assertEquals(result.error, undefined);
    assertEquals(result.returnValue, [{ n: 1 }, "get_sum", "discover", 3, "schema", "it broke", [
      "ToolPolicyError",
      "not in allowedTools",
    ]]);
    assertEquals(frames[0], {
      t: "call",
      id: frames[0].id,
      op: "call",
      name: "mcp__s__t",
      args: { n: 1 },
    });
    assertEquals(frames[1], {
      t: "call",
      id: frames[1].id,
      op: "proxy",
      server: "everything",
      tool: "get_sum",
      args: { a: 1, b: 2 },
    });
    assertEquals(frames[2], {
      t: "call",
      id: frames[2].id,
      op: "proxy",
      server: "my-server",
      tool: "tool.name",
      args: { q: "x" },
    });

    const uncaught = await runPy('x = 1\nawait call_mcp_tool("mcp__s__broken")', { onRequest });
    assertEquals(uncaught.error?.type, "ToolError");
    assertEquals(uncaught.error?.message, "it broke");
    assertMatch(uncaught.error?.traceback ?? "", /File "code\.py", line 2, in <module>/);
    assert(!/<sandbox>/.test(uncaught.error?.traceback ?? ""));

    const none = await runPy('await call_mcp_tool("mcp__s__t")');
    assertEquals(none.error?.type, "ToolCallError");

    // A call the host never answers is interrupted at the deadline, without waiting for SIGKILL.
    const stuck = await runPy('print("calling")\nawait call_mcp_tool("mcp__s__slow")', {
      timeoutMs: 1_000,
      graceMs: 5_000,
      onRequest: () => new Promise(() => {}),
    });
    assertEquals(stuck.error?.type, "TimeoutError");
    assertEquals(stuck.stdout, "calling\n");
    // The traceback shows that the interrupt ended the call: a child killed after the 5 s grace
    // would have none.
    assertMatch(stuck.error?.traceback ?? "", /File "code\.py", line 2, in <module>/);
  },
});

Deno.test({
  name:
    "PyChild.run() keeps gathered tool calls in flight together while a lone call waits on its thread",
  async fn() {
    // The host answers no call of a gather until all three are in: calls sent one at a time
    // (a lone call's wait on the Worker's thread, taken where it must not be) would never end.
    const held: Array<() => void> = [];
    const order: string[] = [];
    const onRequest = (frame: Record<string, unknown>) =>
      new Promise<object>((resolve) => {
        const args = frame.args as { i: number; gathered?: boolean };
        order.push(`call ${args.i}`);
        const answer = () => resolve({ ok: true, value: args.i * 10 });
        if (!args.gathered) return answer();
        held.push(answer);
        if (held.length === 3) held.splice(0).forEach((release) => release());
      });
    const code = [
      "import asyncio",
      'first = await call_mcp_tool("mcp__s__t", {"i": 0})',
      "many = await asyncio.gather(*[",
      '    call_mcp_tool("mcp__s__t", {"i": i, "gathered": True}) for i in (1, 2, 3)])',
      "async def beside():",
      '    return await call_mcp_tool("mcp__s__t", {"i": 5})',
      "task = asyncio.create_task(beside())",
      'last = await call_mcp_tool("mcp__s__t", {"i": 4})',
      "[first, many, last, await task]",
    ].join("\n");
    const result = await runPy(code, { onRequest, timeoutMs: 20_000 });
    assertEquals(result.error, undefined);
    assertEquals(result.returnValue, [0, [10, 20, 30], 40, 50]);
    assertEquals(order.slice(0, 4), ["call 0", "call 1", "call 2", "call 3"]);
  },
});

Deno.test("PyChild.run() mixes synchronous and awaiting runs in one session", async () => {
  await withPyChild({ session: true }, async (child) => {
    const first = await child.run("x = 20\nprint('sync')\nx + 1", LIMITS);
    assertEquals([first.ok, first.stdout, first.returnValue], [true, "sync\n", 21]);
    const second = await child.run(
      "import asyncio\nawait asyncio.sleep(0)\nx += 1\nprint('async')\nx",
      LIMITS,
    );
    assertEquals([second.ok, second.stdout, second.returnValue], [true, "async\n", 21]);
    // The session child is not killed at its result: its state survives.
    const third = await child.run("\n\nx * 2", LIMITS);
    assertEquals(third.returnValue, 42);
    assert(!child.exited, "the session child was killed after its result");
    const failed = await child.run("y = 1\n\nundefined_name + y", LIMITS);
    assertEquals(failed.error?.type, "NameError");
    assertMatch(failed.error?.traceback ?? "", /File "code\.py", line 3/);
    const awaiting = await child.run("import asyncio\nawait asyncio.sleep(0)\n1 / 0", LIMITS);
    assertEquals(awaiting.error?.type, "ZeroDivisionError");
    assertMatch(awaiting.error?.traceback ?? "", /File "code\.py", line 3/);
  });
});

Deno.test("PyChild.run() interrupts synchronous code at timeoutMs with its line", async () => {
  const result = await withPyChild(
    {},
    (child) => child.run("n = 0\nwhile True:\n    n += 1", { ...LIMITS, timeoutMs: 1_500 }),
  );
  assertEquals(result.error?.type, "TimeoutError");
  assertMatch(result.error?.traceback ?? "", /File "code\.py", line \d/);
});

Deno.test("PyChild's warm-up before ready leaves nothing in the fresh interpreter", async () => {
  const result = await withPyChild({ allowedImports: "*" }, (child) =>
    child.run(
      [
        "import builtins, linecache",
        "[sorted(k for k, v in globals().items() if not k.startswith('__')",
        "        and isinstance(v, (int, float, str, list, dict))),",
        " hasattr(builtins, '_'), ''.join(linecache.getlines('code.py')).count('\\n')]",
      ].join("\n"),
      LIMITS,
    ));
  // code.py in linecache is this run's own source (4 lines), not the warm-up's.
  assertEquals(result.returnValue, [[], false, 4]);
});

Deno.test({
  name: "a ready Python child's V8 background threads run at nice 19, its Python thread does not",
  ignore: Deno.build.os !== "linux",
  async fn() {
    await withPyChild({}, async (child) => {
      const niceByThread = async () => {
        const nice: Record<string, number[]> = {};
        for await (const entry of Deno.readDir(`/proc/${child.pid}/task`)) {
          const dir = `/proc/${child.pid}/task/${entry.name}`;
          const comm = (await Deno.readTextFile(`${dir}/comm`)).trim();
          // Field 19 of stat is the nice value; the fields after the command name start at 3.
          const fields = (await Deno.readTextFile(`${dir}/stat`)).split(") ")[1].split(" ");
          (nice[comm] ??= []).push(Number(fields[16]));
        }
        return nice;
      };
      let nice = await niceByThread();
      const deadline = Date.now() + 10_000;
      while (!nice["V8 DefaultWorke"]?.every((n) => n === 19) && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 50));
        nice = await niceByThread();
      }
      assert(
        (nice["V8 DefaultWorke"] ?? []).length > 0,
        `no V8 worker thread: ${JSON.stringify(nice)}`,
      );
      assertEquals(new Set(nice["V8 DefaultWorke"]), new Set([19]), JSON.stringify(nice));
      // The Worker that runs Python keeps the default priority.
      assertEquals(new Set(nice["worker-1"]), new Set([0]), JSON.stringify(nice));
      const result = await child.run("1 + 1", LIMITS);
      assertEquals(result.returnValue, 2);
    });
  },
});
