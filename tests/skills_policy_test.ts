/**
 * A skill runs under its caller's policy, end to end through a real client: a skill saved by a
 * permissive run, called by a narrower one, fails exactly as the caller's own code would (tools
 * outside allowedTools, network hosts outside the grant), in the caller's language and in the
 * other one. Also: saving turned off, the nesting bound, and a timeout inside a nested run.
 *
 * @module
 */
import { join } from "node:path";
import {
  assertEquals,
  assertFails,
  assertMatch,
  assertReturns,
  describeResult,
  type RunResult,
} from "./_assert.ts";
import { generateToken } from "../src/server/http_auth.ts";
import { EVERYTHING } from "./_pins.ts";
import { npmServer } from "./_env.ts";
import { assertNoSandboxes, leftovers } from "./_proc.ts";
import { withTempDir } from "./_fs.ts";
import { closeAndCheck, type ServerHarness, startServer } from "./_stdio_server.ts";
import { startHttpServer } from "./_http_server.ts";
import { callRun, connect } from "./_client.ts";
import { startCounter } from "./_counter.ts";

function skillsSettings(dir: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { projectDir: join(dir, "project-skills"), userDir: join(dir, "user-skills"), ...extra };
}

function saveTs(skill: Record<string, unknown>): string {
  return `return await skills.save(${JSON.stringify({ description: "A test skill", ...skill })});`;
}

function assertSaved(result: RunResult, ref: string): void {
  assertEquals(result.ok, true, describeResult(result));
  assertEquals((result.returnValue as { ref?: string }).ref, ref, describeResult(result));
}

/** Saves a skill of a new name through a run on `server`, asserting that it became version 1. */
async function saveNew(
  server: Pick<ServerHarness, "runTs">,
  skill: { name: string; [field: string]: unknown },
): Promise<void> {
  assertSaved(await server.runTs(saveTs(skill)), `${skill.name}@1`);
}

const REFUSED = /^Cannot call tool "mcp__everything__echo": it is not in allowedTools/;

