/**
 * Fault tolerance of upstream MCP servers: servers that crash, hang, babble, die at start or
 * answer with too much, and a sandbox killed from outside while the server runs. Each fault must
 * end in a clear error for the call it hits and leave every other run, and the server, unharmed.
 *
 * The upstream servers are `fixtures/upstream_fixture.ts` in its misbehaving modes.
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
} from "./_assert.ts";
import { faultyFixtureServer } from "./_env.ts";
import { eventually, readPidFile, sandboxDirs, sandboxPids, waitForExit } from "./_proc.ts";
import { closeAndCheck, serverPid, startServer } from "./_stdio_server.ts";
import { statusMb } from "../bench/_machine.ts";

const MiB = 1024 * 1024;
/** tools.callTimeoutMs for the servers under test; the `hang` server's own `timeout` is lower. */
const CALL_TIMEOUT_MS = 2_500;
const HANG_TIMEOUT_MS = 1_500;
/** How a call that timed out fails; a fault the server noticed fails with its own message. */
const TIMED_OUT = /did not answer within/;

/**
 * An expression (for sandbox code) that calls a tool and evaluates to what it threw, so that the
 * run goes on: `{ name, message, ms }`, with `name: "returned"` when the call succeeded.
 */
function tryCall(name: string, args: Record<string, unknown> = {}): string {
  return `await (async () => {
  const started = Date.now();
  try {
    await callMCPTool(${JSON.stringify(name)}, ${JSON.stringify(args)});
    return { name: "returned", message: "", ms: Date.now() - started };
  } catch (err) {
    return { name: err.name, message: err.message, ms: Date.now() - started };
  }
})()`;
}

/**
 * Sandbox code that calls `server`'s tool `tool` and catches its failure, then asks the same
 * server for thing `id`: it returns `{ failure, after }`, so a test sees both how the fault ended
 * the call and that the server served again.
 */
function failureThenThing(server: string, tool: string, id: string): string {
  return [
    `const failure = ${tryCall(`mcp__${server}__${tool}`)};`,
    `const after = await callMCPTool("mcp__${server}__Get-Thing.v2", { id: "${id}" });`,
    "return { failure, after };",
  ].join("\n");
}

interface Caught {
  name: string;
  message: string;
  ms: number;
}

/** Peak resident memory of a process, in MB. */
async function peakRssMb(pid: number): Promise<number> {
  return Math.round((await statusMb(pid)).VmHWM);
}

