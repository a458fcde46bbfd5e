/**
 * The container image, for real, with podman: it builds from the repository's Dockerfile (with
 * server-memory baked in); without a token it refuses to start; a container of it, run as users
 * are told to (`--init --read-only`, a tmpfs for /tmp, the token and a secret in env, `mcp.json`
 * mounted) on a network that reaches nothing outside, answers `/healthz` and its HEALTHCHECK, refuses a request without
 * the token, and serves a real SDK client: TypeScript, a first run_python booted from the
 * snapshot prepared at build time (with the warm pool off, so that the call boots its own child),
 * and an upstream tool call. The server runs as a non-root user, cannot write its code or caches,
 * and `podman stop` drains a run in flight and exits 0.
 *
 * Not part of `deno task test` (the build takes minutes): `deno task test:container`, its own
 * step in `.ci/run`. Needs podman and `denoland/deno:2.9.6`, which
 * `bash ../shared/container/stand-in-base.sh` provides on a machine without an image registry.
 * `CODE_EXECUTOR_TEST_IMAGE=<image>` runs an image built beforehand (with the same
 * `UPSTREAM_PACKAGES` and `NPM_PACKAGES`) instead of building one; that image is not removed.
 *
 * @module
 */
import { join } from "node:path";
import { assert, assertEquals, assertMatch, assertReturns, type RunResult } from "./_assert.ts";
import { MEMORY } from "./_pins.ts";
import { ROOT } from "./_env.ts";
import { describeRun, runCommand } from "./_command.ts";
import { withTempDir } from "./_fs.ts";
import { connect } from "./_client.ts";
import type { ExecutionResult } from "../src/exec/result.ts";
import type { Client } from "@modelcontextprotocol/client";

const TOKEN = `ce-container-${crypto.randomUUID()}`;
/** The npm package baked in for TypeScript code (`sandbox.npmPackages`). */
const NPM_PACKAGES = "csv-parse@7.0.3";
/** The runtime user of the image (the base image's `deno`). */
const IMAGE_UID = "1993";

/** Runs podman; a failure throws with its output. */
async function podman(args: string[], timeoutMs = 120_000): Promise<string> {
  const run = await runCommand("podman", args, { timeoutMs });
  if (run.code !== 0) throw new Error(`podman ${args.join(" ")} failed\n${describeRun(run)}`);
  return run.stdout.trim();
}

/** podman's logs of a container (stdout and stderr). */
async function logs(name: string): Promise<string> {
  const run = await runCommand("podman", ["logs", name], { timeoutMs: 30_000 });
  return run.stdout + run.stderr;
}

async function callTool(
  client: Client,
  name: string,
  code: string,
): Promise<RunResult> {
  const call = await client.callTool(
    { name, arguments: { code, timeoutMs: 60_000 } },
    { timeout: 90_000 },
  );
  return {
    ...(call.structuredContent as unknown as ExecutionResult),
    isError: call.isError === true,
  };
}

