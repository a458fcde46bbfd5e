import { join } from "node:path";
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { EVERYTHING } from "./_pins.ts";
import { npmServer } from "./_env.ts";
import { startServer } from "./_stdio_server.ts";
import { AuditLog } from "../src/policy/audit.ts";
import { redactText } from "../src/redact.ts";
import { sha256Hex } from "../src/_util.ts";
import { resolveSettings } from "../src/config/settings.ts";
import { Executor } from "../src/exec/executor.ts";
import { createLogger, type Logger } from "../src/log.ts";

function capturingLogger(): Logger & { warnings: string[] } {
  const warnings: string[] = [];
  return {
    warnings,
    debug() {},
    info() {},
    warn: (m) => warnings.push(m),
    error: (m) => warnings.push(m),
  };
}

async function readRecords(path: string): Promise<Array<Record<string, unknown>>> {
  const text = await Deno.readTextFile(path);
  return text.trim().split("\n").map((line) => JSON.parse(line));
}

Deno.test("redactText() hides API keys, bearer tokens, URL passwords and private keys", () => {
  const cases: Array<[string, RegExp]> = [
    ["key sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123", /sk-ant/],
    ["token ghp_abcdefghijklmnopqrstuvwxyz0123456789", /ghp_/],
    ["Authorization: Bearer abc.def-ghi_jkl123456", /abc\.def/],
    ["postgres://admin:hunter2secret@db.example.com/app", /hunter2/],
    ["aws AKIAIOSFODNN7EXAMPLE", /AKIAIOSFODNN7EXAMPLE/],
    ['{"password": "correct horse battery"}', /correct/],
    ["api_key=0123456789abcdef", /0123456789abcdef/],
    ["-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----", /MIIEow/],
    ["jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N", /dozjg/],
  ];
  for (const [text, secret] of cases) {
    const redacted = redactText(text);
    assert(!secret.test(redacted), `not redacted: ${redacted}`);
    assertMatch(redacted, /\[REDACTED\]/);
  }
  assertEquals(redactText("plain text with no secrets"), "plain text with no secrets");
});

Deno.test("AuditLog writes redacted JSONL records to a 0600 file and rotates by size", async () => {
  const dir = await Deno.makeTempDir({ prefix: "ce-audit-" });
  try {
    const path = join(dir, "nested", "audit.jsonl");
    const audit = new AuditLog({ path, maxBytes: 600, maxFiles: 3, log: createLogger("error") });
    audit.record({ kind: "execution", note: "uses sk-proj-abcdefghijklmnopqrstuvwx" });
    await audit.flush();
    const [first] = await readRecords(path);
    assertEquals(first.kind, "execution");
    assertEquals(first.note, "uses [REDACTED]");
    assertMatch(String(first.ts), /^\d{4}-\d\d-\d\dT/);
    assertEquals((await Deno.stat(path)).mode! & 0o777, 0o600);

    for (let i = 0; i < 60; i++) audit.record({ kind: "tool_call", i, pad: "x".repeat(40) });
    await audit.flush();
    const names = [];
    for await (const entry of Deno.readDir(join(dir, "nested"))) names.push(entry.name);
    assertEquals(names.sort(), ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"]);
    for (const name of names) {
      const info = await Deno.stat(join(dir, "nested", name));
      assert(info.size <= 600, `${name} is ${info.size} bytes`);
      assertEquals(info.mode! & 0o777, 0o600);
    }
    // The newest records are in the current file, in order.
    const current = await readRecords(path);
    assertEquals(current.at(-1)?.i, 59);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("AuditLog reports a write failure once and never throws", async () => {
  const dir = await Deno.makeTempDir({ prefix: "ce-audit-" });
  try {
    const blocker = join(dir, "file");
    await Deno.writeTextFile(blocker, "");
    const log = capturingLogger();
    const audit = new AuditLog({
      path: join(blocker, "audit.jsonl"),
      maxBytes: 1000,
      maxFiles: 2,
      log,
    });
    audit.record({ kind: "execution" });
    audit.record({ kind: "execution" });
    await audit.flush();
    assertEquals(log.warnings.length, 1);
    assertMatch(log.warnings[0], /Cannot write the audit log .*executions continue/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("Executor records each execution with the code's hash, outcome and output size", async () => {
  const dir = await Deno.realPath(await Deno.makeTempDir({ prefix: "ce-audit-" }));
  const path = join(dir, "audit.jsonl");
  const audit = new AuditLog({ path, maxBytes: 1 << 20, maxFiles: 2, log: createLogger("error") });
  const settings = resolveSettings({
    sandbox: { warmPool: 0, tempDir: dir },
    python: { warmPool: 0 },
    audit: { includeCode: false },
  });
  const executor = await Executor.create(settings, { log: createLogger("error"), audit });
  try {
    const code = 'console.log("hello"); const key = "sk-abcdefghijklmnopqrstuvwx"; return 1;';
    await executor.runTypescript(code, { allowedTools: ["mcp__github__*"] });
    await executor.runTypescript('throw new TypeError("nope")');
    await audit.flush();
    const [ok, failed] = await readRecords(path);
    assertEquals(ok.kind, "execution");
    assertEquals(ok.language, "typescript");
    assertEquals(ok.codeSha256, sha256Hex(code));
    assertEquals("code" in ok, false);
    assertEquals(ok.allowedTools, ["mcp__github__*"]);
    assertEquals(ok.outcome, "ok");
    assertEquals(ok.outputBytes, { stdout: 6, stderr: 0 });
    assert(typeof ok.durationMs === "number" && typeof ok.executionId === "string");
    assertEquals(failed.outcome, "error");
    assertEquals(failed.errorType, "TypeError");
    assertEquals(failed.allowedTools, ["*"]);
  } finally {
    await executor.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("serve records tool calls in the audit log, and the code only with audit.includeCode", async () => {
  const server = await startServer({
    upstream: { everything: npmServer(EVERYTHING) },
    settings: { audit: { includeCode: true } },
  });
  try {
    const code = [
      'await callMCPTool("mcp__everything__echo", { message: "Bearer abcdefghijklmnop" });',
      "return await tools.everything.getSum({ a: 1, b: 2 });",
    ].join("\n");
    const result = await server.runTs(code);
    assertEquals(result.ok, true);
    const path = join(server.tempDir, "audit.jsonl");
    let records: Array<Record<string, unknown>> = [];
    for (let i = 0; i < 50 && records.length < 3; i++) {
      records = await readRecords(path).catch(() => []);
      if (records.length < 3) await new Promise((r) => setTimeout(r, 100));
    }
    const execution = records.find((r) => r.kind === "execution")!;
    const calls = records.filter((r) => r.kind === "tool_call");
    assertEquals(calls.map((c) => [c.name, c.ok, c.executionId]), [
      ["mcp__everything__echo", true, execution.executionId],
      ["mcp__everything__get-sum", true, execution.executionId],
    ]);
    assertMatch(String(execution.code), /Bearer \[REDACTED\]/);
    assertEquals((execution.toolCalls as unknown[]).length, 2);
  } finally {
    await server.close();
  }
});
