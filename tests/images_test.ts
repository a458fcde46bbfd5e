/**
 * Pictures out: `display()` in TypeScript and Python becomes MCP `image` content of the result,
 * through a real client and a spawned server. A bar chart of an upstream server's data (server-
 * memory), drawn in the sandbox with an npm package (fast-png), decodes to the drawn pixels; a
 * PNG made of Python bytes arrives byte for byte; an SVG arrives as `image/svg+xml`; an image
 * past the output cap becomes a `resource_link` that `resources/read` serves. The host's checks
 * (type, signature, count, cap) are attempted through an in-process executor.
 *
 * @module
 */
import { deflateSync } from "node:zlib";
import { join } from "node:path";
import { assert, assertEquals, assertMatch, describeResult } from "./_assert.ts";
import { networkEnv, npmServer } from "./_env.ts";
import { withExecutor } from "./_executor.ts";
import { MEMORY } from "./_pins.ts";
import { decodePng } from "./_png.ts";
// Builds the Python snapshot before the server starts, so that its first run boots from it.
import "./_pyodide.ts";
import { type ServerHarness, startServer } from "./_stdio_server.ts";
import type { ExecutionResult } from "../src/exec/result.ts";

/** The result's output cap: a small chart fits, a noisy 64x64 PNG does not. */
const MAX_OUTPUT_BYTES = 8 * 1024;

type Content = Array<Record<string, unknown> & { type: string }>;

interface CallResult {
  content: Content;
  structured: ExecutionResult;
  isError: boolean;
}

async function call(server: ServerHarness, tool: string, code: string): Promise<CallResult> {
  const result = await server.client.callTool({ name: tool, arguments: { code } }, {
    timeout: 120_000,
  });
  return {
    content: result.content as Content,
    structured: result.structuredContent as unknown as ExecutionResult,
    isError: result.isError === true,
  };
}

function describe(result: CallResult): string {
  return `${describeResult(result.structured)} content: ${
    JSON.stringify(result.content.map((block) => ({ ...block, data: undefined })))
  }`;
}

/** A PNG built here, RGBA, filter 0 on every row, so that its bytes are known in advance. */
function tinyPng(
  width: number,
  height: number,
  rgba: [number, number, number, number],
): Uint8Array {
  const u32 = (n: number) => [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255];
  const row = [0, ...Array.from({ length: width }, () => rgba).flat()];
  const idat = deflateSync(new Uint8Array(Array.from({ length: height }, () => row).flat()));
  const chunk = (type: string, data: Uint8Array) => {
    const body = new Uint8Array([...new TextEncoder().encode(type), ...data]);
    return [...u32(data.length), ...body, ...u32(crc32(body))];
  };
  return new Uint8Array([
    0x89,
    0x50,
    0x4e,
    0x47,
    0x0d,
    0x0a,
    0x1a,
    0x0a,
    ...chunk("IHDR", new Uint8Array([...u32(width), ...u32(height), 8, 6, 0, 0, 0])),
    ...chunk("IDAT", idat),
    ...chunk("IEND", new Uint8Array()),
  ]);
}

function crc32(bytes: Uint8Array): number {
  let crc = ~0;
  for (const byte of bytes) {
    crc ^= byte;
    for (let k = 0; k < 8; k++) crc = (crc >>> 1) ^ (0xedb88320 & -(crc & 1));
  }
  return ~crc >>> 0;
}

const SVG =
  '<?xml version="1.0"?>\n<!-- a red square -->\n<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8"><rect width="8" height="8" fill="#d00"/></svg>';

/** The chart the sandbox draws: bars of 10 px per observation, 6 px wide in 10 px columns. */
const BAR = [30, 90, 200, 255];
const WHITE = [255, 255, 255, 255];
const CHART_HEIGHT = 40;

const CHART = `
import { encode } from "fast-png";
await callMCPTool("mcp__memory__create_entities", { entities: [
  { name: "apples", entityType: "fruit", observations: ["red", "crisp", "sweet"] },
  { name: "pears", entityType: "fruit", observations: ["soft"] },
  { name: "plums", entityType: "fruit", observations: ["purple", "sour"] },
] });
const graph = await callMCPTool("mcp__memory__read_graph", {});
const { entities } = typeof graph === "string" ? JSON.parse(graph) : graph;
const counts = entities.map((e) => [e.name, e.observations.length]).sort();
const width = 10 * counts.length, height = ${CHART_HEIGHT};
const data = new Uint8Array(width * height * 4).fill(255);
counts.forEach(([, n], i) => {
  for (let x = i * 10 + 2; x < i * 10 + 8; x++) {
    for (let y = height - n * 10; y < height; y++) data.set(${
  JSON.stringify(BAR)
}, (y * width + x) * 4);
  }
});
console.log("drawn");
await display(encode({ width, height, data, channels: 4 }), "image/png");
return counts;`;

