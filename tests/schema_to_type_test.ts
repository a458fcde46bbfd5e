import { assert, assertEquals } from "./_assert.ts";
import { schemaToType } from "../src/upstream/schema_to_type.ts";
import { docComments, properties, TREE } from "./_schemas.ts";

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
  assertEquals(
    schemaToType({ enum: ['say "hi"\n', "`${x}`"] }),
    '"say \\"hi\\"\\n" | "\\u0060${x}\\u0060"',
  );
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
      '  "\\u0060tick\\u0060"?: null;',
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
