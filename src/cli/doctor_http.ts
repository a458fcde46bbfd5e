/**
 * `doctor`'s part on `serve --http`: the HTTP settings in force (endpoint, public URL, auth,
 * Host and Origin checks) and whether the server could start with them: the auth it would use
 * can be set up, it would not listen beyond loopback without auth, and the port is free (bound
 * and released at once). `doctor --http URL` checks a token against a running server instead:
 * whether it is accepted, and if not, the reason the server gives.
 *
 * @module
 */
import type { Settings } from "../config/settings.ts";
import { hostAllowlists, hostName, isLoopback } from "../server/http.ts";
import { authMode, createAuthenticator } from "../server/http_auth.ts";

/** What {@linkcode httpReport} found. */
export interface HttpReport {
  /** The lines to show, under a heading. */
  text: string;
  /** Problems that would stop `serve --http` from starting, or leave it open to rebinding. */
  problems: string[];
}

/**
 * Describes the HTTP settings and checks them the way `serve --http` would use them.
 *
 * @param settings The admin's settings.
 * @param env The environment (`CODE_EXECUTOR_HTTP_TOKEN`); never shown.
 * @returns The report; it names the setting to change for each problem.
 * @example
 * ```ts
 * const { settings } = await loadSettings();
 * console.log((await httpReport(settings, Deno.env.toObject())).text);
 * ```
 */
export async function httpReport(
  settings: Settings,
  env: Record<string, string | undefined>,
): Promise<HttpReport> {
  const http = settings.http;
  const endpoint = `http://${hostName(http.host)}:${http.port}${http.path}`;
  const problems: string[] = [];
  const rows: Array<[string, string]> = [
    ["endpoint", `${endpoint} (http.host, http.port, http.path)`],
    ["public URL", http.publicUrl ?? "- (the endpoint as bound; http.publicUrl)"],
  ];

  const mode = authMode(settings, env);
  rows.push([
    "auth",
    `${mode}${http.auth === "auto" ? " (http.auth auto)" : ""}: ${authDetail(settings, env, mode)}`,
  ]);
  if (mode === "none" && !isLoopback(http.host)) {
    problems.push(
      `serve --http refuses to listen on ${http.host} without auth: set CODE_EXECUTOR_HTTP_TOKEN (or http.tokensFile, or http.oauth), or set http.host to 127.0.0.1`,
    );
  } else if (mode !== "none") {
    try {
      await createAuthenticator(settings, { env, resource: new URL(http.publicUrl ?? endpoint) });
    } catch (error) {
      problems.push(`auth cannot be set up: ${(error as Error).message}`);
    }
  }

  const { hosts, origins } = hostAllowlists(settings);
  rows.push([
    "Host check",
    hosts ? `on: ${hosts.join(", ")} (http.allowedHosts)` : "off",
  ]);
  if (!hosts) {
    problems.push(
      `the Host header is not checked on ${http.host} (DNS rebinding): set http.allowedHosts or http.publicUrl to the names clients use`,
    );
  }
  rows.push([
    "Origins",
    `${
      origins.length > 0 ? origins.join(", ") : "none (browsers are refused)"
    } (http.allowedOrigins)`,
  ]);

  const port = await portState(http.host, http.port);
  rows.push(["port", port.text]);
  if (port.problem) problems.push(port.problem);

  const width = Math.max(...rows.map(([name]) => name.length));
  const lines = rows.map(([name, value]) => `  ${name.padEnd(width)}  ${value}\n`);
  const notes = problems.map((problem) => `  problem: ${problem}\n`);
  return {
    text: `HTTP (serve --http; stdio is the default):\n${lines.join("")}${notes.join("")}`,
    problems,
  };
}

function authDetail(
  settings: Settings,
  env: Record<string, string | undefined>,
  mode: string,
): string {
  const http = settings.http;
  if (mode === "none") return "anyone who reaches the port may run code (loopback only)";
  if (mode === "oauth") {
    const oauth = http.oauth;
    if (!oauth) return "http.oauth is not set";
    const scopes = oauth.scopes.length > 0 ? `, scopes ${oauth.scopes.join(" ")}` : "";
    return `JWTs from ${oauth.issuer}, audience ${oauth.audience ?? "the resource URL"}${scopes}`;
  }
  const sources = [
    ...(env.CODE_EXECUTOR_HTTP_TOKEN ? ["CODE_EXECUTOR_HTTP_TOKEN (principal default)"] : []),
    ...(http.tokensFile ? [`http.tokensFile ${http.tokensFile}`] : []),
  ];
  return sources.length > 0 ? `tokens from ${sources.join(" and ")}` : "no token is set";
}

