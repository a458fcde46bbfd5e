/**
 * Big results stay out of the context but are not lost: a part of a result past
 * `limits.maxOutputBytes` comes back as a preview and a `resource_link`, its whole text is kept
 * for the run's principal (bounded in total and in age), and `resources/read` or a later run
 * (`readOutput` / `read_output`) reads it; another principal cannot.
 *
 * @module
 */
import { join } from "node:path";
import type { Client } from "@modelcontextprotocol/client";
import { assert, assertEquals, assertMatch, describeResult, type RunResult } from "./_assert.ts";
import { withTempDir } from "./_fs.ts";
import { type ServerHarness, startServer } from "./_stdio_server.ts";
import { startHttpServer } from "./_http_server.ts";
import { callRun, connect } from "./_client.ts";
import { OutputBudget, OutputCapture } from "../src/exec/child/frames.ts";
import { keepParts, type KeptOutput, OutputStore, RunOutputs } from "../src/exec/output_store.ts";

const MAX_OUTPUT_BYTES = 100 * 1024;
/** The result's fixed allowance over maxOutputBytes (tests/bounds_test.ts). */
const ALLOWANCE_BYTES = 64 * 1024;
const MB20 = 20 * 1024 * 1024;

type ToolResult = Awaited<ReturnType<Client["callTool"]>>;

async function callTool(client: Client, name: string, code: string): Promise<{
  raw: ToolResult;
  result: RunResult;
}> {
  const raw = await client.callTool({ name, arguments: { code, timeoutMs: 120_000 } }, {
    timeout: 180_000,
  });
  return {
    raw,
    result: { ...(raw.structuredContent as unknown as RunResult), isError: raw.isError === true },
  };
}

function links(raw: ToolResult): Array<Record<string, unknown>> {
  return (raw.content as Array<Record<string, unknown>>).filter((c) => c.type === "resource_link");
}

function utf8Bytes(text: string): number {
  return new TextEncoder().encode(text).length;
}

async function readText(client: Client, uri: string): Promise<string> {
  const read = await client.readResource({ uri }, { timeout: 60_000 });
  const content = read.contents[0] as { text?: string };
  return content.text ?? "";
}

async function readError(client: Client, uri: string): Promise<string> {
  try {
    await client.readResource({ uri });
  } catch (error) {
    return (error as Error).message;
  }
  throw new Error(`resources/read of ${uri} did not fail`);
}

Deno.test("a 20 MB stdout comes back as a capped preview and a resource_link; resources/read, readOutput and read_output return all of it", async () => {
  const server = await startServer({
    settings: { limits: { maxOutputBytes: MAX_OUTPUT_BYTES } },
    // resources/read answers with the whole text in one message, past the SDK's default 10 MiB.
    maxBufferSize: 64 * 1024 * 1024,
  });
  try {
    const { raw, result } = await callTool(
      server.client,
      "run_typescript",
      `console.log("x".repeat(${MB20}));\nconsole.error("a warning");\nreturn 42;`,
    );
    assertEquals(result.ok, true, describeResult(result));
    assertEquals(result.returnValue, 42);
    // The small parts are whole; the big one is a preview within the cap.
    assertEquals(result.stderr, "a warning\n");
    assert(result.stdout.length > 0 && /^x+$/.test(result.stdout), "a preview of x's");
    assert(utf8Bytes(result.stdout) + utf8Bytes(result.stderr) + 2 <= MAX_OUTPUT_BYTES);
    assert(
      utf8Bytes(JSON.stringify(raw)) <= 2 * MAX_OUTPUT_BYTES + ALLOWANCE_BYTES,
      `response of ${utf8Bytes(JSON.stringify(raw))} bytes`,
    );
    assertEquals(result.truncated, true);
    const [kept] = result.outputs as KeptOutput[];
    assertEquals(result.outputs?.length, 1);
    assertEquals([kept.part, kept.bytes], ["stdout", MB20 + 1]);
    assertEquals(kept.uri, `code-executor://output/${kept.id}`);
    assertEquals(links(raw).map((l) => [l.uri, l.size, l.mimeType]), [
      [kept.uri, MB20 + 1, "text/plain"],
    ]);
    // Clients that read only the text block are told where the rest is, and how to read it.
    const text0 = (raw.content as Array<{ text?: string }>)[0].text ?? "";
    assertMatch(
      text0,
      new RegExp(
        `\\[stdout kept whole: ${
          MB20 + 1
        } bytes, ${kept.uri}; a later run reads it with readOutput\\("${kept.id}"\\) / read_output`,
      ),
    );

    const text = await readText(server.client, kept.uri);
    assertEquals(text.length, MB20 + 1);
    assertEquals(text, "x".repeat(MB20) + "\n");
    const listed = await server.client.listResources();
    assertEquals(listed.resources.map((r) => r.uri), [kept.uri]);

    const ts = await server.runTs(
      `const text = await readOutput(${JSON.stringify(kept.id)});\n` +
        `return { length: text.length, same: text === "x".repeat(${MB20}) + "\\n" };`,
    );
    assertEquals(ts.returnValue, { length: MB20 + 1, same: true }, describeResult(ts));
    const py = await server.runPy(
      `text = await read_output(${JSON.stringify(kept.uri)})\n[len(text), text.count("x")]`,
    );
    assertEquals(py.returnValue, [MB20 + 1, MB20], describeResult(py));

    const missing = await server.runTs(
      `try { await readOutput("no-such-id"); } catch (e) { return [e.name, e.message]; }`,
    );
    assertEquals((missing.returnValue as string[])[0], "OutputNotFound", describeResult(missing));
    assertMatch(
      await readError(server.client, "code-executor://output/no-such-id"),
      /No kept output/,
    );
  } finally {
    await server.close();
  }
});

