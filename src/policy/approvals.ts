/**
 * Which upstream calls need a person's yes (`approvals`), how such a call is shown to that person,
 * and the one-time approvals given through `approve_pending_calls` by clients that cannot ask
 * their user themselves. Pure policy: asking is `src/exec/requests/approvals.ts`.
 *
 * @module
 */
import { canonicalJson, sha256Hex } from "../_util.ts";
import type { AuditLog } from "./audit.ts";
import { redact, redactText } from "../redact.ts";
import { globToRegExp } from "./tool_policy.ts";

/** The admin's `approvals` settings. */
export interface ApprovalSettings {
  /** `ask`, `deny` or `off`. */
  mode: "ask" | "deny" | "off";
  /** Globs of tools that need approval whatever their annotations. */
  require: string[];
  /** Globs of tools that never need approval. */
  waive: string[];
  /** How long a call waits for an answer. */
  timeoutMs: number;
}

/** What the policy needs to know of a tool. */
export interface ApprovalSubject {
  /** `mcp__<server>__<tool>`. */
  fullName: string;
  /** The server's hints. */
  annotations?: { readOnlyHint?: boolean; destructiveHint?: boolean };
}

/** Decides which calls need approval. */
export class ApprovalPolicy {
  #settings: ApprovalSettings;
  #require: Array<[string, RegExp]>;
  #waive: RegExp[];

  /**
   * Compiles the admin's globs.
   *
   * @param settings The admin's `approvals`.
   */
  constructor(settings: ApprovalSettings) {
    this.#settings = settings;
    this.#require = settings.require.map((g) => [g, globToRegExp(g)]);
    this.#waive = settings.waive.map(globToRegExp);
  }

  /** `ask`, `deny` or `off`. */
  get mode(): ApprovalSettings["mode"] {
    return this.#settings.mode;
  }

  /** How long a call waits for an answer. */
  get timeoutMs(): number {
    return this.#settings.timeoutMs;
  }

  /**
   * Says why a call of this tool needs approval.
   *
   * @param tool The tool's full name and annotations.
   * @returns Undefined when it does not (or approvals are off), else the reason, for the person.
   */
  needs(tool: ApprovalSubject): string | undefined {
    if (this.#settings.mode === "off") return undefined;
    if (this.#waive.some((re) => re.test(tool.fullName))) return undefined;
    const required = this.#require.find(([, re]) => re.test(tool.fullName));
    if (required) return `the admin's approvals.require rule "${required[0]}" names it`;
    const hints = tool.annotations;
    if (hints?.destructiveHint === true && hints.readOnlyHint !== true) {
      return "its server marks it destructive (destructiveHint)";
    }
    return undefined;
  }
}

/** Characters of one string value shown before it is cut. */
const MAX_SHOWN_STRING = 200;
/** Characters of a whole shown call. */
const MAX_SHOWN_CALL = 2000;

function cut(value: unknown): unknown {
  if (typeof value === "string") {
    if (value.length <= MAX_SHOWN_STRING) return value;
    const bytes = new TextEncoder().encode(value).length;
    return `${value.slice(0, MAX_SHOWN_STRING)}… (${bytes} bytes in all)`;
  }
  if (Array.isArray(value)) return value.map(cut);
  if (typeof value === "object" && value !== null) {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, cut(v)]));
  }
  return value;
}

/**
 * Shows a call to a person: the tool and its arguments, secrets redacted and long values cut
 * with their size.
 *
 * @param fullName `mcp__<server>__<tool>`.
 * @param args The call's arguments.
 * @returns For example `mcp__memory__delete_entities {"entityNames":["Alice"]}`.
 */
export function showCall(fullName: string, args: Record<string, unknown>): string {
  // Strings are redacted one by one, and the JSON again: `"password":"…"` is only seen there.
  const text = `${fullName} ${redactText(JSON.stringify(cut(redact(args))))}`;
  if (text.length <= MAX_SHOWN_CALL) return text;
  return `${text.slice(0, MAX_SHOWN_CALL)}… (${text.length} characters in all)`;
}

/**
 * The digest that identifies a call's arguments in the audit log and in one-time approvals.
 *
 * @param args The call's arguments.
 * @returns `sha256:<hex>` of their canonical JSON.
 */
export function argumentDigest(args: Record<string, unknown>): string {
  return `sha256:${sha256Hex(canonicalJson(args))}`;
}

