import { join } from "node:path";
import { z } from "zod";
import { assert, assertEquals, assertMatch, assertRejects } from "./_assert.ts";
import { ROOT } from "./_env.ts";
import { type UserDirs, withUserDirs } from "./_fs.ts";
import {
  ENV_OVERRIDES,
  loadSettings,
  resolveSettings,
  SettingsError,
  SettingsSchema,
} from "../src/config/settings.ts";
import { SETTINGS_PAGE, staleMessage } from "../docs/generate.ts";

/** A HOME with an empty Code Executor config directory, and a project. */
function withDirs(fn: (dirs: UserDirs) => Promise<void>): Promise<void> {
  return withUserDirs("ce-settings-", async (dirs) => {
    await Deno.mkdir(join(dirs.home, ".config", "code-executor"), { recursive: true });
    await fn(dirs);
  });
}

async function settingsError(fn: () => Promise<unknown>): Promise<string> {
  return (await assertRejects(fn, SettingsError)).message;
}

Deno.test("resolveSettings() fills in the documented defaults", () => {
  const settings = resolveSettings({});
  assertEquals(settings.limits.timeoutMs, 30_000);
  assertEquals(settings.limits.maxTimeoutMs, 300_000);
  assertEquals(settings.limits.memoryMb, 256);
  assertEquals(settings.limits.maxOutputBytes, 100 * 1024);
  assertEquals(settings.sandbox.warmPool, 2);
  assertEquals(settings.permissions.net, []);
  assertEquals(settings.allowedProjects, []);
});

Deno.test("loadSettings() merges user, project and CODE_EXECUTOR_CONFIG files, then env", async () => {
  await withDirs(async ({ home, project }) => {
    await Deno.writeTextFile(
      join(home, ".config", "code-executor", "config.jsonc"),
      '// user file\n{ "limits": { "timeoutMs": 1000, "memoryMb": 128, }, }',
    );
    await Deno.writeTextFile(
      join(project, ".code-executor.jsonc"),
      '{ /* project */ "limits": { "timeoutMs": 2000 } }',
    );
    await Deno.writeTextFile(join(project, "extra.jsonc"), '{ "sandbox": { "warmPool": 0 } }');
    const { settings, sources } = await loadSettings({
      cwd: project,
      env: {
        HOME: home,
        CODE_EXECUTOR_CONFIG: "extra.jsonc",
        CODE_EXECUTOR_MAX_OUTPUT_BYTES: "4096",
        ALLOWED_PROJECTS: "/a:/b",
      },
    });
    assertEquals(settings.limits.timeoutMs, 2000);
    assertEquals(settings.limits.memoryMb, 128);
    assertEquals(settings.sandbox.warmPool, 0);
    assertEquals(settings.limits.maxOutputBytes, 4096);
    assertEquals(settings.allowedProjects, ["/a", "/b"]);
    assertEquals(sources.length, 4);
  });
});

Deno.test("loadSettings() names the file and key of an unknown setting", async () => {
  await withDirs(async ({ home, project }) => {
    const file = join(project, ".code-executor.jsonc");
    await Deno.writeTextFile(file, '{ "limits": { "timout": 5 } }');
    const message = await settingsError(() => loadSettings({ cwd: project, env: { HOME: home } }));
    assertMatch(message, /Unknown setting "limits\.timout"/);
    assertEquals(message.includes(file), true);
  });
});

Deno.test("loadSettings() names the key of a wrong type and the variable of a bad env value", async () => {
  await withDirs(async ({ home, project }) => {
    await Deno.writeTextFile(
      join(project, ".code-executor.jsonc"),
      '{ "limits": { "memoryMb": "lots" } }',
    );
    assertMatch(
      await settingsError(() => loadSettings({ cwd: project, env: { HOME: home } })),
      /Invalid setting "limits\.memoryMb"/,
    );
    await Deno.remove(join(project, ".code-executor.jsonc"));
    assertMatch(
      await settingsError(() =>
        loadSettings({ cwd: project, env: { HOME: home, CODE_EXECUTOR_TIMEOUT_MS: "soon" } })
      ),
      /CODE_EXECUTOR_TIMEOUT_MS/,
    );
  });
});

