/**
 * The network and path rules of `permissions`, end to end: a refused grant must leave the
 * sandbox unable to reach the host or the file, and what is granted must work.
 *
 * @module
 */
import { join } from "node:path";
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { leftovers } from "./_proc.ts";
import { withExecutor } from "./_executor.ts";
import { startCounter } from "./_counter.ts";
import type { ExecutionResult } from "../src/exec/result.ts";

function describe(result: ExecutionResult): string {
  return JSON.stringify({ ok: result.ok, error: result.error, returnValue: result.returnValue });
}

/** Hosts that all reach the loopback server (or would, if Deno let them). */
const LOOPBACK_SPELLINGS = [
  "127.0.0.1",
  "0x7f.0.0.1",
  "0x7f.1",
  "0x7f000001",
  "2130706433",
  "0177.0.0.1",
  "017700000001",
  "127.1",
  "127.0.0.1.",
  "[::ffff:127.0.0.1]",
  "[::ffff:7f00:1]",
  "[::1]",
  "[0:0:0:0:0:0:0:1]",
  "localhost",
  "LOCALHOST",
  "localhost.",
  "foo.localhost",
  "0.0.0.0",
  "0",
];

/** Code that tries every spelling with fetch and with a raw TCP connection. */
function reachCode(port: number, spellings: string[]): string {
  return `
const port = ${port};
const out: string[] = [];
for (const host of ${JSON.stringify(spellings)}) {
  try {
    await (await fetch(\`http://\${host}:\${port}/\`)).text();
    out.push("fetched " + host);
  } catch (error) {
    out.push((error as Error).name);
  }
  try {
    (await Deno.connect({ hostname: host.replace(/^\\[|\\]$/g, ""), port })).close();
    out.push("connected " + host);
  } catch (error) {
    out.push((error as Error).name);
  }
}
return out;`;
}

Deno.test("Executor.runTypescript() refuses every spelling of an unlisted loopback host, and it stays unreached", async () => {
  const counter = startCounter();
  try {
    await withExecutor({ permissions: { net: ["example.com"] } }, async (executor) => {
      const code = reachCode(counter.port, LOOPBACK_SPELLINGS);
      for (const host of LOOPBACK_SPELLINGS) {
        const result = await executor.runTypescript(code, {
          permissions: { net: [`${host}:${counter.port}`] },
        });
        assertEquals(result.error?.type, "PermissionError", `${host}: ${describe(result)}`);
        assertMatch(
          result.error?.message ?? "",
          /it is the (loopback|unspecified) (address|name) .*which the admin must list explicitly in permissions\.net/,
          host,
        );
      }
      // Without a grant, the sandbox itself stops every spelling.
      const result = await executor.runTypescript(code);
      assertEquals(result.ok, true, describe(result));
      const outcomes = result.returnValue as string[];
      assertEquals(outcomes.filter((o) => /^(fetched|connected) /.test(o)), [], describe(result));
    });
    assertEquals(counter.requests, []);
  } finally {
    await counter.close();
  }
});

