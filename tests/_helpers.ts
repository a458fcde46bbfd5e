/**
 * Shared test helpers: a real server process driven by the SDK v2 client over stdio.
 *
 * @module
 */
import { Client, type ClientOptions } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { ExecutionResult } from "../src/exec/result.ts";

/** The repository root. */
export const ROOT = fileURLToPath(new URL("..", import.meta.url));

/**
 * The Deno cache this process uses; servers and children under test share it so that npm
 * packages are not downloaded again.
 */
export function denoDir(): string {
  const own = Deno.env.get("DENO_DIR");
  if (own) return own;
  const cacheHome = Deno.env.get("XDG_CACHE_HOME") ??
    join(Deno.env.get("HOME") ?? "/root", ".cache");
  return join(cacheHome, "deno");
}

/** A running `deno task start` with a connected client. */
export interface ServerHarness {
  /** The connected SDK client. */
  client: Client;
  /** The temp directory the server creates workspaces in. */
  tempDir: string;
  /** Calls run_typescript and returns its structured result. */
  runTs(
    code: string,
    extra?: Record<string, unknown>,
  ): Promise<ExecutionResult & { isError: boolean }>;
  /** Closes the client (which ends the server) and removes the temp directory. */
  close(): Promise<void>;
}

/** Options for {@linkcode startServer}. */
export interface StartServerOptions {
  /** Extra environment variables for the server. */
  env?: Record<string, string>;
  /** Settings written to a temporary CODE_EXECUTOR_CONFIG file. */
  settings?: Record<string, unknown>;
  /** Extra command-line arguments after `deno task start`. */
  args?: string[];
  /** The client's options: the capabilities it declares (sampling, elicitation), its era. */
  client?: ClientOptions;
  /** Called before connecting, to register the client's request handlers. */
  setup?: (client: Client) => void;
}

/**
 * Starts the server exactly as the README says (`deno task start`) with a private temp
 * directory, and connects an SDK client to it.
 *
 * @param options Environment and settings.
 * @returns The harness.
 */
export async function startServer(options: StartServerOptions = {}): Promise<ServerHarness> {
  const tempDir = await Deno.makeTempDir({ prefix: "ce-test-" });
  const env: Record<string, string> = {
    PATH: Deno.env.get("PATH") ?? "",
    HOME: Deno.env.get("HOME") ?? tempDir,
    TMPDIR: tempDir,
    // Share the sandbox caches (Deno's, and the 30 MB Pyodide snapshot) across test servers.
    XDG_CACHE_HOME: Deno.env.get("XDG_CACHE_HOME") ??
      join(Deno.env.get("HOME") ?? tempDir, ".cache"),
    // Tests that count sandbox children or their directories expect TypeScript ones only.
    CODE_EXECUTOR_PYTHON_WARM_POOL: "0",
    // Keep test runs out of the real ~/.code-executor/audit.jsonl.
    AUDIT_LOG_PATH: join(tempDir, "audit.jsonl"),
    CODE_EXECUTOR_LOG_LEVEL: "warn",
    ...options.env,
  };
  const denoDir = Deno.env.get("DENO_DIR");
  if (denoDir) env.DENO_DIR = denoDir;
  if (options.settings) {
    const file = join(tempDir, "settings.jsonc");
    await Deno.writeTextFile(file, JSON.stringify(options.settings));
    env.CODE_EXECUTOR_CONFIG = file;
  }
  const transport = new StdioClientTransport({
    command: Deno.execPath(),
    args: ["task", "--quiet", "start", ...(options.args ?? [])],
    cwd: ROOT,
    env,
    stderr: "pipe",
  });
  const stderrChunks: string[] = [];
  transport.stderr?.on(
    "data",
    (chunk: Uint8Array) => stderrChunks.push(new TextDecoder().decode(chunk)),
  );
  const client = new Client(
    { name: "code-executor-tests", version: "1.0.0" },
    options.client,
  );
  options.setup?.(client);
  try {
    await client.connect(transport);
  } catch (error) {
    await Deno.remove(tempDir, { recursive: true }).catch(() => {});
    throw new Error(
      `Cannot start the server: ${(error as Error).message}\n${stderrChunks.join("")}`,
    );
  }
  return {
    client,
    tempDir,
    async runTs(code, extra = {}) {
      const result = await client.callTool({
        name: "run_typescript",
        arguments: { code, ...extra },
      });
      return {
        ...(result.structuredContent as unknown as ExecutionResult),
        isError: result.isError === true,
      };
    },
    async close() {
      await client.close();
      await Deno.remove(tempDir, { recursive: true }).catch(() => {});
    },
  };
}

/**
 * Lists live sandbox processes (TypeScript runners and Python hosts) whose command line names
 * the given marker.
 *
 * @param marker A string the process's command line must contain.
 * @param runners Which sandbox entry points count.
 * @returns Their pids.
 */
export async function sandboxPids(
  marker: string,
  runners: string[] = ["ts_runner.ts", "py_host.ts"],
): Promise<number[]> {
  const pids: number[] = [];
  for await (const entry of Deno.readDir("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    try {
      const cmdline = await Deno.readTextFile(`/proc/${entry.name}/cmdline`);
      if (!runners.some((r) => cmdline.includes(r))) continue;
      // Python children may only read the Pyodide files, so their command line does not name
      // their directory; their working directory (the private workspace) does.
      const cwd = await Deno.readLink(`/proc/${entry.name}/cwd`).catch(() => "");
      if (cmdline.includes(marker) || cwd.includes(marker)) pids.push(Number(entry.name));
    } catch {
      // The process ended while we looked.
    }
  }
  return pids;
}

/**
 * Lists what is left in a directory.
 *
 * @param dir The directory.
 * @returns Entry names.
 */
export async function leftovers(dir: string): Promise<string[]> {
  const names: string[] = [];
  try {
    for await (const entry of Deno.readDir(dir)) names.push(entry.name);
  } catch {
    // Already removed.
  }
  return names;
}

/**
 * Polls until `check` returns true or the time is up.
 *
 * @param check The condition.
 * @param timeoutMs How long to wait.
 * @returns Whether the condition held.
 */
export async function eventually(
  check: () => Promise<boolean>,
  timeoutMs = 5_000,
): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return await check();
}
