/**
 * Debian's redis-server as a test's own child process on a loopback port: no daemon, no disk
 * (no RDB, no AOF), so that a restart loses everything, as a store restarted without persistence
 * does. The tests that need it are skipped, with a message, where redis-server is not installed.
 *
 * @module
 */
import { Buffer } from "node:buffer";
import { createHash } from "node:crypto";
import { Redis } from "ioredis";
import { commandSucceeds } from "./_command.ts";

/**
 * Whether redis-server is installed.
 *
 * @returns True when `redis-server --version` runs.
 */
export function hasRedisServer(): Promise<boolean> {
  return commandSucceeds("redis-server", ["--version"]);
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

/**
 * Every way a secret could sit in the store in a recognisable form.
 *
 * @param secret A personal value, token, principal or id.
 * @returns Each form's name and bytes.
 */
export function secretForms(secret: string): Array<[string, Buffer]> {
  const sha = createHash("sha256").update(secret).digest();
  const out: Array<[string, Buffer]> = [
    ["plain", Buffer.from(secret)],
    ["lower case", Buffer.from(secret.toLowerCase())],
    ["base64", Buffer.from(Buffer.from(secret).toString("base64").replace(/=+$/, ""))],
    ["base64url", Buffer.from(Buffer.from(secret).toString("base64url"))],
    ["sha256 raw", sha],
    ["sha256 hex", Buffer.from(sha.toString("hex"))],
    ["sha256 base64", Buffer.from(sha.toString("base64").replace(/=+$/, ""))],
    ["sha256 base64url", Buffer.from(sha.toString("base64url"))],
    ["sha256: digest", Buffer.from(`sha256:${sha.toString("hex")}`)],
  ];
  return out;
}

/**
 * Every key, member, field and value in the store, as bytes.
 *
 * @param url The store.
 * @returns The bytes.
 */
export async function dumpStore(url: string): Promise<Buffer[]> {
  const client = new Redis(url, { lazyConnect: true });
  await client.connect();
  try {
    const out: Buffer[] = [];
    let cursor = "0";
    do {
      const [next, keys] = await client.scanBuffer(cursor, "COUNT", 1000);
      cursor = String(next);
      for (const key of keys) {
        out.push(key);
        const type = await client.type(key);
        if (type === "string") out.push((await client.getBuffer(key))!);
        else if (type === "zset") out.push(...await client.zrangeBuffer(key, "0", "-1"));
        else if (type === "hash") {
          for (const [field, value] of Object.entries(await client.hgetallBuffer(key))) {
            out.push(Buffer.from(field), value);
          }
        } else throw new Error(`unexpected ${type} at ${key}`);
      }
    } while (cursor !== "0");
    return out;
  } finally {
    await client.quit();
  }
}