Deno.test("a return value past the cap is kept as JSON and named instead of failing the run", async () => {
  const server = await startServer({ settings: { limits: { maxOutputBytes: MAX_OUTPUT_BYTES } } });
  try {
    const { raw, result } = await callTool(
      server.client,
      "run_typescript",
      `return Array.from({ length: 100_000 }, (_, i) => i);`,
    );
    assertEquals(result.ok, true, describeResult(result));
    assertEquals(result.returnValue, undefined);
    const [kept] = result.outputs as KeptOutput[];
    assertEquals(kept.part, "returnValue");
    assertEquals(links(raw)[0].mimeType, "application/json");
    const value = JSON.parse(await readText(server.client, kept.uri));
    assertEquals([value.length, value[99_999]], [100_000, 99_999]);

    // A kept stderr names the code's own lines, as a shown one does.
    const traced = await server.runTs(
      `console.error(new Error("boom").stack);\nconsole.error("e".repeat(200_000));`,
    );
    const stderr = (traced.outputs ?? []).find((o) => o.part === "stderr");
    assert(stderr, describeResult(traced));
    const whole = await readText(server.client, stderr.uri);
    assertMatch(whole, /^Error: boom\n\s+at .*code\.ts:1:15/);
    assert(!whole.includes("data:application"), whole.slice(0, 500));
    assertMatch(traced.stderr, /^Error: boom\n\s+at .*code\.ts:1:15/);

    // Python's print and last expression are kept the same way.
    const py = await server.runPy(`print("p" * 3_000_000)\nlist(range(100_000))`);
    assertEquals(py.ok, true, describeResult(py));
    assertEquals(py.outputs?.map((o) => [o.part, o.bytes]), [
      ["stdout", 3_000_001],
      ["returnValue", utf8Bytes(JSON.stringify(value))],
    ]);
    assert(utf8Bytes(py.stdout) <= MAX_OUTPUT_BYTES);
    assertEquals(
      (await readText(server.client, py.outputs![0].uri)).length,
      3_000_001,
    );
  } finally {
    await server.close();
  }
});

async function keptBy(server: ServerHarness, bytes: number): Promise<KeptOutput> {
  const result = await server.runTs(`console.log("y".repeat(${bytes - 1}));`);
  assertEquals(result.ok, true, describeResult(result));
  return (result.outputs as KeptOutput[])[0];
}

async function totalListed(client: Client): Promise<number> {
  const listed = await client.listResources();
  return listed.resources.reduce((sum, r) => sum + (r.size ?? 0), 0);
}

