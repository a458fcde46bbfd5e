/**
 * Compact TypeScript renderings of upstream MCP tools, for `search_tools` and generated wrappers.
 *
 * Names, descriptions and schemas come from upstream servers and are untrusted: every function
 * here accepts malformed, huge or recursive schemas without throwing, bounds its output, and
 * emits text that stays valid TypeScript (odd names quoted, doc comments unable to close early
 * or to break the layout).
 *
 * @module
 */

/** A tool as listed by an upstream server (subset of MCP's `Tool`). */
export interface ToolInfo {
  /** Upstream server name, verbatim (may contain `-`, `.` and other characters). */
  server: string;
  /** Tool name, verbatim (e.g. `get-sum`, `read_file`, `Foo.Bar`). */
  name: string;
  /** The tool's description, as the upstream server wrote it. */
  description?: string;
  /** JSON Schema of the tool's arguments. */
  inputSchema: Record<string, unknown>;
  /** JSON Schema of the tool's `structuredContent`, when the server declares one. */
  outputSchema?: Record<string, unknown>;
}

/** Options for {@linkcode schemaToType}. */
export interface SchemaToTypeOptions {
  /** Prefix of every line after the first when the type spans several lines. Default `""`. */
  indent?: string;
  /** Nesting of objects and arrays rendered before falling back to `unknown`. Default 6. */
  maxDepth?: number;
  /** Render property descriptions as `/** … *\/` comments. Default false. */
  withDoc?: boolean;
}

/** Options for {@linkcode toolSignature}. */
export interface ToolSignatureOptions {
  /** Render the tool's and its properties' descriptions as doc comments. Default true. */
  withDoc?: boolean;
  /** Nesting of objects and arrays rendered before falling back to `unknown`. Default 6. */
  maxDepth?: number;
}

const DEFAULT_MAX_DEPTH = 6;
const ONE_LINE_WIDTH = 100;
const MAX_DESCRIPTION = 300;
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
 * Returns the name that `callMCPTool` takes: `mcp__<server>__<tool>`, both parts verbatim.
 *
 * @param server The upstream server's name.
 * @param tool The tool's name on that server.
 * @returns The full tool name.
 *
 * @example
 * ```ts
 * fullToolName("everything", "get-sum"); // "mcp__everything__get-sum"
 * ```
 */
export function fullToolName(server: string, tool: string): string {
  return `mcp__${server}__${tool}`;
}

/**
 * Returns the property name of a server or tool on the typed proxy (`tools.<server>.<tool>`).
 *
 * The name is split on every character that is not an ASCII letter or digit and joined in
 * camelCase (all-capital words are lower-cased first); a leading digit gets a `_` prefix and a
 * name without letters or digits becomes `_`. ASCII only, so that TypeScript and Python agree.
 * Different names can map to the same proxy name (`get-sum`, `get_sum`): callers that build a
 * proxy must detect such collisions.
 *
 * @param name A server or tool name, verbatim.
 * @returns A valid identifier, never empty.
 *
 * @example
 * ```ts
 * proxyName("get-sum"); // "getSum"
 * proxyName("2fa"); // "_2fa"
 * ```
 */
export function proxyName(name: string): string {
  const words = String(name).split(/[^A-Za-z0-9]+/).filter((word) => word !== "");
  if (words.length === 0) return "_";
  const camel = words.map((word, index) => {
    const lower = /^[A-Z0-9]+$/.test(word) ? word.toLowerCase() : word;
    if (index > 0) return lower[0].toUpperCase() + lower.slice(1);
    // A leading acronym is lower-cased up to the capital that starts the next word:
    // "HTTPServer" -> "httpServer", "GetThing" -> "getThing".
    const acronym = /^[A-Z]+(?=[A-Z][a-z])/.exec(lower)?.[0] ?? lower[0];
    return acronym.toLowerCase() + lower.slice(acronym.length);
  }).join("");
  return /^[0-9]/.test(camel) ? `_${camel}` : camel;
}

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
    expanding: new Set(isRecord(schema) ? [schema] : []),
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

