/**
 * Python wrappers: one module per upstream server with one typed async function per tool, each
 * calling `call_mcp_tool`, the function `run_python` gives the code it runs.
 *
 * The module finds `call_mcp_tool` at call time in the sandbox's API module (`_sandbox` in
 * `sys.modules`), so it needs no import that user code could not make and has no side effect
 * when imported. Everything that comes from the server is untrusted: identifiers come from
 * `names.ts`, and every piece of text (descriptions, names, enum values) is written as a
 * Python string literal with every character that could end it, or the line, escaped.
 *
 * @module
 */
import { PYTHON_KEYWORDS } from "../python_keywords.ts";
import { isPlainObject } from "../_util.ts";
import { resolvePointer } from "../schema_limits.ts";
import { fullToolName } from "../upstream/signatures.ts";
import { assignNames, isPythonIdentifier, pythonFunctionNames, snakeName } from "./names.ts";
import type { WrapperTool } from "./typescript.ts";

/** The Python package the generated modules live in (a namespace package). */
export const PYTHON_PACKAGE = "mcp_wrappers";

/** Options of {@linkcode generatePython}. */
export interface GeneratePythonOptions {
  /** The module's name inside {@linkcode PYTHON_PACKAGE}, for the usage line of its docstring. */
  module?: string;
  /** A line saying where the file came from (e.g. the schema hash). */
  stamp?: string;
}

/** Names the generated module defines for itself; parameters must not shadow them. */
const INTERNAL_NAMES = new Set(["_call_tool", "_sys", "Any", "Literal", "kwargs"]);
const MAX_DEPTH = 6;
const MAX_NODES = 500;
const MAX_ENUM = 50;
const MAX_PARAMETERS = 100;
const MAX_DESCRIPTION = 4000;
const MAX_PARAMETER_DOC = 300;

/**
 * Returns a Python string literal (double-quoted) whose value is exactly `text`. Backslashes,
 * quotes and every control, line-separating, bidi-override or surrogate code point are escaped,
 * so the literal is one line of printable text that cannot end early.
 *
 * @param text Any text, untrusted.
 * @returns The literal.
 *
 * @example
 * ```ts
 * pythonString('a"""b\n'); // '"a\\"\\"\\"b\\n"'
 * ```
 */
export function pythonString(text: string): string {
  return `"${escapePython(String(text), false)}"`;
}

/**
 * Returns the body of a `"""…"""` docstring whose value is `text`: like
 * {@linkcode pythonString}, but line feeds stay line breaks and continuation lines are indented.
 *
 * @param text Any text, untrusted.
 * @param indent The indentation of the continuation lines.
 * @returns The docstring, quotes included.
 */
export function pythonDocstring(text: string, indent: string): string {
  const body = escapePython(String(text), true).split("\n").map((line, index) =>
    index === 0 || line === "" ? line : indent + line
  ).join("\n");
  return `"""${body}${text.includes("\n") ? `\n${indent}` : ""}"""`;
}

function escapePython(text: string, multiline: boolean): string {
  let out = "";
  const chars = Array.from(text);
  for (const [index, char] of chars.entries()) {
    const code = char.codePointAt(0)!;
    if (char === "\\") out += "\\\\";
    else if (char === '"') {
      // In a docstring a lone quote may stay: a quote followed by another one, or by the closing
      // quotes, is escaped, so no two unescaped quotes are ever adjacent.
      out += multiline && index + 1 < chars.length && chars[index + 1] !== '"' ? '"' : '\\"';
    } else if (char === "\n") out += multiline ? "\n" : "\\n";
    else if (char === "\r") out += "\\r";
    else if (char === "\t") out += "\\t";
    else if (code < 0x20 || (code >= 0x7f && code < 0xa0)) out += `\\x${hex(code, 2)}`;
    else if (
      (code >= 0xd800 && code <= 0xdfff) || code === 0x2028 || code === 0x2029 ||
      code === 0xfeff || code === 0x061c || code === 0x200e || code === 0x200f ||
      (code >= 0x202a && code <= 0x202e) || (code >= 0x2066 && code <= 0x2069)
    ) out += `\\u${hex(code, 4)}`;
    else out += char;
  }
  return out;
}