Deno.test("skills: a skill fails as its caller's own code would outside the caller's allowedTools and network grant", async (t) => {
  const counter = startCounter();
  try {
    await withTempDir("ce-skills-policy-", async (dir) => {
      const host = `127.0.0.1:${counter.port}`;
      const url = `http://${host}/`;
      const server = await startServer({
        settings: { skills: skillsSettings(dir), permissions: { net: [host] } },
        upstream: { everything: npmServer(EVERYTHING) },
      });
      try {
        await t.step("a permissive run saves skills that call a tool and fetch", async () => {
          await saveNew(server, {
            name: "echo-ts",
            code: "return await callMCPTool('mcp__everything__echo', { message: args.m });",
          });
          await saveNew(server, {
            name: "echo-py",
            language: "python",
            code: "await call_mcp_tool('mcp__everything__echo', {'message': args['m']})",
          });
          await saveNew(server, {
            name: "fetch-ts",
            code: "return await (await fetch(args.url)).text();",
          });
          const allowed = await server.runTs(
            `return [await skills.echo_ts({ m: "a" }), await skills.echo_py({ m: "b" }),` +
              ` await skills.fetch_ts({ url: ${JSON.stringify(url)} })];`,
            { permissions: { net: [host] } },
          );
          assertReturns(allowed, ["Echo: a", "Echo: b", "pong"]);
          assertEquals(counter.requests.length, 1);
        });

        const narrow = { allowedTools: ["mcp__memory__*"] };
        await t.step(
          "TypeScript caller: its own call, the TypeScript skill and the Python skill are refused alike",
          async () => {
            const own = await server.runTs(
              'return await callMCPTool("mcp__everything__echo", { message: "x" });',
              narrow,
            );
            assertFails(own, "ToolPolicyError", REFUSED);
            const same = await server.runTs('return await skills.echo_ts({ m: "x" });', narrow);
            assertFails(same, "ToolPolicyError", REFUSED);
            const other = await server.runTs('return await skills.echo_py({ m: "x" });', narrow);
            assertFails(other, "ToolPolicyError", REFUSED);
            for (const result of [own, same, other]) {
              assertEquals(result.toolCalls.map((c) => [c.name, c.ok]), [[
                "mcp__everything__echo",
                false,
              ]]);
            }
          },
        );

        await t.step("Python caller: the same, the other way round", async () => {
          const own = await server.runPy(
            'await call_mcp_tool("mcp__everything__echo", {"message": "x"})',
            narrow,
          );
          assertFails(own, "ToolPolicyError", REFUSED);
          const same = await server.runPy('await skills.echo_py(m="x")', narrow);
          assertFails(same, "ToolPolicyError", REFUSED);
          const other = await server.runPy('await skills.echo_ts(m="x")', narrow);
          assertFails(other, "ToolPolicyError", REFUSED);
        });

        await t.step(
          "a caller without the network grant: the fetch is refused as its own would be",
          async () => {
            const fetchCode = `return await (await fetch(${JSON.stringify(url)})).text();`;
            const own = await server.runTs(fetchCode);
            assertEquals(own.ok, false, describeResult(own));
            const type = own.error!.type;
            assertEquals(type, "PermissionError", describeResult(own));
            assertMatch(own.error!.traceback ?? "", /^PermissionError: Requires net access/);
            const same = await server.runTs(
              `return await skills.fetch_ts({ url: ${JSON.stringify(url)} });`,
            );
            assertFails(same, type);
            // A Python caller has no grant at all: its TypeScript skill runs with none either.
            const other = await server.runPy(`await skills.fetch_ts(url=${JSON.stringify(url)})`);
            assertFails(other, type);
            // A grant of the other host only does not reach this one.
            const elsewhere = await server.runTs(
              `return await skills.fetch_ts({ url: ${JSON.stringify(url)} });`,
              { permissions: { net: ["example.com"] } },
            );
            assertEquals(elsewhere.ok, false, describeResult(elsewhere));
            assertEquals(counter.requests.length, 1, "only the permissive run reached the host");
          },
        );
      } finally {
        await closeAndCheck(server);
      }
    });
  } finally {
    await counter.close();
  }
});

Deno.test("skills: skills.save is refused with SkillSaveDisabled when skills.save is off", async () => {
  await withTempDir("ce-skills-off-", async (dir) => {
    const server = await startServer({
      settings: { skills: skillsSettings(dir, { save: "off" }) },
    });
    try {
      const ts = await server.runTs(saveTs({ name: "nope", code: "return 1;" }));
      assertFails(ts, "SkillSaveDisabled", /skills\.save/);
      const py = await server.runPy(
        'await skills.save(name="nope", description="d", code="1")',
      );
      assertFails(py, "SkillSaveDisabled", /skills\.save/);
      // Nothing was written.
      assertEquals(await leftovers(join(dir, "user-skills")), []);
      assertEquals(await leftovers(join(dir, "project-skills")), []);
    } finally {
      await closeAndCheck(server);
    }
  });
});

Deno.test("skills: JSON.stringify, await and inspection of `skills` call no skill", async () => {
  await withTempDir("ce-skills-plain-", async (dir) => {
    const server = await startServer({ settings: { skills: skillsSettings(dir) } });
    try {
      // Each of these once sent a call for a skill named "toJSON" (or "then", "constructor"),
      // which failed the run with an unhandled rejection.
      const result = await server.runTs(`
        const text = JSON.stringify({ skills });
        const awaited = await Promise.resolve(skills);
        console.log(skills);
        return [text, awaited === skills, typeof skills.toJSON, typeof skills.then,
          typeof skills.constructor, typeof skills.page_issues, typeof skills["page-issues"]];`);
      assertEquals(result.ok, true, JSON.stringify(result));
      assertEquals(result.returnValue, [
        '{"skills":{}}',
        true,
        "undefined",
        "undefined",
        "undefined",
        "function",
        "function",
      ]);
    } finally {
      await closeAndCheck(server);
    }
  });
});

