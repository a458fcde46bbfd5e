/**
 * Tests of the typed wrappers (`wrappers` command, `src/codegen/`): generated for real MCP servers
 * from npm and for a fixture with hostile tool names and descriptions, type-checked with
 * `deno check`, imported and called from `run_typescript` and `run_python` through a real server,
 * and regenerated only when a server's schemas change.
 *
 * Every command runs with a private HOME, so that no user configuration leaks in, and the real
 * DENO_DIR, so that the npm servers are not downloaded again.
 *
 * @module
 */
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { describeResult, type RunResult } from "./_assert.ts";
import { EVERYTHING, FILESYSTEM, MEMORY } from "./_pins.ts";
import { fixtureServer, homeEnv, npmServer, ROOT, writeMcpConfig } from "./_env.ts";
import { type CommandRun, runCommand } from "./_command.ts";
import { type ServerHarness, startServer } from "./_stdio_server.ts";
import {
  assignNames,
  moduleNames,
  PYTHON_RESERVED,
  snakeName,
  TYPESCRIPT_RESERVED,
  typescriptFunctionNames,
} from "../src/codegen/names.ts";
import { generatePython, pythonString } from "../src/codegen/python.ts";
import { generateTypescript } from "../src/codegen/typescript.ts";
import { buildWheel } from "../src/codegen/wheel.ts";
import { readWheels, wheelModules } from "../src/exec/python/wheels.ts";
import { proxyName } from "../src/upstream/signatures.ts";
import { docCommentLines, stringLiteral } from "../src/upstream/untrusted_text.ts";

const SILENT_LOG = { debug() {}, info() {}, warn() {}, error() {} };

/** Runs `deno` with a cleared environment and a private HOME. */
function run(args: string[], home: string, cwd = home): Promise<CommandRun> {
  return runCommand(Deno.execPath(), args, { cwd, clearEnv: true, env: homeEnv(home) });
}

/** `deno run main.ts wrappers …`, as `deno task wrappers` runs it. */
async function wrappersCli(home: string, args: string[]): Promise<CommandRun> {
  return await run(
    ["run", "-A", "--config", join(ROOT, "deno.json"), join(ROOT, "main.ts"), "wrappers", ...args],
    home,
  );
}

function fixtureEntry(tools: unknown[]): Record<string, unknown> {
  return fixtureServer({ FIXTURE_EXTRA_TOOLS: JSON.stringify(tools) });
}

/** A server that lets runs import the wrappers in `out`: Python's wheels, TypeScript's files. */
function serveWrappers(home: string, config: string, out: string): Promise<ServerHarness> {
  return startServer({
    home,
    sharedCache: true,
    args: ["--config", config],
    env: { ALLOWED_PROJECTS: out },
    settings: { python: { wheelDirs: [join(out, "python")] } },
  });
}

function describe(result: RunResult): string {
  return describeResult(result, 1000);
}

async function mtimes(dir: string): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const sub of ["", "typescript", "python", "python/mcp_wrappers"]) {
    for await (const entry of Deno.readDir(join(dir, sub))) {
      if (!entry.isFile) continue;
      const path = join(dir, sub, entry.name);
      out.set(path, (await Deno.stat(path)).mtime!.getTime());
    }
  }
  return out;
}

Deno.test("snakeName() splits words and camelCase into a Python identifier", () => {
  assertEquals(snakeName("createEntities"), "create_entities");
  assertEquals(snakeName("Get-Thing.v2"), "get_thing_v2");
  assertEquals(snakeName("HTTPServer"), "http_server");
  assertEquals(snakeName("get-sum"), "get_sum");
  assertEquals(snakeName("2fa"), "_2fa");
  assertEquals(snakeName("日本語"), "_");
  assertEquals(snakeName("__proto__"), "proto");
});

