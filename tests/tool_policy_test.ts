import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { globToRegExp, RateLimiter, ToolPolicy } from "../src/policy/tool_policy.ts";

const ALLOW_ALL = { allow: ["*"], deny: [] };

Deno.test("globToRegExp() matches any run of characters with *", () => {
  const re = globToRegExp("mcp__github__*");
  assert(re.test("mcp__github__create_issue"));
  assert(re.test("mcp__github__"));
  assert(!re.test("mcp__gitlab__create_issue"));
  assert(!re.test("xmcp__github__create_issue"), "the glob is anchored at the start");
  const middle = globToRegExp("mcp__*__read_*");
  assert(middle.test("mcp__filesystem__read_text_file"));
  assert(middle.test("mcp__my.server-1__read_"));
  assert(!middle.test("mcp__filesystem__write_file"));
  assert(globToRegExp("*").test(""));
});

Deno.test("globToRegExp() matches exactly one character with ?", () => {
  const re = globToRegExp("mcp__s?__tool");
  assert(re.test("mcp__s1__tool"));
  assert(re.test("mcp__s.__tool"));
  assert(!re.test("mcp__s__tool"));
  assert(!re.test("mcp__s12__tool"));
});

Deno.test("globToRegExp() takes regular expression metacharacters literally", () => {
  assert(globToRegExp("mcp__my.server-1__Get-Thing.v2").test("mcp__my.server-1__Get-Thing.v2"));
  assert(!globToRegExp("mcp__my.server__x").test("mcp__myXserver__x"), ". is not a wildcard");
  assert(globToRegExp("a+b").test("a+b"));
  assert(!globToRegExp("a+b").test("aab"), "+ is not a quantifier");
  const odd = "t^e$s{t}(x)|[y]\\z/";
  assert(globToRegExp(odd).test(odd));
  assert(!globToRegExp("(a|b)").test("a"), "| is not an alternation");
  assert(!globToRegExp("[ab]").test("a"), "[] is not a class");
  assert(globToRegExp("x.*").test("x.anything"), "* stays a wildcard after a literal dot");
  assert(!globToRegExp("x.*").test("xanything"));
});

Deno.test("globToRegExp() is case-sensitive and anchored at the end", () => {
  assert(!globToRegExp("mcp__Server__*").test("mcp__server__tool"));
  assert(!globToRegExp("mcp__s__tool").test("mcp__s__tool2"));
});

Deno.test("ToolPolicy.check() allows what the admin allows when allowedTools is absent", () => {
  const policy = new ToolPolicy(ALLOW_ALL);
  assertEquals(policy.check("mcp__everything__get-sum"), undefined);
  assertEquals(policy.requested, undefined);
});

Deno.test("ToolPolicy.check() lets tools.deny win over tools.allow and allowedTools", () => {
  const policy = new ToolPolicy(
    { allow: ["*"], deny: ["mcp__everything__echo", "mcp__*__delete_*"] },
    ["mcp__everything__*", "mcp__memory__*"],
  );
  assertEquals(
    policy.check("mcp__everything__echo"),
    `Cannot call tool "mcp__everything__echo": the admin's tools.deny rule "mcp__everything__echo" refuses it`,
  );
  assertMatch(
    policy.check("mcp__memory__delete_entities") ?? "",
    /tools\.deny rule "mcp__\*__delete_\*"/,
  );
  assertEquals(policy.check("mcp__everything__get-sum"), undefined);
  assertEquals(policy.check("mcp__memory__read_graph"), undefined);
});

Deno.test("ToolPolicy.check() keeps the admin's tools.allow as a ceiling allowedTools cannot lift", () => {
  const policy = new ToolPolicy({ allow: ["mcp__github__*", "mcp__memory__read_*"], deny: [] }, [
    "*",
  ]);
  assertEquals(policy.check("mcp__github__create_issue"), undefined);
  assertEquals(policy.check("mcp__memory__read_graph"), undefined);
  assertEquals(
    policy.check("mcp__memory__create_entities"),
    `Cannot call tool "mcp__memory__create_entities": it is not in the admin's tools.allow (mcp__github__*, mcp__memory__read_*); the admin adds it there`,
  );
  const empty = new ToolPolicy({ allow: [], deny: [] });
  assertMatch(empty.check("mcp__a__b") ?? "", /tools\.allow \(empty\)/);
});

Deno.test("ToolPolicy.check() narrows the admin's policy to allowedTools", () => {
  const policy = new ToolPolicy(ALLOW_ALL, ["mcp__memory__*", "mcp__everything__get-sum"]);
  assertEquals(policy.requested, ["mcp__memory__*", "mcp__everything__get-sum"]);
  assertEquals(policy.check("mcp__memory__read_graph"), undefined);
  assertEquals(policy.check("mcp__everything__get-sum"), undefined);
  assertEquals(
    policy.check("mcp__everything__echo"),
    `Cannot call tool "mcp__everything__echo": it is not in allowedTools (mcp__memory__*, mcp__everything__get-sum); add it, or a glob such as "mcp__everything__*", to allowedTools`,
  );
  const none = new ToolPolicy(ALLOW_ALL, []);
  assertMatch(none.check("mcp__a__b") ?? "", /not in allowedTools \(empty\)/);
});

Deno.test("ToolPolicy.check() suggests the server's glob for tool names with underscores", () => {
  const policy = new ToolPolicy(ALLOW_ALL, ["mcp__memory__*"]);
  assertMatch(
    policy.check("mcp__filesystem__read_text_file") ?? "",
    /a glob such as "mcp__filesystem__\*", to allowedTools$/,
  );
  assertMatch(
    policy.check("mcp__my.server-1__Get-Thing.v2") ?? "",
    /a glob such as "mcp__my\.server-1__\*", to allowedTools$/,
  );
});

Deno.test("RateLimiter.take() allows perMinute calls per key in a sliding minute", () => {
  const limiter = new RateLimiter(2);
  assertEquals(limiter.take("a", 0), undefined);
  assertEquals(limiter.take("a", 10_000), undefined);
  assertEquals(limiter.take("a", 30_000), 30_000, "the oldest call leaves the window at 60 s");
  assertEquals(limiter.take("b", 30_000), undefined, "keys are counted apart");
  assertEquals(limiter.take("a", 59_999), 1);
  assertEquals(limiter.take("a", 60_000), undefined, "the call at 0 has left the window");
  assertEquals(limiter.take("a", 65_000), 5_000, "the call at 10 s leaves at 70 s");
  assertEquals(limiter.take("a", 70_000), undefined);
});

Deno.test("RateLimiter.take() does not count refused calls", () => {
  const limiter = new RateLimiter(1);
  assertEquals(limiter.take("s", 0), undefined);
  for (let t = 1_000; t < 60_000; t += 1_000) assertEquals(limiter.take("s", t), 60_000 - t);
  assertEquals(limiter.take("s", 60_000), undefined);
});

Deno.test("RateLimiter.take() with 0 per minute is unlimited", () => {
  const limiter = new RateLimiter(0);
  for (let i = 0; i < 1_000; i++) assertEquals(limiter.take("s", 0), undefined);
});
