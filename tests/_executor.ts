/**
 * An in-process {@linkcode Executor} with its sandboxes in a fresh temp directory, a logger that
 * keeps warnings, and a warm-pool member for tests of `WarmPool` itself.
 *
 * @module
 */
import { assertEquals } from "./_assert.ts";
import { sandboxDirs } from "./_proc.ts";
import { resolveSettings } from "../src/config/settings.ts";
import { Executor } from "../src/exec/executor.ts";
import type { PooledChild } from "../src/exec/child/warm_pool.ts";
import { createLogger, type Logger } from "../src/log.ts";

/**
 * A logger that keeps the warnings it is given and drops the rest, so that a test can check
 * that nothing went wrong, or what did.
 *
 * @returns The logger, and the warnings as they come.
 */
export function captureWarnings(): Logger & { warnings: string[] } {
  const warnings: string[] = [];
  return { warnings, debug() {}, info() {}, warn: (m) => warnings.push(m), error() {} };
}

/**
 * Runs `fn` with an in-process {@linkcode Executor} whose sandboxes live in a fresh temp
 * directory (no warm pools unless `raw` asks for them), then checks that no sandbox directory is
 * left.
 *
 * @param raw Settings, as a settings file would hold them.
 * @param fn The test body; it gets the executor and its temp directory.
 * @param options `log`: the executor's logger (errors only, on the console, by default).
 */
export async function withExecutor(
  raw: Record<string, unknown>,
  fn: (executor: Executor, tempDir: string) => Promise<void>,
  options: { log?: Logger } = {},
): Promise<void> {
  const tempDir = await Deno.realPath(await Deno.makeTempDir({ prefix: "ce-exec-" }));
  const base = raw as { sandbox?: Record<string, unknown>; python?: Record<string, unknown> };
  const settings = resolveSettings({
    ...raw,
    sandbox: { warmPool: 0, ...base.sandbox, tempDir },
    python: { warmPool: 0, warmPoolBurst: 0, ...base.python },
  });
  const executor = await Executor.create(settings, { log: options.log ?? createLogger("error") });
  try {
    await fn(executor, tempDir);
  } finally {
    await executor.close();
    const left = await sandboxDirs(tempDir);
    await Deno.remove(tempDir, { recursive: true });
    assertEquals(left, [], "sandbox directories left behind");
  }
}

/** A warm-pool member that is only an object, for tests of what `WarmPool` itself does. */
export class PoolMember implements PooledChild {
  exited = false;
  disposed = false;
  dispose(): Promise<void> {
    this.disposed = true;
    return Promise.resolve();
  }
}
