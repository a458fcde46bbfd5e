/**
 * nginx from Debian in front of `serve --http` replicas, run as the tests' own child process with
 * deploy/nginx.conf: the one copy of the configuration that docs/DEPLOY.md explains, with only
 * its addresses changed to the ports the replicas and the balancer got here.
 *
 * @module
 */
import { join } from "node:path";
import { assert } from "./_assert.ts";
import { ROOT } from "./_env.ts";
import { spawnReadingStderr } from "./_command.ts";
import { exitOrKill } from "./_proc.ts";

/** deploy/nginx.conf. */
export const NGINX_CONF = join(ROOT, "deploy", "nginx.conf");

/** The addresses deploy/nginx.conf is written for: the balancer's, then replica i's (`ce-i`). */
const LISTEN = "listen 127.0.0.1:3333;";
const REPLICA_ADDRESSES = ["127.0.0.1:3340", "127.0.0.1:3341", "127.0.0.1:3342"];

/**
 * The nginx executable: `nginx` on PATH, else Debian's /usr/sbin/nginx (not on a non-root
 * PATH).
 *
 * @returns Its path, or undefined when nginx is not installed.
 */
export async function findNginx(): Promise<string | undefined> {
  for (const candidate of ["nginx", "/usr/sbin/nginx"]) {
    try {
      const { success } = await new Deno.Command(candidate, {
        args: ["-v"],
        stdout: "null",
        stderr: "null",
      }).output();
      if (success) return candidate;
    } catch {
      // Not there; try the next one.
    }
  }
  return undefined;
}

/**
 * deploy/nginx.conf with the balancer on `listenPort` and replica `ce-i` on `replicaPorts[i]`.
 * Each address must be where the file has it (the listen line once, each replica once, in the
 * round-robin upstream), so that a change of the file's shape fails here rather than leaving a
 * test that no longer tests the file.
 *
 * @param template The configuration's text.
 * @param ports The balancer's port and the three replicas' (the same port thrice puts one
 *   replica behind it).
 * @returns The configuration to run.
 */
export function renderNginxConf(
  template: string,
  ports: { listen: number; replicas: readonly number[] },
): string {
  assert(ports.replicas.length === REPLICA_ADDRESSES.length, "deploy/nginx.conf names 3 replicas");
  assert(template.split(LISTEN).length === 2, `deploy/nginx.conf must hold "${LISTEN}" once`);
  let conf = template.replace(LISTEN, `listen 127.0.0.1:${ports.listen};`);
  REPLICA_ADDRESSES.forEach((address, i) => {
    const count = conf.split(`server ${address}`).length - 1;
    assert(count === 1, `deploy/nginx.conf names ${address} ${count} times, expected 1`);
    conf = conf.replaceAll(`server ${address}`, `server 127.0.0.1:${ports.replicas[i]}`);
  });
  return conf;
}

/** One line of the access log (deploy/nginx.conf's `ce_upstream` format). */
export interface AccessLine {
  /** The status nginx answered with. */
  status: number;
  /** Seconds the request took. */
  seconds: number;
  /** The replicas tried, in order (`127.0.0.1:41234`); the last one answered or failed. */
  upstreams: string[];
  /** The caller's `X-Request-Id`, if it sent one. */
  requestId?: string;
}

/**
 * Parses the access log.
 *
 * @param text The log's text.
 * @returns One entry a request.
 */
export function parseAccessLog(text: string): AccessLine[] {
  return text.split("\n").filter(Boolean).map((line) => {
    const match = /^\S+ (\d{3}) ([\d.]+) "[^"]*" upstream=(.*) upstream_status=.* request_id=(\S+)$/
      .exec(line);
    assert(match, `an access log line not in the ce_upstream format: ${line}`);
    return {
      status: Number(match[1]),
      seconds: Number(match[2]),
      upstreams: match[3] === "-" ? [] : match[3].split(/, | : /),
      ...(match[4] === "-" ? {} : { requestId: match[4] }),
    };
  });
}

/** A running nginx. */
export interface Nginx {
  /** The MCP endpoint through the balancer. */
  url: URL;
  /** Its prefix directory (configuration, pid, logs, temp files). */
  dir: string;
  /** The access log so far. */
  accessLog(): Promise<AccessLine[]>;
  /** What nginx wrote to stderr so far (its error log). */
  stderr(): string;
  /**
   * Stops nginx and its workers (SIGTERM, then SIGKILL after 10 s) and removes its directory.
   */
  stop(): Promise<void>;
}

