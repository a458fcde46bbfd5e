/**
 * Three `serve --http` replicas, each with its own HOME and TMPDIR (no shared disk), sharing a
 * real redis-server on loopback (`state.url`, one `state.key`), behind nginx from Debian in plain
 * round robin (deploy/nginx.conf, as docs/DEPLOY.md explains it), driven by real SDK v2 clients of
 * both protocol eras and two principals. Every request may land on any replica; live state stays
 * on its replica and the others forward to it:
 *
 * - mixed 2026-07-28 runs (TypeScript, and a third Python, each with tool calls to its replica's
 *   own upstream server) spread over the replicas: none lost or wrong, each replica serves some,
 *   none is forwarded (they need no live state);
 * - a parked run (`llm.ask` over MRTR) whose retry lands on another replica completes there in
 *   its own child, with its variables; another principal's retry with its `requestState` is
 *   refused, wherever it lands;
 * - 2026-07-28 Python sessions keep their variables across calls landing on different replicas;
 *   the same id of another principal is another interpreter;
 * - 2025-era sessions whose requests (tool calls, the client's answers to sampling, the GET
 *   stream) land on different replicas work as on one server; another principal's request with
 *   the id gets 404, and a forward header forged by a caller is refused (403).
 *
 * Which replica got each request comes from nginx's log (the clients tag their runs'
 * `X-Request-Id`); which one ran the code, from the pid of the replica's upstream fixture.
 * tests/replicas_faults_test.ts kills a replica. Both run where nginx and redis-server are
 * installed (`.ci/run` installs them); elsewhere they say loudly that they were skipped.
 *
 * @module
 */
import type { Client } from "@modelcontextprotocol/client";
import { join } from "node:path";
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { eventually } from "./_proc.ts";
import { callRun } from "./_client.ts";
import type { AccessLine, Nginx } from "./_nginx.ts";
import {
  callRound,
  type Cluster,
  clusterTools,
  job,
  landedOn,
  parkedOn,
  type Replica,
  replicaOfPid,
  runJobs,
  samplingRetry,
  type SentRun,
  servedBy,
  sessionHeaders,
  sessionRequest,
  startCluster,
  taggedClient,
} from "./_replicas.ts";

const NGINX = await clusterTools("tests/replicas_test.ts");

const TOKEN = "replicas-test-token-0123456789";
/** A second principal's token (from a tokens file). */
const OTHER_TOKEN = "replicas-test-other-principal-9876543210";
const RUNS = 90;
const WORKERS = 12;
const PARKED = 6;
const SESSION_CALLS = 8;

/**
 * Runs Python in a session that counts its runs there and returns `[count, pid of the replica's
 * upstream fixture]`; `tag` names the run in the balancer's log.
 */
function runSessionCounter(client: Client, tag: string, session: string) {
  return callRun(
    client,
    "run_python",
    [
      `# run ${tag}`,
      "n = globals().get('n', 0) + 1",
      'pid = int(await call_mcp_tool("mcp__fixture__pid", {}))',
      "[n, pid]",
    ].join("\n"),
    { session, timeoutMs: 120_000 },
  );
}

function counts(replicas: Replica[], served: Replica[]): Record<string, number> {
  return Object.fromEntries(replicas.map((r) => [r.id, served.filter((s) => s === r).length]));
}

async function auditedRuns(replica: Replica): Promise<number> {
  const text = await Deno.readTextFile(join(replica.serve.tempDir, "audit.jsonl")).catch(() => "");
  return text.split("\n").filter((line) => line.includes('"kind":"execution"')).length;
}

/** Lines of a replica's request log that forwarded a request (`to=`) or served one (`from=`). */
function hops(replica: Replica, direction: "to" | "from"): string[] {
  return replica.serve.stderr().split("\n").filter((line) =>
    line.includes("http: ") && line.includes(` ${direction}=`)
  );
}

/**
 * nginx's log once it has a line for each of these runs: it logs a request when its answer has
 * ended, a moment after the client read the last event of a relayed stream.
 */