Deno.test("http.replicaId comes from CODE_EXECUTOR_HTTP_REPLICA_ID and must fit before a session id's dot", async () => {
  await withDirs(async ({ home, project }) => {
    const { settings } = await loadSettings({
      cwd: project,
      env: { HOME: home, CODE_EXECUTOR_HTTP_REPLICA_ID: " ce-5d8c7b9f4-x2x7q " },
    });
    assertEquals(settings.http.replicaId, "ce-5d8c7b9f4-x2x7q");
    assertEquals(resolveSettings({}).http.replicaId, undefined);
    for (const bad of ["ce.1", "x".repeat(64), "ce 1", "ce/1"]) {
      assertMatch(
        await settingsError(() =>
          loadSettings({ cwd: project, env: { HOME: home, CODE_EXECUTOR_HTTP_REPLICA_ID: bad } })
        ),
        /CODE_EXECUTOR_HTTP_REPLICA_ID|http\.replicaId/,
        JSON.stringify(bad),
      );
    }
  });
});

Deno.test("loadSettings() reports JSONC syntax errors with the file and line", async () => {
  await withDirs(async ({ home, project }) => {
    await Deno.writeTextFile(
      join(project, ".code-executor.jsonc"),
      '{\n  "limits": {\n    "timeoutMs": 5 5\n}',
    );
    const message = await settingsError(() => loadSettings({ cwd: project, env: { HOME: home } }));
    assertMatch(message, /\.code-executor\.jsonc:3:20: a "," is missing before this/);
  });
});

Deno.test("loadSettings() refuses a missing CODE_EXECUTOR_CONFIG file", async () => {
  await withDirs(async ({ home, project }) => {
    const message = await settingsError(() =>
      loadSettings({ cwd: project, env: { HOME: home, CODE_EXECUTOR_CONFIG: "nope.jsonc" } })
    );
    assertMatch(message, /nope\.jsonc/);
  });
});

Deno.test("resolveSettings() refuses a default timeout above the maximum", () => {
  let message = "";
  try {
    resolveSettings({ limits: { timeoutMs: 10, maxTimeoutMs: 5 } });
  } catch (error) {
    message = (error as Error).message;
  }
  assertMatch(message, /limits\.timeoutMs.*limits\.maxTimeoutMs/);
});

/** The part of a JSON Schema node these tests read. */
interface JsonSchemaNode {
  type?: unknown;
  description?: string;
  properties?: Record<string, JsonSchemaNode>;
}

function settingsJsonSchema(): JsonSchemaNode {
  return z.toJSONSchema(SettingsSchema, { io: "input" }) as JsonSchemaNode;
}

/** Every leaf key of the settings schema (`http.oauth.issuer`), from its JSON Schema. */
function settingKeys(): string[] {
  const keys: string[] = [];
  const walk = (node: JsonSchemaNode, path: string[]) => {
    if (node.type === "object" && node.properties) {
      for (const [key, child] of Object.entries(node.properties)) walk(child, [...path, key]);
    } else {
      keys.push(path.join("."));
    }
  };
  walk(settingsJsonSchema(), []);
  return keys;
}

Deno.test("docs/settings.md is what docs/generate.ts makes of the schema, with every key and variable", async () => {
  const page = await Deno.readTextFile(join(ROOT, SETTINGS_PAGE.path));
  assertEquals(await staleMessage(SETTINGS_PAGE), undefined);
  const keys = settingKeys();
  assert(keys.includes("http.oauth.jwksCooldownMs") && keys.length > 90, `schema keys: ${keys}`);
  assertEquals(keys.filter((key) => !page.includes(`**\`${key}\`**`)), [], "keys without an entry");
  const unnamed = ENV_OVERRIDES.map(([name]) => name).filter((name) =>
    !page.includes(`\`${name}\``)
  );
  assertEquals(unnamed, [], "environment variables docs/settings.md does not name");
});

Deno.test("every setting's meaning is written in the schema", () => {
  const undescribed: string[] = [];
  const walk = (node: JsonSchemaNode, path: string[]) => {
    if (path.length > 1 || !node.properties) {
      if (!node.description?.trim()) undescribed.push(path.join("."));
    }
    for (const [key, child] of Object.entries(node.properties ?? {})) walk(child, [...path, key]);
  };
  for (const [key, child] of Object.entries(settingsJsonSchema().properties ?? {})) {
    walk(child, [key]);
  }
  assertEquals(undescribed, [], "settings without .meta({ description }) in settings_schema.ts");
});
