/**
 * Writes the two reference pages that come from the code, so that each fact is written once:
 * `docs/settings.md` from the settings schema (`z.toJSONSchema(SettingsSchema)`, whose
 * descriptions are the keys' meanings, and `ENV_OVERRIDES`) and `docs/errors.md` from
 * `ERROR_TYPES`. A page's prose is written by hand above its marker line; everything below the
 * marker is generated, then formatted with `deno fmt`.
 *
 * ```sh
 * deno task docs           # writes both pages
 * deno task docs --check   # exits 1, naming the page, when one is not what this script makes
 * ```
 *
 * `tests/settings_test.ts` and `tests/errors_test.ts` run the same check.
 *
 * @module
 */
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { z } from "zod";
import { ENV_OVERRIDES, SettingsSchema } from "../src/config/settings.ts";
import { ERROR_TYPES } from "../src/errors.ts";
import { DEFAULT_PYTHON_IMPORTS } from "../src/exec/python/child.ts";

/** The repository root. */
const ROOT = fileURLToPath(new URL("..", import.meta.url));

/** A page whose part below {@linkcode GeneratedPage.marker} is made from the code. */
export interface GeneratedPage {
  /** The page, relative to the repository root. */
  path: string;
  /** Where the generated part comes from, for the stale page's message. */
  source: string;
  /** The line that ends the hand-written part; the generated part follows it. */
  marker: string;
  /** Renders the generated part, as Markdown before formatting. */
  render(): string;
}

/** The subset of JSON Schema that `z.toJSONSchema` gives for the settings. */
interface SchemaNode {
  type?: string;
  description?: string;
  default?: unknown;
  properties?: Record<string, SchemaNode>;
  required?: string[];
  enum?: unknown[];
  const?: unknown;
  anyOf?: SchemaNode[];
  items?: SchemaNode;
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  format?: string;
}

/** The task page that explains each top-level group of settings. */
const GROUP_PAGES: Readonly<Record<string, string>> = {
  limits: "tools.md",
  outputs: "tools.md#big-results-are-kept-not-lost",
  sandbox: "tools.md",
  permissions: "tools.md",
  tools: "tools.md",
  approvals: "approvals.md",
  python: "python.md",
  audit: "commands.md#the-audit-log",
  sampling: "sampling.md",
  http: "http.md",
  privacy: "privacy.md",
  skills: "skills.md",
  allowedProjects: "tools.md",
};

/** Defaults that the schema leaves unset because the code fills them in. */
const CODE_DEFAULTS: Readonly<Record<string, unknown>> = {
  "python.allowedImports": DEFAULT_PYTHON_IMPORTS,
};

/** What a leaf's JSON Schema allows, in words. */
function typeText(node: SchemaNode): string {
  if (node.anyOf) return node.anyOf.map(typeText).join(" or ");
  if (node.const !== undefined) return `\`${JSON.stringify(node.const)}\``;
  if (node.enum) return `one of ${node.enum.map((value) => `\`${value}\``).join(", ")}`;
  if (node.type === "array") {
    const items = node.items ?? {};
    return items.enum
      ? `list of ${items.enum.map((value) => `\`${value}\``).join(", ")}`
      : `list of ${typeText(items)}s`;
  }
  if (node.type === "integer" || node.type === "number") {
    const low = node.minimum ??
      (node.exclusiveMinimum === undefined ? undefined : node.exclusiveMinimum + 1);
    const high = node.maximum === Number.MAX_SAFE_INTEGER ? undefined : node.maximum;
    if (low !== undefined && high !== undefined) return `${node.type} ${low} to ${high}`;
    if (low !== undefined) return `${node.type} ≥ ${low}`;
    return node.type;
  }
  if (node.type === "string" && node.format === "uri") return "URL";
  return node.type ?? "value";
}

/** A readable size or duration after a default that is one, from the key's unit suffix. */
function unitHint(key: string, value: unknown): string {
  if (typeof value !== "number" || value === 0) return "";
  if (/Bytes$/.test(key) && value >= 1024 && value % 1024 === 0) {
    return value % (1024 * 1024) === 0 ? ` (${value / 1024 / 1024} MiB)` : ` (${value / 1024} KiB)`;
  }
  if (/Ms$/.test(key) && value >= 1000 && value % 1000 === 0) {
    const seconds = value / 1000;
    if (seconds % 3600 === 0) return ` (${seconds / 3600} h)`;
    if (seconds % 60 === 0) return ` (${seconds / 60} min)`;
    return ` (${seconds} s)`;
  }
  return "";
}

/** A default as code; a long list as its items, so that the line can wrap. */
function defaultText(value: unknown): string {
  const json = JSON.stringify(value);
  if (!Array.isArray(value) || json.length <= 40) return `\`${json}\``;
  return value.map((item) => `\`${item}\``).join(", ");
}

