/**
 * Looks at our own MCP surface the way a client does, for `doctor` and the benchmarks.
 *
 * @module
 */
import { Client } from "@modelcontextprotocol/client";
import { InMemoryTransport } from "@modelcontextprotocol/server";
import { createServer, type ServerDeps } from "./server.ts";

/**
 * Returns our `tools/list` result, obtained through a real client over an in-memory transport.
 *
 * @param deps What the server is built from.
 * @returns The result as the client receives it.
 */
export async function listOwnTools(deps: ServerDeps): Promise<Record<string, unknown>> {
  const { server } = createServer(deps);
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  const client = new Client({ name: "code-executor-introspect", version: "1.0.0" });
  await server.connect(serverSide);
  try {
    await client.connect(clientSide);
    return await client.listTools() as Record<string, unknown>;
  } finally {
    await client.close();
    await server.close();
  }
}
