/**
 * `prepare`, for real: it fills a fresh cache (the runners compiled, the Pyodide snapshot built
 * and checked) readable by every user, and a server started afterwards with that cache mounted
 * read-only answers its first run_python from the snapshot, building nothing. When the snapshot
 * cannot be written, prepare exits 1 and says why.
 *
 * A cache is made read-only for root (CI) with a read-only bind mount in a private mount
 * namespace (`unshare --mount`), since root ignores permission bits; for another user, by taking
 * away its write permission.
 *
 * @module
 */
import { join } from "node:path";
import { assert, assertEquals, assertMatch, assertReturns, type RunResult } from "./_assert.ts";
import { denoDir, networkEnv, ROOT } from "./_env.ts";
import { describeRun, runCommand } from "./_command.ts";
import { withTempDir } from "./_fs.ts";
import { startHttpServer } from "./_http_server.ts";
import { connect } from "./_client.ts";
import type { ExecutionResult } from "../src/exec/result.ts";

const IS_ROOT = Deno.uid() === 0;

/** An npm package the prepared cache holds for TypeScript children, as an image would bake it. */
const NPM_PACKAGES = "csv-parse@7.0.3";

/**
 * Runs `main.ts prepare` with its own HOME, TMPDIR and XDG cache, and the caller's Deno cache;
 * with `npm`, `sandbox.npmPackages` too, fetched into the fresh cache (the caller's CAs and
 * proxy passed on for it).
 */
function runPrepare(dir: string, cache: string, wrapper: string[] = [], npm = false) {
  const [command, ...args] = [...wrapper, Deno.execPath()];
  return runCommand(command, [...args, "run", "-A", "main.ts", "prepare"], {
    cwd: ROOT,
    clearEnv: true,
    env: {
      PATH: Deno.env.get("PATH") ?? "",
      HOME: join(dir, "home"),
      TMPDIR: dir,
      DENO_DIR: denoDir(),
      XDG_CACHE_HOME: cache,
      NO_COLOR: "1",
      ...(npm ? { ...networkEnv(), CODE_EXECUTOR_NPM_PACKAGES: NPM_PACKAGES } : {}),
    },
    timeoutMs: 300_000,
  });
}

/**
 * Makes `dir` read-only for a process started under the returned wrapper (root), or for this
 * user (otherwise, until `restore`).
 */
async function readOnly(dir: string): Promise<{ wrapper: string[]; restore(): Promise<void> }> {
  if (IS_ROOT) {
    const script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" "$0" && exec "$@"';
    return { wrapper: ["unshare", "--mount", "sh", "-c", script, dir], restore: async () => {} };
  }
  await runCommand("chmod", ["-R", "a-w", dir]);
  return { wrapper: [], restore: async () => void await runCommand("chmod", ["-R", "u+w", dir]) };
}

/** Every file and directory under `dir` whose mode does not let every user read it. */
async function notReadableByAll(dir: string): Promise<string[]> {
  const out: string[] = [];
  const info = await Deno.lstat(dir);
  if (info.isSymlink) return out;
  const wanted = info.isDirectory ? 0o555 : 0o444;
  if (((info.mode ?? 0) & wanted) !== wanted) out.push(`${dir} (${info.mode?.toString(8)})`);
  if (info.isDirectory) {
    for await (const entry of Deno.readDir(dir)) {
      out.push(...await notReadableByAll(join(dir, entry.name)));
    }
  }
  return out;
}

async function snapshots(cache: string): Promise<Deno.FileInfo[]> {
  const dir = join(cache, "code-executor", "pyodide");
  const out: Deno.FileInfo[] = [];
  for await (const entry of Deno.readDir(dir)) {
    if (entry.name.endsWith(".snapshot")) out.push(await Deno.stat(join(dir, entry.name)));
  }
  return out;
}

