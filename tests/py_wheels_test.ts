import { join } from "node:path";
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { leftovers } from "./_helpers.ts";
import { denoDir, hostPath, LIMITS, pyodideDir, snapshotPath, workerPath } from "./_pyodide.ts";
import { resolveSettings } from "../src/config/settings.ts";
import { Executor } from "../src/exec/executor.ts";
import { PyChild, type PyChildOptions } from "../src/exec/py_sandbox.ts";
import {
  impureWheelReason,
  type LocalWheel,
  readWheels,
  wheelModules,
} from "../src/exec/py_wheels.ts";
import type { Logger } from "../src/log.ts";

/** A logger that keeps warnings, so that tests can check what was reported. */
function captureLog(): Logger & { warnings: string[] } {
  const warnings: string[] = [];
  return { warnings, debug() {}, info() {}, warn: (m) => warnings.push(m), error() {} };
}

const CRC_TABLE = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});

function crc32(bytes: Uint8Array): number {
  let crc = 0xffffffff;
  for (const byte of bytes) crc = CRC_TABLE[(crc ^ byte) & 0xff] ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}

/** Builds a zip archive of stored (uncompressed) entries: all a wheel needs. */
function zip(files: Record<string, string>): Uint8Array {
  const encoder = new TextEncoder();
  const locals: Uint8Array[] = [];
  const centrals: Uint8Array[] = [];
  let offset = 0;
  for (const [path, text] of Object.entries(files)) {
    const name = encoder.encode(path);
    const data = encoder.encode(text);
    const crc = crc32(data);
    const local = new Uint8Array(30 + name.length + data.length);
    const lv = new DataView(local.buffer);
    lv.setUint32(0, 0x04034b50, true);
    lv.setUint16(4, 20, true);
    lv.setUint16(6, 0x0800, true);
    lv.setUint16(12, 0x21, true);
    lv.setUint32(14, crc, true);
    lv.setUint32(18, data.length, true);
    lv.setUint32(22, data.length, true);
    lv.setUint16(26, name.length, true);
    local.set(name, 30);
    local.set(data, 30 + name.length);
    const central = new Uint8Array(46 + name.length);
    const cv = new DataView(central.buffer);
    cv.setUint32(0, 0x02014b50, true);
    cv.setUint16(4, 20, true);
    cv.setUint16(6, 20, true);
    cv.setUint16(8, 0x0800, true);
    cv.setUint16(14, 0x21, true);
    cv.setUint32(16, crc, true);
    cv.setUint32(20, data.length, true);
    cv.setUint32(24, data.length, true);
    cv.setUint16(28, name.length, true);
    cv.setUint32(42, offset, true);
    central.set(name, 46);
    locals.push(local);
    centrals.push(central);
    offset += local.length;
  }
  const centralSize = centrals.reduce((sum, c) => sum + c.length, 0);
  const end = new Uint8Array(22);
  const ev = new DataView(end.buffer);
  ev.setUint32(0, 0x06054b50, true);
  ev.setUint16(8, centrals.length, true);
  ev.setUint16(10, centrals.length, true);
  ev.setUint32(12, centralSize, true);
  ev.setUint32(16, offset, true);
  const out = new Uint8Array(offset + centralSize + end.length);
  let at = 0;
  for (const part of [...locals, ...centrals, end]) {
    out.set(part, at);
    at += part.length;
  }
  return out;
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
    const log = captureLog();
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

async function withWheelChild(
  wheels: LocalWheel[],
  options: Partial<PyChildOptions>,
  fn: (child: PyChild) => Promise<void>,
): Promise<void> {
  const tempRoot = await Deno.makeTempDir({ prefix: "ce-py-wheels-" });
  let child: PyChild | undefined;
  try {
    child = await PyChild.spawn({
      denoPath: Deno.execPath(),
      hostPath,
      workerPath,
      pyodideDir,
      snapshotPath,
      tempRoot,
      denoDir,
      memoryMb: 512,
      log: captureLog(),
      wheels,
      session: true,
      ...options,
    });
    assert(await child.ready, "the Python child did not start");
    await fn(child);
  } finally {
    await child?.dispose();
    const left = await leftovers(tempRoot);
    await Deno.remove(tempRoot, { recursive: true });
    assertEquals(left, [], "sandbox directories left behind");
  }
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
  const log = captureLog();
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
  const tempDir = await Deno.realPath(await Deno.makeTempDir({ prefix: "ce-exec-wheels-" }));
  const log = captureLog();
  const settings = resolveSettings({
    python: { wheelDirs: [dir], warmPool: 0 },
    sandbox: { warmPool: 0, tempDir },
  });
  const executor = await Executor.create(settings, { log });
  try {
    const result = await executor.runPython('import mypkg\nmypkg.greet("x")');
    assertEquals(result.error, undefined);
    assertEquals(result.returnValue, "hi x");
    assertEquals(log.warnings.length, 1);
    assertMatch(log.warnings[0], /Skipping the wheel .*native-1\.0-cp312-cp312-linux_x86_64\.whl/);
  } finally {
    await executor.close();
    const left = await leftovers(tempDir);
    await Deno.remove(tempDir, { recursive: true });
    await Deno.remove(dir, { recursive: true });
    assertEquals(left, [], "sandbox directories left behind");
  }
});
