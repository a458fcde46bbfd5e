import { join } from "node:path";
import { assert, assertEquals, assertMatch, assertRejects } from "./_assert.ts";
import { type GrantedPermissions, narrowPermissions } from "../src/policy/permissions.ts";
import { resolveSettings } from "../src/config/settings.ts";
import { CodeExecutorError } from "../src/errors.ts";

async function refusal(fn: () => Promise<unknown>): Promise<string> {
  return (await assertRejects(fn, CodeExecutorError)).message;
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
    /db\.example\.com:22.*only on port 5432/,
  );
  assertMatch(await refusal(() => narrowPermissions({ net: ["*"] }, settings)), /expected host/);
});

Deno.test("narrowPermissions() keeps port pinning: host allows every port, host:port only that one", async () => {
  const settings = resolveSettings({
    permissions: { net: ["any.example.com", "pinned.example.com:8443", "pinned.example.com:9443"] },
  });
  const net = async (...hosts: string[]) => (await narrowPermissions({ net: hosts }, settings)).net;
  assertEquals(await net("any.example.com"), ["any.example.com"]);
  assertEquals(await net("any.example.com:1", "any.example.com:65535"), [
    "any.example.com:1",
    "any.example.com:65535",
  ]);
  assertEquals(await net("pinned.example.com:8443", "pinned.example.com:09443"), [
    "pinned.example.com:8443",
    "pinned.example.com:9443",
  ]);
  assertMatch(
    await refusal(() => net("pinned.example.com")),
    /only on port 8443, 9443.*ask for pinned\.example\.com:8443/,
  );
  assertMatch(await refusal(() => net("pinned.example.com:443")), /only on port 8443, 9443/);
  assertMatch(await refusal(() => net("any.example.com:0")), /port from 1 to 65535/);
  assertMatch(await refusal(() => net("any.example.com:70000")), /port from 1 to 65535/);
  assertMatch(await refusal(() => net("other.example.com")), /admin allows any\.example\.com/);
});

/** Spellings of loopback, private, link-local, unspecified and metadata hosts. */
const SPECIAL_HOSTS: Array<[string, RegExp]> = [
  ["127.0.0.1", /loopback address 127\.0\.0\.1/],
  ["127.0.0.2", /loopback address 127\.0\.0\.2/],
  ["2130706433", /loopback address 127\.0\.0\.1/],
  ["0177.0.0.1", /loopback address 127\.0\.0\.1/],
  ["017700000001", /loopback address 127\.0\.0\.1/],
  ["0x7f.0.0.1", /loopback address 127\.0\.0\.1/],
  ["0x7f000001", /loopback address 127\.0\.0\.1/],
  ["0x7f.1", /loopback address 127\.0\.0\.1/],
  ["127.1", /loopback address 127\.0\.0\.1/],
  ["127.0.0.1.", /loopback address 127\.0\.0\.1/],
  ["[::ffff:127.0.0.1]", /loopback address 127\.0\.0\.1/],
  ["[::ffff:7f00:1]", /loopback address 127\.0\.0\.1/],
  ["[::1]", /loopback address \[::1\]/],
  ["[0:0:0:0:0:0:0:1]", /loopback address \[::1\]/],
  ["[::127.0.0.1]", /IPv4-compatible address \[::7f00:1\] \(of 127\.0\.0\.1\)/],
  ["localhost", /loopback name localhost/],
  ["LOCALHOST", /loopback name localhost/],
  ["localhost.", /loopback name localhost/],
  ["foo.localhost", /loopback name foo\.localhost/],
  ["localhost.localdomain", /loopback name/],
  ["ip6-localhost", /loopback name/],
  ["0.0.0.0", /unspecified address 0\.0\.0\.0/],
  ["0", /unspecified address 0\.0\.0\.0/],
  ["[::]", /unspecified address \[::\]/],
  ["10.0.0.1", /private address 10\.0\.0\.1/],
  ["10.1", /private address 10\.0\.0\.1/],
  ["172.16.5.4", /private address/],
  ["192.168.0.1", /private address/],
  ["[::ffff:192.168.0.1]", /private address 192\.168\.0\.1/],
  ["100.64.0.1", /carrier-grade NAT/],
  ["[fc00::1]", /unique local/],
  ["[fd00::1]", /unique local/],
  ["169.254.0.1", /link-local address/],
  ["[fe80::1]", /link-local address/],
  ["169.254.169.254", /cloud metadata address 169\.254\.169\.254/],
  ["2852039166", /cloud metadata address 169\.254\.169\.254/],
  ["0xa9fea9fe", /cloud metadata address 169\.254\.169\.254/],
  ["[::ffff:169.254.169.254]", /cloud metadata address 169\.254\.169\.254/],
  ["[fd00:ec2::254]", /cloud metadata address \[fd00:ec2::254\]/],
  ["metadata.google.internal", /cloud metadata name/],
  ["metadata.goog", /cloud metadata name/],
];

