/**
 * Replicas on one store for the tests of what they share (tests/state_shared_test.ts,
 * tests/state_faults_test.ts): a redis-server child on loopback, `serve --http` replicas with
 * `state.url`, each with its own HOME and TMPDIR and its own server-memory, two principals, and
 * the programs the tests run through them.
 *
 * @module
 */
import type { Client } from "@modelcontextprotocol/client";
import { join } from "node:path";
import { assert, assertEquals, type RunResult } from "./_assert.ts";
import { callRun, connect } from "./_client.ts";
import { npmServer } from "./_env.ts";
import { type HttpServer, startHttpServer } from "./_http_server.ts";
import { MEMORY } from "./_pins.ts";
import { RedisServer } from "./_redis.ts";
import { generateToken } from "../src/server/http_auth.ts";

/** Every replica's `state.key`. */
export const KEY = "shared-state-e2e-secret-of-32-characters";
/** The personal values the tests put behind the replicas. */
export const CUSTOMERS = [
  { name: "Customer Jane", email: "jane.doe@example.org", phone: "+1 415-555-2671" },
  { name: "Customer Omar", email: "omar.haddad@mail.de", phone: "+44 20 7946 0958" },
];

function seed(withValues: boolean): string {
  return `await callMCPTool("mcp__memory__create_entities", { entities: ${
    JSON.stringify([
      ...CUSTOMERS.map((c) => ({
        name: c.name,
        entityType: "customer",
        observations: withValues ? [`email ${c.email}`, `phone ${c.phone}`] : [],
      })),
      { name: "Zed", entityType: "person", observations: [] },
    ])
  } }); return "seeded";`;
}

/** Stores the customers and a person `Zed` (to delete) in a replica's server-memory. */
export const SEED = seed(true);
/** The same entities without their values: a replica that has never seen them. */
export const SEED_NAMES = seed(false);

/** Prints each entity and its observations: the values come back as placeholders. */
export const PRINT_CUSTOMERS = `const r = await callMCPTool("mcp__memory__read_graph", {});
const graph = typeof r === "string" ? JSON.parse(r) : r;
for (const e of graph.entities) console.log(e.name + ": " + e.observations.join(", "));`;

/** Adds an observation to Jane: a tool call whose arguments may hold placeholders. */
export const OBSERVE = (text: string) =>
  `await callMCPTool("mcp__memory__add_observations", { observations: [
    { entityName: "Customer Jane", contents: [${JSON.stringify(text)}] },
  ] }); return "stored";`;

/** Deletes `Zed`, a call that needs approval; returns "deleted" or the error's name and message. */
export const DELETE_ZED = `try {
  await callMCPTool("mcp__memory__delete_entities", { entityNames: ["Zed"] });
  return "deleted";
} catch (error) {
  return [error.name, error.message];
}`;

/** Replicas on one store, and who calls them. */
export interface Cluster {
  store: RedisServer;
  replicas: HttpServer[];
  /** Each replica's server-memory data file. */
  memoryFiles: string[];
  tokens: { alice: string; bob: string };
  /** A client of `who` on replica `i` (closed with the cluster). */
  client(who: "alice" | "bob", i: number, era?: "legacy" | "modern"): Promise<Client>;
  close(): Promise<void>;
}

/**
 * Starts a redis-server and `count` replicas on it, with the same `state.key`.
 *
 * @param settings More settings of every replica.
 * @param count How many replicas.
 * @returns The cluster; close it when done.
 */
export async function startCluster(settings: Record<string, unknown>, count = 2): Promise<Cluster> {
  const dir = await Deno.makeTempDir({ prefix: "ce-shared-" });
  const tokens = { alice: generateToken(), bob: generateToken() };
  const tokensFile = join(dir, "tokens");
  await Deno.writeTextFile(tokensFile, `alice ${tokens.alice}\nbob ${tokens.bob}\n`, {
    mode: 0o600,
  });
  const store = new RedisServer();
  try {
    await store.start();
  } catch (error) {
    await store.close();
    await Deno.remove(dir, { recursive: true });
    throw error;
  }
  const memoryFiles = Array.from({ length: count }, (_, i) => join(dir, `memory-${i}.jsonl`));
  const replicas: HttpServer[] = [];
  const clients: Client[] = [];
  const close = async () => {
    for (const client of clients) await client.close().catch(() => {});
    await Promise.all(replicas.map((replica) => replica.close()));
    await store.close();
    await Deno.remove(dir, { recursive: true });
  };
  try {
    await Promise.all(memoryFiles.map(async (memoryFile, i) => {
      replicas[i] = await startHttpServer({
        settings: {
          ...settings,
          // Long enough for a loaded machine's round trips; a stopped store still fails in time.
          state: { url: store.url, key: KEY, timeoutMs: 2000 },
          http: { tokensFile },
        },
        env: { CODE_EXECUTOR_HTTP_REPLICA_ID: `ce-${i}` },
        upstream: { memory: npmServer(MEMORY, { env: { MEMORY_FILE_PATH: memoryFile } }) },
      });
    }));
  } catch (error) {
    await close().catch(() => {});
    throw error;
  }
  return {
    store,
    replicas,
    memoryFiles,
    tokens,
    async client(who, i, era = "legacy") {
      const client = await connect(replicas[i], { token: tokens[who], era });
      clients.push(client);
      return client;
    },
    close,
  };
}

/** The placeholder of a customer's value in what {@linkcode PRINT_CUSTOMERS} printed. */
export function placeholderOf(stdout: string, customer: string, kind: "email" | "phone"): string {
  const line = stdout.split("\n").find((l) => l.startsWith(customer));
  const found = line?.match(new RegExp(`<${kind}_\\d+>`));
  assert(found, `no ${kind} placeholder for ${customer} in:\n${stdout}`);
  return found[0];
}

/** The `approve_pending_calls` arguments a refusal names. */
export function claimOf(message: string): { calls: Array<{ id: string; call: string }> } {
  const match = message.match(/approve_pending_calls with (\{.*?\}\]\}) —/);
  assert(match, `no claim in: ${message}`);
  return JSON.parse(match[1]);
}

/** Runs TypeScript that must succeed. */
export async function ok(client: Client, code: string): Promise<RunResult> {
  const result = await callRun(client, "run_typescript", code);
  assertEquals(result.error, undefined, JSON.stringify(result));
  return result;
}
