import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { schemaToType } from "../src/upstream/schema_to_type.ts";
import {
  fullToolName,
  proxyName,
  type ToolInfo,
  toolSignature,
} from "../src/upstream/signatures.ts";

const GET_SUM: ToolInfo = {
  server: "everything",
  name: "get-sum",
  description: "Returns the sum of two numbers",
  inputSchema: {
    type: "object",
    properties: {
      a: { type: "number", description: "First number" },
      b: { type: "number", description: "Second number" },
    },
    required: ["a", "b"],
  },
};

const TREE = {
  $defs: {
    Node: {
      type: "object",
      properties: {
        value: { type: "number" },
        children: { type: "array", items: { $ref: "#/$defs/Node" } },
      },
      required: ["value"],
    },
  },
  $ref: "#/$defs/Node",
};

/** Twenty optional strings: too long for one line. */
const properties = Object.fromEntries(
  Array.from({ length: 20 }, (_, i) => [`property${i}`, { type: "string" }]),
);

const HOSTILE_DESCRIPTION = "Reads a file */ evil() /*\nconst x = 1;\r\n\u2028// end";

/** Returns the bodies of every `/** … *\/` comment, asserting that each one is on one line. */
function docComments(text: string): string[] {
  const bodies: string[] = [];
  let from = 0;
  for (;;) {
    const start = text.indexOf("/**", from);
    if (start === -1) break;
    const end = text.indexOf("*/", start + 3);
    assert(end !== -1, `unterminated comment in ${text}`);
    const body = text.slice(start + 3, end);
    assert(!/[\n\r\u2028\u2029]/.test(body), `line break inside a doc comment: ${body}`);
    bodies.push(body);
    from = end + 2;
  }
  return bodies;
}

Deno.test("fullToolName() joins server and tool verbatim", () => {
  assertEquals(fullToolName("everything", "get-sum"), "mcp__everything__get-sum");
  assertEquals(fullToolName("my.server-1", "Foo.Bar baz"), "mcp__my.server-1__Foo.Bar baz");
  assertEquals(fullToolName("a__b", "c"), "mcp__a__b__c");
});

Deno.test("proxyName() camelCases names split on non-alphanumerics", () => {
  assertEquals(proxyName("get-sum"), "getSum");
  assertEquals(proxyName("read_file"), "readFile");
  assertEquals(proxyName("Foo.Bar"), "fooBar");
  assertEquals(proxyName("GetThing"), "getThing");
  assertEquals(proxyName("my server"), "myServer");
  assertEquals(proxyName("list_v2_items"), "listV2Items");
  assertEquals(proxyName("a..b--c"), "aBC");
  assertEquals(proxyName("everything"), "everything");
  assertEquals(proxyName("alreadyCamel"), "alreadyCamel");
});

Deno.test("proxyName() lower-cases acronyms and all-capital words", () => {
  assertEquals(proxyName("GET_USER"), "getUser");
  assertEquals(proxyName("HTTPServer"), "httpServer");
  assertEquals(proxyName("URL"), "url");
  assertEquals(proxyName("iOS"), "iOS");
});

Deno.test("proxyName() prefixes a leading digit and never returns an empty name", () => {
  assertEquals(proxyName("2fa"), "_2fa");
  assertEquals(proxyName("--"), "_");
  assertEquals(proxyName(""), "_");
  assertEquals(proxyName("日本"), "_");
  assertEquals(proxyName("-9lives"), "_9lives");
  for (const name of ["get-sum", "2fa", "--", 'a\nb`c"d', "__proto__", "$x", "日本語 tool"]) {
    assertMatch(proxyName(name), /^[A-Za-z_][A-Za-z0-9_]*$/, name);
  }
});

Deno.test("schemaToType() renders primitive types and integer as number", () => {
  assertEquals(schemaToType({ type: "string" }), "string");
  assertEquals(schemaToType({ type: "number" }), "number");
  assertEquals(schemaToType({ type: "integer" }), "number");
  assertEquals(schemaToType({ type: "boolean" }), "boolean");
  assertEquals(schemaToType({ type: "null" }), "null");
});

