/**
 * Bounds on the JSON Schemas that callers and upstream servers control (a skill's `inputSchema`,
 * an upstream tool's input schema), so that checking arguments against one cannot block the
 * server's event loop: Ajv runs on the main thread, so a pattern that backtracks (`^(a+)+$`) or
 * a schema whose `$ref`s are reached by many paths (nested `anyOf` over shared definitions, each
 * level doubling the work) held it for seconds.
 *
 * - Patterns (`pattern`, `patternProperties`) are matched by RE2JS, in time linear in the text;
 *   a pattern RE2 cannot run (backreferences, lookaround) or longer than
 *   {@linkcode MAX_PATTERN_CHARS} does not compile.
 * - A schema is refused when it expands to more than {@linkcode MAX_SCHEMA_COST} nodes with its
 *   `$ref`s followed (a reference already being expanded counts once): validation visits at most
 *   that many schema nodes per value it checks.
 *
 * @module
 */
import { RE2JS } from "re2js";
import { isPlainObject } from "./_util.ts";

/** The longest pattern accepted, in characters. */
export const MAX_PATTERN_CHARS = 1_000;

/** The most schema nodes a schema may expand to, its `$ref`s followed. */
export const MAX_SCHEMA_COST = 10_000;

/** What Ajv's `code.regExp` returns: something that tests a string. */
export interface LinearRegExp {
  /** Whether the pattern matches somewhere in the text. */
  test(text: string): boolean;
}

const compiled = new Map<string, LinearRegExp>();

/**
 * Ajv's `code.regExp`: a pattern compiled by RE2JS, which matches in linear time.
 *
 * @param pattern The pattern, as the schema writes it.
 * @returns The matcher.
 * @throws {Error} For a pattern longer than {@linkcode MAX_PATTERN_CHARS} or one RE2 cannot
 *   run; the message says which.
 */
export function linearRegExp(pattern: string): LinearRegExp {
  let regExp = compiled.get(pattern);
  if (regExp !== undefined) return regExp;
  if (pattern.length > MAX_PATTERN_CHARS) {
    throw new Error(
      `the pattern ${
        JSON.stringify(pattern.slice(0, 40))
      }… is longer than ${MAX_PATTERN_CHARS} characters`,
    );
  }
  let re: ReturnType<typeof RE2JS.compile>;
  try {
    re = RE2JS.compile(pattern);
  } catch (error) {
    throw new Error(
      `the pattern ${JSON.stringify(pattern.slice(0, 80))} is not one RE2 can run in linear time (${
        (error as Error).message
      }): drop backreferences and lookaround`,
    );
  }
  regExp = { test: (text) => re.matcher(text).find() };
  if (compiled.size > 1_000) compiled.clear();
  compiled.set(pattern, regExp);
  return regExp;
}

/**
 * Looks up a local JSON Pointer reference (`#`, `#/$defs/X`, …) in own properties only.
 *
 * @param ref The `$ref` value; anything not starting with `#` resolves to nothing.
 * @param root The document the pointer is relative to.
 * @returns The referenced value, or undefined when it does not exist.
 */
export function resolvePointer(ref: string, root: unknown): unknown {
  if (!ref.startsWith("#")) return undefined;
  let pointer: string;
  try {
    pointer = decodeURIComponent(ref.slice(1));
  } catch {
    return undefined;
  }
  if (pointer === "") return root;
  if (!pointer.startsWith("/")) return undefined;
  let node = root;
  for (const raw of pointer.slice(1).split("/")) {
    const segment = raw.replaceAll("~1", "/").replaceAll("~0", "~");
    if (Array.isArray(node) && /^(0|[1-9][0-9]*)$/.test(segment)) node = node[Number(segment)];
    else if (isPlainObject(node) && Object.hasOwn(node, segment)) node = node[segment];
    else return undefined;
  }
  return node;
}

/** Keywords whose values are data, not schemas: not walked. */
const DATA_KEYWORDS = new Set(["enum", "const", "default", "examples"]);

/**
 * How many schema nodes a schema expands to with its local `$ref`s followed, counting stops
 * just past `budget`.
 *
 * @param schema A JSON Schema.
 * @param budget Where to stop counting.
 * @returns The count, at most `budget + 1`.
 */
export function schemaCost(schema: unknown, budget: number = MAX_SCHEMA_COST): number {
  let cost = 0;
  const expanding = new Set<unknown>([schema]);
  const walk = (node: unknown): void => {
    if (cost > budget || node === null || typeof node !== "object") return;
    if (Array.isArray(node)) {
      for (const item of node) walk(item);
      return;
    }
    cost++;
    const record = node as Record<string, unknown>;
    if (typeof record.$ref === "string") {
      const target = resolvePointer(record.$ref, schema);
      if (target !== null && typeof target === "object" && !expanding.has(target)) {
        expanding.add(target);
        walk(target);
        expanding.delete(target);
      }
    }
    for (const [key, value] of Object.entries(record)) {
      if (key !== "$ref" && !DATA_KEYWORDS.has(key)) walk(value);
    }
  };
  walk(schema);
  return cost;
}

/**
 * Refuses a schema that is too costly to check.
 *
 * @param schema A JSON Schema.
 * @throws {Error} When it expands to more than {@linkcode MAX_SCHEMA_COST} nodes.
 */
export function assertSchemaCost(schema: unknown): void {
  if (schemaCost(schema) > MAX_SCHEMA_COST) {
    throw new Error(
      `the schema expands to more than ${MAX_SCHEMA_COST} nodes with its $refs followed (nested anyOf/oneOf/allOf over shared definitions): checking arguments against it could take seconds; flatten it`,
    );
  }
}

/**
 * Refuses a schema with a pattern (`pattern`, a key of `patternProperties`) that RE2 cannot run
 * or that is too long, as Ajv with {@linkcode linearRegExp} would when it compiles the schema.
 *
 * @param schema A JSON Schema.
 * @throws {Error} Naming the first such pattern.
 */
export function assertLinearPatterns(schema: unknown): void {
  const walk = (node: unknown): void => {
    if (node === null || typeof node !== "object") return;
    if (Array.isArray(node)) {
      for (const item of node) walk(item);
      return;
    }
    const record = node as Record<string, unknown>;
    if (typeof record.pattern === "string") linearRegExp(record.pattern);
    const patterned = record.patternProperties;
    if (patterned !== null && typeof patterned === "object" && !Array.isArray(patterned)) {
      for (const key of Object.keys(patterned)) linearRegExp(key);
    }
    for (const [key, value] of Object.entries(record)) {
      if (!DATA_KEYWORDS.has(key)) walk(value);
    }
  };
  walk(schema);
}
