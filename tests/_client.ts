/**
 * The client side of a test: an SDK v2 client connected over Streamable HTTP in either protocol
 * era, a call of `run_typescript` or `run_python`, what a client receives (recorded ahead of its
 * own handling, and the forged lines sandbox code tries to slip into it), a 2026-era client that
 * answers `input_required` rounds itself, and the raw `initialize` a 2025-era client sends first.
 *
 * @module
 */
import {
  Client,
  type ClientOptions,
  StreamableHTTPClientTransport,
  type StreamableHTTPClientTransportOptions,
} from "@modelcontextprotocol/client";
import { assert, type RunResult } from "./_assert.ts";
import type { ExecutionResult } from "../src/exec/result.ts";

/** Options for {@linkcode connect}. */
export interface ConnectOptions {
  /**
   * The protocol era: `legacy` (2025-11-25, initialize and a session; the default) or `modern`
   * (2026-07-28, negotiated by probe). The connection fails when the server negotiates another.
   */
  era?: "legacy" | "modern";
  /** Sent as `Authorization: Bearer <token>` on every request. */
  token?: string;
  /** Or an OAuth provider that finds the authorization server from the 401 and gets a token. */
  authProvider?: StreamableHTTPClientTransportOptions["authProvider"];
  /** Headers for every request besides the token's. */
  headers?: Record<string, string>;
  /** The capabilities the client declares (sampling, elicitation). */
  capabilities?: ClientOptions["capabilities"];
  /** Called before connecting, to register the client's request handlers. */
  setup?: (client: Client) => void;
}

/**
 * Connects an SDK v2 client to an MCP endpoint over Streamable HTTP in one protocol era, and
 * checks that the era is the one negotiated.
 *
 * @param target The MCP endpoint, or a server that has one (`url`).
 * @param options Era, credentials, capabilities and handlers.
 * @returns The connected client; `client.close()` ends its streams (without DELETE).
 * @throws {Error} When the server negotiated another era.
 */
export async function connect(
  target: URL | string | { url: URL },
  options: ConnectOptions = {},
): Promise<Client> {
  const url = typeof target === "object" && "url" in target ? target.url : new URL(target);
  const era = options.era ?? "legacy";
  const headers: Record<string, string> = { ...options.headers };
  if (options.token !== undefined) headers.Authorization = `Bearer ${options.token}`;
  const transport = new StreamableHTTPClientTransport(url, {
    requestInit: { headers },
    ...(options.authProvider ? { authProvider: options.authProvider } : {}),
  });
  const client = new Client({ name: "code-executor-tests", version: "1.0.0" }, {
    capabilities: options.capabilities,
    ...(era === "modern" ? { versionNegotiation: { mode: "auto" as const } } : {}),
  });
  options.setup?.(client);
  await client.connect(transport);
  const negotiated = client.getProtocolEra();
  if (negotiated !== era) {
    await client.close();
    throw new Error(`Expected the ${era} era, the client negotiated ${negotiated}`);
  }
  return client;
}

/**
 * Connects a client in each protocol era in turn (legacy, then modern), hands it to `use`, and
 * closes it afterwards.
 *
 * @param target The MCP endpoint, or a server that has one (`url`).
 * @param options Credentials, capabilities and handlers, as {@linkcode connect} takes them.
 * @param use What to do with each era's client.
 */
export async function forEachEra(
  target: URL | string | { url: URL },
  options: Omit<ConnectOptions, "era">,
  use: (client: Client, era: "legacy" | "modern") => Promise<void>,
): Promise<void> {
  for (const era of ["legacy", "modern"] as const) {
    const client = await connect(target, { ...options, era });
    try {
      await use(client, era);
    } finally {
      await client.close();
    }
  }
}

/**
 * Connects one client per bearer token, in order, adding each to `clients` as soon as it is up,
 * so that the caller's `finally` closes those that connected even when a later one fails.
 *
 * @param url The MCP endpoint.
 * @param tokens One bearer token per client.
 * @param clients Where each connected client is added.
 * @returns The clients, in the order of `tokens`.
 */
export async function connectEach(
  url: URL,
  tokens: readonly string[],
  clients: Client[],
): Promise<Client[]> {
  const connected: Client[] = [];
  for (const token of tokens) {
    const client = await connect(url, { token });
    clients.push(client);
    connected.push(client);
  }
  return connected;
}

/** One answer to a `run_typescript` call made with `allowInputRequired`: a result, or a round. */
export interface Round {
  /** `input_required` while the run waits for answers. */
  resultType?: string;
  /** The questions of an `input_required` round, by key. */
  inputRequests?: Record<string, { method: string; params: { message: string } }>;
  /** The state a retry sends back with its answers. */
  requestState?: string;
  /** Whether the final result is an error. */
  isError?: boolean;
  /** The final result. */
  structuredContent?: { returnValue?: unknown; error?: { type: string; message: string } };
}

/**
 * Calls `run_typescript` with `allowInputRequired`, so that an `input_required` round comes back
 * to the test instead of being answered by the SDK.
 *
 * @param client A connected client.
 * @param code The code.
 * @param extra More arguments (`timeoutMs`).
 * @param retry The retry's `inputResponses` and `requestState`, or none on the first call.
 * @returns The round or the result.
 */
export function callRound(
  client: Client,
  code: string,
  extra: Record<string, unknown> = {},
  retry: Record<string, unknown> = {},
): Promise<Round> {
  return client.callTool(
    { name: "run_typescript", arguments: { code, ...extra }, ...retry },
    { allowInputRequired: true, timeout: 120_000 },
  ) as Promise<Round>;
}

