/**
 * Identifiers for generated wrappers: upstream server, tool and property names are untrusted
 * text, so each becomes an ASCII identifier that is valid in its language, is not a reserved
 * word there, does not shadow what the generated module itself uses, and is unique in its scope.
 *
 * @module
 */
import { PYTHON_KEYWORDS } from "../python_keywords.ts";
import { proxyName } from "../upstream/signatures.ts";

/**
 * Names a TypeScript wrapper module may not export: reserved words (ES, strict mode and
 * TypeScript's own), bindings strict code cannot declare, globals a reader would not expect to
 * be shadowed, `then` (a module namespace with a `then` export is a thenable, so
 * `await import()` would call it), and the sandbox's globals (`import *` must not hide them).
 */
export const TYPESCRIPT_RESERVED: ReadonlySet<string> = new Set([
  "break",
  "case",
  "catch",
  "class",
  "const",
  "continue",
  "debugger",
  "default",
  "delete",
  "do",
  "else",
  "enum",
  "export",
  "extends",
  "false",
  "finally",
  "for",
  "function",
  "if",
  "import",
  "in",
  "instanceof",
  "new",
  "null",
  "return",
  "super",
  "switch",
  "this",
  "throw",
  "true",
  "try",
  "typeof",
  "var",
  "void",
  "while",
  "with",
  "implements",
  "interface",
  "let",
  "package",
  "private",
  "protected",
  "public",
  "static",
  "yield",
  "await",
  "async",
  "arguments",
  "eval",
  "undefined",
  "NaN",
  "Infinity",
  "globalThis",
  "then",
  "callMCPTool",
  "discoverMCPTools",
  "searchTools",
  "getToolSchema",
  "readOutput",
  "tools",
  "ToolError",
  "ApprovalDenied",
  "llm",
  "askUser",
  "progress",
]);

/**
 * Names a generated Python function or module may not take: keywords, soft keywords, and the
 * lower-case builtins (a wrapper module whose `list` or `str` were tools could no longer use
 * them), and the globals `run_python` gives its code (`from … import *` must not hide them).
 * Generated identifiers are lower-case ASCII, so capitalised builtins cannot collide.
 */
export const PYTHON_RESERVED: ReadonlySet<string> = new Set([
  ...PYTHON_KEYWORDS,
  "call_mcp_tool",
  "discover_mcp_tools",
  "search_tools",
  "get_tool_schema",
  "read_output",
  "tools",
  "llm",
  "ask_user",
  "progress",
  "match",
  "case",
  "type",
  "_",
  "abs",
  "aiter",
  "all",
  "anext",
  "any",
  "ascii",
  "bin",
  "bool",
  "breakpoint",
  "bytearray",
  "bytes",
  "callable",
  "chr",
  "classmethod",
  "compile",
  "complex",
  "copyright",
  "credits",
  "delattr",
  "dict",
  "dir",
  "divmod",
  "enumerate",
  "eval",
  "exec",
  "exit",
  "filter",
  "float",
  "format",
  "frozenset",
  "getattr",
  "globals",
  "hasattr",
  "hash",
  "help",
  "hex",
  "id",
  "input",
  "int",
  "isinstance",
  "issubclass",
  "iter",
  "len",
  "license",
  "list",
  "locals",
  "map",
  "max",
  "memoryview",
  "min",
  "next",
  "object",
  "oct",
  "open",
  "ord",
  "pow",
  "print",
  "property",
  "quit",
  "range",
  "repr",
  "reversed",
  "round",
  "set",
  "setattr",
  "slice",
  "sorted",
  "staticmethod",
  "str",
  "sum",
  "super",
  "tuple",
  "vars",
  "zip",
]);

/** File names Windows reserves whatever the extension. */
const WINDOWS_DEVICES = /^(con|prn|aux|nul|com[0-9]|lpt[0-9])$/i;

const PYTHON_IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * Returns the snake_case form of a name, the Python counterpart of {@linkcode proxyName}: split
 * on every character that is not an ASCII letter or digit and on camelCase boundaries, lower-cased
 * and joined with `_`. A leading digit gets a `_` prefix; a name without letters or digits
 * becomes `_`.
 *
 * @param name A server, tool or property name, verbatim.
 * @returns A valid ASCII Python identifier, never empty.
 *
 * @example
 * ```ts
 * snakeName("createEntities"); // "create_entities"
 * snakeName("Get-Thing.v2"); // "get_thing_v2"
 * ```
 */
export function snakeName(name: string): string {
  const words = String(name).split(/[^A-Za-z0-9]+/).flatMap((word) =>
    word.match(/[A-Z]+[0-9]*(?![a-z])|[A-Z]?[a-z]+[0-9]*|[0-9]+[a-z]*/g) ?? []
  );
  if (words.length === 0) return "_";
  const snake = words.map((word) => word.toLowerCase()).join("_");
  return /^[0-9]/.test(snake) ? `_${snake}` : snake;
}

