/**
 * PostgreSQL restarted under load (issue 42): a server on a PostgreSQL database of its own
 * cluster, turns streaming when the database stops. Every turn ends (none hangs): the ones that
 * could not commit with the reason in Cursor's error card; once the database is back, the same
 * process (no restart) serves new turns and the conversations continue. Skipped when the run has
 * no PostgreSQL (never in CI).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { inject } from "vitest"
import * as AppHarness from "../support/AppHarness.js"
import * as FakeProvider from "../support/FakeProvider.js"
import { freshDatabase, pgCtl, startCluster } from "../support/Postgres.js"
import { assertCleanOk, clientFor, endCode } from "../support/Transcripts.js"

const postgresUrl = inject("postgresUrl")

describe.skipIf(postgresUrl === undefined)("PostgreSQL restarted under load", () => {
  it.scopedLive("turns in flight end readably, and the same server serves the next ones once the database is back", () =>
    Effect.gen(function*() {
      const cluster = yield* Effect.acquireRelease(Effect.promise(() => startCluster()), (c) => Effect.promise(() => c.stop()))
      const database = yield* Effect.promise(() => freshDatabase(cluster.url, "restart"))
      const app = yield* AppHarness.make({ database })
      const client = yield* clientFor(app, { turnTimeoutMs: 30_000 })
      const { text, pacedText } = FakeProvider.openAiChat
      app.provider.enqueue(FakeProvider.sse(text("before")))
      assertCleanOk(yield* Effect.promise(() => client.run({ conversationId: "conv-0", text: "hello" })))

      // Four turns stream slowly; the database stops while they do.
      for (let i = 0; i < 4; i++) app.provider.enqueue(FakeProvider.sse(pacedText(["a", "b", "c", "d", "e", "f"], 150)))
      const inFlight = [1, 2, 3, 4].map((i) => client.run({ conversationId: `conv-${i}`, text: "stream for a while" }))
      yield* Effect.sleep("300 millis")
      yield* Effect.promise(() => pgCtl(cluster, "stop", "fast"))
      const ended = yield* Effect.promise(() => Promise.all(inFlight))
      for (const transcript of ended) {
        // Each ended: either it had committed before the stop, or it says the database is not answering.
        assert.isDefined(transcript.end, "a turn did not end")
        if (transcript.end?._tag === "Error") assert.include(transcript.end.message, "not answering", JSON.stringify(transcript.end))
      }
      assert.isTrue(ended.some((t) => endCode(t) !== "Ok"), "the stop reached no turn: it came too late to test anything")

      // Back: the same process serves new turns and continues the old conversation.
      yield* Effect.promise(() => pgCtl(cluster, "start"))
      app.provider.enqueue(FakeProvider.sse(text("after")))
      assertCleanOk(yield* Effect.promise(() => client.run({ conversationId: "conv-5", text: "are you back?" })))
      app.provider.enqueue(FakeProvider.sse(text("still here")))
      assertCleanOk(yield* Effect.promise(() => client.run({ conversationId: "conv-0", text: "and this one?" })))
      const history = yield* AppHarness.messagesOf(app, "conv-0")
      assert.deepStrictEqual(history.map((m) => m.role), ["user", "assistant", "user", "assistant"])
    }), { timeout: 120_000 })
})