Deno.test("schemaToType() renders type arrays as unions", () => {
  assertEquals(schemaToType({ type: ["string", "null"] }), "string | null");
  assertEquals(schemaToType({ type: ["integer", "number"] }), "number");
  assertEquals(
    schemaToType({ type: ["array", "string"], items: { type: "number" } }),
    "number[] | string",
  );
  assertEquals(schemaToType({ type: ["string", "bogus"] }), "unknown");
});

Deno.test("schemaToType() renders enum as a union of JSON literals", () => {
  assertEquals(schemaToType({ enum: ["a", "b"] }), '"a" | "b"');
  assertEquals(schemaToType({ type: "string", enum: ["x"] }), '"x"');
  assertEquals(schemaToType({ enum: [1, -2.5, true, null] }), "1 | -2.5 | true | null");
  assertEquals(schemaToType({ enum: ['say "hi"\n', "`${x}`"] }), '"say \\"hi\\"\\n" | "`${x}`"');
  assertEquals(schemaToType({ enum: ["a", "a"] }), '"a"');
  assertEquals(schemaToType({ enum: [{ a: 1 }, [1]] }), "Record<string, unknown> | unknown[]");
  assertEquals(schemaToType({ enum: [] }), "never");
});

Deno.test("schemaToType() widens enums too long to list and literals too long to read", () => {
  const values = Array.from({ length: 500 }, (_, i) => `value-${i}`);
  assertEquals(schemaToType({ enum: [...values, 1, null] }), "string | number | null");
  assertEquals(schemaToType({ const: "x".repeat(1000) }), "string");
  assertEquals(schemaToType({ const: Infinity }), "number");
});

Deno.test("schemaToType() renders const as a literal", () => {
  assertEquals(schemaToType({ const: "fixed" }), '"fixed"');
  assertEquals(schemaToType({ type: "number", const: 42 }), "42");
  assertEquals(schemaToType({ const: false }), "false");
  assertEquals(schemaToType({ const: null }), "null");
});

Deno.test("schemaToType() renders arrays and parenthesises unions in them", () => {
  assertEquals(schemaToType({ type: "array", items: { type: "string" } }), "string[]");
  assertEquals(schemaToType({ type: "array" }), "unknown[]");
  assertEquals(
    schemaToType({ type: "array", items: { type: ["string", "number"] } }),
    "(string | number)[]",
  );
  assertEquals(
    schemaToType({
      type: "array",
      items: {
        allOf: [
          { type: "object", properties: { a: { type: "string" } } },
          { type: "object", properties: { b: { type: "string" } } },
        ],
      },
    }),
    "({ a?: string } & { b?: string })[]",
  );
  assertEquals(
    schemaToType({ type: "array", items: { type: "array", items: { type: "number" } } }),
    "number[][]",
  );
  assertEquals(schemaToType({ items: { type: "boolean" } }), "boolean[]");
});

Deno.test("schemaToType() renders tuples from prefixItems and array-form items", () => {
  assertEquals(
    schemaToType({ type: "array", prefixItems: [{ type: "string" }, { type: "number" }] }),
    "[string, number]",
  );
  assertEquals(
    schemaToType({
      type: "array",
      prefixItems: [{ type: "string" }],
      items: { type: ["number", "null"] },
    }),
    "[string, ...(number | null)[]]",
  );
  assertEquals(
    schemaToType({ type: "array", items: [{ type: "boolean" }, { const: 1 }] }),
    "[boolean, 1]",
  );
  assertEquals(
    schemaToType({ type: "array", items: [{ type: "boolean" }], additionalItems: true }),
    "[boolean, ...unknown[]]",
  );
});

