/**
 * Runs of 2026-07-28 clients that wait for the client: MCP 2026-07-28 has no server→client
 * requests, so a run that needs the client's model (`llm.ask`), its user (`askUser`) or a person's
 * approval answers its `tools/call` with `input_required` and stays parked here, in the executor's
 * process (not in the per-request MCP server), until the client's retry brings the answers and
 * the same `requestState`; then the same child goes on.
 *
 * The `requestState` is `v1.<payload>.<mac>`: base64url JSON `{r, n, p, a, e}` (run id, round,
 * principal, digest of the tool call, expiry) and its HMAC-SHA256 under the server's key
 * (`approvals.stateKey`, else the key derived from `state.key`: both shared by replicas; a random
 * key per process without either). A retry is accepted only with a valid MAC, before the expiry,
 * from the same principal, for the same tool call, for the run's current round, while the run is
 * parked: each state is good for one retry. The state also names the run's replica
 * (`http.replicaId`), so that a retry that reaches another replica is forwarded to this one
 * (`src/server/forwarding.ts`).
 *
 * @module
 */
import type {
  ClientChannel,
  ElicitationRequest,
  ElicitationResponse,
} from "../sampling/channel.ts";
import type { SamplingRequest, SamplingResponse } from "../sampling/types.ts";
import { CodeExecutorError } from "../errors.ts";
import type { ExecutionResult } from "./result.ts";
import { RunHold } from "./run.ts";

/** One question for the client, as an `input_required` result carries it. */
export type InputAsk =
  | { kind: "sampling"; request: SamplingRequest }
  | { kind: "elicitation"; request: ElicitationRequest };

/** The client's answer to one {@linkcode InputAsk}. */
export type InputAnswer =
  | { kind: "sampling"; response: SamplingResponse }
  | { kind: "elicitation"; response: ElicitationResponse }
  | { kind: "failed"; message: string };

/** What a request of a parked-run conversation gets: the run's result, or the next questions. */
export type RunStep =
  | { done: ExecutionResult }
  | { input: { requestState: string; asks: Record<string, InputAsk> } };

/** What the run may ask the client (the capabilities in the request's envelope). */
export interface AskableClient {
  /** The client declared `sampling`. */
  sampling: boolean;
  /** The client declared form `elicitation`. */
  elicitation: boolean;
}

/** Options of {@linkcode ParkedRuns.start}. */
export interface StartOptions {
  /** Who runs. */
  principal: string;
  /** A digest of the tool call (name and arguments): its retries must repeat it. */
  call: string;
  /** The request's own channel (reasons, `offerApproval`), which the parked one extends. */
  base: ClientChannel;
  /** What the client can answer. */
  can: AskableClient;
  /** How long a parked `llm.*` question waits for the retry (`sampling.requestTimeoutMs`). */
  samplingTimeoutMs: number;
  /** The request's cancellation, while it waits. */
  signal?: AbortSignal;
}

/** Options of {@linkcode ParkedRuns.resume}. */
export interface ResumeOptions {
  /** Who retries. */
  principal: string;
  /** The digest of the retried tool call. */
  call: string;
  /** Reads the retry's `inputResponses` for the questions asked, by key. */
  answers: (asked: Map<string, InputAsk>) => Map<string, InputAnswer>;
  /** The retry's cancellation, while it waits. */
  signal?: AbortSignal;
  /** The retry's progress notifications, if it carried a progress token. */
  progress?: ClientChannel["progress"];
}

/** Starts the run of a conversation with its channel, hold and end signal. */
export type LaunchRun = (
  channel: ClientChannel,
  hold: RunHold,
  ended: AbortSignal,
) => Promise<ExecutionResult>;

interface Pending {
  ask: InputAsk;
  timeoutMs: number;
  answer(answer: InputAnswer): void;
}

interface StatePayload {
  /** Run id. */
  r: string;
  /** Round. */
  n: number;
  /** Principal. */
  p: string;
  /** Digest of the tool call. */
  a: string;
  /** Expiry, ms since the epoch. */
  e: number;
  /** The replica the run is parked on (`http.replicaId`), when it has a name. */
  i?: string;
  /** Set when the expiry is the end of the run's whole time parked (`limits.maxParkedMs`). */
  b?: 1;
}

const encoder = new TextEncoder();

