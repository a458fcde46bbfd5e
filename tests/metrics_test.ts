/**
 * `GET /metrics`: a real `serve --http` scraped after real runs in both languages (ok, failed, and
 * cancelled while another waited in the queue) that called real upstream servers, its text parsed
 * by the Prometheus client's own parser; its auth (`http.metrics: "auth"`), its loopback listener
 * (`"loopback"`: no auth, local `Host` only, nothing beyond loopback) and `"off"`; and the store's
 * round trips and failures on a real redis-server.
 *
 * @module
 */
import type { Client } from "@modelcontextprotocol/client";
import { join } from "node:path";
import { assert, assertEquals, assertFails, assertReturns } from "./_assert.ts";
import { warnUnless } from "./_command.ts";
import { callRun, connect } from "./_client.ts";
import { fixtureServer, npmServer } from "./_env.ts";
import { withTempDir } from "./_fs.ts";
import { startHttpServer } from "./_http_server.ts";
import {
  hasPrometheusParser,
  histogramOf,
  type MetricFamily,
  parseExposition,
  PARSER_MISSING,
  scrape,
  valueOf,
} from "./_metrics.ts";
import { EVERYTHING } from "./_pins.ts";
import { eventually } from "./_proc.ts";
import { rawExchange } from "./_raw_http.ts";
import { hasRedisServer, REDIS_MISSING, RedisServer } from "./_redis.ts";
import { resolveSettings } from "../src/config/settings.ts";
import { Metrics, runOutcome } from "../src/metrics.ts";
import { openSharedState } from "../src/state/shared_state.ts";

const parser = warnUnless(await hasPrometheusParser(), PARSER_MISSING);
const redis = warnUnless(await hasRedisServer(), REDIS_MISSING);

const TOKEN = "metrics-token-0123456789abcdef";

/** Scrapes until `check` holds (a guard against hangs, not a clock), and returns the last scrape. */
async function scrapeUntil(
  url: URL,
  check: (families: MetricFamily[]) => boolean,
  what: string,
): Promise<MetricFamily[]> {
  let last: MetricFamily[] = [];
  const held = await eventually(async () => check(last = await scrape(url, TOKEN)), 60_000);
  assert(held, `${what}; the last scrape:\n${JSON.stringify(last)}`);
  return last;
}

function runs(families: MetricFamily[], language: string, outcome: string): number | undefined {
  return valueOf(families, "code_executor_runs_total", { language, outcome });
}

/**
 * Starts a run that holds the only slot in an upstream call until `signal` aborts it.
 *
 * @returns The run's call (in an object: an async function's returned promise would be awaited).
 */
async function holdTheSlot(
  client: Client,
  slowMarker: string,
  signal: AbortSignal,
): Promise<{ call: Promise<unknown> }> {
  const call = callRun(
    client,
    "run_typescript",
    'await callMCPTool("mcp__fixture__slow", { ms: 600000 }); return "never"',
    { timeoutMs: 300_000 },
    { signal },
  ).then((result) => result, (error: Error) => error);
  const inCall = await eventually(
    () => Deno.stat(slowMarker).then(() => true, () => false),
    60_000,
  );
  assert(inCall, "the run never reached the fixture's slow tool");
  return { call };
}

