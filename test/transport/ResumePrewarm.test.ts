/**
 * `resume_action` and `prewarm_request`, on both wires where they apply: a resume re-attaches to
 * the turn in flight or sends the end of a turn that is over, and never runs anything again; a
 * prewarm takes the request without a turn, and the user message that follows runs normally.
 */
import { Code, ConnectError } from "@connectrpc/connect"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import type { AgentServerMessage } from "../../src/gen/agent/v1/agent_pb.js"
import type { Message } from "../../src/Llm.js"
import { cancelAction, CursorClient, frameEvent, runRequestMessage, userMessageAction } from "../support/CursorClient.js"
import type { AgentClientMessageInit } from "../support/CursorClient.js"
import { text, usage } from "../support/FakeRuntime.js"
import { openRawRun } from "../support/RunWire.js"
import * as ServerHarness from "../support/ServerHarness.js"
import { assertCleanOk } from "../support/Transcripts.js"

/** The client's side of a raw Run call: messages pushed in order, the request side open until `end`. */
const outbox = () => {
  const queue: Array<AgentClientMessageInit> = []
  let wake: (() => void) | undefined
  let ended = false
  const messages = (async function*() {
    for (;;) {
      while (queue.length > 0) yield queue.shift()!
      if (ended) return
      await new Promise<void>((resolve) => (wake = resolve))
    }
  })()
  return {
    messages,
    push: (message: AgentClientMessageInit) => {
      queue.push(message)
      wake?.()
    },
    end: () => {
      ended = true
      wake?.()
    }
  }
}

interface RawRunResult {
  readonly kinds: ReadonlyArray<string>
  readonly text: string
  readonly error: ConnectError | undefined
}

/** Reads a raw Run call to its end; the request side ends with the response. */
const readRun = (
  runUrl: string,
  requestId: string,
  first: ReadonlyArray<AgentClientMessageInit>,
  react: (message: AgentServerMessage, push: (message: AgentClientMessageInit) => void) => void = () => undefined
) =>
  Effect.promise(async (): Promise<RawRunResult> => {
    const out = outbox()
    first.forEach(out.push)
    const seen: Array<AgentServerMessage> = []
    let error: ConnectError | undefined
    try {
      for await (const message of openRawRun(runUrl, requestId, out.messages)) {
        seen.push(message)
        react(message, out.push)
      }
    } catch (cause) {
      error = ConnectError.from(cause)
    } finally {
      out.end()
    }
    const events = seen.map(frameEvent).filter((e) => e.kind !== "heartbeat")
    return {
      kinds: events.map((e) => e.kind).filter((kind, i, all) => i === 0 || all[i - 1] !== kind),
      text: events.flatMap((e) => (e.kind === "text_delta" ? [e.text] : [])).join(""),
      error
    }
  })

const resumeOf = (conversationId: string): AgentClientMessageInit =>
  runRequestMessage({ conversationId, text: "", resume: true })

const messagesOf = (server: ServerHarness.Harness, conversationId: string) =>
  server.store.load(conversationId).pipe(
    Effect.orDie,
    Effect.map((loaded) => Option.match(loaded, { onNone: (): ReadonlyArray<Message> => [], onSome: ({ state }) => state.messages }))
  )

