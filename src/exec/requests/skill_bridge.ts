/**
 * The host side of the in-sandbox `skills` API (frame op `skill`): `save`, `list` and `call`.
 * A call's arguments are checked here against the skill's input schema; then a skill in the
 * caller's language goes back to the caller's child to run there (its body and the checked
 * arguments), and one in the other language runs as a nested run through the executor. Either way
 * its requests reach the caller's tool bridge, so the caller's policy holds for it.
 *
 * @module
 */
import { Buffer } from "node:buffer";
import { canonicalJson } from "../../_util.ts";
import { CodeExecutorError } from "../../errors.ts";
import { type AjvLike, describeValidationErrors, makeAjv } from "../../upstream/catalog.ts";
import type { RunHold, RunLimits } from "../child/execution.ts";
import type { RunOutputs } from "../output_store.ts";
import type { ExecutionResult } from "../result.ts";
import type { BridgeReply, ToolBridge } from "./tool_bridge.ts";
import { wrapTypescript } from "../typescript/source.ts";
import type { SkillLanguage, SkillRecord, SkillStore } from "../../skills/store.ts";

/** What the bridge needs of the skill store. */
export type SkillSource = Pick<SkillStore, "canSave" | "list" | "get" | "save">;

/**
 * How deep skills may call skills: the caller's code is level 0, a skill it calls level 1. A
 * recursive skill stops here with a clear error, before it has used up the children and the time
 * of the run.
 */
export const MAX_SKILL_DEPTH = 4;

/** Runs a skill in the other language as a nested run of the caller's run. */
export type NestedRun = (
  skill: SkillRecord,
  args: Record<string, unknown>,
  depth: number,
) => Promise<ExecutionResult>;

/** Options of {@linkcode SkillBridge}. */
export interface SkillBridgeOptions {
  /** Where skills are kept. */
  store: SkillSource;
  /** The caller's language: a skill in it runs in the caller's child. */
  language: SkillLanguage;
  /** The store's principal: undefined for the machine's own user (stdio). */
  principal?: string;
  /** The nesting level of the caller's top-level code: 0, or the level of a nested run. */
  depth: number;
  /** Runs a skill in the other language. */
  nested: NestedRun;
}

function text(value: unknown, field: string): string {
  if (typeof value !== "string") {
    throw new CodeExecutorError("TypeError", `${field} must be a string`);
  }
  return value;
}

function plainObject(value: unknown, what: string): Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new CodeExecutorError(
      "TypeError",
      `${what} must be an object, got ${
        Array.isArray(value) ? "an array" : value === null ? "null" : typeof value
      }`,
    );
  }
  return value as Record<string, unknown>;
}

function summary(skill: SkillRecord): Record<string, unknown> {
  return {
    name: skill.name,
    version: skill.version,
    ref: `${skill.name}@${skill.version}`,
    description: skill.description,
    language: skill.language,
    inputSchema: skill.inputSchema,
    scope: skill.scope,
  };
}

/** The `skill` requests of one run (or of one nested run, at its depth). */
export class SkillBridge {
  #options: SkillBridgeOptions;
  #ajv: { draft07?: AjvLike; draft2020?: AjvLike } = {};
  #compiled = new Map<string, ReturnType<AjvLike["compile"]>>();

  /**
   * Creates the bridge of one run's `skills` API.
   *
   * @param options The store, the caller's language, principal and depth, and the nested runner.
   */
  constructor(options: SkillBridgeOptions) {
    this.#options = options;
  }

