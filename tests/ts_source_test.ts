import { assertEquals } from "./_assert.ts";
import { scanTopLevel, wrapTypescript } from "../src/exec/typescript/source.ts";

function hoisted(code: string): string[] {
  return scanTopLevel(code).imports.map(([s, e]) => code.slice(s, e));
}

Deno.test("wrapTypescript() wraps code without imports and shifts lines by one", () => {
  const { source, lineOffset } = wrapTypescript("const x = 1;\nreturn x;");
  assertEquals(lineOffset, 1);
  assertEquals(source, "export default async function () {\nconst x = 1;\nreturn x;\n}\n");
});

Deno.test("wrapTypescript() hoists imports and keeps every other line's position", () => {
  const code = [
    'import a from "./a.ts";',
    "const x = 1;",
    "import {",
    "  b, // a comment with // and 'quotes'",
    '} from "https://example.com/b.ts";',
    "return x;",
  ].join("\n");
  const { source, lineOffset } = wrapTypescript(code);
  const lines = source.split("\n");
  const body = lines.slice(lineOffset, lineOffset + 6);
  assertEquals(body[1], "const x = 1;");
  assertEquals(body[5], "return x;");
  assertEquals(body[0].trim(), "");
  assertEquals(body[2].trim(), "");
  assertEquals(lines[lineOffset - 1], "export default async function () {");
  assertEquals(lineOffset, 1 + 1 + 3);
});

Deno.test("scanTopLevel() finds import declarations of every form", () => {
  const code = [
    'import "./side-effect.ts";',
    "import type { T } from './types.ts'",
    'import x, { y as z } from "npm:thing" with { type: "json" };',
    'import * as ns from "./ns.ts";',
  ].join("\n");
  assertEquals(hoisted(code), [
    'import "./side-effect.ts";',
    "import type { T } from './types.ts'",
    'import x, { y as z } from "npm:thing" with { type: "json" };',
    'import * as ns from "./ns.ts";',
  ]);
});

Deno.test("scanTopLevel() ignores dynamic imports, import.meta and nested or quoted imports", () => {
  const code = [
    'const m = await import("./dyn.ts");',
    "console.log(import.meta.url);",
    'function f() { import("./x.ts"); }',
    "const s = \"import x from 'y'\";",
    "const t = `${'import a from \"b\"'} import c from 'd'`;",
    "// import e from 'f';",
    "/* import g from 'h'; */",
    'const r = /import i from "j"/;',
    "if (true) { const k = 1; }",
  ].join("\n");
  assertEquals(hoisted(code), []);
});

Deno.test("scanTopLevel() strips export from top-level declarations only", () => {
  const code =
    "export const a = 1;\nexport function f() {}\nconst o = { export: 1 };\nexport default 1;";
  const { exports } = scanTopLevel(code);
  assertEquals(exports.map(([s, e]) => code.slice(s, e)), ["export ", "export "]);
});

Deno.test("scanTopLevel() handles division, regex and templates before an import", () => {
  const code = [
    "const a = 4 / 2 / 1;",
    "const b = /[/]\\//g.test('x');",
    "const c = `x${`y${1}`}z`;",
    'import q from "./q.ts";',
  ].join("\n");
  assertEquals(hoisted(code), ['import q from "./q.ts";']);
});

Deno.test("scanTopLevel() finds the modules named in declarations and literal import() calls", () => {
  const code = [
    'import a from "csv-parse";',
    "import { b } from 'npm:date-fns@4.4.0';",
    'import "./side.ts";',
    'import c from "data:text/javascript,export default 1" with { type: "javascript" };',
    'const text = "import x from \\"hidden\\"";',
    "// import y from 'commented';",
    "async function f() {",
    '  await import("jsr:@std/path");',
    "  await import(`https://example.com/x.ts`);",
    "  await import(`npm:${name}`);",
    "  await import(computed);",
    '  await import("file://" + path, { with: { type: "text" } });',
    '  await import("node:fs", { with: {} });',
    "  return obj.import('not-an-import');",
    "}",
    'const m = await import ( "lodash" );',
  ].join("\n");
  const modules = scanTopLevel(code).modules.map((
    m,
  ) => [m.specifier, code.slice(0, m.at).split("\n").length]);
  assertEquals(modules, [
    ["csv-parse", 1],
    ["npm:date-fns@4.4.0", 2],
    ["./side.ts", 3],
    ["data:text/javascript,export default 1", 4],
    ["jsr:@std/path", 8],
    ["https://example.com/x.ts", 9],
    ["node:fs", 13],
    ["lodash", 16],
  ]);
});