describe("resume_action from a new request", () => {
  it.scopedLive("the turn is over: its end (turn_ended, end-stream {}) is sent again from the committed state; the model is not called again", () =>
    Effect.gen(function*() {
      const server = yield* ServerHarness.make({ scripts: [text("done once", usage(5, 2))], transport: { blobAckTimeoutMs: 300 } })
      const client = new CursorClient({ baseUrl: server.baseUrl })
      const first = yield* Effect.promise(() => client.run({ conversationId: "conv-resume-ended", text: "hi" }))
      client.close()
      assertCleanOk(first)
      const resumed = yield* readRun(server.h2cUrl, "req-resume-ended", [resumeOf("conv-resume-ended")])
      assert.isUndefined(resumed.error)
      assert.deepStrictEqual(resumed.kinds.filter((k) => k === "turn_ended"), ["turn_ended"])
      assert.strictEqual((yield* server.llmCalls).length, 1)
      assert.deepStrictEqual((yield* messagesOf(server, "conv-resume-ended")).map((m) => m.role), ["user", "assistant"])
    }))

  it.scopedLive("a conversation with no turn: the request ends failed_precondition, so the client sends its message again; nothing is created", () =>
    Effect.gen(function*() {
      const server = yield* ServerHarness.make()
      const resumed = yield* readRun(server.h2cUrl, "req-resume-nothing", [resumeOf("conv-nothing")])
      assert.strictEqual(resumed.error?.rawMessage.includes("no turn to resume"), true)
      assert.deepStrictEqual(yield* messagesOf(server, "conv-nothing"), [])
      assert.strictEqual((yield* server.llmCalls).length, 0)
    }))

  it.scopedLive("the turn is in flight on RunSSE: a resume on Run mirrors it (its backlog, then live), and a cancel sent on the resuming request cancels that turn; one model call", () =>
    Effect.gen(function*() {
      const server = yield* ServerHarness.make({
        scripts: [{ _tag: "Stall", events: [{ _tag: "Start" }, { _tag: "TextStart", index: 0 }, { _tag: "TextDelta", index: 0, delta: "thinking it over" }] }],
        transport: { blobAckTimeoutMs: 300 }
      })
      const client = new CursorClient({ baseUrl: server.baseUrl })
      const turn = client.turn({ conversationId: "conv-resume-live", text: "go" })
      yield* Effect.promise(() => turn.waitFor((f) => f.event.kind === "text_delta"))
      turn.disconnect()
      let canceled = false
      const resumed = yield* readRun(server.h2cUrl, "req-resume-live", [resumeOf("conv-resume-live")], (message, push) => {
        if (!canceled && frameEvent(message).kind === "text_delta") {
          canceled = true
          push(cancelAction())
        }
      })
      client.close()
      assert.strictEqual(resumed.text, "thinking it over")
      assert.strictEqual(resumed.error?.code, Code.Canceled)
      assert.strictEqual((yield* server.llmCalls).length, 1)
      assert.strictEqual(yield* server.llmInterrupted, 1)
      assert.deepStrictEqual((yield* messagesOf(server, "conv-resume-live")).map((m) => m.role), ["user"])
    }))
})

describe("prewarm_request", () => {
  it.scopedLive("Run: a prewarm then the user's message on the same stream: the turn runs with the prewarm's conversation and model", () =>
    Effect.gen(function*() {
      const server = yield* ServerHarness.make({ scripts: [text("warm answer")], transport: { blobAckTimeoutMs: 300 } })
      const result = yield* readRun(server.h2cUrl, "req-prewarm", [
        { message: { case: "prewarmRequest", value: { conversationId: "conv-prewarm", requestedModel: { modelId: "prewarm-model" } } } },
        { message: { case: "clientHeartbeat", value: {} } },
        userMessageAction("after the prewarm")
      ])
      assert.isUndefined(result.error)
      assert.strictEqual(result.text, "warm answer")
      const messages = yield* messagesOf(server, "conv-prewarm")
      assert.deepStrictEqual(messages.map((m) => m.role), ["user", "assistant"])
      const calls = yield* server.llmCalls
      assert.deepStrictEqual(calls.map((c) => c.model), ["prewarm-model"])
    }))

  it.scopedLive("BidiAppend: a prewarm at seqno 0, the user message at 1: the turn runs; a prewarm alone starts nothing", () =>
    Effect.gen(function*() {
      const server = yield* ServerHarness.make({ scripts: [text("sse warm")], transport: { blobAckTimeoutMs: 300 } })
      const client = new CursorClient({ baseUrl: server.baseUrl })
      const alone = yield* Effect.promise(() => client.append("req-prewarm-alone", 0, { message: { case: "prewarmRequest", value: { conversationId: "conv-prewarm-alone" } } }))
      assert.strictEqual(alone.status, 200)
      const prewarm = yield* Effect.promise(() => client.append("req-prewarm-sse", 0, { message: { case: "prewarmRequest", value: { conversationId: "conv-prewarm-sse" } } }))
      const message = yield* Effect.promise(() => client.append("req-prewarm-sse", 1, userMessageAction("go")))
      client.close()
      assert.deepStrictEqual([prewarm.status, message.status], [200, 200])
      yield* server.runner.awaitIdle("conv-prewarm-sse")
      assert.deepStrictEqual((yield* messagesOf(server, "conv-prewarm-sse")).map((m) => m.role), ["user", "assistant"])
      assert.deepStrictEqual(yield* messagesOf(server, "conv-prewarm-alone"), [])
    }))
})
