import { join } from "node:path";
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { captureWarnings, withExecutor } from "./_executor.ts";
import { LIMITS, withPyChild } from "./_pyodide.ts";
import { zipStored } from "../src/codegen/wheel.ts";
import type { PyChild, PyChildOptions } from "../src/exec/python/child.ts";
import {
  impureWheelReason,
  type LocalWheel,
  readWheels,
  wheelModules,
} from "../src/exec/python/wheels.ts";

/** A zip archive of stored entries, in the order given: all a wheel needs. */
function zip(files: Record<string, string>): Uint8Array {
  const encoder = new TextEncoder();
  return zipStored(Object.entries(files).map(([path, text]) => [path, encoder.encode(text)]));
}

/** Builds a pure-Python wheel from its modules' sources. */
function wheel(distribution: string, version: string, modules: Record<string, string>): Uint8Array {
  const info = `${distribution}-${version}.dist-info`;
  const tops = [...new Set(Object.keys(modules).map((p) => p.split("/")[0].replace(/\.py$/, "")))];
  const files: Record<string, string> = {
    ...modules,
    [`${info}/METADATA`]: `Metadata-Version: 2.1\nName: ${distribution}\nVersion: ${version}\n`,
    [`${info}/WHEEL`]:
      "Wheel-Version: 1.0\nGenerator: code-executor-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    [`${info}/top_level.txt`]: tops.join("\n") + "\n",
  };
  files[`${info}/RECORD`] = [...Object.keys(files), `${info}/RECORD`].map((p) => `${p},,`)
    .join("\n") + "\n";
  return zip(files);
}

const MYPKG = wheel("mypkg", "1.0", {
  "mypkg/__init__.py":
    'import os\n\ndef greet(n):\n    return f"hi {n}"\n\ndef sep():\n    return os.sep\n',
  "mypkg/util.py": "TWICE = 2\n",
});
const MYMOD = wheel("mymod", "2.0", { "mymod.py": "def triple(x):\n    return 3 * x\n" });

/** Writes wheels into a new temporary directory. */
async function wheelDir(files: Record<string, Uint8Array>): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "ce-wheels-" });
  for (const [name, bytes] of Object.entries(files)) await Deno.writeFile(join(dir, name), bytes);
  return dir;
}

Deno.test("wheelModules() lists a wheel's top-level packages and modules", () => {
  assertEquals(wheelModules(MYPKG), ["mypkg"]);
  assertEquals(wheelModules(MYMOD), ["mymod"]);
  assertEquals(
    wheelModules(zip({ "a/__init__.py": "", "b.py": "", "x.dist-info/WHEEL": "", "c.txt": "" })),
    ["a", "b"],
  );
  let message = "";
  try {
    wheelModules(new TextEncoder().encode("not a zip"));
  } catch (error) {
    message = (error as Error).message;
  }
  assertEquals(message, "Cannot read the wheel: it is not a zip archive");
  try {
    wheelModules(zip({ "a/__init__.py": "" }));
  } catch (error) {
    message = (error as Error).message;
  }
  assertEquals(message, "Cannot read the wheel: it has no .dist-info directory");
});

Deno.test("impureWheelReason() accepts pure Python 3 wheels only", () => {
  assertEquals(impureWheelReason("mypkg-1.0-py3-none-any.whl"), undefined);
  assertEquals(impureWheelReason("six-1.16.0-py2.py3-none-any.whl"), undefined);
  assertEquals(impureWheelReason("pkg-1.0-1build-py3-none-any.whl"), undefined);
  assertMatch(
    impureWheelReason("native-1.0-cp312-cp312-linux_x86_64.whl") ?? "",
    /built for cp312-linux_x86_64, and only pure-Python wheels \(none-any\)/,
  );
  assertMatch(impureWheelReason("old-1.0-py2-none-any.whl") ?? "", /not Python 3/);
  assertMatch(impureWheelReason("mypkg.whl") ?? "", /file name is not/);
});

