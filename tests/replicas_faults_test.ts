/**
 * A replica dies while it owns live state. Three `serve --http` replicas sharing a real
 * redis-server, behind nginx in plain round robin (deploy/nginx.conf), as in
 * tests/replicas_test.ts. The replica that holds a parked run (`llm.ask` over MRTR), a Python
 * session and a 2025-era session is killed with SIGKILL under a load of runs:
 *
 * - the runs it held fail with the balancer's clear error and nothing else fails; the rest of the
 *   load completes on the others, and its sandboxes and upstream server die with it;
 * - the parked run's retry, which lands on another replica, gets `RequestStateRefused` naming the
 *   dead replica and what was lost (nothing of the run is run again);
 * - the Python session's next call gets `SessionEnded` naming the dead replica, and the call
 *   after it starts the session afresh on a live replica; a session another replica holds goes on;
 * - the 2025-era session gets 404 naming the dead replica, which tells its client to start over.
 *
 * Before it dies, it is stopped (SIGSTOP) for a moment: a call of its Python session through
 * another replica is withdrawn after `http.forwardTimeoutMs` with `ReplicaUnreachableError`, and
 * does not run once it goes on.
 *
 * @module
 */
import { join } from "node:path";
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { eventually, pidsWithEnv, sandboxDirs, sandboxPids } from "./_proc.ts";
import { callRun } from "./_client.ts";
import {
  callRound,
  type Cluster,
  clusterTools,
  job,
  parkedOn,
  type Replica,
  replicaOfPid,
  runJobs,
  samplingRetry,
  servedBy,
  sessionRequest,
  startCluster,
  taggedClient,
} from "./_replicas.ts";

const NGINX = await clusterTools("tests/replicas_faults_test.ts");

const TOKEN = "replicas-test-token-0123456789";
const KILL_RUNS = 60;
const KILL_WORKERS = 9;
const FORWARD_TIMEOUT_MS = 3_000;
const COUNTER =
  "n = globals().get('n', 0) + 1\npid = int(await call_mcp_tool(\"mcp__fixture__pid\", {}))\n[n, pid]";

