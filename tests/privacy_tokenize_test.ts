/**
 * Tokenization of personal data (`privacy.tokenize`), end to end: the real server with
 * server-memory behind it (its data file read directly by the test), driven by a real SDK client
 * over stdio, and by two principals over `serve --http`.
 *
 * @module
 */
import type { Client } from "@modelcontextprotocol/client";
import { join } from "node:path";
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { MEMORY } from "./_pins.ts";
import { npmServer } from "./_env.ts";
import { withTempDir } from "./_fs.ts";
import { startServer } from "./_stdio_server.ts";
import { startHttpServer, writeTokensFile } from "./_http_server.ts";
import { callRun, connectEach } from "./_client.ts";

const CUSTOMERS = [
  { name: "Customer Jane", email: "jane.doe@example.org", phone: "+1 415-555-2671" },
  { name: "Customer Omar", email: "omar.haddad@mail.de", phone: "+44 20 7946 0958" },
  { name: "Customer Aiko", email: "aiko.sato@corp.io", phone: "+33 6 12 34 56 78" },
];

/** What a CRM import would have stored: written by code the model never sees the output of. */
const SEED = `await callMCPTool("mcp__memory__create_entities", { entities: ${
  JSON.stringify(CUSTOMERS.map((c) => ({
    name: c.name,
    entityType: "customer",
    observations: [`email ${c.email}`, `phone ${c.phone}`],
  })))
} });`;

/** Reads the graph, whether the server answers with structured content or JSON text. */
const READ = `const r = await callMCPTool("mcp__memory__read_graph", {});
const graph = typeof r === "string" ? JSON.parse(r) : r;`;

const PRINT_CUSTOMERS = `${READ}
for (const e of graph.entities) console.log(e.name + ": " + e.observations.join(", "));
return graph.entities.length;`;

const SETTINGS = { privacy: { tokenize: true }, approvals: { mode: "off" } };

function placeholderOf(stdout: string, customer: string, kind: "email" | "phone"): string {
  const line = stdout.split("\n").find((l) => l.startsWith(customer));
  const found = line?.match(new RegExp(`<${kind}_\\d+>`));
  assert(found, `no ${kind} placeholder for ${customer} in:\n${stdout}`);
  return found[0];
}

function assertNoPersonalData(text: string): void {
  for (const c of CUSTOMERS) {
    assert(!text.includes(c.email), `${c.email} in:\n${text}`);
    assert(!text.includes(c.phone), `${c.phone} in:\n${text}`);
  }
}

