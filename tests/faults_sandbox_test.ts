/**
 * Fault tolerance of the frame channel: prints and return values past the frame limit, and a
 * hostile sandbox (`fixtures/hostile_runner.ts`) that sends malformed and oversized frames. Each
 * must end in a clear error for its own run only.
 *
 * @module
 */
import { join } from "node:path";
import {
  assert,
  assertEquals,
  assertMatch,
  assertReturns,
  describeResult as describe,
  type RunResult,
} from "./_assert.ts";
import { denoDir, ROOT } from "./_env.ts";
import { leftovers } from "./_proc.ts";
import { startServer } from "./_stdio_server.ts";
import type { Logger } from "../src/log.ts";
import type { ExecuteOptions } from "../src/exec/child/execution.ts";
import { SandboxProcess } from "../src/exec/child/process.ts";
import type { ExecutionResult } from "../src/exec/result.ts";

const DENO = Deno.execPath();
const HOSTILE_RUNNER = join(ROOT, "tests", "fixtures", "hostile_runner.ts");

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
        // Far beyond what any scenario takes: every check below refuses the TimeoutError this
        // would give, so each run was ended by the frame it sent.
        const options: ExecuteOptions = {
          timeoutMs: 60_000,
          maxOutputBytes: 100 * 1024,
          printHint: "console.log",
          onRequest: (frame) => {
            requests.push(frame);
            return Promise.resolve({ ok: true, value: "pong" });
          },
        };
        const result = await child.execute({ t: "exec" }, options);
        return { scenario, check, result, requests };
      } finally {
        await child.dispose();
      }
    });
    const failures: string[] = [];
    for (const { scenario, check, result, requests } of await Promise.all(runs)) {
      try {
        check(result, requests);
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
