/**
 * Asking a person before an upstream call that needs approval (`approvals`, see
 * `src/policy/approvals.ts` for which calls). One {@linkcode ApprovalGate} per run holds the
 * run's "for the rest of the run" approvals, holds the run while it waits, and audits every
 * decision; an {@linkcode Approver} asks:
 *
 * - {@linkcode ElicitingApprover}: a 2025-era client with form elicitation is asked directly;
 * - {@linkcode PendingApprover}: a client that cannot be asked gets the call refused with the way
 *   a person approves it (`approve_pending_calls`, which clients confirm with their user), and the
 *   approved call goes through once on the next identical call.
 *
 * A 2026-07-28 client is asked with the same question through the parked run's `elicit`
 * (`src/exec/parked_runs.ts`: an `input_required` round), by an {@linkcode ElicitingApprover}.
 *
 * @module
 */
import type { AuditLog } from "../../policy/audit.ts";
import {
  type ApprovalPolicy,
  argumentDigest,
  PENDING_TTL_MS,
  type PendingCalls,
  showCall,
} from "../../policy/approvals.ts";
import type { ClientChannel } from "../../sampling/channel.ts";
import { CodeExecutorError } from "../../errors.ts";
import type { RunHold } from "../run.ts";

/** One call that needs approval, as the approver sees it. */
export interface ApprovalRequest {
  /** Who runs the code. */
  principal: string;
  /** The upstream server. */
  server: string;
  /** `mcp__<server>__<tool>`. */
  fullName: string;
  /** The call as shown to a person (redacted, long values cut). */
  shown: string;
  /** `sha256:` of the arguments' canonical JSON. */
  digest: string;
  /** Why it needs approval. */
  reason: string;
}

/** A person's answer (or its absence). */
export interface ApprovalDecision {
  /** Whether the call may be made. */
  approved: boolean;
  /** Approved for the rest of the run, not only this call. */
  forRun?: boolean;
  /** How it was decided, for the audit log: `elicitation`, `timeout`, `approval-tool`, … */
  how: string;
  /** For a denial: the message the code's `ApprovalDenied` carries. */
  message?: string;
}

/** Asks a person about one call. */
export interface Approver {
  /**
   * Decides one call; never throws for a person's "no" (that is `approved: false`).
   *
   * @param request The call.
   * @param signal Aborted when the run ends.
   */
  decide(request: ApprovalRequest, signal: AbortSignal): Promise<ApprovalDecision>;
}

/**
 * The question's one field. `enum` with `enumNames` (rather than 2025-11-25's titled `oneOf`): every
 * 2025-era revision with form elicitation accepts it, 2025-06-18 clients included.
 */
const DECISION_SCHEMA = {
  type: "object",
  properties: {
    decision: {
      type: "string",
      title: "Decision",
      enum: ["approve", "deny", "approve_run"],
      enumNames: ["Approve this call", "Deny", "Approve this tool for the rest of the run"],
    },
  },
  required: ["decision"],
};

/** Asks the client's user with a form elicitation. */
export class ElicitingApprover implements Approver {
  #elicit: NonNullable<ClientChannel["elicit"]>;
  #timeoutMs: number;
  #how: string;

  /**
   * Creates an approver that asks through the client.
   *
   * @param elicit The client channel's `elicit`.
   * @param timeoutMs `approvals.timeoutMs`.
   * @param how How an answer was given, for the audit log: `elicitation` (a 2025-era request),
   *   `input-required` (a 2026-07-28 round).
   */
  constructor(
    elicit: NonNullable<ClientChannel["elicit"]>,
    timeoutMs: number,
    how = "elicitation",
  ) {
    this.#elicit = elicit;
    this.#timeoutMs = timeoutMs;
    this.#how = how;
  }

  async decide(request: ApprovalRequest, signal: AbortSignal): Promise<ApprovalDecision> {
    const message = [
      `Code run by the model wants to call the tool "${
        request.fullName.slice(request.server.length + 7)
      }" of the MCP server "${request.server}".`,
      `It needs your approval because ${request.reason}.`,
      `The call: ${request.shown}`,
    ].join("\n");
    const timeout = AbortSignal.timeout(this.#timeoutMs);
    try {
      const answer = await this.#elicit({ message, requestedSchema: DECISION_SCHEMA }, {
        signal: AbortSignal.any([signal, timeout]),
        timeoutMs: this.#timeoutMs,
      });
      const decision = answer.action === "accept" ? answer.content?.decision : undefined;
      const how = this.#how;
      if (decision === "approve") return { approved: true, how };
      if (decision === "approve_run") return { approved: true, forRun: true, how };
      return {
        approved: false,
        how,
        message: `The user denied the call to ${request.fullName}`,
      };
    } catch (error) {
      const timedOut = timeout.aborted ||
        /time(d)? ?out/i.test(error instanceof Error ? error.message : String(error));
      if (timedOut && !signal.aborted) {
        return {
          approved: false,
          how: "timeout",
          message:
            `Nobody approved the call to ${request.fullName} within approvals.timeoutMs (${this.#timeoutMs} ms)`,
        };
      }
      return {
        approved: false,
        how: signal.aborted ? "cancelled" : "elicitation-error",
        message: `The call to ${request.fullName} could not be approved: ${
          error instanceof Error ? error.message : String(error)
        }`,
      };
    }
  }
}

/**
 * For clients that cannot be asked: the call is refused, kept as pending, and goes through once
 * after `approve_pending_calls` approved it (see SECURITY.md for what this does and does not
 * protect).
 */
export class PendingApprover implements Approver {
  #store: PendingCalls;
  #why: string;
  #offer: (() => void) | undefined;

