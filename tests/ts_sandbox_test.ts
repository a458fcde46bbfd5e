import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { assert, assertEquals } from "./_assert.ts";
import { eventually, isAlive, leftovers, sandboxPids } from "./_proc.ts";
import { resolveSettings } from "../src/config/settings.ts";
import { cacheDir } from "../src/config/paths.ts";
import { Executor } from "../src/exec/executor.ts";
import { findDeno } from "../src/exec/child/files.ts";
import { TsChild, type TsChildOptions } from "../src/exec/typescript/child.ts";
import { wrapTypescript } from "../src/exec/typescript/source.ts";
import { createLogger } from "../src/log.ts";

const RUNNER = fileURLToPath(new URL("../sandbox/ts_runner.ts", import.meta.url));
const LIMITS = { timeoutMs: 10_000, maxOutputBytes: 100_000 };

/** Runs `fn` with options for children under a fresh temp root, then checks nothing is left. */
async function withTempRoot(
  fn: (options: TsChildOptions, tempRoot: string) => Promise<void>,
): Promise<void> {
  const tempRoot = await Deno.realPath(await Deno.makeTempDir({ prefix: "ce-tschild-" }));
  const options: TsChildOptions = {
    denoPath: findDeno(),
    runnerPath: RUNNER,
    tempRoot,
    denoDir: join(cacheDir(), "deno-ts"),
    memoryMb: 256,
    log: createLogger("error"),
  };
  try {
    await fn(options, tempRoot);
  } finally {
    const left = await leftovers(tempRoot);
    const pids = await sandboxPids(tempRoot);
    await Deno.remove(tempRoot, { recursive: true });
    assertEquals(left, [], "sandbox directories left behind");
    assertEquals(pids, [], "sandbox processes left behind");
  }
}

Deno.test("TsChild.run() runs code sent before the child is ready", async () => {
  await withTempRoot(async (options) => {
    const child = await TsChild.spawn(options);
    try {
      // No await of child.ready: the code follows `init` at once (a cold run's path).
      const result = await child.run(wrapTypescript("console.log('hi'); return 6 * 7"), LIMITS);
      assertEquals(result.ok, true);
      assertEquals(result.returnValue, 42);
      assertEquals(result.stdout, "hi\n");
      assertEquals(await child.ready, true);
    } finally {
      await child.dispose();
    }
  });
});

Deno.test("TsChild.run() leaves the child asleep after its result until dispose() kills it", async () => {
  await withTempRoot(async (options) => {
    const child = await TsChild.spawn({ ...options, preload: true });
    try {
      assertEquals(await child.ready, true);
      const result = await child.run(wrapTypescript("return 1"), LIMITS);
      assertEquals(result.returnValue, 1);
      assertEquals(result.stderr, "", "the pooled child's warm-up wrote to stderr");
      // The runner used to exit by itself right after the result; now it sleeps, so that its
      // teardown does not compete with the response for the CPUs.
      await new Promise((resolve) => setTimeout(resolve, 300));
      assertEquals(child.exited, false);
      assert(await isAlive(child.pid), "the used child is gone before dispose()");
    } finally {
      await child.dispose();
    }
    assertEquals(child.exited, true);
    assertEquals(await isAlive(child.pid), false);
  });
});

Deno.test("ts_runner exits by itself when its host closes stdin after the result", async () => {
  // A host killed with SIGKILL cannot kill its children: they must not sleep forever.
  const workspace = await Deno.makeTempDir({ prefix: "ce-runner-" });
  const process = new Deno.Command(findDeno(), {
    args: [
      "run",
      "--no-prompt",
      "--no-config",
      "--no-lock",
      "--no-code-cache",
      `--allow-read=${workspace}`,
      RUNNER,
    ],
    cwd: workspace,
    clearEnv: true,
    env: { DENO_DIR: join(cacheDir(), "deno-ts"), NO_COLOR: "1" },
    stdin: "piped",
    stdout: "piped",
    stderr: "null",
  }).spawn();
  try {
    const code = btoa("export default async function () { return 5 }");
    const writer = process.stdin.getWriter();
    await writer.write(new TextEncoder().encode(
      JSON.stringify({ t: "init", nonce: "n0nce" }) + "\n" +
        JSON.stringify({ t: "exec", base64: code }) + "\n",
    ));
    let text = "";
    const decoder = new TextDecoder();
    const reader = process.stdout.getReader();
    while (!text.includes('"t":"result"')) {
      const { value, done } = await reader.read();
      if (done) break;
      text += decoder.decode(value);
    }
    assert(text.includes('n0nce {"t":"result","ok":true,"value":5}'), text);
    reader.releaseLock();
    await writer.close();
    const status = await process.status;
    assertEquals(status.success, true);
  } finally {
    try {
      process.kill("SIGKILL");
    } catch {
      // It exited.
    }
    await process.status;
    await process.stdout.cancel().catch(() => {});
    await Deno.remove(workspace, { recursive: true });
  }
});

Deno.test("Executor.idle() waits until the used child has been killed and removed", async () => {
  const tempDir = await Deno.realPath(await Deno.makeTempDir({ prefix: "ce-retire-" }));
  const settings = resolveSettings({
    sandbox: { warmPool: 0, tempDir },
    python: { enabled: false, warmPool: 0 },
  });
  const executor = await Executor.create(settings, { log: createLogger("error") });
  try {
    const result = await executor.runTypescript("return Deno.cwd()");
    assertEquals(result.ok, true);
    await executor.idle();
    assertEquals(await sandboxPids(tempDir), []);
    assertEquals(await leftovers(tempDir), []);
  } finally {
    await executor.close();
    const gone = await eventually(async () => (await sandboxPids(tempDir)).length === 0);
    await Deno.remove(tempDir, { recursive: true });
    assert(gone, "sandbox processes left behind after close()");
  }
});

Deno.test("TsChild.run() in a pooled child writes none of the code to Deno's emit cache", async () => {
  await withTempRoot(async (options) => {
    const child = await TsChild.spawn({ ...options, preload: true });
    try {
      assertEquals(await child.ready, true);
      const marker = `marker_${crypto.randomUUID().replaceAll("-", "")}`;
      const code = `const ${marker}: number = 7; return ${marker};`;
      assertEquals((await child.run(wrapTypescript(code), LIMITS)).returnValue, 7);
      // Before any clean-up: nothing to scrub.
      const grep = new Deno.Command("grep", { args: ["-rl", marker, options.denoDir] });
      assertEquals(new TextDecoder().decode((await grep.output()).stdout), "");
    } finally {
      await child.dispose();
    }
  });
});

Deno.test("TsChild.run() makes a Worker option the sandbox refuses an error the code can catch", async () => {
  await withTempRoot(async (options) => {
    const child = await TsChild.spawn(options);
    try {
      const code = `
const make = () => new Worker("data:application/javascript,1", {
  type: "module",
  deno: { permissions: { net: true } },
} as WorkerOptions);
try {
  make();
} catch (error) {
  console.log((error as Error).name);
}
make();`;
      const result = await child.run(wrapTypescript(code), LIMITS);
      assertEquals(result.stdout, "TypeError\n");
      assertEquals(result.error?.type, "TypeError", JSON.stringify(result));
      assert(/deno\.permissions/.test(result.error?.message ?? ""), result.error?.message);
    } finally {
      await child.dispose();
    }
  });
});
