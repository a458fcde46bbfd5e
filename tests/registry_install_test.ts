/**
 * The package as users install it: published with `deno publish` to a JSR registry on loopback
 * (`tests/fixtures/jsr_registry.ts`), then run with `deno run -A jsr:…` and installed with
 * `deno install -g`, each time with an empty HOME and DENO_DIR, from a directory that holds no
 * checkout, and driven by a real MCP client over stdio.
 *
 * Slow: about 2 min 10 s on two cores, nearly all of it the two Pyodide snapshots built on first
 * use (one per HOME, ~35 s each) and the first Python runs. Each user's DENO_DIR starts empty, so
 * the npm packages are downloaded again from the npm registry for both (a few seconds here); no
 * npm cache is shared with the checkout, as that is what a user's first install goes through.
 * The upstream memory server is not under test and comes from the caller's Deno cache.
 *
 * The registry tells when each version was published, as jsr.io does, so the commands carry
 * `--min-dep-age=0`, which a user needs on the day of a release.
 *
 * @module
 */
import { Client } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { join } from "node:path";
import { assert, assertEquals, assertMatch, describeResult, type RunResult } from "./_assert.ts";
import { MEMORY } from "./_pins.ts";
import { denoDir, npmServer, ROOT } from "./_env.ts";
import { eventually, exitOrKill, pidsWithEnv, sandboxDirs } from "./_proc.ts";
import { describeRun, runCommand, spawnReadingStderr } from "./_command.ts";
import { writeFileWithParents } from "./_fs.ts";
import { callRun, connect } from "./_client.ts";
import { type JsrRegistry, startJsrRegistry } from "./fixtures/jsr_registry.ts";
import config from "../deno.json" with { type: "json" };
import type { ExecutionResult } from "../src/exec/result.ts";

const PACKAGE = config.name;
const VERSION = config.version;
const SPECIFIER = `jsr:${PACKAGE}@${VERSION}`;
const DENO = Deno.execPath();
// deno.json's "unstable" list does not reach a program run from a registry.
const UNSTABLE = "--unstable-no-legacy-abort";
// Deno refuses a version published less than 24 hours ago unless told otherwise.
const FRESH = "--min-dep-age=0";
// Generous: the first run on an empty cache downloads npm packages and the first Python run
// builds the Pyodide snapshot (~30 s here), on a machine other tests share.
const SLOW_MS = 300_000;
const FIRST_PYTHON_MS = 240_000;

/** One user's machine: an empty HOME, Deno cache, temp directory and working directory. */
interface UserDirs {
  home: string;
  denoDir: string;
  tmp: string;
  cwd: string;
}

async function userDirs(root: string, name: string): Promise<UserDirs> {
  const base = join(root, name);
  const dirs = {
    home: join(base, "home"),
    denoDir: join(base, "deno"),
    tmp: join(base, "tmp"),
    cwd: join(base, "work"),
  };
  for (const dir of Object.values(dirs)) await Deno.mkdir(dir, { recursive: true });
  return dirs;
}

/**
 * The caller's environment with the user's directories, so that nothing of the checkout or of
 * the caller's caches is found (XDG_* would move config and caches out of HOME). The rest stays:
 * NODE_EXTRA_CA_CERTS and proxies matter for npm downloads.
 */
function userEnv(dirs: UserDirs, registry: JsrRegistry): Record<string, string> {
  const env = Deno.env.toObject();
  for (const key of Object.keys(env)) {
    if (/^(XDG_|CODE_EXECUTOR_|DENO_INSTALL_ROOT$|AUDIT_LOG_PATH$)/.test(key)) delete env[key];
  }
  return {
    ...env,
    HOME: dirs.home,
    DENO_DIR: dirs.denoDir,
    JSR_URL: registry.url,
    TMPDIR: dirs.tmp,
    NO_COLOR: "1",
  };
}