function hex(code: number, width: number): string {
  return code.toString(16).padStart(width, "0");
}

/**
 * Renders a JSON Schema as a Python type hint: `str`, `int`, `float`, `bool`, `None`,
 * `list[T]`, `dict[str, T]`, `Literal[…]` and unions with `|`; local `$ref`s are followed (a
 * recursive one becomes `Any`), and anything else, or anything too deep, is `Any`.
 *
 * @param schema A JSON Schema; any value is accepted.
 * @returns A type hint that evaluates under Python 3.10 and later.
 *
 * @example
 * ```ts
 * schemaToPythonType({ type: "array", items: { enum: ["a", "b"] } }); // 'list[Literal["a", "b"]]'
 * ```
 */
export function schemaToPythonType(schema: unknown): string {
  const context = { root: schema, nodes: 0, expanding: new Set<unknown>([schema]) };
  try {
    return union(renderPython(schema, context, 0));
  } catch {
    return "Any";
  }
}

interface PythonContext {
  root: unknown;
  nodes: number;
  expanding: Set<unknown>;
}

/** Returns the union's members; `["Any"]` absorbs everything. */
function renderPython(schema: unknown, context: PythonContext, depth: number): string[] {
  if (!isPlainObject(schema) || depth > MAX_DEPTH || ++context.nodes > MAX_NODES) return ["Any"];
  let members: string[];
  if (typeof schema.$ref === "string") {
    const target = resolvePointer(schema.$ref, context.root);
    if (target === undefined || context.expanding.has(target)) return ["Any"];
    context.expanding.add(target);
    try {
      members = renderPython(target, context, depth + 1);
    } finally {
      context.expanding.delete(target);
    }
  } else if (Object.hasOwn(schema, "const")) {
    members = [literal(schema.const)];
  } else if (Array.isArray(schema.enum)) {
    members = schema.enum.length <= MAX_ENUM ? schema.enum.map(literal) : ["Any"];
  } else if (Array.isArray(schema.anyOf) || Array.isArray(schema.oneOf)) {
    const branches = [
      ...(Array.isArray(schema.anyOf) ? schema.anyOf : []),
      ...(Array.isArray(schema.oneOf) ? schema.oneOf : []),
    ];
    members = branches.flatMap((branch) => renderPython(branch, context, depth + 1));
  } else if (Array.isArray(schema.allOf) && schema.allOf.length === 1) {
    members = renderPython(schema.allOf[0], context, depth + 1);
  } else {
    const types = typeof schema.type === "string"
      ? [schema.type]
      : Array.isArray(schema.type)
      ? schema.type
      : isPlainObject(schema.properties)
      ? ["object"]
      : isPlainObject(schema.items)
      ? ["array"]
      : [];
    members = types.length === 0 ? ["Any"] : types.map((type) => {
      switch (type) {
        case "string":
          return "str";
        case "integer":
          return "int";
        case "number":
          return "float";
        case "boolean":
          return "bool";
        case "null":
          return "None";
        case "array":
          return `list[${
            union(
              isPlainObject(schema.items)
                ? renderPython(schema.items, context, depth + 1)
                : ["Any"],
            )
          }]`;
        case "object": {
          const values =
            !isPlainObject(schema.properties) && isPlainObject(schema.additionalProperties)
              ? union(renderPython(schema.additionalProperties, context, depth + 1))
              : "Any";
          return `dict[str, ${values}]`;
        }
        default:
          return "Any";
      }
    });
  }
  if (schema.nullable === true) members = [...members, "None"];
  return members;
}

function literal(value: unknown): string {
  if (value === null) return "None";
  if (typeof value === "string") return `Literal[${pythonString(value)}]`;
  if (typeof value === "boolean") return `Literal[${value ? "True" : "False"}]`;
  if (typeof value === "number" && Number.isInteger(value) && Number.isSafeInteger(value)) {
    return `Literal[${value}]`;
  }
  if (typeof value === "number") return "float";
  return "Any";
}

