/**
 * Debian's redis-server as a test's own child process on a loopback port: no daemon, no disk
 * (no RDB, no AOF), so that a restart loses everything, as a store restarted without persistence
 * does. The tests that need it are skipped, with a message, where redis-server is not installed.
 *
 * @module
 */

/**
 * Whether redis-server is installed.
 *
 * @returns True when `redis-server --version` runs.
 */
export async function hasRedisServer(): Promise<boolean> {
  try {
    return (await new Deno.Command("redis-server", {
      args: ["--version"],
      stdout: "null",
      stderr: "null",
    }).output()).success;
  } catch {
    return false;
  }
}

/** Why the Redis tests were skipped, printed once. */
export const REDIS_MISSING =
  "redis-server is not installed (apt-get install redis-server): the Redis half of this file is skipped";

/** A free loopback port (closed again; the server binds it next). */
export function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}

/** A redis-server child that a test can kill, start again, stop and continue. */
export class RedisServer {
  readonly port: number;
  #child: Deno.ChildProcess | undefined;
  #dir = Deno.makeTempDirSync({ prefix: "ce-redis-" });

  /**
   * Names the server; nothing runs until {@linkcode RedisServer.start}.
   *
   * @param port The loopback port; a free one by default.
   */
  constructor(port = freePort()) {
    this.port = port;
  }

  /** `redis://127.0.0.1:<port>`. */
  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** Starts the server and waits until it accepts connections. */
  async start(): Promise<void> {
    this.#child = new Deno.Command("redis-server", {
      args: [
        "--port",
        String(this.port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        this.#dir,
        "--daemonize",
        "no",
        "--loglevel",
        "warning",
      ],
      stdin: "null",
      stdout: "null",
      stderr: "null",
    }).spawn();
    for (let i = 0; i < 500; i++) {
      try {
        (await Deno.connect({ hostname: "127.0.0.1", port: this.port })).close();
        return;
      } catch {
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    }
    throw new Error(`redis-server did not listen on ${this.port}`);
  }

  /** SIGKILLs the server (what it held is lost). */
  async kill(): Promise<void> {
    const child = this.#child;
    if (!child) return;
    this.#child = undefined;
    try {
      child.kill("SIGKILL");
    } catch {
      // Already gone.
    }
    await child.status;
  }

  /** Stops the server with SIGSTOP: connections stay open and nothing is answered. */
  pause(): void {
    this.#child?.kill("SIGSTOP");
  }

  /** Lets a stopped server go on. */
  resume(): void {
    this.#child?.kill("SIGCONT");
  }

  /** Kills the server and removes its directory. */
  async close(): Promise<void> {
    this.resume();
    await this.kill();
    await Deno.remove(this.#dir, { recursive: true });
  }
}