  /**
   * Handles one `skill` frame from the sandbox.
   *
   * @param frame The frame, as parsed (untrusted).
   * @returns The reply; never throws.
   */
  async handle(frame: Record<string, unknown>): Promise<BridgeReply> {
    try {
      switch (frame.action) {
        case "save":
          return { ok: true, value: await this.#save(frame.args) };
        case "list":
          return {
            ok: true,
            value: (await this.#options.store.list(this.#options.principal)).map(summary),
          };
        case "call":
          return await this.#call(frame);
        default:
          throw new CodeExecutorError(
            "TypeError",
            `Unknown skills request "${String(frame.action).slice(0, 40)}"`,
          );
      }
    } catch (error) {
      if (error instanceof CodeExecutorError) return error.toReply();
      return {
        ok: false,
        error: { type: "ToolCallError", message: (error as Error).message ?? String(error) },
      };
    }
  }

  async #save(raw: unknown): Promise<Record<string, unknown>> {
    const { store, principal, language } = this.#options;
    // Checked here as well as in the store: the run's principal, not what the frame says.
    if (!store.canSave(principal)) {
      throw new CodeExecutorError(
        "SkillSaveDisabled",
        `Cannot save a skill: ${
          principal === undefined
            ? "saving from code is off on this server (skills.save)"
            : `skills.save does not let principal "${principal}" save`
        }; run the program with run_typescript or run_python instead, or ask the admin`,
      );
    }
    const spec = plainObject(raw, "skills.save()'s argument");
    // The store checks every field and names the one to change (SkillInvalid).
    const saved = await store.save({
      name: spec.name as string,
      description: spec.description as string,
      language: (spec.language ?? language) as SkillLanguage,
      inputSchema: spec.inputSchema as Record<string, unknown> | undefined,
      code: spec.code as string,
    }, principal);
    const { inputSchema: _schema, ...rest } = summary(saved);
    return rest;
  }

  async #call(frame: Record<string, unknown>): Promise<BridgeReply> {
    const { store, principal, language } = this.#options;
    const ref = text(frame.name, "The skill's name");
    // The child reports how deep its own code is (a skill's body in the caller's child is one
    // level down); it can only under-report, which costs its own time, not the host's children.
    const inChild = typeof frame.depth === "number" && Number.isSafeInteger(frame.depth) &&
        frame.depth > 0
      ? Math.min(frame.depth, MAX_SKILL_DEPTH)
      : 0;
    const depth = this.#options.depth + inChild + 1;
    if (depth > MAX_SKILL_DEPTH) {
      throw new CodeExecutorError(
        "LimitError",
        `Cannot call skill "${
          ref.slice(0, 80)
        }": skills may call skills at most ${MAX_SKILL_DEPTH} levels deep; a skill that calls itself needs a condition that ends it`,
      );
    }
    const skill = await store.get(ref, principal);
    const args = plainObject(frame.args ?? {}, `The arguments of skill "${ref.slice(0, 80)}"`);
    this.#validate(skill, args);
    if (skill.language === language) {
      const ref = `${skill.name}@${skill.version}`;
      const wrapped = language === "typescript"
        ? wrapTypescript(skill.code, { params: "args, skills" })
        : undefined;
      // The runner names the skill and its line offset in the module's URL, so that a stack
      // trace points at the skill's own line (`skill:name@1.ts:3:7`).
      const value = wrapped
        ? {
          mode: "inline",
          ref,
          lineOffset: wrapped.lineOffset,
          base64: Buffer.from(wrapped.source).toString("base64"),
          args,
        }
        : { mode: "inline", ref, source: skill.code, args };
      return { ok: true, value };
    }
    const result = await this.#options.nested(skill, args, depth);
    if (!result.ok) {
      const error = result.error ?? { type: "Error", message: "The skill failed" };
      return {
        ok: false,
        error: {
          type: error.type,
          message:
            `${error.message} (in skill "${skill.name}@${skill.version}", ${skill.language})`,
        },
      };
    }
    return {
      ok: true,
      value: {
        mode: "result",
        value: result.returnValue,
        ...(result.stdout ? { stdout: result.stdout } : {}),
        ...(result.stderr ? { stderr: result.stderr } : {}),
      },
    };
  }

  #validate(skill: SkillRecord, args: Record<string, unknown>): void {
    const schema = skill.inputSchema ?? { type: "object" };
    const is2020 = typeof schema.$schema === "string" && schema.$schema.includes("2020-12");
    const ajv = is2020
      ? (this.#ajv.draft2020 ??= makeAjv(true))
      : (this.#ajv.draft07 ??= makeAjv(false));
    const { $schema: _ignored, $id: _id, ...body } = schema;
    const ref = `${skill.name}@${skill.version}`;
    // Once per schema and run: a loop of calls to one skill compiles it once.
    const key = `${is2020}${canonicalJson(body)}`;
    let validate = this.#compiled.get(key);
    try {
      validate ??= ajv.compile(body);
      this.#compiled.set(key, validate);
    } catch (error) {
      throw new CodeExecutorError(
        "SkillInvalid",
        `Cannot call skill "${ref}": its inputSchema does not compile (${
          (error as Error).message
        }); save it again with a valid JSON Schema`,
      );
    }
    if (!validate(args)) {
      throw new CodeExecutorError(
        "ToolValidationError",
        describeValidationErrors(
          `skill "${ref}"`,
          validate.errors ?? [],
          "skills.list() shows its inputSchema",
        ),
      );
    }
  }
}

/** A child leased for a nested run, and what to do with it afterwards. */
export interface SkillLease {
  /** Runs the skill's body in the child. */
  run(limits: RunLimits): Promise<ExecutionResult>;
  /** Gives the child back (it is disposed off the response path). */
  done(): void;
}

/**
 * What every level of one run shares: the caller's tool bridge (its policy, call cap, approvals,
 * LLM budget and records), kept outputs, hold, end signal and deadline. A nested run gets the
 * same scope, so a skill can do nothing its caller could not.
 */
export interface RunScope {
  /** The caller's tool bridge. */
  bridge: ToolBridge;
  /** The caller's kept outputs (`readOutput`). */
  outputs: RunOutputs;
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
  lease(skill: SkillRecord, args: Record<string, unknown>, timeoutMs: number): Promise<SkillLease>;
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
 *
 * @param scope What the run's levels share.
 * @param options The level's language and depth (0 for the caller's own code).
 * @returns The `onRequest` of the level's execution.
 */
export function runRequests(
  scope: RunScope,
  options: { language: SkillLanguage; depth: number },
): (frame: Record<string, unknown>) => Promise<object> {
  const store = scope.store && runView(scope, scope.store);
  const skills = store && new SkillBridge({
    store,
    language: options.language,
    principal: scope.principal,
    depth: options.depth,
    nested: (skill, args, depth) => runNested(scope, { skill, args, depth }),
  });
  return (frame) => {
    // Reading a kept output is the principal's own data, not a tool call: no tool policy.
    if (frame.op === "output") return scope.outputs.answer(frame);
    if (frame.op !== "skill") return scope.bridge.handle(frame);
    if (skills) return skills.handle(frame);
    return Promise.resolve({
      ok: false,
      error: { type: "ToolCallError", message: "Skills are not available on this server" },
    });
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
    throw new CodeExecutorError(
      "TimeoutError",
      `Execution timed out after ${scope.timeoutMs} ms: pass a larger timeoutMs (up to the admin's limits.maxTimeoutMs) or do less work per run`,
    );
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