function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}

/** The processes whose parent is `pid` (nginx's workers). */
async function childrenOf(pid: number): Promise<number[]> {
  const children: number[] = [];
  for await (const entry of Deno.readDir("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    const stat = await Deno.readTextFile(`/proc/${entry.name}/stat`).catch(() => "");
    // pid (comm) state ppid …; comm may hold spaces and parentheses: read after the last ")".
    const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
    if (ppid === pid) children.push(Number(entry.name));
  }
  return children;
}

async function alive(pid: number): Promise<boolean> {
  const stat = await Deno.readTextFile(`/proc/${pid}/stat`).catch(() => "");
  return stat !== "" && stat.slice(stat.lastIndexOf(")") + 2)[0] !== "Z";
}

async function accepts(port: number): Promise<boolean> {
  try {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port });
    conn.close();
    return true;
  } catch {
    return false;
  }
}

/**
 * Starts nginx as a child process (no root, no daemon) with deploy/nginx.conf in front of the
 * given replicas, and waits until it accepts connections.
 *
 * @param nginx The executable ({@linkcode findNginx}).
 * @param replicaPorts The ports of replicas `ce-0`, `ce-1` and `ce-2`.
 * @returns The running balancer; stop it when done.
 * @throws {Error} With nginx's stderr, when it does not start.
 */
export async function startNginx(nginx: string, replicaPorts: readonly number[]): Promise<Nginx> {
  const dir = await Deno.makeTempDir({ prefix: "ce-nginx-" });
  // Run as root, nginx's workers run as nobody: they must reach tmp/ (for large bodies).
  await Deno.chmod(dir, 0o755);
  await Deno.mkdir(join(dir, "tmp"));
  await Deno.mkdir(join(dir, "logs"));
  const template = await Deno.readTextFile(NGINX_CONF);
  // The port is free when picked and nginx binds it a moment later: another process can take it
  // in between, so a failed start is tried again with another port.
  let lastError = "";
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = freePort();
    const conf = join(dir, "nginx.conf");
    await Deno.writeTextFile(
      conf,
      renderNginxConf(template, { listen: port, replicas: replicaPorts }),
    );
    const { child, stderr: chunks, drained } = spawnReadingStderr(nginx, {
      args: ["-p", `${dir}/`, "-c", conf, "-e", "stderr", "-g", "daemon off;"],
    });
    let exited = false;
    const status = child.status.finally(() => exited = true);
    const deadline = Date.now() + 15_000;
    while (!exited && Date.now() < deadline && !(await accepts(port))) {
      await new Promise((r) => setTimeout(r, 50));
    }
    const stop = async () => {
      // The workers hold nginx's stderr too, and a worker left behind by its master (a graceful
      // SIGQUIT waits for open streams, which can be idle for an hour) would keep it open: the
      // fast shutdown (SIGTERM) closes connections, and each worker is seen gone or killed.
      const workers = exited ? [] : await childrenOf(child.pid);
      try {
        child.kill("SIGTERM");
      } catch {
        // It has exited already.
      }
      await exitOrKill(child, 10_000);
      await status;
      for (const worker of workers) {
        const deadline = Date.now() + 5_000;
        while (await alive(worker) && Date.now() < deadline) {
          await new Promise((r) => setTimeout(r, 50));
        }
        if (await alive(worker)) {
          try {
            Deno.kill(worker, "SIGKILL");
          } catch {
            // Gone meanwhile.
          }
        }
      }
      await drained;
    };
    if (!exited && await accepts(port)) {
      return {
        url: new URL(`http://127.0.0.1:${port}/mcp`),
        dir,
        accessLog: async () =>
          parseAccessLog(await Deno.readTextFile(join(dir, "logs", "access.log")).catch(() => "")),
        stderr: () => chunks.join(""),
        stop: async () => {
          await stop();
          await Deno.remove(dir, { recursive: true }).catch(() => {});
        },
      };
    }
    await stop();
    lastError = chunks.join("");
  }
  await Deno.remove(dir, { recursive: true }).catch(() => {});
  throw new Error(`nginx did not start:\n${lastError}`);
}