Deno.test("privacy.tokenize: the model sees placeholders, the host puts the values back for the memory server", async () => {
  await withTempDir("ce-privacy-", async (dir) => {
    const memoryFile = join(dir, "memory.jsonl");
    const server = await startServer({
      settings: { ...SETTINGS, audit: { includeCode: true } },
      upstream: { memory: npmServer(MEMORY, { env: { MEMORY_FILE_PATH: memoryFile } }) },
    });
    try {
      assertEquals((await server.runTs(SEED)).error, undefined);

      // Run 1: three customer records, printed and returned, come back as placeholders.
      const first = await server.runTs(PRINT_CUSTOMERS);
      assertEquals(first.error, undefined);
      assertEquals(first.returnValue, 3);
      assertNoPersonalData(JSON.stringify(first));
      const email = placeholderOf(first.stdout, "Customer Jane", "email");
      const phone = placeholderOf(first.stdout, "Customer Omar", "phone");
      assertMatch(email, /^<email_\d+>$/);
      // The same value has the same placeholder in the same run and in a thrown error's message.
      const again = await server.runTs(`${READ}
        const jane = graph.entities.find((e) => e.name === "Customer Jane");
        throw new Error("no answer from " + jane.observations[0].slice(6));`);
      assertEquals(again.error?.message, `no answer from ${email}`);

      // Run 2, written from what the client saw: the observation holds the real values.
      const second = await server.runTs(
        `await callMCPTool("mcp__memory__add_observations", { observations: [
          { entityName: "Customer Jane", contents: ["contacted at ${email}, also ${phone}"] },
        ] }); return "stored";`,
      );
      assertEquals(second.error, undefined, JSON.stringify(second));
      const stored = await Deno.readTextFile(memoryFile);
      assert(stored.includes(`contacted at ${CUSTOMERS[0].email}, also ${CUSTOMERS[1].phone}`));
      assert(!stored.includes("<email_"), stored);

      // Run 3 reads it back: the same placeholders.
      const third = await server.runTs(`${READ}
        const jane = graph.entities.find((e) => e.name === "Customer Jane");
        console.log(jane.observations.at(-1));`);
      assertEquals(third.stdout.trim(), `contacted at ${email}, also ${phone}`);

      // progress() messages reach the client with the placeholders too.
      const events: string[] = [];
      const progressed = await server.client.callTool({
        name: "run_typescript",
        arguments: { code: `await progress(1, 2, "mailing ${CUSTOMERS[0].email}");` },
      }, { onprogress: (p) => events.push(p.message ?? "") });
      assertEquals(progressed.isError, false);
      assertEquals(events, [`1/2 mailing ${email}`]);

      // A placeholder this caller was never given fails the call, and nothing is written.
      const unknown = await server.runTs(
        `await callMCPTool("mcp__memory__add_observations", { observations: [
          { entityName: "Customer Jane", contents: ["forged <email_999>"] },
        ] });`,
      );
      assertEquals(unknown.error?.type, "PlaceholderError");
      assertMatch(unknown.error!.message, /<email_999>.*never given it/);
      assert(!(await Deno.readTextFile(memoryFile)).includes("forged"));

      // The audit log holds the code with its placeholders, never the values it stood for.
      const audit = await Deno.readTextFile(join(server.tempDir, "audit.jsonl"));
      assert(audit.includes(`contacted at ${email}`), "the code of run 2 is not in the audit log");
      assertNoPersonalData(audit);
    } finally {
      await server.close();
    }
  });
});

Deno.test("privacy.tokenize holds for Python: call_mcp_tool results and printed output carry placeholders", async () => {
  await withTempDir("ce-privacy-", async (dir) => {
    const memoryFile = join(dir, "memory.jsonl");
    const server = await startServer({
      settings: SETTINGS,
      upstream: { memory: npmServer(MEMORY, { env: { MEMORY_FILE_PATH: memoryFile } }) },
    });
    try {
      assertEquals((await server.runTs(SEED)).error, undefined);
      const result = await server.runPy(`import json
r = await call_mcp_tool("mcp__memory__read_graph", {})
graph = json.loads(r) if isinstance(r, str) else r
jane = [e for e in graph["entities"] if e["name"] == "Customer Jane"][0]
print(jane["observations"][0])
await call_mcp_tool("mcp__memory__add_observations", {"observations": [
    {"entityName": "Customer Jane", "contents": ["python wrote " + jane["observations"][0]]},
]})
jane["observations"]`);
      assertEquals(result.error, undefined, JSON.stringify(result));
      assertNoPersonalData(JSON.stringify(result));
      assertMatch(result.stdout, /^email <email_\d+>\n$/);
      assert(
        (await Deno.readTextFile(memoryFile)).includes(`python wrote email ${CUSTOMERS[0].email}`),
      );
    } finally {
      await server.close();
    }
  });
});

