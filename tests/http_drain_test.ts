/**
 * The drain of `serve --http`: SIGTERM with runs in flight over both protocol eras. Runs that end
 * within `http.drainMs` complete; the rest end with a `ShuttingDown` error that their clients
 * still receive; new requests are refused meanwhile; the process exits 0 with no child and no
 * sandbox directory left.
 *
 * @module
 */
import type { Client } from "@modelcontextprotocol/client";
import { join } from "node:path";
import {
  assert,
  assertEquals,
  assertFails,
  assertMatch,
  assertReturns,
  describeResult as describe,
  type RunResult,
} from "./_assert.ts";
import { eventually } from "./_proc.ts";
import { withTempDir } from "./_fs.ts";
import { startHttpServer } from "./_http_server.ts";
import { connect, initializeRequest } from "./_client.ts";

const RUNS = 16;
const DRAIN_MS = 3_000;

/**
 * Calls run_typescript with code that reports progress once it runs, then waits until `gate`
 * exists (the short runs: their end is the test's to choose, after the signal) or 60 s.
 *
 * @returns When the code has started, and the call's outcome.
 */
function startRun(
  client: Client,
  label: string,
  gate?: string,
): { started: Promise<void>; outcome: Promise<RunResult | Error> } {
  let started!: () => void;
  const running = new Promise<void>((resolve) => started = resolve);
  const wait = gate
    ? `while (!(await Deno.stat(${JSON.stringify(gate)}).then(() => true, () => false))) {\n` +
      "  await new Promise((r) => setTimeout(r, 50));\n}"
    : "await new Promise((r) => setTimeout(r, 60_000));";
  const outcome = client.callTool({
    name: "run_typescript",
    arguments: {
      code: `progress(1, 1, "running");\n${wait}\nreturn "${label}";`,
      timeoutMs: 120_000,
      ...(gate ? { permissions: { read: [join(gate, "..")] } } : {}),
    },
  }, { timeout: 120_000, onprogress: () => started() }).then(
    (result) => ({
      ...(result.structuredContent as unknown as RunResult),
      isError: result.isError === true,
    }),
    (error: Error) => error,
  );
  return { started: running, outcome };
}

Deno.test("serve --http drains on SIGTERM: runs that end in time complete, the others end with ShuttingDown, nothing is left", async () => {
  await withTempDir("ce-http-drain-", async (dir) => {
    const gates = await Deno.realPath(dir);
    const gate = join(gates, "open");
    const server = await startHttpServer({
      settings: {
        http: { drainMs: DRAIN_MS },
        limits: { maxConcurrent: RUNS },
        sandbox: { warmPool: 0 },
        allowedProjects: [gates],
      },
    });
    let closed = false;
    const clients: Client[] = [];
    try {
      for (let i = 0; i < 4; i++) {
        clients.push(await connect(server.url, { era: i % 2 === 0 ? "legacy" : "modern" }));
      }
      const runs = Array.from({ length: RUNS }, (_, i) => {
        const short = i % 2 === 0;
        return {
          short,
          ...startRun(clients[i % clients.length], `run ${i}`, short ? gate : undefined),
        };
      });
      // Every run is in its sandbox before the signal.
      await Promise.all(runs.map((run) => run.started));
      Deno.kill(server.pid, "SIGTERM");

      // Once the signal is handled, the long runs hold the drain open for http.drainMs: /healthz
      // says so and new requests are refused.
      let health: unknown;
      const draining = await eventually(async () => {
        const response = await fetch(new URL("/healthz", server.url));
        health = [response.status, await response.json()];
        return response.status === 503;
      }, 30_000);
      assert(draining, `/healthz during the drain: ${JSON.stringify(health)}`);
      assertEquals(health, [503, { status: "draining" }]);
      const refused = await fetch(server.url, {
        method: "POST",
        headers: {
          "Content-Type": "application/json",
          "Accept": "application/json, text/event-stream",
        },
        body: JSON.stringify(initializeRequest("late-client")),
      });
      assertEquals(refused.status, 503);
      assertMatch(await refused.text(), /shutting down/);

      // The short runs may end now, within the drain.
      await Deno.writeTextFile(gate, "");
      const outcomes = await Promise.all(runs.map((run) => run.outcome));
      outcomes.forEach((outcome, i) => {
        assert(!(outcome instanceof Error), `run ${i} got no result: ${outcome}`);
        if (runs[i].short) {
          assertReturns(outcome, `run ${i}`);
        } else {
          assertFails(outcome, "ShuttingDown", /shutting down/i);
          assertMatch(outcome.error!.message, /retry/, describe(outcome));
        }
      });

      closed = true;
      const status = await server.close();
      assertEquals(status.code, 0, server.stderr());
      assertMatch(server.stderr(), /shutting down \(SIGTERM\): draining 16 runs for up to 3000 ms/);
      assertMatch(server.stderr(), /stopping 8 runs still in flight after the drain/);
    } finally {
      await Promise.all(clients.map((client) => client.close()));
      if (!closed) await server.close();
    }
  });
});
