/**
 * Messages the model and the admin act on, through the real server (`deno task start` driven by
 * the SDK client): a refused access names the argument that grants it, `import sys` works as the
 * README says, and a normal exit logs no Python failure.
 *
 * @module
 */
import { join } from "node:path";
import { assert, assertEquals, assertFails, assertMatch, assertReturns } from "./_assert.ts";
import {
  describeRun,
  ROOT,
  runCommand,
  sandboxDirs,
  serverEnv,
  startServer,
  withTempDir,
} from "./_helpers.ts";
import { buildWheel, wheelFileName } from "../src/codegen/wheel.ts";

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