Deno.test("Executor.runTypescript() grants an explicitly listed loopback host in canonical form only", async () => {
  const counter = startCounter();
  const host = `127.0.0.1:${counter.port}`;
  try {
    await withExecutor({ permissions: { net: [host] } }, async (executor) => {
      const fetchCode = (spelling: string) =>
        `return await (await fetch("http://${spelling}:${counter.port}/")).text()`;
      const listed = await executor.runTypescript(fetchCode("127.0.0.1"), {
        permissions: { net: [host] },
      });
      assertEquals(listed.returnValue, "pong", describe(listed));
      // Asked for as 0x7f.1, the grant is the canonical 127.0.0.1: the spelling never reaches
      // Deno's flags, so a resolver that reads 0x7f.1 on its own (Deno.connect) is refused.
      const spelled = await executor.runTypescript(reachCode(counter.port, ["0x7f.1"]), {
        permissions: { net: [`0x7f.1:${counter.port}`] },
      });
      assertEquals(spelled.returnValue, ["fetched 0x7f.1", "NotCapable"], describe(spelled));
      const others = await executor.runTypescript(
        reachCode(counter.port, LOOPBACK_SPELLINGS.filter((s) => s !== "127.0.0.1")),
        { permissions: { net: [host] } },
      );
      const reached = (others.returnValue as string[]).filter((o) =>
        /^(fetched|connected) /.test(o)
      );
      // The URL parser of fetch turns these into 127.0.0.1 itself; every other way is refused.
      assertEquals(reached, [
        "fetched 0x7f.0.0.1",
        "fetched 0x7f.1",
        "fetched 0x7f000001",
        "fetched 2130706433",
        "fetched 0177.0.0.1",
        "fetched 017700000001",
        "fetched 127.1",
        "fetched 127.0.0.1.",
        "fetched [::ffff:127.0.0.1]",
        "connected [::ffff:127.0.0.1]",
        "fetched [::ffff:7f00:1]",
        "connected [::ffff:7f00:1]",
      ], describe(others));
      for (const refused of [`127.0.0.1:${counter.port + 1}`, `localhost:${counter.port}`]) {
        const result = await executor.runTypescript("return 1", {
          permissions: { net: [refused] },
        });
        assertEquals(result.error?.type, "PermissionError", refused);
      }
    });
    // One request per successful fetch; the raw connections send none.
    assertEquals(counter.requests.length, 1 + 1 + 10);
  } finally {
    await counter.close();
  }
});

/** Outcome of each attempt: "ok:<start of the text>" or the error's name. */
function attemptsCode(project: string): string {
  const p = JSON.stringify(project);
  return `
import { readFileSync, symlinkSync } from "node:fs";
const P = ${p};
const attempts: Record<string, () => Promise<unknown>> = {
  data: () => Deno.readTextFile(P + "/data.txt"),
  nested: () => Deno.readTextFile(P + "/sub/inner.txt"),
  internalLink: () => Deno.readTextFile(P + "/sub/data_link.txt"),
  linkDir: () => Deno.readTextFile(P + "/link/passwd"),
  linkFile: () => Deno.readTextFile(P + "/link_to_file"),
  dotted: () => Deno.readTextFile(P + "/./link/passwd"),
  parent: () => Deno.readTextFile(P + "/sub/../link/passwd"),
  doubleSlash: () => Deno.readTextFile(P + "//link/passwd"),
  alias: () => Deno.readTextFile(P + "/alias/link/passwd"),
  aliasData: () => Deno.readTextFile(P + "/alias/data.txt"),
  readDir: async () => [...Deno.readDirSync(P + "/link")].length,
  nodeFs: async () => readFileSync(P + "/link_to_file", "utf8"),
  fetchFile: async () => await (await fetch("file://" + P + "/link/passwd")).text(),
  importText: async () =>
    (await import("file://" + P + "/link_to_file", { with: { type: "text" } })).default,
  realPath: () => Deno.realPath(P + "/link"),
  readLink: () => Deno.readLink(P + "/link"),
  chdir: async () => { Deno.chdir(P + "/link"); return Deno.readTextFileSync("passwd"); },
  writeThrough: () => Deno.writeTextFile(P + "/link/ce-planted", "x"),
  symlink: () => Deno.symlink("/etc", P + "/out/made"),
  symlinkRelative: () => Deno.symlink("../link", P + "/out/made_relative"),
  nodeSymlink: async () => symlinkSync("/etc", P + "/out/made_node"),
  renameLink: () => Deno.rename(P + "/link", P + "/out/link"),
  writeOut: async () => { await Deno.writeTextFile(P + "/out/ok.txt", "written"); return "written"; },
};
const out: Record<string, string> = {};
for (const [name, attempt] of Object.entries(attempts)) {
  try {
    out[name] = "ok:" + String(await attempt()).slice(0, 12);
  } catch (error) {
    const { name: type, message } = error as Error;
    out[name] = type === "NotCapable" ? type : \`\${type}: \${message.slice(0, 40)}\`;
  }
}
return out;`;
}

