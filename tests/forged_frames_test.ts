/**
 * The frame channel does not rest on a secret in the child's memory. TypeScript code can read
 * its runner's nonce (a V8 heap snapshot through `node:v8` needs no permission) and forge any
 * frame with it. The design: the host treats every frame as forged, so a forged frame can do
 * nothing that the code could not do through the API anyway. These tests read the real nonce
 * from the child's heap, forge every frame type, and check that each limit still holds and that
 * nothing reaches another run.
 *
 * @module
 */
import { assert, assertEquals, assertMatch, describeResult as describe } from "./_assert.ts";
import { fixtureServer } from "./_env.ts";
import { eventually, sandboxPids } from "./_proc.ts";
import { startServer } from "./_stdio_server.ts";
import { FIND_NONCE } from "./_heap_nonce.ts";

/**
 * Finds the runner's `nonce` in a heap snapshot of the child's own isolate, and defines
 * `forge(frame)` and `forgeMark()` with it.
 */
const READ_NONCE = `
const nonce: string = await ${FIND_NONCE};
const encoder = new TextEncoder();
const forge = (frame: unknown) =>
  Deno.stdout.writeSync(encoder.encode(nonce + " " + JSON.stringify(frame) + "\\n"));
const forgeMark = () => Deno.stderr.writeSync(encoder.encode("\\0" + nonce + "\\0"));
`;

Deno.test("frames forged with the runner's real nonce do nothing the code could not do", async (t) => {
  const server = await startServer({
    upstream: { fixture: fixtureServer({}) },
    settings: {
      limits: { maxOutputBytes: 100 * 1024 },
      // Output past the cap is kept whole up to outputs.maxBytes: forged output passes both.
      outputs: { maxBytes: 150 * 1024 },
      tools: { maxCallsPerExecution: 3 },
    },
  });
  const run = (code: string, extra: Record<string, unknown> = {}) =>
    server.runTs(READ_NONCE + code, { timeoutMs: 20_000, ...extra });
  try {
    await t.step("a forged result is the run's return value, and ends the run", async () => {
      const result = await run(`
forge({ t: "out", s: "stdout", d: "forged line\\n" });
forge({ t: "result", ok: true, value: "forged" });
await new Promise((resolve) => setTimeout(resolve, 200));
console.log("after the forged result");
return "own";`);
      assertEquals(result.isError, false, describe(result));
      // Exactly what `console.log("forged line"); return "forged"` gives: nothing more.
      assertEquals(result.returnValue, "forged", describe(result));
      assertEquals(result.stdout, "forged line\n", describe(result));
    });

    await t.step("forged output counts against limits.maxOutputBytes", async () => {
      const result = await run(`
for (let i = 0; i < 50; i++) forge({ t: "out", s: i % 2 ? "stderr" : "stdout", d: "x".repeat(10_000) });
return 1;`);
      assertEquals(result.error?.type, "OutputLimitError", describe(result));
      assertEquals(result.truncated, true);
      assert(
        new TextEncoder().encode(result.stdout + result.stderr).length <= 100 * 1024,
        describe(result),
      );
    });

    await t.step("a forged result larger than the cap is refused", async () => {
      const result = await run(`forge({ t: "result", ok: true, value: "x".repeat(200_000) });
await new Promise(() => {});`);
      assertEquals(result.error?.type, "OutputLimitError", describe(result));
      assertEquals(result.returnValue, undefined);
    });

    await t.step("forged tool calls go through the policy and the call cap", async () => {
      const result = await run(
        `
for (let id = 1000; id < 1006; id++) forge({ t: "call", id, op: "call", name: "mcp__fixture__pid", args: {} });
forge({ t: "call", id: 2000, op: "call", name: "mcp__fixture__fail", args: {} });
forge({ t: "call", id: 2001, op: "proxy", server: "fixture", tool: "fail", args: {} });
await new Promise((resolve) => setTimeout(resolve, 2_000));
return "done";`,
        { allowedTools: ["mcp__fixture__pid"] },
      );
      assertEquals(result.returnValue, "done", describe(result));
      const calls = result.toolCalls.map((c) => `${c.name}:${c.ok}`).sort();
      assertEquals(calls, [
        "mcp__fixture__fail:false",
        "mcp__fixture__fail:false",
        "mcp__fixture__pid:false",
        "mcp__fixture__pid:false",
        "mcp__fixture__pid:false",
        "mcp__fixture__pid:true",
        "mcp__fixture__pid:true",
        "mcp__fixture__pid:true",
      ]);
    });

    await t.step("forged ready, unknown and reply frames do not stop the timeout", async () => {
      const result = await run(
        `
forge({ t: "ready" });
forge({ t: "reply", id: 1, ok: true, value: 1 });
forge({ t: "exec", base64: "" });
forge({ t: "nonsense" });
while (true) {}`,
        { timeoutMs: 3_000 },
      );
      assertEquals(result.error?.type, "TimeoutError", describe(result));
    });

    await t.step(
      "forged display frames are checked like display() and capped per run",
      async () => {
        const gif = "R0lGODlhAQABAAAAACw="; // GIF89a, 1x1
        const result = await run(`
forge({ t: "call", id: 3000, op: "display", args: { mimeType: "image/png", data: "${gif}" } });
forge({ t: "call", id: 3001, op: "display", args: { mimeType: "text/html", data: "PGI+" } });
forge({ t: "call", id: 3002, op: "display", args: { mimeType: "image/svg+xml", data: "PGI+" } });
forge({ t: "call", id: 3003, op: "display", args: { mimeType: "image/gif", data: 7 } });
for (let id = 4000; id < 4040; id++) {
  forge({ t: "call", id, op: "display", args: { mimeType: "image/gif", data: "${gif}" } });
}
await new Promise((resolve) => setTimeout(resolve, 500));
return 1;`);
        assertEquals(result.isError, false, describe(result));
        // None of the four malformed images; of the forty GIFs, the 32 a run may show.
        assertEquals(result.images?.length, 32, describe(result));
        assert(result.images?.every((image) => image.mimeType === "image/gif"));
      },
    );

    await t.step("a forged stderr mark loses at most the run's own stderr", async () => {
      const result = await run(`forgeMark();
console.error("after the mark");
return 7;`);
      assertEquals(result.isError, false, describe(result));
      assertEquals(result.returnValue, 7);
      // The forged and the real mark may arrive in one chunk (CI saw the real one leak into
      // stderr before every mark in a chunk was taken out).
      assertMatch(result.stderr, /^(after the mark\n)?$/);
    });

    await t.step("a forging run does not reach a run beside it", async () => {
      const [forger, bystander] = await Promise.all([
        run(`
for (let i = 0; i < 20; i++) forge({ t: "out", s: "stdout", d: "forged " + i + "\\n" });
forge({ t: "result", ok: true, value: "forged" });
await new Promise(() => {});`),
        server.runTs('console.log("b");\nreturn 2;'),
      ]);
      assertEquals(forger.returnValue, "forged", describe(forger));
      assertEquals(bystander.isError, false, describe(bystander));
      assertEquals(bystander.stdout, "b\n");
      assertEquals(bystander.returnValue, 2);
      assertEquals(bystander.toolCalls, []);
    });

    await t.step("no forging child is left running", async () => {
      const settled = await eventually(async () => (await sandboxPids(server.tempDir)).length <= 2);
      assert(settled, `sandboxes left: ${await sandboxPids(server.tempDir)}`);
    });
  } finally {
    await server.close();
  }
});
