/**
 * A real `main.ts serve --http --port 0`, started with a private TMPDIR and HOME, and closed with
 * the check that nothing of it outlives it.
 *
 * @module
 */
import { join } from "node:path";
import { assert } from "./_assert.ts";
import { ROOT, serverEnv, type ServerEnvOptions, writeMcpConfig, writeSettings } from "./_env.ts";
import { eventually, exitOrKill, pidsWithEnv, sandboxDirs, sandboxPids } from "./_proc.ts";
import { generateToken } from "../src/server/http_auth.ts";

/** Options for {@linkcode startHttpServer}. */
export interface StartHttpServerOptions extends ServerEnvOptions {
  /** Settings written to a CODE_EXECUTOR_CONFIG file in the temp directory. */
  settings?: Record<string, unknown>;
  /** More environment variables (log level `info` unless this says otherwise). */
  env?: Record<string, string>;
  /** Extra arguments after `serve --http --port 0`. */
  args?: string[];
  /** Upstream servers, written to an `mcp.json` in the temp directory for `--config`. */
  upstream?: Record<string, unknown>;
  /** The TMPDIR to use (the caller's, kept after close); a new one, removed by close, if omitted. */
  tempDir?: string;
  /**
   * A command to start the server under, ending in one that execs its arguments (the `deno`
   * executable and its own), e.g. `unshare --mount sh -c '…; exec "$@"' sh`.
   */
  wrapper?: string[];
  /** How long the server may take to say it is ready (60 s by default). */
  readyTimeoutMs?: number;
}

/** A running `main.ts serve --http`. */
export interface HttpServer {
  /** The MCP endpoint, from the server's "ready on" line, with the port it picked. */
  url: URL;
  /** The process. */
  child: Deno.ChildProcess;
  /** The process's id. */
  pid: number;
  /** Its TMPDIR (its sandboxes' directories, `audit.jsonl`, the settings file). */
  tempDir: string;
  /** Its HOME (`options.home`, else a private one in `tempDir`). */
  home: string;
  /** The audit log's path. */
  auditPath: string;
  /** What it has written to stderr so far (at info level: one line per request). */
  stderr(): string;
  /** Resolves when the process exits. */
  status: Promise<Deno.CommandStatus>;
  /**
   * Sends the server a signal as the test's own fault (a crash, an OOM kill): {@linkcode close}
   * then expects the exit that signal causes instead of a clean one.
   */
  kill(signal: Deno.Signal): void;
  /**
   * Sends SIGTERM (unless the process has exited) and waits for it to exit (SIGKILL after
   * `timeoutMs`, 30 s by default); then checks that it exited by itself with 0 (unless the test
   * {@linkcode kill}ed it) and that no sandbox process, no process with its TMPDIR or HOME and no
   * sandbox directory is left, and removes the temp directory (unless it is the caller's) either
   * way.
   *
   * @returns The exit status.
   * @throws {AssertionError} When the server had to be killed, failed or left something behind.
   */
  close(options?: { timeoutMs?: number }): Promise<Deno.CommandStatus>;
}

/**
 * Starts `deno run -A main.ts serve --http --port 0` with a cleared environment, a private TMPDIR
 * and HOME (the caller's caches unless `sharedCache` is false) and logs at info level, and waits
 * for its `ready on http://…` line on stderr.
 *
 * @param options Settings, environment, arguments, upstream servers, HOME and TMPDIR.
 * @returns The running server; close it when done.
 * @throws {Error} With the server's stderr, when it exits or is silent for `readyTimeoutMs`
 *   before it is ready.
 */
