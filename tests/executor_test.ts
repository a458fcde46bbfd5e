import { join } from "node:path";
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { withExecutor } from "./_executor.ts";
import { sandboxPids } from "./_proc.ts";
import { createLogger } from "../src/log.ts";

Deno.test("Executor.runTypescript() reports errors at the code's own line numbers", async () => {
  await withExecutor({}, async (executor) => {
    const result = await executor.runTypescript(
      'import { join } from "node:path";\nconst a: number = 1;\n\nthrow new RangeError("bad " + a);',
    );
    assertEquals(result.ok, false);
    assertEquals(result.error?.type, "RangeError");
    assertEquals(result.error?.message, "bad 1");
    assertMatch(result.error?.traceback ?? "", /code\.ts:4:7/);
    assert(!/ts_runner|data:application/.test(result.error?.traceback ?? ""));
  });
});

Deno.test("Executor.runTypescript() reports a syntax error as SyntaxError at the right line", async () => {
  await withExecutor({}, async (executor) => {
    const result = await executor.runTypescript("const ok = 1;\nconst = broken;\n");
    assertEquals(result.error?.type, "SyntaxError");
    assertMatch(result.error?.message ?? "", /code\.ts:2:/);
  });
});

Deno.test("Executor.runTypescript() makes return values JSON-safe", async () => {
  await withExecutor({}, async (executor) => {
    const cases: Array<[string, unknown]> = [
      ["return 12n", "12n"],
      ["return new Map([['a', 1]])", { a: 1 }],
      ["return new Set([1, 2])", [1, 2]],
      ["return { when: new Date(0) }", { when: "1970-01-01T00:00:00.000Z" }],
      [
        "const o: Record<string, unknown> = {}; o.self = o; return o",
        "<ref *1> { self: [Circular *1] }",
      ],
      ["return function named() {}", "[Function: named]"],
    ];
    for (const [code, expected] of cases) {
      const result = await executor.runTypescript(code);
      assertEquals(result.returnValue, expected, code);
    }
    const none = await executor.runTypescript("console.log(1)");
    assertEquals("returnValue" in none, false);
  });
});

Deno.test("Executor.runTypescript() lets work the code did not await finish", async () => {
  await withExecutor({}, async (executor) => {
    const result = await executor.runTypescript(
      'setTimeout(() => console.log("later"), 50);\nconsole.log("now");\nreturn "done";',
    );
    assertEquals(result.stdout, "now\nlater\n");
    assertEquals(result.returnValue, "done");
  });
});

Deno.test("Executor.runTypescript() gives the code a private writable cwd that is removed", async () => {
  await withExecutor({}, async (executor, tempDir) => {
    const result = await executor.runTypescript(
      'await Deno.writeTextFile("note.txt", "x");\nreturn [Deno.cwd(), await Deno.readTextFile("note.txt")];',
    );
    const [cwd, text] = result.returnValue as [string, string];
    assertEquals(text, "x");
    assert(cwd.startsWith(tempDir), `${cwd} is not under ${tempDir}`);
    await executor.idle();
    assertEquals(await Deno.stat(cwd).then(() => true, () => false), false);
  });
});

Deno.test("Executor.runTypescript() refuses timeoutMs above the admin maximum", async () => {
  await withExecutor({ limits: { maxTimeoutMs: 1000, timeoutMs: 1000 } }, async (executor) => {
    const result = await executor.runTypescript("return 1", { timeoutMs: 5000 });
    assertEquals(result.error?.type, "LimitError");
    assertMatch(result.error?.message ?? "", /limits\.maxTimeoutMs/);
  });
});

Deno.test("Executor.runTypescript() refuses code over limits.maxCodeBytes", async () => {
  await withExecutor({ limits: { maxCodeBytes: 100 } }, async (executor) => {
    const result = await executor.runTypescript(`return "${"x".repeat(200)}"`);
    assertEquals(result.error?.type, "CodeTooLarge");
    assertMatch(result.error?.message ?? "", /limits\.maxCodeBytes/);
  });
});

Deno.test("Executor.runTypescript() queues beyond maxConcurrent and refuses beyond maxQueued", async () => {
  await withExecutor({ limits: { maxConcurrent: 1, maxQueued: 1 } }, async (executor) => {
    const slow = "await new Promise((r) => setTimeout(r, 300)); return 1";
    const runs = [0, 1, 2].map(() => executor.runTypescript(slow));
    const results = await Promise.all(runs);
    assertEquals(results.map((r) => r.ok), [true, true, false]);
    assertEquals(results[2].error?.type, "QueueFullError");
    assertMatch(results[2].error?.message ?? "", /limits\.maxQueued/);
  });
});

Deno.test("Executor.runTypescript() kills a run when its signal aborts", async () => {
  await withExecutor({}, async (executor) => {
    const controller = new AbortController();
    const run = executor.runTypescript("while (true) {}", {
      signal: controller.signal,
      timeoutMs: 60_000,
    });
    setTimeout(() => controller.abort(), 300);
    const result = await run;
    assertEquals(result.error?.type, "Cancelled");
  });
});

