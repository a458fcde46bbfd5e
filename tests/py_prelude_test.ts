/**
 * The Python half of the sandbox is a real Python file: it compiles with CPython and with
 * Pyodide, and it reaches the child in its `init` frame, never through a read permission.
 *
 * @module
 */
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { leftovers } from "./_proc.ts";
import { LIMITS, withPyChild } from "./_pyodide.ts";
import { pythonPrelude } from "../src/exec/child/files.ts";
import type { ExecutionResult } from "../src/exec/result.ts";

const sandboxDir = fileURLToPath(new URL("../sandbox/", import.meta.url));

async function pythonFiles(): Promise<string[]> {
  const files: string[] = [];
  for await (const entry of Deno.readDir(sandboxDir)) {
    if (entry.isFile && entry.name.endsWith(".py")) files.push(join(sandboxDir, entry.name));
  }
  return files.sort();
}

/** Runs code in a fresh single-use child that may import anything, and cleans up after it. */
function runOnce(code: string): Promise<ExecutionResult> {
  return withPyChild({ allowedImports: "*" }, (child) => child.run(code, LIMITS));
}

Deno.test("sandbox/*.py compile with the machine's python3 -m py_compile", async () => {
  const files = await pythonFiles();
  assert(files.some((file) => file.endsWith("py_prelude.py")), "sandbox/py_prelude.py is missing");
  // Byte code goes to a temporary prefix, not to a __pycache__ inside sandbox/.
  const prefix = await Deno.makeTempDir({ prefix: "ce-pycache-" });
  try {
    const output = await new Deno.Command("python3", {
      args: ["-X", `pycache_prefix=${prefix}`, "-m", "py_compile", ...files],
      stdout: "piped",
      stderr: "piped",
    }).output();
    const stderr = new TextDecoder().decode(output.stderr);
    assertEquals(output.code, 0, `python3 -m py_compile failed: ${stderr}`);
    assertEquals(await leftovers(join(sandboxDir, "__pycache__")), []);
  } finally {
    await Deno.remove(prefix, { recursive: true });
  }
});

Deno.test("PyChild.run() compiles sandbox/py_prelude.py with Pyodide's own compile()", async () => {
  // JSON string literals are Python string literals too.
  const text = JSON.stringify(await pythonPrelude());
  const result = await runOnce(`compile(${text}, "py_prelude.py", "exec").co_filename`);
  assertEquals(result.error, undefined);
  assertEquals(result.returnValue, "py_prelude.py");
});

Deno.test("PyChild.run() gets the prelude without any permission to read it", async () => {
  // Python can reach the Worker's JavaScript: the process's read permission is what counts.
  const prelude = JSON.stringify(join(sandboxDir, "py_prelude.py"));
  const result = await runOnce(
    `import importlib\njs = importlib.import_module("js")\njs.Deno.readTextFileSync(${prelude})`,
  );
  assertEquals(result.ok, false);
  assertMatch(result.error?.message ?? "", /NotCapable|PermissionDenied|Requires read access/);
  assertMatch(result.error?.message ?? "", /py_prelude\.py/);
});