/** A call refused for want of a person, and then perhaps approved once. */
interface Pending {
  principal: string;
  fullName: string;
  digest: string;
  shown: string;
  approved: boolean;
  expires: number;
}

/** How long a pending call can be approved, and an approval used. */
export const PENDING_TTL_MS = 10 * 60_000;
/** Pending calls kept per principal; the oldest go first. */
const MAX_PENDING_PER_PRINCIPAL = 50;

/** One call to approve, as the model passes it to `approve_pending_calls`. */
export interface ApprovalClaim {
  /** The pending call's id. */
  id: string;
  /** The call exactly as the refusal showed it. */
  call: string;
}

/** A call as pending calls and approvals name it. */
export interface PendingCallKey {
  /** Who made it. */
  principal: string;
  /** `mcp__<server>__<tool>`. */
  fullName: string;
  /** {@linkcode argumentDigest} of its arguments. */
  digest: string;
}

/** The outcome of one claim of `approve_pending_calls`. */
export interface ClaimOutcome {
  /** The claim's id. */
  id: string;
  /** Whether it was approved now. */
  ok: boolean;
  /** The call approved, or why not. */
  text: string;
  /** The tool approved. */
  fullName?: string;
  /** The digest approved. */
  digest?: string;
}

/**
 * Pending calls and their one-time approvals as runs and `approve_pending_calls` use them: this
 * process's ({@linkcode localPendingCalls}), or the shared state store's (`state.url`), where a
 * call refused through one replica is approved through another and used once across all.
 */
export interface PendingCalls {
  /** Uses up an approval of this exact call; whether there was one. */
  take(call: PendingCallKey): Promise<boolean>;
  /** Keeps a refused call as pending (the same call again gets the same id); returns its id. */
  add(call: PendingCallKey, shown: string): Promise<string>;
  /**
   * Approves pending calls, each once (see {@linkcode PendingApprovals.approve}).
   *
   * @param shownAs How the refusal's text reached the client (tokenized).
   */
  approve(
    principal: string,
    claims: ApprovalClaim[],
    shownAs?: (text: string) => Promise<string>,
  ): Promise<ClaimOutcome[]>;
  /** Whether the principal has a pending call or an unused approval. */
  active(principal: string): Promise<boolean>;
}

/**
 * The texts a claim's `call` may be to match a pending call shown as `shown`: as shown, or as the
 * refusal's text reached the client (`shownAs`), each as it is or as it reads inside the
 * refusal's JSON (escaped).
 *
 * @param shown The call as the refusal showed it.
 * @param shownAs It as it reached the client, when that differs.
 * @returns The accepted texts.
 */
export function claimForms(shown: string, shownAs?: string): string[] {
  const texts = shownAs === undefined || shownAs === shown ? [shown] : [shown, shownAs];
  return texts.flatMap((text) => [text, JSON.stringify(text).slice(1, -1)]);
}

/**
 * One-time approvals for clients that cannot ask their user: a refused call is kept as pending
 * under a random id; `approve_pending_calls` (which the client confirms with its user) turns it
 * into an approval that the same principal's next identical call (same tool, same argument
 * digest) uses up.
 */
export class PendingApprovals {
  #entries = new Map<string, Pending>();
  #audit: AuditLog | undefined;

  /**
   * Creates an empty store.
   *
   * @param audit Where each approval given through {@linkcode PendingApprovals.approve} is recorded.
   */
  constructor(audit?: AuditLog) {
    this.#audit = audit;
  }

  /** Whether any call is pending or approved (and not expired). */
  get active(): boolean {
    this.#sweep(Date.now());
    return this.#entries.size > 0;
  }