  /**
   * Creates an approver for a client that cannot be asked.
   *
   * @param store The host's pending calls (this process's, or the shared store's).
   * @param why Why the client cannot be asked, for the message.
   * @param offer Makes `approve_pending_calls` available to the client, at the first refusal.
   */
  constructor(store: PendingCalls, why: string, offer?: () => void) {
    this.#store = store;
    this.#why = why;
    this.#offer = offer;
  }

  async decide(request: ApprovalRequest): Promise<ApprovalDecision> {
    const { principal, fullName, digest, shown } = request;
    // A store that cannot be asked throws StateUnavailable here: the call is not made.
    if (await this.#store.take({ principal, fullName, digest })) {
      return { approved: true, how: "approval-tool" };
    }
    const id = await this.#store.add({ principal, fullName, digest }, shown);
    this.#offer?.();
    const claim = JSON.stringify({ calls: [{ id, call: shown }] });
    return {
      approved: false,
      how: "pending",
      message:
        `A person must approve the call to ${fullName} (${request.reason}), and this client cannot ask them (${this.#why}). The call was not made. To have it approved, call the tool approve_pending_calls with ${claim} — the client asks its user to confirm it — then run the code again: the same call then goes through once (within ${
          PENDING_TTL_MS / 60_000
        } minutes)`,
    };
  }
}

/**
 * Chooses who asks a person about a run's calls: the client's user through elicitation, the
 * pending path for a client that cannot elicit, or nobody (a run without a client: denied at once).
 *
 * @param client The run's client channel, if it has a client.
 * @param store The host's pending calls.
 * @param timeoutMs `approvals.timeoutMs`.
 * @returns The approver.
 */
export function approverFor(
  client: ClientChannel | undefined,
  store: PendingCalls,
  timeoutMs: number,
): Approver {
  if (client?.elicit) {
    const how = client.inRounds ? "input-required" : "elicitation";
    return new ElicitingApprover(client.elicit.bind(client), timeoutMs, how);
  }
  if (client) {
    return new PendingApprover(
      store,
      client.noElicitation ?? "it did not offer elicitation",
      client.offerApproval?.bind(client),
    );
  }
  return {
    decide: (request) =>
      Promise.resolve({
        approved: false,
        how: "no-client",
        message:
          `The call to ${request.fullName} needs a person's approval (${request.reason}), and a run without an MCP client has nobody to ask; the admin can exempt the tool with approvals.waive`,
      }),
  };
}

/** Options of {@linkcode ApprovalGate}. */
export interface ApprovalGateOptions {
  /** The admin's policy. */
  policy: ApprovalPolicy;
  /** Who asks a person; none means nobody can be asked (mode `deny` behaves the same). */
  approver: Approver;
  /** Held while waiting. */
  hold?: RunHold;
  /** Where decisions are recorded. */
  audit?: AuditLog;
  /** The run's principal. */
  principal: string;
  /** The run's id in the audit log. */
  executionId: string;
  /** Aborted when the run ends. */
  signal: AbortSignal;
}

/** The approvals of one run. */
export class ApprovalGate {
  #options: ApprovalGateOptions;
  #forRun = new Set<string>();

  /**
   * Creates the gate of one run, with no approvals for the run yet.
   *
   * @param options Policy, approver, hold, audit and the run's identity.
   */
  constructor(options: ApprovalGateOptions) {
    this.#options = options;
  }

  /**
   * Lets a call through or throws `ApprovalDenied`. Calls that need no approval return at once.
   *
   * @param tool The tool's server, full name and annotations.
   * @param args The validated arguments.
   * @throws {CodeExecutorError} `ApprovalDenied`.
   */
  async check(
    tool: { server: string; fullName: string; annotations?: Record<string, unknown> },
    args: Record<string, unknown>,
  ): Promise<void> {
    const { policy, approver, hold, signal } = this.#options;
    const reason = policy.needs(tool);
    if (reason === undefined) return;
    const digest = argumentDigest(args);
    const started = performance.now();
    let decision: ApprovalDecision;
    if (this.#forRun.has(tool.fullName)) {
      decision = { approved: true, how: "earlier-in-run" };
    } else if (policy.mode === "deny") {
      decision = {
        approved: false,
        how: "mode-deny",
        message:
          `The call to ${tool.fullName} needs approval (${reason}) and the admin set approvals.mode to deny: such calls are never made`,
      };
    } else {
      const request: ApprovalRequest = {
        principal: this.#options.principal,
        server: tool.server,
        fullName: tool.fullName,
        shown: showCall(tool.fullName, args),
        digest,
        reason,
      };
      const ask = () => approver.decide(request, signal);
      try {
        decision = hold ? await hold.during(ask) : await ask();
      } catch (error) {
        // The pending path could not reach the shared store: denied, and said why.
        this.#audited(tool.fullName, digest, { approved: false, how: "error" }, started);
        throw error;
      }
      if (decision.approved && decision.forRun) this.#forRun.add(tool.fullName);
    }
    this.#audited(tool.fullName, digest, decision, started);
    if (!decision.approved) {
      throw new CodeExecutorError(
        "ApprovalDenied",
        decision.message ?? `The call to ${tool.fullName} was not approved`,
      );
    }
  }

  #audited(fullName: string, digest: string, decision: ApprovalDecision, started: number): void {
    this.#options.audit?.record({
      kind: "approval",
      executionId: this.#options.executionId,
      principal: this.#options.principal,
      tool: fullName,
      argumentDigest: digest,
      decision: decision.approved ? "approved" : "denied",
      how: decision.how,
      ...(decision.forRun ? { scope: "run" } : {}),
      ms: Math.round(performance.now() - started),
    });
  }
}
