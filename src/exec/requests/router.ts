/**
 * What serves one run's requests, and where each goes: `output` to the run's kept outputs,
 * `skill` to a {@linkcode SkillBridge} of its level, everything else (tools, search, LLM rounds,
 * questions, progress) to the run's {@linkcode ToolBridge} and its {@linkcode ClientSession}; and
 * the nested runs that skills in the other language start, under the caller's scope.
 *
 * @module
 */
import type { Settings } from "../../config/settings.ts";
import { CodeExecutorError, timedOut } from "../../errors.ts";
import {
  ApprovalPolicy,
  localPendingCalls,
  PendingApprovals,
  type PendingCalls,
} from "../../policy/approvals.ts";
import type { AuditLog } from "../../policy/audit.ts";
import { ToolPolicy } from "../../policy/tool_policy.ts";
import { tokenizedProgress } from "../../privacy/tokenizer.ts";
import { ClientSession } from "../../sampling/session.ts";
import { createProviderBackend } from "../../sampling/providers.ts";
import type { SamplingBackend } from "../../sampling/types.ts";
import type { SkillLanguage, SkillRecord, SkillStore } from "../../skills/store.ts";
import type { PendingStore } from "../../state/pending_store.ts";
import type { Hub } from "../../upstream/hub.ts";
import type { OutputKeeper } from "../output_store.ts";
import type { ExecutionResult } from "../result.ts";
import { LOCAL_PRINCIPAL } from "../../principals.ts";
import type { RunContext, RunHold } from "../run.ts";
import { sharedPendingCalls } from "../shared_approvals.ts";
import type { Lease } from "../runtime.ts";
import { ApprovalGate, approverFor } from "./approvals.ts";
import { MAX_SKILL_DEPTH, SkillBridge, type SkillSource } from "./skill_bridge.ts";
import { ToolBridge } from "./tool_bridge.ts";

/** What every run of an executor is served by: its settings and services. */
export interface RequestServices {
  /** The admin's settings. */
  settings: Settings;
  /** Upstream MCP servers; tool requests fail without them. */
  hub?: Hub;
  /** Saved skills; skill requests fail without them. */
  skills?: SkillStore;
  /** Where LLM rounds and approvals are recorded. */
  audit?: AuditLog;
  /** The provider API used when the client cannot sample. */
  fallback?: SamplingBackend;
  /** Takes personal data out of LLM prompts and answers (`privacy.redactSampling`). */
  scrubPersonalData?: (text: string) => string;
  /** Which calls need a person's approval (`approvals`). */
  approvals: ApprovalPolicy;
  /** Calls refused for want of a person, for `approve_pending_calls`. */
  pending: PendingCalls;
}

/**
 * The services of every run's requests, from the settings and what the executor was given.
 *
 * @param settings The admin's settings.
 * @param given The hub, the skills and the audit log.
 * @param privacy What takes personal data out of LLM rounds, and the shared store's pending
 *   calls (`state.url`), else this process's.
 * @returns The services.
 */
export function requestServices(
  settings: Settings,
  given: { hub?: Hub; skills?: SkillStore; audit?: AuditLog },
  privacy: { scrubPersonalData?: (text: string) => string; pending?: PendingStore },
): RequestServices {
  const provider = settings.sampling.provider;
  return {
    settings,
    hub: given.hub,
    skills: given.skills,
    audit: given.audit,
    fallback: provider ? createProviderBackend(provider) : undefined,
    scrubPersonalData: privacy.scrubPersonalData,
    approvals: new ApprovalPolicy(settings.approvals),
    pending: privacy.pending
      ? sharedPendingCalls(privacy.pending, given.audit)
      : localPendingCalls(new PendingApprovals(given.audit)),
  };
}

/** One run's requests, served. */
export interface ServedRequests {
  /** Answers a request frame of the run's top-level code. */
  onRequest: (frame: Record<string, unknown>) => Promise<object>;
  /**
   * Adds what the requests did to the run's result: its tool calls (`toolCalls`,
   * `toolCallsOmitted`) and its LLM rounds (`sampling`).
   */
  report(result: ExecutionResult): ExecutionResult;
}

