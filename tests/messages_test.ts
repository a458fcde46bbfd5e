/**
 * Messages the model and the admin act on, through the real server (`deno task start` driven by
 * the SDK client): a refused access names the argument that grants it, `import sys` works as
 * docs/python.md says, and a normal exit logs no Python failure.
 *
 * @module
 */
import { join } from "node:path";
import { assert, assertEquals, assertFails, assertMatch, assertReturns } from "./_assert.ts";
import {
  describeRun,
  eventually,
  fixtureServer,
  homeEnv,
  ROOT,
  runCommand,
  sandboxDirs,
  serverEnv,
  startServer,
  withTempDir,
} from "./_helpers.ts";
import { buildWheel, wheelFileName } from "../src/codegen/wheel.ts";

/** The tools tests/fixtures/upstream_fixture.ts lists by default. */
const FIXTURE_TOOL_COUNT = 5;

/** A loopback HTTP server that answers `pong`, for the grants the messages advise. */
function pong(): { port: number; close: () => Promise<void> } {
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, () => {
    return new Response("pong");
  });
  return { port: server.addr.port, close: () => server.shutdown() };
}

Deno.test("run_typescript: a refused access is a PermissionError that names the permissions argument to pass", async () => {
  await withTempDir("ce-denied-", async (root) => {
    const project = await Deno.realPath(root);
    const notes = join(project, "notes.txt");
    await Deno.writeTextFile(notes, "remember the milk");
    const http = pong();
    const server = await startServer({
      settings: { permissions: { net: ["127.0.0.1"] }, allowedProjects: [project] },
    });
    try {
      const url = `http://127.0.0.1:${http.port}/`;
      const host = `127.0.0.1:${http.port}`;
      const fetchCode = `return await (await fetch(${JSON.stringify(url)})).text();`;

      const net = await server.runTs(fetchCode);
      assertFails(net, "PermissionError");
      assertEquals(
        net.error?.message,
        `Requires net access to "${host}": this run was not granted it; pass permissions: {net: ["${host}"]} to run_typescript (the admin allows it: permissions.net)`,
      );
      assert(!/--allow-net/.test(JSON.stringify(net.error)), "the message names Deno's flag");
      // The advice works as written.
      assertReturns(await server.runTs(fetchCode, { permissions: { net: [host] } }), "pong");

      const far = await server.runTs('await fetch("https://example.com/");');
      assertFails(far, "PermissionError");
      assertEquals(
        far.error?.message,
        'Requires net access to "example.com:443", which no run may be granted: the admin allows 127.0.0.1 (permissions.net); get it through an MCP tool instead',
      );

      const readCode = `return Deno.readTextFileSync(${JSON.stringify(notes)});`;
      const read = await server.runTs(readCode);
      assertFails(read, "PermissionError");
      assertEquals(
        read.error?.message,
        `Requires read access to "${notes}": this run was not granted it; pass permissions: {read: ["${notes}"]} to run_typescript (the admin allows it: ALLOWED_PROJECTS)`,
      );
      assertReturns(
        await server.runTs(readCode, { permissions: { read: [notes] } }),
        "remember the milk",
      );

      // A new file is granted through its directory.
      const fresh = join(project, "out.txt");
      const write = await server.runTs(`Deno.writeTextFileSync(${JSON.stringify(fresh)}, "x");`);
      assertFails(write, "PermissionError");
      assertMatch(
        write.error?.message ?? "",
        new RegExp(`pass permissions: \\{write: \\["${project}"\\]\\} to run_typescript`),
      );

      const outside = await server.runTs('Deno.readTextFileSync("/etc/hostname");');
      assertFails(
        outside,
        "PermissionError",
        /^Requires read access to "\/etc\/hostname", which no run may be granted: it is not under ALLOWED_PROJECTS \(/,
      );

      const env = await server.runTs('Deno.env.get("HOME");');
      assertFails(
        env,
        "PermissionError",
        /^Requires env access to "HOME": sandbox code gets no environment variables, and no argument grants them/,
      );
    } finally {
      await server.close();
      await http.close();
    }
  });
});

Deno.test("run_python: a denied fetch is a PermissionError that points at run_typescript's permissions, and import sys works as documented", async () => {
  await withTempDir("ce-denied-py-", async (wheels) => {
    // A library that fetches, as pure-Python wheels do under Pyodide: Python sees Deno's refusal
    // as pyodide.http's AbortError.
    const wheel = buildWheel({
      "netpkg/__init__.py": [
        "from pyodide.http import pyfetch",
        "",
        "async def get(url):",
        "    return await (await pyfetch(url)).string()",
        "",
      ].join("\n"),
    }, { distribution: "netpkg", version: "1.0" });
    await Deno.writeFile(join(wheels, wheelFileName("netpkg", "1.0")), wheel);
    const server = await startServer({
      settings: { permissions: { net: ["127.0.0.1"] }, python: { wheelDirs: [wheels] } },
    });
    try {
      const denied = await server.runPy(
        'import netpkg\nawait netpkg.get("http://127.0.0.1:8080/")',
      );
      assertFails(denied, "PermissionError");
      assertEquals(
        denied.error?.message,
        'Requires net access to "127.0.0.1:8080": Python code gets no network access (run_python takes no permissions); do this part in run_typescript with permissions: {net: ["127.0.0.1:8080"]} (the admin allows it: permissions.net), or through an MCP tool',
      );
      assertMatch(denied.error?.traceback ?? "", /File "code\.py", line 2/);

      const exited = await server.runPy('import sys\nprint("before")\nsys.exit(0)');
      assertEquals([exited.ok, exited.error, exited.stdout], [true, undefined, "before\n"]);
      const bare = await server.runPy("import sys\nsys.exit()");
      assertEquals([bare.ok, bare.error], [true, undefined]);
      assertFails(
        await server.runPy("import sys\nsys.exit(3)"),
        "SandboxExit",
        /^The code called exit\(3\) before it finished/,
      );
      const stderr = await server.runPy('import sys\nprint("warn", file=sys.stderr)');
      assertEquals([stderr.ok, stderr.stderr], [true, "warn\n"]);
    } finally {
      await server.close();
    }
  });
});

Deno.test("serve logs no Python failure on a normal exit or before its own fatal start error", async () => {
  await withTempDir("ce-quiet-exit-", async (tempDir) => {
    // A Python pool of one starts the snapshot at once; the client goes away before it is ready.
    const env = { ...serverEnv(tempDir), CODE_EXECUTOR_PYTHON_WARM_POOL: "1" };
    const options = { cwd: ROOT, env, clearEnv: true, timeoutMs: 120_000 };
    const stdio = await runCommand(Deno.execPath(), ["run", "-A", "main.ts", "serve"], options);
    assertEquals(stdio.code, 0, describeRun(stdio));
    assert(!/Python is unavailable/.test(stdio.stderr), describeRun(stdio));

    const http = await runCommand(Deno.execPath(), ["run", "-A", "main.ts", "serve", "--http"], {
      ...options,
      env: { ...env, CODE_EXECUTOR_HTTP_HOST: "0.0.0.0" },
    });
    assertEquals(http.code, 2, describeRun(http));
    assertMatch(http.stderr, /Refusing to serve HTTP on 0\.0\.0\.0 without authentication/);
    assert(!/Python is unavailable/.test(http.stderr), describeRun(http));
    assertEquals(await sandboxDirs(tempDir), []);
  });
});

Deno.test("run_typescript's description has tool counts on the first start, and marks a server that is down", async () => {
  await withTempDir("ce-first-start-", async (home) => {
    // A private HOME and cache: no tool cache of an earlier start.
    const server = await startServer({
      home,
      upstream: {
        fixture: fixtureServer({}),
        gone: fixtureServer({ FIXTURE_MODE: "exit" }),
      },
    });
    try {
      const changes: number[] = [];
      server.client.setNotificationHandler("notifications/tools/list_changed", () => {
        changes.push(Date.now());
      });
      const description = async () => {
        const { tools } = await server.client.listTools();
        return tools.find((tool) => tool.name === "run_typescript")?.description ?? "";
      };
      // The first answer already says where each server stands.
      assertMatch(
        await description(),
        /\nServers \(tools\): fixture \((?:\d+|loading)\), gone \((?:down|loading)\)$/,
      );
      let last = "";
      const settled = await eventually(async () => {
        last = await description();
        return /: fixture \(\d+\), gone \(down\)$/.test(last);
      }, 60_000);
      assert(settled, `no counts in: ${last}`);
      assertEquals(/fixture \((\d+)\)/.exec(last)?.[1], String(FIXTURE_TOOL_COUNT));
    } finally {
      await server.close();
    }
  });
});

Deno.test("search_tools ranks a tool whose description says it is deprecated below its replacement", async () => {
  const extra = [
    { name: "get_sum", description: "Deprecated: use add_numbers instead. Adds two numbers" },
    { name: "add_numbers", description: "Adds two numbers and returns their sum" },
    { name: "sum_legacy", description: "[DEPRECATED] Sums a list; use add_numbers" },
    { name: "sum_list", description: "Replaces the deprecated sum_legacy: sums a list" },
  ];
  const server = await startServer({
    upstream: { math: fixtureServer({ FIXTURE_EXTRA_TOOLS: JSON.stringify(extra) }) },
  });
  try {
    const result = await server.client.callTool({
      name: "search_tools",
      arguments: { query: "sum", detail: "names" },
    });
    const text = (result.content as Array<{ text?: string }>).map((c) => c.text).join("\n");
    const names = text.split("\n").filter((line) => line.startsWith("mcp__math__"));
    const rank = (tool: string) => names.indexOf(`mcp__math__${tool}`);
    for (const tool of ["get_sum", "add_numbers", "sum_legacy", "sum_list"]) {
      assert(rank(tool) >= 0, `${tool} is not in:\n${text}`);
    }
    assert(rank("add_numbers") < rank("get_sum"), text);
    // A replacement that mentions the tool it replaces is not deprecated itself.
    assert(rank("sum_list") < rank("sum_legacy"), text);
    assertEquals(names.slice(-2).sort(), ["mcp__math__get_sum", "mcp__math__sum_legacy"], text);
  } finally {
    await server.close();
  }
});

Deno.test("doctor's server table stays within 100 columns, with errors under it, and says 1 server", async () => {
  await withTempDir("ce-doctor-width-", async (home) => {
    // A config deep in a long path, and a server whose error names it: the widest cells doctor meets.
    const deep = join(home, "a-directory-with-a-rather-long-name", "and-another-one-below-it");
    const config = join(deep, "mcp.json");
    await Deno.mkdir(deep, { recursive: true });
    await Deno.writeTextFile(
      config,
      JSON.stringify({ mcpServers: { "missing-command-server": { command: join(deep, "nope") } } }),
    );
    const run = await runCommand(Deno.execPath(), [
      "run",
      "-A",
      "main.ts",
      "doctor",
      "--config",
      config,
    ], {
      cwd: ROOT,
      clearEnv: true,
      env: { ...homeEnv(home), TMPDIR: home },
    });
    const report = describeRun(run);
    assertEquals(run.code, 1, report);
    assertMatch(run.stdout, new RegExp(`found +${config} \\[cli\\] \\(1 server\\)$`, "m"), report);
    const start = run.stdout.indexOf("\nServers:\n");
    const section = run.stdout.slice(start + 1, run.stdout.indexOf("\nTokens", start));
    const table = section.slice(0, section.indexOf("\n\n"));
    for (const line of table.split("\n")) {
      assert(line.length <= 100, `${line.length} columns: ${line}\n${report}`);
    }
    assertMatch(table, /^ +missing-command-server +\S+ +stdio +error +- +-$/m, report);
    // The whole error, path included, under the table.
    assertMatch(
      section.replace(/\n +/g, " "),
      new RegExp(`missing-command-server: command "${join(deep, "nope")}" was not found`),
      report,
    );
    assertEquals(await sandboxDirs(home), []);
  });
});