Deno.test("skills: recursion stops at the nesting bound, and a nested run's timeout ends its caller and its child", async (t) => {
  await withTempDir("ce-skills-nest-", async (dir) => {
    const server = await startServer({
      // No warm children, so that every sandbox process the test finds is one the runs left.
      settings: { skills: skillsSettings(dir), sandbox: { warmPool: 0 } },
    });
    try {
      await t.step("a skill that calls itself gets a LimitError", async () => {
        await saveNew(server, { name: "again", code: "return await skills.again({});" });
        const result = await server.runTs("return await skills.again({});");
        assertFails(result, "LimitError", /at most 4 levels deep/);
      });

      await t.step("an error inside a skill points at the skill's own line", async () => {
        await saveNew(server, {
          name: "boom",
          code: "const x = 1;\nthrow new RangeError(`boom ${x}`);",
        });
        await saveNew(server, {
          name: "boom-py",
          language: "python",
          code: "x = 1\nraise ValueError(f'boom {x}')",
        });
        const ts = await server.runTs("\n\nreturn await skills.boom({});");
        assertFails(ts, "RangeError", /^boom 1$/);
        assertMatch(ts.error?.traceback ?? "", /skill:boom@1\.ts:2:7[\s\S]*code\.ts:3:/);
        const py = await server.runPy("\nawait skills.boom_py()");
        assertFails(py, "ValueError", /^boom 1$/);
        assertMatch(
          py.error?.traceback ?? "",
          /File "code\.py", line 2[\s\S]*File "skill:boom-py@1", line 2/,
        );
      });

      await t.step(
        "a run has at most 4 nested runs at once; the fifth call is refused at once",
        async () => {
          await saveNew(server, {
            name: "slow-ts",
            code: "await new Promise((r) => setTimeout(r, 3_000));\nreturn args.i;",
          });
          const result = await server.runPy(`
import asyncio
outcomes = await asyncio.gather(*[skills.slow_ts(i=i) for i in range(6)], return_exceptions=True)
[o if isinstance(o, int) else type(o).__name__ for o in outcomes]`);
          assertEquals(result.ok, true, describeResult(result));
          const outcomes = result.returnValue as Array<number | string>;
          assertEquals(
            outcomes.filter((o) => typeof o === "number").length,
            4,
            describeResult(result),
          );
          assertEquals(
            outcomes.filter((o) => o === "LimitError").length,
            2,
            describeResult(result),
          );
          await assertNoSandboxes(server.tempDir, 15_000);
        },
      );

      await t.step("what a skill prints is the caller's output, in either language", async () => {
        await saveNew(server, {
          name: "say-ts",
          code: 'console.log("ts says", args.x);\nconsole.error("ts warns");\nreturn 1;',
        });
        await saveNew(server, {
          name: "say-py",
          language: "python",
          code: 'print("py says", args["x"])\n2',
        });
        const fromTs = await server.runTs(
          'console.log("before");\nconst a = await skills.say_ts({ x: 1 });\n' +
            "const b = await skills.say_py({ x: 2 });\nreturn a + b;",
        );
        assertReturns(fromTs, 3, { stdout: "before\nts says 1\npy says 2\n" });
        assertEquals(fromTs.stderr, "ts warns\n");
        const fromPy = await server.runPy(
          'print("before")\na = await skills.say_py(x=1)\nb = await skills.say_ts(x=2)\na + b',
        );
        assertReturns(fromPy, 3, { stdout: "before\npy says 1\nts says 2\n" });
        assertEquals(fromPy.stderr, "ts warns\n");
      });

      await t.step("a run that saves a new version calls the new one afterwards", async () => {
        const result = await server.runTs(`
          await skills.save({ name: "which", description: "d", code: "return 1;" });
          const first = await skills.which({});
          await skills.save({ name: "which", description: "d", code: "return 2;" });
          return [first, await skills.which({}), await skills.call("which@1", {})];`);
        assertReturns(result, [1, 2, 1]);
      });

      await t.step(
        "two skills that call each other across languages get a LimitError",
        async () => {
          await saveNew(server, { name: "ping", code: "return await skills.pong({});" });
          await saveNew(server, {
            name: "pong",
            language: "python",
            code: "await skills.ping()",
          });
          assertFails(
            await server.runTs("return await skills.ping({});"),
            "LimitError",
            /at most 4 levels deep/,
          );
          assertFails(
            await server.runPy("await skills.ping()"),
            "LimitError",
            /at most 4 levels deep/,
          );
          await assertNoSandboxes(server.tempDir, 15_000);
        },
      );

      await t.step(
        "a Python skill that never ends stops at its TypeScript caller's timeout",
        async () => {
          await saveNew(server, {
            name: "spin-py",
            language: "python",
            code: "while True:\n    pass",
          });
          const result = await server.runTs("return await skills.spin_py({});", {
            timeoutMs: 4_000,
          });
          assertFails(result, "TimeoutError", /after 4000 ms/);
          await assertNoSandboxes(server.tempDir, 15_000);
        },
      );

      await t.step(
        "a TypeScript skill that never ends stops at its Python caller's timeout",
        async () => {
          await saveNew(server, { name: "spin-ts", code: "while (true) {}" });
          const result = await server.runPy("await skills.spin_ts()", { timeoutMs: 4_000 });
          assertFails(result, "TimeoutError", /after 4000 ms/);
          await assertNoSandboxes(server.tempDir, 15_000);
          assertReturns(await server.runTs("return 1 + 1;"), 2);
        },
      );
    } finally {
      await closeAndCheck(server);
    }
  });
});