function sentence(text: string): string {
  const trimmed = text.trim();
  return /[.!?]$/.test(trimmed) ? trimmed : `${trimmed}.`;
}

/** Environment variable names per settings key, from `ENV_OVERRIDES`. */
function envNames(): Map<string, string[]> {
  const names = new Map<string, string[]>();
  for (const [name, path] of ENV_OVERRIDES) {
    const key = path.join(".");
    names.set(key, [...names.get(key) ?? [], name]);
  }
  return names;
}

/** One key's entry: its name, type, default and variable, then its meaning on its own line. */
function settingEntry(
  key: string,
  node: SchemaNode,
  facts: { required: boolean; env: string[] },
): string {
  const parts = [node.properties ? "object" : typeText(node)];
  if (facts.required) parts.push("required");
  const fallback = CODE_DEFAULTS[key] ?? node.default;
  if (fallback !== undefined && !node.properties) {
    parts.push(`default ${defaultText(fallback)}${unitHint(key, fallback)}`);
  }
  if (facts.env.length > 0) parts.push(`env ${facts.env.map((name) => `\`${name}\``).join(", ")}`);
  const meaning = node.description ? sentence(node.description) : "";
  return `- **\`${key}\`**: ${parts.join(", ")}\\\n  ${meaning}\n`;
}

/** The settings reference: one section per top-level key, one entry per key beneath it. */
export function settingsReference(): string {
  const schema = z.toJSONSchema(SettingsSchema, { io: "input" }) as SchemaNode;
  const env = envNames();
  const out: string[] = [];
  const walk = (node: SchemaNode, path: string[], required: boolean) => {
    const key = path.join(".");
    if (path.length > 1 || !node.properties) {
      out.push(settingEntry(key, node, { required, env: env.get(key) ?? [] }));
    }
    for (const [child, childNode] of Object.entries(node.properties ?? {})) {
      walk(childNode, [...path, child], node.required?.includes(child) ?? false);
    }
  };
  for (const [group, node] of Object.entries(schema.properties ?? {})) {
    out.push(`\n## \`${group}\`\n\n`);
    const explained = GROUP_PAGES[group];
    if (explained) out.push(`Explained in [${explained.split("#")[0]}](${explained}).\n\n`);
    walk(node, [group], false);
  }
  return out.join("");
}

/** Headings of the origins that `ERROR_TYPES` entries may name; others are shown as they are. */
const ORIGIN_TITLES: Readonly<Record<string, string>> = {
  admission: "Admission: before a run starts",
  sandbox: "The sandbox process",
  python: "Python",
  tools: "Tool calls and approvals",
  sampling: "Sampling and asking the user",
  elicitation: "Asking the user",
  skills: "Skills",
  outputs: "Kept outputs",
  state: "The shared state store",
  code: "The code's own errors",
};

/** What the errors page needs of an `ERROR_TYPES` entry; `origin` groups the entries. */
export interface ErrorTypeEntry {
  /** What happened. */
  meaning: string;
  /** What to change. */
  change: string;
  /** Where the error comes from (`admission`, `sandbox`, …), when the table says. */
  origin?: unknown;
}

/**
 * The error types reference: one entry per type, grouped under a heading per `origin` (in the
 * order the origins first appear) when the entries carry one, else one list.
 *
 * @param types The table, `ERROR_TYPES` unless a test passes another.
 * @returns The Markdown, before formatting.
 */
