import { assertEquals, assertRejects } from "./_assert.ts";
import { FrameReader, OutputCapture } from "../src/exec/child/frames.ts";

function streamOf(...chunks: string[]): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  return new ReadableStream({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(encoder.encode(chunk));
      controller.close();
    },
  });
}

Deno.test("FrameReader.next() reads nonce-prefixed frames split across chunks", async () => {
  const reader = new FrameReader(
    streamOf('N1 {"t":"re', 'ady"}\nN1 {"t":"out"', ',"d":"x"}\n'),
    "N1",
    1024,
  );
  assertEquals(await reader.next(), { t: "ready" });
  assertEquals(await reader.next(), { t: "out", d: "x" });
  assertEquals(await reader.next(), null);
});

Deno.test("FrameReader.next() rejects a line without the nonce", async () => {
  const reader = new FrameReader(streamOf('{"jsonrpc":"2.0","id":1,"result":{}}\n'), "N1", 1024);
  await assertRejects(() => reader.next());
});

Deno.test("FrameReader.next() rejects a forged nonce, invalid JSON and non-objects", async () => {
  for (const line of ['N2 {"t":"result"}\n', "N1 {nope\n", "N1 [1,2]\n", "N1 \xff\n"]) {
    const reader = new FrameReader(streamOf(line), "N1", 1024);
    await assertRejects(() => reader.next(), `accepted ${JSON.stringify(line)}`);
  }
});

Deno.test("FrameReader.next() rejects an oversized frame, with or without a newline", async () => {
  const big = "N1 " + JSON.stringify({ t: "out", d: "x".repeat(2000) });
  await assertRejects(() => new FrameReader(streamOf(big + "\n"), "N1", 1024).next());
  await assertRejects(() => new FrameReader(streamOf(big), "N1", 1024).next());
});

Deno.test("FrameReader.next() rejects trailing bytes that are not a frame at end of stream", async () => {
  const reader = new FrameReader(streamOf('N1 {"t":"ready"}\npartial'), "N1", 1024);
  assertEquals(await reader.next(), { t: "ready" });
  await assertRejects(() => reader.next());
});

Deno.test("OutputCapture.add() keeps what fits and cuts on a character boundary", () => {
  const capture = new OutputCapture(5);
  assertEquals(capture.add("abc"), true);
  assertEquals(capture.add("é€"), false);
  assertEquals(capture.text, "abcé");
  assertEquals(capture.truncated, true);
  assertEquals(capture.add("more"), false);
  assertEquals(capture.text, "abcé");
});
