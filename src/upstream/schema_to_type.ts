/**
 * JSON Schema rendered as TypeScript type text, for tool signatures and the typed wrappers.
 *
 * Schemas come from upstream servers and are untrusted: {@linkcode schemaToType} accepts
 * malformed, huge or recursive schemas without throwing, bounds its output, and emits text that
 * stays valid TypeScript (odd property names quoted, descriptions unable to close their comment
 * early or to break the layout; see `untrusted_text.ts`).
 *
 * @module
 */
import { isPlainObject } from "../_util.ts";
import { resolvePointer } from "../schema_limits.ts";
import { oneLineDoc, stringLiteral } from "./untrusted_text.ts";

/** Options for {@linkcode schemaToType}. */
export interface SchemaToTypeOptions {
  /** Prefix of every line after the first when the type spans several lines. Default `""`. */
  indent?: string;
  /** Nesting of objects and arrays rendered before falling back to `unknown`. Default 6. */
  maxDepth?: number;
  /** Render property descriptions as `/** … *\/` comments. Default false. */
  withDoc?: boolean;
}

const DEFAULT_MAX_DEPTH = 6;
const ONE_LINE_WIDTH = 100;
// Bounds that keep hostile schemas (deep, wide, or an exponential DAG of refs) cheap to render
// and short to read. Whatever they cut is widened, never narrowed, so the types stay sound.
const MAX_NESTING = 40;
const MAX_NODES = 2000;
const MAX_PROPERTIES = 100;
const MAX_ENUM = 50;
const MAX_LITERAL = 120;
const MAX_PROPERTY_NAME = 200;

/** How tightly a rendered type binds: a union or intersection needs parentheses in `T[]`. */
type Binding = "union" | "intersection" | "primary";

interface Rendered {
  text: string;
  binding: Binding;
  /** The members of a union, so that nested unions flatten and deduplicate. */
  members?: Rendered[];
}

interface Context {
  root: unknown;
  indent: string;
  maxDepth: number;
  withDoc: boolean;
  expanding: Set<object>;
  nodes: number;
}

interface Position {
  /** Structural depth: objects and arrays entered. */
  depth: number;
  /** Indentation level of the line the type starts on. */
  level: number;
  /** Every recursion, including refs and combinators. */
  nesting: number;
}

const UNKNOWN: Rendered = primary("unknown");
const NEVER: Rendered = primary("never");
const NULL: Rendered = primary("null");
const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

/**
 * Renders a JSON Schema as TypeScript type text.
 *
 * Handles `type` (and type arrays), `enum`, `const`, arrays and tuples, objects (`properties`,
 * `required`, `additionalProperties`), `anyOf`/`oneOf` (union), `allOf` (intersection), local
 * `$ref`s (`#/$defs/X`, `#/definitions/X`, any `#/…` pointer; a ref already being expanded
 * becomes `unknown`) and `nullable`. Anything it cannot express, or anything past `maxDepth`,
 * becomes `unknown`. Short types stay on one line (at most 100 characters); longer objects
 * put one property per line.
 *
 * @param schema A JSON Schema; any value is accepted.
 * @param options Indentation, depth limit and whether to render property descriptions.
 * @returns TypeScript type text; `unknown` when the schema says nothing usable.
 *
 * @example
 * ```ts
 * schemaToType({ type: "object", properties: { a: { type: "number" } }, required: ["a"] });
 * // "{ a: number }"
 * ```
 */
export function schemaToType(schema: unknown, options: SchemaToTypeOptions = {}): string {
  const maxDepth = typeof options.maxDepth === "number" && options.maxDepth >= 0
    ? Math.floor(options.maxDepth)
    : DEFAULT_MAX_DEPTH;
  const context: Context = {
    root: schema,
    indent: options.indent ?? "",
    maxDepth,
    withDoc: options.withDoc ?? false,
    expanding: new Set(isPlainObject(schema) ? [schema] : []),
    nodes: 0,
  };
  try {
    return render(schema, context, { depth: 0, level: 0, nesting: 0 }).text;
  } catch {
    // Schemas are plain JSON, but a caller may hand over live objects (getters, proxies): a
    // signature is a hint, so a failure here must not fail the search that asked for it.
    return "unknown";
  }
}

