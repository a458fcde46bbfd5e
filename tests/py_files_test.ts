/**
 * Host files in Python runs, through the real server over stdio: a run granted a directory under
 * `ALLOWED_PROJECTS` (`permissions.read`) reads a CSV there, and every way out is attempted
 * (`..`, symlinks that lead out of the grant, `/proc`, writes, JavaScript reached through allowed
 * modules); a run without the grant, the warm child after it and another session see no host
 * file.
 *
 * @module
 */
import { join } from "node:path";
import { assertEquals, assertFails, assertMatch, describeResult } from "./_assert.ts";
import { withTempDir } from "./_fs.ts";
import { type ServerHarness, startServer } from "./_stdio_server.ts";
import { DEFAULT_PYTHON_IMPORTS } from "../src/exec/python/child.ts";

/** Reaches the worker's JavaScript globals through allowed modules, past the import hook. */
const JS = 'import random\njs = random._os.sys.modules["importlib"].import_module("js")\n';
const SECRET = "secret-outside-the-grant";
const CSV = "day,visits\n2026-12-01,12\n2026-12-02,30\n";

interface Tree {
  /** The granted directory. */
  data: string;
  /** A directory under ALLOWED_PROJECTS that is not granted. */
  other: string;
  /** A directory outside ALLOWED_PROJECTS. */
  outside: string;
}

async function makeTree(root: string): Promise<Tree> {
  const projects = join(root, "projects");
  const tree = {
    data: join(projects, "data"),
    other: join(projects, "other"),
    outside: join(root, "outside"),
  };
  for (const dir of Object.values(tree)) await Deno.mkdir(dir, { recursive: true });
  await Deno.mkdir(join(tree.data, "sub"));
  await Deno.writeTextFile(join(tree.data, "visits.csv"), CSV);
  await Deno.writeTextFile(join(tree.other, "secret.txt"), SECRET);
  await Deno.writeTextFile(join(tree.outside, "secret.txt"), SECRET);
  // Out of ALLOWED_PROJECTS (the policy blocks it for Deno too), into a sibling that is not
  // granted, relative up and out, and to a directory.
  await Deno.symlink(join(tree.outside, "secret.txt"), join(tree.data, "to_outside"));
  await Deno.symlink(join(tree.other, "secret.txt"), join(tree.data, "to_other"));
  await Deno.symlink("../../other/secret.txt", join(tree.data, "sub", "up_and_out"));
  await Deno.symlink(tree.other, join(tree.data, "other_dir"));
  return tree;
}

/** Paths through the links {@linkcode makeTree} plants in `data`, each leading out of the grant. */
function throughLinks(data: string): string[] {
  return [
    join(data, "to_outside"),
    join(data, "to_other"),
    join(data, "sub", "up_and_out"),
    join(data, "other_dir", "secret.txt"),
  ];
}

async function withFilesServer(
  fn: (server: ServerHarness, tree: Tree) => Promise<void>,
): Promise<void> {
  await withTempDir("ce-pyfiles-", async (root) => {
    const tree = await makeTree(root);
    const server = await startServer({
      settings: { python: { allowedImports: [...DEFAULT_PYTHON_IMPORTS, "os"] } },
      env: {
        ALLOWED_PROJECTS: join(root, "projects"),
        // One warm child, so that a run after a granted one takes a pooled child.
        CODE_EXECUTOR_PYTHON_WARM_POOL: "1",
      },
    });
    try {
      await fn(server, tree);
    } finally {
      await server.close();
    }
  });
}

/** Python that tries `expr` and returns what it read, or the exception's class name. */
function attempt(expr: string): string {
  return `try:\n    r = ${expr}\nexcept BaseException as e:\n    r = "refused: " + type(e).__name__\nr`;
}

