/**
 * A user's first start: `deno task start` in a fresh copy of the repository with an empty
 * `DENO_DIR` downloads only what the server needs, and says when it prepares Python, its one slow
 * step. Deno installs every package a lockfile names, so the npm packages only tests use live in
 * `tests/third_party/deno.json` and its own lock, never in the project's import map or
 * `deno.lock`.
 *
 * @module
 */
import { join } from "node:path";
import { assert, assertEquals } from "./_assert.ts";
import {
  CONFORMANCE,
  EVERYTHING,
  FILESYSTEM,
  MEMORY,
  networkEnv,
  ROOT,
  withTempDir,
} from "./_helpers.ts";
import { THIRD_PARTY_CONFIG } from "./_third_party.ts";

interface ImportMap {
  imports: Record<string, string>;
}

interface Lock {
  specifiers: Record<string, string>;
  npm: Record<string, unknown>;
}

async function readJson<T>(path: string): Promise<T> {
  return JSON.parse(await Deno.readTextFile(path)) as T;
}

/** `name@version` of every package a lock holds (the peer-dependency suffix `_peer@x` dropped). */
function lockedPackages(lock: Lock): Set<string> {
  return new Set(
    Object.keys(lock.npm).map((key) => key.replace(/^((?:@[^/]+\/)?[^@]+@[^_]+)_.*$/, "$1")),
  );
}

/** `name@version` of every npm package in a Deno cache. */
async function cachedPackages(denoDir: string): Promise<Set<string>> {
  const registry = join(denoDir, "npm", "registry.npmjs.org");
  const found = new Set<string>();
  const versions = async (dir: string, name: string) => {
    for await (const entry of Deno.readDir(dir)) {
      if (entry.isDirectory) found.add(`${name}@${entry.name}`);
    }
  };
  for await (const entry of Deno.readDir(registry)) {
    if (!entry.isDirectory) continue;
    if (!entry.name.startsWith("@")) {
      await versions(join(registry, entry.name), entry.name);
      continue;
    }
    for await (const scoped of Deno.readDir(join(registry, entry.name))) {
      if (scoped.isDirectory) {
        await versions(join(registry, entry.name, scoped.name), `${entry.name}/${scoped.name}`);
      }
    }
  }
  return found;
}

/** Copies what a user's checkout needs to start the server (no node_modules, no tests). */
async function copyCheckout(to: string): Promise<void> {
  const copy = async (from: string, dest: string) => {
    const info = await Deno.stat(from);
    if (!info.isDirectory) return await Deno.copyFile(from, dest);
    await Deno.mkdir(dest, { recursive: true });
    for await (const entry of Deno.readDir(from)) {
      await copy(join(from, entry.name), join(dest, entry.name));
    }
  };
  await Deno.mkdir(to, { recursive: true });
  for (const name of ["main.ts", "deno.json", "deno.lock", "src", "sandbox", "lua"]) {
    await copy(join(ROOT, name), join(to, name));
  }
}

/** Reads a stream of text until a line matches, then keeps draining it into the returned text. */
async function waitForLine(
  stream: ReadableStream<Uint8Array>,
  pattern: RegExp,
): Promise<{ seen: boolean; rest: Promise<string>; text: () => string }> {
  let text = "";
  const reader = stream.pipeThrough(new TextDecoderStream()).getReader();
  while (!pattern.test(text)) {
    const { value, done } = await reader.read();
    if (done) return { seen: false, rest: Promise.resolve(text), text: () => text };
    text += value;
  }
  const rest = (async () => {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return text;
      text += value;
    }
  })();
  return { seen: true, rest, text: () => text };
}