Deno.test("narrowPermissions() refuses every spelling of special hosts the admin did not list", async () => {
  const settings = resolveSettings({ permissions: { net: ["example.com", "8.8.8.8"] } });
  for (const [host, rule] of SPECIAL_HOSTS) {
    for (const entry of [host, `${host}:80`]) {
      const message = await refusal(() => narrowPermissions({ net: [entry] }, settings));
      assertMatch(message, rule, entry);
      assertMatch(message, /which the admin must list explicitly in permissions\.net/, entry);
      assert(message.startsWith(`Cannot grant network access to "${entry}": it is `), message);
    }
  }
  assertEquals(
    await refusal(() => narrowPermissions({ net: ["0x7f.1"] }, settings)),
    'Cannot grant network access to "0x7f.1": it is the loopback address 127.0.0.1, which the admin must list explicitly in permissions.net',
  );
});

Deno.test("narrowPermissions() grants a listed special host in canonical form only", async () => {
  const settings = resolveSettings({
    permissions: { net: ["127.0.0.1:8080", "[::1]", "localhost:3000", "0xa9.0xfe.0xa9.0xfe"] },
  });
  const net = async (...hosts: string[]) => (await narrowPermissions({ net: hosts }, settings)).net;
  for (const spelling of ["127.0.0.1", "0x7f.1", "2130706433", "0177.0.0.1", "[::ffff:7f00:1]"]) {
    assertEquals(await net(`${spelling}:8080`), ["127.0.0.1:8080"], spelling);
    assertMatch(await refusal(() => net(`${spelling}:8081`)), /127\.0\.0\.1 only on port 8080/);
    assertMatch(await refusal(() => net(spelling)), /127\.0\.0\.1 only on port 8080/);
  }
  assertEquals(await net("[0:0:0:0:0:0:0:1]", "[::1]:5432"), ["[::1]", "[::1]:5432"]);
  assertEquals(await net("LOCALHOST.:3000"), ["localhost:3000"]);
  assertEquals(await net("169.254.169.254"), ["169.254.169.254"]);
  // A name is not the address it resolves to, and a listed name grants no other name.
  assertMatch(await refusal(() => net("127.0.0.1:3000")), /only on port 8080/);
  assertMatch(await refusal(() => net("foo.localhost:3000")), /loopback name foo\.localhost/);
  assertMatch(await refusal(() => net("localhost:8080")), /localhost only on port 3000/);
  assertMatch(await refusal(() => net("127.0.0.2:8080")), /loopback address 127\.0\.0\.2/);
  assertMatch(await refusal(() => net("[::127.0.0.1]:8080")), /IPv4-compatible/);
});

Deno.test("narrowPermissions() ignores malformed admin entries and says so", async () => {
  const settings = resolveSettings({
    permissions: { net: ["10.0.0.0/8", "*.example.com", "api.example.com"] },
  });
  const message = await refusal(() => narrowPermissions({ net: ["10.0.0.1"] }, settings));
  assertMatch(message, /private address 10\.0\.0\.1/);
  assertMatch(message, /"10\.0\.0\.0\/8", "\*\.example\.com" are not host or host:port/);
  assertEquals((await narrowPermissions({ net: ["api.example.com"] }, settings)).net, [
    "api.example.com",
  ]);
  assertMatch(
    await refusal(() => narrowPermissions({ net: ["a.example.com"] }, settings)),
    /admin allows api\.example\.com/,
  );
});

/** A project tree with every kind of entry the symlink check must notice. */
async function withProject(
  fn: (paths: { project: string; outside: string }) => Promise<void>,
): Promise<void> {
  const root = await Deno.realPath(await Deno.makeTempDir({ prefix: "ce-perm-" }));
  try {
    const project = join(root, "project");
    const outside = join(root, "outside");
    for (const dir of ["src", "clean/deep", "a", "b", "c"]) {
      await Deno.mkdir(join(project, dir), { recursive: true });
    }
    await Deno.mkdir(outside);
    await Deno.writeTextFile(join(project, "src", "main.ts"), "export {};");
    await Deno.writeTextFile(join(outside, "secret.txt"), "secret");
    // Ways out.
    await Deno.symlink(outside, join(project, "escape"));
    await Deno.symlink("/etc", join(project, "link"));
    await Deno.symlink("/etc/passwd", join(project, "link_to_file"));
    await Deno.symlink("../../outside/secret.txt", join(project, "b", "relative_escape"));
    await Deno.symlink(join(project, "missing"), join(project, "dangling"));
    await Deno.symlink("loop_b", join(project, "loop_a"));
    await Deno.symlink("loop_a", join(project, "loop_b"));
    await Deno.symlink("/etc/hostname", join(project, "c", "evil"));
    const fifo = await new Deno.Command("mkfifo", { args: [join(project, "fifo")] }).output();
    assert(fifo.success, "mkfifo failed");
    // Internal links: allowed, unless what they lead to holds a way out.
    await Deno.symlink("../src/main.ts", join(project, "clean", "main.ts"));
    await Deno.symlink("../../src", join(project, "clean", "deep", "src"));
    await Deno.symlink("..", join(project, "clean", "deep", "up"));
    await Deno.symlink(project, join(project, "alias"));
    await Deno.symlink("../c", join(project, "a", "to_c"));
    await fn({ project, outside });
  } finally {
    await Deno.remove(root, { recursive: true });
  }
}

