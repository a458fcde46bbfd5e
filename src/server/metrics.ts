/**
 * `GET /metrics` of `serve --http`: where the gauges of {@linkcode Metrics} read (the executor's
 * queue and warm pools, the upstream connections, the endpoint's requests), the response, and the
 * loopback listener of `http.metrics: "loopback"`, which serves `/metrics` alone, without
 * authentication, and only to local names in `Host` (a DNS-rebinding page gets 403).
 *
 * @module
 */
import { hostHeaderValidationResponse } from "@modelcontextprotocol/server";
import type { Executor } from "../exec/executor.ts";
import type { Logger } from "../log.ts";
import type { Metrics } from "../metrics.ts";
import type { Hub } from "../upstream/hub.ts";

/** The path of the exposition, on either port. */
export const METRICS_PATH = "/metrics";

/** The languages whose warm pools are reported. */
const LANGUAGES = ["typescript", "python"] as const;

/**
 * Points the gauges at the server's parts.
 *
 * @param metrics The instruments.
 * @param sources The executor, the upstream hub and the endpoint's request count.
 */
export function watchServer(
  metrics: Metrics,
  sources: { executor: Executor; hub?: Hub; httpInFlight: () => number },
): void {
  const { executor, hub } = sources;
  metrics.watch({
    queued: () => executor.queued,
    inFlight: () => executor.running,
    warmPools: () =>
      LANGUAGES.map((language) => ({ language, ...executor.runtime(language).warmChildren() })),
    upstreams: () =>
      hub?.pool.statuses().map((status) => ({ name: status.name, up: status.state === "ready" })) ??
        [],
    httpInFlight: sources.httpInFlight,
  });
}

/**
 * Answers a request for `/metrics`: the exposition for GET and HEAD, 405 otherwise.
 *
 * @param request The request.
 * @param metrics The instruments.
 * @returns The response.
 */
export async function metricsResponse(request: Request, metrics: Metrics): Promise<Response> {
  if (request.method !== "GET" && request.method !== "HEAD") {
    return new Response("Method Not Allowed: /metrics answers GET\n", {
      status: 405,
      headers: { allow: "GET, HEAD" },
    });
  }
  const body = await metrics.render();
  return new Response(request.method === "HEAD" ? null : body, {
    headers: { "content-type": metrics.contentType, "cache-control": "no-store" },
  });
}

/** A listener of `http.metrics: "loopback"`. */
export interface MetricsListener {
  /** `http://127.0.0.1:<port>/metrics`, with the port it bound. */
  url: URL;
  /** Stops listening. */
  close(): Promise<void>;
}

/**
 * Serves `/metrics` on `127.0.0.1:<port>` without authentication; any other path is 404, and a
 * `Host` that is not a local name 403.
 *
 * @param metrics The instruments.
 * @param options The port (0 picks one) and where failures go.
 * @returns The listener.
 * @throws {TypeError} When the port cannot be bound; the message names `http.metricsPort`.
 */
export function listenForMetrics(
  metrics: Metrics,
  options: { port: number; log: Logger },
): MetricsListener {
  const hostname = "127.0.0.1";
  const local = ["127.0.0.1", "localhost", "[::1]"];
  const handler = (request: Request): Promise<Response> | Response => {
    const refused = hostHeaderValidationResponse(request, local);
    if (refused) return refused;
    if (new URL(request.url).pathname !== METRICS_PATH) {
      return new Response(`Not found: this port serves ${METRICS_PATH} only\n`, { status: 404 });
    }
    return metricsResponse(request, metrics);
  };
  let server: Deno.HttpServer<Deno.NetAddr>;
  try {
    server = Deno.serve({
      hostname,
      port: options.port,
      onListen: () => {},
      onError: (error) => {
        options.log.error(`metrics: ${(error as Error).stack ?? error}`);
        return new Response("Internal error\n", { status: 500 });
      },
    }, handler);
  } catch (error) {
    throw new TypeError(
      `Cannot serve /metrics on ${hostname}:${options.port}: ${
        (error as Error).message
      }; pick another port with http.metricsPort or CODE_EXECUTOR_HTTP_METRICS_PORT (0 picks a free one)`,
      { cause: error },
    );
  }
  return {
    url: new URL(`http://${hostname}:${server.addr.port}${METRICS_PATH}`),
    close: () => server.shutdown(),
  };
}