Deno.test("prepare fills a cache readable by every user, and a server with it read-only answers the first run_python from the snapshot and imports its npm packages", async () => {
  await withTempDir("ce-prepare-", async (dir) => {
    const cache = join(dir, "cache");
    const run = await runPrepare(dir, cache, [], true);
    assertEquals(run.code, 0, describeRun(run));
    assertMatch(run.stdout, /^TypeScript: the runner is compiled into /m);
    assertMatch(run.stdout, /npm packages csv-parse@7\.0\.3 load offline/);
    assertMatch(run.stdout, /^Python: .*a child booted from it and ran code$/m);
    for (const name of ["sandbox", "deno", "deno-ts", "pyodide"]) {
      const dirPath = join(cache, "code-executor", name);
      if (name === "sandbox" && !(await Deno.stat(dirPath).catch(() => undefined))) continue;
      assertEquals(await notReadableByAll(dirPath), [], `not readable by every user in ${name}/`);
    }
    const compiled = await Array.fromAsync(
      Deno.readDir(join(cache, "code-executor", "deno", "gen")),
    );
    assert(compiled.length > 0, "prepare compiled no runner into the children's Deno cache");
    const [snapshot, ...more] = await snapshots(cache);
    assert(snapshot && more.length === 0, `expected one snapshot:\n${describeRun(run)}`);
    assertEquals(snapshot.mode! & 0o444, 0o444, `snapshot mode ${snapshot.mode?.toString(8)}`);

    const locked = await readOnly(cache);
    try {
      const server = await startHttpServer({
        home: join(dir, "home"),
        env: { XDG_CACHE_HOME: cache, CODE_EXECUTOR_NPM_PACKAGES: NPM_PACKAGES },
        wrapper: locked.wrapper,
      });
      let stopped = false;
      try {
        const client = await connect(server.url);
        try {
          // The warm pool is off (serverEnv): this run boots its own child.
          const started = performance.now();
          const call = await client.callTool({
            name: "run_python",
            arguments: { code: "import math\nmath.factorial(5)", timeoutMs: 60_000 },
          }, { timeout: 90_000 });
          const firstMs = Math.round(performance.now() - started);
          const result: RunResult = {
            ...(call.structuredContent as unknown as ExecutionResult),
            isError: call.isError === true,
          };
          assertReturns(result, 120);
          console.log(`first run_python with a read-only prepared cache: ${firstMs} ms`);
          // The package comes from the read-only cache: nothing is fetched or written.
          const ts = await client.callTool({
            name: "run_typescript",
            arguments: {
              code: 'import { parse } from "csv-parse/sync";\nreturn parse("a,b\\n1,2\\n");',
            },
          }, { timeout: 90_000 });
          assertReturns({
            ...(ts.structuredContent as unknown as ExecutionResult),
            isError: ts.isError === true,
          }, [["a", "b"], ["1", "2"]]);
        } finally {
          await client.close();
        }
        stopped = true;
        assertEquals((await server.close())?.code, 0, server.stderr());
      } finally {
        if (!stopped) await server.close().catch(() => {});
      }
      // A snapshot the server could not use, or one it tried to build, is warned about.
      const log = server.stderr();
      assert(!/without (a memory|their) snapshot/.test(log), `the server did not use it:\n${log}`);
      const [after, ...others] = await snapshots(cache);
      assertEquals([after.ino, after.size, others.length], [snapshot.ino, snapshot.size, 0]);
    } finally {
      await locked.restore();
    }
  });
});

Deno.test("prepare exits 1 and says why when the snapshot cannot be written", async () => {
  await withTempDir("ce-prepare-", async (dir) => {
    const cache = join(dir, "cache");
    await Deno.mkdir(cache);
    const locked = await readOnly(cache);
    try {
      const run = await runPrepare(dir, cache, locked.wrapper);
      assertEquals(run.code, 1, describeRun(run));
      assertMatch(run.stderr, /code-executor prepare: Cannot build the Pyodide memory snapshot/);
      assertMatch(run.stderr, /Read-only file system|Permission denied/);
      assert(!/^\s+at /m.test(run.stderr), `a stack trace instead of a message:\n${run.stderr}`);
    } finally {
      await locked.restore();
    }
  });
});