/**
 * Whether a name can be used verbatim as a Python identifier (ASCII only: Python normalises
 * non-ASCII identifiers with NFKC, so two different names could become one).
 *
 * @param name The name.
 * @returns True for an ASCII identifier.
 */
export function isPythonIdentifier(name: string): boolean {
  return PYTHON_IDENTIFIER.test(name);
}

/** Options of {@linkcode assignNames}. */
export interface AssignNamesOptions {
  /** Maps a raw name to its preferred identifier. */
  base: (name: string) => string;
  /** Identifiers that get a `_` appended before anything else. */
  reserved: ReadonlySet<string>;
  /** Identifiers already taken in the scope (left untouched, never assigned). */
  taken?: Iterable<string>;
  /** Identifiers to keep for raw names that had them before (stable across runs). */
  previous?: ReadonlyMap<string, string>;
  /** Compare identifiers without case (file names on case-insensitive file systems). */
  caseInsensitive?: boolean;
}

/**
 * Gives every raw name its own identifier. Names are processed in sorted order, so the result
 * does not depend on the order a server listed them in; when two names map to the same
 * identifier (`a-b`, `a_b`), the first keeps it and later ones get `_2`, `_3`, …. A reserved
 * identifier gets a trailing `_` (`delete` → `delete_`).
 *
 * @param names The raw names (duplicates are assigned once).
 * @param options How to form and check identifiers.
 * @returns Raw name → identifier.
 *
 * @example
 * ```ts
 * assignNames(["a-b", "a_b", "delete"], { base: proxyName, reserved: TYPESCRIPT_RESERVED });
 * // Map { "a-b" => "aB", "a_b" => "aB_2", "delete" => "delete_" }
 * ```
 */
export function assignNames(
  names: Iterable<string>,
  options: AssignNamesOptions,
): Map<string, string> {
  const key = (id: string) => options.caseInsensitive ? id.toLowerCase() : id;
  const used = new Set([...(options.taken ?? [])].map(key));
  const out = new Map<string, string>();
  const sorted = [...new Set(names)].sort((a, b) => a < b ? -1 : a > b ? 1 : 0);
  // Identifiers from an earlier run are claimed first, so that a new name cannot take one.
  for (const name of sorted) {
    const kept = options.previous?.get(name);
    if (kept === undefined || used.has(key(kept)) || options.reserved.has(kept)) continue;
    if (kept !== options.base(name) && !kept.startsWith(reservedBase(name, options))) continue;
    used.add(key(kept));
    out.set(name, kept);
  }
  for (const name of sorted) {
    if (out.has(name)) continue;
    const base = reservedBase(name, options);
    let id = base;
    for (let n = 2; used.has(key(id)); n++) id = `${base}_${n}`;
    used.add(key(id));
    out.set(name, id);
  }
  return out;
}

function reservedBase(name: string, options: AssignNamesOptions): string {
  const base = options.base(name);
  return options.reserved.has(base) ? `${base}_` : base;
}

/**
 * The TypeScript function name of each tool: its {@linkcode proxyName}, made unique.
 *
 * @param tools Tool names, verbatim.
 * @returns Tool name → exported function name.
 */
export function typescriptFunctionNames(tools: Iterable<string>): Map<string, string> {
  return assignNames(tools, { base: proxyName, reserved: TYPESCRIPT_RESERVED });
}

/**
 * The Python function name of each tool: its {@linkcode snakeName}, made unique.
 *
 * @param tools Tool names, verbatim.
 * @returns Tool name → function name.
 */
export function pythonFunctionNames(tools: Iterable<string>): Map<string, string> {
  return assignNames(tools, { base: snakeName, reserved: PYTHON_RESERVED });
}

/**
 * The module name of each server, used for both the TypeScript file (`<name>.ts`) and the Python
 * module (`mcp_wrappers.<name>`): snake_case, unique without regard to case, never a Python
 * keyword or builtin, never a Windows device name.
 *
 * @param servers Server names, verbatim.
 * @param previous Module names from an earlier run, kept when still valid.
 * @returns Server name → module name.
 */
export function moduleNames(
  servers: Iterable<string>,
  previous?: ReadonlyMap<string, string>,
): Map<string, string> {
  return assignNames(servers, {
    base: (name) => {
      const snake = snakeName(name);
      return WINDOWS_DEVICES.test(snake) ? `${snake}_` : snake;
    },
    reserved: PYTHON_RESERVED,
    previous,
    caseInsensitive: true,
  });
}
