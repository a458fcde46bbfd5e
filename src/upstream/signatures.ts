/**
 * Compact TypeScript renderings of upstream MCP tools, for `search_tools` and generated wrappers:
 * the names a tool goes by (`mcp__<server>__<tool>`, `tools.<server>.<tool>`) and its one-call
 * signature. Everything in a tool comes from its server and is untrusted: these functions accept
 * malformed tools without throwing; types come from `schema_to_type.ts`, and names and
 * descriptions go into the text only through `untrusted_text.ts`.
 *
 * @module
 */
import { isPlainObject } from "../_util.ts";
import { schemaToType } from "./schema_to_type.ts";
import { lineCommentText, oneLineDoc } from "./untrusted_text.ts";

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
  /** The server's `readOnlyHint` / `destructiveHint`, which approvals read. */
  annotations?: { readOnlyHint?: boolean; destructiveHint?: boolean };
}

/** Options for {@linkcode toolSignature}. */
export interface ToolSignatureOptions {
  /** Render the tool's and its properties' descriptions as doc comments. Default true. */
  withDoc?: boolean;
  /** Nesting of objects and arrays rendered before falling back to `unknown`. Default 6. */
  maxDepth?: number;
}

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
  const doc = withDoc && typeof tool.description === "string" ? oneLineDoc(tool.description) : "";
  return doc === "" ? signature : `/** ${doc} */\n${signature}`;
}

/**
 * Whether a tool may be called without arguments: its input schema requires no property and
 * has no combinator or reference that might.
 *
 * @param schema The tool's input schema.
 * @returns True when `args` can be omitted.
 */
export function argsAreOptional(schema: unknown): boolean {
  if (!isPlainObject(schema)) return true;
  if (["$ref", "anyOf", "oneOf", "allOf"].some((keyword) => schema[keyword] !== undefined)) {
    return false;
  }
  return !(Array.isArray(schema.required) &&
    schema.required.some((name) => typeof name === "string"));
}

/** A saved skill, as far as its signature needs (structurally a `SkillRecord`). */
export interface SkillInfo {
  /** Its name: lowercase words joined by hyphens. */
  name: string;
  /** Its version. */
  version: number;
  /** What it does. */
  description: string;
  /** JSON Schema of its arguments. */
  inputSchema: Record<string, unknown>;
}

/**
 * Returns the name search results give a skill: `skill:<name>@<version>`.
 *
 * @param skill The skill.
 * @returns The name.
 */
export function skillSearchName(skill: Pick<SkillInfo, "name" | "version">): string {
  return `skill:${skill.name}@${skill.version}`;
}

/**
 * Renders a saved skill as a call on the in-sandbox `skills` object (`skills.page_issues` for
 * `page-issues`; Python takes the same name with `**args`), with its search name in a comment.
 *
 * @param skill The skill.
 * @param options Whether to render descriptions (default true) and the depth limit.
 * @returns One signature, on one or more lines.
 *
 * @example
 * ```ts
 * skillSignature({ name: "add-numbers", version: 2, description: "Adds", inputSchema: { type: "object" } });
 * // /** Adds *\/
 * // skills.add_numbers(args?: { [key: string]: unknown }): Promise<unknown>  // skill:add-numbers@2
 * ```
 */
export function skillSignature(skill: SkillInfo, options: ToolSignatureOptions = {}): string {
  const withDoc = options.withDoc ?? true;
  const args = schemaToType(skill.inputSchema, { withDoc, maxDepth: options.maxDepth });
  const optional = argsAreOptional(skill.inputSchema) ? "?" : "";
  const property = String(skill.name).replaceAll("-", "_");
  const signature = `skills.${property}(args${optional}: ${args}): Promise<unknown>  // ${
    lineCommentText(skillSearchName(skill))
  }`;
  const doc = withDoc ? oneLineDoc(String(skill.description)) : "";
  return doc === "" ? signature : `/** ${doc} */\n${signature}`;
}