Deno.test("display() images reach a real client as image content, or as a link past the cap", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "ce-images-" });
  let server: ServerHarness | undefined;
  try {
    server = await startServer({
      // The server fetches fast-png into its cache at start: it needs the caller's CAs and proxy.
      env: networkEnv(),
      settings: {
        sandbox: { npmPackages: ["fast-png@8.0.0"] },
        limits: { maxOutputBytes: MAX_OUTPUT_BYTES },
        approvals: { mode: "off" },
        skills: { projectDir: join(dir, "project-skills"), userDir: join(dir, "user-skills") },
      },
      upstream: {
        memory: npmServer(MEMORY, { env: { MEMORY_FILE_PATH: join(dir, "memory.jsonl") } }),
      },
    });

    await t.step(
      "a bar chart of server-memory's data, drawn with fast-png, decodes to its bars",
      async () => {
        const result = await call(server!, "run_typescript", CHART);
        assertEquals(result.isError, false, describe(result));
        const counts = result.structured.returnValue as Array<[string, number]>;
        assertEquals(counts, [["apples", 3], ["pears", 1], ["plums", 2]]);
        assertEquals(
          result.content.map((block) => block.type),
          ["text", "image"],
          describe(result),
        );
        const image = result.content[1];
        assertEquals(image.mimeType, "image/png");
        const png = decodePng(Uint8Array.fromBase64(image.data as string));
        assertEquals([png.width, png.height], [30, CHART_HEIGHT]);
        for (let y = 0; y < png.height; y++) {
          for (let x = 0; x < png.width; x++) {
            const [, n] = counts[Math.floor(x / 10)];
            const inBar = x % 10 >= 2 && x % 10 < 8 && y >= CHART_HEIGHT - n * 10;
            const at = (y * png.width + x) * 4;
            assertEquals(
              [...png.rgba.subarray(at, at + 4)],
              inBar ? BAR : WHITE,
              `pixel ${x},${y}`,
            );
          }
        }
        const text = result.content[0].text as string;
        assertMatch(text, /^drawn\n/);
        assertMatch(text, /\[image 1: image\/png, \d+ bytes, after this text\]/);
        // The model reads structuredContent in some clients: the image is described, not carried.
        const bytes = Uint8Array.fromBase64(image.data as string).length;
        assertEquals(result.structured.images, [{ mimeType: "image/png", bytes }]);
      },
    );

    await t.step("a PNG of Python bytes arrives byte for byte, then an SVG, in order", async () => {
      const png = tinyPng(3, 2, [255, 0, 0, 255]);
      const result = await call(
        server!,
        "run_python",
        `print("before")
display(bytes.fromhex("${png.toHex()}"), "image/png")
print("between")
display(${JSON.stringify(SVG)}, "image/svg+xml")
"done"`,
      );
      assertEquals(result.isError, false, describe(result));
      assertEquals(result.content.map((b) => [b.type, b.mimeType]), [
        ["text", undefined],
        ["image", "image/png"],
        ["image", "image/svg+xml"],
      ]);
      assertEquals(Uint8Array.fromBase64(result.content[1].data as string), png);
      assertEquals(
        new TextDecoder().decode(Uint8Array.fromBase64(result.content[2].data as string)),
        SVG,
      );
      assertEquals(result.structured.stdout, "before\nbetween\n");
    });

    await t.step("an SVG from TypeScript arrives as image/svg+xml", async () => {
      const result = await call(
        server!,
        "run_typescript",
        `await display(${JSON.stringify(SVG)}, "image/svg+xml");`,
      );
      assertEquals(result.isError, false, describe(result));
      assertEquals(result.content[1].type, "image");
      assertEquals(result.content[1].mimeType, "image/svg+xml");
      assertEquals(
        new TextDecoder().decode(Uint8Array.fromBase64(result.content[1].data as string)),
        SVG,
      );
    });

    await t.step(
      "an image a Python skill shows in a nested run is the TypeScript caller's",
      async () => {
        const png = tinyPng(2, 2, [0, 128, 0, 255]);
        const saved = await call(
          server!,
          "run_typescript",
          `return await skills.save(${
            JSON.stringify({
              name: "green-square",
              description: "Shows a green square",
              language: "python",
              inputSchema: { type: "object" },
              code: `display(bytes.fromhex("${png.toHex()}"), "image/png")\n"shown"`,
            })
          });`,
        );
        assertEquals(saved.isError, false, describe(saved));
        const result = await call(
          server!,
          "run_typescript",
          'const value = await skills.green_square({});\nconsole.log("called");\nreturn value;',
        );
        assertEquals(result.isError, false, describe(result));
        assertEquals(result.structured.returnValue, "shown");
        assertEquals(result.content.map((b) => b.type), ["text", "image"], describe(result));
        assertEquals(Uint8Array.fromBase64(result.content[1].data as string), png);
      },
    );

    await t.step(
      "an image past limits.maxOutputBytes is a resource_link that resources/read serves",
      async () => {
        const result = await call(
          server!,
          "run_typescript",
          `import { encode } from "fast-png";
const data = crypto.getRandomValues(new Uint8Array(64 * 64 * 4));
const png = encode({ width: 64, height: 64, data, channels: 4 });
await display(png, "image/png");
console.log("after the image");
return Array.from(new Uint8Array(await crypto.subtle.digest("SHA-256", png)), (b) => b.toString(16).padStart(2, "0")).join("");`,
        );
        assertEquals(result.isError, false, describe(result));
        assertEquals(
          result.content.map((b) => b.type),
          ["text", "resource_link"],
          describe(result),
        );
        const link = result.content[1];
        assertEquals(link.mimeType, "image/png");
        const kept = result.structured.outputs ?? [];
        assertEquals(kept.map((output) => output.part), ["image"]);
        assertEquals(link.uri, kept[0].uri);
        const image = result.structured.images?.[0];
        assertEquals(image?.output, kept[0].id);
        assertEquals(image?.data, undefined);
        assertMatch(
          result.content[0].text as string,
          /\[image 1 \(image\/png\) kept whole: code-executor:\/\/output\//,
        );
        const read = await server!.client.readResource({ uri: link.uri as string });
        const contents = read.contents[0] as { mimeType: string; blob: string };
        assertEquals(contents.mimeType, "image/png");
        const bytes = Uint8Array.fromBase64(contents.blob);
        assert(bytes.length * 4 / 3 > MAX_OUTPUT_BYTES, `${bytes.length} bytes`);
        assertEquals(decodePng(bytes).width, 64);
        const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes)).toHex();
        assertEquals(digest, result.structured.returnValue);
      },
    );
  } finally {
    await server?.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the host checks each displayed image: its type, its signature, the count and the cap", async () => {
  await withExecutor({ outputs: { maxBytes: 0 } }, async (executor) => {
    const gif = "R0lGODlhAQABAAAAACw="; // GIF89a, 1x1
    const refusals: Array<[string, string, RegExp]> = [
      [
        `await display(new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8]), "image/png");`,
        "TypeError",
        /not image\/png: they do not start with the format's signature/,
      ],
      [`await display("<p>not svg</p>", "image/svg+xml");`, "TypeError", /root element <svg>/],
      [
        `await display(new Uint8Array(8), "image/bmp");`,
        "TypeError",
        /mimeType must be one of image\/png, image\/jpeg, image\/gif, image\/webp, image\/svg\+xml/,
      ],
      [`await display("not base64!", "image/gif");`, "TypeError", /not valid base64/],
      [
        `for (let i = 0; i < 33; i++) await display("${gif}", "image/gif");`,
        "LimitError",
        /at most 32 images/,
      ],
      [
        `await display(new Uint8Array(5 * 1024 * 1024), "image/png");`,
        "TypeError",
        /larger than 4194304 bytes/,
      ],
      // Nothing can be kept (outputs.maxBytes 0): an image past the cap stops the run.
      [
        `await display(new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, ...new Uint8Array(200_000)]), "image/png");\nreturn "not reached";`,
        "OutputLimitError",
        /an image of \d+ bytes of base64 \(image\/png\) passed limits\.maxOutputBytes/,
      ],
    ];
    for (const [code, type, message] of refusals) {
      const result = await executor.runTypescript(code);
      assertEquals(result.error?.type, type, `${code}\n${describeResult(result)}`);
      assertMatch(result.error?.message ?? "", message, describeResult(result));
    }
    const python: Array<[string, RegExp]> = [
      ['b"\\x00" * 16, "image/png"', /not image\/png: they do not start/],
      ['b"RIFF0000WAVE", "image/webp"', /not image\/webp/],
      ['42, "image/png"', /data must be bytes/],
      ['b"GIF89a", "image/tiff"', /mime_type must be one of/],
      ['"%%%", "image/png"', /must be base64/],
    ];
    // One interpreter for every case: each display() raises before anything reaches the host.
    const cases = python.map(([call]) =>
      `try:\n    display(${call})\n    errors.append(None)\nexcept TypeError as e:\n    errors.append(str(e))`
    );
    const result = await executor.runPython(["errors = []", ...cases, "errors"].join("\n"));
    const errors = result.returnValue as Array<string | null>;
    assertEquals(errors?.length, python.length, describeResult(result));
    python.forEach(([call, message], i) => assertMatch(errors[i] ?? "", message, call));
    assertEquals(result.images, undefined);
    const ok = await executor.runTypescript(`await display("${gif}", "image/gif");\nreturn 1;`);
    assertEquals(ok.images?.map(({ mimeType, bytes }) => [mimeType, bytes]), [["image/gif", 14]]);
  });
});
