/**
 * Sandbox code that floods a 2025-era session's client with questions (issue 23, item 7):
 * `askUser` in parallel and in a loop, and calls that need approval in parallel. Before, the client
 * got as many forms at once as a run may have requests in flight (32), and a loop against a client
 * that declines at once asked thousands in one run. Now a run's questions reach the client one at
 * a time, and a run asks at most `sampling.maxQuestions`; past it the code gets
 * `SamplingBudgetError` naming the setting, and another principal's run still asks its own.
 *
 * @module
 */
import type { Client } from "@modelcontextprotocol/client";
import { assertEquals, assertMatch, describeResult } from "./_assert.ts";
import { callRun, connect, fixtureServer, startHttpServer, withTempDir } from "./_helpers.ts";
import { writeTokensFile } from "./_http_server.ts";
import { manualClient } from "./_client.ts";

/** A client's user who takes a moment over each form, and what they were shown. */
interface Person {
  /** The messages of the forms, in the order they arrived. */
  asked: string[];
  /** The most forms open at once. */
  mostAtOnce: number;
  /** Registers the elicitation handler. */
  setup(client: Client): void;
}

function person(answer: Record<string, unknown>): Person {
  let open = 0;
  const state: Person = {
    asked: [],
    mostAtOnce: 0,
    setup(client) {
      client.setRequestHandler("elicitation/create", async (request, ctx) => {
        state.asked.push(request.params.message);
        state.mostAtOnce = Math.max(state.mostAtOnce, ++open);
        try {
          // The moment a person takes: questions sent side by side are all open during it.
          await new Promise<void>((resolve) => {
            const timer = setTimeout(resolve, 20);
            ctx.mcpReq.signal.addEventListener("abort", () => {
              clearTimeout(timer);
              resolve();
            }, { once: true });
          });
          return answer as never;
        } finally {
          open--;
        }
      });
    },
  };
  return state;
}

const ELICITATION = { elicitation: { form: {} } };

/** 40 questions side by side, then one after another until askUser refuses. */
const FLOOD = `
const outcomes = {};
await Promise.all(Array.from({ length: 40 }, (_, i) =>
  askUser("side by side " + i).then((a) => a.action, (e) => e.name)
    .then((outcome) => { outcomes[outcome] = (outcomes[outcome] ?? 0) + 1; })));
let more = 0;
try {
  for (;;) { await askUser("one more " + more); more++; }
} catch (e) {
  return { outcomes, more, error: e.name, message: e.message };
}`;

Deno.test("askUser flooded at a 2025-era session: one question at a time, sampling.maxQuestions a run, and another principal still asks", async () => {
  await withTempDir("ce-elicit-flood-", async (dir) => {
    const { tokensFile, tokens: { alice, bob } } = await writeTokensFile(dir, ["alice", "bob"]);
    const server = await startHttpServer({ settings: { http: { tokensFile } } });
    const clients: Client[] = [];
    try {
      const alicesUser = person({ action: "decline" });
      const bobsUser = person({ action: "accept", content: { answer: "here" } });
      clients.push(
        await connect(server.url, {
          token: alice,
          capabilities: ELICITATION,
          setup: alicesUser.setup,
        }),
      );
      clients.push(
        await connect(server.url, { token: bob, capabilities: ELICITATION, setup: bobsUser.setup }),
      );
      const [flooded, other] = await Promise.all([
        callRun(clients[0], "run_typescript", FLOOD, { timeoutMs: 20_000 }),
        callRun(clients[1], "run_typescript", `return await askUser("Still there?");`),
      ]);
      const value = flooded.returnValue as {
        outcomes: Record<string, number>;
        more: number;
        error: string;
        message: string;
      };
      assertEquals(
        { outcomes: value?.outcomes, more: value?.more, error: value?.error },
        {
          outcomes: { decline: 20, SamplingBudgetError: 20 },
          more: 0,
          error: "SamplingBudgetError",
        },
        describeResult(flooded),
      );
      assertMatch(value.message, /already asked 20 questions, its cap \(sampling\.maxQuestions\)/);
      assertEquals(alicesUser.asked.length, 20);
      assertEquals(
        alicesUser.mostAtOnce,
        1,
        "questions of one run reached the client side by side",
      );
      assertEquals(other.returnValue, { action: "accept", content: "here" }, describeResult(other));
      assertEquals(bobsUser.asked, ["Still there?"]);
    } finally {
      for (const client of clients) await client.close().catch(() => {});
      await server.close();
    }
  });
});

Deno.test("calls that need approval, made side by side at a 2025-era session, are asked one at a time", async () => {
  const server = await startHttpServer({
    settings: { approvals: { require: ["mcp__fixture__pid"] } },
    upstream: { fixture: fixtureServer({}) },
  });
  const user = person({ action: "accept", content: { decision: "deny" } });
  let client: Client | undefined;
  try {
    client = await connect(server.url, { capabilities: ELICITATION, setup: user.setup });
    const result = await callRun(
      client,
      "run_typescript",
      `return await Promise.all(Array.from({ length: 8 }, () =>
        callMCPTool("mcp__fixture__pid", {}).then(() => "called", (e) => e.name)));`,
    );
    assertEquals(result.returnValue, Array(8).fill("ApprovalDenied"), describeResult(result));
    assertEquals(user.asked.length, 8);
    assertEquals(user.mostAtOnce, 1, "approvals of one run reached the client side by side");
  } finally {
    await client?.close().catch(() => {});
    await server.close();
  }
});

Deno.test("askUser at a 2026-era client: sampling.maxQuestions holds across input_required rounds", async () => {
  const server = await startHttpServer();
  let client: Client | undefined;
  try {
    const manual = await manualClient(server.url, {
      name: "elicitation-flood",
      capabilities: ELICITATION,
    });
    client = manual.client;
    const LOOP = `let n = 0;
try { for (;;) { await askUser("again " + n); n++; } }
catch (e) { return { n, error: e.name, message: e.message }; }`;
    const call = (retry: Record<string, unknown> = {}) =>
      manual.call(LOOP, { timeoutMs: 60_000 }, retry);
    let round = await call();
    let rounds = 0;
    // Each round is declined at once; a run that could ask without end would outlast this loop.
    while (round.resultType === "input_required" && rounds < 100) {
      rounds++;
      const inputResponses = Object.fromEntries(
        Object.keys(round.inputRequests ?? {}).map((key) => [key, { action: "decline" }]),
      );
      round = await call({ inputResponses, requestState: round.requestState });
    }
    const value = round.structuredContent?.returnValue as { n: number; error: string } | undefined;
    assertEquals({ rounds, n: value?.n, error: value?.error }, {
      rounds: 20,
      n: 20,
      error: "SamplingBudgetError",
    }, JSON.stringify(round));
  } finally {
    await client?.close().catch(() => {});
    await server.close();
  }
});