Deno.test("assignNames() gives colliding and reserved names distinct valid identifiers", () => {
  const names = typescriptFunctionNames(["a_b", "a-b", "delete", "then", "callMCPTool", "2fa"]);
  assertEquals(Object.fromEntries(names), {
    "a-b": "aB",
    "a_b": "aB_2",
    "delete": "delete_",
    "then": "then_",
    "callMCPTool": "callMCPTool_",
    "2fa": "_2fa",
  });
  const python = assignNames(["class", "list", "Class", "print"], {
    base: snakeName,
    reserved: PYTHON_RESERVED,
  });
  assertEquals(Object.fromEntries(python), {
    "Class": "class_",
    "class": "class__2",
    "list": "list_",
    "print": "print_",
  });
  // Modules are files: unique without regard to case, and stable across runs.
  const modules = moduleNames(["B", "b", "con"], new Map([["b", "b"]]));
  assertEquals(Object.fromEntries(modules), { b: "b", B: "b_2", con: "con_" });
  for (const id of [...names.values(), ...python.values()]) {
    assertMatch(id, /^[A-Za-z_][A-Za-z0-9_]*$/);
    assert(!TYPESCRIPT_RESERVED.has(id) && !PYTHON_RESERVED.has(id), id);
  }
});

Deno.test("generateTypescript() and generatePython() do not depend on the order of the tools", () => {
  const tools = [
    { name: "b", description: "B", inputSchema: { type: "object" } },
    { name: "a", description: "A", inputSchema: { type: "object" } },
  ];
  assertEquals(generateTypescript("s", tools), generateTypescript("s", [...tools].reverse()));
  assertEquals(generatePython("s", tools), generatePython("s", [...tools].reverse()));
  assertEquals(proxyName("a"), "a");
  assertMatch(generateTypescript("s", tools), /export async function a\(args\?: AInput\)/);
});

Deno.test("pythonString() escapes quotes, backslashes, line breaks and invisible characters", () => {
  assertEquals(pythonString('a"""b\\'), '"a\\"\\"\\"b\\\\"');
  assertEquals(pythonString("x\ny\r\u2028\u202e\0"), '"x\\ny\\r\\u2028\\u202e\\x00"');
});

Deno.test("docCommentLines() and stringLiteral() keep untrusted text inside comments and strings", () => {
  assertEquals(docCommentLines("Reads */ a file\r\nthen\u2028more\u202e\0 end\n\n"), [
    "Reads *\\/ a file",
    "then",
    "more   end",
  ]);
  assertEquals(docCommentLines("**/"), ["**\\/"]);
  assertEquals(docCommentLines("x".repeat(5000), { maxChars: 10 }), ["x".repeat(10) + "…"]);
  assertEquals(docCommentLines(""), []);
  assertEquals(stringLiteral('a\u2028`${b}`"'), '"a\\u2028\\u0060${b}\\u0060\\""');
});