  /**
   * Whether one principal has a call pending or approved (and not expired).
   *
   * @param principal Who.
   * @returns True while one lives.
   */
  activeFor(principal: string): boolean {
    this.#sweep(Date.now());
    for (const entry of this.#entries.values()) if (entry.principal === principal) return true;
    return false;
  }

  /**
   * How a principal's pending call was shown, for a claim of it.
   *
   * @param principal Who claims.
   * @param id The pending call's id.
   * @returns The text, or undefined when the principal has no such call.
   */
  shownOf(principal: string, id: string): string | undefined {
    const entry = this.#entries.get(id);
    return entry?.principal === principal ? entry.shown : undefined;
  }

  #sweep(now: number): void {
    for (const [id, entry] of this.#entries) if (entry.expires <= now) this.#entries.delete(id);
  }

  /**
   * Uses up an approval of this exact call, if there is one.
   *
   * @returns Whether the call is approved.
   */
  take(principal: string, fullName: string, digest: string, now = Date.now()): boolean {
    this.#sweep(now);
    for (const [id, entry] of this.#entries) {
      if (
        entry.approved && entry.principal === principal && entry.fullName === fullName &&
        entry.digest === digest
      ) {
        this.#entries.delete(id);
        return true;
      }
    }
    return false;
  }

  /**
   * Keeps a refused call as pending (the same call again gets the same id).
   *
   * @returns Its id.
   */
  add(
    principal: string,
    fullName: string,
    digest: string,
    shown: string,
    now = Date.now(),
  ): string {
    this.#sweep(now);
    const mine = [...this.#entries].filter(([, e]) => e.principal === principal && !e.approved);
    const same = mine.find(([, e]) => e.fullName === fullName && e.digest === digest);
    if (same) {
      same[1].expires = now + PENDING_TTL_MS;
      return same[0];
    }
    for (const [id] of mine.slice(0, Math.max(0, mine.length - MAX_PENDING_PER_PRINCIPAL + 1))) {
      this.#entries.delete(id);
    }
    const id = `ap_${crypto.randomUUID().replaceAll("-", "").slice(0, 16)}`;
    this.#entries.set(id, {
      principal,
      fullName,
      digest,
      shown,
      approved: false,
      expires: now + PENDING_TTL_MS,
    });
    return id;
  }

  /**
   * Approves pending calls, each once. A claim is refused unless its id is pending for this
   * principal and its `call` is what the refusal showed: the call as it was shown, or as the
   * refusal's text reached the client (`shownAs`: with `privacy.tokenize`, its values became
   * placeholders), either as it is or as it reads inside the refusal's JSON (escaped). Each is the
   * same call, so what the client asked its user to confirm is what is approved.
   *
   * @param principal Who approves.
   * @param claims The claims, as the client passed them.
   * @param now The time.
   * @param shownAs How the refusal's text reached the client; unchanged when absent.
   * @returns Per claim, the call approved or why not, and its digest.
   */
  approve(
    principal: string,
    claims: ApprovalClaim[],
    now = Date.now(),
    shownAs?: (text: string) => string,
  ): ClaimOutcome[] {
    this.#sweep(now);
    return claims.map(({ id, call }) => {
      const entry = this.#entries.get(id);
      if (!entry || entry.principal !== principal) {
        return { id, ok: false, text: "no such pending call (expired, used, or never made)" };
      }
      if (entry.approved) return { id, ok: false, text: "already approved" };
      if (!claimForms(entry.shown, shownAs?.(entry.shown)).includes(call)) {
        return { id, ok: false, text: "`call` differs from the pending call; pass it verbatim" };
      }
      entry.approved = true;
      entry.expires = now + PENDING_TTL_MS;
      this.#audit?.record({
        kind: "approval",
        principal,
        tool: entry.fullName,
        argumentDigest: entry.digest,
        decision: "approved-once",
        how: "approval-tool",
        pendingId: id,
      });
      return { id, ok: true, text: entry.shown, fullName: entry.fullName, digest: entry.digest };
    });
  }
}

/**
 * This process's pending calls as {@linkcode PendingCalls} (the default, without `state.url`).
 *
 * @param store The process's pending calls.
 * @returns The same store behind the interface runs use.
 */
export function localPendingCalls(store: PendingApprovals): PendingCalls {
  return {
    take: (call) => Promise.resolve(store.take(call.principal, call.fullName, call.digest)),
    add: (call, shown) =>
      Promise.resolve(store.add(call.principal, call.fullName, call.digest, shown)),
    async approve(principal, claims, shownAs) {
      // The tokenized forms first (they may wait on the shared store), then the sync approval.
      const tokenized = new Map<string, string>();
      for (const { id } of claims) {
        const shown = store.shownOf(principal, id);
        if (shown !== undefined && shownAs) tokenized.set(shown, await shownAs(shown));
      }
      return store.approve(principal, claims, Date.now(), (text) => tokenized.get(text) ?? text);
    },
    active: (principal) => Promise.resolve(store.activeFor(principal)),
  };
}
