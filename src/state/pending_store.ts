/**
 * Pending approvals (`approve_pending_calls`, for clients that cannot ask their user) in a
 * {@linkcode StateStore}: a call refused through one replica can be approved through another,
 * and the approval is used once across all of them. The semantics of `PendingApprovals`
 * (src/policy/approvals.ts): the same call again gets the same id; a claim must repeat the call
 * exactly as shown; an approval is used up by the principal's next identical call (same tool,
 * same argument digest); each lives 10 minutes; 50 pending per principal, the oldest go first.
 *
 * In the store, per principal (named by a keyed HMAC): `e:<HMAC(id)>` the call, sealed (tool,
 * digest, what was shown, whether approved); `c:<HMAC(tool, digest)>` the id of its pending
 * call; `ok:<HMAC(tool, digest)>` the approvals not yet used; `q` the pending ones in age order.
 * The argument digest is a plain SHA-256 of the arguments, so it is only ever inside a sealed
 * record or an HMAC. Using an approval pops it (`sortedPop`) and takes its record (`take`), both
 * atomic: of two replicas making the same call at once, one is approved.
 *
 * @module
 */
import type { StateKeys } from "./keys.ts";
import type { StateStore } from "./store.ts";

/** Options of {@linkcode PendingStore}. */
export interface PendingStoreOptions {
  /** How long a pending call can be approved, and an approval used (`PENDING_TTL_MS`). */
  ttlMs: number;
  /** Pending calls kept per principal; the oldest go first. */
  maxPerPrincipal: number;
}

/** One call to approve, as the model passes it (`ApprovalClaim` of src/policy/approvals.ts). */
export interface PendingClaim {
  /** The pending call's id. */
  id: string;
  /** The call exactly as the refusal showed it. */
  call: string;
}

/** A call, as pending and approvals name it. */
export interface PendingCall {
  /** Who made it. */
  principal: string;
  /** `mcp__<server>__<tool>`. */
  fullName: string;
  /** `sha256:<hex>` of its canonical arguments. */
  digest: string;
}

/** The outcome of one claim of {@linkcode PendingStore.approve}. */
export interface ClaimResult {
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

interface Record {
  id: string;
  fullName: string;
  digest: string;
  shown: string;
  approved: boolean;
  expires: number;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Pending calls and one-time approvals of every principal, shared by replicas. */
export class PendingStore {
  readonly #store: StateStore;
  readonly #keys: StateKeys;
  readonly #options: PendingStoreOptions;

  /**
   * Binds the approvals to a store.
   *
   * @param store Where they are kept.
   * @param keys The keys that seal and name them.
   * @param options Time to live and bound.
   */
  constructor(
    store: StateStore,
    keys: StateKeys,
    options: PendingStoreOptions = { ttlMs: 10 * 60_000, maxPerPrincipal: 50 },
  ) {
    this.#store = store;
    this.#keys = keys;
    this.#options = options;
  }

  async #names(principal: string, fullName?: string, digest?: string) {
    const prefix = `ce:a:${await this.#keys.index("principal", principal)}:`;
    const call = fullName === undefined
      ? ""
      : await this.#keys.index("call", principal, fullName, digest ?? "");
    return {
      prefix,
      entry: async (id: string) => `${prefix}e:${await this.#keys.index("pending", id)}`,
      pending: `${prefix}c:${call}`,
      approved: `${prefix}ok:${call}`,
      queue: `${prefix}q`,
      live: `${prefix}live`,
    };
  }

  async #read(key: string, sealed: Uint8Array | undefined): Promise<Record | undefined> {
    const plain = sealed && await this.#keys.open(sealed, key);
    return plain ? JSON.parse(decoder.decode(plain)) as Record : undefined;
  }