Deno.test({
  name:
    "serve --http: GET /metrics counts runs by language and outcome, their durations, the queue, the warm pools and the upstream calls",
  ignore: !parser,
  fn: () =>
    withTempDir("ce-metrics-", async (dir) => {
      const pidFile = join(dir, "fixture.pid");
      const server = await startHttpServer({
        env: { CODE_EXECUTOR_HTTP_TOKEN: TOKEN, CODE_EXECUTOR_PYTHON_WARM_POOL: "1" },
        // One slot, so that a second run waits in the queue while the first holds it.
        settings: { limits: { maxConcurrent: 1 } },
        upstream: {
          everything: npmServer(EVERYTHING),
          fixture: fixtureServer({ FIXTURE_PID_FILE: pidFile }),
        },
      });
      const metricsUrl = new URL("/metrics", server.url);
      try {
        for (const token of [undefined, "not-the-token-0123456789abcdef"]) {
          const refused = await fetch(metricsUrl, {
            headers: token ? { authorization: `Bearer ${token}` } : {},
          });
          assertEquals(refused.status, 401, await refused.text());
        }

        const client = await connect(server.url, { token: TOKEN });
        try {
          assertReturns(await callRun(client, "run_typescript", "return 6 * 7"), 42);
          assertReturns(
            await callRun(
              client,
              "run_typescript",
              'return await callMCPTool("mcp__everything__get-sum", { a: 2, b: 3 })',
            ),
            "The sum of 2 and 3 is 5.",
          );
          assertReturns(
            await callRun(
              client,
              "run_typescript",
              "try { await tools.fixture.fail({}); } catch (error) { return error.name; }",
            ),
            "ToolError",
          );
          assertFails(
            await callRun(client, "run_typescript", 'throw new TypeError("not a number")'),
            "TypeError",
          );
          // The code names its own exception: a name it chose must not become a series.
          const chosen = "Oops_SeriesOfMyOwn_0123456789";
          assertFails(
            await callRun(
              client,
              "run_typescript",
              `class Mine extends Error { name = "${chosen}" }; throw new Mine("mine")`,
            ),
            chosen,
          );
          assertReturns(await callRun(client, "run_python", "6 * 7"), 42);
          assertFails(await callRun(client, "run_python", "1 / 0"), "ZeroDivisionError");

          const abort = new AbortController();
          const held = await holdTheSlot(client, `${pidFile}.slow`, abort.signal);
          const queued = callRun(client, "run_typescript", "return 2");
          await scrapeUntil(
            metricsUrl,
            (families) =>
              valueOf(families, "code_executor_runs_queued") === 1 &&
              valueOf(families, "code_executor_runs_in_flight") === 2,
            "the second run never showed as queued behind the first",
          );
          abort.abort();
          assert((await held.call) instanceof Error, "the held run was not cancelled");
          assertReturns(await queued, 2);

          const families = await scrapeUntil(
            metricsUrl,
            (families) =>
              runs(families, "typescript", "Cancelled") === 1 &&
              histogramOf(families, "code_executor_upstream_call_duration_seconds", {
                  server: "fixture",
                  outcome: "failed",
                }).count === 1 &&
              valueOf(families, "code_executor_warm_pool_ready", { language: "typescript" }) ===
                2 &&
              valueOf(families, "code_executor_warm_pool_ready", { language: "python" }) === 1,
            "the cancelled run, its upstream call or the refilled warm pools never showed",
          );
          assertEquals(runs(families, "typescript", "ok"), 4);
          assertEquals(runs(families, "typescript", "TypeError"), 1);
          assertEquals(runs(families, "typescript", "raised"), 1);
          assertEquals(runs(families, "python", "ok"), 1);
          assertEquals(runs(families, "python", "raised"), 1);
          const total = families.find((f) => f.name === "code_executor_runs")!.samples
            .reduce((sum, sample) => sum + sample.value, 0);
          assertEquals(total, 9, "a run that is not one of the nine was counted");
          assert(!JSON.stringify(families).includes("Oops_"), "the code's own name is a label");

          const ts = histogramOf(families, "code_executor_run_duration_seconds", {
            language: "typescript",
          });
          const py = histogramOf(families, "code_executor_run_duration_seconds", {
            language: "python",
          });
          assertEquals([ts.count, py.count], [7, 2]);
          assert(ts.sum > 0 && py.sum > 0, `duration sums ${ts.sum}, ${py.sum}`);

          assertEquals(valueOf(families, "code_executor_runs_queued"), 0);
          assertEquals(valueOf(families, "code_executor_runs_in_flight"), 0);
          assertEquals(
            valueOf(families, "code_executor_warm_pool_target", { language: "typescript" }),
            2,
          );
          assertEquals(
            valueOf(families, "code_executor_warm_pool_target", { language: "python" }),
            1,
          );

          assertEquals(valueOf(families, "code_executor_upstream_up", { server: "everything" }), 1);
          assertEquals(valueOf(families, "code_executor_upstream_up", { server: "fixture" }), 1);
          const call = (server: string, outcome: string) =>
            histogramOf(families, "code_executor_upstream_call_duration_seconds", {
              server,
              outcome,
            }).count;
          assertEquals(call("everything", "ok"), 1);
          assertEquals(call("fixture", "tool_error"), 1);
          assertEquals(call("fixture", "ok"), 0);

          assert((valueOf(families, "code_executor_http_requests_in_flight") ?? 0) >= 1);
          assert((valueOf(families, "process_resident_memory_bytes") ?? 0) > 0);
          assert((valueOf(families, "process_cpu_seconds_total") ?? 0) > 0);
          assert((valueOf(families, "process_open_fds") ?? 0) > 0);
        } finally {
          await client.close();
        }
      } finally {
        await server.close();
      }
    }),
});

Deno.test({
  name:
    'serve --http: http.metrics "loopback" serves /metrics on its own loopback port without auth, to local Host names only, and not on the MCP port',
  ignore: !parser,
  fn: async () => {
    const server = await startHttpServer({
      env: { CODE_EXECUTOR_HTTP_TOKEN: TOKEN },
      settings: { http: { metrics: "loopback", metricsPort: 0 }, sandbox: { warmPool: 0 } },
    });
    try {
      const found = /metrics on (http:\/\/\S+)/.exec(server.stderr())?.[1];
      assert(found, `no "metrics on" line:\n${server.stderr()}`);
      const url = new URL(found);
      assertEquals([url.hostname, url.pathname], ["127.0.0.1", "/metrics"]);

      const client = await connect(server.url, { token: TOKEN });
      try {
        assertReturns(await callRun(client, "run_typescript", "return 1"), 1);
      } finally {
        await client.close();
      }
      const families = await scrape(url);
      assertEquals(runs(families, "typescript", "ok"), 1);

      const onMcpPort = await fetch(new URL("/metrics", server.url), {
        headers: { authorization: `Bearer ${TOKEN}` },
      });
      assertEquals(onMcpPort.status, 404, await onMcpPort.text());

      // A page that rebinds its own name to 127.0.0.1 sends that name in Host.
      const rebound = await rawExchange(
        url,
        new TextEncoder().encode(
          `GET /metrics HTTP/1.1\r\nHost: attacker.example:${url.port}\r\nConnection: close\r\n\r\n`,
        ),
      );
      assertEquals(rebound.status, 403, rebound.head);
      assert(!rebound.body.includes("code_executor_"), rebound.body);

      const other = await fetch(new URL("/mcp", url));
      assertEquals(other.status, 404, await other.text());
      const post = await fetch(url, { method: "POST", body: "" });
      assertEquals(post.status, 405, await post.text());

      // Bound to loopback alone: the port is not open on the machine's other addresses.
      const outside = Deno.networkInterfaces().find((nic) =>
        nic.family === "IPv4" && !nic.address.startsWith("127.")
      );
      if (outside) {
        const reached = await Deno.connect({ hostname: outside.address, port: Number(url.port) })
          .then((conn) => (conn.close(), true), () => false);
        assert(!reached, `/metrics' port answers on ${outside.address}`);
      }
    } finally {
      await server.close();
    }
  },
});