Deno.test("skills over HTTP: a principal's saves are its own; with skills.save admin only skills.admins save", async () => {
  await withTempDir("ce-skills-http-", async (dir) => {
    const alice = generateToken();
    const bob = generateToken();
    const tokensFile = join(dir, "tokens");
    await Deno.writeTextFile(tokensFile, `alice ${alice}\nbob ${bob}\n`, { mode: 0o600 });
    const start = (save: string) =>
      startHttpServer({
        settings: {
          http: { tokensFile },
          skills: skillsSettings(dir, {
            save,
            admins: ["alice"],
            sharedDir: join(dir, "shared-skills"),
            principalsDir: join(dir, "principal-skills"),
          }),
        },
      });
    const runAs = (server: { url: URL }) => async (token: string, code: string) => {
      const client = await connect(server.url, { token });
      try {
        return await callRun(client, "run_typescript", code);
      } finally {
        await client.close();
      }
    };
    const open = await start("on");
    try {
      const run = runAs(open);
      assertSaved(await run(bob, saveTs({ name: "bobs", code: "return 'bob';" })), "bobs@1");
      assertReturns(await run(bob, "return await skills.bobs({});"), "bob");
      // Bob's save went to his own root: alice does not see it.
      assertFails(await run(alice, "return await skills.bobs({});"), "SkillNotFound");
      assertReturns(await run(alice, "return (await skills.list()).map((s) => s.name);"), []);
      // An admin's save goes to the shared root, which every principal sees.
      assertSaved(
        await run(alice, saveTs({ name: "alices", code: "return args.n + 1;" })),
        "alices@1",
      );
      assertReturns(await run(bob, "return await skills.alices({ n: 2 });"), 3);
    } finally {
      await open.close();
    }
    const adminOnly = await start("admin");
    try {
      const run = runAs(adminOnly);
      assertFails(
        await run(bob, saveTs({ name: "bobs", code: "return 'again';" })),
        "SkillSaveDisabled",
        /principal "http:bob"/,
      );
      assertSaved(
        await run(alice, saveTs({ name: "alices", code: "return args.n + 2;" })),
        "alices@2",
      );
      assertReturns(await run(bob, "return await skills.call('alices@1', { n: 2 });"), 3);
    } finally {
      await adminOnly.close();
    }
  });
});
