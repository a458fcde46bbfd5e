/**
 * What a Python run returns: the value of a last assignment as well as of a last expression, and
 * the same `error.type` as TypeScript for the same condition (exit, a return value too large).
 *
 * @module
 */
import { assertEquals, assertMatch } from "./_assert.ts";
import { LIMITS, withPyChild } from "./_pyodide.ts";
import type { PyChildOptions } from "../src/exec/python/child.ts";
import type { ExecutionResult } from "../src/exec/result.ts";

/** Runs each piece of code in turn in one session child; returns their results. */
function inSession(
  codes: string[],
  options: Partial<PyChildOptions> = {},
): Promise<ExecutionResult[]> {
  return withPyChild({ session: true, ...options }, async (child) => {
    const results: ExecutionResult[] = [];
    for (const code of codes) results.push(await child.run(code, LIMITS));
    return results;
  });
}

Deno.test("PyChild.run() returns the value a last assignment binds, like a last expression", async () => {
  const cases: Array<[string, unknown]> = [
    ["x = 1 + 2", 3],
    ["a = b = 5", 5],
    ["y: int = 4", 4],
    ["x * 10", 30],
    ["n = 1\nn += 1", 2],
    ["import asyncio\nawait asyncio.sleep(0)\nz = x + a", 8],
    ["async def two():\n    return 2\nawaited = await two()", 2],
    ["nothing = None", undefined],
    ["w: int", undefined],
    ["p, q = 1, 2", undefined],
    ["box = {}\nbox['k'] = 1", undefined],
    ["quiet = 7;", undefined],
    ["[x, a, y, n, z, quiet]", [3, 5, 4, 2, 8, 7]],
  ];
  const results = await inSession(cases.map(([code]) => code));
  results.forEach((result, i) => {
    const [code, expected] = cases[i];
    assertEquals(result.error, undefined, `error for ${JSON.stringify(code)}`);
    assertEquals(result.returnValue, expected, `returnValue for ${JSON.stringify(code)}`);
    assertEquals("returnValue" in result, expected !== undefined, JSON.stringify(code));
  });
});

Deno.test("PyChild.run() reports exit(n) as SandboxExit, the type TypeScript reports for Deno.exit(n)", async () => {
  const [three, text, zero, none, after] = await inSession([
    "import sys\nprint('before')\nsys.exit(3)",
    'exit("bye")',
    "exit(0)",
    "x = 1\nexit()",
    "x",
  ], { allowedImports: "*" });
  assertEquals(three.ok, false);
  assertEquals(three.stdout, "before\n");
  assertEquals(three.error?.type, "SandboxExit");
  assertEquals(
    three.error?.message,
    "The code called exit(3) before it finished: end normally or raise an exception instead",
  );
  assertEquals(text.error?.type, "SandboxExit");
  assertMatch(text.error?.message ?? "", /^The code called exit\('bye'\) before it finished/);
  assertEquals([zero.ok, zero.error, none.ok, none.error], [true, undefined, true, undefined]);
  assertEquals(after.returnValue, 1, "exit() ends the run, not the session");
});

Deno.test("PyChild.run() reports a return value past the frame limit as OutputLimitError", async () => {
  const [large, assigned, after] = await inSession([
    '"x" * 7_000_000',
    'big = "y" * 7_000_000',
    "len(big)",
  ]);
  for (const result of [large, assigned]) {
    assertEquals(result.ok, false);
    assertEquals(result.error?.type, "OutputLimitError");
    assertMatch(result.error?.message ?? "", /^Return value too large: .*; return less/);
  }
  assertEquals(after.returnValue, 7_000_000);
});
