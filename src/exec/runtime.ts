/**
 * The seam between the executor and a language: a {@linkcode LanguageRuntime} leases a child of
 * its language for a run, says how a skill's body runs in such a child, prepares the caches its
 * start-up needs (`code-executor prepare`), and closes its children. The executor holds one per
 * language (`languages.ts` lists them) and knows nothing else of either: {@linkcode skillRuns}
 * gives a skill that a run calls to its own language's runtime.
 *
 * @module
 */
import type { Settings } from "../config/settings.ts";
import type { Logger } from "../log.ts";
import type { GrantedPermissions } from "../policy/permissions.ts";
import type { SkillLanguage } from "../skills/store.ts";
import type { RunLimits } from "./child/execution.ts";
import type { SandboxLocations } from "./child/files.ts";
import type { ChildReaper } from "./child/reaper.ts";
import type { ExecutionResult } from "./result.ts";
import type { RunContext } from "./run.ts";

/** How long a run may still take, and its cancellation. */
export interface Deadline {
  /** Milliseconds left. */
  timeoutMs: number;
  /** Aborted when the run is cancelled. */
  signal: AbortSignal;
}

/** What a run asks of its language's runtime. */
export interface LeaseRequest {
  /** The code to run: the model's, or a skill's body in a nested run. */
  code: string;
  /** What the child may reach beyond its workspace (a Python child: `read` only). */
  granted: GrantedPermissions;
  /** The run's time and cancellation: a start-up that waits (Python's first) stops at it. */
  deadline: Deadline;
  /** Who runs: a session belongs to its principal. */
  principal: string;
  /** A session's id, where the language has sessions (Python). */
  session?: string;
  /** A skill's arguments, in a nested run: the code is then the skill's body. */
  args?: Record<string, unknown>;
}

/** A child borrowed for one run, and what to do with it afterwards. */
export interface Lease {
  /** Runs the leased code in the child. */
  run(limits: RunLimits): Promise<ExecutionResult>;
  /** Gives the child back: it is disposed off the response path, and the pool refilled. */
  done(): void;
}

/** A language's children that are ready for a run, as tests and benchmarks look at them. */
export interface ChildPool {
  /** Children (for Python: interpreters) ready for a run now. */
  readonly idle: number;
  /** How many it keeps ready now: its size, or more during a burst. */
  readonly target: number;
  /** Waits until no child is starting. */
  settled(): Promise<void>;
}

/** One language's children, as the executor uses them. */
export interface LanguageRuntime {
  /** The language it runs. */
  readonly language: SkillLanguage;
  /**
   * Leases a child for one run: a warm one when the grants allow, else one started for it.
   *
   * @param request The code, grants, deadline and caller.
   * @returns The lease; the caller calls `done()` on every path.
   * @throws {CodeExecutorError} When the language cannot run (`PythonUnavailable`), or the
   * deadline or a cancel comes first (`TimeoutError`, `Cancelled`).
   */
  lease(request: LeaseRequest): Promise<Lease>;
  /**
   * The fields of a skill `call` reply that run a skill's body in the caller's child, which runs
   * this language (frame `reply`, `mode: "inline"`).
   *
   * @param code The skill's body.
   * @param granted The caller's grants, which the body runs with.
   * @returns The fields the child's runner expects.
   */
  inlineSkill(code: string, granted: GrantedPermissions): Record<string, unknown>;
  /**
   * Builds and checks what the language's start-up needs in the cache, by running code once the
   * way the server does (`code-executor prepare`).
   *
   * @returns What was prepared, for a person to read.
   * @throws {Error} With what failed and what to change.
   */
  prepare(): Promise<string>;
  /**
   * The children ready for a run, for tests and benchmarks.
   *
   * @returns The pool, once the language's start-up has found what its children need.
   */
  pool(): Promise<ChildPool>;
  /**
   * The warm pool's size now, for `/metrics`; never starts anything (Python's pool exists once
   * Python has started: zeros before).
   *
   * @returns Children ready for a run, and how many the pool keeps now.
   */
  warmChildren(): { ready: number; target: number };
  /** Kills every idle, pooled and session child; leased children are the reaper's. */
  close(): Promise<void>;
}

/** What a runtime is started with: the executor's settings, locations and shutdown. */
export interface RuntimeContext {
  /** The admin's settings. */
  settings: Settings;
  /** Where children are started from and what they may write. */
  locations: SandboxLocations;
  /** Where to report problems. */
  log: Logger;
  /** Aborted when the executor closes: no child is started after that. */
  closing: AbortSignal;
  /** Disposes used children off the response path, and every leased one at close. */
  reaper: ChildReaper;
}

/** The default profile: a child's own workspace and nothing else. */
const NO_GRANTS: GrantedPermissions = { net: [], read: [], write: [], deny: [] };

/** What the caller of a skill is, as its skills' runs see it. */
export interface SkillCaller {
  /** The language of the caller's code. */
  language: SkillLanguage;
  /** The caller's grants. */
  granted: GrantedPermissions;
  /** Who runs. */
  principal: string;
  /** Aborted when the caller's run ends: a nested run stops with it. */
  signal: AbortSignal;
}

/**
 * How a run's skills run: a nested run leases a child of the skill's language, an inline one
 * takes the fields of the skill's language. A Python caller's read grants stay in its own child:
 * its TypeScript skills get none.
 *
 * @param runtimes The executor's runtime of each language.
 * @param caller The calling run.
 * @returns The run context's `lease` and `inline`.
 */
export function skillRuns(
  runtimes: Record<SkillLanguage, LanguageRuntime>,
  caller: SkillCaller,
): Pick<RunContext, "lease" | "inline"> {
  const granted = caller.language === "typescript" ? caller.granted : NO_GRANTS;
  return {
    lease: (skill, args, timeoutMs) =>
      runtimes[skill.language].lease({
        code: skill.code,
        granted,
        deadline: { timeoutMs, signal: caller.signal },
        principal: caller.principal,
        args,
      }),
    inline: (skill) => runtimes[skill.language].inlineSkill(skill.code, granted),
  };
}

/** The limits of the run that {@linkcode LanguageRuntime.prepare} makes; a cold one is well under. */
export const PREPARE_RUN_LIMITS: Readonly<RunLimits> = {
  timeoutMs: 60_000,
  maxOutputBytes: 64 * 1024,
};

/**
 * Checks the result of the run a runtime's `prepare` makes, code that returns 6 * 7.
 *
 * @param what The child, for the message: "A TypeScript sandbox".
 * @param result The run's result.
 * @throws {Error} Unless the run returned 42.
 */
export function checkPreparedRun(what: string, result: ExecutionResult): void {
  if (result.ok && result.returnValue === 42) return;
  throw new Error(
    `${what} did not run code: ${
      result.error ? `${result.error.type}: ${result.error.message}` : JSON.stringify(result)
    }`,
  );
}
