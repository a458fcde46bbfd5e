/**
 * The in-sandbox `skills` API end to end: a real server (`deno task start`) driven by the SDK
 * client, with server-everything and server-memory upstream. A skill saved by one run is found and
 * called by a later run on a fresh server process, from TypeScript (in the caller's child) and
 * from Python (a nested run), under the caller's policy.
 *
 * The skills directories are a temp directory of the test, never the checkout's or the user's.
 *
 * @module
 */
import { join } from "node:path";
import { assert, assertEquals, assertFails, assertReturns, describeResult } from "./_assert.ts";
import { EVERYTHING, MEMORY } from "./_pins.ts";
import { homeEnv, npmServer, ROOT, writeSettings } from "./_env.ts";
import { sandboxDirs } from "./_proc.ts";
import { describeRun, runCommand } from "./_command.ts";
import { withTempDir } from "./_fs.ts";
import { closeAndCheck, startServer } from "./_stdio_server.ts";

/** The skills settings of a test: both roots under its temp directory. */
function skillsSettings(dir: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    skills: {
      projectDir: join(dir, "project-skills"),
      userDir: join(dir, "user-skills"),
      ...extra,
    },
  };
}

function upstream(dir: string): Record<string, unknown> {
  return {
    everything: npmServer(EVERYTHING),
    memory: npmServer(MEMORY, { env: { MEMORY_FILE_PATH: join(dir, "memory.jsonl") } }),
  };
}

/** A program that chains the two servers: echo a text, remember it, read it back. */
const CHAIN = [
  "const echoed = await tools.everything.echo({ message: args.text });",
  "await callMCPTool('mcp__memory__create_entities', {",
  "  entities: [{ name: args.entity, entityType: 'note', observations: [echoed] }],",
  "});",
  "const graph = await callMCPTool('mcp__memory__open_nodes', { names: [args.entity] });",
  "return graph.entities.map((e) => `${e.name}: ${e.observations.join('; ')}`).join('\\n');",
].join("\n");

const CHAIN_SCHEMA = {
  type: "object",
  properties: {
    text: { type: "string", description: "What to echo and remember" },
    entity: { type: "string", description: "The memory entity to keep it under" },
  },
  required: ["text", "entity"],
  additionalProperties: false,
};

const CHAIN_CALLS = [
  ["mcp__everything__echo", true],
  ["mcp__memory__create_entities", true],
  ["mcp__memory__open_nodes", true],
];