Deno.test("kept outputs never pass outputs.maxTotalBytes (the oldest go first), one past outputs.maxBytes stops the run, and all are gone after outputs.ttlMs", async () => {
  const MB = 1_000_000;
  const ttlMs = 6_000;
  const server = await startServer({
    settings: {
      limits: { maxOutputBytes: MAX_OUTPUT_BYTES },
      outputs: { maxBytes: 2 * MB, maxTotalBytes: 2.5 * MB, ttlMs },
    },
  });
  try {
    const first = await keptBy(server, MB);
    const second = await keptBy(server, MB);
    assert(await totalListed(server.client) <= 2.5 * MB);
    const third = await keptBy(server, MB);
    assertEquals(await totalListed(server.client), 2 * MB);
    // The oldest was dropped to make room; the others are whole.
    assertMatch(await readError(server.client, first.uri), /No kept output/);
    assertEquals((await readText(server.client, second.uri)).length, MB);
    assertEquals((await readText(server.client, third.uri)).length, MB);

    const tooBig = await server.runTs(`console.log("z".repeat(${3 * MB}));`);
    assertEquals(tooBig.error?.type, "OutputLimitError", describeResult(tooBig));
    assertMatch(tooBig.error?.message ?? "", /outputs\.maxBytes \(2000000 bytes\)/);
    assert(await totalListed(server.client) <= 2.5 * MB);

    await new Promise((resolve) => setTimeout(resolve, ttlMs + 500));
    assertMatch(await readError(server.client, third.uri), /No kept output/);
    assertEquals((await server.client.listResources()).resources, []);
    const late = await server.runPy(
      `try:\n    await read_output(${
        JSON.stringify(third.id)
      })\nexcept ToolCallError as e:\n    r = [type(e).__name__, str(e)]\nr`,
    );
    const [name, message] = late.returnValue as string[];
    assertEquals(name, "OutputNotFound", describeResult(late));
    assertMatch(message, /No kept output/);
  } finally {
    await server.close();
  }
});

Deno.test("OutputStore: reservations and kept outputs together never pass maxTotalBytes", () => {
  const store = new OutputStore({ maxBytes: 400, maxTotalBytes: 1000, ttlMs: 60_000 });
  try {
    const runs = Array.from({ length: 5 }, (_, i) => new RunOutputs(store, `p${i % 2}`));
    let seed = 7;
    const random = () => (seed = (seed * 48271) % 2147483647) / 2147483647;
    for (let step = 0; step < 2000; step++) {
      const run = runs[Math.floor(random() * runs.length)];
      const bytes = Math.floor(random() * 300);
      if (random() < 0.7) {
        if (run.reserve(bytes) && random() < 0.5) run.keep("stdout", "x".repeat(bytes), bytes);
      } else run.release();
      assert(store.usedBytes <= 1000, `step ${step}: ${store.usedBytes} bytes held`);
    }
    for (const run of runs) run.release();
    const kept = store.list("p0").concat(store.list("p1"));
    assertEquals(store.usedBytes, kept.reduce((sum, k) => sum + k.bytes, 0));
  } finally {
    store.close();
  }
});

