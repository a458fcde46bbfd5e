/**
 * ARCHITECTURE.md kept true: every import of `main.ts` and `src/` (type-only and dynamic ones
 * too, as Deno's module graph has them) is checked against the "may import" table parsed from
 * ARCHITECTURE.md, the MCP SDK is imported only where the table allows it, `sandbox/` imports
 * nothing of `src/`, and every folder of `src/` has a row.
 *
 * The table's first column names a part: a folder (`src/exec/`, its files but those of
 * subfolders with a row of their own), the leaves (`src/*.ts`), or files (`src/cli/serve.ts`),
 * whose row grants those files more than their folder's. The last column lists the parts a part
 * may import (each in backticks, those of `src/` without `src/`, or `leaves`), `the MCP SDK`, and
 * folders outside `src/` (`sandbox/`, `lua/`) "as text".
 *
 * @module
 */
import { dirname, join, relative } from "node:path";
import { assert, assertEquals } from "./_assert.ts";
import { ROOT } from "./_helpers.ts";

/** One row of the table. */
interface Row {
  /** The first column's backticked labels: folders end in `/`; `src/*.ts` is the leaves. */
  labels: string[];
  /** Whether this row is the leaves'. */
  leaves: boolean;
  /** The parts it may import, as labels (the leaves as `src/*.ts`). */
  mayImport: Set<string>;
  /** Folders outside `src/` it may import as text (`sandbox/`, `lua/`). */
  textImports: Set<string>;
  /** Whether it may import the MCP SDK. */
  sdk: boolean;
}

const LEAVES = "src/*.ts";
const SDK = /^npm:\/?@modelcontextprotocol\//;

/** The "may import" table of ARCHITECTURE.md. */
async function readTable(): Promise<Row[]> {
  const text = await Deno.readTextFile(join(ROOT, "ARCHITECTURE.md"));
  const start = text.indexOf("## Parts and what they may import");
  assert(start >= 0, 'ARCHITECTURE.md has no section "Parts and what they may import"');
  const section = text.slice(start, text.indexOf("\n## ", start + 1));
  const rows: Row[] = [];
  for (const line of section.split("\n")) {
    if (!line.startsWith("| ") || /^\|\s*(part|-)/.test(line)) continue;
    const cells = line.split("|").slice(1, -1).map((cell) => cell.trim());
    assertEquals(cells.length, 2, `a row of the table has two columns: ${line}`);
    const [first, may] = cells;
    const leaves = first.startsWith("leaves");
    const labels = [...first.matchAll(/`([^`]+)`/g)].map((m) => m[1]);
    const named = [...may.matchAll(/`([^`]+)`(\s+as text)?/g)];
    rows.push({
      labels,
      leaves,
      mayImport: new Set([
        // The last column names the parts of src/ without `src/`.
        ...named.filter((m) => !m[2]).map((m) => m[1] === "sandbox/" ? m[1] : `src/${m[1]}`),
        ...(/\bleaves\b/.test(may) ? [LEAVES] : []),
      ]),
      textImports: new Set(named.filter((m) => m[2]).map((m) => m[1])),
      sdk: /the MCP SDK/.test(may),
    });
  }
  assert(rows.length > 0, "the table has no rows");
  return rows;
}

/** A dependency of one module, as Deno resolved it. */
interface Dependency {
  from: string;
  line: number;
  specifier: string;
  /** The resolved specifier: a `file:` URL, `npm:…`, `node:…`. */
  target: string;
  /** `text` or `json` for a data import. */
  data?: string;
}

/** Every dependency of the modules reachable from `roots`, from `deno info --json`. */
async function dependencies(roots: string[]): Promise<Map<string, Dependency[]>> {
  const modules = new Map<string, Dependency[]>();
  for (const root of roots) {
    if (modules.has(join(ROOT, root))) continue;
    const { code, stdout, stderr } = await new Deno.Command(Deno.execPath(), {
      args: ["info", "--json", root],
      cwd: ROOT,
      stdout: "piped",
      stderr: "piped",
    }).output();
    assertEquals(code, 0, new TextDecoder().decode(stderr));
    const graph = JSON.parse(new TextDecoder().decode(stdout)) as {
      modules: Array<{
        specifier: string;
        dependencies?: Array<{
          specifier: string;
          assertionType?: string;
          code?: { specifier: string; span: { start: { line: number } } };
          type?: { specifier: string; span: { start: { line: number } } };
        }>;
      }>;
    };
    for (const module of graph.modules) {
      if (!module.specifier.startsWith("file:")) continue;
      const from = new URL(module.specifier).pathname;
      modules.set(
        from,
        (module.dependencies ?? []).flatMap((dep) => {
          const resolved = dep.code ?? dep.type;
          if (!resolved) return [];
          return [{
            from,
            line: resolved.span.start.line + 1,
            specifier: dep.specifier,
            target: resolved.specifier,
            data: dep.assertionType,
          }];
        }),
      );
    }
  }
  return modules;
}

