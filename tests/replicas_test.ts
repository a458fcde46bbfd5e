/**
 * Three `serve --http` replicas behind nginx from Debian, configured with deploy/nginx.conf (the
 * configuration docs/DEPLOY.md explains), all on loopback, driven by real SDK v2 clients of both
 * protocol eras through the balancer:
 *
 * - 300 mixed 2026-07-28 runs (TypeScript, and a third Python, each with tool calls to its
 *   replica's own upstream server) spread over the three replicas: none lost or wrong, each replica serves some
 *   (seen in the results, in each replica's audit log and request log, and in nginx's log);
 * - 2025-era sessions stay on the replica named in their `Mcp-Session-Id` for 20 calls, keeping
 *   a Python session's variables; on another replica the id gets 404 naming both replicas;
 * - 2026-era Python sessions (`Mcp-Param-Session`, hashed by nginx) keep their variables for 20
 *   calls; the same id on another replica, or from another principal, is a fresh interpreter;
 * - a replica killed with SIGKILL under load fails only the runs it held, with the balancer's
 *   clear error; the rest of the load completes, its sandboxes and upstream server die with it,
 *   and a 2025-era session of the dead replica gets 404 (re-initialize).
 *
 * A wrong replica is also asked directly: replica B gets a session id of replica A and answers
 * 404 naming both, never A's (or its own) state.
 *
 * The test runs only where nginx is installed (`.ci/run` installs it); elsewhere it says loudly
 * that it was skipped.
 *
 * @module
 */
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { join } from "node:path";
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { eventually, pidsWithEnv, sandboxDirs, sandboxPids } from "./_proc.ts";
import { callRun } from "./_client.ts";
import { findNginx, type Nginx, startNginx } from "./_nginx.ts";
import { job, type Replica, runJobs, servedBy, startReplicas } from "./_replicas.ts";

const NGINX = await findNginx();
if (!NGINX) {
  console.error(
    [
      "",
      "!".repeat(78),
      "!! tests/replicas_test.ts SKIPPED: nginx is not installed.",
      "!! Install it (apt-get install -y nginx; .ci/run does) to test replicas behind a balancer.",
      "!".repeat(78),
      "",
    ].join("\n"),
  );
}

const TOKEN = "replicas-test-token-0123456789";
/** A second principal's token (from a tokens file): its sessions are not the first one's. */
const OTHER_TOKEN = "replicas-test-other-principal-9876543210";
const RUNS = 300;
const WORKERS = 12;
const KILL_RUNS = 60;
const KILL_WORKERS = 9;
/** The replica the kill step kills. */
const VICTIM = 1;

/** What the client sent with one run, seen by its fetch. */
interface SentRun {
  requestId: string;
  paramSession: string | null;
}

/**
 * A 2026-07-28 or 2025-era client through the balancer whose fetch tags each run's POST with
 * `X-Request-Id: <the run's id>` (from the code's first line), so that nginx's log says which
 * replica served it, and records the `Mcp-Param-Session` header the SDK sent.
 */
