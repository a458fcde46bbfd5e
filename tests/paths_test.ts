/**
 * Tests of the file locations in `paths.ts`, for each operating system, and of the modules that
 * take their locations from it: an empty variable must mean "unset" in every one of them.
 *
 * @module
 */
import { join } from "node:path";
import { assertEquals } from "./_assert.ts";
import {
  appDataDir,
  cacheDir,
  cacheHome,
  claudeCodeConfigPath,
  claudeDesktopConfigPath,
  configHome,
  cursorConfigPath,
  cursorProjectConfigPath,
  dataHome,
  defaultAuditPath,
  defaultWrappersDir,
  denoCacheDir,
  homeDataDir,
  homeDir,
  launchAgentsDir,
  macLogsDir,
  ownConfigDir,
  ownUpstreamConfigPath,
  projectConfigPath,
  projectSettingsPath,
  systemdUserDir,
  tildePath,
  userSettingsPath,
  vscodeProjectConfigPath,
  vscodeUserConfigPath,
  windsurfConfigPath,
} from "../src/config/paths.ts";
import { clientConfigs } from "../src/config/client_configs.ts";
import { settingsFiles } from "../src/config/settings.ts";
import { defaultConfigFiles } from "../src/config/upstream.ts";
import { dailySyncPlan } from "../src/cli/sync.ts";

const HOME = "/home/you";

Deno.test("homeDir() takes HOME, then USERPROFILE, and counts an empty one as unset", () => {
  assertEquals(homeDir({ HOME, USERPROFILE: "C:\\Users\\you" }), HOME);
  assertEquals(homeDir({ HOME: "", USERPROFILE: "C:\\Users\\you" }), "C:\\Users\\you");
  assertEquals(homeDir({ HOME: "", USERPROFILE: "" }), undefined);
  assertEquals(homeDir({}), undefined);
});

Deno.test("configHome(), cacheHome() and dataHome() follow XDG, else the home directory", () => {
  const xdg = {
    HOME,
    XDG_CONFIG_HOME: "/xdg/config",
    XDG_CACHE_HOME: "/xdg/cache",
    XDG_DATA_HOME: "/xdg/data",
  };
  assertEquals([configHome(xdg), cacheHome(xdg), dataHome(xdg)], [
    "/xdg/config",
    "/xdg/cache",
    "/xdg/data",
  ]);
  const empty = { HOME, XDG_CONFIG_HOME: "", XDG_CACHE_HOME: "", XDG_DATA_HOME: "" };
  assertEquals([configHome(empty), cacheHome(empty), dataHome(empty)], [
    `${HOME}/.config`,
    `${HOME}/.cache`,
    `${HOME}/.local/share`,
  ]);
  assertEquals([configHome({}), cacheHome({}), dataHome({})], [undefined, undefined, undefined]);
  assertEquals(cacheDir({ HOME }), `${HOME}/.cache/code-executor`);
  assertEquals(cacheDir(xdg), "/xdg/cache/code-executor");
});

Deno.test("ownUpstreamConfigPath(), defaultAuditPath() and the other own files sit in their directories", () => {
  const env = { HOME };
  assertEquals(ownConfigDir(env), `${HOME}/.config/code-executor`);
  assertEquals(userSettingsPath(env), `${HOME}/.config/code-executor/config.jsonc`);
  assertEquals(ownUpstreamConfigPath(env), `${HOME}/.config/code-executor/mcp.json`);
  assertEquals(
    ownUpstreamConfigPath({ HOME, XDG_CONFIG_HOME: "/xdg" }),
    "/xdg/code-executor/mcp.json",
  );
  assertEquals(projectSettingsPath("/p"), "/p/.code-executor.jsonc");
  assertEquals(homeDataDir(env), `${HOME}/.code-executor`);
  assertEquals(defaultAuditPath(env), `${HOME}/.code-executor/audit.jsonl`);
  assertEquals(defaultWrappersDir(env), `${HOME}/.code-executor/wrappers`);
  // Without a home the audit log and the wrappers still have a place: the working directory.
  assertEquals(defaultAuditPath({ HOME: "" }), join(".code-executor", "audit.jsonl"));
  assertEquals([ownConfigDir({}), userSettingsPath({}), ownUpstreamConfigPath({})], [
    undefined,
    undefined,
    undefined,
  ]);
});

Deno.test("claudeDesktopConfigPath() and vscodeUserConfigPath() follow each OS's application data", () => {
  const env = { HOME, APPDATA: "C:\\Users\\you\\AppData\\Roaming", XDG_CONFIG_HOME: "/xdg" };
  assertEquals(appDataDir(env, "darwin"), `${HOME}/Library/Application Support`);
  assertEquals(
    claudeDesktopConfigPath(env, "darwin"),
    `${HOME}/Library/Application Support/Claude/claude_desktop_config.json`,
  );
  assertEquals(
    vscodeUserConfigPath(env, "darwin"),
    `${HOME}/Library/Application Support/Code/User/mcp.json`,
  );
  assertEquals(
    vscodeUserConfigPath(env, "windows"),
    join("C:\\Users\\you\\AppData\\Roaming", "Code", "User", "mcp.json"),
  );
  assertEquals(
    claudeDesktopConfigPath({ USERPROFILE: "/profile" }, "windows"),
    "/profile/AppData/Roaming/Claude/claude_desktop_config.json",
  );
  assertEquals(vscodeUserConfigPath(env, "linux"), "/xdg/Code/User/mcp.json");
  assertEquals(vscodeUserConfigPath({ HOME }, "linux"), `${HOME}/.config/Code/User/mcp.json`);
  assertEquals(claudeDesktopConfigPath({}, "linux"), undefined);
  assertEquals(
    vscodeUserConfigPath({ APPDATA: "/appdata" }, "windows"),
    "/appdata/Code/User/mcp.json",
  );
});

