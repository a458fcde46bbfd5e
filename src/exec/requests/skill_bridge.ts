/**
 * The host side of the in-sandbox `skills` API (frame op `skill`): `save`, `list` and `call`.
 * A call's arguments are checked here against the skill's input schema; then a skill in the
 * caller's language goes back to the caller's child to run there (its body and the checked
 * arguments), and one in the other language runs as a nested run (`router.ts`). Either way its
 * requests reach the caller's tool bridge, so the caller's policy holds for it.
 *
 * @module
 */
import { canonicalJson } from "../../_util.ts";
import { CodeExecutorError } from "../../errors.ts";
import { type AjvLike, describeValidationErrors, makeAjv } from "../../upstream/catalog.ts";
import type { ExecutionResult } from "../result.ts";
import type { BridgeReply } from "./tool_bridge.ts";
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
  /**
   * The fields of the reply that runs a skill's body in the caller's child (its language's
   * runtime knows them).
   */
  inline: (skill: SkillRecord) => Record<string, unknown>;
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
      return CodeExecutorError.from(error, "ToolCallError").toReply();
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
      // The runner names the skill in what it runs, so that a stack trace points at the skill's
      // own line (`skill:name@1.ts:3:7`).
      const ref = `${skill.name}@${skill.version}`;
      return { ok: true, value: { mode: "inline", ref, ...this.#options.inline(skill), args } };
    }
    const result = await this.#options.nested(skill, args, depth);
    if (!result.ok) {
      const error = result.error ?? new CodeExecutorError("Error", "The skill failed").toInfo();
      return {
        ok: false,
        error: {
          type: error.type,
          message:
            `${error.message} (in skill "${skill.name}@${skill.version}", ${skill.language})`,
        },
      };
    }
    // The images it showed go back to the caller, which displays them as its own (its cap).
    const images = (result.images ?? []).flatMap(({ mimeType, data }) =>
      data === undefined ? [] : [{ mimeType, data }]
    );
    return {
      ok: true,
      value: {
        mode: "result",
        value: result.returnValue,
        ...(result.stdout ? { stdout: result.stdout } : {}),
        ...(result.stderr ? { stderr: result.stderr } : {}),
        ...(images.length ? { images } : {}),
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