Deno.test('serve --http: http.metrics "off" serves no /metrics', async () => {
  const server = await startHttpServer({
    env: { CODE_EXECUTOR_HTTP_TOKEN: TOKEN, CODE_EXECUTOR_HTTP_METRICS: "off" },
    settings: { sandbox: { warmPool: 0 } },
  });
  try {
    const response = await fetch(new URL("/metrics", server.url), {
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    assertEquals(response.status, 404, await response.text());
    assert(!/metrics on/.test(server.stderr()), server.stderr());
  } finally {
    await server.close();
  }
});

Deno.test("runOutcome() keeps the closed error types and folds every other name into raised", () => {
  assertEquals(runOutcome(undefined), "ok");
  assertEquals(runOutcome("TimeoutError"), "TimeoutError");
  assertEquals(runOutcome("StateUnavailable"), "StateUnavailable");
  assertEquals(runOutcome("ZeroDivisionError"), "raised");
  assertEquals(runOutcome("constructor"), "raised");
  assertEquals(runOutcome("__proto__"), "raised");
});

Deno.test({
  name:
    "Metrics: a Redis store's round trips, operations and failures, and forwarded requests, as scraped",
  ignore: !parser || !redis,
  fn: async () => {
    const metrics = await Metrics.create();
    const server = new RedisServer();
    await server.start();
    const settings = resolveSettings({
      state: { url: server.url, key: "a-test-secret-of-at-least-32-characters!", timeoutMs: 300 },
    });
    const state = await openSharedState(settings, { onRoundTrip: metrics.storeRoundTrip });
    try {
      metrics.watch({ store: state.store });
      const bytes = new TextEncoder().encode("v");
      for (let i = 0; i < 5; i++) await state.store.set(`k${i}`, bytes, { ttlMs: 60_000 });
      assertEquals((await state.store.get(["k0", "k4"])).length, 2);
      await server.kill();
      const failed = await state.store.get(["k0"]).then(() => false, () => true);
      assert(failed, "a get on a killed store did not fail");
      metrics.forwarded("parked_run", "ok");
      metrics.forwarded("parked_run", "ok");
      metrics.forwarded("python_session", "owner_gone");

      const families = await parseExposition(await metrics.render());
      const ops = state.store.stats.operations;
      assertEquals(ops, 7);
      assertEquals(
        valueOf(families, "code_executor_store_operations_total", { store: "redis" }),
        7,
      );
      assertEquals(valueOf(families, "code_executor_store_failures_total", { store: "redis" }), 1);
      const trips = histogramOf(families, "code_executor_store_round_trip_seconds", {
        store: "redis",
      });
      assertEquals(trips.count, 7);
      assert(trips.sum > 0, `round trips took ${trips.sum} s in all`);
      const forwarded = (kind: string, outcome: string) =>
        valueOf(families, "code_executor_forwarded_requests_total", { kind, outcome });
      assertEquals(forwarded("parked_run", "ok"), 2);
      assertEquals(forwarded("python_session", "owner_gone"), 1);
    } finally {
      await state.close();
      await server.close();
    }
  },
});

Deno.test({
  name: "Metrics: the in-process store's operations are counted under store=memory",
  ignore: !parser,
  fn: async () => {
    const metrics = await Metrics.create();
    const state = await openSharedState(resolveSettings({}), {
      onRoundTrip: metrics.storeRoundTrip,
    });
    try {
      metrics.watch({ store: state.store });
      await state.store.set("k", new Uint8Array([1]), { ttlMs: 1_000 });
      await state.store.take("k");
      const families = await parseExposition(await metrics.render());
      assertEquals(
        valueOf(families, "code_executor_store_operations_total", { store: "memory" }),
        2,
      );
      assertEquals(valueOf(families, "code_executor_store_failures_total", { store: "memory" }), 0);
      assertEquals(
        histogramOf(families, "code_executor_store_round_trip_seconds", { store: "redis" }).count,
        0,
      );
    } finally {
      await state.close();
    }
  },
});
