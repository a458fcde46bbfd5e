/**
 * What a skill must be before it is written: a name that is safe as a directory name and in the
 * in-sandbox API, a bounded description, a program within the size limit, and an input schema
 * that is JSON Schema (checked against the meta-schema) describing an object.
 *
 * @module
 */
import Ajv from "ajv";
import Ajv2020 from "ajv/dist/2020";
import { CodeExecutorError } from "../errors.ts";
import { isPlainObject } from "../_util.ts";
import { PYTHON_KEYWORDS } from "../python_keywords.ts";
import { assertLinearPatterns, assertSchemaCost } from "../schema_limits.ts";

/** Agent Skills naming: lowercase letters, digits and single hyphens, no hyphen at either end. */
export const SKILL_NAME_PATTERN: RegExp = /^[a-z0-9]+(?:-[a-z0-9]+)*$/;

/** The longest name (Agent Skills). */
export const MAX_NAME_LENGTH = 64;

/** The longest description, in characters (Agent Skills). */
export const MAX_DESCRIPTION_CHARS = 1024;

/**
 * Names a skill cannot take: the methods of the in-sandbox `skills` object, what would make it a
 * thenable or shadow an object's own members, Python keywords (`skills.<name>` must parse in
 * Python once hyphens become underscores), and the words hosts reserve for their own skills.
 */
export const RESERVED_SKILL_NAMES: ReadonlySet<string> = new Set([
  "save",
  "list",
  "call",
  "get",
  "remove",
  "rm",
  "versions",
  "search",
  "show",
  "import",
  "export",
  "then",
  "constructor",
  "prototype",
  "skill",
  "skills",
  ...[...PYTHON_KEYWORDS].map((word) => word.toLowerCase()),
]);

/** Words a name may not contain: hosts reserve them for their own skills. */
const RESERVED_WORDS = ["anthropic", "claude"];

/** The limits a skill is checked against (the `skills.*` settings). */
export interface SkillLimits {
  /** The largest program, in bytes. */
  maxCodeBytes: number;
  /** The largest input schema, in bytes of JSON. */
  maxSchemaBytes: number;
}

function invalid(message: string): CodeExecutorError {
  return new CodeExecutorError("SkillInvalid", message);
}

function printable(text: string): string {
  return JSON.stringify(text.length > 80 ? text.slice(0, 80) + "…" : text);
}

/**
 * Checks a skill name: Agent Skills' rules (1 to 64 lowercase letters, digits and single hyphens,
 * no hyphen at either end), not reserved. A path separator, `..`, a control character or an
 * uppercase letter fails the pattern, so no name can leave its directory.
 *
 * @param name The name.
 * @returns The name.
 * @throws {CodeExecutorError} `SkillInvalid`, saying what to change.
 */
export function validateSkillName(name: unknown): string {
  if (typeof name !== "string" || name.length === 0) {
    throw invalid('Skill name is missing: pass a name like "fetch-open-issues"');
  }
  if (name.length > MAX_NAME_LENGTH) {
    throw invalid(
      `Skill name ${printable(name)} is too long: use at most ${MAX_NAME_LENGTH} characters`,
    );
  }
  if (!SKILL_NAME_PATTERN.test(name)) {
    throw invalid(
      `Skill name ${
        printable(name)
      } is not allowed: use lowercase letters a-z, digits and single ` +
        'hyphens, not at the start or end (e.g. "fetch-open-issues")',
    );
  }
  if (RESERVED_SKILL_NAMES.has(name)) {
    throw invalid(`Skill name "${name}" is reserved: choose another name`);
  }
  const word = RESERVED_WORDS.find((reserved) => name.includes(reserved));
  if (word !== undefined) {
    throw invalid(`Skill name "${name}" contains the reserved word "${word}": choose another name`);
  }
  return name;
}

/**
 * Splits a reference `name` or `name@N` and checks both parts.
 *
 * @param ref The reference.
 * @returns The name, and the version when one was given.
 * @throws {CodeExecutorError} `SkillInvalid` for a bad name or version.
 */
export function parseSkillRef(ref: unknown): { name: string; version?: number } {
  if (typeof ref !== "string") {
    throw invalid('Skill reference must be a string: "name" or "name@2"');
  }
  const at = ref.lastIndexOf("@");
  if (at < 0) return { name: validateSkillName(ref) };
  const versionText = ref.slice(at + 1);
  if (!/^[1-9]\d{0,8}$/.test(versionText)) {
    throw invalid(`Skill version in ${printable(ref)} must be a positive integer ("name@2")`);
  }
  return { name: validateSkillName(ref.slice(0, at)), version: Number(versionText) };
}

/**
 * Checks a description: text of 1 to 1,024 characters, with no control characters but newline and
 * tab (it is written as a JSON-quoted scalar, so neither can break the front matter).
 *
 * @param description The description.
 * @returns The description, trimmed.
 * @throws {CodeExecutorError} `SkillInvalid`.
 */
export function validateDescription(description: unknown): string {
  if (typeof description !== "string" || description.trim() === "") {
    throw invalid(
      "Skill description is missing: say in a sentence what the skill does and when to use it",
    );
  }
  const text = description.trim();
  if ([...text].length > MAX_DESCRIPTION_CHARS) {
    throw invalid(`Skill description is too long: use at most ${MAX_DESCRIPTION_CHARS} characters`);
  }
  // deno-lint-ignore no-control-regex -- control characters are exactly what is refused
  if (/[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u2028\u2029\ufeff]/.test(text)) {
    throw invalid(
      "Skill description holds control characters: use plain text (newlines are allowed)",
    );
  }
  return text;
}