Deno.test("the project's import map and deno.lock hold no package that only tests use", async () => {
  const runtime = await readJson<ImportMap>(join(ROOT, "deno.json"));
  const thirdParty = await readJson<ImportMap>(THIRD_PARTY_CONFIG);
  for (const [name, target] of Object.entries(thirdParty.imports)) {
    const ours = runtime.imports[name];
    assert(
      ours === undefined || ours === target,
      `${name} is ${ours} in deno.json but ${target} in tests/third_party/deno.json: pin it once`,
    );
  }
  const testOnly = Object.keys(thirdParty.imports).filter((name) => !(name in runtime.imports));
  assert(testOnly.includes("oidc-provider"), `tests/third_party/deno.json maps ${testOnly}`);
  for (const pin of [EVERYTHING, FILESYSTEM, MEMORY, CONFORMANCE]) {
    assert(
      Object.values(thirdParty.imports).includes(pin),
      `${pin} is pinned for the tests but not in tests/third_party/deno.json, whose lock it needs`,
    );
  }
  const lock = await readJson<Lock>(join(ROOT, "deno.lock"));
  const imported = new Set(
    Object.values(runtime.imports).map((target) => {
      const match = /^npm:\/?((?:@[^/]+\/)?[^@/]+@[^/]+)/.exec(target);
      return match ? `npm:${match[1]}` : target;
    }),
  );
  const stray = Object.keys(lock.specifiers).filter((specifier) => !imported.has(specifier));
  assertEquals(
    stray,
    [],
    `deno.lock names packages that deno.json does not import; a first start would download them ` +
      `(a test that runs one from the repository without --config ${THIRD_PARTY_CONFIG} adds it)`,
  );
});

Deno.test("deno task start on an empty DENO_DIR downloads only deno.lock's packages, none of the tests', and says when it prepares Python", async () => {
  await withTempDir("ce-first-start-", async (dir) => {
    const checkout = join(dir, "checkout");
    const home = join(dir, "home");
    const denoDir = join(dir, "deno");
    await copyCheckout(checkout);
    await Deno.mkdir(home);
    const child = new Deno.Command(Deno.execPath(), {
      args: ["task", "start"],
      cwd: checkout,
      clearEnv: true,
      env: {
        ...networkEnv(),
        PATH: Deno.env.get("PATH") ?? "",
        HOME: home,
        DENO_DIR: denoDir,
        TMPDIR: dir,
        NO_COLOR: "1",
      },
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    // A start that never gets ready is killed, so the test fails instead of hanging.
    const timer = setTimeout(() => child.kill("SIGKILL"), 300_000);
    let stderr = "";
    try {
      const stdout = new Response(child.stdout).text();
      // The snapshot is built after "ready", in the background: its two lines are the progress a
      // person sees of the one slow step of a first start.
      const ready = await waitForLine(
        child.stderr,
        /Python snapshot ready|without a memory snapshot/,
      );
      await child.stdin.close();
      const status = await child.status;
      stderr = await ready.rest;
      assert(ready.seen, `the first start did not prepare Python:\n${stderr}`);
      assert(/ready on stdio/.test(stderr), stderr);
      assert(/Preparing the Python snapshot, first start only/.test(stderr), stderr);
      assert(/Python snapshot ready in [\d.]+ s/.test(stderr), stderr);
      assertEquals(status.code, 0, stderr);
      assertEquals(await stdout, "", "the first start printed on stdout, which is the protocol");
    } finally {
      clearTimeout(timer);
    }

    const cached = await cachedPackages(denoDir);
    assert(
      [...cached].some((pkg) => pkg.startsWith("pyodide@")),
      `the first start did not download Pyodide into the empty DENO_DIR ${denoDir}:\n${stderr}`,
    );
    const runtimeMap = await readJson<ImportMap>(join(ROOT, "deno.json"));
    const thirdPartyMap = await readJson<ImportMap>(THIRD_PARTY_CONFIG);
    const cachedNames = new Set([...cached].map((pkg) => pkg.slice(0, pkg.lastIndexOf("@"))));
    const testOnly = Object.keys(thirdPartyMap.imports)
      .filter((name) => !(name in runtimeMap.imports) && cachedNames.has(name));
    assertEquals(testOnly, [], `the first start downloaded test-only packages:\n${stderr}`);
    const runtime = lockedPackages(await readJson<Lock>(join(ROOT, "deno.lock")));
    const unlocked = [...cached].filter((pkg) => !runtime.has(pkg));
    assertEquals(unlocked, [], `the first start downloaded packages deno.lock does not hold`);
  });
});