/** Options for {@linkcode manualClient}. */
export interface ManualClientOptions {
  /** Sent as `Authorization: Bearer <token>` on every request. */
  token?: string;
  /** The client's name in `clientInfo`. */
  name?: string;
  /** The capabilities the client declares (form elicitation by default). */
  capabilities?: ClientOptions["capabilities"];
}

/** A 2026-era client whose `input_required` rounds are the test's to answer. */
export interface ManualClient {
  /** The connected client; close it when done. */
  client: Client;
  /** {@linkcode callRound} on this client. */
  call(
    code: string,
    extra?: Record<string, unknown>,
    retry?: Record<string, unknown>,
  ): Promise<Round>;
}

/**
 * Connects a 2026-era client (negotiated by probe) that does not fulfil `input_required` rounds
 * by itself, so that a test can answer, withhold or replay them.
 *
 * @param url The MCP endpoint.
 * @param options Token, name and capabilities.
 * @returns The client and its {@linkcode callRound}.
 */
export async function manualClient(
  url: URL,
  options: ManualClientOptions = {},
): Promise<ManualClient> {
  const client = new Client({ name: options.name ?? "mrtr-manual", version: "1" }, {
    capabilities: options.capabilities ?? { elicitation: { form: {} } },
    versionNegotiation: { mode: "auto" },
    inputRequired: { autoFulfill: false },
  });
  const headers: Record<string, string> = options.token === undefined
    ? {}
    : { authorization: `Bearer ${options.token}` };
  await client.connect(new StreamableHTTPClientTransport(url, { requestInit: { headers } }));
  return { client, call: (code, extra, retry) => callRound(client, code, extra, retry) };
}

/**
 * Calls `run_typescript` or `run_python` and returns its structured result.
 *
 * @param client A connected client.
 * @param tool The tool.
 * @param code The code.
 * @param extra More arguments (`session`, `timeoutMs`).
 * @param requestOptions The request's options: `signal`, `onprogress`, `timeout` (120 s by
 *   default).
 * @returns The result as the client sees it.
 */
export async function callRun(
  client: Client,
  tool: "run_typescript" | "run_python",
  code: string,
  extra: Record<string, unknown> = {},
  requestOptions: Parameters<Client["callTool"]>[1] = {},
): Promise<RunResult> {
  const result = await client.callTool({ name: tool, arguments: { code, ...extra } }, {
    timeout: 120_000,
    ...requestOptions,
  });
  return {
    ...(result.structuredContent as unknown as ExecutionResult),
    isError: result.isError === true,
  };
}

/**
 * Joins the text blocks of a tool result, as a model reads them (`search_tools`' answer).
 *
 * @param result The result of `callTool`.
 * @returns Its text blocks, one a line.
 */
export function resultText(result: unknown): string {
  const content = (result as { content?: Array<{ type: string; text?: string }> }).content ?? [];
  return content.map((block) => block.text ?? "").join("\n");
}

/**
 * Records every message the client receives and every error it reports, ahead of its own
 * handling, so that a test can check that nothing forged reached it.
 *
 * @param client A connected client.
 * @returns The lists, filled as messages arrive.
 * @throws {Error} When the client has no transport.
 */
export function recordInbound(
  client: Client,
): { inbound: Array<Record<string, unknown>>; errors: string[] } {
  const inbound: Array<Record<string, unknown>> = [];
  const errors: string[] = [];
  const transport = client.transport;
  assert(transport, "the client has no transport");
  const deliver = transport.onmessage;
  transport.onmessage = (message, extra) => {
    inbound.push(message as unknown as Record<string, unknown>);
    deliver?.(message, extra);
  };
  client.onerror = (error) => errors.push(error.message);
  return { inbound, errors };
}

/**
 * JSON-RPC lines that sandbox code tries to smuggle onto the server's stdout: 200 tool results,
 * a log notification and a request, each carrying `marker`.
 *
 * @param marker What to search the client's inbound traffic for.
 * @returns One message per line, without newlines.
 */
export function forgedJsonRpcLines(marker: string): string[] {
  const response = (id: number) =>
    JSON.stringify({
      jsonrpc: "2.0",
      id,
      result: {
        content: [{ type: "text", text: marker }],
        structuredContent: {
          ok: true,
          stdout: marker,
          stderr: "",
          returnValue: marker,
          durationMs: 1,
          toolCalls: [],
        },
        isError: false,
      },
    });
  return [
    ...Array.from({ length: 200 }, (_, id) => response(id)),
    JSON.stringify({
      jsonrpc: "2.0",
      method: "notifications/message",
      params: { level: "error", data: marker },
    }),
    JSON.stringify({ jsonrpc: "2.0", id: marker, method: "ping" }),
  ];
}

/**
 * The `initialize` request a 2025-era client sends first.
 *
 * @param clientName The client's name.
 * @param id The request id.
 * @returns The request.
 */
export function initializeRequest(clientName: string, id = 1): Record<string, unknown> {
  return {
    jsonrpc: "2.0",
    id,
    method: "initialize",
    params: {
      protocolVersion: "2025-11-25",
      capabilities: {},
      clientInfo: { name: clientName, version: "1" },
    },
  };
}

/**
 * POSTs an `initialize` to an HTTP endpoint, as a client that has not started a session would.
 *
 * @param url The MCP endpoint.
 * @param clientName The client's name in `clientInfo`.
 * @param authorization The `Authorization` header, or none.
 * @returns The raw response.
 */
export async function postInitialize(
  url: URL,
  clientName: string,
  authorization?: string,
): Promise<Response> {
  return await fetch(url, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      ...(authorization === undefined ? {} : { authorization }),
    },
    body: JSON.stringify(initializeRequest(clientName)),
  });
}
