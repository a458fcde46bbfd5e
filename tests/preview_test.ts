/**
 * What a big result costs the client: the preview of a kept part is at most
 * `limits.previewChars` and is sent once (in `structuredContent`, which Claude Code gives the
 * model; the text block names the kept part), with a `resource_link` and the size, and the whole
 * output stays readable through the kept-outputs resource.
 *
 * @module
 */
import type { Client } from "@modelcontextprotocol/client";
import { assert, assertEquals, assertMatch, describeResult } from "./_assert.ts";
import { startServer } from "./_helpers.ts";
import type { ExecutionResult } from "../src/exec/result.ts";
import type { KeptOutput } from "../src/exec/output_store.ts";

/** The default of `limits.previewChars`. */
const PREVIEW_CHARS = 20_000;

type ToolResult = Awaited<ReturnType<Client["callTool"]>>;

/** Lines `line-0000000 xxx…`, 100 bytes each with the newline, to `bytes` in all. */
function printLines(bytes: number): string {
  return [
    `const lines = [];`,
    `for (let i = 0; i < ${bytes / 100}; i++) {`,
    `  lines.push("line-" + String(i).padStart(7, "0") + " " + "x".repeat(86));`,
    `}`,
    `console.log(lines.join("\\n"));`,
  ].join("\n");
}

function texts(raw: ToolResult): string[] {
  return (raw.content as Array<{ type: string; text?: string }>).filter((c) => c.type === "text")
    .map((c) => c.text ?? "");
}

function count(haystack: string, needle: string): number {
  return haystack.split(needle).length - 1;
}

Deno.test("a 5 MB print returns at most limits.previewChars of preview, once, with a resource_link that reads back all of it", async () => {
  const bytes = 5_000_000;
  const server = await startServer();
  try {
    const raw = await server.client.callTool({
      name: "run_typescript",
      arguments: { code: printLines(bytes), timeoutMs: 120_000 },
    }, { timeout: 180_000 });
    const result = raw.structuredContent as unknown as ExecutionResult;
    assertEquals(result.ok, true, describeResult(result));
    const [kept] = result.outputs as KeptOutput[];
    assertEquals([result.outputs?.length, kept.part, kept.bytes], [1, "stdout", bytes]);

    // The preview: at most previewChars, the start of the output.
    assert(
      result.stdout.length > 0 && result.stdout.length <= PREVIEW_CHARS,
      describeResult(result),
    );
    assert(result.stdout.startsWith("line-0000000 xxx"), result.stdout.slice(0, 100));
    // Once: no line of it is repeated in the text block, which names the kept part instead.
    const shownLines = count(result.stdout, "line-");
    const sent = [...texts(raw), JSON.stringify(raw.structuredContent)].join("\n");
    assertEquals(count(sent, "line-"), shownLines);
    assertEquals(count(texts(raw).join("\n"), "line-"), 0);
    assertMatch(
      texts(raw)[0],
      new RegExp(
        `^\\[stdout kept whole: ${bytes} bytes, ${kept.uri}; .*structuredContent\\.stdout shows its first ${result.stdout.length} characters\\]$`,
        "m",
      ),
    );
    // What reaches the model in all is a small fraction of what was printed.
    assert(JSON.stringify(raw).length < 2 * PREVIEW_CHARS + 4096, `${JSON.stringify(raw).length}`);

    const links = (raw.content as Array<Record<string, unknown>>).filter((c) =>
      c.type === "resource_link"
    );
    assertEquals(links.map((l) => [l.uri, l.size, l.mimeType]), [[kept.uri, bytes, "text/plain"]]);
    const read = await server.client.readResource({ uri: kept.uri }, { timeout: 60_000 });
    const whole = (read.contents[0] as { text?: string }).text ?? "";
    assertEquals(whole.length, bytes);
    assertEquals(count(whole, "line-"), bytes / 100);
    assert(whole.startsWith(result.stdout), "the preview is the start of the whole output");
    assert(whole.endsWith(`line-${String(bytes / 100 - 1).padStart(7, "0")} ${"x".repeat(86)}\n`));
  } finally {
    await server.close();
  }
});

Deno.test("kept stdout and stderr share limits.previewChars, and a preview never ends in half a character", async () => {
  const server = await startServer({ settings: { limits: { previewChars: 3_001 } } });
  try {
    // 😀 is two UTF-16 units: an odd cut would split one.
    const result = await server.runTs(
      'console.log("😀".repeat(200_000));\nconsole.error("e".repeat(300_000));',
    );
    assertEquals(result.ok, true, describeResult(result));
    assertEquals(result.outputs?.map((o) => o.part).sort(), ["stderr", "stdout"]);
    assert(result.stdout.length + result.stderr.length <= 3_001, describeResult(result));
    assert(result.stdout.length > 0 && result.stderr.length > 0, describeResult(result));
    assert(/^(?:😀)+$/u.test(result.stdout), "a preview of whole emoji");
  } finally {
    await server.close();
  }
});
