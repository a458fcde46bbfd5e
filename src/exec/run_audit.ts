/**
 * The audit records of one run: one `execution` record and one `tool_call` record per call, up
 * to a fixed number per run, so that no single run can rotate the history of the others out of
 * the audit files.
 *
 * @module
 */
import type { Settings } from "../config/settings.ts";
import type { AuditLog } from "../policy/audit.ts";
import type { RunTokenizer } from "../privacy/tokenizer.ts";
import { sha256Hex } from "../_util.ts";
import type { ExecutionResult } from "./result.ts";

/**
 * `tool_call` records written per run; the calls past it are counted in one
 * `tool_calls_omitted` record (and in the execution record's `toolCallsOmitted`).
 */
export const AUDIT_TOOL_CALLS_PER_RUN = 100;

/** What the audit log says about one run. */
export interface RunAuditEntry {
  /** The run's id, shared by all its records. */
  executionId: string;
  /** Who ran it. */
  principal: string;
  /** `typescript` or `python`. */
  language: string;
  /** The code; only its hash is recorded unless `audit.includeCode`. */
  code: string;
  /** The Python session, if any. */
  session?: string;
  /** The globs of tools the caller allowed; the admin's `tools.allow` when none. */
  allowedTools?: readonly string[];
  /** The admin's `audit` and `tools` settings. */
  settings: Pick<Settings, "audit" | "tools">;
  /** With `privacy.tokenize`: the code is recorded with the placeholders the model sees. */
  tokenizer?: RunTokenizer;
  /** What the run produced. */
  result: ExecutionResult;
}

const encoder = new TextEncoder();

/**
 * Writes the records of one run.
 *
 * @param audit The audit log.
 * @param entry The run.
 */
export async function recordRun(audit: AuditLog, entry: RunAuditEntry): Promise<void> {
  const { result, executionId, settings } = entry;
  // The values the code itself holds are written down as the placeholders the model sees; with
  // the shared store away, the code is not written at all (its digest is).
  const code = !settings.audit.includeCode
    ? undefined
    : entry.tokenizer
    ? await entry.tokenizer.text(entry.code).catch(() => undefined)
    : entry.code;
  const calls = result.toolCalls.slice(0, AUDIT_TOOL_CALLS_PER_RUN);
  const omitted = result.toolCalls.length - calls.length + (result.toolCallsOmitted ?? 0);
  audit.record({
    kind: "execution",
    executionId,
    principal: entry.principal,
    language: entry.language,
    ...(entry.session ? { session: entry.session } : {}),
    codeSha256: sha256Hex(entry.code),
    ...(code !== undefined ? { code } : {}),
    allowedTools: entry.allowedTools ?? settings.tools.allow,
    deniedTools: settings.tools.deny,
    toolCalls: calls.map((c) => ({ name: c.name, ok: c.ok, ms: c.durationMs })),
    ...(omitted > 0 ? { toolCallsOmitted: omitted } : {}),
    outcome: result.ok ? "ok" : "error",
    ...(result.error ? { errorType: result.error.type } : {}),
    durationMs: result.durationMs,
    outputBytes: {
      stdout: encoder.encode(result.stdout).length,
      stderr: encoder.encode(result.stderr).length,
    },
    // Which outputs the run kept, never their text: who holds an id can be traced to its run.
    ...(result.outputs
      ? { keptOutputs: result.outputs.map(({ id, part, bytes }) => ({ id, part, bytes })) }
      : {}),
    ...(result.sampling ? { sampling: result.sampling } : {}),
  });
  for (const call of calls) {
    audit.record({
      kind: "tool_call",
      executionId,
      principal: entry.principal,
      name: call.name,
      ok: call.ok,
      ms: call.durationMs,
    });
  }
  if (omitted > 0) {
    audit.record({
      kind: "tool_calls_omitted",
      executionId,
      principal: entry.principal,
      count: omitted,
    });
  }
}