/**
 * Renders one tool as a call on the typed proxy, with its full name in a trailing comment.
 *
 * The arguments are optional when the input schema requires nothing; the result is
 * `Promise<T>` where `T` comes from the output schema, or `Promise<unknown>` without one.
 *
 * @param tool The tool as listed by its server.
 * @param options Whether to render descriptions (default true) and the depth limit.
 * @returns One signature, on one or more lines.
 *
 * @example
 * ```ts
 * toolSignature({
 *   server: "everything",
 *   name: "get-sum",
 *   description: "Adds two numbers.",
 *   inputSchema: {
 *     type: "object",
 *     properties: { a: { type: "number" }, b: { type: "number" } },
 *     required: ["a", "b"],
 *   },
 * });
 * // /** Adds two numbers. *\/
 * // tools.everything.getSum(args: { a: number; b: number }): Promise<unknown>  // mcp__everything__get-sum
 * ```
 */
export function toolSignature(tool: ToolInfo, options: ToolSignatureOptions = {}): string {
  const withDoc = options.withDoc ?? true;
  const typeOptions = { withDoc, maxDepth: options.maxDepth };
  const server = String(tool.server);
  const name = String(tool.name);
  const args = schemaToType(tool.inputSchema, typeOptions);
  const result = tool.outputSchema === undefined
    ? "unknown"
    : schemaToType(tool.outputSchema, typeOptions);
  const optional = argsAreOptional(tool.inputSchema) ? "?" : "";
  const call = `tools.${proxyName(server)}.${proxyName(name)}(args${optional}: ${args})`;
  const signature = `${call}: Promise<${result}>  // ${
    lineCommentText(fullToolName(server, name))
  }`;
  const doc = withDoc && typeof tool.description === "string" ? sanitizeDoc(tool.description) : "";
  return doc === "" ? signature : `/** ${doc} */\n${signature}`;
}

