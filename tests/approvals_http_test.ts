/**
 * Approvals over `serve --http`, with two principals (http.tokensFile) and server-memory behind
 * it: a 2025-era session that answers elicitation is asked like a stdio client; a 2025-era session
 * without elicitation and a 2026-07-28 client get the pending path; one principal cannot approve
 * (or use) another's pending call.
 *
 * @module
 */
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { join } from "node:path";
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { MEMORY } from "./_pins.ts";
import { npmServer } from "./_env.ts";
import { startHttpServer, writeTokensFile } from "./_http_server.ts";
import { callRun, connect } from "./_client.ts";

const DELETE = (name: string) => `
  try {
    await callMCPTool("mcp__memory__delete_entities", { entityNames: ["${name}"] });
    return "deleted";
  } catch (error) {
    return [error.name, error.message];
  }`;

const CREATE = (names: string[]) =>
  `await callMCPTool("mcp__memory__create_entities", { entities: ${
    JSON.stringify(names.map((name) => ({ name, entityType: "person", observations: [] })))
  } }); return "ok";`;

async function legacyClient(url: URL, token: string, elicit: boolean): Promise<Client> {
  const client = new Client(
    { name: "code-executor-tests", version: "1.0.0" },
    { capabilities: elicit ? { elicitation: { form: {} } } : {} },
  );
  if (elicit) {
    client.setRequestHandler(
      "elicitation/create",
      () => Promise.resolve({ action: "accept", content: { decision: "approve" } }) as never,
    );
  }
  await client.connect(
    new StreamableHTTPClientTransport(url, {
      requestInit: { headers: { authorization: `Bearer ${token}` } },
    }),
  );
  return client;
}

function claimOf(message: string): { calls: Array<{ id: string; call: string }> } {
  const match = message.match(/approve_pending_calls with (\{.*?\}\]\}) —/);
  assert(match, `no claim in: ${message}`);
  return JSON.parse(match[1]);
}

Deno.test("approvals over HTTP: 2025 sessions ask or take the pending path, bound to the principal; 2026 clients take the pending path", async () => {
  const dir = await Deno.makeTempDir({ prefix: "ce-approvals-http-" });
  const memoryFile = join(dir, "memory.jsonl");
  const { tokensFile, tokens: { alice, bob } } = await writeTokensFile(dir, ["alice", "bob"]);
  const server = await startHttpServer({
    settings: { http: { tokensFile } },
    upstream: { memory: npmServer(MEMORY, { env: { MEMORY_FILE_PATH: memoryFile } }) },
  });
  const clients: Client[] = [];
  const memory = () => Deno.readTextFile(memoryFile).catch(() => "");
  try {
    const asking = await legacyClient(server.url, alice, true);
    clients.push(asking);
    assertEquals(
      (await callRun(asking, "run_typescript", CREATE(["A1", "B1", "M1"]))).returnValue,
      "ok",
    );
    assertEquals((await callRun(asking, "run_typescript", DELETE("A1"))).returnValue, "deleted");
    assert(!(await memory()).includes('"name":"A1"'));

    const bobs = await legacyClient(server.url, bob, false);
    clients.push(bobs);
    const before = (await bobs.listTools()).tools.map((tool) => tool.name);
    assert(!before.includes("approve_pending_calls"), before.join());
    const [type, message] = (await callRun(bobs, "run_typescript", DELETE("B1")))
      .returnValue as string[];
    assertEquals(type, "ApprovalDenied");
    const names = (await bobs.listTools()).tools.map((tool) => tool.name);
    assert(names.includes("approve_pending_calls"), names.join());
    const claim = claimOf(message);

    // Alice, in a session that cannot elicit either, cannot approve Bob's pending call.
    const alices = await legacyClient(server.url, alice, false);
    clients.push(alices);
    assertEquals(
      ((await callRun(alices, "run_typescript", DELETE("B1"))).returnValue as string[])[0],
      "ApprovalDenied",
    );
    const stolen = await alices.callTool({ name: "approve_pending_calls", arguments: claim });
    assertEquals(stolen.isError, true);
    assertMatch(JSON.stringify(stolen.content), /no such pending call/);

    const approved = await bobs.callTool({ name: "approve_pending_calls", arguments: claim });
    assertEquals(approved.isError, false, JSON.stringify(approved.content));
    // Bob's approval is Bob's: Alice's identical call is still refused, and Bob's goes through.
    assertEquals(
      ((await callRun(alices, "run_typescript", DELETE("B1"))).returnValue as string[])[0],
      "ApprovalDenied",
    );
    assertMatch(await memory(), /"name":"B1"/);
    assertEquals((await callRun(bobs, "run_typescript", DELETE("B1"))).returnValue, "deleted");
    assert(!(await memory()).includes('"name":"B1"'));

    const modern = await connect(server.url, { era: "modern", token: alice });
    clients.push(modern);
    const modernNames = (await modern.listTools()).tools.map((tool) => tool.name);
    assert(modernNames.includes("approve_pending_calls"), modernNames.join());
    const [modernType, modernMessage] = (await callRun(modern, "run_typescript", DELETE("M1")))
      .returnValue as string[];
    assertEquals(modernType, "ApprovalDenied");
    assertMatch(modernMessage, /2026-07-28/);
    assertMatch(await memory(), /"name":"M1"/);
  } finally {
    for (const client of clients) await client.close().catch(() => {});
    await server.close();
    await Deno.remove(dir, { recursive: true });
  }
});