/** Joins members, merging the `Literal`s and dropping duplicates. */
function union(members: string[]): string {
  if (members.length === 0 || members.includes("Any")) return "Any";
  const literals: string[] = [];
  const others: string[] = [];
  for (const member of members) {
    const inner = /^Literal\[(.*)\]$/s.exec(member);
    if (inner) {
      if (!literals.includes(inner[1])) literals.push(inner[1]);
    } else if (!others.includes(member)) others.push(member);
  }
  const parts = literals.length ? [`Literal[${literals.join(", ")}]`, ...others] : others;
  return parts.join(" | ");
}

/**
 * Returns the function name of each tool in a generated Python module (what
 * {@linkcode generatePython} uses).
 *
 * @param tools The server's tools.
 * @returns Tool name → function name.
 */
export function pythonExports(tools: readonly WrapperTool[]): Map<string, string> {
  return pythonFunctionNames(tools.map((tool) => String(tool.name)));
}

/**
 * Generates the Python wrapper module of one upstream server.
 *
 * @param server The server's name, verbatim.
 * @param tools Its tools, as listed.
 * @param options The module's name and a provenance line for the docstring.
 * @returns The module's source text.
 *
 * @example
 * ```ts
 * const source = generatePython("memory", tools, { module: "memory" });
 * // … async def create_entities(*, entities: list[dict[str, Any]]) -> Any: …
 * ```
 */
export function generatePython(
  server: string,
  tools: readonly WrapperTool[],
  options: GeneratePythonOptions = {},
): string {
  const names = pythonExports(tools);
  const unique = new Map<string, WrapperTool>();
  for (const tool of tools) {
    if (!unique.has(String(tool.name))) unique.set(String(tool.name), tool);
  }
  const sorted = [...unique.values()].sort((a, b) =>
    compare(names.get(String(a.name))!, names.get(String(b.name))!)
  );
  const module = options.module ?? snakeName(server);
  const usage = sorted.length > 0
    ? `\`\`from ${PYTHON_PACKAGE} import ${module}\`\`, then \`\`await ${module}.${
      names.get(String(sorted[0].name))
    }(...)\`\`.`
    : `\`\`from ${PYTHON_PACKAGE} import ${module}\`\`.`;
  const header = [
    `Typed wrappers for the tools of the MCP server ${pythonString(String(server))}.`,
    "",
    "Generated by code-executor wrappers; do not edit: the next run rewrites this file when the",
    "server's tools change. In code run by run_python (with this module's wheel in",
    `python.wheelDirs): ${usage}`,
    ...(options.stamp ? ["", options.stamp] : []),
  ].join("\n");
  const out = [
    pythonDocstring(header, ""),
    "",
    "import sys as _sys",
    "from typing import Any, Literal",
    "",
    `__all__ = [${sorted.map((tool) => pythonString(names.get(String(tool.name))!)).join(", ")}]`,
    "",
    "",
    "async def _call_tool(name, args, optional=()):",
    '    """Calls a tool through run_python\'s call_mcp_tool, leaving out optional None values."""',
    "    for key in optional:",
    "        if args.get(key) is None:",
    "            args.pop(key, None)",
    '    call = getattr(_sys.modules.get("_sandbox"), "call_mcp_tool", None)',
    "    if call is None:",
    "        raise RuntimeError(",
    '            "Cannot call " + name + ": call_mcp_tool is missing; "',
    '            "use this module from code run by run_python"',
    "        )",
    "    return await call(name, args)",
  ];
  for (const tool of sorted) {
    out.push("", "", ...toolFunction(String(server), tool, names.get(String(tool.name))!));
  }
  return out.join("\n") + "\n";
}

interface Parameter {
  property: string;
  id: string;
  type: string;
  required: boolean;
  doc: string;
}