Deno.test("skills: a skill saved by one run is found and called from TypeScript and Python on a fresh server", async (t) => {
  await withTempDir("ce-skills-run-", async (dir) => {
    const settings = skillsSettings(dir);
    let original: unknown;
    const first = await startServer({ settings, upstream: upstream(dir) });
    try {
      await t.step("the program works, then skills.save() keeps it as version 1", async () => {
        const ran = await first.runTs(`const args = { text: "hello", entity: "ada" };\n${CHAIN}`);
        assertReturns(ran, "ada: Echo: hello");
        original = ran.returnValue;
        const saved = await first.runTs(
          `return await skills.save(${
            JSON.stringify({
              name: "echo-remember",
              description: "Echoes a text through server-everything and remembers it in memory",
              inputSchema: CHAIN_SCHEMA,
              code: CHAIN,
            })
          });`,
        );
        assertEquals(saved.ok, true, describeResult(saved));
        const value = saved.returnValue as Record<string, unknown>;
        assertEquals([value.name, value.version, value.language], [
          "echo-remember",
          1,
          "typescript",
        ]);
      });
    } finally {
      await closeAndCheck(first);
    }

    const server = await startServer({ settings, upstream: upstream(dir) });
    try {
      await t.step("a fresh server finds it with search_tools", async () => {
        const found = await server.client.callTool({
          name: "search_tools",
          arguments: { query: "echo remember", detail: "names" },
        });
        const names = (found.content as Array<{ text: string }>)[0].text.split("\n");
        assert(names.includes("skill:echo-remember@1"), names.join(", "));
        const inCode = await server.runTs(
          'return (await searchTools("remember a text in memory", 5)).map((r) => r.name);',
        );
        assert(
          (inCode.returnValue as string[]).includes("skill:echo-remember@1"),
          describeResult(inCode),
        );
      });

      await t.step("and lists it", async () => {
        const listed = await server.runTs("return (await skills.list()).map((s) => s.ref);");
        assertReturns(listed, ["echo-remember@1"]);
        const fromPython = await server.runPy("[s['ref'] for s in await skills.list()]");
        assertReturns(fromPython, ["echo-remember@1"]);
      });

      await t.step("TypeScript calls it in its own child: the original result", async () => {
        const result = await server.runTs(
          'return [await skills.echo_remember({ text: "hello", entity: "ada" }),' +
            ' await skills["echo-remember"]({ text: "hello", entity: "ada" })];',
        );
        assertReturns(result, [original, original]);
        // The skill's tool calls are the caller's.
        assertEquals(result.toolCalls.map((c) => [c.name, c.ok]), [...CHAIN_CALLS, ...CHAIN_CALLS]);
      });

      await t.step(
        "Python calls it as a nested run: the same result, the calls its own",
        async () => {
          const result = await server.runPy(
            'a = await skills.echo_remember(text="hello", entity="ada")\n' +
              'b = await skills.call("echo-remember", {"text": "hi", "entity": "bob"})\n' +
              "[a, b]",
          );
          assertReturns(result, [original, "bob: Echo: hi"]);
          assertEquals(result.toolCalls.map((c) => [c.name, c.ok]), [
            ...CHAIN_CALLS,
            ...CHAIN_CALLS,
          ]);
        },
      );

      await t.step("bad arguments are a ToolValidationError naming the field", async () => {
        const ts = await server.runTs(
          'return await skills.echo_remember({ text: 5, entity: "x" });',
        );
        assertFails(ts, "ToolValidationError", /skill "echo-remember@1": "text" must be string/);
        assertEquals(ts.toolCalls, []);
        const py = await server.runPy('await skills.echo_remember(text="x")');
        assertFails(py, "ToolValidationError", /missing required argument "entity"/);
        const extra = await server.runPy('await skills.echo_remember(text="x", entity="y", z=1)');
        assertFails(extra, "ToolValidationError", /unexpected argument "z"/);
      });

      await t.step("saving the name again makes version 2, and name@1 still runs", async () => {
        const saved = await server.runPy(
          "await skills.save(name='echo-remember', description='Echoes a text, upper case'," +
            ` input_schema=${pythonLiteral(CHAIN_SCHEMA)}, language='typescript',` +
            ` code=${
              JSON.stringify(`return (await (async () => {\n${CHAIN}\n})()).toUpperCase();`)
            })`,
        );
        assertEquals(saved.ok, true, describeResult(saved));
        assertEquals((saved.returnValue as Record<string, unknown>).version, 2);
        const ts = await server.runTs(
          'const args = { text: "hello", entity: "ada" };\n' +
            "return [await skills.echo_remember(args), await skills.call('echo-remember@1', args)," +
            " (await skills.list()).map((s) => s.ref)];",
        );
        assertReturns(ts, ["ADA: ECHO: HELLO", original, ["echo-remember@2"]]);
        const py = await server.runPy(
          'await skills.call("echo-remember@1", text="hello", entity="ada")',
        );
        assertReturns(py, original);
      });
    } finally {
      await closeAndCheck(server);
    }
  });
});

/** A JSON value as a Python literal (true/false/null spelled the Python way). */
function pythonLiteral(value: unknown): string {
  return `__import__("json").loads(${JSON.stringify(JSON.stringify(value))})`;
}

Deno.test("main.ts run FILE.ts saves and calls skills in the settings' skills directories", async () => {
  await withTempDir("ce-skills-cli-", async (dir) => {
    const tempDir = join(dir, "tmp");
    await Deno.mkdir(tempDir);
    const env = {
      ...homeEnv(join(dir, "home"), { sharedCache: true }),
      TMPDIR: tempDir,
      CODE_EXECUTOR_CONFIG: await writeSettings(dir, skillsSettings(dir)),
    };
    const run = async (name: string, code: string) => {
      const file = join(dir, name);
      await Deno.writeTextFile(file, code);
      return await runCommand(Deno.execPath(), ["run", "-A", "main.ts", "run", "--json", file], {
        cwd: ROOT,
        env,
        clearEnv: true,
        timeoutMs: 120_000,
      });
    };
    const saved = await run(
      "save.ts",
      'return (await skills.save({ name: "twice", description: "Doubles", code: "return args.n * 2;" })).ref;',
    );
    assertEquals(saved.code, 0, describeRun(saved));
    assertEquals(JSON.parse(saved.stdout).returnValue, "twice@1");
    const called = await run("call.ts", "return await skills.twice({ n: 21 });");
    assertEquals(called.code, 0, describeRun(called));
    assertEquals(JSON.parse(called.stdout).returnValue, 42);
    assertEquals(await sandboxDirs(tempDir), []);
  });
});