async function taggedClient(
  url: URL,
  era: "modern" | "legacy",
  sent: SentRun[] = [],
  token = TOKEN,
): Promise<{ client: Client; transport: StreamableHTTPClientTransport }> {
  const tagging: typeof fetch = (input, init) => {
    const headers = new Headers(init?.headers);
    if (typeof init?.body === "string") {
      try {
        const message = JSON.parse(init.body);
        const code = message?.params?.arguments?.code;
        const tag = message?.method === "tools/call" && typeof code === "string"
          ? /^(?:\/\/|#) run (\S+)/.exec(code)?.[1]
          : undefined;
        if (tag) {
          headers.set("x-request-id", tag);
          sent.push({ requestId: tag, paramSession: headers.get("mcp-param-session") });
        }
      } catch {
        // Not JSON: nothing to tag.
      }
    }
    return fetch(input, { ...init, headers });
  };
  const transport = new StreamableHTTPClientTransport(url, {
    requestInit: { headers: { authorization: `Bearer ${token}` } },
    fetch: tagging,
  });
  const client = new Client(
    { name: "replicas-test", version: "1.0.0" },
    era === "modern" ? { versionNegotiation: { mode: "auto" } } : {},
  );
  await client.connect(transport);
  assertEquals(client.getProtocolEra(), era);
  // A 2026-07-28 client learns from the tools' schemas which arguments it repeats in headers
  // (run_python's session → Mcp-Param-Session). Without the list its first call goes without the
  // header and is refused (400, before anything runs); the SDK then lists the tools and retries,
  // but three concurrent first calls were not all recovered so (seen here): list first.
  if (era === "modern") await client.listTools();
  return { client, transport };
}

/** POSTs `tools/list` in a 2025-era session straight to a URL (a replica, or the balancer). */
async function sessionRequest(
  url: URL,
  sessionId: string,
): Promise<{ status: number; error?: { code: number; message: string } }> {
  const response = await fetch(url, {
    method: "POST",
    headers: {
      authorization: `Bearer ${TOKEN}`,
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      "mcp-session-id": sessionId,
      "mcp-protocol-version": "2025-11-25",
    },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
  });
  const text = await response.text();
  let error;
  try {
    error = JSON.parse(text).error;
  } catch {
    // An event stream: a result, not an error.
  }
  return { status: response.status, error };
}

function counts(replicas: Replica[], served: Replica[]): Record<string, number> {
  return Object.fromEntries(
    replicas.map((r) => [r.id, served.filter((s) => s === r).length]),
  );
}

async function auditedRuns(replica: Replica): Promise<number> {
  const text = await Deno.readTextFile(join(replica.serve.tempDir, "audit.jsonl")).catch(() => "");
  return text.split("\n").filter((line) => line.includes('"kind":"execution"')).length;
}

Deno.test({
  name:
    "replicas behind nginx: load spreads, sessions stay on their replica, a dead replica fails only its own runs",
  ignore: !NGINX,
  fn: async (t) => {
    const dir = await Deno.makeTempDir({ prefix: "ce-replicas-" });
    let replicas: Replica[] = [];
    let nginx: Nginx | undefined;
    const clients: Client[] = [];
    try {
      const tokensFile = join(dir, "tokens");
      await Deno.writeTextFile(tokensFile, `other ${OTHER_TOKEN}\n`, { mode: 0o600 });
      replicas = await startReplicas(dir, {
        count: 3,
        env: { CODE_EXECUTOR_HTTP_TOKEN: TOKEN, CODE_EXECUTOR_HTTP_TOKENS_FILE: tokensFile },
      });
      for (const replica of replicas) {
        assertMatch(
          replica.serve.stderr(),
          new RegExp(`ready on \\S+ \\(auth: bearer, replica ${replica.id}\\)`),
        );
      }
      nginx = await startNginx(NGINX!, replicas.map((r) => Number(r.serve.url.port)));
      const balancer = nginx.url;
      const log = nginx;

      await t.step(
        `${RUNS} mixed 2026-era runs spread over the three replicas, none lost or wrong`,
        async () => {
          const sent: SentRun[] = [];
          const pool = [];
          for (let i = 0; i < WORKERS; i++) {
            pool.push((await taggedClient(balancer, "modern", sent)).client);
          }
          clients.push(...pool);
          // A third in Python: each such run boots a fresh interpreter (the costly part).
          const jobs = Array.from({ length: RUNS }, (_, i) => job(`load-${i}`, i % 3 === 2));
          const outcomes = await runJobs(pool, jobs);
          assertEquals(outcomes.length, RUNS);
          const served = outcomes.map((outcome) => servedBy(outcome, replicas));
          const problems = served.filter((s): s is string => typeof s === "string");
          assertEquals(problems, [], `${problems.length} runs lost or wrong`);
          const perReplica = counts(replicas, served as Replica[]);
          console.log(`runs per replica: ${JSON.stringify(perReplica)}`);
          for (const replica of replicas) {
            assert(
              perReplica[replica.id] > 0,
              `${replica.id} served no run: ${JSON.stringify(perReplica)}`,
            );
          }
          // Each replica's audit log holds exactly the runs it served (one file per replica).
          const audited = async () =>
            (await Promise.all(replicas.map(auditedRuns))).every((n, i) =>
              n === perReplica[replicas[i].id]
            );
          assert(
            await eventually(audited, 10_000),
            `audit logs ${await Promise.all(replicas.map(auditedRuns))}, served ${
              JSON.stringify(perReplica)
            }`,
          );
          for (const replica of replicas) {
            assertMatch(
              replica.serve.stderr(),
              /http: POST \/mcp 200 \d+ ms principal=http:default/,
            );
          }
          // nginx's log agrees: every run went to the replica whose upstream answered it.
          const byRequest = new Map((await log.accessLog()).map((line) => [line.requestId, line]));
          for (const [i, outcome] of outcomes.entries()) {
            const line = byRequest.get(outcome.job.id);
            assert(line, `nginx logged no request ${outcome.job.id}`);
            assertEquals(line.upstreams.at(-1), (served[i] as Replica).address, outcome.job.id);
          }
          assertEquals(sent.filter((s) => s.paramSession !== null), [], "runs without a session");
        },
      );

      await t.step(
        "2025-era sessions stay on the replica their id names, with their Python state, for 20 calls",
        async () => {
          const sessions = [];
          for (let i = 0; i < 3; i++) {
            const { client, transport } = await taggedClient(balancer, "legacy");
            clients.push(client);
            const sessionId = transport.sessionId ?? "";
            const home = replicas.find((r) => sessionId.startsWith(`${r.id}.`));
            assert(home, `a session id that names no replica: ${sessionId}`);
            assertMatch(sessionId, /^ce-\d\.[0-9a-f-]{36}$/);
            sessions.push({ client, sessionId, home });
          }
          await Promise.all(sessions.map(async ({ client, sessionId, home }, s) => {
            for (let call = 1; call <= 20; call++) {
              const result = await callRun(
                client,
                "run_python",
                [
                  `# run legacy-${s}-${call}`,
                  "n = globals().get('n', 0) + 1",
                  'pid = int(await call_mcp_tool("mcp__fixture__pid", {}))',
                  "[n, pid]",
                ].join("\n"),
                { session: `counter-${s}`, timeoutMs: 120_000 },
              );
              assertEquals(
                result.returnValue,
                [call, home.fixturePid],
                `session ${sessionId}, call ${call}: ${JSON.stringify(result)}`,
              );
            }
          }));
          // The same id at another replica (a balancer that routed it wrongly) is told where it
          // belongs, and learns nothing of this replica's sessions.
          const { sessionId, home } = sessions[0];
          const other = replicas.find((r) => r !== home)!;
          const wrong = await sessionRequest(other.serve.url, sessionId);
          assertEquals(wrong.status, 404);
          assertEquals(wrong.error?.code, -32001);
          assertMatch(
            wrong.error?.message ?? "",
            new RegExp(
              `opened on replica "${home.id}" and this is replica "${other.id}".*initialize a new session`,
            ),
          );
          // Through the balancer: its own replica; a replica that does not exist goes anywhere and
          // is refused there.
          assertEquals((await sessionRequest(balancer, sessionId)).status, 200);
          const unknown = await sessionRequest(balancer, `ce-9.${crypto.randomUUID()}`);
          assertEquals(unknown.status, 404);
          assertMatch(unknown.error?.message ?? "", /opened on replica "ce-9"/);
        },
      );

      await t.step(
        "2026-era Python sessions keep their state for 20 calls; elsewhere or for another principal they are fresh",
        async () => {
          const sent: SentRun[] = [];
          const { client } = await taggedClient(balancer, "modern", sent);
          clients.push(client);
          const names = ["alpha", "beta", "gamma"];
          const homes = new Map<string, Replica>();
          await Promise.all(names.map(async (name) => {
            for (let call = 1; call <= 20; call++) {
              const result = await callRun(
                client,
                "run_python",
                [
                  `# run py-${name}-${call}`,
                  "n = globals().get('n', 0) + 1",
                  'pid = int(await call_mcp_tool("mcp__fixture__pid", {}))',
                  "[n, pid]",
                ].join("\n"),
                { session: name, timeoutMs: 120_000 },
              );
              const [n, pid] = result.returnValue as [number, number];
              assertEquals(n, call, `session ${name}, call ${call}: ${JSON.stringify(result)}`);
              const home = replicas.find((r) => r.fixturePid === pid);
              assert(home, `session ${name} ran on no replica: ${pid}`);
              assert(!homes.has(name) || homes.get(name) === home, `session ${name} moved`);
              homes.set(name, home);
            }
          }));
          // Every call named its session in Mcp-Param-Session, which nginx hashes.
          assertEquals(sent.length, 60);
          for (const run of sent) {
            assertEquals(run.paramSession, /^py-(\w+)-/.exec(run.requestId)?.[1], run.requestId);
          }
          console.log(
            `Python sessions: ${
              names.map((name) => `${name} on ${homes.get(name)!.id}`).join(", ")
            }`,
          );
          // The same id at a replica that does not hold it: a fresh interpreter, not the state.
          const away = replicas.find((r) => r !== homes.get("alpha"))!;
          const direct = (await taggedClient(away.serve.url, "modern")).client;
          clients.push(direct);
          const fresh = await callRun(direct, "run_python", "n = globals().get('n', 0) + 1\nn", {
            session: "alpha",
            timeoutMs: 120_000,
          });
          assertEquals(fresh.returnValue, 1, JSON.stringify(fresh));
          // Another principal with the same id reaches the same replica, and its own interpreter.
          const stranger = (await taggedClient(balancer, "modern", [], OTHER_TOKEN)).client;
          clients.push(stranger);
          const theirs = await callRun(stranger, "run_python", "n = globals().get('n', 0) + 1\nn", {
            session: "alpha",
            timeoutMs: 120_000,
          });
          assertEquals(theirs.returnValue, 1, JSON.stringify(theirs));
          // The owner's session is untouched by both.
          const again = await callRun(client, "run_python", "n = globals().get('n', 0) + 1\nn", {
            session: "alpha",
            timeoutMs: 120_000,
          });
          assertEquals(again.returnValue, 21, JSON.stringify(again));
        },
      );

      await t.step(
        "a replica killed under load fails only its own runs, with a clear error; the rest completes",
        async () => {
          const victim = replicas[VICTIM];
          // A 2025-era session on the victim, to see what its client gets afterwards.
          let doomed: string | undefined;
          for (let i = 0; i < 12 && !doomed; i++) {
            const { client, transport } = await taggedClient(balancer, "legacy");
            clients.push(client);
            if (transport.sessionId?.startsWith(`${victim.id}.`)) doomed = transport.sessionId;
          }
          assert(doomed, `no 2025-era session landed on ${victim.id}`);

          const pool = [];
          for (let i = 0; i < KILL_WORKERS; i++) {
            pool.push((await taggedClient(balancer, "modern")).client);
          }
          clients.push(...pool);
          // Each run waits 1.5 s in its upstream call: at any moment about a third of the
          // workers' runs are held by the victim.
          const jobs = Array.from(
            { length: KILL_RUNS },
            (_, i) => job(`kill-${i}`, i % 2 === 1, 1_500),
          );
          const load = runJobs(pool, jobs);
          // Killed once every worker has had a run answered: the load is in its steady state.
          await eventually(
            async () =>
              (await log.accessLog()).filter((line) => line.requestId?.startsWith("kill-"))
                .length >=
                KILL_WORKERS,
            120_000,
          );
          const killedAt = Date.now();
          victim.serve.kill("SIGKILL");
          // Until the process is gone its listening socket still takes connections: a run that
          // starts in between can reach it and fail like the runs in flight.
          await victim.serve.child.status;
          const diedAt = Date.now();
          const outcomes = await load;
          assertEquals(outcomes.length, KILL_RUNS);
          // Its sandboxes and upstream server died with it (parent-death signal); only their
          // directories are left, which a replica removes as stale when it starts again.
          const tempDir = victim.serve.tempDir;
          assert(
            await eventually(
              async () =>
                (await sandboxPids(tempDir)).length === 0 &&
                (await pidsWithEnv(`TMPDIR=${tempDir}`)).length === 0,
              10_000,
            ),
            `the killed replica left sandboxes ${await sandboxPids(
              tempDir,
            )}, processes ${await pidsWithEnv(
              `TMPDIR=${tempDir}`,
            )}`,
          );
          for (const name of await sandboxDirs(tempDir)) {
            await Deno.remove(join(tempDir, name), { recursive: true });
          }

          const failed = outcomes.filter((o) => !o.result);
          const wrong = outcomes.filter((o) =>
            o.result && typeof servedBy(o, replicas) === "string"
          );
          assertEquals(
            wrong.map((o) => servedBy(o, replicas)),
            [],
            "runs that returned wrong results",
          );
          const lines = new Map((await log.accessLog()).map((line) => [line.requestId, line]));
          for (const outcome of failed) {
            // The balancer's error, naming what happened and that the run may have partly run.
            assertMatch(
              outcome.error ?? "",
              /The replica serving this request failed, or none is available: the request did not finish/,
            );
            const line = lines.get(outcome.job.id);
            assert(line, `nginx logged no request ${outcome.job.id}`);
            assertEquals(
              line.upstreams.at(-1),
              victim.address,
              `${outcome.job.id} failed elsewhere`,
            );
            assertEquals(line.status, 502);
            assert(
              outcome.startedAt <= diedAt && outcome.endedAt >= killedAt,
              `${outcome.job.id} failed but did not run while the replica died (${
                outcome.startedAt - killedAt
              } to ${outcome.endedAt - killedAt} ms from the kill, which took ${
                diedAt - killedAt
              } ms)`,
            );
          }
          assert(failed.length > 0, "the kill hit no run in flight: the step tested nothing");
          const completed = outcomes.filter((o) => o.result);
          const afterKill = completed.filter((o) => o.startedAt > killedAt);
          assert(afterKill.length > 0, "no run started after the kill");
          for (const outcome of afterKill) {
            assert(
              servedBy(outcome, replicas) !== victim,
              `${outcome.job.id} ran on the dead replica`,
            );
          }
          console.log(
            `kill: ${failed.length} runs failed on ${victim.id}, ${completed.length} completed (${afterKill.length} started after the kill)`,
          );

          // The dead replica's 2025-era session: 404 from the balancer, so its client starts over.
          const gone = await sessionRequest(balancer, doomed);
          assertEquals(gone.status, 404);
          assertEquals(gone.error?.code, -32001);
          assertMatch(gone.error?.message ?? "", /the replica that held it is unavailable/);
          // The others still serve their sessions and new clients.
          const after = (await taggedClient(balancer, "modern")).client;
          clients.push(after);
          const check = await runJobs([after], [job("after-0", false), job("after-1", true)]);
          for (const outcome of check) {
            const replica = servedBy(outcome, replicas);
            assert(typeof replica !== "string", replica as string);
            assert(replica !== victim);
          }
        },
      );
    } finally {
      await Promise.all(clients.map((client) => client.close().catch(() => {})));
      await nginx?.stop();
      // close() checks that no sandbox, upstream server or workspace of a replica is left: the
      // killed one's children died with it (parent-death signal).
      const stopped = await Promise.allSettled(
        replicas.filter(Boolean).map((r) => r.serve.close()),
      );
      await Deno.remove(dir, { recursive: true }).catch(() => {});
      const failures = stopped.filter((s) => s.status === "rejected");
      assertEquals(failures.map((f) => String((f as PromiseRejectedResult).reason)), []);
    }
  },
});