export function errorsReference(
  types: Readonly<Record<string, ErrorTypeEntry>> = ERROR_TYPES,
): string {
  const groups = new Map<string, string[]>();
  for (const [type, info] of Object.entries(types)) {
    const origin = typeof info.origin === "string" ? info.origin : "";
    const entry = `- **\`${type}\`**: ${sentence(info.meaning)}\\\n  _Change:_ ${
      sentence(info.change)
    }\n`;
    groups.set(origin, [...groups.get(origin) ?? [], entry]);
  }
  if (groups.size === 1 && groups.has("")) return `\n${groups.get("")!.join("")}`;
  return [...groups].map(([origin, entries]) => {
    const title = origin ? ORIGIN_TITLES[origin] ?? origin : "Other";
    return `\n## ${title}\n\n${entries.join("")}`;
  }).join("");
}

/** docs/settings.md. */
export const SETTINGS_PAGE: GeneratedPage = {
  path: "docs/settings.md",
  source:
    "src/config/settings_schema.ts (descriptions) and ENV_OVERRIDES in src/config/settings.ts",
  marker:
    "<!-- Generated below by docs/generate.ts from src/config/settings_schema.ts: edit the descriptions there, then run deno task docs. -->",
  render: settingsReference,
};

/** docs/errors.md. */
export const ERRORS_PAGE: GeneratedPage = {
  path: "docs/errors.md",
  source: "ERROR_TYPES in src/errors.ts",
  marker:
    "<!-- Generated below by docs/generate.ts from ERROR_TYPES in src/errors.ts: edit the table there, then run deno task docs. -->",
  render: () => errorsReference(),
};

/** Every generated page. */
export const GENERATED_PAGES: readonly GeneratedPage[] = [SETTINGS_PAGE, ERRORS_PAGE];

/** Formats Markdown as `deno fmt` does with this repository's settings (line width 100). */
async function formatMarkdown(text: string): Promise<string> {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["fmt", "--ext=md", "-"],
    cwd: ROOT,
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(text));
  await writer.close();
  const { code, stdout, stderr } = await child.output();
  if (code !== 0) {
    throw new Error(`deno fmt could not format the page: ${new TextDecoder().decode(stderr)}`);
  }
  return new TextDecoder().decode(stdout);
}

/**
 * What a page should hold: its hand-written part as it is on disk, the marker, and the
 * generated part, formatted.
 *
 * @param page The page.
 * @returns The page's expected text.
 * @throws {Error} When the page is missing its marker line.
 */
export async function expectedPage(page: GeneratedPage): Promise<string> {
  const current = await Deno.readTextFile(join(ROOT, page.path));
  const at = current.indexOf(page.marker);
  if (at === -1) {
    throw new Error(
      `${page.path} has no marker line; put this line where the generated part starts:\n${page.marker}`,
    );
  }
  return await formatMarkdown(
    `${current.slice(0, at)}${page.marker}\n${page.render()}`,
  );
}

/**
 * Says whether a page on disk is what {@linkcode expectedPage} makes, and if not, where.
 *
 * @param page The page.
 * @returns `undefined` when the page is current, else a message naming the page, its source, the
 *   command that fixes it and the first line that differs.
 */
export async function staleMessage(page: GeneratedPage): Promise<string | undefined> {
  const expected = await expectedPage(page);
  const actual = await Deno.readTextFile(join(ROOT, page.path));
  if (actual === expected) return undefined;
  const want = expected.split("\n");
  const have = actual.split("\n");
  const line = want.findIndex((text, index) => text !== have[index]);
  const at = line === -1 ? have.length : line;
  return `${page.path} is stale: it is generated from ${page.source}; run \`deno task docs\`.\n` +
    `  line ${at + 1} is:     ${JSON.stringify(have[at] ?? "(end of file)")}\n` +
    `  it should be: ${JSON.stringify(want[at] ?? "(end of file)")}`;
}

async function main(args: string[]): Promise<number> {
  if (args.includes("--check")) {
    const stale: string[] = [];
    for (const page of GENERATED_PAGES) {
      const message = await staleMessage(page);
      if (message) stale.push(message);
    }
    for (const message of stale) console.error(message);
    if (stale.length === 0) console.error(`Generated pages are current: ${pageList()}`);
    return stale.length === 0 ? 0 : 1;
  }
  for (const page of GENERATED_PAGES) {
    await Deno.writeTextFile(join(ROOT, page.path), await expectedPage(page));
  }
  console.error(`Wrote ${pageList()}`);
  return 0;
}

function pageList(): string {
  return GENERATED_PAGES.map((page) => page.path).join(", ");
}

if (import.meta.main) Deno.exit(await main(Deno.args));
