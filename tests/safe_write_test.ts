import { join } from "node:path";
import { assert, assertEquals } from "./_assert.ts";
import { snapshotFiles, withUserDirs } from "./_fs.ts";
import { backupFile, writeFileAtomic } from "../src/config/safe_write.ts";
import { write } from "./_setup.ts";

Deno.test("writeFileAtomic() keeps the mode, follows symlinks and leaves no temp file", async () => {
  await withUserDirs("ce-setup-", async (dirs) => {
    const real = await write(join(dirs.root, "dotfiles", "mcp.json"), "{}\n", 0o640);
    const link = join(dirs.home, "mcp.json");
    await Deno.symlink(real, link);
    const written = await writeFileAtomic(link, '{ "a": 1 }\n');
    assertEquals(written, real);
    assert((await Deno.lstat(link)).isSymlink, "the link stays a link");
    assertEquals(await Deno.readTextFile(real), '{ "a": 1 }\n');
    assertEquals((await Deno.stat(real)).mode! & 0o777, 0o640);
    const fresh = await writeFileAtomic(join(dirs.root, "new", "file.json"), "{}\n", {
      mode: 0o600,
    });
    assertEquals((await Deno.stat(fresh)).mode! & 0o777, 0o600);
    assertEquals([...(await snapshotFiles(join(dirs.root, "dotfiles"))).keys()], ["mcp.json"]);

    const now = new Date("2026-01-02T03:04:05.678Z");
    const one = await backupFile(real, now);
    const two = await backupFile(real, now);
    assertEquals([one, two], [
      `${real}.backup-20260102T030405Z`,
      `${real}.backup-20260102T030405Z-2`,
    ]);
    assertEquals(await Deno.readTextFile(two), '{ "a": 1 }\n');
    assertEquals((await Deno.stat(two)).mode! & 0o777, 0o640);
  });
});
