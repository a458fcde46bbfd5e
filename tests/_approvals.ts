/**
 * The harness of the approvals tests: the real server (`deno task start`) with server-everything,
 * server-memory (MEMORY_FILE_PATH in a temp directory) and the fixture (its `record` tool logs
 * each call it receives) behind it, and an SDK client that answers form elicitation as the test
 * says, or does not declare it.
 *
 * @module
 */
import type { Client, ClientOptions } from "@modelcontextprotocol/client";
import { join } from "node:path";
import { EVERYTHING, MEMORY } from "./_pins.ts";
import { fixtureServer, npmServer } from "./_env.ts";
import { eventually } from "./_proc.ts";
import { type ServerHarness, startServer } from "./_stdio_server.ts";

type ElicitParams = { message: string; requestedSchema: Record<string, unknown> };
export type Answer = (params: ElicitParams, signal: AbortSignal) => Promise<unknown>;

export interface ApprovalServer extends ServerHarness {
  /** The questions the client was asked. */
  asked: ElicitParams[];
  /** How the client's user answers; replace per case. */
  answer: Answer;
  memoryFile: string;
  callLog: string;
}

export const choose = (decision: string): Answer => () =>
  Promise.resolve({ action: "accept", content: { decision } });

export async function startApprovalServer(
  options: {
    elicit?: boolean;
    approvals?: Record<string, unknown>;
    sandbox?: Record<string, unknown>;
    /** More settings. */
    settings?: Record<string, unknown>;
    /** More client options (a 2026-era client: `versionNegotiation`, `inputRequired`). */
    client?: ClientOptions;
    /** Registers more client handlers (sampling). */
    setup?: (client: Client) => void;
  } = {},
): Promise<ApprovalServer> {
  const dir = await Deno.makeTempDir({ prefix: "ce-approvals-" });
  const memoryFile = join(dir, "memory.jsonl");
  const callLog = join(dir, "calls.log");
  await Deno.writeTextFile(callLog, "");
  const state = { asked: [] as ElicitParams[], answer: choose("deny") };
  const elicit = options.elicit ?? true;
  let harness: ServerHarness;
  try {
    harness = await startServer({
      settings: {
        approvals: { require: ["mcp__fixture__rec*"], ...options.approvals },
        audit: { enabled: true },
        ...(options.sandbox ? { sandbox: options.sandbox } : {}),
        ...options.settings,
      },
      upstream: {
        everything: npmServer(EVERYTHING),
        memory: npmServer(MEMORY, { env: { MEMORY_FILE_PATH: memoryFile } }),
        fixture: fixtureServer({ FIXTURE_CALL_LOG: callLog }),
      },
      client: {
        ...options.client,
        capabilities: {
          ...options.client?.capabilities,
          ...(elicit ? { elicitation: { form: {} } } : {}),
        },
      },
      setup(client: Client) {
        options.setup?.(client);
        if (!elicit) return;
        client.setRequestHandler("elicitation/create", async (request, ctx) => {
          const params = request.params as unknown as ElicitParams;
          state.asked.push(params);
          return await state.answer(params, ctx.mcpReq.signal) as never;
        });
      },
    });
  } catch (error) {
    await Deno.remove(dir, { recursive: true });
    throw error;
  }
  const server: ApprovalServer = {
    ...harness,
    memoryFile,
    callLog,
    get asked() {
      return state.asked;
    },
    get answer() {
      return state.answer;
    },
    set answer(value: Answer) {
      state.answer = value;
    },
    async close() {
      await harness.close();
      await Deno.remove(dir, { recursive: true });
    },
  };
  return server;
}

export const memoryText = (server: ApprovalServer) =>
  Deno.readTextFile(server.memoryFile).catch(() => "");
export const calls = async (server: ApprovalServer) =>
  (await Deno.readTextFile(server.callLog)).split("\n").filter(Boolean);

export const createEntities = (names: string[]) =>
  `await callMCPTool("mcp__memory__create_entities", { entities: ${
    JSON.stringify(names.map((name) => ({ name, entityType: "person", observations: [] })))
  } });`;

export async function auditApprovals(
  server: ServerHarness,
): Promise<Array<Record<string, unknown>>> {
  const path = join(server.tempDir, "audit.jsonl");
  let records: Array<Record<string, unknown>> = [];
  await eventually(async () => {
    const text = await Deno.readTextFile(path).catch(() => "");
    records = text.trim().split("\n").filter(Boolean).map((line) => JSON.parse(line));
    return records.some((r) => r.kind === "approval");
  });
  return records.filter((r) => r.kind === "approval");
}