Deno.test("cursorConfigPath(), cursorProjectConfigPath() and the other client paths match each client", () => {
  const env = { HOME };
  assertEquals(claudeCodeConfigPath(env), `${HOME}/.claude.json`);
  assertEquals(cursorConfigPath(env), `${HOME}/.cursor/mcp.json`);
  assertEquals(windsurfConfigPath(env), `${HOME}/.codeium/windsurf/mcp_config.json`);
  assertEquals(cursorProjectConfigPath("/p"), "/p/.cursor/mcp.json");
  assertEquals(vscodeProjectConfigPath("/p"), "/p/.vscode/mcp.json");
  assertEquals(projectConfigPath("/p"), "/p/.mcp.json");
  assertEquals([claudeCodeConfigPath({}), cursorConfigPath({}), windsurfConfigPath({})], [
    undefined,
    undefined,
    undefined,
  ]);
});

Deno.test("systemdUserDir() and launchAgentsDir() are where systemd and launchd look", () => {
  assertEquals(systemdUserDir({ HOME }), `${HOME}/.config/systemd/user`);
  assertEquals(systemdUserDir({ HOME, XDG_CONFIG_HOME: "/xdg" }), "/xdg/systemd/user");
  assertEquals(launchAgentsDir({ HOME: "/Users/you" }), "/Users/you/Library/LaunchAgents");
  assertEquals(macLogsDir({ HOME: "/Users/you" }), "/Users/you/Library/Logs");
});

Deno.test("denoCacheDir() takes DENO_DIR, else the platform's default", () => {
  assertEquals(denoCacheDir({ DENO_DIR: "/d", HOME }, "linux"), "/d");
  assertEquals(denoCacheDir({ DENO_DIR: "", HOME }, "linux"), `${HOME}/.cache/deno`);
  assertEquals(denoCacheDir({ HOME, XDG_CACHE_HOME: "/c" }, "linux"), "/c/deno");
  assertEquals(denoCacheDir({ HOME: "/Users/you" }, "darwin"), "/Users/you/Library/Caches/deno");
  assertEquals(denoCacheDir({ LOCALAPPDATA: "/local" }, "windows"), "/local/deno");
  assertEquals(denoCacheDir({ HOME }, "windows"), undefined);
  assertEquals(denoCacheDir({}, "linux"), undefined);
});

Deno.test("tildePath() shortens paths under the home directory only", () => {
  assertEquals(tildePath(`${HOME}/.claude.json`, { HOME }), "~/.claude.json");
  assertEquals(tildePath(HOME, { HOME }), "~");
  assertEquals(tildePath(`${HOME}x/.claude.json`, { HOME }), `${HOME}x/.claude.json`);
  assertEquals(tildePath("/etc/x", {}), "/etc/x");
});

Deno.test("settingsFiles(), defaultConfigFiles(), clientConfigs() and dailySyncPlan() count an empty XDG_CONFIG_HOME as unset", () => {
  // Before paths.ts some of them used `??` and took "" for a directory (the cwd).
  const env = { HOME, XDG_CONFIG_HOME: "" };
  const config = `${HOME}/.config`;
  assertEquals(settingsFiles(env, "/p")[0], `${config}/code-executor/config.jsonc`);
  const discovered = defaultConfigFiles(env, { cwd: "/p", os: "linux" });
  assertEquals(discovered.map((f) => [f.kind, f.path]), [
    ["claude-desktop", `${config}/Claude/claude_desktop_config.json`],
    ["claude-code", `${HOME}/.claude.json`],
    ["cursor", `${HOME}/.cursor/mcp.json`],
    ["cursor-project", "/p/.cursor/mcp.json"],
    ["project", "/p/.mcp.json"],
    ["code-executor", `${config}/code-executor/mcp.json`],
  ]);
  const clients = clientConfigs({ env, cwd: "/p", os: "linux" });
  assertEquals(clients.find((c) => c.id === "vscode-user")?.path, `${config}/Code/User/mcp.json`);
  // Discovery and setup agree on every file both know.
  for (const file of discovered) {
    assertEquals(clients.find((c) => c.id === file.kind)?.path, file.path, file.kind);
  }
  const launch = { command: "code-executor", args: ["sync"] };
  assertEquals(
    dailySyncPlan("linux", { launch, env }).files[0].path,
    `${config}/systemd/user/code-executor-sync.service`,
  );
});