export async function startHttpServer(options: StartHttpServerOptions = {}): Promise<HttpServer> {
  const own = options.tempDir === undefined;
  const tempDir = options.tempDir ??
    await Deno.realPath(await Deno.makeTempDir({ prefix: "ce-http-" }));
  const removeTemp = () =>
    own ? Deno.remove(tempDir, { recursive: true }).catch(() => {}) : Promise.resolve();
  // A private HOME always, so that no user configuration leaks in; the caches stay shared, so
  // that npm servers and the Python snapshot are not fetched or built again.
  const home = options.home ?? join(tempDir, "home");
  const env: Record<string, string> = {
    ...serverEnv(tempDir, { home, sharedCache: options.sharedCache ?? true }),
    CODE_EXECUTOR_LOG_LEVEL: "info",
    ...options.env,
  };
  const args = ["run", "-A", "main.ts", "serve", "--http", "--port", "0", ...(options.args ?? [])];
  try {
    if (options.home === undefined) await Deno.mkdir(home, { recursive: true });
    if (options.settings) env.CODE_EXECUTOR_CONFIG = await writeSettings(tempDir, options.settings);
    if (options.upstream) args.push("--config", await writeMcpConfig(tempDir, options.upstream));
  } catch (error) {
    await removeTemp();
    throw error;
  }
  const [command, ...wrapperArgs] = [...(options.wrapper ?? []), Deno.execPath()];
  const child = new Deno.Command(command, {
    args: [...wrapperArgs, ...args],
    cwd: ROOT,
    clearEnv: true,
    env,
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  let stderr = "";
  let exited = false;
  const status = child.status.finally(() => exited = true);
  const pump = (async () => {
    const decoder = new TextDecoder();
    for await (const chunk of child.stderr) stderr += decoder.decode(chunk, { stream: true });
  })();
  const ready = () => /ready on (http:\/\/\S+)/.exec(stderr)?.[1];
  await eventually(
    () => Promise.resolve(exited || ready() !== undefined),
    options.readyTimeoutMs ?? 60_000,
  );
  const leftBehind = async () => ({
    sandboxes: await sandboxPids(tempDir),
    processesWithTmp: await pidsWithEnv(`TMPDIR=${tempDir}`),
    processesWithHome: await pidsWithEnv(`HOME=${home}`),
    workspaces: await sandboxDirs(tempDir),
  });
  const stop = async (timeoutMs: number) => {
    try {
      if (!exited) child.kill("SIGTERM");
    } catch {
      // It exited just now.
    }
    const ended = await exitOrKill(child, timeoutMs);
    await pump;
    return ended;
  };
  let killedWith: Deno.Signal | undefined;
  const found = ready();
  if (found === undefined || exited) {
    await stop(5_000);
    await removeTemp();
    throw new Error(`The HTTP server did not get ready:\n${stderr}`);
  }
  return {
    url: new URL(found),
    child,
    pid: child.pid,
    tempDir,
    home,
    auditPath: env.AUDIT_LOG_PATH,
    stderr: () => stderr,
    status,
    kill(signal) {
      killedWith = signal;
      child.kill(signal);
    },
    async close(closeOptions = {}) {
      try {
        const ended = await stop(closeOptions.timeoutMs ?? 30_000);
        // What is left is checked whatever the exit was, so that a failed server still shows it.
        let left = {};
        const clean = await eventually(async () => {
          left = await leftBehind();
          return Object.values(left).every((list) => (list as unknown[]).length === 0);
        }, 10_000);
        assert(ended, `the server did not exit after SIGTERM and was killed:\n${stderr}`);
        if (killedWith === undefined) {
          assert(ended.code === 0, `the server exited with ${ended.code}:\n${stderr}`);
        }
        assert(clean, `left after shutdown: ${JSON.stringify(left)}`);
        return ended;
      } finally {
        await removeTemp();
      }
    },
  };
}

/** What {@linkcode writeTokensFile} wrote. */
export interface TokensFile<Name extends string> {
  /** The file, for `http.tokensFile`. */
  tokensFile: string;
  /** Each principal's fresh bearer token. */
  tokens: Record<Name, string>;
}

/**
 * Writes an `http.tokensFile` (mode 0600, as the server demands) that gives each principal a
 * freshly generated token, one `name token` line each in the order given.
 *
 * @param dir The directory to write `tokens` in.
 * @param names The principals.
 * @returns The file's path and the tokens by principal.
 */
export async function writeTokensFile<const Name extends string>(
  dir: string,
  names: readonly Name[],
): Promise<TokensFile<Name>> {
  const tokens = Object.fromEntries(names.map((name) => [name, generateToken()])) as Record<
    Name,
    string
  >;
  const tokensFile = join(dir, "tokens");
  const lines = names.map((name) => `${name} ${tokens[name]}\n`).join("");
  await Deno.writeTextFile(tokensFile, lines, { mode: 0o600 });
  return { tokensFile, tokens };
}
