/**
 * Named sandbox sessions: one child kept alive per caller-chosen id for stateful work, with an
 * idle time-to-live and a cap. Runs in one session are serialised; sessions never share a child.
 *
 * @module
 */
import type { Logger } from "../../log.ts";
import { CodeExecutorError } from "../../errors.ts";

/** What a session needs from its child. */
export interface SessionChild {
  /** Whether the process has died (the session is then over). */
  readonly exited: boolean;
  /** Kills the child and removes its files. */
  dispose(): Promise<void>;
}

interface Session<T> {
  owner: string;
  child: Promise<T>;
  lastUsed: number;
  queue: Promise<unknown>;
  running: number;
}

const SESSION_ID = /^[A-Za-z0-9_.:-]{1,128}$/;

/** Sessions by id, each with its own child. */
export class SessionStore<T extends SessionChild> {
  #sessions = new Map<string, Session<T>>();
  #ttlMs: number;
  #max: number;
  #ownerMax: (owner: string) => number;
  #settingPrefix: string;
  #log: Logger;
  #sweeper: ReturnType<typeof setInterval> | undefined;

  /**
   * Creates an empty store.
   *
   * @param options Idle time-to-live, cap, each owner's share of it (the whole cap when absent),
   *   the settings prefix named in errors, and the logger.
   */
  constructor(options: {
    ttlMs: number;
    max: number;
    ownerMax?: (owner: string) => number;
    settingPrefix: string;
    log: Logger;
  }) {
    this.#ttlMs = options.ttlMs;
    this.#max = options.max;
    this.#ownerMax = options.ownerMax ?? (() => options.max);
    this.#settingPrefix = options.settingPrefix;
    this.#log = options.log;
  }

  /** Number of open sessions. */
  get size(): number {
    return this.#sessions.size;
  }

  /**
   * Runs `fn` with the session's child, creating the session on first use. Runs in the same
   * session wait for each other.
   *
   * @param session The caller's session id and its owner (the principal): the same id of
   *   another principal is another session, so no caller can reach another's state.
   * @param create Starts a child for a new session.
   * @param fn The run.
   * @returns What `fn` returns.
   * @throws {CodeExecutorError} For a malformed id or when the cap is reached.
   */
  use<R>(
    session: { id: string; owner: string },
    create: () => Promise<T>,
    fn: (child: T) => Promise<R>,
  ): Promise<R> {
    const id = session.id;
    if (!SESSION_ID.test(id)) {
      throw new CodeExecutorError(
        "SessionError",
        `Invalid session id "${
          id.slice(0, 40)
        }": use 1 to 128 letters, digits, "_", ".", ":" or "-"`,
      );
    }
    const key = `${session.owner}\0${id}`;
    let open = this.#sessions.get(key);
    if (!open) {
      if (this.#sessions.size >= this.#max) {
        throw new CodeExecutorError(
          "SessionLimitError",
          `Cannot open session "${id}": ${this.#max} sessions are open (${this.#settingPrefix}.maxSessions); reuse one of them, or wait until an idle one expires after ${
            Math.round(this.#ttlMs / 1000)
          } s`,
        );
      }
      const share = this.#ownerMax(session.owner);
      const own = [...this.#sessions.values()].filter((s) => s.owner === session.owner).length;
      if (own >= share) {
        throw new CodeExecutorError(
          "SessionLimitError",
          `Cannot open session "${id}": ${own} of your sessions are open, your share of ${this.#settingPrefix}.maxSessions (${this.#settingPrefix}.principalMaxSessions); reuse one of them, or wait until an idle one expires after ${
            Math.round(this.#ttlMs / 1000)
          } s`,
        );
      }
      open = {
        owner: session.owner,
        child: create(),
        lastUsed: Date.now(),
        queue: Promise.resolve(),
        running: 0,
      };
      open.child.catch(() => this.#drop(key));
      this.#sessions.set(key, open);
      this.#startSweeper();
    }
    const current = open;
    current.running++;
    const run = current.queue.then(async () => {
      const child = await current.child;
      try {
        return await fn(child);
      } finally {
        current.lastUsed = Date.now();
        current.running--;
        // A session whose child died (killed at a limit) is over: the next use starts afresh.
        if (child.exited && this.#sessions.get(key) === current) void this.#drop(key);
      }
    });
    current.queue = run.catch(() => {});
    return run;
  }

  async #drop(key: string): Promise<void> {
    const session = this.#sessions.get(key);
    if (!session) return;
    this.#sessions.delete(key);
    if (this.#sessions.size === 0) this.#stopSweeper();
    const child = await session.child.catch(() => undefined);
    await child?.dispose();
  }

  #startSweeper(): void {
    if (this.#sweeper !== undefined) return;
    const every = Math.max(1000, Math.min(30_000, this.#ttlMs / 4));
    const sweeper = this.#sweeper = setInterval(() => {
      const now = Date.now();
      for (const [id, session] of this.#sessions) {
        if (session.running === 0 && now - session.lastUsed > this.#ttlMs) {
          this.#log.debug(`Session "${id}" expired after ${this.#ttlMs} ms idle`);
          void this.#drop(id);
        }
      }
    }, every);
    // An idle session must not keep the server alive on its own.
    Deno.unrefTimer(sweeper);
  }

  #stopSweeper(): void {
    clearInterval(this.#sweeper);
    this.#sweeper = undefined;
  }

  /** Disposes every session's child. */
  async close(): Promise<void> {
    this.#stopSweeper();
    await Promise.all([...this.#sessions.keys()].map((id) => this.#drop(id)));
  }
}
