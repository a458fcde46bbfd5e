/**
 * Fault tolerance: upstream MCP servers that crash, hang, babble, die at start or answer with too
 * much; sandbox children killed from outside or sending malformed frames; a client that goes
 * away mid-run. Each fault must end in a clear error for the run it hits and leave every other
 * run, and the server, unharmed.
 *
 * The upstream servers are `fixtures/upstream_fixture.ts` in its misbehaving modes; the hostile
 * sandbox is `fixtures/hostile_runner.ts`.
 *
 * @module
 */
import { Client } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { join } from "node:path";
import {
  assert,
  assertEquals,
  assertFails,
  assertMatch,
  assertReturns,
  describeResult as describe,
  type RunResult,
} from "./_assert.ts";
import {
  assertNoSandboxes,
  closeAndCheck,
  denoDir,
  eventually,
  exitOrKill,
  fixtureServer,
  initializeRequest,
  isAlive,
  leftovers,
  pidsWithEnv,
  ROOT,
  sandboxDirs,
  sandboxPids,
  serverEnv,
  type ServerHarness,
  serverPid,
  spawnServe,
  startServer,
  waitForExit,
  writeMcpConfig,
} from "./_helpers.ts";
import { statusMb } from "../bench/_common.ts";
import type { Logger } from "../src/log.ts";
import { type ExecuteOptions, SandboxProcess } from "../src/exec/sandbox_process.ts";
import type { ExecutionResult } from "../src/exec/result.ts";

const DENO = Deno.execPath();
const HOSTILE_RUNNER = join(ROOT, "tests", "fixtures", "hostile_runner.ts");
const MiB = 1024 * 1024;
/** tools.callTimeoutMs for the servers under test; the `hang` server's own `timeout` is lower. */
const CALL_TIMEOUT_MS = 2_500;
const HANG_TIMEOUT_MS = 1_500;
/** The longest a cheap request may wait while the server digests a fault elsewhere. */
const MAX_LAG_MS = 1_000;

function fixtureEntry(
  pidFile: string,
  env: Record<string, string> = {},
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return fixtureServer({ FIXTURE_PID_FILE: pidFile, FIXTURE_FAULTS: "1", ...env }, extra);
}

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

interface Caught {
  name: string;
  message: string;
  ms: number;
}

/** Peak resident memory of a process, in MB. */
async function peakRssMb(pid: number): Promise<number> {
  return Math.round((await statusMb(pid)).VmHWM);
}

/**
 * Sends `tools/list` over and over until `during` settles, and returns the slowest answer's
 * time: how long the server was unable to serve anyone else.
 */