Deno.test("run_python reads a granted directory read-only, and nothing else of the host", async (t) => {
  await withFilesServer(async (server, { data, other, outside }) => {
    const grant = { permissions: { read: [data] } };

    await t.step("reads a CSV from the granted directory, at the same path", async () => {
      const result = await server.runPy(
        `import csv, os\nrows = list(csv.DictReader(open(${
          JSON.stringify(join(data, "visits.csv"))
        })))\n[sum(int(r["visits"]) for r in rows), sorted(os.listdir(${JSON.stringify(data)}))]`,
        // The first run may wait for the snapshot to be built.
        { ...grant, timeoutMs: 120_000 },
      );
      assertEquals(result.ok, true, describeResult(result));
      assertEquals(result.returnValue, [42, [
        "other_dir",
        "sub",
        "to_other",
        "to_outside",
        "visits.csv",
      ]]);
    });

    await t.step("escapes by .., symlinks, /proc and /etc fail", async () => {
      const paths = [
        join(data, "..", "other", "secret.txt"),
        join(data, "..", "..", "outside", "secret.txt"),
        join(other, "secret.txt"),
        join(outside, "secret.txt"),
        ...throughLinks(data),
        "/proc/self/environ",
        "/proc/self/cmdline",
        "/proc/1/status",
        "/etc/passwd",
      ];
      for (const path of paths) {
        const result = await server.runPy(attempt(`open(${JSON.stringify(path)}).read()`), grant);
        assertEquals(result.ok, true, describeResult(result));
        assertMatch(String(result.returnValue), /^refused: /, `${path}: ${describeResult(result)}`);
      }
    });

    await t.step("JavaScript reached from Python reads only what Deno grants", async () => {
      const paths = [
        join(outside, "secret.txt"),
        join(other, "secret.txt"),
        ...throughLinks(data),
        "/proc/self/environ",
        "/etc/passwd",
      ];
      for (const path of paths) {
        const result = await server.runPy(
          JS + attempt(`js.Deno.readTextFileSync(${JSON.stringify(path)})`),
          grant,
        );
        assertEquals(result.ok, true, describeResult(result));
        assertMatch(String(result.returnValue), /^refused: /, `${path}: ${describeResult(result)}`);
      }
      const granted = await server.runPy(
        JS + `js.Deno.readTextFileSync(${JSON.stringify(join(data, "visits.csv"))})`,
        grant,
      );
      assertEquals(granted.returnValue, CSV, describeResult(granted));
    });

    await t.step("writes to the grant fail; the run's own directory takes them", async () => {
      const csv = JSON.stringify(join(data, "visits.csv"));
      const tries = [
        `open(${JSON.stringify(join(data, "new.txt"))}, "w").write("x")`,
        `open(${csv}, "a").write("x")`,
        `open(${csv}, "r+").write("x")`,
        `__import__("os").remove(${csv})`,
        `__import__("os").rename(${csv}, ${JSON.stringify(join(data, "moved.csv"))})`,
        `__import__("os").mkdir(${JSON.stringify(join(data, "made"))})`,
        `__import__("os").symlink("/etc/passwd", ${JSON.stringify(join(data, "made_link"))})`,
        `__import__("os").chmod(${csv}, 0o777)`,
      ];
      for (const expr of tries) {
        const result = await server.runPy(attempt(expr), grant);
        assertMatch(
          String(result.returnValue),
          /^refused: (OSError|PermissionError)$/,
          `${expr}: ${describeResult(result)}`,
        );
      }
      const local = await server.runPy(
        'open("notes.txt", "w").write("kept")\nopen("notes.txt").read()',
        grant,
      );
      assertEquals(local.returnValue, "kept", describeResult(local));
      assertEquals(await Deno.readTextFile(join(data, "visits.csv")), CSV);
      assertEquals(
        [...Deno.readDirSync(data)].map((e) => e.name).sort(),
        ["other_dir", "sub", "to_other", "to_outside", "visits.csv"],
      );
    });

    await t.step(
      "runs without the grant (warm children after granted runs) see no host file",
      async () => {
        const csv = JSON.stringify(join(data, "visits.csv"));
        for (let i = 0; i < 2; i++) {
          const seen = await server.runPy(
            `import os\n[os.path.exists(${csv}), os.path.exists(${
              JSON.stringify(data)
            }), os.path.exists("notes.txt")]`,
          );
          assertEquals(seen.returnValue, [false, false, false], describeResult(seen));
          const read = await server.runPy(JS + attempt(`js.Deno.readTextFileSync(${csv})`));
          assertMatch(String(read.returnValue), /^refused: /, describeResult(read));
        }
      },
    );

    await t.step("a path outside ALLOWED_PROJECTS is refused before the run", async () => {
      const result = await server.runPy("1", { permissions: { read: [outside] } });
      assertFails(result, "PermissionError", /not under ALLOWED_PROJECTS/);
      const write = await server.runPy("1", { permissions: { write: [data] } });
      assertEquals(write.isError, true, describeResult(write));
    });

    await t.step("a session keeps the grants it started with", async () => {
      const path = JSON.stringify(join(data, "visits.csv"));
      const first = await server.runPy(`n = len(open(${path}).read())\nn`, {
        ...grant,
        session: "files",
      });
      assertEquals(first.returnValue, CSV.length, describeResult(first));
      const again = await server.runPy("n + 1", { ...grant, session: "files" });
      assertEquals(again.returnValue, CSV.length + 1, describeResult(again));
      const widened = await server.runPy("n", { session: "files" });
      assertFails(widened, "PermissionError", /started with the read grants/);
      const plain = await server.runPy(attempt(`open(${path}).read()`), { session: "plain" });
      assertEquals(plain.returnValue, "refused: FileNotFoundError", describeResult(plain));
      const late = await server.runPy("1", { ...grant, session: "plain" });
      assertFails(late, "PermissionError", /started with no read grants/);
    });
  });
});