Deno.test("schemaToType() renders optional properties with ?", () => {
  assertEquals(
    schemaToType({
      type: "object",
      properties: { a: { type: "string" }, b: { type: "integer" } },
      required: ["a"],
    }),
    "{ a: string; b?: number }",
  );
  assertEquals(
    schemaToType({ type: "object", properties: { a: { type: "string" } }, required: "a" }),
    "{ a?: string }",
  );
  assertEquals(
    schemaToType({ properties: { a: {} }, required: ["a", 7, "missing"] }),
    "{ a: unknown }",
  );
});

Deno.test("schemaToType() quotes property names that are not identifiers", () => {
  const type = schemaToType({
    type: "object",
    properties: {
      "content-type": { type: "string" },
      "2x": { type: "number" },
      "a b": { type: "boolean" },
      "x\n}; evil(); //": { type: "string" },
      "`tick`": { type: "null" },
      "\u2028": { type: "null" },
      $ok_1: { type: "string" },
    },
    required: ["content-type"],
  });
  assertEquals(
    type,
    [
      "{",
      '  "content-type": string;',
      '  "2x"?: number;',
      '  "a b"?: boolean;',
      '  "x\\n}; evil(); //"?: string;',
      '  "`tick`"?: null;',
      '  "\\u2028"?: null;',
      "  $ok_1?: string;",
      "}",
    ].join("\n"),
  );
});

Deno.test("schemaToType() renders additionalProperties without properties as a Record", () => {
  assertEquals(
    schemaToType({ type: "object", additionalProperties: { type: "string" } }),
    "Record<string, string>",
  );
  assertEquals(
    schemaToType({ type: "object", additionalProperties: true }),
    "Record<string, unknown>",
  );
  assertEquals(schemaToType({ type: "object" }), "Record<string, unknown>");
  assertEquals(schemaToType({ type: "object", properties: {} }), "Record<string, unknown>");
  assertEquals(
    schemaToType({ type: "object", additionalProperties: false }),
    "Record<string, never>",
  );
  assertEquals(
    schemaToType({ additionalProperties: { type: "array", items: { type: "number" } } }),
    "Record<string, number[]>",
  );
});

Deno.test("schemaToType() adds an index signature when properties and additionalProperties meet", () => {
  assertEquals(
    schemaToType({
      type: "object",
      properties: { a: { type: "string" } },
      additionalProperties: { type: "number" },
      required: ["a"],
    }),
    "{ a: string; [key: string]: unknown }",
  );
  assertEquals(
    schemaToType({
      type: "object",
      properties: { a: { type: "string" } },
      additionalProperties: true,
    }),
    "{ a?: string; [key: string]: unknown }",
  );
  assertEquals(
    schemaToType({
      type: "object",
      properties: { a: { type: "string" } },
      additionalProperties: false,
    }),
    "{ a?: string }",
  );
});

Deno.test("schemaToType() renders anyOf and oneOf as unions and allOf as an intersection", () => {
  assertEquals(
    schemaToType({ anyOf: [{ type: "string" }, { type: "number" }] }),
    "string | number",
  );
  assertEquals(
    schemaToType({ oneOf: [{ const: "a" }, { const: "b" }, { type: "null" }] }),
    '"a" | "b" | null',
  );
  assertEquals(schemaToType({ anyOf: [{ type: "string" }, {}] }), "unknown");
  assertEquals(
    schemaToType({
      allOf: [
        { type: "object", properties: { a: { type: "string" } }, required: ["a"] },
        { type: "object", properties: { b: { type: "number" } } },
      ],
    }),
    "{ a: string } & { b?: number }",
  );
  assertEquals(
    schemaToType({
      allOf: [
        { anyOf: [{ type: "string" }, { type: "number" }] },
        { anyOf: [{ type: "number" }, { type: "boolean" }] },
      ],
    }),
    "(string | number) & (number | boolean)",
  );
  assertEquals(
    schemaToType({
      type: "object",
      oneOf: [
        { properties: { kind: { const: "a" } }, required: ["kind"] },
        { properties: { kind: { const: "b" } }, required: ["kind"] },
      ],
    }),
    '{ kind: "a" } | { kind: "b" }',
  );
  assertEquals(
    schemaToType({ type: "string", anyOf: [{ minLength: 1 }, { maxLength: 0 }] }),
    "string",
  );
});