Deno.test("narrowPermissions() grants paths only under ALLOWED_PROJECTS, resolving symlinks", async () => {
  await withProject(async ({ project, outside }) => {
    const settings = resolveSettings({ allowedProjects: [project] });
    const granted = await narrowPermissions(
      { read: [join(project, "src", "main.ts")], write: [join(project, "clean")] },
      settings,
    );
    assertEquals(granted.read, [join(project, "src", "main.ts")]);
    assertEquals(granted.write, [join(project, "clean")]);
    const refused: Array<[string, RegExp]> = [
      [outside, /not under ALLOWED_PROJECTS/],
      [join(project, "escape"), /not under ALLOWED_PROJECTS/],
      [join(project, "link_to_file"), /not under ALLOWED_PROJECTS/],
      [join(project, "..", "outside"), /not under ALLOWED_PROJECTS/],
      [join(project, "dangling"), /does not exist/],
      [join(project, "fifo"), /socket, FIFO or device/],
      ["relative", /absolute path/],
    ];
    for (const [path, message] of refused) {
      assertMatch(await refusal(() => narrowPermissions({ read: [path] }, settings)), message);
      assertMatch(await refusal(() => narrowPermissions({ write: [path] }, settings)), message);
    }
    assertMatch(
      await refusal(() => narrowPermissions({ read: [project] }, resolveSettings({}))),
      /ALLOWED_PROJECTS/,
    );
  });
});

Deno.test("narrowPermissions() blocks every way out of ALLOWED_PROJECTS under a read grant", async () => {
  await withProject(async ({ project }) => {
    const settings = resolveSettings({ allowedProjects: [project] });
    const granted = await narrowPermissions({ read: [project] }, settings);
    const expected: GrantedPermissions = {
      net: [],
      read: [project],
      write: [],
      deny: [
        "a/to_c",
        "alias",
        "b/relative_escape",
        "c/evil",
        "dangling",
        "escape",
        "fifo",
        "link",
        "link_to_file",
        "loop_a",
        "loop_b",
      ].map((name) => join(project, name)),
    };
    assertEquals(granted, expected);
    // Internal links lead nowhere else: nothing to block, the whole directory is readable.
    const clean = await narrowPermissions({ read: [join(project, "clean")] }, settings);
    assertEquals(clean.deny, []);
    // A link into another part of the project is followed: "a/to_c" leads to "c/evil".
    const a = await narrowPermissions({ read: [join(project, "a")] }, settings);
    assertEquals(a.deny, [join(project, "a", "to_c")]);
  });
});

Deno.test("narrowPermissions() refuses write access to a directory that holds a way out", async () => {
  await withProject(async ({ project }) => {
    const settings = resolveSettings({ allowedProjects: [project] });
    const message = await refusal(() => narrowPermissions({ write: [project] }, settings));
    assertMatch(message, /^Cannot grant write access to ".*project": ".*project\/a\/to_c" is a/);
    assertMatch(message, /and 10 more such entries/);
    assertMatch(message, /rename a directory above it/);
    assertMatch(
      await refusal(() => narrowPermissions({ write: [join(project, "b")] }, settings)),
      /relative_escape" is a symlink to ".*outside\/secret\.txt", outside ALLOWED_PROJECTS/,
    );
    assertMatch(
      await refusal(() =>
        narrowPermissions({ read: [project], write: [join(project, "a")] }, settings)
      ),
      /access to ".*project\/a": ".*to_c" is a symlink to ".*project\/c", which leads to ".*evil"/,
    );
    const granted = await narrowPermissions(
      { read: [project], write: [join(project, "clean")] },
      settings,
    );
    assertEquals(granted.write, [join(project, "clean")]);
  });
});

Deno.test("narrowPermissions() bounds the symlink check and names the limit", async () => {
  await withProject(async ({ project }) => {
    const settings = resolveSettings({ allowedProjects: [project] });
    assertMatch(
      await refusal(() => narrowPermissions({ read: [project] }, settings, { maxScanEntries: 5 })),
      /more than 5 entries.*symlink check reads at most that many; grant a smaller directory/,
    );
    assertMatch(
      await refusal(() => narrowPermissions({ read: [project] }, settings, { maxScanDepth: 1 })),
      /directories more than 1 levels deep \(".*clean\/deep"\).*walks at most that many levels/,
    );
    const ok = await narrowPermissions({ read: [project] }, settings, { maxScanDepth: 2 });
    assertEquals(ok.read, [project]);
  });
});

Deno.test("narrowPermissions() refuses a blocked entry whose path Deno's flags cannot name", async () => {
  await withProject(async ({ project }) => {
    const settings = resolveSettings({ allowedProjects: [project] });
    await Deno.symlink("/etc", join(project, "clean", "a,b"));
    assertMatch(
      await refusal(() => narrowPermissions({ read: [join(project, "clean")] }, settings)),
      /a,b" is a symlink to "\/etc".*has a comma.*--deny-read/,
    );
  });
});
