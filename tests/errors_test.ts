/**
 * One error vocabulary: every `error.type` the code base can produce is in `ERROR_TYPES`,
 * docs/errors.md is generated from it and current, and the same condition has the same type in
 * TypeScript and Python. In `src/` the compiler checks the types (`ErrorType`); the runners in
 * `sandbox/` import nothing of `src/`, so their types are checked here.
 *
 * @module
 */
import { join } from "node:path";
import { assert, assertEquals } from "./_assert.ts";
import { ROOT } from "./_env.ts";
import { withExecutor } from "./_executor.ts";
import { CodeExecutorError, ERROR_TYPES } from "../src/errors.ts";
import { ERRORS_PAGE, errorsReference, staleMessage } from "../docs/generate.ts";

/**
 * Error types the runners write as literals: `type: "X"` (TypeScript) and `"type": "X"` (Python),
 * any capitalised name; JSON Schema's and MIME types are lowercase.
 */
const TYPE_LITERAL = /(?:\btype:\s*|"type":\s*)"([A-Z][A-Za-z]*)"/g;

async function sources(dir: string, extensions: string[]): Promise<string[]> {
  const files: string[] = [];
  for await (const entry of Deno.readDir(join(ROOT, dir))) {
    const path = join(dir, entry.name);
    if (entry.isDirectory) files.push(...await sources(path, extensions));
    else if (extensions.some((extension) => entry.name.endsWith(extension))) files.push(path);
  }
  return files;
}

Deno.test("every error type the sandbox runners produce is in ERROR_TYPES", async () => {
  const known = new Set(Object.keys(ERROR_TYPES));
  const unknown: string[] = [];
  const seen = new Set<string>();
  for (const file of await sources("sandbox", [".ts", ".py"])) {
    const text = await Deno.readTextFile(join(ROOT, file));
    for (const match of text.matchAll(TYPE_LITERAL)) {
      seen.add(match[1]);
      if (!known.has(match[1])) unknown.push(`${file}: ${match[1]}`);
    }
  }
  assertEquals(unknown, []);
  // The scan itself finds the types the runners produce.
  for (const type of ["SandboxExit", "UnsettledPromise", "SandboxError", "OutputLimitError"]) {
    assertEquals(seen.has(type), true, `the scan did not find ${type}`);
  }
});

Deno.test("docs/errors.md is what docs/generate.ts makes of ERROR_TYPES", async () => {
  const page = await Deno.readTextFile(join(ROOT, ERRORS_PAGE.path));
  assertEquals(await staleMessage(ERRORS_PAGE), undefined);
  const missing = Object.keys(ERROR_TYPES).filter((type) => !page.includes(`**\`${type}\`**`));
  assertEquals(missing, [], "error types without an entry in docs/errors.md");
});

Deno.test("errorsReference() groups the types by origin when the table names one", () => {
  const entry = (origin?: string) => ({ meaning: "m", change: "c", ...(origin ? { origin } : {}) });
  const flat = errorsReference({ A: entry(), B: entry() });
  assertEquals(flat.includes("## "), false, flat);
  const grouped = errorsReference({
    A: entry("admission"),
    B: entry("custom"),
    C: entry("admission"),
  });
  const headings = [...grouped.matchAll(/^## (.+)$/gm)].map((match) => match[1]);
  assertEquals(headings, ["Admission: before a run starts", "custom"]);
  assert(grouped.indexOf("`C`") < grouped.indexOf("## custom"), "C is listed under admission");
});

Deno.test("CodeExecutorError keeps the error it wraps and renders itself", () => {
  const cause = new Error("socket closed");
  const error = new CodeExecutorError("ToolCallError", "Cannot call the tool", { cause });
  assertEquals(error.cause, cause);
  assertEquals(error.toReply(), {
    ok: false,
    error: { type: "ToolCallError", message: "Cannot call the tool" },
  });
  assertEquals(error.toResult().error, { type: "ToolCallError", message: "Cannot call the tool" });
});

Deno.test("the same condition has the same error type in TypeScript and Python", async () => {
  const settings = {
    sandbox: { warmPool: 1 },
    python: { warmPool: 1 },
    limits: { maxOutputBytes: 100 * 1024 },
    // Past the cap a part is kept whole, up to outputs.maxBytes: the cases below pass both.
    outputs: { maxBytes: 150 * 1024 },
  };
  await withExecutor(settings, async (executor) => {
    const cases: Array<[string, string, string]> = [
      ["Deno.exit(3);", "raise SystemExit(3)", "SandboxExit"],
      ['return "x".repeat(200_000);', '"x" * 200_000', "OutputLimitError"],
      ['console.log("x".repeat(200_000));', 'print("x" * 200_000)', "OutputLimitError"],
      ["while (true) {}", "while True: pass", "TimeoutError"],
      [
        'await callMCPTool("mcp__nowhere__tool", {});',
        'await call_mcp_tool("mcp__nowhere__tool", {})',
        "ToolCallError",
      ],
    ];
    for (const [typescript, python, type] of cases) {
      // Long enough for a loaded machine; only the endless loops run into it.
      const options = { timeoutMs: type === "TimeoutError" ? 3_000 : 30_000 };
      const ts = await executor.runTypescript(typescript, options);
      const py = await executor.runPython(python, options);
      assertEquals([ts.error?.type, py.error?.type], [type, type], `${typescript} / ${python}`);
    }
  });
});
