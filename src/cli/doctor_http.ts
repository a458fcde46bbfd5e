/**
 * `doctor`'s part on `serve --http`: the HTTP settings in force (endpoint, public URL, auth,
 * Host and Origin checks) and whether the server could start with them: the auth it would use
 * can be set up, it would not listen beyond loopback without auth, and the port is free (bound
 * and released at once).
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