Deno.test("Executor.runTypescript() keeps a read grant from leaving the project through symlinks", async () => {
  const root = await Deno.realPath(await Deno.makeTempDir({ prefix: "ce-perm-project-" }));
  const project = join(root, "project");
  try {
    await Deno.mkdir(join(project, "sub"), { recursive: true });
    await Deno.mkdir(join(project, "out"));
    await Deno.writeTextFile(join(project, "data.txt"), "project data");
    await Deno.writeTextFile(join(project, "sub", "inner.txt"), "inner data");
    await Deno.symlink("../data.txt", join(project, "sub", "data_link.txt"));
    await Deno.symlink("/etc", join(project, "link"));
    await Deno.symlink("/etc/passwd", join(project, "link_to_file"));
    await Deno.symlink(project, join(project, "alias"));

    // Control: with --allow-read alone, the links lead out (the hole this rule closes).
    const script = join(root, "control.ts");
    await Deno.writeTextFile(
      script,
      `console.log(Deno.readTextFileSync(${JSON.stringify(join(project, "link", "passwd"))}))`,
    );
    const control = await new Deno.Command(Deno.execPath(), {
      args: ["run", "--no-config", `--allow-read=${project},${script}`, script],
      stdout: "piped",
      stderr: "null",
    }).output();
    assertMatch(new TextDecoder().decode(control.stdout), /^root:/);

    await withExecutor({ allowedProjects: [project] }, async (executor) => {
      const result = await executor.runTypescript(attemptsCode(project), {
        permissions: { read: [project], write: [join(project, "out")] },
      });
      assertEquals(result.ok, true, describe(result));
      const outcomes = result.returnValue as Record<string, string>;
      // A refused dynamic import is a TypeError that carries the permission error.
      assertMatch(outcomes.importText, /^TypeError: Requires read access to/);
      delete outcomes.importText;
      assertEquals(outcomes, {
        data: "ok:project data",
        nested: "ok:inner data",
        internalLink: "ok:project data",
        linkDir: "NotCapable",
        linkFile: "NotCapable",
        dotted: "NotCapable",
        parent: "NotCapable",
        doubleSlash: "NotCapable",
        alias: "NotCapable",
        aliasData: "NotCapable",
        readDir: "NotCapable",
        nodeFs: "NotCapable",
        fetchFile: "NotCapable",
        realPath: "NotCapable",
        readLink: "NotCapable",
        chdir: "NotCapable",
        writeThrough: "NotCapable",
        symlink: "NotCapable",
        symlinkRelative: "NotCapable",
        nodeSymlink: "NotCapable",
        renameLink: "NotCapable",
        writeOut: "ok:written",
      });
      assert(!/root:.*:0:0:/.test(JSON.stringify(result)), "/etc/passwd leaked");
      assertEquals(await Deno.readTextFile(join(project, "out", "ok.txt")), "written");
      assertEquals(await Deno.lstat("/etc/ce-planted").then(() => true, () => false), false);
      assertEquals((await leftovers(join(project, "out"))).sort(), ["ok.txt"]);

      const write = await executor.runTypescript("return 1", {
        permissions: { read: [project], write: [project] },
      });
      assertEquals(write.error?.type, "PermissionError");
      assertMatch(write.error?.message ?? "", /write access to .*"\S*alias" is a symlink.*rename/);
    });
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("Executor.runTypescript() checks every redirect of a granted host against the grant", async () => {
  const counter = startCounter();
  const redirector = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    (request) => Response.redirect(new URL(request.url).searchParams.get("to")!, 302),
  );
  const host = `127.0.0.1:${redirector.addr.port}`;
  try {
    await withExecutor({ permissions: { net: [host] } }, async (executor) => {
      for (const to of [`http://127.0.0.1:${counter.port}/`, `http://0x7f.1:${counter.port}/`]) {
        const result = await executor.runTypescript(
          `return await (await fetch("http://${host}/?to=" + encodeURIComponent(${
            JSON.stringify(to)
          }))).text()`,
          { permissions: { net: [host] } },
        );
        assertEquals(result.error?.type, "PermissionError", describe(result));
        assertMatch(result.error?.message ?? "", /Requires net access to "127\.0\.0\.1:\d+"/);
      }
    });
    assertEquals(counter.requests, []);
  } finally {
    await redirector.shutdown();
    await counter.close();
  }
});