function render(schema: unknown, context: Context, at: Position): Rendered {
  if (schema === true) return UNKNOWN;
  if (schema === false) return NEVER;
  if (!isPlainObject(schema)) return UNKNOWN;
  if (at.depth > context.maxDepth || at.nesting > MAX_NESTING) return UNKNOWN;
  if (++context.nodes > MAX_NODES) return UNKNOWN;

  const inner = { ...at, nesting: at.nesting + 1 };
  let own = renderOwn(schema, context, at);
  const parts: Rendered[] = [];
  if (typeof schema.$ref === "string") parts.push(renderRef(schema.$ref, context, inner));
  for (const keyword of ["anyOf", "oneOf"]) {
    const members = schema[keyword];
    if (Array.isArray(members)) {
      parts.push(union(members.map((member) => render(member, context, inner))));
    }
  }
  if (Array.isArray(schema.allOf)) {
    parts.push(intersection(schema.allOf.map((member) => render(member, context, inner))));
  }
  // `{ type: "object", oneOf: [...] }` says no more than its branches do.
  if (own.text === "Record<string, unknown>" && parts.some((part) => part.text !== "unknown")) {
    own = UNKNOWN;
  }
  const type = intersection([own, ...parts]);
  return schema.nullable === true ? union([type, NULL]) : type;
}

function renderOwn(schema: Record<string, unknown>, context: Context, at: Position): Rendered {
  if (Object.hasOwn(schema, "const")) return literal(schema.const);
  if (Array.isArray(schema.enum)) return enumeration(schema.enum);
  let types: unknown[];
  if (typeof schema.type === "string") types = [schema.type];
  else if (Array.isArray(schema.type)) types = schema.type;
  else if (
    isPlainObject(schema.properties) || isSchema(schema.additionalProperties) ||
    isPlainObject(schema.patternProperties)
  ) types = ["object"];
  else if (
    isSchema(schema.items) || Array.isArray(schema.items) || Array.isArray(schema.prefixItems)
  ) {
    types = ["array"];
  } else return UNKNOWN;
  return union(types.map((type) => {
    switch (type) {
      case "string":
      case "boolean":
      case "null":
      case "number":
        return primary(type);
      case "integer":
        return primary("number");
      case "array":
        return renderArray(schema, context, at);
      case "object":
        return renderObject(schema, context, at);
      default:
        return UNKNOWN;
    }
  }));
}

function renderRef(ref: string, context: Context, at: Position): Rendered {
  const target = resolvePointer(ref, context.root);
  if (target === undefined) return UNKNOWN;
  if (!isPlainObject(target)) return render(target, context, at);
  if (context.expanding.has(target)) return UNKNOWN;
  context.expanding.add(target);
  try {
    return render(target, context, at);
  } finally {
    context.expanding.delete(target);
  }
}

function renderArray(schema: Record<string, unknown>, context: Context, at: Position): Rendered {
  const element = { depth: at.depth + 1, level: at.level, nesting: at.nesting + 1 };
  let prefix: unknown[] | undefined;
  let rest: unknown;
  if (Array.isArray(schema.prefixItems)) {
    prefix = schema.prefixItems;
    rest = schema.items;
  } else if (Array.isArray(schema.items)) {
    prefix = schema.items;
    rest = schema.additionalItems;
  }
  if (prefix === undefined || prefix.length === 0) {
    if (schema.items === false) return primary("[]");
    return arrayOf(render(schema.items ?? true, context, element));
  }
  const elements = prefix.slice(0, MAX_PROPERTIES).map((item) =>
    render(item, context, element).text
  );
  if (prefix.length > MAX_PROPERTIES) rest = true;
  if (rest !== undefined && rest !== false) {
    elements.push(`...${arrayOf(render(rest, context, element)).text}`);
  }
  return primary(`[${elements.join(", ")}]`);
}