Deno.test({
  name:
    "a replica killed while it owns a parked run, a Python session and a 2025-era session: each caller is told what was lost, the others keep serving",
  ignore: !NGINX,
  fn: async () => {
    let cluster: Cluster | undefined;
    try {
      cluster = await startCluster(NGINX!, {
        env: {
          CODE_EXECUTOR_HTTP_TOKEN: TOKEN,
          CODE_EXECUTOR_SAMPLING_ENABLED: "true",
          CODE_EXECUTOR_HTTP_FORWARD_TIMEOUT_MS: String(FORWARD_TIMEOUT_MS),
        },
      });
      const { replicas, nginx, clients } = cluster;
      const balancer = nginx.url;
      const log = nginx;
      const modern = async (options: Partial<Parameters<typeof taggedClient>[1]> = {}) => {
        const { client } = await taggedClient(balancer, {
          era: "modern",
          token: TOKEN,
          ...options,
        });
        clients.push(client);
        return client;
      };

      // A parked run: its first round, answered later. Its replica is the victim.
      const asker = await modern({ capabilities: { sampling: {} }, autoFulfill: false });
      const code = [
        "// run doomed-park",
        'globalThis.kept = "mine";',
        'const answer = await llm.ask("still there?");',
        'await callMCPTool("mcp__fixture__Get-Thing.v2", { id: "after the answer" });',
        "return [answer, globalThis.kept];",
      ].join("\n");
      const first = await callRound(asker, code);
      assertEquals(first.resultType, "input_required", JSON.stringify(first));
      const victim = replicas.find((r) => r.id === parkedOn(first.requestState as string))!;
      const survivors = replicas.filter((r) => r !== victim);
      console.log(`the parked run is on ${victim.id}: it is killed`);

      // Python sessions until one is the victim's and one another's.
      const py = await modern();
      let doomedSession: string | undefined;
      let livingSession: { name: string; home: Replica } | undefined;
      for (let i = 0; i < 12 && (!doomedSession || !livingSession); i++) {
        const name = `s-${i}`;
        const result = await callRun(py, "run_python", COUNTER, {
          session: name,
          timeoutMs: 120_000,
        });
        const home = replicaOfPid(replicas, (result.returnValue as number[])[1]);
        assert(home, JSON.stringify(result));
        if (home === victim) doomedSession ??= name;
        else livingSession ??= { name, home };
      }
      assert(doomedSession && livingSession, "no Python session landed on the victim and another");

      // A 2025-era session of the victim's.
      let doomedLegacy: string | undefined;
      for (let i = 0; i < 12 && !doomedLegacy; i++) {
        const { client, transport } = await taggedClient(balancer, { era: "legacy", token: TOKEN });
        clients.push(client);
        if (transport.sessionId?.startsWith(`${victim.id}.`)) doomedLegacy = transport.sessionId;
        // A client's connect is three requests (initialize, initialized, its GET stream): as
        // many as there are replicas, so that round robin would give every initialize to one.
        await (await fetch(new URL("/healthz", balancer))).body?.cancel();
      }
      assert(doomedLegacy, `no 2025-era session landed on ${victim.id}`);

      // The victim stopped (SIGSTOP: its port takes connections, nothing answers): a call of its
      // session through another replica is withdrawn after http.forwardTimeoutMs and said so;
      // once it goes on, the session is there, and the withdrawn call did not run.
      const direct = (await taggedClient(survivors[0].serve.url, { era: "modern", token: TOKEN }))
        .client;
      clients.push(direct);
      Deno.kill(victim.serve.pid, "SIGSTOP");
      const stalled = await callRun(direct, "run_python", COUNTER, {
        session: doomedSession,
        timeoutMs: 120_000,
      }).finally(() => Deno.kill(victim.serve.pid, "SIGCONT"));
      assertEquals(stalled.error?.type, "ReplicaUnreachableError", JSON.stringify(stalled));
      assertMatch(
        stalled.error!.message,
        new RegExp(
          `Replica "${victim.id}", which holds the Python session "${doomedSession}", did not take the forwarded request within ${FORWARD_TIMEOUT_MS} ms \\(http.forwardTimeoutMs\\): it was withdrawn`,
        ),
      );
      const resumed = await callRun(py, "run_python", COUNTER, {
        session: doomedSession,
        timeoutMs: 120_000,
      });
      assertEquals(resumed.returnValue, [2, victim.fixturePid], JSON.stringify(resumed));

      // Load: each run waits 1.5 s in its upstream call, so that a third of them are held by the
      // victim at any moment.
      const pool = [];
      for (let i = 0; i < KILL_WORKERS; i++) pool.push(await modern());
      const jobs = Array.from(
        { length: KILL_RUNS },
        (_, i) => job(`kill-${i}`, i % 2 === 1, 1_500),
      );
      const load = runJobs(pool, jobs);
      await eventually(
        async () =>
          (await log.accessLog()).filter((line) => line.requestId?.startsWith("kill-")).length >=
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
        "the killed replica left sandboxes or processes",
      );
      for (const name of await sandboxDirs(tempDir)) {
        await Deno.remove(join(tempDir, name), { recursive: true });
      }
      const failed = outcomes.filter((o) => !o.result);
      const wrong = outcomes.filter((o) => o.result && typeof servedBy(o, replicas) === "string");
      assertEquals(wrong.map((o) => servedBy(o, replicas)), [], "runs that returned wrong results");
      const lines = new Map((await log.accessLog()).map((line) => [line.requestId, line]));
      for (const outcome of failed) {
        assertMatch(
          outcome.error ?? "",
          /The replica serving this request failed, or none is available: the request did not finish/,
        );
        const line = lines.get(outcome.job.id);
        assert(line, `nginx logged no request ${outcome.job.id}`);
        assertEquals(line.upstreams.at(-1), victim.address, `${outcome.job.id} failed elsewhere`);
        assert(
          outcome.startedAt <= diedAt && outcome.endedAt >= killedAt,
          `${outcome.job.id} failed but did not run while the replica died`,
        );
      }
      assert(failed.length > 0, "the kill hit no run in flight: the step tested nothing");
      const afterKill = outcomes.filter((o) => o.result && o.startedAt > killedAt);
      assert(afterKill.length > 0, "no run started after the kill");
      for (const outcome of afterKill) {
        assert(servedBy(outcome, replicas) !== victim, `${outcome.job.id} ran on the dead replica`);
      }
      console.log(
        `kill: ${failed.length} runs failed on ${victim.id}, ${
          outcomes.length - failed.length
        } completed`,
      );

      // The parked run's retry, with its answer: lost with its replica, said so, nothing run.
      const retried = await callRound(asker, code, samplingRetry(first, "yes"));
      assertEquals(retried.structuredContent?.error?.type, "RequestStateRefused");
      assertMatch(
        retried.structuredContent!.error!.message,
        new RegExp(
          `its run was parked on replica "${victim.id}", which is gone .*lost with it, and nothing of it was run again`,
        ),
      );

      // The Python session: lost, said so, then afresh on a live replica.
      const lost = await callRun(py, "run_python", COUNTER, {
        session: doomedSession,
        timeoutMs: 120_000,
      });
      assertEquals(lost.error?.type, "SessionEnded", JSON.stringify(lost));
      assertMatch(
        lost.error!.message,
        new RegExp(`Python session "${doomedSession}" was lost: replica "${victim.id}".* is gone`),
      );
      const fresh = await callRun(py, "run_python", COUNTER, {
        session: doomedSession,
        timeoutMs: 120_000,
      });
      const [n, pid] = fresh.returnValue as number[];
      assertEquals(n, 1, JSON.stringify(fresh));
      assert(survivors.includes(replicaOfPid(replicas, pid)!), `ran on ${pid}`);
      // A session of a live replica goes on where it is.
      const goesOn = await callRun(py, "run_python", COUNTER, {
        session: livingSession.name,
        timeoutMs: 120_000,
      });
      assertEquals(goesOn.returnValue, [2, livingSession.home.fixturePid], JSON.stringify(goesOn));

      // The 2025-era session: 404 through the balancer, so that its client starts over.
      const gone = await sessionRequest(balancer, doomedLegacy, TOKEN);
      assertEquals(gone.status, 404);
      assertEquals(gone.error?.code, -32001);
      assertMatch(
        gone.error?.message ?? "",
        new RegExp(`opened on replica "${victim.id}", which is gone.*initialize a new session`),
      );
      // New clients and runs are served by the others.
      const after = await modern();
      const check = await runJobs([after], [job("after-0", false), job("after-1", true)]);
      for (const outcome of check) {
        const replica = servedBy(outcome, replicas);
        assert(typeof replica !== "string", replica as string);
        assert(replica !== victim);
      }
    } finally {
      // Checks that no sandbox, upstream server or workspace of a replica is left: the killed
      // one's children died with it (parent-death signal).
      await cluster?.close();
    }
  },
});
