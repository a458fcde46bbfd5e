/**
 * Serves the in-sandbox API (`callMCPTool`, `discoverMCPTools`, `searchTools`, `getToolSchema`,
 * `tools.<server>.<tool>`) for one execution, and hands `llm.*`, `askUser` and `progress` to its
 * {@linkcode ClientSession}. Requests arrive as frames from the child and are untrusted: every
 * decision — policy, caps, rate limits, schema validation — is made here.
 *
 * @module
 */
import type { Settings } from "../../config/settings.ts";
import type { ToolPolicy } from "../../policy/tool_policy.ts";
import type { RunTokenizer } from "../../privacy/tokenizer.ts";
import type { ClientSession } from "../../sampling/session.ts";
import type { Hub } from "../../upstream/hub.ts";
import { UpstreamMessageTooLarge } from "../../upstream/message_lines.ts";
import { skillSearchName, skillSignature, toolSignature } from "../../upstream/signatures.ts";
import type { SkillRecord } from "../../skills/store.ts";
import { searchToolsAndSkills } from "./tool_search.ts";
import type { ApprovalGate } from "./approvals.ts";
import type { ToolCallRecord } from "../result.ts";
import { CodeExecutorError, type ExecutionErrorInfo, toolResultTooLarge } from "../../errors.ts";

/** A reply frame body: a value, or an error the runner rethrows. */
export type BridgeReply =
  | { ok: true; value: unknown }
  | { ok: false; error: Pick<ExecutionErrorInfo, "type" | "message"> };

function str(value: unknown, field: string, max = 1000): string {
  if (typeof value !== "string" || value.length === 0 || value.length > max) {
    throw new CodeExecutorError("TypeError", `${field} must be a non-empty string`);
  }
  return value;
}

function argsObject(value: unknown, name: string): Record<string, unknown> {
  if (value === undefined || value === null) return {};
  if (typeof value !== "object" || Array.isArray(value)) {
    throw new CodeExecutorError(
      "TypeError",
      `Arguments for ${name} must be an object, got ${
        Array.isArray(value) ? "an array" : typeof value
      }`,
    );
  }
  return value as Record<string, unknown>;
}

/** Turns an upstream result into what sandbox code receives. */
function unwrapResult(result: {
  content?: Array<Record<string, unknown>>;
  structuredContent?: unknown;
}): unknown {
  if (result.structuredContent !== undefined) return result.structuredContent;
  const content = Array.isArray(result.content) ? result.content : [];
  const texts = content.filter((block) => block.type === "text" && typeof block.text === "string");
  if (texts.length > 0 && texts.length === content.length) {
    return texts.map((b) => b.text).join("\n");
  }
  return content;
}

function upstreamErrorText(result: { content?: Array<Record<string, unknown>> }): string {
  const content = Array.isArray(result.content) ? result.content : [];
  const text = content.filter((b) => b.type === "text").map((b) => String(b.text)).join("\n");
  return text || "the tool reported an error without a message";
}

/**
 * Tool calls listed in a result (and in the audit log); later ones are only counted, so that a
 * loop of calls cannot grow a response, or the server's memory, without bound.
 */
export const MAX_TOOL_CALL_RECORDS = 100;
/** Characters of a tool name kept in a record: a refused call may name anything. */
const MAX_RECORDED_NAME = 200;

/** Options of {@linkcode ToolBridge}: what one run's requests are served by. */
export interface ToolBridgeOptions {
  /** Upstream connections, catalog and limiter; tool requests fail without it. */
  hub?: Hub;
  /** This run's tool policy. */
  policy: ToolPolicy;
  /** The admin's settings. */
  settings: Settings;
  /** Aborted when the run ends: an upstream call in flight is cancelled. */
  signal?: AbortSignal;
  /** Answers `sample`, `elicit` and `progress`, and reports tool calls as progress. */
  client?: ClientSession;
  /** Asks a person before calls that need approval (`approvals`). */
  gate?: ApprovalGate;
  /**
   * Placeholders for personal data (`privacy.tokenize`): values back in arguments, placeholders in
   * results and in every error the code sees.
   */
  tokenizer?: RunTokenizer;
  /** The saved skills the run's principal sees, for `searchTools`. */
  skills?: () => Promise<readonly SkillRecord[]>;
}

