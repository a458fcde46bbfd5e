/**
 * End-to-end tests of the upstream hub: a real server (`deno task start --config …`) driven by
 * the SDK client, calling real MCP servers from npm (server-everything over stdio, Streamable
 * HTTP and SSE; server-memory; server-filesystem) and the fixture in `fixtures/`.
 *
 * Every server gets a private HOME, so that no user configuration leaks in, and the real
 * DENO_DIR, so that the npm servers are not downloaded again.
 *
 * @module
 */
import { join } from "node:path";
import {
  assert,
  assertEquals,
  assertFails,
  assertMatch,
  assertReturns,
  describeResult as describe,
  returnValueOf,
  type RunResult,
} from "./_assert.ts";
import { EVERYTHING, FILESYSTEM, MEMORY } from "./_pins.ts";
import { fixtureServer, homeEnv, npmServer, ROOT, writeMcpConfig } from "./_env.ts";
import { eventually, pidsWithEnv, processGone, sandboxDirs, waitForExit } from "./_proc.ts";
import { describeRun, runCommand } from "./_command.ts";
import { withTempDir } from "./_fs.ts";
import { closeAndCheck, type ServerHarness, startServer } from "./_stdio_server.ts";
import { resultText } from "./_client.ts";

const DENO = Deno.execPath();
const MISSING_COMMAND = "/nonexistent/ce-missing-mcp-server";
/** Tools the fixture lists before `addTool` adds one. */
const FIXTURE_TOOLS = 5;

function fixtureEntry(pidFile: string): Record<string, unknown> {
  return fixtureServer({ FIXTURE_PID_FILE: pidFile });
}

/** A server-everything started by the test on a loopback port. */
interface LoopbackServer {
  url: string;
  close(): Promise<void>;
}

function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}