/**
 * Builds what serves one run's requests: its client session, approval gate and tool bridge,
 * shared by every level of the run.
 *
 * @param services The executor's settings and services.
 * @param run The run.
 * @returns The run's request handler, and what reports on the requests in its result.
 */
export function serveRequests(services: RequestServices, run: RunContext): ServedRequests {
  const { settings, skills } = services;
  const { client, tokenizer, principal, executionId, signal, limits, hold } = run;
  const session = new ClientSession({
    settings: settings.sampling,
    caps: limits.caps,
    // progress() messages reach the client, and through it maybe the model.
    channel: tokenizer && client?.progress
      ? { ...client, progress: tokenizedProgress(client.progress, tokenizer) }
      : client,
    fallback: services.fallback,
    audit: services.audit,
    executionId,
    signal,
    elicitationTimeoutMs: limits.timeoutMs,
    scrubPersonalData: services.scrubPersonalData,
  });
  const approvals = services.approvals;
  const gate = approvals.mode === "off" ? undefined : new ApprovalGate({
    policy: approvals,
    approver: approverFor(client, services.pending, approvals.timeoutMs),
    hold,
    audit: services.audit,
    principal,
    executionId,
    signal,
  });
  const bridge = new ToolBridge({
    hub: services.hub,
    policy: new ToolPolicy(settings.tools, run.allowedTools),
    settings,
    signal,
    client: session,
    gate,
    tokenizer,
    skills: skills ? () => skills.list(principal) : undefined,
  });
  const scope: RunScope = {
    bridge,
    outputs: run.outputs,
    hold,
    signal,
    timeoutMs: limits.timeoutMs,
    remainingMs: run.remainingMs,
    maxOutputBytes: settings.limits.maxOutputBytes,
    store: skills,
    principal: principal === LOCAL_PRINCIPAL ? undefined : principal,
    lease: run.lease,
    inline: run.inline,
  };
  return {
    onRequest: runRequests(scope, { language: run.language, depth: 0 }),
    report: (result) => {
      result.toolCalls = bridge.records;
      if (bridge.omitted > 0) result.toolCallsOmitted = bridge.omitted;
      const sampling = session.totals;
      if (sampling.rounds > 0) result.sampling = sampling;
      return result;
    },
  };
}

/**
 * What every level of one run shares: the caller's tool bridge (its policy, call cap, approvals,
 * LLM budget and records), kept outputs, hold, end signal and deadline. A nested run gets the
 * same scope, so a skill can do nothing its caller could not.
 */
interface RunScope {
  /** The caller's tool bridge. */
  bridge: ToolBridge;
  /** The caller's kept outputs (`readOutput`). */
  outputs: OutputKeeper;
  /** Holds the caller and every nested run while a person is asked. */
  hold: RunHold;
  /** Aborted when the caller's run ends: a nested run ends with it. */
  signal: AbortSignal;
  /** The caller's timeout, named when a nested run times out. */
  timeoutMs: number;
  /** What is left of the caller's time. */
  remainingMs(): number;
  /** The caller's output cap, a nested run's too. */
  maxOutputBytes: number;
  /** Where skills are kept; skill requests fail without it. */
  store?: SkillSource;
  /** The store's principal: undefined for the machine's own user (stdio). */
  principal?: string;
  /**
   * Leases a child of the skill's language with the caller's grants, its code and arguments
   * loaded (no admission slot: the caller holds one, and a nested run waiting for another could
   * wait for itself).
   */
  lease(skill: SkillRecord, args: Record<string, unknown>, timeoutMs: number): Promise<Lease>;
  /** The reply fields that run a skill's body in a child of the skill's language. */
  inline(skill: SkillRecord): Record<string, unknown>;
}

const views = new WeakMap<RunScope, SkillSource>();

/**
 * One run's view of the store: a reference resolves once per run (every level of it), until the
 * run saves a skill, so that a loop of calls reads and checks the skill's files once (a `get`
 * took 2-5 ms on 2 busy cores). A skill another run saves meanwhile is seen by the next run.
 */
