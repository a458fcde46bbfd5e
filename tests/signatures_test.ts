import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { schemaToType } from "../src/upstream/schema_to_type.ts";
import {
  fullToolName,
  proxyName,
  type ToolInfo,
  toolSignature,
} from "../src/upstream/signatures.ts";
import { docComments, properties, TREE } from "./_schemas.ts";

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

const HOSTILE_DESCRIPTION = "Reads a file */ evil() /*\nconst x = 1;\r\n\u2028// end";

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
      '"mcp__srv\\n}__x\\u2028evil()\\u0060"',
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