async function startLoopbackEverything(
  mode: "streamableHttp" | "sse",
  home: string,
  port = freePort(),
): Promise<LoopbackServer> {
  const child = new Deno.Command(DENO, {
    args: ["run", "-A", EVERYTHING, mode],
    cwd: home,
    clearEnv: true,
    env: { ...homeEnv(home), PORT: String(port) },
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const stderr = new Response(child.stderr).text();
  let exited = false;
  const status = child.status.finally(() => exited = true);
  const close = async () => {
    if (!exited) child.kill("SIGKILL");
    await status;
    await stderr;
  };
  const listening = await eventually(async () => {
    if (exited) return true;
    try {
      (await Deno.connect({ hostname: "127.0.0.1", port })).close();
      return true;
    } catch {
      return false;
    }
  }, 60_000);
  if (!listening || exited) {
    await close();
    throw new Error(`server-everything ${mode} did not listen on ${port}: ${await stderr}`);
  }
  const path = mode === "sse" ? "/sse" : "/mcp";
  return { url: `http://127.0.0.1:${port}${path}`, close };
}

async function runDescription(server: ServerHarness): Promise<string> {
  const { tools } = await server.client.listTools();
  return tools.find((tool) => tool.name === "run_typescript")?.description ?? "";
}

Deno.test("run_typescript calls real upstream MCP servers over stdio, Streamable HTTP and SSE", async (t) => {
  const home = await Deno.makeTempDir({ prefix: "ce-upstream-home-" });
  const loopbackHome = join(home, "loopback");
  const files = join(home, "files");
  await Deno.mkdir(loopbackHome);
  await Deno.mkdir(files);
  const filesDir = await Deno.realPath(files);
  const memoryFile = join(home, "memory.jsonl");
  const fixturePid = join(home, "fixture.pid");
  const victimPid = join(home, "victim.pid");
  // A server that does not start leaves no temp directory behind either.
  const http = await startLoopbackEverything("streamableHttp", loopbackHome).catch(
    async (error) => {
      await Deno.remove(home, { recursive: true });
      throw error;
    },
  );
  const sse = await startLoopbackEverything("sse", loopbackHome).catch(async (error) => {
    await http.close();
    await Deno.remove(home, { recursive: true });
    throw error;
  });
  try {
    const server = await startServer({
      home,
      // write_file is annotated destructive, and this client cannot be asked: exempt it here
      // (approvals are tests/approvals_test.ts).
      settings: { approvals: { waive: ["mcp__filesystem__write_file"] } },
      upstream: {
        "everything": npmServer(EVERYTHING),
        "everything-http": { type: "http", url: http.url },
        "everything-sse": { type: "sse", url: sse.url },
        "memory": npmServer(MEMORY, { env: { MEMORY_FILE_PATH: memoryFile } }),
        "filesystem": npmServer(FILESYSTEM, { args: [filesDir] }),
        "my.server-1": fixtureEntry(fixturePid),
        "victim": fixtureEntry(victimPid),
        "broken": { command: MISSING_COMMAND, args: ["--stdio"] },
      },
    });
    const fixturePids: number[] = [];
    try {
      const changes: number[] = [];
      server.client.setNotificationHandler("notifications/tools/list_changed", () => {
        changes.push(Date.now());
      });

      await t.step("run_typescript's description lists every server from the start", async () => {
        const description = await runDescription(server);
        // Each one counted, loading or down, as far as its first listing has come.
        assertMatch(
          description.replace(/ \((?:\d+|loading|down)\)/g, ""),
          /\nServers \(tools\): broken, everything, everything-http, everything-sse, filesystem, memory, my\.server-1, victim$/,
        );
      });

      for (
        const [name, proxy] of [
          ["everything", "everything"],
          ["everything-http", "everythingHttp"],
          ["everything-sse", "everythingSse"],
        ]
      ) {
        await t.step(
          `${name}: callMCPTool, tools.${proxy} and echo return the tool's text`,
          async () => {
            const result = await server.runTs([
              `const viaName = await callMCPTool("mcp__${name}__get-sum", { a: 2, b: 3 });`,
              `const viaProxy = await tools.${proxy}.getSum({ a: 2, b: 3 });`,
              `const echo = await callMCPTool("mcp__${name}__echo", { message: "hello ${name}" });`,
              "return { viaName, viaProxy, echo };",
            ].join("\n"));
            assertReturns(result, {
              viaName: "The sum of 2 and 3 is 5.",
              viaProxy: "The sum of 2 and 3 is 5.",
              echo: `Echo: hello ${name}`,
            });
            assertEquals(
              result.toolCalls.map((call) => [call.name, call.ok]),
              [
                [`mcp__${name}__get-sum`, true],
                [`mcp__${name}__get-sum`, true],
                [`mcp__${name}__echo`, true],
              ],
            );
          },
        );
      }

      await t.step("run_typescript's description shows every server's tool count", async () => {
        let description = "";
        const counted = await eventually(async () => {
          description = await runDescription(server);
          return /: broken \(down\), everything \(\d+\), everything-http \(\d+\), everything-sse \(\d+\), filesystem \(\d+\), memory \(\d+\), my\.server-1 \(\d+\), victim \(\d+\)$/
            .test(description);
        });
        assert(counted, `no tool counts in: ${description}`);
        assert(changes.length > 0, "the client was not told that the description changed");
      });

      await t.step(
        "discoverMCPTools, getToolSchema and searchTools describe everything",
        async () => {
          const result = await server.runTs([
            'const found = await discoverMCPTools({ server: "everything" });',
            'const schema = await getToolSchema("mcp__everything__get-sum");',
            'const ranked = await searchTools("sum");',
            "return { found, schema, ranked: ranked.map((r) => r.name) };",
          ].join("\n"));
          const value = returnValueOf<{
            found: Array<{ name: string; server: string; description: string }>;
            schema: {
              name: string;
              inputSchema: { properties: Record<string, { type: string }>; required: string[] };
              signature: string;
            };
            ranked: string[];
          }>(result);
          assert(value.found.length >= 10, describe(result));
          for (const tool of value.found) {
            assertMatch(tool.name, /^mcp__everything__[^_]/);
            assertEquals(tool.server, "everything");
            assertEquals(typeof tool.description, "string");
          }
          const byName = new Map(value.found.map((tool) => [tool.name, tool.description]));
          assertEquals(byName.get("mcp__everything__get-sum"), "Returns the sum of two numbers");
          assertEquals(byName.get("mcp__everything__echo"), "Echoes back the input string");

          assertEquals(value.schema.name, "mcp__everything__get-sum");
          assertEquals(value.schema.inputSchema.properties.a.type, "number");
          assertEquals(value.schema.inputSchema.properties.b.type, "number");
          assertEquals([...value.schema.inputSchema.required].sort(), ["a", "b"]);
          assertMatch(value.schema.signature, /tools\.everything\.getSum\(args: \{/);

          // The three everything servers all have get-sum; they tie, and outrank everything else.
          assertEquals(value.ranked.slice(0, 3).sort(), [
            "mcp__everything-http__get-sum",
            "mcp__everything-sse__get-sum",
            "mcp__everything__get-sum",
          ]);
          assert(value.ranked.slice(3).every((name) => !name.endsWith("__get-sum")));
        },
      );

      await t.step("names with dots, hyphens and capitals are used verbatim", async () => {
        const result = await server.runTs([
          'const full = await callMCPTool("mcp__my.server-1__Get-Thing.v2", { id: "a" });',
          'const verbatim = await tools["my.server-1"]["Get-Thing.v2"]({ id: "b" });',
          'const camel = await tools.myServer1.getThingV2({ id: "c" });',
          "return [full, verbatim, camel];",
        ].join("\n"));
        assertReturns(result, ["thing a", "thing b", "thing c"]);
        fixturePids.push(Number(await Deno.readTextFile(fixturePid)));

        const search = await server.client.callTool({
          name: "search_tools",
          arguments: { query: "Get-Thing.v2", limit: 3 },
        });
        const text = resultText(search);
        assertEquals(search.isError ?? false, false, text);
        const first = text.split("\n\n")[0];
        assertMatch(
          first,
          /^\/\*\* Fetches the fixture thing with the given id \*\/\ntools\.myServer1\.getThingV2\(args: \{ (\/\*\* Which thing \*\/ )?id: string \}\): Promise<unknown> {2}\/\/ mcp__my\.server-1__Get-Thing\.v2$/,
          text,
        );
      });

      await t.step("one program chains memory and filesystem tools", async () => {
        const path = join(filesDir, "summary.txt");
        const result = await server.runTs([
          'const created = await callMCPTool("mcp__memory__create_entities", { entities: [',
          '  { name: "Ada", entityType: "person", observations: ["wrote the first program"] },',
          '  { name: "Engine", entityType: "machine", observations: ["designed by Babbage"] },',
          "] });",
          "const summary = created.entities",
          '  .map((e) => `${e.name} (${e.entityType}): ${e.observations.join("; ")}`)',
          '  .join("\\n");',
          `const path = ${JSON.stringify(path)};`,
          'await callMCPTool("mcp__filesystem__write_file", { path, content: summary });',
          "const read = await tools.filesystem.readTextFile({ path });",
          "return read.content;",
        ].join("\n"));
        const expected =
          "Ada (person): wrote the first program\nEngine (machine): designed by Babbage";
        assertReturns(result, expected);
        assertEquals(await Deno.readTextFile(path), expected);
        assertMatch(await Deno.readTextFile(memoryFile), /"name":"Ada"/);
        assertEquals(
          result.toolCalls.map((call) => [call.name, call.ok]),
          [
            ["mcp__memory__create_entities", true],
            ["mcp__filesystem__write_file", true],
            ["mcp__filesystem__read_text_file", true],
          ],
        );
      });

      await t.step("allowedTools refuses a tool outside it with ToolPolicyError", async () => {
        const result = await server.runTs(
          [
            'await callMCPTool("mcp__memory__read_graph", {});',
            'return await callMCPTool("mcp__everything__echo", { message: "refused" });',
          ].join("\n"),
          { allowedTools: ["mcp__memory__*"] },
        );
        assertFails(
          result,
          "ToolPolicyError",
          /^Cannot call tool "mcp__everything__echo": it is not in allowedTools \(mcp__memory__\*\)/,
        );
        assertEquals(
          result.toolCalls.map((call) => [call.name, call.ok]),
          [["mcp__memory__read_graph", true], ["mcp__everything__echo", false]],
        );
      });

      await t.step(
        "arguments that break the input schema fail with ToolValidationError",
        async () => {
          const result = await server.runTs(
            'return await callMCPTool("mcp__everything__get-sum", { a: "x" });',
          );
          assertFails(result, "ToolValidationError", /mcp__everything__get-sum/);
          assertMatch(result.error!.message, /"a" must be number/);
          assertMatch(result.error!.message, /missing required argument "b"/);
        },
      );

      await t.step("an upstream isError result becomes a ToolError in the sandbox", async () => {
        const caught = await server.runTs([
          "try {",
          '  await callMCPTool("mcp__my.server-1__fail");',
          '  return "no error";',
          "} catch (err) {",
          "  return { isToolError: err instanceof ToolError, name: err.name, message: err.message };",
          "}",
        ].join("\n"));
        assertReturns(caught, {
          isToolError: true,
          name: "ToolError",
          message: "upstream says no",
        });
        const uncaught = await server.runTs("await tools.myServer1.fail();");
        assertFails(uncaught, "ToolError", /^upstream says no$/);
      });

      await t.step(
        "a server whose command is missing fails alone, naming the command",
        async () => {
          const result = await server.runTs('return await callMCPTool("mcp__broken__anything");');
          assertFails(result, "ToolCallError", /broken/);
          assertMatch(result.error!.message, new RegExp(MISSING_COMMAND.replaceAll(".", "\\.")));
          const good = await server.runTs(
            'return await callMCPTool("mcp__everything__get-sum", { a: 1, b: 1 });',
          );
          assertReturns(good, "The sum of 1 and 1 is 2.");
          assertMatch(await runDescription(server), /\bbroken \(down\)/);
        },
      );

      await t.step(
        "an upstream tools/list_changed reaches the client and the catalog",
        async () => {
          // Let the notifications of earlier steps settle first.
          await new Promise((resolve) => setTimeout(resolve, 300));
          const before = changes.length;
          const added = await server.runTs(
            'return await callMCPTool("mcp__my.server-1__addTool", { name: "late" });',
          );
          assertReturns(added, "added_late");
          assert(
            await eventually(() => Promise.resolve(changes.length > before)),
            "no notifications/tools/list_changed after the upstream list changed",
          );
          const result = await server.runTs([
            'const found = await searchTools("added_late");',
            'const value = await callMCPTool("mcp__my.server-1__added_late");',
            "return { names: found.map((f) => f.name), value };",
          ].join("\n"));
          const value = returnValueOf<{ names: string[]; value: string }>(result);
          assertEquals(value.names[0], "mcp__my.server-1__added_late");
          assertEquals(value.value, "added late works");
          assertMatch(
            await runDescription(server),
            new RegExp(`my\\.server-1 \\(${FIXTURE_TOOLS + 1}\\)`),
          );
        },
      );

      await t.step(
        "an upstream killed mid-call fails the call, and the next run reconnects",
        async () => {
          const first = await server.runTs('return await callMCPTool("mcp__victim__pid");');
          const pid = Number(returnValueOf(first));
          assertEquals(Number(await Deno.readTextFile(victimPid)), pid);
          fixturePids.push(pid);

          const running = server.runTs([
            "try {",
            '  await callMCPTool("mcp__victim__slow", {});',
            '  return "finished";',
            "} catch (err) {",
            "  return { name: err.name, message: err.message };",
            "}",
          ].join("\n"));
          const inFlight = await eventually(
            () => Deno.stat(`${victimPid}.slow`).then(() => true, () => false),
            10_000,
          );
          assert(inFlight, "the slow call never reached the fixture");
          Deno.kill(pid, "SIGKILL");
          const result = await running;
          const error = returnValueOf<{ name: string; message: string }>(result);
          assertEquals(error.name, "ToolCallError", describe(result));
          assertMatch(error.message, /"victim"/);
          // The death's own error: a death the server missed would end the call in "did not
          // answer within" at the call's timeout.
          assertMatch(error.message, /broke|closed|disconnected/i);
          assert(!/did not answer within/.test(error.message), error.message);
          assert(await waitForExit(pid), "the killed fixture lives");

          const next = await server.runTs('return await callMCPTool("mcp__victim__pid");');
          const newPid = Number(returnValueOf(next));
          assert(newPid !== pid && newPid > 0, describe(next));
          fixturePids.push(newPid);
          assertReturns(
            await server.runTs(
              'return await callMCPTool("mcp__victim__Get-Thing.v2", { id: "z" });',
            ),
            "thing z",
          );
        },
      );

      await t.step("an upstream killed between runs is started again on next use", async () => {
        const pid = Number(await Deno.readTextFile(victimPid));
        Deno.kill(pid, "SIGKILL");
        // A crash between runs, not just before one: the host has reaped the process and has had
        // a moment to see its pipes close. (A call racing the crash may fail; it is not retried,
        // since the pool cannot tell whether the dead server had started on it.)
        const reaped = await eventually(() => processGone(pid));
        assert(reaped, `the killed fixture ${pid} was not reaped`);
        await new Promise((resolve) => setTimeout(resolve, 250));
        const next = await server.runTs('return await callMCPTool("mcp__victim__pid");');
        const newPid = Number(returnValueOf(next));
        assert(newPid !== pid && newPid > 0, describe(next));
        fixturePids.push(newPid);
      });
    } finally {
      await t.step("no sandbox or upstream process outlives the server", async () => {
        await closeAndCheck(server, { pids: fixturePids });
      });
    }
  } finally {
    await http.close();
    await sse.close();
    await Deno.remove(home, { recursive: true });
  }
});

Deno.test("doctor exits 1, naming the missing command, and reports the good server's tools", async () => {
  await withTempDir("ce-upstream-home-", async (home) => {
    const pidFile = join(home, "good.pid");
    const config = await writeMcpConfig(home, {
      broken: { command: MISSING_COMMAND },
      good: fixtureEntry(pidFile),
    });
    const run = await runCommand(DENO, ["run", "-A", "main.ts", "doctor", "--config", config], {
      cwd: ROOT,
      clearEnv: true,
      env: { ...homeEnv(home), TMPDIR: home },
    });
    const report = describeRun(run);
    assertEquals(run.code, 1, report);
    assertMatch(
      run.stdout,
      /^ +broken +\S+ +stdio +error +- +-$/m,
      report,
    );
    // The error itself is under the table, whole.
    assertMatch(
      run.stdout.replace(/\n {4}/g, " "),
      new RegExp(`^  broken: .*"${MISSING_COMMAND}"`, "m"),
      report,
    );
    assertMatch(
      run.stdout,
      new RegExp(`^ +good +\\S+ +stdio +ok +${FIXTURE_TOOLS} +\\d+ ms$`, "m"),
      report,
    );
    const pid = Number(await Deno.readTextFile(pidFile));
    assert(await waitForExit(pid), `doctor left fixture ${pid}`);
    assertEquals(await pidsWithEnv(`HOME=${home}`), []);
    assertEquals(await sandboxDirs(home), []);
  });
});

Deno.test("a Streamable HTTP upstream that restarts is reconnected to with a new session", async () => {
  const home = await Deno.makeTempDir({ prefix: "ce-upstream-home-" });
  const loopbackHome = join(home, "loopback");
  await Deno.mkdir(loopbackHome);
  let http = await startLoopbackEverything("streamableHttp", loopbackHome).catch(async (error) => {
    await Deno.remove(home, { recursive: true });
    throw error;
  });
  try {
    const port = Number(new URL(http.url).port);
    const server = await startServer({
      home,
      upstream: { web: { type: "http", url: http.url } },
    });
    try {
      const echo = (message: string) =>
        server.runTs(`return await callMCPTool("mcp__web__echo", { message: "${message}" });`);
      assertReturns(await echo("before"), "Echo: before");

      await http.close();
      const down = await echo("down");
      assertFails(down, "ToolCallError", /"web"/);

      http = await startLoopbackEverything("streamableHttp", loopbackHome, port);
      // The old session died with the old process: the pool must open a new one, at the latest
      // once a reconnect backoff (a few hundred milliseconds here) has passed.
      let after: RunResult | undefined;
      const back = await eventually(async () => {
        after = await echo("after");
        return after.isError === false;
      }, 5_000);
      assert(back, `never reconnected: ${after && describe(after)}`);
      assertEquals(after?.returnValue, "Echo: after");
    } finally {
      await closeAndCheck(server);
    }
  } finally {
    await http.close();
    await Deno.remove(home, { recursive: true });
  }
});