/** The bridge of one execution. */
export class ToolBridge {
  #hub: Hub | undefined;
  #policy: ToolPolicy;
  #settings: Settings;
  #signal: AbortSignal | undefined;
  #client: ClientSession | undefined;
  #gate: ApprovalGate | undefined;
  #tokenizer: RunTokenizer | undefined;
  #skills: (() => Promise<readonly SkillRecord[]>) | undefined;
  #calls = 0;
  #omitted = 0;
  /** The first {@linkcode MAX_TOOL_CALL_RECORDS} calls, in the order they finished. */
  readonly records: ToolCallRecord[] = [];

  /** Calls that finished after the records were full. */
  get omitted(): number {
    return this.#omitted;
  }

  /**
   * Creates the bridge of one execution, under that execution's policy and signal.
   *
   * @param options The hub, policy, settings, end signal, client session, approval gate,
   * tokenizer and skills of the run.
   */
  constructor(options: ToolBridgeOptions) {
    this.#hub = options.hub;
    this.#policy = options.policy;
    this.#settings = options.settings;
    this.#signal = options.signal;
    this.#client = options.client;
    this.#gate = options.gate;
    this.#tokenizer = options.tokenizer;
    this.#skills = options.skills;
  }

  /**
   * Handles one request frame from the sandbox.
   *
   * @param frame The frame, as parsed (untrusted).
   * @returns The reply; never throws.
   */
  async handle(frame: Record<string, unknown>): Promise<BridgeReply> {
    try {
      return { ok: true, value: await this.#dispatch(frame) };
    } catch (error) {
      const reply = CodeExecutorError.from(error, "ToolCallError").toReply();
      // A tool's error or a schema message may quote the values the arguments were given.
      if (!this.#tokenizer) return reply;
      try {
        reply.error.message = await this.#tokenizer.text(reply.error.message);
      } catch (unavailable) {
        // Without the shared store's placeholders the message cannot be shown at all.
        return CodeExecutorError.from(unavailable, "StateUnavailable").toReply();
      }
      return reply;
    }
  }

  async #dispatch(frame: Record<string, unknown>): Promise<unknown> {
    if (frame.op === "sample" || frame.op === "elicit" || frame.op === "progress") {
      if (!this.#client) {
        throw new CodeExecutorError(
          "TypeError",
          `Sandbox request "${frame.op}" is not available here`,
        );
      }
      return await this.#client.handle(frame.op, frame.args);
    }
    if (frame.op === "search") return await this.#search(frame);
    if (!this.#hub) {
      throw new CodeExecutorError(
        "ToolCallError",
        "No MCP servers are available to this execution",
      );
    }
    const catalog = this.#hub.catalog;
    switch (frame.op) {
      case "call":
        return await this.#call(str(frame.name, "The tool name"), frame.args);
      case "proxy": {
        const name = await catalog.resolveProxy(
          str(frame.server, "The server"),
          str(frame.tool, "The tool"),
        );
        return await this.#call(name, frame.args);
      }
      case "discover": {
        const search = typeof frame.search === "string" ? frame.search : "";
        const server = typeof frame.server === "string" ? frame.server : undefined;
        const found = await catalog.search(search, { server, limit: Infinity });
        return found.filter((e) => !this.#policy.check(e.fullName)).map((e) => ({
          name: e.fullName,
          server: e.server,
          description: e.description ?? "",
          inputSchema: e.inputSchema,
        }));
      }
      case "schema": {
        const entry = await catalog.lookup(str(frame.name, "The tool name"));
        return {
          name: entry.fullName,
          description: entry.description ?? "",
          inputSchema: entry.inputSchema,
          ...(entry.outputSchema ? { outputSchema: entry.outputSchema } : {}),
          signature: toolSignature(entry),
        };
      }
      default:
        throw new CodeExecutorError("TypeError", `Unknown sandbox request "${String(frame.op)}"`);
    }
  }

  /** `searchTools`: upstream tools this run may call, and the caller's saved skills. */
  async #search(frame: Record<string, unknown>): Promise<unknown> {
    const limit = typeof frame.limit === "number" && frame.limit > 0
      ? Math.min(frame.limit, 100)
      : 10;
    const query = str(frame.query, "The query");
    if (!this.#hub && !this.#skills) {
      throw new CodeExecutorError(
        "ToolCallError",
        "No MCP servers are available to this execution",
      );
    }
    const found = await searchToolsAndSkills(
      { catalog: this.#hub?.catalog, policy: this.#policy, skills: this.#skills },
      query,
      limit,
    );
    return found.map((hit) =>
      hit.kind === "skill"
        ? {
          name: skillSearchName(hit.skill),
          kind: "skill",
          description: hit.skill.description,
          signature: skillSignature(hit.skill),
        }
        : {
          name: hit.entry.fullName,
          description: hit.entry.description ?? "",
          signature: toolSignature(hit.entry),
        }
    );
  }

  async #call(name: string, rawArgs: unknown): Promise<unknown> {
    const started = performance.now();
    const record = (ok: boolean) => {
      if (this.records.length >= MAX_TOOL_CALL_RECORDS) {
        this.#omitted++;
        return;
      }
      this.records.push({
        name: name.slice(0, MAX_RECORDED_NAME),
        ok,
        durationMs: Math.round(performance.now() - started),
      });
    };
    try {
      const value = await this.#callChecked(name, rawArgs);
      record(true);
      return value;
    } catch (error) {
      record(false);
      throw error;
    }
  }

  async #callChecked(name: string, rawArgs: unknown): Promise<unknown> {
    const hub = this.#hub!;
    const tools = this.#settings.tools;
    const refusal = this.#policy.check(name);
    if (refusal) throw new CodeExecutorError("ToolPolicyError", refusal);
    if (this.#calls >= tools.maxCallsPerExecution) {
      throw new CodeExecutorError(
        "ToolPolicyError",
        `Cannot call tool "${name}": this execution already made ${tools.maxCallsPerExecution} tool calls (tools.maxCallsPerExecution); batch the work or split it across runs`,
      );
    }
    this.#calls++;
    const entry = await hub.catalog.lookup(name);
    const args = argsObject(rawArgs, name);
    // The values go in place of the placeholders here, in the host: the schema sees the values,
    // while the person asked to approve (whose answer may reach the model) sees the placeholders.
    const values = this.#tokenizer ? await this.#tokenizer.resolveArgs(args, name) : args;
    const invalid = hub.catalog.validator(entry)(values);
    if (invalid) throw new CodeExecutorError("ToolValidationError", invalid);
    // After the allowlists and the schema, before the rate limit and the call: a person is asked
    // only about a call that would otherwise be made, and a refused one costs no rate.
    await this.#gate?.check(entry, args);
    const wait = hub.limiter.take(entry.server);
    if (wait !== undefined) {
      throw new CodeExecutorError(
        "RateLimitError",
        `Cannot call tool "${name}": server "${entry.server}" allows ${tools.callsPerMinutePerServer} calls per minute (tools.callsPerMinutePerServer); retry in ${
          Math.ceil(wait / 1000)
        } s`,
      );
    }
    this.#client?.toolCall(name);
    const result = await hub.pool.callTool(entry.server, entry.name, values, {
      timeoutMs: hub.pool.config(entry.server)?.timeoutMs ?? tools.callTimeoutMs,
      signal: this.#signal,
    }).catch((error) => {
      if (!(error instanceof UpstreamMessageTooLarge)) throw error;
      throw toolResultTooLarge(name, {
        size: `more than ${error.limit} bytes`,
        maxResultBytes: tools.maxResultBytes,
      });
    });
    if (result.isError) throw new CodeExecutorError("ToolError", upstreamErrorText(result));
    const value = unwrapResult(result);
    const size = new TextEncoder().encode(JSON.stringify(value) ?? "").length;
    if (size > tools.maxResultBytes) {
      throw toolResultTooLarge(name, {
        size: `${size} bytes`,
        maxResultBytes: tools.maxResultBytes,
      });
    }
    const tokenizer = this.#tokenizer;
    return tokenizer && !tokenizer.raw(entry.server) ? await tokenizer.value(value) : value;
  }
}