function renderObject(schema: Record<string, unknown>, context: Context, at: Position): Rendered {
  const properties = isPlainObject(schema.properties) ? schema.properties : {};
  const names = Object.keys(properties);
  const additional = schema.additionalProperties;
  const patterned = isPlainObject(schema.patternProperties) &&
    Object.keys(schema.patternProperties).length > 0;
  const value = { depth: at.depth + 1, level: at.level, nesting: at.nesting + 1 };

  if (names.length === 0) {
    if (additional === false && !patterned) return primary("Record<string, never>");
    const type = isPlainObject(additional) ? render(additional, context, value) : UNKNOWN;
    return primary(`Record<string, ${type.text}>`);
  }

  const required = new Set(
    Array.isArray(schema.required)
      ? schema.required.filter((name) => typeof name === "string")
      : [],
  );
  const member = { ...value, level: at.level + 1 };
  const members: { doc: string; text: string }[] = [];
  let open = (additional !== undefined && additional !== false) || patterned;
  for (const name of names) {
    if (members.length >= MAX_PROPERTIES || name.length > MAX_PROPERTY_NAME) {
      open = true;
      continue;
    }
    const property = properties[name];
    const key = IDENTIFIER.test(name) ? name : stringLiteral(name);
    const type = render(property, context, member);
    const doc = context.withDoc ? describe(property, context) : "";
    members.push({ doc, text: `${key}${required.has(name) ? "" : "?"}: ${type.text}` });
  }
  if (open) members.push({ doc: "", text: "[key: string]: unknown" });

  const oneLine = `{ ${
    members.map(({ doc, text }) => doc === "" ? text : `/** ${doc} */ ${text}`).join("; ")
  } }`;
  if (oneLine.length <= ONE_LINE_WIDTH && !oneLine.includes("\n")) return primary(oneLine);
  const indent = context.indent + "  ".repeat(at.level + 1);
  const lines = ["{"];
  for (const { doc, text } of members) {
    if (doc !== "") lines.push(`${indent}/** ${doc} */`);
    lines.push(`${indent}${text};`);
  }
  lines.push(`${context.indent}${"  ".repeat(at.level)}}`);
  return primary(lines.join("\n"));
}

function enumeration(values: unknown[]): Rendered {
  if (values.length <= MAX_ENUM) return union(values.map(literal));
  // Too many to list: widen each value to its type.
  return union(values.map((value) => {
    const type = value === null ? "null" : typeof value;
    return type === "string" || type === "number" || type === "boolean" || type === "null"
      ? primary(type)
      : literal(value);
  }));
}

function literal(value: unknown): Rendered {
  if (value === null) return NULL;
  if (Array.isArray(value)) return primary("unknown[]");
  switch (typeof value) {
    case "string": {
      const text = stringLiteral(value);
      return primary(text.length <= MAX_LITERAL ? text : "string");
    }
    case "number":
      return primary(Number.isFinite(value) ? JSON.stringify(value) : "number");
    case "boolean":
      return primary(String(value));
    case "object":
      return primary("Record<string, unknown>");
    default:
      return UNKNOWN;
  }
}

function arrayOf(element: Rendered): Rendered {
  const text = element.binding === "primary" ? element.text : `(${element.text})`;
  return primary(`${text}[]`);
}

/**
 * The distinct operands of a union or an intersection, in order, without its identity (`never`
 * in a union, `unknown` in an intersection); undefined when one of them absorbs the whole
 * (`unknown` in a union, `never` in an intersection).
 */
function distinctOperands(
  types: Rendered[],
  identity: string,
  absorbing: string,
): Rendered[] | undefined {
  const operands: Rendered[] = [];
  const seen = new Set<string>();
  for (const type of types) {
    if (type.text === absorbing) return undefined;
    if (type.text === identity || seen.has(type.text)) continue;
    seen.add(type.text);
    operands.push(type);
  }
  return operands;
}

function union(types: Rendered[]): Rendered {
  const members = distinctOperands(
    types.flatMap((type) => type.members ?? [type]),
    "never",
    "unknown",
  );
  if (members === undefined) return UNKNOWN;
  if (members.length === 0) return NEVER;
  if (members.length === 1) return members[0];
  return { text: members.map((type) => type.text).join(" | "), binding: "union", members };
}

function intersection(types: Rendered[]): Rendered {
  const parts = distinctOperands(types, "unknown", "never");
  if (parts === undefined) return NEVER;
  if (parts.length === 0) return UNKNOWN;
  if (parts.length === 1) return parts[0];
  const text = parts.map((type) => type.binding === "union" ? `(${type.text})` : type.text)
    .join(" & ");
  return { text, binding: "intersection" };
}

function primary(text: string): Rendered {
  return { text, binding: "primary" };
}

function describe(schema: unknown, context: Context): string {
  if (!isPlainObject(schema)) return "";
  if (typeof schema.description === "string") return oneLineDoc(schema.description);
  if (typeof schema.$ref !== "string") return "";
  const target = resolvePointer(schema.$ref, context.root);
  return isPlainObject(target) && typeof target.description === "string"
    ? oneLineDoc(target.description)
    : "";
}

function isSchema(value: unknown): boolean {
  return typeof value === "boolean" || isPlainObject(value);
}
