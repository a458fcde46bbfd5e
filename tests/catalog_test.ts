import { join } from "node:path";
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { EVERYTHING } from "./_pins.ts";
import { type CatalogEntry, ToolCatalog } from "../src/upstream/catalog.ts";
import { UpstreamPool } from "../src/upstream/pool.ts";
import { createLogger } from "../src/log.ts";
import type { UpstreamServerConfig } from "../src/config/server_entry.ts";

const log = createLogger("error");

function entry(inputSchema: Record<string, unknown>): CatalogEntry {
  return { server: "s", name: "t", fullName: "mcp__s__t", inputSchema };
}

Deno.test("ToolCatalog.validator() checks draft-07 schemas and names the bad argument", () => {
  const catalog = new ToolCatalog(new UpstreamPool([], { log }), { log, configHash: "x" });
  const validate = catalog.validator(entry({
    type: "object",
    properties: { a: { type: "number" }, mode: { enum: ["r", "w"] } },
    required: ["a"],
    additionalProperties: false,
  }));
  assertEquals(validate({ a: 1, mode: "r" }), undefined);
  assertMatch(validate({}) ?? "", /missing required argument "a"/);
  assertMatch(validate({ a: "x" }) ?? "", /"a" must be number/);
  assertMatch(validate({ a: 1, mode: "x" }) ?? "", /"mode" must be one of \["r","w"\]/);
  assertMatch(validate({ a: 1, extra: 1 }) ?? "", /unexpected argument "extra"/);
});

Deno.test("ToolCatalog.validator() checks 2020-12 schemas", () => {
  const catalog = new ToolCatalog(new UpstreamPool([], { log }), { log, configHash: "x" });
  const validate = catalog.validator(entry({
    $schema: "https://json-schema.org/draft/2020-12/schema",
    type: "object",
    properties: { pair: { type: "array", prefixItems: [{ type: "string" }, { type: "number" }] } },
  }));
  assertEquals(validate({ pair: ["a", 1] }), undefined);
  assertMatch(validate({ pair: [1, "a"] }) ?? "", /"pair\.0" must be string/);
});

Deno.test("ToolCatalog caches tool lists on disk per config hash", async () => {
  const dir = await Deno.makeTempDir({ prefix: "ce-catalog-" });
  const cacheFile = join(dir, "catalog.json");
  const good: UpstreamServerConfig = {
    name: "everything",
    transport: "stdio",
    command: Deno.execPath(),
    args: ["run", "-A", EVERYTHING],
    source: "test",
  };
  const livePool = new UpstreamPool([good], { log });
  try {
    const live = new ToolCatalog(livePool, { log, configHash: "h1", cacheFile });
    await live.ensure();
    const count = live.summary()[0].tools ?? 0;
    assert(count > 5, `expected tools, got ${count}`);
  } finally {
    await livePool.close();
  }
  // Same name and hash, but a command that cannot start: the listing must come from disk.
  const deadPool = new UpstreamPool([{ ...good, command: "/nonexistent/command" }], { log });
  try {
    const cached = new ToolCatalog(deadPool, { log, configHash: "h1", cacheFile });
    await cached.loadCache();
    assert(cached.entries().some((e) => e.fullName === "mcp__everything__get-sum"));
    const other = new ToolCatalog(deadPool, { log, configHash: "h2", cacheFile });
    await other.loadCache();
    assertEquals(other.entries(), []);
  } finally {
    await deadPool.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("ToolCatalog.search() ranks name matches above description matches", async () => {
  const pool = new UpstreamPool([{
    name: "everything",
    transport: "stdio",
    command: Deno.execPath(),
    args: ["run", "-A", EVERYTHING],
    source: "test",
  }], { log });
  try {
    const catalog = new ToolCatalog(pool, { log, configHash: "x" });
    const found = await catalog.search("sum");
    assertEquals(found[0].fullName, "mcp__everything__get-sum");
    assertEquals((await catalog.search("echo")).at(0)?.name, "echo");
    assertEquals(await catalog.search("zzzz-nothing"), []);
    assertEquals(await catalog.resolveProxy("everything", "getSum"), "mcp__everything__get-sum");
    assertEquals(await catalog.resolveProxy("everything", "get-sum"), "mcp__everything__get-sum");
  } finally {
    await pool.close();
  }
});