Deno.test("schemaToType() resolves local $ref against $defs and definitions", () => {
  assertEquals(
    schemaToType({
      type: "object",
      properties: { user: { $ref: "#/$defs/User" }, id: { $ref: "#/definitions/Id" } },
      required: ["user"],
      $defs: {
        User: { type: "object", properties: { name: { type: "string" } }, required: ["name"] },
      },
      definitions: { Id: { type: ["string", "integer"] } },
    }),
    "{ user: { name: string }; id?: string | number }",
  );
  assertEquals(
    schemaToType({ $defs: { "a/b~c": { type: "boolean" } }, $ref: "#/$defs/a~1b~0c" }),
    "boolean",
  );
  assertEquals(
    schemaToType({ $defs: { "a b": { type: "boolean" } }, $ref: "#/$defs/a%20b" }),
    "boolean",
  );
  assertEquals(
    schemaToType({
      $defs: { Name: { type: "string" } },
      type: "array",
      items: { $ref: "#/$defs/Name" },
    }),
    "string[]",
  );
});

Deno.test("schemaToType() renders a recursive $ref as unknown where it recurs", () => {
  assertEquals(schemaToType(TREE), "{ value: number; children?: unknown[] }");
  assertEquals(
    schemaToType({
      type: "object",
      properties: { next: { $ref: "#" }, value: { type: "string" } },
    }),
    "{ next?: unknown; value?: string }",
  );
  assertEquals(
    schemaToType({
      $defs: { A: { $ref: "#/$defs/B" }, B: { $ref: "#/$defs/A" } },
      $ref: "#/$defs/A",
    }),
    "unknown",
  );
  assertEquals(
    schemaToType({
      $defs: {
        Id: { type: "string" },
        Pair: {
          type: "object",
          properties: { a: { $ref: "#/$defs/Id" }, b: { $ref: "#/$defs/Id" } },
          required: ["a", "b"],
        },
      },
      $ref: "#/$defs/Pair",
    }),
    "{ a: string; b: string }",
  );
});

Deno.test("schemaToType() renders unknown for remote, dangling and malformed refs", () => {
  assertEquals(schemaToType({ $ref: "https://example.com/schema.json" }), "unknown");
  assertEquals(schemaToType({ $ref: "other.json#/$defs/A" }), "unknown");
  assertEquals(schemaToType({ $ref: "#/$defs/Missing", $defs: {} }), "unknown");
  assertEquals(schemaToType({ $ref: "#anchor" }), "unknown");
  assertEquals(schemaToType({ $ref: "#/%E0%A4%A" }), "unknown");
  assertEquals(schemaToType({ $ref: "#/$defs/constructor", $defs: {} }), "unknown");
  assertEquals(schemaToType({ $ref: "#/__proto__/toString" }), "unknown");
  assertEquals(schemaToType({ $ref: 42 }), "unknown");
  assertEquals(
    schemaToType({ type: "object", properties: { a: { $ref: "#/nope" } }, required: ["a"] }),
    "{ a: unknown }",
  );
});

Deno.test("schemaToType() renders unknown without type information", () => {
  assertEquals(schemaToType({}), "unknown");
  assertEquals(schemaToType({ description: "anything" }), "unknown");
  assertEquals(schemaToType(true), "unknown");
  assertEquals(schemaToType(false), "never");
  assertEquals(schemaToType(undefined), "unknown");
  assertEquals(schemaToType({ type: "object", properties: { a: true } }), "{ a?: unknown }");
});