function runView(scope: RunScope, store: SkillSource): SkillSource {
  let view = views.get(scope);
  if (view) return view;
  const found = new Map<string, Promise<SkillRecord>>();
  view = {
    canSave: (principal) => store.canSave(principal),
    list: (principal) => store.list(principal),
    get: (ref, principal) => {
      let record = found.get(ref);
      if (!record) {
        record = store.get(ref, principal);
        found.set(ref, record);
        record.catch(() => found.delete(ref));
      }
      return record;
    },
    save: async (input, principal) => {
      try {
        return await store.save(input, principal);
      } finally {
        found.clear();
      }
    },
  };
  views.set(scope, view);
  return view;
}

/**
 * Routes the requests of one level of a run: kept outputs, skills, and everything else to the
 * caller's tool bridge.
 */
function runRequests(
  scope: RunScope,
  options: { language: SkillLanguage; depth: number },
): (frame: Record<string, unknown>) => Promise<object> {
  const store = scope.store && runView(scope, scope.store);
  const skills = store && new SkillBridge({
    store,
    language: options.language,
    principal: scope.principal,
    depth: options.depth,
    inline: (skill) => scope.inline(skill),
    nested: (skill, args, depth) => runNested(scope, { skill, args, depth }),
  });
  return (frame) => {
    // Reading a kept output is the principal's own data, not a tool call: no tool policy.
    if (frame.op === "output") return scope.outputs.answer(frame);
    if (frame.op !== "skill") return scope.bridge.handle(frame);
    if (skills) return skills.handle(frame);
    return Promise.resolve(
      new CodeExecutorError("ToolCallError", "Skills are not available on this server").toReply(),
    );
  };
}

/**
 * Nested runs of one run at once. A nested run is a sandbox process that takes no admission slot
 * (its caller holds one), so without a bound one run could start a process per skill call it
 * makes in parallel. The bound is the depth bound, so that a chain of skills alternating languages
 * fits; a call past it fails at once rather than waiting, which could wait for itself.
 */
export const MAX_NESTED_RUNS: number = MAX_SKILL_DEPTH;
const nestedRunning = new WeakMap<RunScope, number>();

/** Runs a skill in the other language within what is left of the caller's time. */
async function runNested(
  scope: RunScope,
  call: { skill: SkillRecord; args: Record<string, unknown>; depth: number },
): Promise<ExecutionResult> {
  const started = performance.now();
  const timeoutMs = Math.floor(scope.remainingMs());
  if (timeoutMs < 1 || scope.signal.aborted) {
    throw timedOut(scope.timeoutMs);
  }
  const running = nestedRunning.get(scope) ?? 0;
  if (running >= MAX_NESTED_RUNS) {
    throw new CodeExecutorError(
      "LimitError",
      `Cannot call skill "${call.skill.name}@${call.skill.version}": ${running} skills in the other language already run for this run, the most at once; await one before calling the next`,
    );
  }
  nestedRunning.set(scope, running + 1);
  try {
    return await leaseAndRun(scope, call, { started, timeoutMs });
  } finally {
    nestedRunning.set(scope, (nestedRunning.get(scope) ?? 1) - 1);
  }
}

async function leaseAndRun(
  scope: RunScope,
  call: { skill: SkillRecord; args: Record<string, unknown>; depth: number },
  time: { started: number; timeoutMs: number },
): Promise<ExecutionResult> {
  const { started, timeoutMs } = time;
  const lease = await scope.lease(call.skill, call.args, timeoutMs);
  try {
    return await lease.run({
      hold: scope.hold,
      timeoutMs: Math.max(1, timeoutMs - Math.round(performance.now() - started)),
      reportedTimeoutMs: scope.timeoutMs,
      maxOutputBytes: scope.maxOutputBytes,
      signal: scope.signal,
      onRequest: runRequests(scope, { language: call.skill.language, depth: call.depth }),
    });
  } finally {
    lease.done();
  }
}