Deno.test("buildWheel() makes a pure-Python wheel that readWheels() loads", async () => {
  const dir = await Deno.makeTempDir({ prefix: "ce-wheel-" });
  try {
    const bytes = buildWheel({ "mcp_wrappers/m.py": "x = 1\n" }, {
      distribution: "mcp_wrappers_m",
      version: "0.0.0",
    });
    assertEquals(
      bytes,
      buildWheel({ "mcp_wrappers/m.py": "x = 1\n" }, {
        distribution: "mcp_wrappers_m",
        version: "0.0.0",
      }),
    );
    assertEquals(wheelModules(bytes), ["mcp_wrappers"]);
    await Deno.writeFile(join(dir, "mcp_wrappers_m-0.0.0-py3-none-any.whl"), bytes);
    const warnings: string[] = [];
    const wheels = await readWheels([dir], {
      log: { ...SILENT_LOG, warn: (m) => warnings.push(m) },
    });
    assertEquals(wheels.map((wheel) => wheel.name), ["mcp_wrappers_m-0.0.0-py3-none-any.whl"]);
    assertEquals(warnings, []);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("wrappers generates checked TypeScript and importable Python for server-everything, -filesystem and -memory", async (t) => {
  const home = await Deno.makeTempDir({ prefix: "ce-wrappers-home-" });
  const out = join(home, "wrappers");
  const files = join(home, "files");
  await Deno.mkdir(files);
  await Deno.writeTextFile(join(files, "hello.txt"), "hello from a file");
  const config = await writeMcpConfig(home, {
    everything: npmServer(EVERYTHING),
    memory: npmServer(MEMORY, { env: { MEMORY_FILE_PATH: join(home, "memory.jsonl") } }),
    filesystem: npmServer(FILESYSTEM, { args: [files] }),
  });
  try {
    await t.step("the command writes one module per server and language", async () => {
      const output = await wrappersCli(home, ["--config", config, "--out", out]);
      assertEquals(output.code, 0, output.stdout + output.stderr);
      for (const server of ["everything", "filesystem", "memory"]) {
        assertMatch(output.stdout, new RegExp(`${server}\\s+${server}\\s+\\d+ tools\\s+written`));
        await Deno.stat(join(out, "typescript", `${server}.ts`));
        await Deno.stat(join(out, "python", "mcp_wrappers", `${server}.py`));
        await Deno.stat(join(out, "python", `mcp_wrappers_${server}-0.0.0-py3-none-any.whl`));
      }
      assertMatch(output.stdout, /10 files written, 0 unchanged/);
    });

    await t.step("the TypeScript wrappers pass deno check", async () => {
      const output = await run(
        [
          "check",
          "--no-config",
          ...["everything", "filesystem", "memory"].map((s) => join(out, "typescript", `${s}.ts`)),
        ],
        home,
      );
      assertEquals(output.code, 0, output.stderr);
      const memory = await Deno.readTextFile(join(out, "typescript", "memory.ts"));
      assertMatch(
        memory,
        /export async function createEntities\(args: CreateEntitiesInput\): Promise<CreateEntitiesOutput>/,
      );
      assertMatch(memory, /\/\*\* The name of the entity \*\//);
    });

    const server = await serveWrappers(home, config, out);
    try {
      await t.step(
        "run_typescript code imports the wrappers and calls the real tools",
        async () => {
          const url = (name: string) => pathToFileURL(join(out, "typescript", `${name}.ts`)).href;
          const result = await server.runTs(
            [
              `import { createEntities, readGraph } from "${url("memory")}";`,
              `import { getSum } from "${url("everything")}";`,
              `import { readTextFile } from "${url("filesystem")}";`,
              "await createEntities({",
              '  entities: [{ name: "from-typescript", entityType: "test", observations: ["typed"] }],',
              "});",
              "const graph = await readGraph();",
              "return {",
              "  names: graph.entities.map((entity) => entity.name),",
              "  sum: await getSum({ a: 2, b: 3 }),",
              `  file: await readTextFile({ path: ${JSON.stringify(join(files, "hello.txt"))} }),`,
              "};",
            ].join("\n"),
            { permissions: { read: [join(out, "typescript")] } },
          );
          assertEquals(result.isError, false, describe(result));
          const value = result.returnValue as { names: string[]; sum: unknown; file: unknown };
          assertEquals(value.names, ["from-typescript"]);
          assertMatch(JSON.stringify(value.sum), /\b5\b/);
          assertEquals(value.file, { content: "hello from a file" });
          assertEquals(result.toolCalls.map((call) => call.name), [
            "mcp__memory__create_entities",
            "mcp__memory__read_graph",
            "mcp__everything__get-sum",
            "mcp__filesystem__read_text_file",
          ]);
        },
      );

      await t.step("without read permission for the directory the import fails", async () => {
        const url = pathToFileURL(join(out, "typescript", "memory.ts")).href;
        const result = await server.runTs(`import { readGraph } from "${url}";\nreturn 1;`);
        assertEquals(result.isError, true, describe(result));
        assertMatch(result.error?.message ?? "", /read access|NotCapable|Requires read/i);
      });

      await t.step("run_python code imports the wrappers and calls the real tools", async () => {
        const result = await server.runPy(
          [
            "from mcp_wrappers import everything, memory",
            "await memory.create_entities(",
            '    entities=[{"name": "from-python", "entityType": "test", "observations": ["typed"]}]',
            ")",
            "graph = await memory.read_graph()",
            "total = await everything.get_sum(a=2, b=3)",
            "{",
            '    "names": sorted(entity["name"] for entity in graph["entities"]),',
            '    "sum": total,',
            '    "doc": memory.create_entities.__doc__.splitlines()[0],',
            '    "hints": str(memory.delete_entities.__annotations__["entityNames"]),',
            "}",
          ].join("\n"),
        );
        assertEquals(result.isError, false, describe(result));
        const value = result.returnValue as Record<string, unknown>;
        assertEquals(value.names, ["from-python", "from-typescript"]);
        assertMatch(JSON.stringify(value.sum), /\b5\b/);
        assertEquals(value.doc, "Create multiple new entities in the knowledge graph");
        assertEquals(value.hints, "list[str]");
      });
    } finally {
      await server.close();
    }
  } finally {
    await Deno.remove(home, { recursive: true });
  }
});

/** Tools whose names and descriptions try to break out of identifiers, comments and strings. */
const HOSTILE = [
  {
    name: "delete",
    description: 'Ends a comment */ console.log("pwned"); /* and `${process.exit(3)}`',
    properties: {
      "class": "A */ property",
      "a-b": 'Quotes """ inside',
      "a_b": "Collides with a-b",
    },
  },
  { name: "a-b", description: 'Python """\nimport os\nos.system("echo pwned")\n"""' },
  { name: "a_b", description: "Backticks `${globalThis.pwned = 1}` and a backslash at the end \\" },
  {
    name: "class",
    description:
      "Line\u2028separator and\u2029paragraph,\r\ncarriage return\n// a line comment\n# a Python comment",
  },
  { name: "__proto__", description: "*/ } export const pwned = 1; /*" },
  { name: "then", description: "A module that exported then would be a thenable" },
  { name: "callMCPTool", description: "Would shadow the global the wrappers call" },
  { name: "2fa", description: "Starts with a digit" },
  { name: "list", description: "Would shadow a Python builtin" },
  { name: "lambda", description: "A Python keyword" },
  { name: 'x"*/y', description: 'Ends with a quote"' },
];

/** What the fixture always lists, besides the extra tools. */
const FIXTURE_TS = ["addTool", "fail", "getThingV2", "pid", "slow"];
const FIXTURE_PY = ["add_tool", "fail", "get_thing_v2", "pid", "slow"];

Deno.test("wrappers keeps hostile tool names and descriptions out of the generated code", async (t) => {
  const home = await Deno.makeTempDir({ prefix: "ce-wrappers-hostile-" });
  const out = join(home, "wrappers");
  const config = await writeMcpConfig(home, { hostile: fixtureEntry(HOSTILE) });
  const module = join(out, "typescript", "hostile.ts");
  try {
    const output = await wrappersCli(home, ["--config", config, "--out", out]);
    assertEquals(output.code, 0, output.stdout + output.stderr);

    await t.step("the TypeScript passes deno check", async () => {
      const check = await run(["check", "--no-config", module], home);
      assertEquals(check.code, 0, check.stderr);
    });

    await t.step(
      "importing it defines exactly the expected exports and does nothing else",
      async () => {
        const probe = join(home, "probe.ts");
        await Deno.writeTextFile(
          probe,
          [
            "const calls: unknown[] = [];",
            "Object.assign(globalThis, { callMCPTool: (...args: unknown[]) => calls.push(args) });",
            `const module = await import(${JSON.stringify(pathToFileURL(module).href)});`,
            "console.log(JSON.stringify({",
            "  exports: Object.keys(module).sort(),",
            "  functions: Object.values(module).every((value) => typeof value === 'function'),",
            "  calls: calls.length,",
            "  pwned: (globalThis as Record<string, unknown>).pwned ?? null,",
            "}));",
          ].join("\n"),
        );
        const result = await run(
          ["run", "--no-prompt", "--no-config", `--allow-read=${home}`, probe],
          home,
        );
        assertEquals(result.code, 0, result.stderr);
        assertEquals(result.stderr, "");
        assertEquals(JSON.parse(result.stdout), {
          exports: [
            ...FIXTURE_TS,
            "_2fa",
            "aB",
            "aB_2",
            "callMCPTool_",
            "class_",
            "delete_",
            "lambda",
            "list",
            "proto",
            "then_",
            "xY",
          ].sort(),
          functions: true,
          calls: 0,
          pwned: null,
        });
      },
    );

    await t.step("every description is inside a comment, whole", async () => {
      const source = await Deno.readTextFile(module);
      // Outside comments and string literals, no description text may appear.
      const code = source.replace(/\/\*[\s\S]*?\*\//g, "").replace(/"(?:[^"\\\n]|\\.)*"/g, '""');
      for (const needle of ["pwned", "process.exit", "import os", "# a Python comment"]) {
        assert(!code.includes(needle), `"${needle}" escaped into code:\n${code}`);
      }
      assertMatch(source, /Ends a comment \*\\\/ console\.log\("pwned"\); \/\*/);
    });

    const server = await serveWrappers(home, config, out);
    try {
      await t.step("run_typescript calls the hostile tools through the wrappers", async () => {
        const result = await server.runTs(
          [
            `import * as hostile from "${pathToFileURL(module).href}";`,
            'const deleted = await hostile.delete_({ class: "c", "a-b": "dash", a_b: "under" });',
            "const quoted = await hostile.xY();",
            "const proto = await hostile.proto();",
            "return [deleted, quoted, proto].map((text) => JSON.parse(text as string));",
          ].join("\n"),
          { permissions: { read: [join(out, "typescript")] } },
        );
        assertEquals(result.isError, false, describe(result));
        assertEquals(result.returnValue, [
          { tool: "delete", args: { class: "c", "a-b": "dash", a_b: "under" } },
          { tool: 'x"*/y', args: {} },
          { tool: "__proto__", args: {} },
        ]);
      });

      await t.step("run_python imports the module, with every docstring verbatim", async () => {
        const result = await server.runPy(
          [
            "import json",
            "from mcp_wrappers import hostile",
            "docs = {name: getattr(hostile, name).__doc__ for name in hostile.__all__}",
            'deleted = await hostile.delete(class_="c", a_b="under", a_b_2="dash")',
            "quoted = await hostile.x_y()",
            '{"all": hostile.__all__, "docs": docs,',
            ' "calls": [json.loads(deleted), json.loads(quoted)]}',
          ].join("\n"),
        );
        assertEquals(result.isError, false, describe(result));
        const value = result.returnValue as {
          all: string[];
          docs: Record<string, string>;
          calls: unknown[];
        };
        assertEquals(
          value.all,
          [
            ...FIXTURE_PY,
            "_2fa",
            "a_b",
            "a_b_2",
            "call_mcp_tool_",
            "class_",
            "delete",
            "lambda_",
            "list_",
            "proto",
            "then",
            "x_y",
          ].sort(),
        );
        const python = new Map(
          HOSTILE.map((tool) => [assignPython(tool.name), tool.description]),
        );
        for (const [name, description] of python) {
          const doc = value.docs[name];
          assert(doc !== undefined, `no function ${name}`);
          assert(
            doc.startsWith(`${description}\n\nCalls `),
            `docstring of ${name} is not verbatim: ${JSON.stringify(doc)}`,
          );
        }
        assertEquals(value.calls, [
          { tool: "delete", args: { class: "c", "a-b": "dash", a_b: "under" } },
          { tool: 'x"*/y', args: {} },
        ]);
      });
    } finally {
      await server.close();
    }
  } finally {
    await Deno.remove(home, { recursive: true });
  }
});

function assignPython(tool: string): string {
  const names = assignNames(HOSTILE.map((entry) => entry.name), {
    base: snakeName,
    reserved: PYTHON_RESERVED,
  });
  return names.get(tool)!;
}

Deno.test("wrappers rewrites only the servers whose schemas changed", async () => {
  const home = await Deno.makeTempDir({ prefix: "ce-wrappers-manifest-" });
  const out = join(home, "wrappers");
  const alpha = fixtureEntry([{ name: "alpha-tool", description: "Alpha" }]);
  const beta = (description: string) =>
    fixtureEntry([{ name: "beta-tool", description, properties: { q: "Query" } }]);
  try {
    let config = await writeMcpConfig(home, { alpha, beta: beta("Beta, first version") });
    const first = await wrappersCli(home, ["--config", config, "--out", out]);
    assertEquals(first.code, 0, first.stdout + first.stderr);
    assertMatch(first.stdout, /7 files written, 0 unchanged/);
    const manifest = JSON.parse(await Deno.readTextFile(join(out, "manifest.json")));
    assertEquals(Object.keys(manifest.servers), ["alpha", "beta"]);
    assertMatch(manifest.servers.beta.hash, /^[0-9a-f]{64}$/);
    const before = await mtimes(out);

    const second = await wrappersCli(home, ["--config", config, "--out", out]);
    assertEquals(second.code, 0, second.stdout + second.stderr);
    assertMatch(second.stdout, /0 files written, 7 unchanged/);
    assertEquals(await mtimes(out), before);

    const betaFiles = [
      join(out, "typescript", "beta.ts"),
      join(out, "python", "mcp_wrappers", "beta.py"),
      join(out, "python", "mcp_wrappers_beta-0.0.0-py3-none-any.whl"),
    ];
    const oldBeta = await Promise.all(betaFiles.map((file) => Deno.readFile(file)));
    config = await writeMcpConfig(home, { alpha, beta: beta("Beta, second version") });
    const third = await wrappersCli(home, ["--config", config, "--out", out]);
    assertEquals(third.code, 0, third.stdout + third.stderr);
    assertMatch(third.stdout, /alpha\s+alpha\s+\d+ tools\s+unchanged/);
    assertMatch(third.stdout, /beta\s+beta\s+\d+ tools\s+written/);
    assertMatch(third.stdout, /4 files written, 3 unchanged/);
    const after = await mtimes(out);
    for (const [path, mtime] of before) {
      if (path.includes("alpha")) assertEquals(after.get(path), mtime, path);
    }
    for (const [index, file] of betaFiles.entries()) {
      assert(
        (await Deno.readFile(file)).join() !== oldBeta[index].join(),
        `${file} was not regenerated`,
      );
    }
    assertMatch(await Deno.readTextFile(betaFiles[0]), /Beta, second version/);
    assert(
      JSON.parse(await Deno.readTextFile(join(out, "manifest.json"))).servers.beta.hash !==
        manifest.servers.beta.hash,
    );

    config = await writeMcpConfig(home, { alpha });
    const fourth = await wrappersCli(home, ["--config", config, "--out", out]);
    assertEquals(fourth.code, 0, fourth.stdout + fourth.stderr);
    assertMatch(fourth.stdout, /beta\s+beta\s+-\s+removed/);
    for (const file of betaFiles) {
      assert(!(await Deno.stat(file).then(() => true, () => false)), `${file} is still there`);
    }

    // A server that cannot be reached keeps its earlier files, and the run reports it.
    const kept = await mtimes(out);
    config = await writeMcpConfig(home, {
      alpha: { command: "/nonexistent/ce-missing-mcp-server" },
    });
    const fifth = await wrappersCli(home, ["--config", config, "--out", out]);
    assertEquals(fifth.code, 1, fifth.stdout + fifth.stderr);
    assertMatch(fifth.stdout, /alpha\s+alpha\s+-\s+failed: /);
    assertEquals(await mtimes(out), kept);
  } finally {
    await Deno.remove(home, { recursive: true });
  }
});