Deno.test("schemaToType() adds null for nullable: true", () => {
  assertEquals(schemaToType({ type: "string", nullable: true }), "string | null");
  assertEquals(schemaToType({ type: ["string", "null"], nullable: true }), "string | null");
  assertEquals(
    schemaToType({ type: "array", items: { type: "integer", nullable: true } }),
    "(number | null)[]",
  );
  assertEquals(schemaToType({ nullable: true }), "unknown");
  assertEquals(schemaToType({ type: "string", nullable: "yes" }), "string");
});

Deno.test("schemaToType() renders unknown beyond maxDepth", () => {
  let schema: Record<string, unknown> = { type: "string" };
  for (let i = 0; i < 10; i++) {
    schema = { type: "object", properties: { n: schema }, required: ["n"] };
  }
  const nested = (depth: number, leaf: string) => "{ n: ".repeat(depth) + leaf + " }".repeat(depth);
  assertEquals(schemaToType(schema), nested(7, "unknown"));
  assertEquals(schemaToType(schema, { maxDepth: 2 }), nested(3, "unknown"));
  assertEquals(schemaToType(schema, { maxDepth: 0 }), "{ n: unknown }");
  assertEquals(schemaToType(schema, { maxDepth: 20 }), nested(10, "string"));
  assertEquals(
    schemaToType({ type: "array", items: { type: "array", items: { type: "string" } } }, {
      maxDepth: 1,
    }),
    "unknown[][]",
  );
});

Deno.test("schemaToType() does not throw on malformed schemas", () => {
  const cyclic: Record<string, unknown> = { type: "object" };
  cyclic.properties = { self: cyclic };
  const malformed: unknown[] = [
    { type: 42 },
    { properties: "x" },
    { type: "object", properties: "x" },
    { items: null },
    { type: "array", items: null },
    { type: "object", properties: { a: null, b: 7, c: "x", d: [] } },
    { type: "object", properties: [{ type: "string" }] },
    { type: "object", required: { a: true }, properties: { a: { type: "string" } } },
    { anyOf: "x", oneOf: null, allOf: {} },
    { anyOf: [null, 1, "x"] },
    { enum: "abc" },
    { enum: [10n, Symbol("s"), undefined, () => 1] },
    { type: [null, {}, ["string"]] },
    { prefixItems: "x", items: 5 },
    { additionalProperties: 3, type: "object" },
    { $defs: null, $ref: "#/$defs/x" },
    { description: 5, type: "object", properties: { a: { description: {}, type: "string" } } },
    { nullable: true, type: {} },
    null,
    42,
    "string",
    [],
    [{ type: "string" }],
    cyclic,
  ];
  for (const schema of malformed) {
    const type = schemaToType(schema, { withDoc: true });
    assertEquals(typeof type, "string");
    assert(type.length > 0);
  }
  assertEquals(schemaToType({ type: 42, properties: "x", items: null }), "unknown");
  assertEquals(schemaToType({ type: "object", properties: "x" }), "Record<string, unknown>");
  assertEquals(schemaToType({ type: "array", items: null }), "unknown[]");
  assertEquals(
    schemaToType({ type: "object", properties: { a: null, b: 7 }, required: ["a"] }),
    "{ a: unknown; b?: unknown }",
  );
});

Deno.test("schemaToType() survives a getter that throws", () => {
  const schema = {
    type: "object",
    get properties(): Record<string, unknown> {
      throw new Error("boom");
    },
  };
  assertEquals(schemaToType(schema), "unknown");
});