Deno.test("privacy.rawServers: the code sees the real values, the model still sees placeholders", async () => {
  await withTempDir("ce-privacy-", async (dir) => {
    const server = await startServer({
      settings: { privacy: { tokenize: true, rawServers: ["memory"] }, approvals: { mode: "off" } },
      upstream: {
        memory: npmServer(MEMORY, { env: { MEMORY_FILE_PATH: join(dir, "memory.jsonl") } }),
      },
    });
    try {
      assertEquals((await server.runTs(SEED)).error, undefined);
      const result = await server.runTs(`${READ}
        const jane = graph.entities.find((e) => e.name === "Customer Jane");
        console.log(jane.observations[0]);
        return jane.observations[0] === "email ${CUSTOMERS[0].email}";`);
      assertEquals(result.error, undefined);
      assertEquals(result.returnValue, true);
      assertMatch(result.stdout, /^email <email_\d+>\n$/);

      // The documented limit (SECURITY.md): code holding a real value can print it in a form the
      // detector does not know. An upper-cased address is still caught; a split one is not.
      const transformed = await server.runTs(`${READ}
        const email = graph.entities[0].observations[0].slice(6);
        console.log(email.toUpperCase());
        console.log(email.split("@").join(" at "));`);
      const [upper, split] = transformed.stdout.trim().split("\n");
      assertMatch(upper, /^<email_\d+>$/);
      assertEquals(split, CUSTOMERS[0].email.replace("@", " at "));

      // Output past the cap is kept whole for resources/read, which goes to the model: it gets
      // the placeholders too, not the real values the code printed.
      const big = await server.runTs(`${READ}
        const jane = graph.entities.find((e) => e.name === "Customer Jane");
        for (let i = 0; i < 8_000; i++) console.log(i + " " + jane.observations[0]);`);
      assertEquals(big.error, undefined);
      const kept = (big as { outputs?: Array<{ uri: string; part: string }> }).outputs ?? [];
      assertEquals(kept.map((o) => o.part), ["stdout"]);
      const read = await server.client.readResource({ uri: kept[0].uri });
      const text = (read.contents[0] as { text?: string }).text ?? "";
      assert(text.includes("7999 email <email_"), text.slice(-200));
      assert(!text.includes(CUSTOMERS[0].email), "the kept output shows the real address");
    } finally {
      await server.close();
    }
  });
});

Deno.test("privacy.tokenize over HTTP: another principal cannot use a placeholder, and an expired one is refused", async () => {
  await withTempDir("ce-privacy-", async (dir) => {
    const memoryFile = join(dir, "memory.jsonl");
    const { tokensFile, tokens: { alice, bob } } = await writeTokensFile(dir, ["alice", "bob"]);
    const ttlMs = 3000;
    const server = await startHttpServer({
      settings: { ...SETTINGS, privacy: { tokenize: true, ttlMs }, http: { tokensFile } },
      upstream: { memory: npmServer(MEMORY, { env: { MEMORY_FILE_PATH: memoryFile } }) },
    });
    const clients: Client[] = [];
    try {
      const [alices, bobs] = await connectEach(server.url, [alice, bob], clients);
      assertEquals((await callRun(alices, "run_typescript", SEED)).error, undefined);
      const read = await callRun(alices, "run_typescript", PRINT_CUSTOMERS);
      assertNoPersonalData(read.stdout);
      const email = placeholderOf(read.stdout, "Customer Jane", "email");
      const store = (placeholder: string) =>
        `await callMCPTool("mcp__memory__add_observations", { observations: [
          { entityName: "Customer Jane", contents: ["mail ${placeholder} again"] },
        ] }); return "stored";`;

      const stolen = await callRun(bobs, "run_typescript", store(email));
      assertEquals(stolen.error?.type, "PlaceholderError", JSON.stringify(stolen));
      assert(!(await Deno.readTextFile(memoryFile)).includes("again"));

      const started = Date.now();
      assertEquals((await callRun(alices, "run_typescript", store(email))).returnValue, "stored");
      assert((await Deno.readTextFile(memoryFile)).includes(`mail ${CUSTOMERS[0].email} again`));

      // The last use was just now: wait out the time to live, then the placeholder is refused.
      await new Promise((resolve) => setTimeout(resolve, ttlMs + 500 - (Date.now() - started)));
      const expired = await callRun(alices, "run_typescript", store(email));
      assertEquals(expired.error?.type, "PlaceholderError");
      assertMatch(expired.error!.message, /expired/);
    } finally {
      for (const client of clients) await client.close().catch(() => {});
      await server.close();
    }
  });
});