function parameters(schema: Record<string, unknown>): { params: Parameter[]; open: boolean } {
  const properties = isPlainObject(schema.properties) ? schema.properties : {};
  const all = Object.keys(properties);
  const keys = all.slice(0, MAX_PARAMETERS);
  const required = new Set(
    Array.isArray(schema.required) ? schema.required.filter((n) => typeof n === "string") : [],
  );
  const reserved = new Set([...PYTHON_KEYWORDS, ...INTERNAL_NAMES]);
  // Names that are identifiers already keep them; the others are fitted around those.
  const verbatim = assignNames(
    keys.filter((key) => isPythonIdentifier(key) && !reserved.has(key)),
    { base: (key) => key, reserved },
  );
  const fitted = assignNames(keys.filter((key) => !verbatim.has(key)), {
    base: snakeName,
    reserved,
    taken: verbatim.values(),
  });
  const params = keys.map((property) => {
    const value = properties[property];
    const description = isPlainObject(value) && typeof value.description === "string"
      ? value.description
      : "";
    return {
      property,
      id: verbatim.get(property) ?? fitted.get(property)!,
      type: schemaToPythonType(value === true || value === undefined ? {} : value),
      required: required.has(property),
      doc: oneLine(description, MAX_PARAMETER_DOC),
    };
  });
  return { params, open: all.length > keys.length };
}

function toolFunction(server: string, tool: WrapperTool, id: string): string[] {
  const schema = isPlainObject(tool.inputSchema) ? tool.inputSchema : {};
  const { params, open } = parameters(schema);
  const full = fullToolName(server, String(tool.name));
  const result = tool.outputSchema === undefined ? "Any" : schemaToPythonType(tool.outputSchema);
  // Without named properties (a bare object, or a union of shapes) the arguments pass through.
  const passThrough = params.length === 0 && schema.additionalProperties !== false;
  const signature = [
    ...(params.length ? ["*"] : []),
    ...params.filter((p) => p.required).map((p) => `${p.id}: ${p.type}`),
    ...params.filter((p) => !p.required).map((p) =>
      `${p.id}: ${
        p.type === "Any" || p.type.split(" | ").includes("None") ? p.type : `${p.type} | None`
      } = None`
    ),
    ...(passThrough || open ? ["**kwargs: Any"] : []),
  ];
  const description = typeof tool.description === "string"
    ? truncate(tool.description.replace(/^\s+|\s+$/g, ""), MAX_DESCRIPTION)
    : "";
  const doc = [
    ...(description ? [description, ""] : []),
    `Calls ${/^[\x20-\x7e]*$/.test(full) ? full : JSON.stringify(full)}.`,
    ...(params.length
      ? [
        "",
        "Args:",
        ...params.map((p) =>
          `    ${p.id}: ${p.doc || "(no description)"}${
            p.property === p.id ? "" : ` (sent as ${JSON.stringify(p.property)})`
          }`
        ),
      ]
      : []),
  ].join("\n");
  const lines = [`async def ${id}(${signature.join(", ")}) -> ${result}:`];
  lines.push(`    ${pythonDocstring(doc, "    ")}`);
  const entries = params.map((p) => `${pythonString(p.property)}: ${p.id}`);
  const args = passThrough || open
    ? `{${[...entries, "**kwargs"].join(", ")}}`
    : `{${entries.join(", ")}}`;
  const optional = params.filter((p) => !p.required).map((p) => pythonString(p.property));
  const call = `_call_tool(${pythonString(full)}, ${args}${
    optional.length ? `, (${optional.join(", ")}${optional.length === 1 ? "," : ""})` : ""
  })`;
  lines.push(`    return await ${call}`);
  return lines;
}

function oneLine(text: string, max: number): string {
  return truncate(text.replace(/\s+/g, " ").trim(), max);
}

function truncate(text: string, max: number): string {
  const chars = Array.from(text);
  return chars.length <= max ? text : chars.slice(0, max - 1).join("").trimEnd() + "…";
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