/**
 * Checks a program: a string within `maxCodeBytes`, not empty.
 *
 * @param code The program.
 * @param limits The size limits.
 * @returns The program.
 * @throws {CodeExecutorError} `SkillInvalid`.
 */
export function validateCode(code: unknown, limits: SkillLimits): string {
  if (typeof code !== "string" || code.trim() === "") {
    throw invalid("Skill code is missing: pass the program that worked, as a string");
  }
  const bytes = new TextEncoder().encode(code).length;
  if (bytes > limits.maxCodeBytes) {
    throw invalid(
      `Skill code is ${bytes} bytes, above skills.maxCodeBytes (${limits.maxCodeBytes}): save a ` +
        "smaller program",
    );
  }
  if (code.includes("\u0000")) throw invalid("Skill code holds a NUL character: remove it");
  return code;
}

type SchemaChecker = {
  validateSchema(schema: unknown): boolean;
  errorsText(errors?: unknown): string;
  errors?: unknown;
};
let ajv07: SchemaChecker | undefined;
let ajv2020: SchemaChecker | undefined;

function checker(schema: Record<string, unknown>): SchemaChecker {
  const options = { strict: false, allErrors: false, validateSchema: true };
  const is07 = typeof schema.$schema === "string" && /draft-0[4-7]/.test(schema.$schema);
  // The packages are CommonJS; their default export is the class.
  if (is07) return ajv07 ??= new (Ajv as unknown as new (o: unknown) => SchemaChecker)(options);
  return ajv2020 ??= new (Ajv2020 as unknown as new (o: unknown) => SchemaChecker)(options);
}

/**
 * Checks an input schema: a JSON Schema (valid against its meta-schema: 2020-12, or draft-07 when
 * `$schema` says so) of `type: "object"`, within `maxSchemaBytes`. No schema means any object.
 *
 * @param schema The schema, or undefined.
 * @param limits The size limits.
 * @returns The schema, `{ type: "object" }` when none was given.
 * @throws {CodeExecutorError} `SkillInvalid`, with the meta-schema's complaint.
 */
export function validateInputSchema(
  schema: unknown,
  limits: SkillLimits,
): Record<string, unknown> {
  if (schema === undefined || schema === null) return { type: "object" };
  if (!isPlainObject(schema)) {
    throw invalid(
      'Skill inputSchema must be a JSON Schema object like {"type": "object", "properties": {…}}',
    );
  }
  let json: string;
  try {
    json = JSON.stringify(schema);
  } catch (error) {
    throw invalid(`Skill inputSchema is not JSON: ${(error as Error).message}`);
  }
  const bytes = new TextEncoder().encode(json).length;
  if (bytes > limits.maxSchemaBytes) {
    throw invalid(
      `Skill inputSchema is ${bytes} bytes, above skills.maxSchemaBytes (${limits.maxSchemaBytes})`,
    );
  }
  const copy = JSON.parse(json) as Record<string, unknown>;
  if (copy.type !== "object") {
    throw invalid('Skill inputSchema must have "type": "object" (the arguments are one object)');
  }
  const ajv = checker(copy);
  let valid: boolean;
  try {
    valid = ajv.validateSchema(copy);
  } catch (error) {
    throw invalid(`Skill inputSchema is not JSON Schema: ${(error as Error).message}`);
  }
  if (!valid) {
    throw invalid(`Skill inputSchema is not JSON Schema: ${ajv.errorsText(ajv.errors)}`);
  }
  // Its arguments are checked on the server's event loop at every call (src/schema_limits.ts).
  try {
    assertLinearPatterns(copy);
    assertSchemaCost(copy);
  } catch (error) {
    throw invalid(`Skill inputSchema cannot be checked safely: ${(error as Error).message}`);
  }
  return copy;
}

/** A skill to save, every field checked. */
export interface ValidSkill {
  /** The name. */
  name: string;
  /** The description, trimmed. */
  description: string;
  /** The language. */
  language: "typescript" | "python";
  /** The input schema (`{ type: "object" }` when none was given). */
  inputSchema: Record<string, unknown>;
  /** The program. */
  code: string;
}

/**
 * Checks everything a save gives: name, description, language, program and schema.
 *
 * @param input What the caller passed (untrusted).
 * @param limits The size limits.
 * @returns The checked skill.
 * @throws {CodeExecutorError} `SkillInvalid`, naming what to change.
 */
export function validateSaveInput(input: unknown, limits: SkillLimits): ValidSkill {
  if (!isPlainObject(input)) {
    throw invalid("Skill must be an object {name, description, language, inputSchema, code}");
  }
  const name = validateSkillName(input.name);
  const description = validateDescription(input.description);
  if (input.language !== "typescript" && input.language !== "python") {
    throw invalid('Skill language must be "typescript" or "python"');
  }
  const code = validateCode(input.code, limits);
  const inputSchema = validateInputSchema(input.inputSchema, limits);
  return { name, description, language: input.language, inputSchema, code };
}
