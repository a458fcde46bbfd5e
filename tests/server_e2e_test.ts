import { assertEquals } from "./_assert.ts";
import { startServer } from "./_stdio_server.ts";

Deno.test("run_typescript over stdio returns output and returnValue", async () => {
  const server = await startServer();
  try {
    const tools = await server.client.listTools();
    assertEquals(tools.tools.map((t) => t.name), ["run_typescript", "run_python", "search_tools"]);
    const result = await server.runTs('console.log("hello"); return { answer: 6 * 7 };');
    assertEquals(result.isError, false);
    assertEquals(result.stdout, "hello\n");
    assertEquals(result.returnValue, { answer: 42 });
  } finally {
    await server.close();
  }
});
