/**
 * A skill's `SKILL.md`: the front matter written with every scalar JSON-quoted (so that no text a
 * model chose can start a key, end the block or become a YAML type), and read back by a strict
 * parser that accepts exactly that shape. The body is generated from the record: it tells a host's
 * model how to run the skill through `run_typescript` or `run_python`.
 *
 * The front matter is valid YAML for any Agent Skills host: `name`, `description`, and a
 * `metadata` map of strings (the language, the version, the input schema as JSON text), the only
 * extension the Agent Skills specification allows.
 *
 * @module
 */
import { CodeExecutorError } from "../errors.ts";
import { isPlainObject } from "../_util.ts";

/** What a `SKILL.md` front matter holds. */
export interface SkillFrontMatter {
  /** The skill's name, equal to its directory's name. */
  name: string;
  /** What it does and when to use it. */
  description: string;
  /** `typescript` or `python`. */
  language: "typescript" | "python";
  /** 1, 2, … */
  version: number;
  /** The input JSON Schema. */
  inputSchema: Record<string, unknown>;
}

const META_LANGUAGE = "code-executor-language";
const META_VERSION = "code-executor-version";
const META_SCHEMA = "code-executor-input-schema";
const META_KEYS = [META_LANGUAGE, META_VERSION, META_SCHEMA];

/**
 * JSON-quotes a string, and also escapes what YAML or a reader could take for a line break or an
 * invisible mark (C1 controls, U+2028, U+2029, the byte order mark), which JSON leaves raw.
 *
 * @param text Any text.
 * @returns A double-quoted scalar valid in JSON and YAML, on one line.
 */
export function quoteScalar(text: string): string {
  return JSON.stringify(text).replace(
    /[\u007f-\u009f\u2028\u2029\ufeff]/g,
    (char) => `\\u${char.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}

/**
 * Writes a `SKILL.md`: the front matter, then a body that tells a model how to run the skill.
 *
 * @param meta The skill's front matter.
 * @returns The file's text.
 */
export function renderSkillMarkdown(meta: SkillFrontMatter): string {
  const lines = [
    "---",
    `name: ${quoteScalar(meta.name)}`,
    `description: ${quoteScalar(meta.description)}`,
    "metadata:",
    `  ${META_LANGUAGE}: ${quoteScalar(meta.language)}`,
    `  ${META_VERSION}: ${quoteScalar(String(meta.version))}`,
    `  ${META_SCHEMA}: ${quoteScalar(JSON.stringify(meta.inputSchema))}`,
    "---",
    "",
  ];
  return lines.join("\n") + renderBody(meta);
}

function renderBody(meta: SkillFrontMatter): string {
  const example = exampleArgs(meta.inputSchema);
  const tool = meta.language === "python" ? "run_python" : "run_typescript";
  const file = meta.language === "python" ? "skill.py" : "skill.ts";
  const tsCall = `return await skills.call(${JSON.stringify(meta.name)}, ${example});`;
  const pyCall = `await skills.call(${JSON.stringify(meta.name)}, ${pythonLiteral(example)})`;
  return [
    `# ${meta.name}`,
    "",
    "A program saved with Code Executor (version " + meta.version + ", " + meta.language + ").",
    "The description is in the front matter above. Do not copy the program into your answer:",
    `run it through the Code Executor MCP server's \`run_typescript\` or \`run_python\` tool,`,
    "which validates the arguments against the input schema and runs it under your policy.",
    "",
    "From `run_typescript`:",
    "",
    "```ts",
    tsCall,
    "```",
    "",
    "From `run_python`:",
    "",
    "```python",
    pyCall,
    "```",
    "",
    `\`skills.call("${meta.name}@${meta.version}", args)\` runs this version even after a newer one`,
    `is saved. The program itself is \`${file}\` (it runs as a \`${tool}\` body with \`args\` in`,
    "scope).",
    "",
    "## Input schema",
    "",
    "```json",
    JSON.stringify(meta.inputSchema, null, 2),
    "```",
    "",
  ].join("\n");
}

function exampleArgs(schema: Record<string, unknown>): string {
  const properties = isPlainObject(schema.properties) ? schema.properties : {};
  const required = Array.isArray(schema.required) ? schema.required : Object.keys(properties);
  const parts = Object.keys(properties).filter((key) => required.includes(key)).slice(0, 8).map(
    (key) => `${JSON.stringify(key)}: ${exampleValue(properties[key])}`,
  );
  return parts.length === 0 ? "{}" : `{ ${parts.join(", ")} }`;
}