function b64url(bytes: Uint8Array): string {
  let text = "";
  for (const byte of bytes) text += String.fromCharCode(byte);
  return btoa(text).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

function fromB64url(text: string): Uint8Array<ArrayBuffer> {
  const raw = atob(text.replaceAll("-", "+").replaceAll("_", "/"));
  return Uint8Array.from(raw, (c) => c.charCodeAt(0));
}

function refused(why: string): CodeExecutorError {
  return new CodeExecutorError("RequestStateRefused", `The requestState was refused: ${why}`);
}

/** A parked run and the rounds of its conversation with the client. */
class Conversation {
  readonly id = crypto.randomUUID();
  readonly hold = new RunHold();
  readonly ended = new AbortController();
  round = 0;
  busy = false;
  /** When the run first parked (`limits.maxParkedMs` counts from it). */
  #parkedSince: number | undefined;
  #asks = new Map<string, Pending>();
  #count = 0;
  #wake: (() => void) | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #progress: ClientChannel["progress"];
  result!: Promise<ExecutionResult>;

  constructor(
    readonly principal: string,
    readonly call: string,
    readonly samplingTimeoutMs: number,
    readonly forget: (conversation: Conversation) => void,
    readonly maxParkedMs: number,
  ) {}

  /** The channel the run's code asks through; absent parts keep the request's own. */
  channel(base: ClientChannel, can: AskableClient): ClientChannel {
    // Progress goes to the request that waits, if it carried a progress token; between rounds
    // nobody listens.
    const channel: ClientChannel = {
      ...base,
      progress: (message) => this.#progress?.(message),
      inRounds: true,
    };
    if (can.sampling) {
      delete channel.noSampling;
      channel.sample = async (request, { signal }) => {
        const answer = await this.#ask(
          { kind: "sampling", request },
          signal,
          this.samplingTimeoutMs,
        );
        if (answer.kind !== "sampling") throw new Error("the client answered with an elicitation");
        return answer.response;
      };
    }
    if (can.elicitation) {
      delete channel.noElicitation;
      channel.elicit = async (request, { signal, timeoutMs }) => {
        const answer = await this.#ask({ kind: "elicitation", request }, signal, timeoutMs);
        if (answer.kind !== "elicitation") throw new Error("the client answered with a sampling");
        return answer.response;
      };
    }
    return channel;
  }

  /** Parks the question until a retry answers it; the run is held meanwhile. */
  #ask(ask: InputAsk, signal: AbortSignal, timeoutMs: number): Promise<InputAnswer> {
    return this.hold.during(() =>
      new Promise<InputAnswer>((resolve, reject) => {
        if (signal.aborted) return reject(signal.reason);
        const key = `${ask.kind === "sampling" ? "llm" : "user"}${++this.#count}`;
        const onAbort = () => {
          this.#asks.delete(key);
          reject(signal.reason);
          // A question given up while the client has it (its timeout): nobody will take the
          // rest of the run, so it ends; a task later, once the asker has recorded why.
          if (!this.busy) setTimeout(() => this.end("the client did not answer in time"), 0);
        };
        signal.addEventListener("abort", onAbort, { once: true });
        this.#asks.set(key, {
          ask,
          timeoutMs,
          answer: (answer) => {
            signal.removeEventListener("abort", onAbort);
            this.#asks.delete(key);
            if (answer.kind === "failed") reject(new Error(answer.message));
            else resolve(answer);
          },
        });
        this.#wake?.();
      })
    );
  }

  /**
   * Waits for the run's result or its next questions (called with `busy` set). The request that
   * waits can cancel the run, as any request cancels its run, until it is answered.
   */
  async step(
    mint: (payload: StatePayload) => Promise<string>,
    request: { signal?: AbortSignal; progress?: ClientChannel["progress"] },
  ): Promise<RunStep> {
    const { signal } = request;
    clearTimeout(this.#timer);
    this.#progress = request.progress;
    const cancel = () => this.end("the client cancelled the request");
    if (signal?.aborted) cancel();
    signal?.addEventListener("abort", cancel, { once: true });
    try {
      const asked = new Promise<void>((resolve) => {
        this.#wake = resolve;
        if (this.#asks.size > 0) resolve();
      });
      const next = await Promise.race([
        this.result.then((result) => ({ result })),
        asked.then(() => ({ result: undefined })),
      ]);
      if (next.result) {
        this.end();
        return { done: next.result };
      }
      this.round++;
      // Each question has its own timeout; the run's whole time parked is bounded as well, from
      // its first question on, so that rounds one after another cannot keep it alive for ever.
      this.#parkedSince ??= Date.now();
      const leftMs = this.#parkedSince + this.maxParkedMs - Date.now();
      if (leftMs <= 0) {
        this.end(`it was parked for limits.maxParkedMs (${this.maxParkedMs} ms) in all`);
        return { done: await this.result };
      }
      const waitMs = Math.min(leftMs, ...[...this.#asks.values()].map((p) => p.timeoutMs));
      const expires = Date.now() + waitMs;
      this.#timer = setTimeout(
        () =>
          this.end(
            waitMs === leftMs
              ? `it was parked for limits.maxParkedMs (${this.maxParkedMs} ms) in all`
              : "the client did not retry in time",
          ),
        waitMs,
      );
      const requestState = await mint({
        r: this.id,
        n: this.round,
        p: this.principal,
        a: this.call,
        e: expires,
        ...(waitMs === leftMs ? { b: 1 as const } : {}),
      });
      const asks = Object.fromEntries([...this.#asks].map(([key, p]) => [key, p.ask]));
      return { input: { requestState, asks } };
    } finally {
      signal?.removeEventListener("abort", cancel);
      this.#progress = undefined;
      this.#wake = undefined;
      this.busy = false;
    }
  }

  /** The keys of the questions asked and not answered yet. */
  get asked(): string[] {
    return [...this.#asks.keys()];
  }

  /** The retry's answers to questions that are asked, by key; answers to others are dropped. */
  answersOf(read: (asked: Map<string, InputAsk>) => Map<string, InputAnswer>) {
    const asked = new Map([...this.#asks].map(([key, pending]) => [key, pending.ask]));
    return new Map([...read(asked)].filter(([key]) => this.#asks.has(key)));
  }

  /** Hands answers to the questions they answer; others stay asked. */
  answer(answers: Map<string, InputAnswer>): void {
    for (const [key, answer] of answers) this.#asks.get(key)?.answer(answer);
  }

  /** Ends the run (its child is killed) and forgets it. */
  end(why?: string): void {
    clearTimeout(this.#timer);
    this.forget(this);
    if (why !== undefined && !this.ended.signal.aborted) {
      this.ended.abort(
        new CodeExecutorError("Cancelled", `The parked run was ended: ${why}`),
      );
    }
  }
}

/** The parked runs of one executor, and the key that protects their `requestState`. */
export class ParkedRuns {
  #key: Promise<CryptoKey>;
  #runs = new Map<string, Conversation>();
  #replica: string | undefined;
  #maxParkedMs: number;

  /**
   * Creates the registry.
   *
   * @param secret `approvals.stateKey`, or a raw HMAC-SHA256 key (the one derived from
   *   `state.key`, which every replica shares); a random key for this process when absent.
   * @param replica `http.replicaId`, named in each state so that a retry at another replica is
   *   sent to the run's replica, or told where its run is.
   * @param maxParkedMs `limits.maxParkedMs`: the most time a run may spend parked in all, from
   *   its first question; no bound when absent.
   */
  constructor(
    secret: string | Uint8Array<ArrayBuffer> | undefined,
    replica?: string,
    maxParkedMs = Infinity,
  ) {
    this.#replica = replica;
    this.#maxParkedMs = maxParkedMs;
    const raw = typeof secret === "string"
      ? encoder.encode(secret)
      : secret ?? crypto.getRandomValues(new Uint8Array(32));
    this.#key = crypto.subtle.importKey("raw", raw, { name: "HMAC", hash: "SHA-256" }, false, [
      "sign",
      "verify",
    ]);
  }

  /**
   * The replica a `requestState` names as its run's, for a retry that reached another replica.
   *
   * @param requestState A retry's `requestState`, as the client echoed it.
   * @returns The replica's id, or undefined when the state names none or was not issued with
   *   this server's key (the retry is then refused where it is).
   */
  async replicaOf(requestState: string): Promise<string | undefined> {
    try {
      return (await this.#verify(requestState)).i;
    } catch {
      return undefined;
    }
  }

  /** Runs that wait for a client's retry, or are between two rounds. */
  get size(): number {
    return this.#runs.size;
  }

  /**
   * Starts a run whose questions to the client come back as rounds.
   *
   * @param options Who runs, the digest of the tool call, what the client can answer.
   * @param launch Starts the run with the conversation's channel, hold and end signal.
   * @returns The run's result, or its first questions.
   */
  start(options: StartOptions, launch: LaunchRun): Promise<RunStep> {
    const conversation = new Conversation(
      options.principal,
      options.call,
      options.samplingTimeoutMs,
      (c) => this.#runs.delete(c.id),
      this.#maxParkedMs,
    );
    this.#runs.set(conversation.id, conversation);
    conversation.busy = true;
    conversation.result = launch(
      conversation.channel(options.base, options.can),
      conversation.hold,
      conversation.ended.signal,
    );
    return conversation.step((payload) => this.#mint(payload), {
      signal: options.signal,
      progress: options.base.progress,
    });
  }

  /**
   * Resumes a parked run with a retry's answers.
   *
   * @param requestState The retry's `requestState`, as the client echoed it.
   * @param retry Who retries, the digest of the retried call, its answers and its cancellation.
   * @returns The run's result, or its next questions.
   * @throws {CodeExecutorError} `RequestStateRefused`; the parked run is then left as it was.
   */
  async resume(requestState: string, retry: ResumeOptions): Promise<RunStep> {
    const { principal, call, answers, signal } = retry;
    const payload = await this.#verify(requestState);
    if (payload.p !== principal) throw refused("it was issued to another principal");
    if (payload.a !== call) {
      throw refused("it belongs to another tool call (the retry must repeat the same arguments)");
    }
    if (Date.now() >= payload.e) {
      throw refused(
        `it expired at ${new Date(payload.e).toISOString()}${
          payload.b ? ", when its run had been parked for limits.maxParkedMs in all" : ""
        }; the parked run was ended. Run the code again`,
      );
    }
    if (payload.i !== this.#replica && payload.i !== undefined) {
      throw refused(
        `its run is parked on replica "${payload.i}" and this is replica "${
          this.#replica ?? "(unnamed)"
        }": the retry must reach the replica that answered the first request (docs/DEPLOY.md)`,
      );
    }
    const conversation = this.#runs.get(payload.r);
    if (!conversation || conversation.principal !== principal) {
      throw refused(
        "its run is not parked on this server: it ended (finished, timed out or the server restarted), or it is parked on another replica (see docs/DEPLOY.md)",
      );
    }
    if (conversation.busy || conversation.round !== payload.n) {
      throw refused("it was already used: each requestState is good for one retry");
    }
    const given = conversation.answersOf(answers);
    // A retry that answers nothing would only restart the questions' timeouts: refused, and the
    // run left as it was (its state stays good for a retry with answers until it expires).
    if (given.size === 0) {
      throw refused(
        `the retry answers none of the questions asked (${
          conversation.asked.join(", ")
        }): put an answer for each key of inputRequests in inputResponses, with the same requestState`,
      );
    }
    conversation.busy = true;
    conversation.answer(given);
    return conversation.step((next) => this.#mint(next), { signal, progress: retry.progress });
  }

  /** Ends every parked run (the server is shutting down). */
  close(): void {
    for (const conversation of [...this.#runs.values()]) {
      conversation.end("the server is shutting down");
    }
  }

  async #mint(payload: StatePayload): Promise<string> {
    if (this.#replica !== undefined) payload.i = this.#replica;
    const body = b64url(encoder.encode(JSON.stringify(payload)));
    const mac = await crypto.subtle.sign("HMAC", await this.#key, encoder.encode(`v1.${body}`));
    return `v1.${body}.${b64url(new Uint8Array(mac))}`;
  }

  async #verify(state: string): Promise<StatePayload> {
    const parts = state.split(".");
    const tampered = refused(
      "it was not issued by this server or was altered (its HMAC does not match)",
    );
    if (parts.length !== 3 || parts[0] !== "v1") throw tampered;
    let mac: Uint8Array<ArrayBuffer>;
    let payload: StatePayload;
    try {
      mac = fromB64url(parts[2]);
    } catch {
      throw tampered;
    }
    const ok = await crypto.subtle.verify(
      "HMAC",
      await this.#key,
      mac,
      encoder.encode(`v1.${parts[1]}`),
    );
    if (!ok) throw tampered;
    try {
      payload = JSON.parse(new TextDecoder().decode(fromB64url(parts[1])));
    } catch {
      throw tampered;
    }
    return payload;
  }
}