function render(schema: unknown, context: Context, at: Position): Rendered {
  if (schema === true) return UNKNOWN;
  if (schema === false) return NEVER;
  if (!isRecord(schema)) return UNKNOWN;
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
    isRecord(schema.properties) || isSchema(schema.additionalProperties) ||
    isRecord(schema.patternProperties)
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
  if (!isRecord(target)) return render(target, context, at);
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
  const properties = isRecord(schema.properties) ? schema.properties : {};
  const names = Object.keys(properties);
  const additional = schema.additionalProperties;
  const patterned = isRecord(schema.patternProperties) &&
    Object.keys(schema.patternProperties).length > 0;
  const value = { depth: at.depth + 1, level: at.level, nesting: at.nesting + 1 };

  if (names.length === 0) {
    if (additional === false && !patterned) return primary("Record<string, never>");
    const type = isRecord(additional) ? render(additional, context, value) : UNKNOWN;
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
    const key = IDENTIFIER.test(name) ? name : quote(name);
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
      const text = quote(value);
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

function union(types: Rendered[]): Rendered {
  const members: Rendered[] = [];
  const seen = new Set<string>();
  for (const type of types.flatMap((type) => type.members ?? [type])) {
    if (type.text === "unknown") return UNKNOWN;
    if (type.text === "never" || seen.has(type.text)) continue;
    seen.add(type.text);
    members.push(type);
  }
  if (members.length === 0) return NEVER;
  if (members.length === 1) return members[0];
  return { text: members.map((type) => type.text).join(" | "), binding: "union", members };
}

function intersection(types: Rendered[]): Rendered {
  const parts: Rendered[] = [];
  const seen = new Set<string>();
  for (const type of types) {
    if (type.text === "never") return NEVER;
    if (type.text === "unknown" || seen.has(type.text)) continue;
    seen.add(type.text);
    parts.push(type);
  }
  if (parts.length === 0) return UNKNOWN;
  if (parts.length === 1) return parts[0];
  const text = parts.map((type) => type.binding === "union" ? `(${type.text})` : type.text)
    .join(" & ");
  return { text, binding: "intersection" };
}

function primary(text: string): Rendered {
  return { text, binding: "primary" };
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
    else if (isRecord(node) && Object.hasOwn(node, segment)) node = node[segment];
    else return undefined;
  }
  return node;
}

function describe(schema: unknown, context: Context): string {
  if (!isRecord(schema)) return "";
  if (typeof schema.description === "string") return sanitizeDoc(schema.description);
  if (typeof schema.$ref !== "string") return "";
  const target = resolvePointer(schema.$ref, context.root);
  return isRecord(target) && typeof target.description === "string"
    ? sanitizeDoc(target.description)
    : "";
}

/** Makes untrusted text safe inside a one-line `/** … *\/` comment. */
function sanitizeDoc(text: string): string {
  // Control characters (newlines included) and bidi overrides become spaces, then \s (which also
  // covers U+2028 and U+2029) collapses, so the comment stays on one line and reads as written.
  let doc = text.replace(/[\p{Cc}\u202A-\u202E\u2066-\u2069]/gu, " ").replace(/\s+/g, " ").trim();
  const chars = Array.from(doc);
  if (chars.length > MAX_DESCRIPTION) {
    doc = chars.slice(0, MAX_DESCRIPTION - 1).join("").trimEnd() + "…";
  }
  return doc.replaceAll("*/", "*\\/");
}

/** Full names go verbatim into a `//` comment unless they could end the line or hide in it. */
function lineCommentText(text: string): string {
  return /[\p{Cc}\p{Zl}\p{Zp}]/u.test(text) ? quote(text) : text;
}

/** A JSON string literal that is also a one-line TypeScript string literal. */
function quote(text: string): string {
  return JSON.stringify(text).replaceAll("\u2028", "\\u2028").replaceAll("\u2029", "\\u2029");
}

/**
 * Returns a TypeScript string literal whose value is exactly `text`: a JSON string with the line
 * separators U+2028 and U+2029 escaped as well, so it stays on one line. Lone surrogates are kept
 * as `\\uXXXX` escapes.
 *
 * @param text Any text, untrusted.
 * @returns A double-quoted literal, safe to paste into generated code.
 *
 * @example
 * ```ts
 * stringLiteral('say "hi"\n'); // '"say \\"hi\\"\\n"'
 * ```
 */
export function stringLiteral(text: string): string {
  return quote(String(text));
}

/** Options of {@linkcode docCommentLines}. */
export interface DocCommentLinesOptions {
  /** Characters kept before the text is cut with `…`. Default 4000. */
  maxChars?: number;
  /** Lines kept before the text is cut with `…`. Default 60. */
  maxLines?: number;
}

/**
 * Splits untrusted text into lines that are safe inside a multi-line `/** … *\/` comment: every
 * line break (CR, LF, U+2028, U+2029) ends a line, other control characters and bidi overrides
 * become spaces, `*\/` cannot close the comment, and the text is bounded. Blank lines at either
 * end are dropped; an empty text gives no lines.
 *
 * @param text The description, verbatim.
 * @param options Bounds.
 * @returns The lines, without the ` * ` prefix.
 *
 * @example
 * ```ts
 * docCommentLines("Reads *\/ a file\nSecond line"); // ["Reads *\\/ a file", "Second line"]
 * ```
 */
export function docCommentLines(text: string, options: DocCommentLinesOptions = {}): string[] {
  const maxChars = options.maxChars ?? 4000;
  const maxLines = options.maxLines ?? 60;
  let chars = Array.from(String(text));
  let cut = false;
  if (chars.length > maxChars) {
    chars = chars.slice(0, maxChars);
    cut = true;
  }
  let lines = chars.join("").split(/\r\n|[\r\n\u2028\u2029]/).map((line) =>
    line.replace(/[\p{Cc}\u202A-\u202E\u2066-\u2069]/gu, " ").trimEnd()
  );
  while (lines.length > 0 && lines[0].trim() === "") lines.shift();
  while (lines.length > 0 && lines.at(-1)!.trim() === "") lines.pop();
  if (lines.length > maxLines) {
    lines = lines.slice(0, maxLines);
    cut = true;
  }
  if (cut && lines.length > 0) lines[lines.length - 1] += "…";
  // "*" and "/" can also meet across the cut or an escaped pair; escaping every "*/" after the
  // lines are final leaves no way to end the comment.
  return lines.map((line) => line.replaceAll("*/", "*\\/"));
}

/**
 * Makes untrusted text safe and short for a one-line `/** … *\/` comment (at most 300
 * characters): the form {@linkcode toolSignature} uses for descriptions.
 *
 * @param text The description, verbatim.
 * @returns One line, possibly empty.
 */
export function oneLineDoc(text: string): string {
  return sanitizeDoc(String(text));
}

/**
 * Whether a tool may be called without arguments: its input schema requires no property and
 * has no combinator or reference that might.
 *
 * @param schema The tool's input schema.
 * @returns True when `args` can be omitted.
 */
export function argsAreOptional(schema: unknown): boolean {
  if (!isRecord(schema)) return true;
  if (["$ref", "anyOf", "oneOf", "allOf"].some((keyword) => schema[keyword] !== undefined)) {
    return false;
  }
  return !(Array.isArray(schema.required) &&
    schema.required.some((name) => typeof name === "string"));
}

function isSchema(value: unknown): boolean {
  return typeof value === "boolean" || isRecord(value);
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
