import { join } from "node:path";
import { assertEquals, assertMatch } from "./_assert.ts";
import { narrowPermissions } from "../src/policy/permissions.ts";
import { resolveSettings } from "../src/config/settings.ts";
import { ExecutionRefusedError } from "../src/exec/result.ts";

async function refusal(fn: () => Promise<unknown>): Promise<string> {
  try {
    await fn();
  } catch (error) {
    if (error instanceof ExecutionRefusedError) return error.message;
    throw error;
  }
  throw new Error("expected a refusal");
}

Deno.test("narrowPermissions() grants only hosts in the admin's allowlist", async () => {
  const settings = resolveSettings({
    permissions: { net: ["api.example.com", "db.example.com:5432"] },
  });
  assertEquals(
    (await narrowPermissions({ net: ["API.example.com:443", "db.example.com:5432"] }, settings))
      .net,
    ["api.example.com:443", "db.example.com:5432"],
  );
  assertMatch(
    await refusal(() => narrowPermissions({ net: ["evil.com"] }, settings)),
    /evil\.com.*admin allows/,
  );
  assertMatch(
    await refusal(() => narrowPermissions({ net: ["db.example.com"] }, settings)),
    /db\.example\.com/,
  );
  assertMatch(
    await refusal(() => narrowPermissions({ net: ["db.example.com:22"] }, settings)),
    /db\.example\.com:22/,
  );
  assertMatch(await refusal(() => narrowPermissions({ net: ["*"] }, settings)), /expected host/);
});

Deno.test("narrowPermissions() grants paths only under ALLOWED_PROJECTS, resolving symlinks", async () => {
  const root = await Deno.realPath(await Deno.makeTempDir({ prefix: "ce-perm-" }));
  try {
    const project = join(root, "project");
    const outside = join(root, "outside");
    await Deno.mkdir(join(project, "src"), { recursive: true });
    await Deno.mkdir(outside);
    await Deno.symlink(outside, join(project, "escape"));
    const settings = resolveSettings({ allowedProjects: [project] });
    const granted = await narrowPermissions(
      { read: [join(project, "src")], write: [project] },
      settings,
    );
    assertEquals(granted.read, [join(project, "src")]);
    assertEquals(granted.write, [project]);
    assertMatch(
      await refusal(() => narrowPermissions({ read: [outside] }, settings)),
      /not under ALLOWED_PROJECTS/,
    );
    assertMatch(
      await refusal(() => narrowPermissions({ read: [join(project, "escape")] }, settings)),
      /not under ALLOWED_PROJECTS/,
    );
    assertMatch(
      await refusal(() => narrowPermissions({ write: [join(project, "..", "outside")] }, settings)),
      /not under ALLOWED_PROJECTS/,
    );
    assertMatch(
      await refusal(() => narrowPermissions({ read: ["relative"] }, settings)),
      /absolute path/,
    );
    assertMatch(
      await refusal(() => narrowPermissions({ read: [project] }, resolveSettings({}))),
      /ALLOWED_PROJECTS/,
    );
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});
