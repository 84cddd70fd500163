/**
 * A new run request on a conversation whose turn is still streaming (issue 39, finding 2), end
 * to end: real server, fake provider, reference client. The client stops reading a slow turn
 * and sends its next message as a new request (new RunSSE + BidiAppend run request, same
 * conversation id). The new turn supersedes the running one: the old model call's HTTP stream
 * is aborted before the new one opens (never two at once on the provider), the text the old
 * call had streamed is kept in the history as its (partial) answer, and the old turn's stream
 * ends with a clear `canceled` end.
 *
 * No test asserts a duration; every wait is bounded (client turn timeouts, `waitFor` timeouts).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as AppHarness from "../support/AppHarness.js"
import * as FakeProvider from "../support/FakeProvider.js"
import { assertCleanOk, clientFor, endCode } from "../support/Transcripts.js"

const { chunk } = FakeProvider.openAiChat

interface ChatMessage {
  readonly role: string
  readonly content: unknown
}

const messagesOfRequest = (app: AppHarness.AppHarness, index: number): ReadonlyArray<ChatMessage> =>
  (JSON.parse(app.provider.requests[index]!.body) as { messages: ReadonlyArray<ChatMessage> }).messages

/** The text of a Chat message's content (a string, or text parts). */
const textOf = (message: ChatMessage | undefined): string => {
  const content = message?.content
  if (typeof content === "string") return content
  if (Array.isArray(content)) return content.map((part: { text?: string }) => part.text ?? "").join("")
  return ""
}

/** Pairs of provider requests that were open at the same moment, in the provider's own order of events. */
const overlaps = (lives: ReadonlyArray<FakeProvider.StreamLife>): ReadonlyArray<string> => {
  const out: Array<string> = []
  for (let i = 0; i < lives.length; i++) {
    for (let j = i + 1; j < lives.length; j++) {
      const a = lives[i]!
      const b = lives[j]!
      const aOpenWhenBOpened = a.closedAt === undefined || a.closedAt > b.openedAt
      if (aOpenWhenBOpened) out.push(`requests #${a.index} and #${b.index} were open at once`)
    }
  }
  return out
}

describe("a new run request on a conversation whose turn still streams", () => {
  it.scopedLive("supersedes it: the old provider stream is aborted before the new call opens, its partial answer is kept, its stream ends canceled", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make()
      // A slow provider: a few paced deltas, then nothing more (it never ends unless the server aborts it).
      app.provider.enqueue(
        FakeProvider.sse([
          chunk({ role: "assistant", content: "" }),
          { delayMs: 20 },
          chunk({ content: "Partial " }),
          { delayMs: 20 },
          chunk({ content: "answer" })
        ], { end: "stall" }),
        FakeProvider.sse(FakeProvider.openAiChat.text("Second answer"))
      )
      const client = yield* clientFor(app, { turnTimeoutMs: 15_000 })
      const first = client.turn({ conversationId: "conv-supersede", text: "first question" })
      // The client saw the partial answer, then stops reading the slow turn (the stream stays open).
      yield* Effect.promise(() =>
        first.waitFor(() => first.frames.filter((f) => f.event.kind === "text_delta").map((f) => (f.event as { text: string }).text).join("") === "Partial answer")
      )
      first.pauseReading()
      // The next message, as a new request on the same conversation.
      const second = yield* Effect.promise(() => client.run({ conversationId: "conv-supersede", text: "second question" }))
      assertCleanOk(second)
      assert.include(second.text, "Second answer")
      first.resumeReading()
      const firstTranscript = yield* Effect.promise(() => first.done)

      // Never two provider streams for the conversation at once.
      assert.strictEqual(app.provider.requests.length, 2)
      assert.deepStrictEqual(overlaps(app.provider.lives), [])
      assert.strictEqual(app.provider.peakOpen(), 1)
      // The second call's history: the first question, the first turn's partial answer, the second question.
      const sent = messagesOfRequest(app, 1).filter((m) => m.role !== "system")
      assert.deepStrictEqual(sent.map((m) => m.role), ["user", "assistant", "user"])
      assert.include(textOf(sent[0]), "first question")
      assert.strictEqual(textOf(sent[1]), "Partial answer")
      assert.include(textOf(sent[2]), "second question")
      // Committed the same way (append-only), the second answer last.
      const history = yield* AppHarness.messagesOf(app, "conv-supersede")
      assert.deepStrictEqual(history.map((m) => m.role), ["user", "assistant", "user", "assistant"])
      // The old turn's stream ended, canceled, saying why.
      assert.deepStrictEqual(firstTranscript.problems, [])
      assert.strictEqual(endCode(firstTranscript), "canceled")
      const end = firstTranscript.end
      assert.match(end?._tag === "Error" ? end.message : "", /new (turn|message)/i)
      assert.strictEqual(firstTranscript.text, "Partial answer")
    }))
})