Deno.test("faulty upstream servers fail only the calls that reach them", async (t) => {
  const home = await Deno.makeTempDir({ prefix: "ce-faults-home-" });
  const pidFile = (name: string) => join(home, `${name}.pid`);
  try {
    const server = await startServer({
      home,
      upstream: {
        healthy: faultyFixtureServer(pidFile("healthy"), {}, { timeout: 30_000 }),
        crashy: faultyFixtureServer(pidFile("crashy")),
        hang: faultyFixtureServer(pidFile("hang"), {}, { timeout: HANG_TIMEOUT_MS }),
        garbage: faultyFixtureServer(
          pidFile("garbage"),
          { FIXTURE_MODE: "garbage" },
          { timeout: HANG_TIMEOUT_MS },
        ),
        dead: faultyFixtureServer(pidFile("dead"), { FIXTURE_MODE: "exit" }),
      },
      settings: { tools: { callTimeoutMs: CALL_TIMEOUT_MS } },
    });
    try {
      await t.step("the healthy upstream answers", async () => {
        assertReturns(
          await server.runTs(
            'return await callMCPTool("mcp__healthy__Get-Thing.v2", { id: "a" });',
          ),
          "thing a",
        );
      });

      await t.step(
        "an upstream that crashes mid-call fails that run; a run on another server at the same time completes",
        async () => {
          const crashing = server.runTs(
            `return ${tryCall("mcp__crashy__crash", { afterMs: 500 })};`,
          );
          const concurrent = server.runTs([
            "const started = Date.now();",
            'await callMCPTool("mcp__healthy__slow", { ms: 1500 });',
            'const thing = await callMCPTool("mcp__healthy__Get-Thing.v2", { id: "b" });',
            "return { thing, ms: Date.now() - started };",
          ].join("\n"));
          const [crashed, other] = await Promise.all([crashing, concurrent]);
          const caught = returnValueOf<Caught>(crashed);
          assertEquals(caught.name, "ToolCallError", describe(crashed));
          assertMatch(caught.message, /"crashy"/, describe(crashed));
          // The crash's own error: a crash the server missed would fail after tools.callTimeoutMs.
          assertMatch(caught.message, /broke|closed|exited/i, describe(crashed));
          assert(!TIMED_OUT.test(caught.message), describe(crashed));
          const value = returnValueOf<{ thing: string; ms: number }>(other);
          assertEquals(value.thing, "thing b");
          // The healthy run was still in its slow call when the other upstream died.
          assert(value.ms >= 1_500, describe(other));

          assertEquals(
            (await server.runTs('return typeof await callMCPTool("mcp__crashy__pid");'))
              .returnValue,
            "string",
            "the crashed upstream was not started again",
          );
        },
      );

      await t.step(
        "a call that never returns fails after the server's timeout, and the run goes on",
        async () => {
          const hanging = server.runTs(failureThenThing("hang", "hang", "after"));
          assert(
            await eventually(() =>
              Deno.stat(`${pidFile("hang")}.hang`).then(() => true, () => false)
            ),
            "the hanging call never reached the upstream",
          );
          // Meanwhile another run is not held up: it is answered while the call still hangs.
          let hangSettled = false;
          hanging.then(() => hangSettled = true, () => hangSettled = true);
          assertReturns(
            await server.runTs(
              'return await callMCPTool("mcp__healthy__Get-Thing.v2", { id: "c" });',
            ),
            "thing c",
          );
          const healthyFirst = !hangSettled;
          const result = await hanging;
          const value = returnValueOf<{ failure: Caught; after: string }>(result);
          assertEquals(value.failure.name, "ToolCallError", describe(result));
          assertMatch(
            value.failure.message,
            new RegExp(`"hang" did not answer within ${HANG_TIMEOUT_MS} ms`),
          );
          // The server's own timeout (1.5 s) ended it, not tools.callTimeoutMs (2.5 s): the message
          // names which.
          assert(value.failure.ms >= HANG_TIMEOUT_MS, describe(result));
          assert(healthyFirst, "a healthy run was answered only after the hanging call failed");
          assertEquals(value.after, "thing after", "the hanging server stopped serving");
          assertEquals(result.toolCalls.map((c) => c.ok), [false, true]);
        },
      );

      await t.step("tools.callTimeoutMs applies to a server without its own timeout", async () => {
        const result = await server.runTs(`return ${tryCall("mcp__crashy__hang")};`);
        const caught = returnValueOf<Caught>(result);
        assertMatch(
          caught.message,
          new RegExp(`"crashy" did not answer within ${CALL_TIMEOUT_MS} ms`),
          describe(result),
        );
        assertReturns(
          await server.runTs(
            'return await callMCPTool("mcp__crashy__Get-Thing.v2", { id: "d" });',
          ),
          "thing d",
        );
      });

      await t.step("an upstream that mixes garbage into its stdout keeps serving", async () => {
        const result = await server.runTs([
          "const out = [];",
          "for (let i = 0; i < 5; i++) {",
          '  out.push(await callMCPTool("mcp__garbage__Get-Thing.v2", { id: String(i) }));',
          "}",
          "return out;",
        ].join("\n"));
        assertReturns(result, ["thing 0", "thing 1", "thing 2", "thing 3", "thing 4"]);
      });

      await t.step(
        "an upstream that answers with garbage only fails the call on time",
        async () => {
          const result = await server.runTs(failureThenThing("garbage", "babble", "e"));
          const value = returnValueOf<{ failure: Caught; after: string }>(result);
          assertMatch(
            value.failure.message,
            new RegExp(`"garbage" did not answer within ${HANG_TIMEOUT_MS} ms`),
          );
          assertEquals(value.after, "thing e");
        },
      );

      await t.step(
        "an upstream that forges a malformed answer fails the call clearly",
        async () => {
          const result = await server.runTs(failureThenThing("garbage", "forge", "f"));
          const value = returnValueOf<{ failure: Caught; after: string }>(result);
          assertEquals(value.failure.name, "ToolCallError", describe(result));
          assertMatch(value.failure.message, /"garbage"/, describe(result));
          assert(
            !TIMED_OUT.test(value.failure.message),
            `the forged answer was not noticed: ${describe(result)}`,
          );
          assertEquals(value.after, "thing f");
        },
      );

      await t.step(
        "an upstream that floods its stdout without a newline fails the call, then reconnects",
        async () => {
          const before = await readPidFile(pidFile("garbage"));
          const flooding = server.runTs([
            `const failure = ${tryCall("mcp__garbage__flood", { bytes: 12 * MiB })};`,
            `const after = ${tryCall("mcp__garbage__Get-Thing.v2", { id: "g" })};`,
            "return { failure, after };",
          ].join("\n"));
          const result = await flooding;
          const value = returnValueOf<{ failure: Caught; after: Caught }>(result);
          // Every expectation is checked, so that one failure does not hide the others.
          const problems: string[] = [];
          // An endless line is a connection failure or an oversized result; either names the server.
          if (
            !["ToolCallError", "ToolResultTooLarge"].includes(value.failure.name) ||
            !/garbage/.test(value.failure.message)
          ) {
            problems.push(`the flood failed unclearly: ${JSON.stringify(value.failure)}`);
          }
          if (value.after.name !== "returned") {
            problems.push(`the next call failed: ${JSON.stringify(value.after)}`);
          }
          if (!(await waitForExit(before, 10_000))) {
            problems.push(`the flooding upstream ${before} was left running`);
          }
          assertEquals(problems, [], describe(result));
        },
      );

      await t.step(
        "an upstream that exits at start is reported unavailable with the reason; others work",
        async () => {
          const result = await server.runTs([
            `const first = ${tryCall("mcp__dead__anything")};`,
            `const second = ${tryCall("mcp__dead__anything")};`,
            'const thing = await callMCPTool("mcp__healthy__Get-Thing.v2", { id: "h" });',
            "return { first, second, thing };",
          ].join("\n"));
          const value = returnValueOf<{ first: Caught; second: Caught; thing: string }>(result);
          assertEquals(value.first.name, "ToolCallError", describe(result));
          assertMatch(
            value.first.message,
            /^Server "dead" is unavailable: the process exited during start-up; the last lines it wrote to stderr:\n {2}upstream-fixture: FIXTURE_MODE=exit, refusing to start\nRun it by hand to see more: .*upstream_fixture\.ts$/,
          );
          assertMatch(value.second.message, /^Server "dead" is unavailable: /);
          assertEquals(value.thing, "thing h");
          const search = await server.client.callTool({
            name: "search_tools",
            arguments: { query: "thing", detail: "names" },
          });
          const text = (search.content as Array<{ text: string }>).map((b) => b.text).join("\n");
          assertMatch(text, /^mcp__healthy__Get-Thing\.v2$/m);
          // On one line, whole: the stderr tail and the command to run by hand.
          assertMatch(
            text,
            /^\/\/ Server "dead" is unavailable: the process exited during start-up; .*FIXTURE_MODE=exit, refusing to start Run it by hand to see more: .*upstream_fixture\.ts\b/m,
          );
          const { tools } = await server.client.listTools();
          const description = tools.find((tool) => tool.name === "run_typescript")?.description;
          assertMatch(description ?? "", /\bdead \(down\)/);
        },
      );

      await t.step(
        "a result over tools.maxResultBytes is refused, naming the setting; a run beside it completes and the host's memory stays bounded",
        async () => {
          const pid = await serverPid(server);
          const before = await peakRssMb(pid);
          // Every expectation is checked, so that one failure does not hide the others.
          const problems: string[] = [];
          for (const bytes of [6 * MiB, 10 * MiB]) {
            const big = server.runTs(
              `return ${tryCall("mcp__healthy__big", { bytes })};`,
              { timeoutMs: 40_000 },
            );
            const parallel = server.runTs("return 1 + 1");
            assertReturns(await parallel, 2);
            const result = await big;
            const caught = returnValueOf<Caught>(result);
            if (
              caught.name !== "ToolResultTooLarge" ||
              !/^The result of mcp__healthy__big .*tools\.maxResultBytes \(5242880\)/.test(
                caught.message,
              )
            ) {
              problems.push(`${bytes} bytes: ${JSON.stringify(caught)}`);
            }
          }
          const after = await peakRssMb(pid);
          if (after - before >= 400) {
            problems.push(`the server's peak RSS grew from ${before} to ${after} MB`);
          }
          assertReturns(
            await server.runTs('return await callMCPTool("mcp__healthy__big", { bytes: 10 });'),
            "xxxxxxxxxx",
          );
          assertEquals(problems, []);
        },
      );

      await t.step(
        "a sandbox killed from outside is reported as a SandboxCrash naming the signal",
        async () => {
          const running = server.runTs(
            'Deno.writeTextFileSync("running", "1");\nwhile (true) {}',
            { timeoutMs: 60_000 },
          );
          let dir: string | undefined;
          assert(
            await eventually(async () => {
              for (const name of await sandboxDirs(server.tempDir)) {
                const marker = join(server.tempDir, name, "ws", "running");
                if (await Deno.stat(marker).then(() => true, () => false)) dir = name;
              }
              return dir !== undefined;
            }, 10_000),
            "the code never started",
          );
          const pids = [];
          for (const pid of await sandboxPids(server.tempDir, ["ts_runner.ts"])) {
            const cmdline = await Deno.readTextFile(`/proc/${pid}/cmdline`).catch(() => "");
            if (cmdline.includes(dir!)) pids.push(pid);
          }
          assertEquals(pids.length, 1, `sandboxes running in ${dir}: ${pids}`);
          Deno.kill(pids[0], "SIGKILL");
          // The crash itself ends the run: left to its 60 s timeoutMs, it would be a TimeoutError.
          const result = await running;
          assertFails(
            result,
            "SandboxCrash",
            /^The sandbox process was killed by SIGKILL before reporting a result/,
          );
          assertReturns(await server.runTs("return 6 * 7"), 42);
        },
      );
    } finally {
      await t.step("no sandbox or upstream process outlives the server", async () => {
        await closeAndCheck(server);
      });
    }
  } finally {
    await Deno.remove(home, { recursive: true });
  }
});