Deno.test("schemaToType() bounds the output of huge and exponential schemas", () => {
  const many: Record<string, unknown> = {};
  for (let i = 0; i < 10_000; i++) many[`p${i}`] = { type: "string" };
  const wide = schemaToType({ type: "object", properties: many });
  assert(wide.length < 5_000, `wide schema rendered to ${wide.length} characters`);
  assertEquals(wide.split("\n").length, 103);
  assert(wide.endsWith("\n  p99?: string;\n  [key: string]: unknown;\n}"), wide);

  // Each definition refers to the next one twice: 2^30 paths if expanded naively.
  const defs: Record<string, unknown> = { D30: { type: "string" } };
  for (let i = 0; i < 30; i++) {
    defs[`D${i}`] = {
      type: "object",
      properties: { l: { $ref: `#/$defs/D${i + 1}` }, r: { $ref: `#/$defs/D${i + 1}` } },
    };
  }
  // Expanded naively it would never return; bounded, its output is.
  const dag = schemaToType({ $defs: defs, $ref: "#/$defs/D0" }, { maxDepth: 40 });
  assert(dag.length < 200_000, `exponential schema rendered to ${dag.length} characters`);

  let deep: unknown = { type: "string" };
  for (let i = 0; i < 5_000; i++) deep = { anyOf: [deep] };
  assertEquals(schemaToType(deep), "unknown");

  const longName = "k".repeat(10_000);
  assertEquals(
    schemaToType({ type: "object", properties: { [longName]: { type: "string" }, a: {} } }),
    "{ a?: unknown; [key: string]: unknown }",
  );
});

Deno.test("schemaToType() keeps short objects on one line and breaks long ones", () => {
  assertEquals(
    schemaToType({ type: "object", properties: { a: { type: "string" } }, required: ["a"] }),
    "{ a: string }",
  );
  const long = {
    type: "object",
    properties: {
      firstPropertyName: { type: "string" },
      secondPropertyName: { type: "number" },
      third: {
        type: "object",
        properties: {
          innerPropertyNumberOne: { type: "string" },
          innerPropertyNumberTwo: { type: "string" },
          innerPropertyNumberThree: { type: "string" },
        },
      },
      fourth: { type: "array", items: { type: "boolean" } },
    },
    required: ["firstPropertyName"],
  };
  assertEquals(
    schemaToType(long),
    [
      "{",
      "  firstPropertyName: string;",
      "  secondPropertyName?: number;",
      "  third?: {",
      "    innerPropertyNumberOne?: string;",
      "    innerPropertyNumberTwo?: string;",
      "    innerPropertyNumberThree?: string;",
      "  };",
      "  fourth?: boolean[];",
      "}",
    ].join("\n"),
  );
  const indented = schemaToType(long, { indent: "    " });
  assertEquals(indented.split("\n")[1], "      firstPropertyName: string;");
  assertEquals(indented.split("\n").at(-1), "    }");
  for (const line of schemaToType({ type: "object", properties }).split("\n")) {
    assert(line.length <= 100, `line too long: ${line}`);
  }
});

Deno.test("schemaToType() renders property descriptions only with withDoc", () => {
  const schema = {
    type: "object",
    properties: { a: { type: "number", description: "First number" }, b: { type: "number" } },
    required: ["a", "b"],
  };
  assertEquals(schemaToType(schema), "{ a: number; b: number }");
  assertEquals(
    schemaToType(schema, { withDoc: true }),
    "{ /** First number */ a: number; b: number }",
  );
  const described = {
    type: "object",
    properties: {
      path: { type: "string", description: "Path of the file to read, relative to the root" },
      encoding: { enum: ["utf8", "base64"], description: "How to return the content" },
      item: { $ref: "#/$defs/Item" },
    },
    $defs: { Item: { type: "string", description: "Described at the definition" } },
    required: ["path"],
  };
  assertEquals(
    schemaToType(described, { withDoc: true }),
    [
      "{",
      "  /** Path of the file to read, relative to the root */",
      "  path: string;",
      "  /** How to return the content */",
      '  encoding?: "utf8" | "base64";',
      "  /** Described at the definition */",
      "  item?: string;",
      "}",
    ].join("\n"),
  );
});