Deno.test("OutputCapture with a reserve keeps a stream past the budget whole, and keepParts shows both under the cap", async () => {
  const store = new OutputStore({ maxBytes: 5000, maxTotalBytes: 8000, ttlMs: 60_000 });
  try {
    const run = new RunOutputs(store, "local");
    const budget = new OutputBudget(1000);
    const stdout = new OutputCapture(budget, run);
    const stderr = new OutputCapture(budget, run);
    assert(stdout.add("é".repeat(300)) && stdout.add("o".repeat(3000)), "stdout is kept");
    // The kept stream gave its share back: a small stderr is shown whole.
    assert(stderr.add("w".repeat(200)));
    assertEquals([stdout.kept, stderr.kept, budget.left], [true, false, 800]);
    assert(stderr.add("e".repeat(4000)), "stderr is kept too");
    assertEquals(store.usedBytes, 3600 + 4200);
    const shown = await keepParts(run, budget.left, { stdout, stderr });
    const bytes = utf8Bytes(shown.stdout) + utf8Bytes(shown.stderr);
    assert(bytes <= 1000 && bytes > 990, `previews of ${bytes} bytes`);
    assert(shown.stdout.startsWith("é".repeat(250)), "the preview is the head, cut on a character");
    assertEquals(shown.outputs.map((o) => [o.part, o.bytes]), [["stdout", 3600], ["stderr", 4200]]);
    assertEquals(store.read(shown.outputs[0].id, "local").text, "é".repeat(300) + "o".repeat(3000));
    run.release();
    assertEquals(store.usedBytes, 7800);

    // Past maxBytes the stream is cut there and the run is to stop.
    const next = new RunOutputs(store, "local");
    const big = new OutputCapture(new OutputBudget(1000), next);
    assertEquals(big.add("b".repeat(6000)), false);
    assertEquals([big.stopped, big.bytes, big.truncated], ["maxBytes", 5000, true]);
    // The oldest kept outputs made room for it.
    assertEquals(store.usedBytes, 5000 + 0);
    next.release();

    // No room beside another run's reservation: the stream is cut at the budget instead.
    const other = new RunOutputs(store, "local");
    assert(other.reserve(4000));
    const late = new OutputCapture(new OutputBudget(1000), new RunOutputs(store, "local"));
    assertEquals(late.add("c".repeat(4500)), false);
    assertEquals([late.stopped, late.kept, late.bytes], ["store", false, 1000]);
    other.release();
  } finally {
    store.close();
  }
});

const ALICE = "alice-token-0123456789abcdef";
const BOB = "bob-token-0123456789abcdef";

Deno.test("serve --http: a kept output is read by its principal only (resources/read, readOutput)", async () => {
  await withTempDir("ce-kept-tokens-", async (dir) => {
    const tokensFile = join(dir, "tokens");
    await Deno.writeTextFile(tokensFile, `alice ${ALICE}\nbob ${BOB}\n`, { mode: 0o600 });
    await Deno.chmod(tokensFile, 0o600);
    const server = await startHttpServer({
      settings: { http: { tokensFile }, limits: { maxOutputBytes: MAX_OUTPUT_BYTES } },
    });
    const clients: Client[] = [];
    try {
      const alice = await connect(server.url, { era: "modern", token: ALICE });
      clients.push(alice);
      const bob = await connect(server.url, { era: "legacy", token: BOB });
      clients.push(bob);
      const { raw, result } = await callTool(
        alice,
        "run_typescript",
        `console.log("a".repeat(${MB20}));`,
      );
      assertEquals(result.ok, true, describeResult(result));
      const uri = String(links(raw)[0]?.uri);
      const id = (result.outputs as KeptOutput[])[0].id;
      assertEquals((await readText(alice, uri)).length, MB20 + 1);

      assertMatch(await readError(bob, uri), /belongs to another principal/);
      assertEquals((await bob.listResources()).resources, []);
      const stolen = await callRun(
        bob,
        "run_typescript",
        `try { return (await readOutput(${
          JSON.stringify(id)
        })).length; } catch (e) { return [e.name, e.message]; }`,
      );
      assertEquals(
        (stolen.returnValue as string[])[0],
        "OutputAccessDenied",
        describeResult(stolen),
      );
      // Alice still can, from a later run.
      const own = await callRun(
        alice,
        "run_typescript",
        `return (await readOutput(${JSON.stringify(id)})).length;`,
      );
      assertEquals(own.returnValue, MB20 + 1, describeResult(own));

      // The audit log traces the id to Alice's run, without its text.
      const audit = (await Deno.readTextFile(join(server.tempDir, "audit.jsonl"))).split("\n")
        .filter(Boolean).map((line) => JSON.parse(line));
      const keptBy = audit.filter((r) => r.keptOutputs).map((r) => [r.principal, r.keptOutputs]);
      assertEquals(keptBy, [["http:alice", [{ id, part: "stdout", bytes: MB20 + 1 }]]]);
    } finally {
      await Promise.all(clients.map((client) => client.close().catch(() => {})));
      // SIGTERM drains and exits cleanly with outputs kept (Executor.close() drops them).
      const status = await server.close();
      assert(status?.success, server.stderr());
    }
  });
});
