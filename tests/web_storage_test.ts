/**
 * Nothing a run does persists for the next run through Deno's web storage: `localStorage` and
 * `caches` would otherwise be kept by `deno` itself under the children's `DENO_DIR`
 * (`location_data/`, one store for every child, since they all run the same runner file), across
 * runs, principals and restarts, without any `--allow-write`. And the code of a run is not kept in
 * Deno's dependency-analysis cache, whose key is the module's `data:` URL (the code in base64).
 *
 * @module
 */
import { join } from "node:path";
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { withExecutor } from "./_executor.ts";
import { cacheDir } from "../src/config/paths.ts";

/** The TypeScript children's DENO_DIR, and the Python children's. */
const TS_DENO_DIR = join(cacheDir(), "deno-ts");
const PY_DENO_DIR = join(cacheDir(), "deno");

/** The substrings that any base64 text holding `text` must contain, one per alignment. */
function base64Forms(text: string): string[] {
  return [0, 1, 2].map((pad) => {
    const encoded = btoa("x".repeat(pad) + text);
    // The first group mixes the padding in, the last one whatever follows the text.
    return encoded.slice(pad === 0 ? 0 : 4, -4);
  });
}

async function filesHolding(dir: string, needles: string[]): Promise<string> {
  const args = ["-rlF", ...needles.flatMap((needle) => ["-e", needle]), dir];
  const { stdout } = await new Deno.Command("grep", { args, stderr: "null" }).output();
  return new TextDecoder().decode(stdout);
}

Deno.test("run_typescript: localStorage and caches are not there, and nothing is kept for the next run", async () => {
  await withExecutor({}, async (executor) => {
    for (const code of ["localStorage.setItem('k', 'secret')", "await caches.open('x')"]) {
      const result = await executor.runTypescript(code);
      assertEquals(result.ok, false, code);
      assertEquals(result.error?.type, "ReferenceError", code);
      assertMatch(result.error?.message ?? "", /(localStorage|caches) is not defined/);
    }
    const probe = await executor.runTypescript(
      "return [typeof localStorage, typeof caches, typeof sessionStorage]",
    );
    assertEquals(probe.returnValue, ["undefined", "undefined", "object"]);
  });
});

Deno.test("the children's DENO_DIRs refuse web storage even to code that reached Deno's own", async () => {
  await withExecutor({}, async () => {
    for (const denoDir of [TS_DENO_DIR, PY_DENO_DIR]) {
      // What a child would do if it got hold of the original `localStorage` and `caches`: the same
      // `deno`, the same DENO_DIR, the same runner directory (so the same storage key).
      const script = await Deno.makeTempFile({ suffix: ".ts" });
      try {
        await Deno.writeTextFile(
          script,
          `const out: string[] = [];
try { localStorage.setItem("k", "v"); out.push("localStorage kept"); } catch { out.push("refused"); }
try { await (await caches.open("x")).put("http://a/", new Response("v")); out.push("caches kept"); }
catch { out.push("refused"); }
console.log(JSON.stringify(out));`,
        );
        const { stdout, success } = await new Deno.Command(Deno.execPath(), {
          args: ["run", "--no-prompt", "--no-config", script],
          env: { DENO_DIR: denoDir, NO_COLOR: "1" },
          stderr: "null",
        }).output();
        assert(success);
        assertEquals(JSON.parse(new TextDecoder().decode(stdout)), ["refused", "refused"], denoDir);
      } finally {
        await Deno.remove(script);
      }
    }
  });
});

Deno.test("run_typescript keeps none of the code in Deno's caches, in plain text or in base64", async () => {
  // A pooled child (warm pool on) and a child started for the run (pool off) load code differently.
  for (const warmPool of [1, 0]) {
    await withExecutor({ sandbox: { warmPool } }, async (executor) => {
      await (await executor.runtime("typescript").pool()).settled();
      const marker = `marker_${crypto.randomUUID().replaceAll("-", "")}`;
      const result = await executor.runTypescript(`const ${marker}: number = 1; return ${marker}`);
      assertEquals(result.returnValue, 1);
      await executor.idle();
      const needles = [marker, ...base64Forms(marker)];
      assertEquals(await filesHolding(TS_DENO_DIR, needles), "");
      assertEquals(await filesHolding(PY_DENO_DIR, needles), "");
    });
  }
});