Deno.test("schemaToType() collapses whitespace in descriptions and caps their length", () => {
  const type = schemaToType({
    type: "object",
    properties: {
      a: { type: "string", description: `  line one\n\n\tline two  ${"x".repeat(500)}` },
    },
  }, { withDoc: true });
  const [doc] = docComments(type);
  assert(doc.startsWith(" line one line two xxx"), doc);
  assert(doc.endsWith("… "), doc);
  assertEquals(Array.from(doc.trim()).length, 300);
});

Deno.test("toolSignature() renders the server-everything get-sum tool", () => {
  assertEquals(
    toolSignature(GET_SUM),
    "/** Returns the sum of two numbers */\n" +
      "tools.everything.getSum(args: { /** First number */ a: number; /** Second number */ " +
      "b: number }): Promise<unknown>  // mcp__everything__get-sum",
  );
  assertEquals(
    toolSignature(GET_SUM, { withDoc: false }),
    "tools.everything.getSum(args: { a: number; b: number }): Promise<unknown>  " +
      "// mcp__everything__get-sum",
  );
});

Deno.test("toolSignature() returns the outputSchema's type", () => {
  const tool: ToolInfo = {
    ...GET_SUM,
    outputSchema: {
      type: "object",
      properties: { sum: { type: "number" } },
      required: ["sum"],
    },
  };
  assert(
    toolSignature(tool, { withDoc: false }).endsWith(
      "): Promise<{ sum: number }>  // mcp__everything__get-sum",
    ),
  );
  const recursive = toolSignature({ ...GET_SUM, outputSchema: TREE }, { withDoc: false });
  assertMatch(recursive, /Promise<\{ value: number; children\?: unknown\[\] \}>/);
});

