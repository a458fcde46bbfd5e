/**
 * A parked run ends when it should (issue 23, class 4): a 2026-07-28 client's retry that answers
 * none of the questions is refused and re-arms nothing, and a run that keeps asking is ended once
 * it has been parked for `limits.maxParkedMs` in all, counted from its first question.
 *
 * @module
 */
import type { Client } from "@modelcontextprotocol/client";
import { assert, assertEquals, assertMatch } from "./_assert.ts";
import { withTempDir } from "./_fs.ts";
import { startHttpServer, writeTokensFile } from "./_http_server.ts";
import { manualClient, type Round } from "./_client.ts";

function answersTo(round: Round): Record<string, unknown> {
  return Object.fromEntries(
    Object.keys(round.inputRequests ?? {}).map((
      key,
    ) => [key, { action: "accept", content: { answer: "yes" } }]),
  );
}

Deno.test("a 2026-era retry with no answers is refused and re-arms nothing; a run that keeps asking ends after limits.maxParkedMs", async () => {
  await withTempDir("ce-parked-", async (dir) => {
    const { tokensFile, tokens: { alice, bob } } = await writeTokensFile(dir, ["alice", "bob"]);
    const server = await startHttpServer({
      // A cap on questions far above what the loop below reaches: only its time parked ends it.
      settings: {
        http: { tokensFile },
        limits: { maxParkedMs: 1_500 },
        sampling: { maxQuestions: 10_000 },
      },
    });
    const clients: Client[] = [];
    try {
      const asAlice = await manualClient(server.url, { token: alice, name: "parked-runs-test" });
      clients.push(asAlice.client);
      const asBob = await manualClient(server.url, { token: bob, name: "parked-runs-test" });
      clients.push(asBob.client);

      // An empty retry: refused, naming the questions; the run is left parked as it was.
      const ASK = `return await askUser("Go on?");`;
      const first = await asAlice.call(ASK, { timeoutMs: 60_000 });
      assertEquals(first.resultType, "input_required", JSON.stringify(first));
      const empty = await asAlice.call(ASK, { timeoutMs: 60_000 }, {
        inputResponses: {},
        requestState: first.requestState,
      });
      assertEquals(
        empty.structuredContent?.error?.type,
        "RequestStateRefused",
        JSON.stringify(empty),
      );
      assertMatch(
        empty.structuredContent!.error!.message,
        /answers none of the questions asked \(user1\)/,
      );
      // The same state still takes a retry that answers.
      const answered = await asAlice.call(ASK, { timeoutMs: 60_000 }, {
        inputResponses: answersTo(first),
        requestState: first.requestState,
      });
      assertEquals(
        (answered.structuredContent?.returnValue as { action?: string })?.action,
        "accept",
        JSON.stringify(answered),
      );

      // A run that asks round after round, each answered at once, is ended by the total bound
      // (each question's own timeout is the run's 60 s, which no round comes near).
      const LOOP = `let n = 0; for (;;) { await askUser("again " + n++); }`;
      let round = await asBob.call(LOOP, { timeoutMs: 60_000 });
      let rounds = 0;
      while (round.resultType === "input_required" && rounds < 10_000) {
        rounds++;
        round = await asBob.call(LOOP, { timeoutMs: 60_000 }, {
          inputResponses: answersTo(round),
          requestState: round.requestState,
        });
      }
      assert(round.resultType !== "input_required", `still parked after ${rounds} rounds`);
      assert(rounds > 1, `the run ended after ${rounds} rounds: ${JSON.stringify(round)}`);
      assertEquals(round.isError, true, JSON.stringify(round));
      // Ended by the bound: the last retry either finds the run ended or its state expired there.
      assertMatch(
        JSON.stringify(round.structuredContent),
        /parked for limits\.maxParkedMs (\(1500 ms\) )?in all/,
      );
    } finally {
      for (const client of clients) await client.close().catch(() => {});
      await server.close();
    }
  });
});