async function waitForHealth(url: URL, name: string): Promise<void> {
  const deadline = Date.now() + 90_000;
  let last = "";
  while (Date.now() < deadline) {
    try {
      const response = await fetch(new URL("/healthz", url));
      last = `${response.status} ${await response.text()}`;
      if (response.ok) return;
    } catch (error) {
      last = (error as Error).message;
    }
    const state = await podman(["inspect", name, "--format", "{{.State.Status}}"]);
    if (state !== "running") throw new Error(`the container is ${state}:\n${await logs(name)}`);
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  throw new Error(`/healthz did not answer 200 (last: ${last}):\n${await logs(name)}`);
}

/**
 * Builds the image from the repository with server-memory baked in. `--layers=false` leaves no
 * intermediate images behind, so removing the tag removes everything the build made.
 */
async function buildImage(image: string): Promise<void> {
  const started = performance.now();
  const build = await runCommand("podman", [
    "build",
    "--format",
    "docker",
    "--layers=false",
    "--build-arg",
    `UPSTREAM_PACKAGES=${MEMORY}`,
    "--build-arg",
    `NPM_PACKAGES=${NPM_PACKAGES}`,
    "-t",
    image,
    ROOT,
  ], { timeoutMs: 30 * 60_000 });
  assertEquals(build.code, 0, describeRun(build));
  const seconds = Math.round((performance.now() - started) / 1000);
  assertMatch(build.stdout, /^Python: .*a child booted from it and ran code$/m);
  const size = Number(await podman(["image", "inspect", image, "--format", "{{.Size}}"]));
  console.log(`image built in ${seconds} s, ${Math.round(size / 1e6)} MB`);
}

/** A running container and how to reach it. */
interface Container {
  name: string;
  /** Its MCP endpoint. */
  url: URL;
  /** Removes the container, its anonymous volume and its network. */
  remove(): Promise<void>;
}

/**
 * Runs the image as docs/container.md does (`--init --read-only`, a tmpfs for /tmp, the token and a
 * secret in env, `mcp.json` mounted), on an internal network: this host reaches the container's
 * address, the container reaches nothing (no npm, no registry), so nothing can be fetched at run
 * time. Returns once `/healthz` answers.
 */
async function startContainer(image: string, dir: string): Promise<Container> {
  const name = `ce-test-${crypto.randomUUID().slice(0, 8)}`;
  const mcpJson = join(dir, "mcp.json");
  await Deno.writeTextFile(
    mcpJson,
    JSON.stringify({
      mcpServers: {
        memory: {
          command: "deno",
          args: ["run", "-A", "--no-config", "--cached-only", MEMORY],
          // A value from the container's environment, as a secret would be.
          env: { MEMORY_FILE_PATH: "${MEMORY_FILE_PATH}" },
        },
      },
    }),
  );
  await Deno.chmod(mcpJson, 0o644);
  const remove = async () => {
    await runCommand("podman", ["rm", "-f", "-v", name]).catch(() => {});
    await runCommand("podman", ["network", "rm", "-f", name]).catch(() => {});
  };
  try {
    await podman(["network", "create", "--internal", name]);
    await podman([
      "run",
      "-d",
      "--name",
      name,
      "--network",
      name,
      "--init",
      "--read-only",
      "--tmpfs",
      "/tmp:rw,size=1g,mode=1777",
      "-v",
      `${mcpJson}:/config/code-executor/mcp.json:ro`,
      "-e",
      `CODE_EXECUTOR_HTTP_TOKEN=${TOKEN}`,
      "-e",
      "MEMORY_FILE_PATH=/tmp/memory.jsonl",
      "-e",
      "CODE_EXECUTOR_LOG_LEVEL=debug",
      // The first run_python boots its own child, rather than one warmed at start.
      "-e",
      "CODE_EXECUTOR_PYTHON_WARM_POOL=0",
      // Room for the drain step's run (it sleeps 10 s) whatever podman stop's latency.
      "-e",
      "CODE_EXECUTOR_HTTP_DRAIN_MS=30000",
      image,
    ]);
    const ip = await podman([
      "inspect",
      name,
      "--format",
      "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
    ]);
    const url = new URL(`http://${ip}:3333/mcp`);
    await waitForHealth(url, name);
    return { name, url, remove };
  } catch (error) {
    await remove();
    throw error;
  }
}

/** Fails, saying what to run, when podman is missing. */
async function assertPodman(): Promise<void> {
  const version = await runCommand("podman", ["--version"]).catch(() => undefined);
  assert(
    version?.code === 0,
    "podman is not installed: run `bash ../shared/container/stand-in-base.sh` (see .ci/run)",
  );
}

Deno.test("container: the image builds, and a read-only non-root container serves TypeScript, Python from the prepared snapshot and an upstream server, then drains on stop", async (t) => {
  await assertPodman();
  const given = Deno.env.get("CODE_EXECUTOR_TEST_IMAGE");
  const image = given || `localhost/code-executor-test:${crypto.randomUUID().slice(0, 8)}`;
  try {
    if (!given) {
      await t.step(
        "the image builds with podman (docker format, so HEALTHCHECK is kept)",
        () => buildImage(image),
      );
    }
    const config = await podman(["image", "inspect", image, "--format", "{{json .HealthCheck}}"]);
    assertMatch(config, /healthz/, "the image has no HEALTHCHECK");
    await t.step("without a token it refuses to start, saying what to set", async () => {
      const run = await runCommand(
        "podman",
        ["run", "--rm", "--network", "none", "--read-only", image],
        { timeoutMs: 120_000 },
      );
      assertEquals(run.code, 2, describeRun(run));
      assertMatch(run.stderr, /Refusing to serve HTTP on 0\.0\.0\.0 without authentication/);
      assertMatch(run.stderr, /CODE_EXECUTOR_HTTP_TOKEN/);
    });
    await withTempDir("ce-container-", async (dir) => {
      const container = await startContainer(image, dir);
      try {
        await checkContainer(t, container);
      } finally {
        await container.remove();
      }
    });
  } finally {
    // A failed build may still have left the tag.
    if (!given) await runCommand("podman", ["rmi", "-f", image]).catch(() => {});
  }
});

/** The claims about a running container, one step each. */
async function checkContainer(t: Deno.TestContext, { name, url }: Container): Promise<void> {
  await t.step("the HEALTHCHECK passes and a request without the token gets 401", async () => {
    const check = await runCommand("podman", ["healthcheck", "run", name], { timeoutMs: 60_000 });
    assertEquals(check.code, 0, describeRun(check));
    const response = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
    });
    await response.body?.cancel();
    assertEquals(response.status, 401);
  });

  await t.step(
    "it runs as a non-root user, cannot write its code or caches, and reaches no network",
    async () => {
      assertEquals(await podman(["exec", name, "id", "-u"]), IMAGE_UID);
      const users = await podman(["top", name, "user", "args"]);
      assert(!/^root\s/m.test(users), `a process runs as root:\n${users}`);
      assertMatch(users, /main\.ts serve --http/);
      for (const path of ["/app/main.ts", "/opt/code-executor/cache/x", "/deno-dir/x"]) {
        const write = await runCommand("podman", ["exec", name, "sh", "-c", `: > ${path}`]);
        assert(write.code !== 0, `${path} is writable`);
        assertMatch(write.stderr, /Read-only file system/);
      }
      assertEquals(
        await podman(["inspect", name, "--format", "{{.HostConfig.ReadonlyRootfs}}"]),
        "true",
      );
      const fetched = await runCommand("podman", [
        "exec",
        name,
        "deno",
        "eval",
        "await fetch('https://registry.npmjs.org/').then(() => Deno.exit(0), () => Deno.exit(3))",
      ], { timeoutMs: 60_000 });
      assertEquals(fetched.code, 3, `the container reaches npm:\n${describeRun(fetched)}`);
    },
  );

  const client = await connect(url, { token: TOKEN });
  try {
    await t.step("run_typescript", async () => {
      assertReturns(await callTool(client, "run_typescript", "return 6 * 7"), 42);
    });

    await t.step("run_typescript imports the npm package baked in at build time", async () => {
      const code = 'import { parse } from "csv-parse/sync";\nreturn parse("a,b\\n1,2\\n");';
      assertReturns(await callTool(client, "run_typescript", code), [["a", "b"], ["1", "2"]]);
    });

    await t.step(
      "the first run_python boots from the snapshot prepared at build time",
      async () => {
        const started = performance.now();
        const result = await callTool(client, "run_python", "import math\nmath.factorial(5)");
        const ms = Math.round(performance.now() - started);
        assertReturns(result, 120);
        console.log(`first run_python: ${ms} ms (in the container, warm pool off)`);
        const log = await logs(name);
        assert(!/without (a memory|their) snapshot/.test(log), `no snapshot used:\n${log}`);
        assert(!/Preparing the Python snapshot/.test(log), `a snapshot was built:\n${log}`);
      },
    );

    await t.step(
      "an upstream tool call reaches server-memory from the mounted mcp.json",
      async () => {
        const result = await callTool(
          client,
          "run_python",
          [
            'await tools.memory.create_entities(entities=[{"name": "in-a-container", "entityType": "test", "observations": ["read-only"]}])',
            "graph = await tools.memory.read_graph()",
            '[e["name"] for e in graph["entities"]]',
          ].join("\n"),
        );
        assertReturns(result, ["in-a-container"]);
        // The entry's ${MEMORY_FILE_PATH} came from the container's environment.
        assertMatch(await podman(["exec", name, "cat", "/tmp/memory.jsonl"]), /in-a-container/);
      },
    );

    await t.step("podman stop drains a run in flight and the server exits 0", async () => {
      // The run says it started through the upstream server, then sleeps past the stop.
      const inFlight = callTool(
        client,
        "run_python",
        [
          "import asyncio",
          'await tools.memory.create_entities(entities=[{"name": "draining", "entityType": "test", "observations": []}])',
          // Long enough that the stop lands while it sleeps: at 3 s, a loaded CI machine once
          // took longer to start the stop, and the run had finished ("draining 0 runs").
          "await asyncio.sleep(10)",
          '"finished"',
        ].join("\n"),
      );
      // Settled here, so that a failure below does not leave a rejection unhandled.
      const settled = inFlight.then((result) => ({ result }), (error: Error) => ({ error }));
      const deadline = Date.now() + 60_000;
      while (!(await podman(["exec", name, "cat", "/tmp/memory.jsonl"])).includes("draining")) {
        assert(Date.now() < deadline, `the run did not start:\n${await logs(name)}`);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      await podman(["stop", "-t", "45", name], 90_000);
      const outcome = await settled;
      assert(
        "result" in outcome,
        `the run in flight failed: ${"error" in outcome && outcome.error}`,
      );
      assertReturns(outcome.result, "finished");
      assertEquals(await podman(["inspect", name, "--format", "{{.State.ExitCode}}"]), "0");
      assertMatch(await logs(name), /draining 1 run/);
    });
  } finally {
    await client.close().catch(() => {});
  }
}