Deno.test("toolSignature() makes args optional when nothing is required", () => {
  const sig = (inputSchema: Record<string, unknown>) =>
    toolSignature({ server: "s", name: "t", inputSchema }, { withDoc: false });
  assertEquals(
    sig({ type: "object", properties: {} }),
    "tools.s.t(args?: Record<string, unknown>): Promise<unknown>  // mcp__s__t",
  );
  assertMatch(sig({ type: "object", properties: { q: { type: "string" } } }), /\(args\?: /);
  assertMatch(
    sig({ type: "object", properties: { q: { type: "string" } }, required: ["q"] }),
    /\(args: \{ q: string \}\)/,
  );
  assertMatch(sig({ $ref: "#/$defs/A", $defs: { A: { type: "string" } } }), /\(args: string\)/);
});

Deno.test("toolSignature() breaks a long argument type over indented lines", () => {
  const signature = toolSignature({
    server: "filesystem",
    name: "read_text_file",
    inputSchema: { type: "object", properties, required: ["property0"] },
  }, { withDoc: false });
  const lines = signature.split("\n");
  assertEquals(lines[0], "tools.filesystem.readTextFile(args: {");
  assertEquals(lines[1], "  property0: string;");
  assertEquals(lines.at(-1), "}): Promise<unknown>  // mcp__filesystem__read_text_file");
});

Deno.test("toolSignature() keeps a hostile description inside its comment", () => {
  const signature = toolSignature({
    server: "evil",
    name: "tool",
    description: HOSTILE_DESCRIPTION,
    inputSchema: {
      type: "object",
      properties: { path: { type: "string", description: HOSTILE_DESCRIPTION } },
    },
  });
  const comments = docComments(signature);
  assertEquals(comments.length, 2);
  for (const body of comments) {
    assertEquals(body, " Reads a file *\\/ evil() /* const x = 1; // end ");
  }
  const outside = signature.replaceAll(/\/\*\*.*?\*\//g, "");
  assert(!outside.includes("evil()"), outside);
  assert(!outside.includes("*/"), outside);
  assertEquals(signature.split("\n").length, 2);
});

Deno.test("toolSignature() quotes hostile names and keeps them out of the code", () => {
  const signature = toolSignature({
    server: "srv\n}",
    name: "x\u2028evil()`",
    inputSchema: {
      type: "object",
      properties: { "a\n*/ b": { type: "string" } },
      required: ["a\n*/ b"],
    },
  }, { withDoc: false });
  assertEquals(signature.split("\n").length, 1);
  assert(!/[\r\u2028\u2029]/.test(signature));
  assertEquals(
    signature,
    'tools.srv.xEvil(args: { "a\\n*/ b": string }): Promise<unknown>  // ' +
      '"mcp__srv\\n}__x\\u2028evil()`"',
  );
});

Deno.test("toolSignature() does not throw on a malformed tool", () => {
  const tool = { server: "s", name: "t", inputSchema: "nope" } as unknown as ToolInfo;
  assertEquals(
    toolSignature(tool),
    "tools.s.t(args?: unknown): Promise<unknown>  // mcp__s__t",
  );
  const noDescription = { ...GET_SUM, description: 42 } as unknown as ToolInfo;
  assert(!toolSignature(noDescription).startsWith("/**"));
  assert(!toolSignature({ ...GET_SUM, description: " \n\t " }).startsWith("/**"));
});

Deno.test("schemaToType() and toolSignature() emit TypeScript that deno check accepts", async () => {
  const schemas: unknown[] = [
    GET_SUM.inputSchema,
    TREE,
    {
      type: "object",
      properties: {
        "content-type": { enum: ["text/plain", "application/json", 3, -1, null, true] },
        "x\n*/ y": { type: ["string", "null"], description: HOSTILE_DESCRIPTION },
        tuple: { type: "array", prefixItems: [{ type: "string" }], items: { type: "number" } },
        tags: { type: "array", items: { anyOf: [{ type: "string" }, { type: "integer" }] } },
        meta: { type: "object", additionalProperties: { type: "string" } },
        open: { type: "object", properties: { a: { const: "`${x}`" } }, additionalProperties: {} },
        both: { allOf: [{ properties: { a: { type: "string" } } }, { properties: { b: {} } }] },
        maybe: { type: "integer", nullable: true },
        none: false,
      },
      required: ["content-type"],
    },
    { type: "object", properties },
    {
      type: "array",
      items: {
        allOf: [{ type: "object", properties: { a: {} } }, {
          type: "object",
          properties: { b: {} },
        }],
      },
    },
    { anyOf: [{ type: "array", items: { const: -1 } }, { type: "object" }] },
  ];
  const tools: ToolInfo[] = [
    GET_SUM,
    {
      server: "evil",
      name: "tool",
      description: HOSTILE_DESCRIPTION,
      inputSchema: schemas[2] as Record<string, unknown>,
      outputSchema: TREE,
    },
  ];
  const source = [
    "declare const tools: any;",
    ...schemas.map((schema, i) =>
      `type T${i} = ${schemaToType(schema, { withDoc: true, indent: "" })};`
    ),
    "const sum: T0 = { a: 1, b: 2 };",
    "const tree: T1 = { value: 1, children: [{ value: 2 }] };",
    "// @ts-expect-error a is required",
    "const wrong: T0 = { b: 2 };",
    ...tools.map((tool, i) =>
      `interface Api${i} {\n${toolSignature(tool).replace(/^tools\.\w+\./m, "")}\n}`
    ),
    "export { sum, tree, wrong };",
    "export type { " + schemas.map((_, i) => `T${i}`).join(", ") + ", " +
    tools.map((_, i) => `Api${i}`).join(", ") + " };",
  ].join("\n");
  const dir = await Deno.makeTempDir({ prefix: "signatures_test_" });
  try {
    const file = `${dir}/types.ts`;
    await Deno.writeTextFile(file, source);
    const { code, stderr } = await new Deno.Command(Deno.execPath(), {
      args: ["check", "--no-config", "--no-lock", file],
      cwd: dir,
      stdout: "null",
      stderr: "piped",
    }).output();
    assertEquals(code, 0, `deno check failed:\n${new TextDecoder().decode(stderr)}\n${source}`);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