Deno.test("Executor.runTypescript() grants read access to a path under ALLOWED_PROJECTS", async () => {
  const project = await Deno.realPath(await Deno.makeTempDir({ prefix: "ce-project-" }));
  try {
    await Deno.writeTextFile(join(project, "data.txt"), "project data");
    await withExecutor({ allowedProjects: [project] }, async (executor) => {
      const code = `return await Deno.readTextFile(${JSON.stringify(join(project, "data.txt"))})`;
      const granted = await executor.runTypescript(code, { permissions: { read: [project] } });
      assertEquals(granted.returnValue, "project data");
      const denied = await executor.runTypescript(code);
      assertEquals(denied.ok, false);
      assertMatch(denied.error?.message ?? "", /Requires read access/);
      const outside = await executor.runTypescript("return 1", { permissions: { read: ["/etc"] } });
      assertEquals(outside.error?.type, "PermissionError");
    });
  } finally {
    await Deno.remove(project, { recursive: true });
  }
});

Deno.test("Executor.runTypescript() grants a host from the admin's allowlist and no other", async () => {
  const server = Deno.serve(
    { port: 0, hostname: "127.0.0.1", onListen() {} },
    () => new Response("pong"),
  );
  const host = `127.0.0.1:${server.addr.port}`;
  try {
    await withExecutor({ permissions: { net: [host] } }, async (executor) => {
      const code = `return await (await fetch("http://${host}/")).text()`;
      assertEquals(
        (await executor.runTypescript(code, { permissions: { net: [host] } })).returnValue,
        "pong",
      );
      const without = await executor.runTypescript(code);
      assertMatch(without.error?.message ?? "", /Requires net access/);
      const other = await executor.runTypescript("return 1", {
        permissions: { net: ["127.0.0.1:1"] },
      });
      assertEquals(other.error?.type, "PermissionError");
    });
  } finally {
    await server.shutdown();
  }
});

Deno.test("Executor.runTypescript() leaves none of the code in Deno's emit cache", async () => {
  await withExecutor({}, async (executor) => {
    const marker = `marker_${crypto.randomUUID().replaceAll("-", "")}`;
    const result = await executor.runTypescript(`const ${marker}: number = 1; return ${marker};`);
    assertEquals(result.returnValue, 1);
    await executor.idle();
    const { cacheDir } = await import("../src/config/paths.ts");
    const found = new Deno.Command("grep", { args: ["-rl", marker, join(cacheDir(), "deno-ts")] });
    const { stdout } = await found.output();
    assertEquals(new TextDecoder().decode(stdout), "");
  });
});

Deno.test("Executor warm pool serves runs and is cleaned up on close", async () => {
  await withExecutor({ sandbox: { warmPool: 2 } }, async (executor) => {
    const pool = await executor.runtime("typescript").pool();
    await pool.settled();
    assertEquals(pool.idle, 2);
    const result = await executor.runTypescript("return Deno.cwd()");
    assertEquals(result.ok, true);
    assertEquals(pool.idle, 1);
    await executor.idle();
    await pool.settled();
    assertEquals(pool.idle, 2);
  });
});

Deno.test("Executor.runTypescript() reports a missing deno executable as a clear error", async () => {
  await withExecutor({ sandbox: { denoPath: "/nonexistent/deno" } }, async (executor) => {
    const result = await executor.runTypescript("return 1");
    assertEquals(result.ok, false);
    assertEquals(result.error?.type, "SandboxStartError");
    assertMatch(result.error?.message ?? "", /sandbox\.denoPath/);
  });
});

Deno.test("Executor.runTypescript() captures raw stderr written just before the result", async () => {
  await withExecutor({}, async (executor) => {
    const result = await executor.runTypescript(
      'Deno.stderr.writeSync(new TextEncoder().encode("raw line\\n"));\nreturn 1;',
    );
    assertEquals(result.stderr, "raw line\n");
    assertEquals(result.returnValue, 1);
  });
});

Deno.test("Executor refuses executions beyond limits.executionsPerMinute with a retry time", async () => {
  await withExecutor({ limits: { executionsPerMinute: 2 } }, async (executor) => {
    assertEquals((await executor.runTypescript("return 1")).ok, true);
    assertEquals((await executor.runTypescript("return 2")).ok, true);
    const refused = await executor.runTypescript("return 3");
    assertEquals(refused.error?.type, "RateLimitError");
    assertMatch(refused.error?.message ?? "", /limits\.executionsPerMinute\); retry in \d+ s/);
  });
});

Deno.test("Executor.runPython() right after start-up waits for a pooled child instead of booting a third", async () => {
  const seen = new Set<number>();
  await withExecutor({ python: { warmPool: 2 } }, async (executor, tempDir) => {
    let watching = true;
    const watch = (async () => {
      while (watching) {
        for (const pid of await sandboxPids(tempDir, ["py_host.ts"])) seen.add(pid);
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    try {
      const result = await executor.runPython("1 + 1");
      assertEquals([result.ok, result.returnValue], [true, 2]);
    } finally {
      watching = false;
      await watch;
    }
  }, { log: createLogger("error") });
  // The pool's two children only: the run took the first one to boot.
  assert(seen.size <= 2, `${seen.size} Python children were started for one run and a pool of 2`);
});