function exampleValue(schema: unknown): string {
  const type = isPlainObject(schema) ? schema.type : undefined;
  switch (type) {
    case "string":
      return '"…"';
    case "number":
    case "integer":
      return "1";
    case "boolean":
      return "true";
    case "array":
      return "[]";
    default:
      return "{}";
  }
}

function pythonLiteral(jsObject: string): string {
  return jsObject.replace(/\btrue\b/g, "True").replace(/\bfalse\b/g, "False");
}

function invalid(where: string, detail: string): CodeExecutorError {
  return new CodeExecutorError(
    "SkillInvalid",
    `Cannot read ${where}: ${detail} (the front matter holds name, description and a metadata ` +
      "map, every value a double-quoted JSON string; save the skill again to rewrite it)",
  );
}

function parseQuoted(raw: string, where: string, line: number): string {
  if (!raw.startsWith('"') || !raw.endsWith('"') || raw.length < 2) {
    throw invalid(where, `line ${line} must hold a double-quoted JSON string`);
  }
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch {
    throw invalid(where, `line ${line} is not a valid JSON string`);
  }
  if (typeof value !== "string") throw invalid(where, `line ${line} is not a string`);
  return value;
}

/**
 * Reads the front matter of a `SKILL.md` written by {@linkcode renderSkillMarkdown}: exactly the
 * keys it writes, once each, in its shape. Anything else (another key, a repeated key, a plain or
 * single-quoted scalar, a YAML tag or anchor, an unclosed block) is refused.
 *
 * @param text The file's text.
 * @param where The file, for the error message.
 * @returns The front matter.
 * @throws {CodeExecutorError} `SkillInvalid`, naming the line.
 */
export function parseSkillMarkdown(text: string, where: string): SkillFrontMatter {
  const lines = text.split("\n");
  if (lines[0] !== "---") throw invalid(where, 'the first line must be "---"');
  const close = lines.indexOf("---", 1);
  if (close < 0) throw invalid(where, 'the front matter has no closing "---" line');
  const top = new Map<string, string>();
  const meta = new Map<string, string>();
  let inMetadata = false;
  for (let index = 1; index < close; index++) {
    const line = lines[index];
    const number = index + 1;
    if (line === "metadata:") {
      if (inMetadata || meta.size > 0) throw invalid(where, `line ${number} repeats metadata`);
      inMetadata = true;
      continue;
    }
    const match = /^( {2})?([a-z][a-z-]*): (.*)$/.exec(line);
    if (match === null) throw invalid(where, `line ${number} is not "key: \\"value\\""`);
    const [, indent, key, raw] = match;
    const nested = indent !== undefined;
    const allowed = nested ? META_KEYS : ["name", "description"];
    if (!allowed.includes(key)) throw invalid(where, `line ${number} has an unknown key "${key}"`);
    if (nested !== inMetadata || (!nested && top.size === 2)) {
      throw invalid(where, `line ${number} is out of place`);
    }
    const target = nested ? meta : top;
    if (target.has(key)) throw invalid(where, `line ${number} repeats "${key}"`);
    target.set(key, parseQuoted(raw, where, number));
  }
  const name = top.get("name");
  const description = top.get("description");
  if (name === undefined || description === undefined) {
    throw invalid(where, "name and description are required");
  }
  const language = meta.get(META_LANGUAGE);
  if (language !== "typescript" && language !== "python") {
    throw invalid(where, `metadata ${META_LANGUAGE} must be "typescript" or "python"`);
  }
  const versionText = meta.get(META_VERSION) ?? "";
  if (!/^[1-9]\d{0,8}$/.test(versionText)) {
    throw invalid(where, `metadata ${META_VERSION} must be a positive integer`);
  }
  let inputSchema: unknown;
  try {
    inputSchema = JSON.parse(meta.get(META_SCHEMA) ?? "");
  } catch {
    throw invalid(where, `metadata ${META_SCHEMA} must be JSON`);
  }
  if (!isPlainObject(inputSchema)) {
    throw invalid(where, `metadata ${META_SCHEMA} must be a JSON object`);
  }
  return { name, description, language, version: Number(versionText), inputSchema };
}
