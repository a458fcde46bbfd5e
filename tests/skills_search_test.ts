/**
 * Saved skills in `search_tools` (the MCP tool) and `searchTools` / `search_tools` (in the
 * sandbox), beside the upstream tools and marked as skills, while `tools/list` stays the same size
 * with 0 and with 100 saved skills.
 *
 * @module
 */
import { join } from "node:path";
import { countTokens } from "gpt-tokenizer/encoding/o200k_base";
import type { Client } from "@modelcontextprotocol/client";
import { SettingsSchema } from "../src/config/settings.ts";
import { type SaveSkillInput, SkillStore } from "../src/skills/store.ts";
import { assert, assertEquals } from "./_assert.ts";
import { EVERYTHING } from "./_pins.ts";
import { npmServer } from "./_env.ts";
import { withUserDirs } from "./_fs.ts";
import { ADD as ADD_NUMBERS } from "./_skills.ts";
import { startServer } from "./_stdio_server.ts";

/** The shared add-numbers skill, with a description that the search's signature shows. */
const ADD: SaveSkillInput = {
  ...ADD_NUMBERS,
  description: "Adds two numbers and explains the sum",
};

function settingsFor(dirs: { project: string }) {
  return { projectDir: join(dirs.project, ".code-executor", "skills") };
}

function storeFor(dirs: { project: string; home: string }): SkillStore {
  return new SkillStore(SettingsSchema.parse({ skills: settingsFor(dirs) }).skills, {
    env: { HOME: dirs.home },
  });
}

/** 99 filler skills plus `add-numbers` at version 2: 100 names. */
async function seedHundred(store: SkillStore): Promise<void> {
  for (let i = 0; i < 99; i++) {
    await store.save({
      name: `report-${i}`,
      description: `Builds weekly report number ${i} from the issue tracker`,
      language: i % 2 === 0 ? "typescript" : "python",
      inputSchema: { type: "object", properties: { week: { type: "integer" } } },
      code: i % 2 === 0 ? "return args.week;" : "args['week']",
    });
  }
  await store.save({ ...ADD, code: "return args.a + args.b + 0;" });
  await store.save(ADD);
}

async function searchText(client: Client, query: string, detail?: string): Promise<string> {
  const result = await client.callTool({
    name: "search_tools",
    arguments: { query, ...(detail ? { detail } : {}) },
  });
  return (result.content as Array<{ text: string }>)[0].text;
}

async function toolsListTokens(client: Client): Promise<number> {
  return countTokens(JSON.stringify((await client.listTools()).tools));
}

Deno.test("tools/list is the same size with 0 and with 100 saved skills", async () => {
  await withUserDirs("skills-search-", async (dirs) => {
    const start = () =>
      startServer({
        home: dirs.home,
        sharedCache: true,
        settings: { skills: settingsFor(dirs) },
      });
    const empty = await start();
    let before: number;
    try {
      before = await toolsListTokens(empty.client);
      assert(!(await searchText(empty.client, "numbers")).includes("skill:"));
    } finally {
      await empty.close();
    }
    await seedHundred(storeFor(dirs));
    const full = await start();
    try {
      const after = await toolsListTokens(full.client);
      assert(Math.abs(after - before) <= 20, `tools/list: ${before} tokens, then ${after}`);
      assertEquals((await searchText(full.client, "numbers")).split("\n\n").length, 1);
    } finally {
      await full.close();
    }
  });
});

Deno.test("search_tools finds one skill among 100 beside upstream tools, marked as a skill", async () => {
  await withUserDirs("skills-search-", async (dirs) => {
    await seedHundred(storeFor(dirs));
    const server = await startServer({
      home: dirs.home,
      sharedCache: true,
      settings: { skills: settingsFor(dirs) },
      upstream: { everything: npmServer(EVERYTHING) },
    });
    try {
      const text = await searchText(server.client, "add numbers");
      const hits = text.split("\n\n");
      assertEquals(
        hits[0],
        "/** Adds two numbers and explains the sum */\n" +
          "skills.add_numbers(args: { a: number; b: number }): Promise<unknown>  // skill:add-numbers@2",
      );
      assert(hits.some((hit) => hit.includes("mcp__everything__")), text);
      const names = (await searchText(server.client, "sum", "names")).split("\n");
      assert(names.includes("skill:add-numbers@2"), `${names}`);
      assert(names.includes("mcp__everything__get-sum"), `${names}`);
      const schemas = (await searchText(server.client, "add-numbers", "schemas")).split("\n");
      assertEquals(JSON.parse(schemas[0]), {
        name: "skill:add-numbers@2",
        kind: "skill",
        description: ADD.description,
        inputSchema: ADD.inputSchema,
      });
      assertEquals(await searchText(server.client, "report-42", "names"), "skill:report-42@1");

      const ts = await server.runTs('return await searchTools("add numbers", 3);');
      assert(ts.ok, JSON.stringify(ts.error));
      const first = (ts.returnValue as Array<Record<string, unknown>>)[0];
      assertEquals(first.name, "skill:add-numbers@2");
      assertEquals(first.kind, "skill");
      assert(
        String(first.signature).includes("skills.add_numbers(args: { a: number; b: number })"),
      );
      const py = await server.runPy('(await search_tools("weekly report 7", 1))[0]["name"]');
      assert(py.ok, JSON.stringify(py.error));
      assertEquals(py.returnValue, "skill:report-7@1");
    } finally {
      await server.close();
    }
  });
});

Deno.test("searchTools finds saved skills in a run without any MCP server", async () => {
  await withUserDirs("skills-search-", async (dirs) => {
    await storeFor(dirs).save(ADD);
    const server = await startServer({
      home: dirs.home,
      sharedCache: true,
      settings: { skills: settingsFor(dirs) },
    });
    try {
      const ts = await server.runTs('return (await searchTools("numbers")).map((h) => h.name);');
      assert(ts.ok, JSON.stringify(ts.error));
      assertEquals(ts.returnValue, ["skill:add-numbers@1"]);
      assertEquals(await searchText(server.client, "numbers", "names"), "skill:add-numbers@1");
    } finally {
      await server.close();
    }
  });
});