/** Upstream servers in the user's own Code Executor config, which `serve` reads by default. */
async function writeUpstreams(dirs: UserDirs): Promise<void> {
  // The upstream is not under test: it comes from the caller's Deno cache, where CI put it.
  const memory = npmServer(MEMORY, {
    env: { MEMORY_FILE_PATH: join(dirs.home, "memory.jsonl"), DENO_DIR: denoDir() },
  });
  await writeFileWithParents(
    join(dirs.home, ".config", "code-executor", "mcp.json"),
    JSON.stringify({ mcpServers: { memory } }),
  );
}

/** How a client starts Code Executor: a client config's stdio entry. */
interface Launch {
  command: string;
  args: string[];
  env?: Record<string, string>;
}

/**
 * Starts Code Executor as `launch` says, connects an SDK client over stdio, and checks
 * run_typescript, run_python and an upstream call from each; then that the server and every child
 * are gone once the client closes.
 */
async function serveAndRun(
  t: Deno.TestContext,
  launch: Launch,
  dirs: UserDirs,
  registry: JsrRegistry,
): Promise<void> {
  const transport = new StdioClientTransport({
    command: launch.command,
    args: launch.args,
    cwd: dirs.cwd,
    env: { ...userEnv(dirs, registry), ...launch.env },
    stderr: "pipe",
  });
  const stderr: string[] = [];
  transport.stderr?.on("data", (chunk: Uint8Array) => stderr.push(new TextDecoder().decode(chunk)));
  const client = new Client({ name: "registry-install-test", version: "1.0.0" });
  const describe = (result: unknown) => `${JSON.stringify(result)}\nstderr:\n${stderr.join("")}`;
  const run = async (tool: string, args: Record<string, unknown>): Promise<RunResult> => {
    const result = await client.callTool({ name: tool, arguments: args }, { timeout: SLOW_MS });
    return {
      ...(result.structuredContent as unknown as ExecutionResult),
      isError: result.isError === true,
    };
  };
  try {
    await client.connect(transport, { timeout: SLOW_MS });
  } catch (error) {
    throw new Error(`Cannot start ${launch.command}: ${(error as Error).message}\n${describe({})}`);
  }
  try {
    await t.step("run_typescript runs and calls the upstream memory server", async () => {
      const result = await run("run_typescript", {
        code: `console.log("from", Deno.build.os);
await tools.memory.create_entities({
  entities: [{ name: "registry", entityType: "install", observations: ["seen from TypeScript"] }],
});
return 6 * 7;`,
      });
      assert(result.ok, describe(result));
      assertEquals(result.returnValue, 42, describe(result));
      assertEquals(result.stdout, `from ${Deno.build.os}\n`, describe(result));
      assertEquals(result.toolCalls.map((c) => c.name), ["mcp__memory__create_entities"]);
    });
    await t.step("run_python runs (building the snapshot) and calls the upstream", async () => {
      const result = await run("run_python", {
        code: `graph = await tools.memory.read_graph()
print(sum(range(10)))
[e["observations"] for e in graph["entities"] if e["name"] == "registry"]`,
        timeoutMs: FIRST_PYTHON_MS,
      });
      assert(result.ok, describe(result));
      assertEquals(result.stdout, "45\n", describe(result));
      assertEquals(result.returnValue, [["seen from TypeScript"]], describe(result));
    });
  } finally {
    await client.close();
  }
  await t.step("the server and its children end with the client", async () => {
    const gone = await eventually(
      async () =>
        (await pidsWithEnv(`HOME=${dirs.home}`)).length === 0 &&
        (await sandboxDirs(dirs.tmp)).length === 0,
      15_000,
    );
    assert(
      gone,
      `left: pids ${await pidsWithEnv(`HOME=${dirs.home}`)}, dirs ${await sandboxDirs(dirs.tmp)}`,
    );
  });
}

/** Runs a command as the user, with a time limit, and returns its output. */
function runAsUser(
  command: string,
  args: string[],
  dirs: UserDirs,
  registry: JsrRegistry,
  env: Record<string, string> = {},
) {
  return runCommand(command, args, {
    cwd: dirs.cwd,
    env: { ...userEnv(dirs, registry), ...env },
    clearEnv: true,
    timeoutMs: SLOW_MS,
  });
}