async function worstLatency(server: ServerHarness, during: Promise<unknown>): Promise<number> {
  let settled = false;
  during.then(() => settled = true, () => settled = true);
  let worst = 0;
  while (!settled) {
    const started = performance.now();
    await server.client.listTools();
    worst = Math.max(worst, performance.now() - started);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return Math.round(worst);
}

async function readPid(file: string): Promise<number> {
  assert(
    await eventually(() => Deno.stat(file).then(() => true, () => false), 15_000),
    `${file} was never written`,
  );
  return Number(await Deno.readTextFile(file));
}

Deno.test("faulty upstream servers fail only the calls that reach them", async (t) => {
  const home = await Deno.makeTempDir({ prefix: "ce-faults-home-" });
  const pidFile = (name: string) => join(home, `${name}.pid`);
  try {
    const server = await startServer({
      home,
      upstream: {
        healthy: fixtureEntry(pidFile("healthy"), {}, { timeout: 30_000 }),
        crashy: fixtureEntry(pidFile("crashy")),
        hang: fixtureEntry(pidFile("hang"), {}, { timeout: HANG_TIMEOUT_MS }),
        garbage: fixtureEntry(
          pidFile("garbage"),
          { FIXTURE_MODE: "garbage" },
          { timeout: HANG_TIMEOUT_MS },
        ),
        dead: fixtureEntry(pidFile("dead"), { FIXTURE_MODE: "exit" }),
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
          assertEquals(crashed.isError, false, describe(crashed));
          const caught = crashed.returnValue as Caught;
          assertEquals(caught.name, "ToolCallError", describe(crashed));
          assertMatch(caught.message, /"crashy"/, describe(crashed));
          assertMatch(caught.message, /broke|closed|exited/i, describe(crashed));
          assert(caught.ms < 5_000, `the crash was noticed after ${caught.ms} ms`);
          assertEquals(other.isError, false, describe(other));
          const value = other.returnValue as { thing: string; ms: number };
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
          const hanging = server.runTs([
            `const failure = ${tryCall("mcp__hang__hang")};`,
            'const after = await callMCPTool("mcp__hang__Get-Thing.v2", { id: "after" });',
            "return { failure, after };",
          ].join("\n"));
          assert(
            await eventually(() =>
              Deno.stat(`${pidFile("hang")}.hang`).then(() => true, () => false)
            ),
            "the hanging call never reached the upstream",
          );
          // Meanwhile another run is not held up: it is answered while the call still hangs.
          let hangSettled = false;
          hanging.then(() => hangSettled = true, () => hangSettled = true);
          const started = performance.now();
          assertReturns(
            await server.runTs(
              'return await callMCPTool("mcp__healthy__Get-Thing.v2", { id: "c" });',
            ),
            "thing c",
          );
          const otherMs = performance.now() - started;
          const healthyFirst = !hangSettled;
          const result = await hanging;
          assertEquals(result.isError, false, describe(result));
          const value = result.returnValue as { failure: Caught; after: string };
          assertEquals(value.failure.name, "ToolCallError", describe(result));
          assertMatch(
            value.failure.message,
            new RegExp(`"hang" did not answer within ${HANG_TIMEOUT_MS} ms`),
          );
          assert(
            value.failure.ms >= HANG_TIMEOUT_MS && value.failure.ms < HANG_TIMEOUT_MS + 2_000,
            describe(result),
          );
          assert(healthyFirst, `a healthy run took ${Math.round(otherMs)} ms during the hang`);
          assertEquals(value.after, "thing after", "the hanging server stopped serving");
          assertEquals(result.toolCalls.map((c) => c.ok), [false, true]);
        },
      );

      await t.step("tools.callTimeoutMs applies to a server without its own timeout", async () => {
        const result = await server.runTs(`return ${tryCall("mcp__crashy__hang")};`);
        assertEquals(result.isError, false, describe(result));
        const caught = result.returnValue as Caught;
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
          const result = await server.runTs([
            `const failure = ${tryCall("mcp__garbage__babble")};`,
            'const after = await callMCPTool("mcp__garbage__Get-Thing.v2", { id: "e" });',
            "return { failure, after };",
          ].join("\n"));
          assertEquals(result.isError, false, describe(result));
          const value = result.returnValue as { failure: Caught; after: string };
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
          const result = await server.runTs([
            `const failure = ${tryCall("mcp__garbage__forge")};`,
            'const after = await callMCPTool("mcp__garbage__Get-Thing.v2", { id: "f" });',
            "return { failure, after };",
          ].join("\n"));
          assertEquals(result.isError, false, describe(result));
          const value = result.returnValue as { failure: Caught; after: string };
          assertEquals(value.failure.name, "ToolCallError", describe(result));
          assertMatch(value.failure.message, /"garbage"/, describe(result));
          assert(
            value.failure.ms < HANG_TIMEOUT_MS,
            `the forged answer was not noticed: ${describe(result)}`,
          );
          assertEquals(value.after, "thing f");
        },
      );

      await t.step(
        "an upstream that floods its stdout without a newline fails the call, then reconnects",
        async () => {
          const before = await readPid(pidFile("garbage"));
          const flooding = server.runTs([
            `const failure = ${tryCall("mcp__garbage__flood", { bytes: 12 * MiB })};`,
            `const after = ${tryCall("mcp__garbage__Get-Thing.v2", { id: "g" })};`,
            "return { failure, after };",
          ].join("\n"));
          const lagMs = await worstLatency(server, flooding);
          const result = await flooding;
          assertEquals(result.isError, false, describe(result));
          const value = result.returnValue as { failure: Caught; after: Caught };
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
          if (lagMs >= MAX_LAG_MS) problems.push(`tools/list took ${lagMs} ms during the flood`);
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
          assertEquals(result.isError, false, describe(result));
          const value = result.returnValue as { first: Caught; second: Caught; thing: string };
          assertEquals(value.first.name, "ToolCallError", describe(result));
          assertMatch(
            value.first.message,
            /^Server "dead" is unavailable: the process exited during start-up .*run ".*upstream_fixture\.ts" by hand to see why/,
          );
          assertMatch(value.second.message, /^Server "dead" is unavailable: /);
          assertEquals(value.thing, "thing h");
          const search = await server.client.callTool({
            name: "search_tools",
            arguments: { query: "thing", detail: "names" },
          });
          const text = (search.content as Array<{ text: string }>).map((b) => b.text).join("\n");
          assertMatch(text, /^mcp__healthy__Get-Thing\.v2$/m);
          assertMatch(text, /^\/\/ Server "dead" is unavailable: the process exited/m);
          const { tools } = await server.client.listTools();
          const description = tools.find((tool) => tool.name === "run_typescript")?.description;
          assertMatch(description ?? "", /\bdead \(down\)/);
        },
      );

      await t.step(
        "a result over tools.maxResultBytes is refused, naming the setting; the host stays responsive",
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
            const lagMs = await worstLatency(server, big);
            assertReturns(await parallel, 2);
            const result = await big;
            assertEquals(result.isError, false, describe(result));
            const caught = result.returnValue as Caught;
            if (
              caught.name !== "ToolResultTooLarge" ||
              !/^The result of mcp__healthy__big .*tools\.maxResultBytes \(5242880\)/.test(
                caught.message,
              )
            ) {
              problems.push(`${bytes} bytes: ${JSON.stringify(caught)}`);
            }
            if (lagMs >= MAX_LAG_MS) {
              problems.push(`${bytes} bytes: tools/list took ${lagMs} ms meanwhile`);
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
          const killedAt = performance.now();
          Deno.kill(pids[0], "SIGKILL");
          const result = await running;
          const waited = performance.now() - killedAt;
          assertFails(
            result,
            "SandboxCrash",
            /^The sandbox process was killed by SIGKILL before reporting a result/,
          );
          assert(waited < 2_000, `the crash was reported ${Math.round(waited)} ms after the kill`);
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

// The frame channel caps one frame at 8 MiB. User code cannot write frames itself (it never sees
// the nonce; security_test.ts tries), but what it prints or returns travels in the runner's
// frames, so it can make the runner send frames of any size.
Deno.test("oversized prints and return values are kept whole, or fail their run clearly", async (t) => {
  const server = await startServer();
  try {
    await t.step(
      "one console.log larger than the frame limit is kept whole, not a protocol error",
      async () => {
        const result = await server.runTs(
          'console.log("x".repeat(9 * 1024 * 1024));\nreturn 1;',
        );
        assertReturns(result, 1);
        assertEquals(result.truncated, true, describe(result));
        assertEquals(result.outputs?.map((o) => [o.part, o.bytes]), [
          ["stdout", 9 * 1024 * 1024 + 1],
        ]);
        assertReturns(await server.runTs("return 1"), 1);
      },
    );

    await t.step(
      "a return value too large to send is refused with a message about its size, and a smaller one past the cap is kept",
      async () => {
        // 9 MiB passes the frame limit.
        let result: RunResult;
        try {
          result = await server.runTs(`return "x".repeat(9 * 1024 * 1024);`);
        } catch (error) {
          throw new Error(`The client lost the connection over a 9 MiB return value: ${error}`);
        }
        assertEquals(result.isError, true, describe(result));
        assertMatch(result.error?.message ?? "", /return/i, describe(result));
        assert(
          !/stdout directly/.test(result.error?.message ?? ""),
          `the code is blamed for writing to stdout: ${describe(result)}`,
        );
        assertEquals(result.returnValue, undefined);
        // 6 MiB does not, but its response would pass the 10 MiB message limit of SDK clients (the
        // value twice: structuredContent and text): it is kept whole and named instead.
        const kept = await server.runTs(`return "x".repeat(6 * 1024 * 1024);`);
        assertEquals([kept.ok, kept.returnValue], [true, undefined], describe(kept));
        assertEquals(kept.outputs?.map((o) => [o.part, o.bytes]), [
          ["returnValue", 6 * 1024 * 1024 + 2],
        ]);
        assertReturns(await server.runTs("return 2"), 2);
      },
    );
  } finally {
    await server.close();
  }
});

interface HostileCase {
  /** The scenario of `fixtures/hostile_runner.ts`. */
  scenario: string;
  /** Checks the run's result, and the requests the host answered. */
  check(result: ExecutionResult, requests: Array<Record<string, unknown>>): void;
}

function expectProtocolError(message: RegExp): HostileCase["check"] {
  return (result) => {
    assertEquals(result.ok, false, describe(result));
    assertEquals(result.error?.type, "SandboxProtocolError", describe(result));
    assertMatch(result.error?.message ?? "", message, describe(result));
    assertEquals(result.returnValue, undefined, describe(result));
  };
}

const HOSTILE_CASES: HostileCase[] = [
  {
    scenario: "polite",
    check(result, requests) {
      assertEquals(result.ok, true, describe(result));
      assertEquals(result.returnValue, "pong");
      assertEquals(requests.map((r) => r.id), [1]);
    },
  },
  {
    scenario: "non-number ids",
    check(result, requests) {
      assertEquals(result.ok, true, describe(result));
      assertEquals(result.returnValue, "pong");
      assertEquals(requests.map((r) => r.query), ["good id"], "a request without an id was served");
    },
  },
  {
    scenario: "unknown frames",
    check(result, requests) {
      assertEquals(result.ok, true, describe(result));
      assertEquals(result.returnValue, "survived");
      assertEquals(result.stdout, "kept\n");
      assertEquals(requests, []);
    },
  },
  {
    scenario: "huge d",
    check(result) {
      assertEquals(result.error?.type, "OutputLimitError", describe(result));
      assertMatch(result.error?.message ?? "", /limits\.maxOutputBytes \(102400 bytes\)/);
      assertEquals(result.truncated, true);
      assertEquals(result.stdout, "d".repeat(100 * 1024));
    },
  },
  {
    scenario: "oversized frame",
    check: expectProtocolError(/^The sandbox sent a frame larger than 8388608 bytes/),
  },
  {
    scenario: "oversized without a newline",
    check: expectProtocolError(/^The sandbox sent a frame larger than 8388608 bytes/),
  },
  { scenario: "invalid JSON", check: expectProtocolError(/not valid JSON/) },
  { scenario: "invalid UTF-8", check: expectProtocolError(/not valid JSON/) },
  { scenario: "a JSON array", check: expectProtocolError(/not a JSON object/) },
  {
    scenario: "deep nesting",
    check(result) {
      // V8 parses deep nesting or refuses it with a RangeError; either way the host goes on.
      if (result.ok) assertEquals(result.returnValue, "survived");
      else expectProtocolError(/not valid JSON/)(result, []);
    },
  },
  {
    scenario: "NUL bytes",
    check(result) {
      expectProtocolError(/not valid JSON/)(result, []);
      assertEquals(result.stdout, "a\0b\n");
    },
  },
  {
    scenario: "half a frame, then exit",
    check: expectProtocolError(/bytes to its frame channel that are not a frame/),
  },
  {
    scenario: "result with wrong types",
    check(result) {
      assertEquals(result.ok, false, describe(result));
      assertEquals(result.error, { type: "Error", message: "The code failed without a message" });
      assertEquals(result.returnValue, undefined);
    },
  },
  {
    scenario: "result with a huge error",
    check(result) {
      assertEquals(result.ok, false, describe(result));
      assertEquals(result.error?.type, "T".repeat(100));
      // Error text is capped (16 KiB), so that it stays within the result's fixed allowance.
      assertEquals(result.error?.message, "m".repeat(16 * 1024));
      assertEquals(result.error?.traceback, undefined);
    },
  },
];

Deno.test("SandboxProcess.execute() turns malformed and oversized frames into errors of that run only", async () => {
  const tempRoot = await Deno.makeTempDir({ prefix: "ce-hostile-" });
  const logged: string[] = [];
  const log: Logger = {
    debug: (message) => logged.push(message),
    info: (message) => logged.push(message),
    warn: (message) => logged.push(message),
    error: (message) => logged.push(message),
  };
  try {
    const runs = HOSTILE_CASES.map(async ({ scenario, check }) => {
      const child = await SandboxProcess.start({
        denoPath: DENO,
        tempRoot,
        denoDir: denoDir(),
        args: () => [HOSTILE_RUNNER, scenario],
        memoryMb: 512,
        log,
      });
      try {
        await child.send({ t: "init", nonce: child.nonce });
        assertEquals(await child.next(), { t: "ready" }, scenario);
        const requests: Array<Record<string, unknown>> = [];
        const options: ExecuteOptions = {
          timeoutMs: 20_000,
          maxOutputBytes: 100 * 1024,
          printHint: "console.log",
          onRequest: (frame) => {
            requests.push(frame);
            return Promise.resolve({ ok: true, value: "pong" });
          },
        };
        const started = performance.now();
        const result = await child.execute({ t: "exec" }, options);
        const elapsed = performance.now() - started;
        return { scenario, check, result, requests, elapsed };
      } finally {
        await child.dispose();
      }
    });
    const failures: string[] = [];
    for (const { scenario, check, result, requests, elapsed } of await Promise.all(runs)) {
      try {
        check(result, requests);
        assert(elapsed < 15_000, `took ${Math.round(elapsed)} ms`);
      } catch (error) {
        failures.push(`${scenario}: ${(error as Error).message}`);
      }
    }
    assertEquals(failures, []);
    // DESIGN.md: unknown frames are dropped and logged.
    assert(
      logged.some((line) => /frame/i.test(line)),
      `dropped frames were not logged: ${JSON.stringify(logged)}`,
    );
    assertEquals(await leftovers(tempRoot), [], "sandbox directories were left behind");
  } finally {
    await Deno.remove(tempRoot, { recursive: true });
  }
});

Deno.test("serve kills every child and exits when the client disconnects mid-run", async () => {
  const home = await Deno.makeTempDir({ prefix: "ce-disconnect-" });
  const tempDir = join(home, "tmp");
  await Deno.mkdir(tempDir);
  const hangPid = join(home, "upstream.pid");
  try {
    const config = await writeMcpConfig(home, { upstream: fixtureEntry(hangPid) });
    const transport = new StdioClientTransport({
      command: DENO,
      args: ["run", "-A", "main.ts", "serve", "--config", config],
      cwd: ROOT,
      env: serverEnv(tempDir, { home }),
      stderr: "pipe",
    });
    transport.stderr?.on("data", () => {});
    const client = new Client({ name: "disconnect-test", version: "1.0.0" });
    await client.connect(transport);
    const serverProcess = transport.pid!;
    const busy = client.callTool({
      name: "run_typescript",
      arguments: { code: "while (true) {}", timeoutMs: 120_000 },
    }).catch((error: Error) => error);
    const waiting = client.callTool({
      name: "run_typescript",
      arguments: { code: 'await callMCPTool("mcp__upstream__hang");', timeoutMs: 120_000 },
    }).catch((error: Error) => error);
    const upstream = await readPid(hangPid);
    assert(
      await eventually(() => Deno.stat(`${hangPid}.hang`).then(() => true, () => false), 15_000),
      "the upstream call never started",
    );
    // The two running children (taken from the warm pool, or spawned when it was not ready yet;
    // any idle ones are checked with the rest below). On failure, close the client first, so
    // that the server shuts down and kills the endless child.
    const started = await eventually(
      async () => (await sandboxPids(tempDir)).length >= 2,
      30_000,
    );
    if (!started) {
      const seen = await sandboxPids(tempDir);
      await client.close();
      await Promise.all([busy, waiting]);
      assert(false, `sandboxes: ${seen}`);
    }

    const closing = performance.now();
    await client.close();
    const closeMs = performance.now() - closing;
    const leftBehind = async () => ({
      server: await isAlive(serverProcess) ? [serverProcess] : [],
      upstream: await isAlive(upstream) ? [upstream] : [],
      sandboxes: await sandboxPids(tempDir),
      withTmp: await pidsWithEnv(`TMPDIR=${tempDir}`),
      dirs: await sandboxDirs(tempDir),
    });
    const clean = await eventually(
      async () => Object.values(await leftBehind()).every((list) => list.length === 0),
      10_000,
    );
    assert(clean, `left after the client went away: ${JSON.stringify(await leftBehind())}`);
    // The client waits 2 s for the server to exit on end of input before it sends SIGTERM.
    assert(closeMs < 2_000, `the server did not exit by itself (${Math.round(closeMs)} ms)`);
    assert((await busy) instanceof Error, "the busy run was answered after the disconnect");
    assert((await waiting) instanceof Error, "the waiting run was answered after the disconnect");
  } finally {
    await Deno.remove(home, { recursive: true });
  }
});

/** Code that marks its workspace once it runs, then never ends. */
const ENDLESS_CODE = 'Deno.writeTextFileSync("started", ""); while (true) {}';

/** The private directory of the sandbox running {@linkcode ENDLESS_CODE}, if one is. */
async function endlessRunDir(tempDir: string): Promise<string | undefined> {
  for (const dir of await sandboxDirs(tempDir)) {
    if (await Deno.stat(join(tempDir, dir, "ws", "started")).then(() => true, () => false)) {
      return dir;
    }
  }
  return undefined;
}

Deno.test("serve survives a client that vanishes without reading its answers", async () => {
  const home = await Deno.makeTempDir({ prefix: "ce-vanish-" });
  const tempDir = join(home, "tmp");
  await Deno.mkdir(tempDir);
  try {
    const { child, stderr, writer, send } = spawnServe(tempDir, { home });
    const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
    await send(initializeRequest("vanishing"));
    let seen = "";
    while (!seen.includes('"id":1')) {
      const { value, done } = await reader.read();
      if (done) break;
      seen += value;
    }
    assertMatch(seen, /"serverInfo"/);
    await send({ jsonrpc: "2.0", method: "notifications/initialized" });
    // A run that finishes while nobody reads, one that prints a lot, and one that never ends
    // (and says, in its workspace, that it has started).
    for (
      const [id, code] of [[2, "return 1"], [3, 'console.log("z".repeat(90_000))'], [
        4,
        ENDLESS_CODE,
      ]] as const
    ) {
      await send({
        jsonrpc: "2.0",
        id,
        method: "tools/call",
        params: { name: "run_typescript", arguments: { code, timeoutMs: 60_000 } },
      });
    }
    // Checked after the shutdown, so that a failure does not leave the server running.
    const ran = await eventually(async () => (await endlessRunDir(tempDir)) !== undefined, 30_000);
    await reader.cancel();
    await writer.close();
    const status = await exitOrKill(child);
    const log = await stderr;
    await child.status;
    assert(ran, `the endless run did not start:\n${log}`);
    assert(status, `the server did not exit after the client vanished:\n${log}`);
    assertEquals(status.code, 0, log);
    await assertNoSandboxes(tempDir);
  } finally {
    await Deno.remove(home, { recursive: true });
  }
});

Deno.test("serve keeps enforcing timeouts while a client is not reading its stdout", async () => {
  const home = await Deno.makeTempDir({ prefix: "ce-stall-" });
  const tempDir = join(home, "tmp");
  await Deno.mkdir(tempDir);
  const { child, stderr, writer, send } = spawnServe(tempDir, {
    home,
    env: { CODE_EXECUTOR_WARM_POOL: "0" },
  });
  const reader = child.stdout.getReader();
  let status: Deno.CommandStatus | undefined;
  let reached = false;
  try {
    await send(initializeRequest("stalled"));
    const first = await reader.read();
    assert(!first.done && first.value.length > 0, "no answer to initialize");
    await send({ jsonrpc: "2.0", method: "notifications/initialized" });
    // Answers bigger than a pipe's buffer fill stdout, which nobody reads from now on; the
    // endless run must still be killed at its timeout.
    for (let id = 2; id < 6; id++) {
      await send({
        jsonrpc: "2.0",
        id,
        method: "tools/call",
        params: {
          name: "run_typescript",
          arguments: { code: 'console.log("z".repeat(90_000))', timeoutMs: 20_000 },
        },
      });
    }
    await send({
      jsonrpc: "2.0",
      id: 6,
      method: "tools/call",
      params: {
        name: "run_typescript",
        arguments: { code: ENDLESS_CODE, timeoutMs: 1_000 },
      },
    });
    assert(
      await eventually(async () => (await endlessRunDir(tempDir)) !== undefined, 30_000),
      "no start",
    );
    assert(
      await eventually(async () => (await endlessRunDir(tempDir)) === undefined, 15_000),
      "the endless run outlived its timeout while stdout was full",
    );
    reached = true;
  } finally {
    await writer.close().catch(() => {});
    status = await exitOrKill(child);
    await reader.cancel();
    await child.status;
    await stderr;
    if (!reached) await Deno.remove(home, { recursive: true });
  }
  try {
    assert(status, "the server did not exit when stdin closed with stdout full");
    await assertNoSandboxes(tempDir);
  } finally {
    await Deno.remove(home, { recursive: true });
  }
});