/** Whether the port can be bound, and if not, who holds it and what to change. */
async function portState(
  host: string,
  port: number,
): Promise<{ text: string; problem?: string }> {
  if (port === 0) return { text: "0: a free port is picked at start (http.port)" };
  const where = `${hostName(host)}:${port}`;
  const change = "set http.port (CODE_EXECUTOR_HTTP_PORT, or serve --http --port N)";
  try {
    Deno.listen({ hostname: host.replace(/^\[|\]$/g, ""), port }).close();
    return { text: `${where} is free` };
  } catch (error) {
    if (error instanceof Deno.errors.AddrInUse) {
      if (await answersHealthz(host, port)) {
        return { text: `${where} is in use by a running Code Executor (its /healthz answers)` };
      }
      return {
        text: `${where} is in use`,
        problem: `${where} is in use by another program: stop it, or ${change}`,
      };
    }
    if (error instanceof Deno.errors.PermissionDenied) {
      return {
        text: `${where} needs privileges`,
        problem: `listening on ${where} needs privileges: ${change} to 1024 or above`,
      };
    }
    if (error instanceof Deno.errors.AddrNotAvailable) {
      return {
        text: `${host} is not an address of this machine`,
        problem:
          `http.host ${host} is not an address of this machine: set http.host (CODE_EXECUTOR_HTTP_HOST, or serve --http --host)`,
      };
    }
    return {
      text: `cannot listen on ${where}`,
      problem: `cannot listen on ${where}: ${
        (error as Error).message
      }; check http.host and http.port`,
    };
  }
}

/** Whether the program on the port is a `serve --http`: its `/healthz` answers with a status. */
async function answersHealthz(host: string, port: number): Promise<boolean> {
  const target = host === "0.0.0.0"
    ? "127.0.0.1"
    : host === "::" || host === "[::]"
    ? "[::1]"
    : hostName(host);
  try {
    const response = await fetch(`http://${target}:${port}/healthz`, {
      signal: AbortSignal.timeout(2_000),
    });
    const body = await response.json().catch(() => undefined);
    return typeof body?.status === "string";
  } catch {
    return false;
  }
}

/** Options of {@linkcode checkHttpToken}. */
export interface TokenCheckOptions {
  /** The environment: `CODE_EXECUTOR_HTTP_TOKEN` is the token checked; never shown. */
  env: Record<string, string | undefined>;
  /** Where the report goes; stdout by default. */
  write?: (text: string) => void;
}

/**
 * Checks the token in `CODE_EXECUTOR_HTTP_TOKEN` (or no token) against a running `serve --http`:
 * its `/healthz`, then an `initialize` with the token, whose session is closed at once. A refusal
 * is reported with the reason and the description the server sends; the token is never shown.
 *
 * @param url The MCP endpoint (`http://127.0.0.1:3333/mcp`).
 * @param options The environment and where to write.
 * @returns 0 when the token is accepted, 1 otherwise.
 * @throws {TypeError} When the URL is not an http(s) URL.
 */
export async function checkHttpToken(url: string, options: TokenCheckOptions): Promise<number> {
  const encoder = new TextEncoder();
  const write = options.write ?? ((text: string) => Deno.stdout.writeSync(encoder.encode(text)));
  let endpoint: URL;
  try {
    endpoint = new URL(url);
  } catch {
    throw new TypeError(`Invalid URL "${url}": expected the MCP endpoint, http://HOST:PORT/mcp`);
  }
  if (endpoint.protocol !== "http:" && endpoint.protocol !== "https:") {
    throw new TypeError(`Invalid URL "${url}": expected an http:// or https:// URL`);
  }
  const token = options.env.CODE_EXECUTOR_HTTP_TOKEN;
  write(
    `HTTP token check of ${endpoint.href} with ${
      token
        ? "the token in CODE_EXECUTOR_HTTP_TOKEN"
        : "no token (CODE_EXECUTOR_HTTP_TOKEN is unset)"
    }:\n`,
  );
  try {
    const health = await fetch(new URL("/healthz", endpoint), {
      signal: AbortSignal.timeout(5_000),
    });
    const body = await health.json().catch(() => undefined);
    write(
      `  /healthz  ${health.status}${typeof body?.status === "string" ? ` ${body.status}` : ""}\n`,
    );
  } catch (error) {
    write(`  problem: ${endpoint.origin} cannot be reached: ${(error as Error).message}\n`);
    return 1;
  }
  const response = await fetch(endpoint, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      ...(token ? { authorization: `Bearer ${token}` } : {}),
    },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "initialize",
      params: {
        protocolVersion: "2025-11-25",
        capabilities: {},
        clientInfo: { name: "code-executor-doctor", version: "1" },
      },
    }),
    signal: AbortSignal.timeout(10_000),
  });
  const text = await response.text();
  if (response.ok) {
    const session = response.headers.get("mcp-session-id");
    if (session) {
      await fetch(endpoint, {
        method: "DELETE",
        headers: {
          "mcp-session-id": session,
          ...(token ? { authorization: `Bearer ${token}` } : {}),
        },
      }).then((r) => r.body?.cancel()).catch(() => {});
    }
    write(`  token     accepted (initialize answered ${response.status})\n`);
    return 0;
  }
  let body: { reason?: unknown; error_description?: unknown } | undefined;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  if (response.status === 401 || response.status === 403) {
    const reason = typeof body?.reason === "string" ? body.reason : "unknown";
    const why = typeof body?.error_description === "string"
      ? body.error_description
      : response.headers.get("www-authenticate") ?? "no reason given";
    write(`  token     refused with ${response.status} (${reason}): ${why}\n`);
    return 1;
  }
  write(`  problem: initialize answered ${response.status}: ${text.slice(0, 300)}\n`);
  return 1;
}