async function logged(nginx: Nginx, ids: string[]): Promise<AccessLine[]> {
  let lines: AccessLine[] = [];
  await eventually(async () => {
    lines = await nginx.accessLog();
    return ids.every((id) => lines.some((line) => line.requestId === id));
  }, 10_000);
  return lines;
}

/** A client's answer to `sampling/createMessage`: the prompt, answered. */
function answering(asked: string[]) {
  return (client: Client) => {
    client.setRequestHandler("sampling/createMessage", (request) => {
      const text = (request.params.messages[0].content as { text: string }).text;
      asked.push(text);
      return Promise.resolve({
        role: "assistant",
        model: "client-model",
        content: { type: "text", text: `answer to ${text}` },
      }) as never;
    });
  };
}

Deno.test({
  name:
    "replicas on one store behind round robin: runs spread, parked runs, Python sessions and 2025-era sessions reach their replica",
  ignore: !NGINX,
  fn: async (t) => {
    let cluster: Cluster | undefined;
    try {
      cluster = await startCluster(NGINX!, {
        env: { CODE_EXECUTOR_HTTP_TOKEN: TOKEN, CODE_EXECUTOR_SAMPLING_ENABLED: "true" },
        tokens: `other ${OTHER_TOKEN}\n`,
      });
      const { replicas, nginx, clients } = cluster;
      for (const replica of replicas) {
        assertMatch(
          replica.serve.stderr(),
          new RegExp(`ready on \\S+ \\(auth: bearer, replica ${replica.id}\\)`),
        );
      }
      const balancer = nginx.url;
      const log = nginx;

      await t.step(
        `${RUNS} mixed 2026-era runs spread over the replicas, none lost, wrong or forwarded`,
        async () => {
          const pool = [];
          for (let i = 0; i < WORKERS; i++) {
            pool.push((await taggedClient(balancer, { era: "modern", token: TOKEN })).client);
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
            assert(perReplica[replica.id] > 0, `${replica.id} served no run`);
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
          // nginx's log agrees: every run went to the replica whose upstream answered it, and
          // no replica forwarded any: a run that needs no live state is served where it lands.
          const lines = await logged(log, jobs.map((j) => j.id));
          for (const [i, outcome] of outcomes.entries()) {
            assertEquals(
              landedOn(lines, outcome.job.id, replicas),
              [(served[i] as Replica).id],
              outcome.job.id,
            );
          }
          for (const replica of replicas) assertEquals(hops(replica, "to"), [], replica.id);
        },
      );

      await t.step(
        "a parked run's retry that lands on another replica completes in the same child, with its variables",
        async () => {
          const asked: string[] = [];
          const { client } = await taggedClient(balancer, {
            era: "modern",
            token: TOKEN,
            capabilities: { sampling: {} },
            setup: answering(asked),
          });
          clients.push(client);
          const crossed: string[] = [];
          for (let i = 0; i < PARKED; i++) {
            const id = `park-${i}`;
            const result = await callRun(
              client,
              "run_typescript",
              [
                `// run ${id}`,
                'const before = Number(await callMCPTool("mcp__fixture__pid", {}));',
                `globalThis.kept = "${id}"; const pid = Deno.pid;`,
                `const answer = await llm.ask("colour ${i}?");`,
                'const after = Number(await callMCPTool("mcp__fixture__pid", {}));',
                "return { answer, before, after, samePid: Deno.pid === pid, kept: globalThis.kept };",
              ].join("\n"),
            );
            const value = result.returnValue as Record<string, unknown>;
            assertEquals(
              { answer: value?.answer, samePid: value?.samePid, kept: value?.kept },
              { answer: `answer to colour ${i}?`, samePid: true, kept: id },
              JSON.stringify(result),
            );
            // nginx logs a request when its answer has ended, which is a moment after the client
            // has read the last event of a relayed stream.
            let landed: string[] = [];
            await eventually(async () => {
              landed = landedOn(await log.accessLog(), id, replicas);
              return landed.length === 2;
            }, 10_000);
            assertEquals(landed.length, 2, `the run and its retry: ${landed}`);
            // The run stayed on the replica that got its first request, wherever the retry went.
            assertEquals(
              replicaOfPid(replicas, value.before)?.id,
              landed[0],
              JSON.stringify(value),
            );
            assertEquals(value.after, value.before);
            if (landed[1] !== landed[0]) crossed.push(`${id}: ${landed.join(" → ")}`);
          }
          assertEquals(asked.length, PARKED);
          console.log(`retries on another replica: ${crossed.length} of ${PARKED}`);
          assert(crossed.length > 0, "round robin sent no retry to another replica");
          const forwarded = replicas.flatMap((r) => hops(r, "to")).length;
          assertEquals(forwarded, crossed.length, "one forward per retry that landed elsewhere");

          // Another principal's retry with the run's requestState, at a replica that is not the
          // run's (so that it is forwarded), is refused; the run's own principal then resumes it.
          const manual = async (token: string) => {
            const { client } = await taggedClient(balancer, {
              era: "modern",
              token,
              capabilities: { sampling: {} },
              autoFulfill: false,
            });
            clients.push(client);
            return client;
          };
          const alice = await manual(TOKEN);
          const code =
            `// run stolen\nglobalThis.n = 41; await llm.ask("q"); return globalThis.n + 1;`;
          const first = await callRound(alice, code);
          assertEquals(first.resultType, "input_required", JSON.stringify(first));
          const owner = replicas.find((r) => r.id === parkedOn(first.requestState as string))!;
          const away = replicas.find((r) => r !== owner)!;
          const answers = samplingRetry(first, "a");
          const bob = (await taggedClient(away.serve.url, { era: "modern", token: OTHER_TOKEN }))
            .client;
          clients.push(bob);
          const stolen = await callRound(bob, code, answers);
          assertEquals(stolen.structuredContent?.error?.type, "RequestStateRefused");
          assertMatch(stolen.structuredContent!.error!.message, /another principal/);
          const direct = (await taggedClient(away.serve.url, { era: "modern", token: TOKEN }))
            .client;
          clients.push(direct);
          const resumed = await callRound(direct, code, answers);
          assertEquals(resumed.structuredContent?.returnValue, 42, JSON.stringify(resumed));
          assertMatch(hops(away, "to").join("\n"), new RegExp(`to=${owner.id}`));
        },
      );

      await t.step(
        "2026-era Python sessions keep their variables across replicas; another principal's id is its own",
        async () => {
          const sent: SentRun[] = [];
          const { client } = await taggedClient(balancer, { era: "modern", token: TOKEN, sent });
          clients.push(client);
          const names = ["alpha", "beta", "gamma"];
          const homes = new Map<string, Replica>();
          await Promise.all(names.map(async (name) => {
            for (let call = 1; call <= SESSION_CALLS; call++) {
              const result = await runSessionCounter(client, `py-${name}-${call}`, name);
              const [n, pid] = result.returnValue as [number, number];
              assertEquals(n, call, `session ${name}, call ${call}: ${JSON.stringify(result)}`);
              const home = replicaOfPid(replicas, pid);
              assert(home, `session ${name} ran on no replica: ${pid}`);
              assert(!homes.has(name) || homes.get(name) === home, `session ${name} moved`);
              homes.set(name, home);
            }
          }));
          const lines = await logged(
            log,
            names.flatMap((name) =>
              Array.from({ length: SESSION_CALLS }, (_, i) => `py-${name}-${i + 1}`)
            ),
          );
          for (const name of names) {
            const landed = new Set(
              Array.from(
                { length: SESSION_CALLS },
                (_, i) => landedOn(lines, `py-${name}-${i + 1}`, replicas)[0],
              ),
            );
            assert(landed.size > 1, `session ${name}'s calls all landed on ${[...landed]}`);
          }
          console.log(
            `Python sessions: ${names.map((n) => `${n} on ${homes.get(n)!.id}`).join(", ")}`,
          );
          // Another principal with the same id: its own interpreter, wherever it lands.
          const stranger = (await taggedClient(balancer, { era: "modern", token: OTHER_TOKEN }))
            .client;
          clients.push(stranger);
          for (let i = 0; i < 3; i++) {
            const theirs = await callRun(
              stranger,
              "run_python",
              "n = globals().get('n', 0) + 1\nn",
              {
                session: "alpha",
                timeoutMs: 120_000,
              },
            );
            assertEquals(theirs.returnValue, i + 1, JSON.stringify(theirs));
          }
          const again = await callRun(client, "run_python", "n = globals().get('n', 0) + 1\nn", {
            session: "alpha",
            timeoutMs: 120_000,
          });
          assertEquals(again.returnValue, SESSION_CALLS + 1, JSON.stringify(again));
        },
      );

      await t.step(
        "2025-era sessions whose requests land on different replicas work as on one server",
        async () => {
          const asked: string[] = [];
          const sessions = [];
          for (let i = 0; i < 3; i++) {
            const { client, transport } = await taggedClient(balancer, {
              era: "legacy",
              token: TOKEN,
              capabilities: { sampling: {} },
              setup: answering(asked),
            });
            clients.push(client);
            const sessionId = transport.sessionId ?? "";
            const home = replicas.find((r) => sessionId.startsWith(`${r.id}.`));
            assert(home, `a session id that names no replica: ${sessionId}`);
            sessions.push({ client, sessionId, home });
          }
          await Promise.all(sessions.map(async ({ client, sessionId, home }, s) => {
            for (let call = 1; call <= SESSION_CALLS; call++) {
              const result = await runSessionCounter(client, `legacy-${s}-${call}`, `counter-${s}`);
              assertEquals(
                result.returnValue,
                [call, home.fixturePid],
                `session ${sessionId}, call ${call}: ${JSON.stringify(result)}`,
              );
            }
            // A question to the client's model: the request goes on the tool call's stream, and
            // the client's answer is a POST of its own, which lands anywhere.
            const llm = await callRun(
              client,
              "run_typescript",
              `// run legacy-llm-${s}\nreturn [await llm.ask("legacy ${s}?"), Number(await callMCPTool("mcp__fixture__pid", {}))];`,
            );
            assertEquals(llm.returnValue, [`answer to legacy ${s}?`, home.fixturePid]);
          }));
          assertEquals(asked.length, 3);
          const lines = await logged(
            log,
            sessions.flatMap((_, s) =>
              Array.from({ length: SESSION_CALLS }, (_, i) => `legacy-${s}-${i + 1}`)
            ),
          );
          for (const [s, { sessionId }] of sessions.entries()) {
            const landed = new Set(
              Array.from(
                { length: SESSION_CALLS },
                (_, i) => landedOn(lines, `legacy-${s}-${i + 1}`, replicas)[0],
              ),
            );
            assert(landed.size > 1, `session ${sessionId}'s calls all landed on ${[...landed]}`);
          }
          for (const { home } of sessions) assert(hops(home, "from").length > 0, home.id);

          const { sessionId, home } = sessions[0];
          const other = replicas.find((r) => r !== home)!;
          // Straight at another replica: forwarded, and served.
          assertEquals((await sessionRequest(other.serve.url, sessionId, TOKEN)).status, 200);
          // Another principal's request with the id: 404, as for an id that never existed.
          const theirs = await sessionRequest(balancer, sessionId, OTHER_TOKEN);
          assertEquals(theirs.status, 404);
          assertEquals(theirs.error?.code, -32001);
          // An id whose replica does not exist: 404, telling the client to start over.
          const unknown = await sessionRequest(balancer, `ce-9.${crypto.randomUUID()}`, TOKEN);
          assertEquals(unknown.status, 404);
          assertMatch(
            unknown.error?.message ?? "",
            /opened on replica "ce-9", which is gone.*initialize a new session/,
          );
          // A caller cannot pass itself off as a replica: a forged forward header, without a
          // token, naming the principal as its own, is refused and nothing is served.
          const forged = await fetch(other.serve.url, {
            method: "POST",
            headers: {
              ...sessionHeaders(sessionId),
              "x-code-executor-forward": `v1.${Date.now()}.bm9uY2U.${btoa("http:default")}.${
                btoa(home.id)
              }.AAAA`,
            },
            body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
          });
          assertEquals(forged.status, 403);
          assertMatch(await forged.text(), /Forwarded request refused: its MAC does not match/);
        },
      );
    } finally {
      await cluster?.close();
    }
  },
});