Deno.test("readWheels() reads pure wheels in order and skips the others with a warning", async () => {
  const first = await wheelDir({
    "mypkg-1.0-py3-none-any.whl": MYPKG,
    "mymod-2.0-py3-none-any.whl": MYMOD,
    "native-1.0-cp312-cp312-linux_x86_64.whl": MYPKG,
    "broken-1.0-py3-none-any.whl": new TextEncoder().encode("not a zip"),
    "jsshim-1.0-py3-none-any.whl": wheel("jsshim", "1.0", { "js/__init__.py": "" }),
    "notes.txt": new TextEncoder().encode("not a wheel"),
  });
  const second = await wheelDir({ "mypkg-2.0-py3-none-any.whl": MYPKG });
  try {
    const log = captureWarnings();
    const wheels = await readWheels([first, second], { log });
    assertEquals(wheels.map((w) => w.name), [
      "mymod-2.0-py3-none-any.whl",
      "mypkg-1.0-py3-none-any.whl",
    ]);
    assertEquals(wheels[1].bytes, MYPKG);
    assertEquals(log.warnings, [
      `Skipping the wheel ${join(first, "broken-1.0-py3-none-any.whl")}: it is not a zip archive`,
      `Skipping the wheel ${
        join(first, "jsshim-1.0-py3-none-any.whl")
      }: it provides js, which the sandbox reserves`,
      `Skipping the wheel ${
        join(first, "native-1.0-cp312-cp312-linux_x86_64.whl")
      }: it is built for cp312-linux_x86_64, and only pure-Python wheels (none-any) can be loaded`,
      `Skipping the wheel ${
        join(second, "mypkg-2.0-py3-none-any.whl")
      }: mypkg-1.0-py3-none-any.whl is the same distribution and comes first`,
    ]);

    let message = "";
    await readWheels([first], { log, maxBytes: MYPKG.length }).catch((error) => {
      message = error.message;
    });
    assertMatch(message, /^The wheels in python\.wheelDirs are larger than .* \(reached at .*\)/);
    await readWheels([join(first, "missing")], { log }).catch((error) => {
      message = error.message;
    });
    assertMatch(message, /^Cannot read the python\.wheelDirs directory ".*missing": /);
  } finally {
    await Deno.remove(first, { recursive: true });
    await Deno.remove(second, { recursive: true });
  }
});

function withWheelChild(
  wheels: LocalWheel[],
  options: Partial<PyChildOptions>,
  fn: (child: PyChild) => Promise<void>,
): Promise<void> {
  return withPyChild({ log: captureWarnings(), wheels, session: true, ...options }, fn);
}

Deno.test("PyChild imports a wheel built by the test itself", async () => {
  const wheels = [
    { name: "mypkg-1.0-py3-none-any.whl", bytes: MYPKG },
    { name: "mymod-2.0-py3-none-any.whl", bytes: MYMOD },
  ];
  await withWheelChild(wheels, {}, async (child) => {
    assertEquals(child.boot?.fromSnapshot, true, "wheels must not stop the snapshot's use");
    assertEquals(child.boot?.wheelErrors, undefined);
    const greet = await child.run('import mypkg\nmypkg.greet("x")', LIMITS);
    assertEquals(greet.error, undefined);
    assertEquals(greet.returnValue, "hi x");
    const more = await child.run(
      "from mypkg.util import TWICE\nimport mymod\n[mymod.triple(TWICE), mypkg.sep()]",
      LIMITS,
    );
    assertEquals(more.returnValue, [6, "/"]);
    // The wheel's own imports are the admin's code; the model's are still checked.
    const os = await child.run("import os", LIMITS);
    assertEquals(os.error?.type, "ImportError");
    assertMatch(os.error?.message ?? "", /allowed imports are .*mymod, mypkg/);
    const js = await child.run("import js", LIMITS);
    assertEquals(js.error?.type, "ImportError");
  });
});

Deno.test("PyChild reports a wheel it cannot unpack and runs without it", async () => {
  const broken = wheel("brokenpkg", "1.0", { "brokenpkg/__init__.py": "VALUE = 'original'\n" });
  const at = new TextDecoder("latin1").decode(broken).indexOf("original");
  broken[at] = "O".charCodeAt(0);
  const log = captureWarnings();
  await withWheelChild(
    [
      { name: "brokenpkg-1.0-py3-none-any.whl", bytes: broken },
      { name: "mypkg-1.0-py3-none-any.whl", bytes: MYPKG },
    ],
    { log },
    async (child) => {
      assertEquals(child.boot?.wheelErrors?.length, 1);
      assertMatch(
        child.boot?.wheelErrors?.[0] ?? "",
        /^Cannot install brokenpkg-1\.0-py3-none-any\.whl: .*Bad CRC-32/,
      );
      assert(log.warnings.some((w) => w.includes("brokenpkg-1.0-py3-none-any.whl")));
      const result = await child.run('import mypkg\nmypkg.greet("still")', LIMITS);
      assertEquals(result.returnValue, "hi still");
    },
  );
});

Deno.test("Executor.runPython() imports the wheels of python.wheelDirs", async () => {
  const dir = await wheelDir({
    "mypkg-1.0-py3-none-any.whl": MYPKG,
    "native-1.0-cp312-cp312-linux_x86_64.whl": MYPKG,
  });
  const log = captureWarnings();
  try {
    await withExecutor({ python: { wheelDirs: [dir] } }, async (executor) => {
      const result = await executor.runPython('import mypkg\nmypkg.greet("x")');
      assertEquals(result.error, undefined);
      assertEquals(result.returnValue, "hi x");
      assertEquals(log.warnings.length, 1);
      assertMatch(
        log.warnings[0],
        /Skipping the wheel .*native-1\.0-cp312-cp312-linux_x86_64\.whl/,
      );
    }, { log });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