Deno.test("the package published to a JSR registry runs from `deno run jsr:` and from `deno install -g`", async (t) => {
  const token = crypto.randomUUID();
  const registry = startJsrRegistry(token);
  const root = await Deno.realPath(await Deno.makeTempDir({ prefix: "ce-jsr-" }));
  try {
    await t.step("deno publish uploads what runs, and nothing of the tests", async () => {
      const published = await runCommand(
        DENO,
        ["publish", "--token", token, "--allow-dirty", "--no-provenance"],
        { cwd: ROOT, env: { JSR_URL: registry.url, NO_COLOR: "1" }, timeoutMs: SLOW_MS },
      );
      assertEquals(published.code, 0, describeRun(published));
      assertMatch(published.stderr + published.stdout, /Successfully published/);
      const files = [...registry.packages.get(PACKAGE)?.get(VERSION)?.files.keys() ?? []].sort();
      const stray = files.filter((file) =>
        !/^\/(main\.ts|deno\.json|deno\.lock|README\.md|LICENSE|SECURITY\.md|src\/.+\.ts|sandbox\/.+|lua\/.+\.lua)$/
          .test(file)
      );
      assertEquals(stray, [], "files outside what runs");
      for (
        const file of [
          "ts_runner.ts",
          "py_host.ts",
          "py_worker.ts",
          "py_inbox.ts",
          "py_files.ts",
          "py_prelude.py",
        ]
      ) {
        assert(files.includes(`/sandbox/${file}`), `sandbox/${file} is published`);
      }
    });

    const viaRun = await userDirs(root, "run");
    await writeUpstreams(viaRun);
    const runLaunch = { command: DENO, args: ["run", "-A", UNSTABLE, FRESH, SPECIFIER, "serve"] };

    await t.step("a version published today is refused without --min-dep-age", async () => {
      const fresh = await userDirs(root, "fresh");
      const refused = await runAsUser(DENO, ["run", "-A", SPECIFIER, "--version"], fresh, registry);
      assertEquals(refused.code, 1, describeRun(refused));
      assertMatch(refused.stderr, /minimum dependency age/, describeRun(refused));
    });

    await t.step("deno run -A jsr:… serve, from empty caches", async (t) => {
      await serveAndRun(t, runLaunch, viaRun, registry);
      const loaded = registry.requests.filter((r) => r.startsWith(`GET /${PACKAGE}/${VERSION}/`));
      assert(
        loaded.includes(`GET /${PACKAGE}/${VERSION}/main.ts`),
        "main.ts came from the registry",
      );
      assert(
        loaded.includes(`GET /${PACKAGE}/${VERSION}/sandbox/py_worker.ts`),
        "the sandbox files came from the registry",
      );
      const written = [];
      for await (
        const entry of Deno.readDir(join(viaRun.home, ".cache", "code-executor", "sandbox"))
      ) {
        written.push(entry.name.replace(/^[0-9a-f]{16}-/, ""));
      }
      assertEquals(written.sort(), [
        "py_files.ts",
        "py_host.ts",
        "py_inbox.ts",
        "py_worker.ts",
        "ts_runner.ts",
      ]);
    });

    await t.step("setup --dry-run from deno run jsr:… plans a deno run jsr:… entry", async () => {
      const setup = await runAsUser(
        DENO,
        [...runLaunch.args.slice(0, -1), "setup", "--dry-run", "--yes", "--client", "cursor"],
        viaRun,
        registry,
      );
      assertEquals(setup.code, 0, describeRun(setup));
      const planned =
        `add "code-executor" to ~/.cursor/mcp.json: JSR_URL=${registry.url} ${DENO} ` +
        `run -A ${UNSTABLE} ${FRESH} ${SPECIFIER} serve\n`;
      assert(setup.stdout.includes(planned), describeRun(setup));
    });

    const viaInstall = await userDirs(root, "install");
    await writeUpstreams(viaInstall);
    const shim = join(viaInstall.home, ".deno", "bin", "code-executor");

    await t.step(
      "deno install -g jsr:… (no version: the latest) makes a code-executor command",
      async () => {
        // As most users type it. The shim then names no version: setup must still recognise it.
        const installed = await runAsUser(
          DENO,
          ["install", "-g", "-A", UNSTABLE, FRESH, "-n", "code-executor", `jsr:${PACKAGE}`],
          viaInstall,
          registry,
        );
        assertEquals(installed.code, 0, describeRun(installed));
        // The lockfile beside the shim (the package's own deno.lock, which Deno fetched, plus the
        // resolved version) pins the version and the npm packages, so it needs no --min-dep-age.
        assertMatch(await Deno.readTextFile(shim), new RegExp(`'jsr:${PACKAGE}'`));
        const lock = JSON.parse(
          await Deno.readTextFile(
            join(viaInstall.home, ".deno", "bin", ".code-executor", "deno.lock"),
          ),
        );
        assertEquals(lock.specifiers[`jsr:${PACKAGE}@*`], VERSION);
        assert(
          registry.requests.includes(`GET /${PACKAGE}/${VERSION}/deno.lock`),
          "deno install -g fetched the package's deno.lock",
        );
      },
    );
    const afterInstall = registry.requests.length;

    let entry: Launch | undefined;
    await t.step("setup from the installed command writes an entry that runs it", async () => {
      const dry = await runAsUser(
        shim,
        ["setup", "--dry-run", "--yes", "--client", "cursor"],
        viaInstall,
        registry,
      );
      assertEquals(dry.code, 0, describeRun(dry));
      assert(
        dry.stdout.includes(`: JSR_URL=${registry.url} ${shim} serve\n`),
        describeRun(dry),
      );
      const written = await runAsUser(
        shim,
        ["setup", "--yes", "--client", "cursor"],
        viaInstall,
        registry,
      );
      assertEquals(written.code, 0, describeRun(written));
      const file = JSON.parse(
        await Deno.readTextFile(join(viaInstall.home, ".cursor", "mcp.json")),
      );
      entry = file.mcpServers["code-executor"];
      assertEquals(entry, { command: shim, args: ["serve"], env: { JSR_URL: registry.url } });
    });

    await t.step("the entry setup wrote starts a working server", async (t) => {
      assert(entry, "setup wrote an entry");
      await serveAndRun(t, entry, viaInstall, registry);
    });

    await t.step("the installed command serves over HTTP, to both protocol eras", async () => {
      const token = `registry-install-${crypto.randomUUID()}`;
      const { child, stderr: chunks, drained } = spawnReadingStderr(shim, {
        args: ["serve", "--http", "--port", "0"],
        cwd: viaInstall.cwd,
        clearEnv: true,
        env: { ...userEnv(viaInstall, registry), CODE_EXECUTOR_HTTP_TOKEN: token },
      });
      const stderr = () => chunks.join("");
      let exited: Deno.CommandStatus | undefined;
      child.status.then((status) => exited = status);
      const stop = async () => {
        try {
          child.kill("SIGTERM");
        } catch {
          // It has exited already.
        }
        const status = await exitOrKill(child, 30_000);
        await drained;
        return status;
      };
      try {
        const ready = () => exited !== undefined || /ready on http:\/\/\S+/.test(stderr());
        await eventually(() => Promise.resolve(ready()), 60_000);
        assert(exited === undefined && ready(), `not ready (exit ${exited?.code}):\n${stderr()}`);
        const url = new URL(/ready on (http:\/\/\S+)/.exec(stderr())![1]);
        for (const era of ["legacy", "modern"] as const) {
          const client = await connect(url, { era, token });
          try {
            const result = await callRun(
              client,
              "run_typescript",
              `const graph = await tools.memory.read_graph();
return graph.entities.map((e: { name: string }) => e.name);`,
            );
            assert(result.ok, `${era}: ${describeResult(result)}\n${stderr()}`);
            assertEquals(result.returnValue, ["registry"], era);
          } finally {
            await client.close();
          }
        }
        const status = await stop();
        assertEquals(status?.code, 0, `SIGTERM drains and exits 0:\n${stderr()}`);
      } finally {
        await stop();
      }
    });

    await t.step("the installed command needed nothing more from the registry", () => {
      assertEquals(registry.requests.slice(afterInstall), []);
    });
  } finally {
    await registry.close();
    await Deno.remove(root, { recursive: true });
  }
});
