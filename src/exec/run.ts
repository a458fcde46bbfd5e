/**
 * What a caller of the executor chooses for one run: its limits within the admin's, its tools,
 * its permissions, its client and its principal.
 *
 * @module
 */
import type { Hub } from "../upstream/hub.ts";
import type { Logger } from "../log.ts";
import type { AuditLog } from "../policy/audit.ts";
import type { RequestedPermissions } from "../policy/permissions.ts";
import type { ClientChannel } from "../sampling/channel.ts";
import type { RunHold } from "./child/execution.ts";
import type { SkillStore } from "../skills/store.ts";

/** The principal of stdio and of HTTP without authentication: the machine's own user. */
export const LOCAL_PRINCIPAL = "local";

/** Options of one run. */
export interface RunOptions {
  /** Wall-clock limit; defaults to `limits.timeoutMs`, at most `limits.maxTimeoutMs`. */
  timeoutMs?: number;
  /** Extra permissions, narrowed against the admin's settings. */
  permissions?: RequestedPermissions;
  /** Globs of upstream tools the code may call, narrowing the admin's `tools.allow`. */
  allowedTools?: string[];
  /** Aborting it cancels the run, queued or running. */
  signal?: AbortSignal;
  /** The MCP client of the tool call: its model, its user, its progress token. */
  client?: ClientChannel;
  /** Lower LLM caps for this run; each at most the admin's `sampling` value. */
  sampling?: { maxRounds?: number; maxTokens?: number };
  /** Who runs: `local` (the default) on stdio, the token's principal over HTTP. */
  principal?: string;
  /** Held while the run waits for a person or a client (a parked run's); a fresh one otherwise. */
  hold?: RunHold;
}

/** Options of a Python run. */
export interface PythonRunOptions extends Omit<RunOptions, "permissions"> {
  /** Keep the interpreter under this id for later runs (globals persist); fresh when omitted. */
  session?: string;
}

/** Options of {@linkcode Executor}. */
export interface ExecutorOptions {
  /** Where to report problems. */
  log: Logger;
  /** Upstream MCP servers the code may call; none when omitted. */
  hub?: Hub;
  /** Where executions and tool calls are recorded; nothing is recorded when omitted. */
  audit?: AuditLog;
  /**
   * Saved skills: the in-sandbox `skills` API saves, lists and calls them, and `searchTools` finds
   * them beside the tools; without it the API fails.
   */
  skills?: SkillStore;
}
