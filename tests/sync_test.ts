import { assertEquals, assertMatch } from "./_assert.ts";
import { dailySyncPlan } from "../src/cli/sync.ts";

Deno.test("dailySyncPlan() describes systemd, launchd and Task Scheduler", () => {
  const launch = {
    command: "/opt/deno",
    args: ["run", "-A", "/src/code executor/main.ts", "sync"],
  };
  const env = { HOME: "/home/you" };
  const linux = dailySyncPlan("linux", { launch, env });
  assertEquals(linux.files.map((f) => f.path), [
    "/home/you/.config/systemd/user/code-executor-sync.service",
    "/home/you/.config/systemd/user/code-executor-sync.timer",
  ]);
  assertMatch(
    linux.files[0].text,
    /^ExecStart=\/opt\/deno run -A "\/src\/code executor\/main\.ts" sync$/m,
  );
  const mac = dailySyncPlan("darwin", { launch, env: { HOME: "/Users/you" } });
  assertEquals(mac.files[0].path, "/Users/you/Library/LaunchAgents/dev.code-executor.sync.plist");
  assertMatch(mac.files[0].text, /<string>\/src\/code executor\/main\.ts<\/string>/);
  assertEquals(mac.commands, [["launchctl", "load", "-w", mac.files[0].path]]);
  const windows = dailySyncPlan("windows", { launch, env: { USERPROFILE: "C:\\Users\\you" } });
  assertEquals(windows.files, []);
  assertEquals(windows.commands[0].slice(0, 5), ["schtasks", "/Create", "/F", "/SC", "DAILY"]);
  assertEquals(windows.commands[0].at(-1), '/opt/deno run -A "/src/code executor/main.ts" sync');
});