/** The `.ts` files under a folder of the checkout, as paths relative to it. */
async function tsFiles(dir: string): Promise<string[]> {
  const out: string[] = [];
  for await (const entry of Deno.readDir(join(ROOT, dir))) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory) out.push(...await tsFiles(path));
    else if (entry.name.endsWith(".ts")) out.push(path);
  }
  return out.sort();
}

/** The part a file of the checkout belongs to: the label of its folder's row. */
function partOf(rows: Row[], file: string): string | undefined {
  if (file === "main.ts") return "main.ts";
  if (file.startsWith("sandbox/")) return "sandbox/";
  if (dirname(file) === "src") return LEAVES;
  const top = `${file.split("/")[0]}/`;
  if (rows.some((row) => row.textImports.has(top))) return top;
  const folders = rows.flatMap((row) => row.labels).filter((label) => label.endsWith("/"));
  return folders.filter((folder) => file.startsWith(folder))
    .sort((a, b) => b.length - a.length)[0];
}

/** The rows that speak for a file: its folder's, and the rows that name the file itself. */
function rowsOf(rows: Row[], file: string): Row[] {
  const part = partOf(rows, file);
  return rows.filter((row) =>
    row.labels.includes(file) || (part !== undefined && row.labels.includes(part)) ||
    (part === LEAVES && row.leaves)
  );
}

/** Every import of `main.ts` and `src/` that the table does not allow, one line each. */
async function violations(rows: Row[]): Promise<string[]> {
  const sources = ["main.ts", ...await tsFiles("src")];
  const graph = await dependencies(sources);
  const out: string[] = [];
  for (const file of sources) {
    const deps = graph.get(join(ROOT, file));
    if (!deps) {
      out.push(`${file}: not in Deno's module graph`);
      continue;
    }
    const own = rowsOf(rows, file);
    const part = partOf(rows, file);
    if (own.length === 0) {
      out.push(`${file}: in no row of the table`);
      continue;
    }
    for (const dep of deps) {
      const where = `${file}:${dep.line} imports ${dep.specifier}`;
      if (SDK.test(dep.target)) {
        if (!own.some((row) => row.sdk)) out.push(`${where}: the MCP SDK is not allowed here`);
        continue;
      }
      if (!dep.target.startsWith("file:")) continue;
      const target = relative(ROOT, new URL(dep.target).pathname);
      const targetPart = partOf(rows, target);
      if (targetPart === part) continue;
      if (targetPart === "sandbox/" || rows.some((row) => row.textImports.has(targetPart ?? ""))) {
        if (dep.data !== "text" || !own.some((row) => row.textImports.has(targetPart!))) {
          out.push(`${where}: ${targetPart} is only read as text, where the table says so`);
        }
        continue;
      }
      if (targetPart === undefined) {
        // Package metadata (deno.json's version) is data, not code.
        if (dep.data !== "json") out.push(`${where}: ${target} is in no part of the table`);
        continue;
      }
      if (!own.some((row) => row.mayImport.has(targetPart))) {
        out.push(`${where}: ${part} may not import ${targetPart} (ARCHITECTURE.md)`);
      }
    }
  }
  return out;
}

Deno.test("every import in src/ is allowed by ARCHITECTURE.md's table", async () => {
  assertEquals(await violations(await readTable()), []);
});

Deno.test("ARCHITECTURE.md's table has a row for every folder of src/, and names only what exists", async () => {
  const rows = await readTable();
  const labels = rows.flatMap((row) => row.labels);
  const folders = new Set((await tsFiles("src")).map((file) => `${dirname(file)}/`));
  folders.delete("src/");
  const missing = [...folders].filter((folder) => !labels.includes(folder));
  assertEquals(missing, [], "folders of src/ without a row");
  assert(rows.some((row) => row.leaves && row.labels.includes(LEAVES)), "no row for the leaves");
  const named = [...labels, ...rows.flatMap((row) => [...row.mayImport])];
  const gone: string[] = [];
  for (const label of new Set(named)) {
    if (label === LEAVES) continue;
    if (!(await Deno.stat(join(ROOT, label)).then(() => true, () => false))) gone.push(label);
  }
  assertEquals(gone, [], "the table names what is not there");
});

Deno.test("sandbox/ imports nothing of src/", async () => {
  const files = await tsFiles("sandbox");
  const graph = await dependencies(files);
  const out: string[] = [];
  for (const file of files) {
    for (const dep of graph.get(join(ROOT, file)) ?? []) {
      if (!dep.target.startsWith("file:")) continue;
      const target = relative(ROOT, new URL(dep.target).pathname);
      if (!target.startsWith("sandbox/")) out.push(`${file}:${dep.line} imports ${target}`);
    }
  }
  assertEquals(out, []);
  assert(files.includes("sandbox/ts_runner.ts"), "the scan found no runner");
});