  async #write(key: string, record: Record): Promise<void> {
    const sealed = await this.#keys.seal(encoder.encode(JSON.stringify(record)), key);
    await this.#store.set(key, sealed, { ttlMs: Math.max(1, record.expires - Date.now()) });
  }

  /**
   * Keeps a refused call as pending; the same call again gets the same id.
   *
   * @param call Who, which tool, which arguments.
   * @param shown The call as the refusal shows it (`showCall`).
   * @returns Its id.
   */
  async add(call: PendingCall, shown: string): Promise<string> {
    const names = await this.#names(call.principal, call.fullName, call.digest);
    const { ttlMs, maxPerPrincipal } = this.#options;
    const now = Date.now();
    const [sealedId] = await this.#store.get([names.pending]);
    const sameId = sealedId && await this.#keys.open(sealedId, names.pending);
    if (sameId) {
      const id = decoder.decode(sameId);
      const key = await names.entry(id);
      const record = await this.#read(key, (await this.#store.get([key]))[0]);
      if (record && !record.approved) {
        await this.#write(key, { ...record, expires: now + ttlMs });
        await this.#store.expire([names.pending], ttlMs);
        await this.#store.sortedAdd(names.live, [[key, now + ttlMs]], ttlMs);
        return id;
      }
    }
    const id = `ap_${crypto.randomUUID().replaceAll("-", "").slice(0, 16)}`;
    const key = await names.entry(id);
    await this.#write(key, {
      id,
      fullName: call.fullName,
      digest: call.digest,
      shown,
      approved: false,
      expires: now + ttlMs,
    });
    await this.#store.set(
      names.pending,
      await this.#keys.seal(encoder.encode(id), names.pending),
      { ttlMs },
    );
    await this.#store.sortedAdd(names.live, [[key, now + ttlMs]], ttlMs);
    const queued = await this.#store.sortedAdd(names.queue, [[key, now]], ttlMs);
    if (queued > maxPerPrincipal) {
      const dropped = await this.#store.sortedPop(names.queue, queued - maxPerPrincipal);
      await this.#store.delete(dropped.map(([k]) => k));
      await this.#store.sortedRemove(names.live, dropped.map(([k]) => k));
    }
    return id;
  }

  /**
   * Approves pending calls, each once; a claim must name a call pending for this principal and
   * repeat it exactly as shown.
   *
   * @param principal Who approves.
   * @param claims The ids and calls.
   * @param forms The texts a claim's `call` may be for a call shown as `shown` (as shown, as it
   *   reached the client tokenized, escaped); the shown text alone by default.
   * @returns Per claim, the call approved or why not.
   */
  async approve(
    principal: string,
    claims: PendingClaim[],
    forms: (shown: string) => Promise<string[]> = (shown) => Promise.resolve([shown]),
  ): Promise<ClaimResult[]> {
    const names = await this.#names(principal);
    const results: ClaimResult[] = [];
    for (const { id, call } of claims) {
      const key = await names.entry(id);
      // Taking the record claims it: of two replicas approving the same id, one sees it.
      const record = await this.#read(key, await this.#store.take(key));
      if (!record) {
        results.push({
          id,
          ok: false,
          text: "no such pending call (expired, used, or never made)",
        });
        continue;
      }
      let matches = false;
      if (!record.approved) {
        try {
          matches = (await forms(record.shown)).includes(call);
        } catch (error) {
          // Put back as it was, unapproved.
          await this.#write(key, record).catch(() => {});
          throw error;
        }
      }
      if (!matches) {
        await this.#write(key, record);
        results.push({
          id,
          ok: false,
          text: record.approved
            ? "already approved"
            : "`call` differs from the pending call; pass it verbatim",
        });
        continue;
      }
      const expires = Date.now() + this.#options.ttlMs;
      const of = await this.#names(principal, record.fullName, record.digest);
      await this.#write(key, { ...record, approved: true, expires });
      await Promise.all([
        this.#store.sortedAdd(of.approved, [[key, expires]], this.#options.ttlMs),
        this.#store.sortedAdd(of.live, [[key, expires]], this.#options.ttlMs),
        this.#store.sortedRemove(of.queue, [key]),
        this.#store.delete([of.pending]),
      ]);
      results.push({
        id,
        ok: true,
        text: record.shown,
        fullName: record.fullName,
        digest: record.digest,
      });
    }
    return results;
  }

  /**
   * Uses up an approval of this exact call, if there is one.
   *
   * @param call Who, which tool, which arguments.
   * @returns Whether the call is approved (and the approval is now used).
   */
  async take(call: PendingCall): Promise<boolean> {
    const names = await this.#names(call.principal, call.fullName, call.digest);
    for (;;) {
      const [next] = await this.#store.sortedPop(names.approved, 1);
      if (!next) return false;
      const [key, expires] = next;
      if (expires <= Date.now()) continue;
      const record = await this.#read(key, await this.#store.take(key));
      if (record?.approved && record.fullName === call.fullName && record.digest === call.digest) {
        await this.#store.sortedRemove(names.live, [key]);
        return true;
      }
    }
  }

  /**
   * Whether a principal has a pending call or an unused approval.
   *
   * @param principal Who.
   * @returns True while one lives.
   */
  async active(principal: string): Promise<boolean> {
    const names = await this.#names(principal);
    return await this.#store.sortedTrim(names.live, Date.now()) > 0;
  }
}
