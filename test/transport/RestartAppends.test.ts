/**
 * Appends numbered far past 0 that a client re-sends to a restarted process (Transport
 * `startedTurnBefore`), and the usage a recovered turn ends with.
 *
 * A long turn's client numbers its appends on across a restart: the first process handed on
 * seqnos 0..n, so what the client re-sends to the next process (the appends it holds no
 * acknowledgement for) is numbered n+1 and up, which may be `appendWindow` or more past 0. As in
 * TurnEndReplay.test.ts, two processes run one after the other on one database: the first stops
 * with a model call in flight, which is what a crash leaves (nothing more is committed); the
 * second is asked by the test to recover, so the re-sent appends reach it before the recovered
 * turn speaks (the case a window counted from 0 refused). Both run with `appendWindow` 4, so a
 * handful of appends make a long turn. A held append is not acknowledged until it is handed on
 * (Transport `ACKNOWLEDGING AN APPEND`): the second process answers `unavailable` after a short
 * bound, and the client sends it again.
 *
 * Every wait is bounded (the client's timeouts); no test asserts a duration.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Option, Schedule, Scope } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Dialect from "../../src/Dialect.js"
import { canonicalJson } from "../../src/Llm.js"
import type { Message } from "../../src/Llm.js"
import * as Store from "../../src/Store.js"
import { clientHeartbeat, CursorClient, runRequestMessage, userMessageAction } from "../support/CursorClient.js"
import type { AgentClientMessageInit, RawResponse } from "../support/CursorClient.js"
import { answerEvents, assistant, call, text, usage } from "../support/FakeRuntime.js"
import type { Script } from "../support/FakeRuntime.js"
import { reattach } from "../support/Reattach.js"
import * as ServerHarness from "../support/ServerHarness.js"
import { clientFor } from "../support/Transcripts.js"

const WINDOW = 4

const tempDatabase = Effect.acquireRelease(
  Effect.sync(() => mkdtempSync(join(tmpdir(), "cursor-byok-restart-appends-"))),
  (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
).pipe(Effect.map((dir) => join(dir, "byok.sqlite")))

/** A server on `database` with a small append window; the RunSSE orphan timeout longer than any test. */
const serverOn = (database: string, scripts: ReadonlyArray<Script>, appendAckTimeoutMs = ServerHarness.testTransportOptions().appendAckTimeoutMs) =>
  ServerHarness.make({
    scripts,
    store: Store.layerSqlite({ filename: database }),
    transport: { appendWindow: WINDOW, orphanTimeoutMs: 60_000, sweepIntervalMs: 50, heartbeatMs: 100, appendAckTimeoutMs }
  })

/** Runs `body` against a server on `database` and stops it (sessions and streams gone) before returning. */
const firstProcess = <A>(database: string, scripts: ReadonlyArray<Script>, body: (server: ServerHarness.Harness, client: CursorClient) => Effect.Effect<A, never, Scope.Scope>) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const result = yield* Scope.extend(Effect.gen(function*() {
      const server = yield* serverOn(database, scripts)
      return yield* body(server, yield* clientFor(server))
    }), scope)
    yield* Scope.close(scope, Exit.void)
    return result
  })

/** Polls `value` every few milliseconds (the server shares this event loop) until `until` holds. */
const poll = <A>(value: Effect.Effect<A>, until: (a: A) => boolean) => Effect.repeat(value, { until, schedule: Schedule.spaced("10 millis") })

const sessions = (server: ServerHarness.Harness) => Effect.sync(() => server.transport.sessionCount())

const append = (client: CursorClient, requestId: string, seqno: number, message: AgentClientMessageInit) =>
  Effect.promise(() => client.append(requestId, seqno, message))

const assertAck = (response: RawResponse, what: string) =>
  assert.strictEqual(response.status, 200, `${what}: ${Buffer.from(response.body).toString("utf8")}`)

const assertRefused = (response: RawResponse, code: string, status = 400) => {
  assert.strictEqual(response.status, status)
  assert.strictEqual((JSON.parse(Buffer.from(response.body).toString("utf8")) as { code?: unknown }).code, code)
}

/** As the client does with a retryable answer: the same append again, until it is acknowledged (bounded). */
const appendUntilAcknowledged = (client: CursorClient, requestId: string, seqno: number, message: AgentClientMessageInit) =>
  Effect.promise(async () => {
    for (let attempt = 1; ; attempt++) {
      const response = await client.append(requestId, seqno, message)
      if (response.status !== 503 || attempt >= 20) return response
    }
  })

const loadState = (server: ServerHarness.Harness, conversationId: string) =>
  server.store.load(conversationId).pipe(Effect.map(Option.getOrThrow), Effect.orDie)

const textOf = (message: Message) =>
  message.role === "toolResult" ? "" : message.content.flatMap((block) => (block.type === "text" ? [block.text] : [])).join("")

const REQUEST = "req-long"
const CONVERSATION = "conv-long"
const FOLLOW_UP_ONE = "and the tests too"
const FOLLOW_UP_TWO = "and the docs"

/** The first process: call 1 (TodoWrite, run on the server) committed, call 2 streaming, seqnos 0..WINDOW+1 handed on. */
const longTurnCutByRestart = (database: string) =>
  firstProcess(database, [
    { _tag: "Events", events: answerEvents(assistant([call("todo-1", "TodoWrite", JSON.stringify({ todos: [{ id: "1", content: "look", status: "pending" }] }))], "toolUse", usage(3, 2))) },
    { _tag: "Stall", events: [{ _tag: "Start" }, { _tag: "TextStart", index: 0 }, { _tag: "TextDelta", index: 0, delta: "half an answer" }] }
  ], (server, client) =>
    Effect.gen(function*() {
      assertAck(yield* append(client, REQUEST, 0, runRequestMessage({ conversationId: CONVERSATION, messageId: "msg-long", text: "look at the code" })), "run request")
      yield* poll(server.llmCalls, (calls) => calls.length === 2)
      for (let seqno = 1; seqno <= WINDOW; seqno++) assertAck(yield* append(client, REQUEST, seqno, clientHeartbeat()), `heartbeat ${seqno}`)
      // Applied (queued behind the streaming call, committed) before it is acknowledged; the acknowledgement is what the restart loses.
      assertAck(yield* append(client, REQUEST, WINDOW + 1, userMessageAction(FOLLOW_UP_ONE, "agent", "msg-follow-one")), "follow-up one")
      const state = yield* loadState(server, CONVERSATION)
      assert.deepStrictEqual(state.state.queued.map(textOf), [FOLLOW_UP_ONE])
      assert.strictEqual(state.state.status, "waitingLlm")
      return (yield* server.llmCalls)[1]!
    }))

describe("Appends re-sent after a restart, numbered past the append window", () => {
  for (const order of ["appendsFirst", "runSseFirst"] as const) {
    it.scopedLive(`a recovered turn's re-sent appends (${order}) are held, not acknowledged, until it speaks, then applied once each and acknowledged; its turn_ended sums the model calls of both processes`, () =>
      Effect.gen(function*() {
        const database = yield* tempDatabase
        const inFlight = yield* longTurnCutByRestart(database)

        const server = yield* serverOn(database, [text("second", usage(5, 4)), text("third", usage(7, 6)), text("fourth", usage(11, 10))], 300)
        const client = yield* clientFor(server)
        const before = yield* loadState(server, CONVERSATION)
        // RunSSE reopened with the same request id; set_blob acknowledgements numbered on after the re-sent appends.
        const stream = order === "runSseFirst" ? reattach(client, REQUEST, WINDOW + 3) : undefined
        if (stream !== undefined) yield* poll(sessions(server), (n) => n === 1)

        // Re-sent: follow-up one (applied by the first process, its acknowledgement lost) and follow-up two (never got there).
        // Held until the recovered turn says where the client's numbering is: not acknowledged, nothing applied yet.
        const followUpOne = userMessageAction(FOLLOW_UP_ONE, "agent", "msg-follow-one")
        const followUpTwo = userMessageAction(FOLLOW_UP_TWO, "agent", "msg-follow-two")
        assertRefused(yield* append(client, REQUEST, WINDOW + 1, followUpOne), "unavailable", 503)
        assertRefused(yield* append(client, REQUEST, WINDOW + 2, followUpTwo), "unavailable", 503)
        assertRefused(yield* append(client, REQUEST, WINDOW + 1, followUpOne), "unavailable", 503)
        assert.strictEqual(server.transport.sessionCount(), 1)
        assert.deepStrictEqual(yield* loadState(server, CONVERSATION), before)

        // The client sends them again while the recovered turn starts: acknowledged once handed on (and committed).
        const resent = yield* Effect.forkScoped(Effect.all([
          appendUntilAcknowledged(client, REQUEST, WINDOW + 1, followUpOne),
          appendUntilAcknowledged(client, REQUEST, WINDOW + 2, followUpTwo)
        ], { concurrency: "unbounded" }))
        const ended = stream ?? reattach(client, REQUEST, WINDOW + 3)
        assert.strictEqual((yield* server.runner.recover).llmCallsReissued, 1)
        const [one, two] = yield* resent
        assertAck(one, "follow-up one re-sent")
        assertAck(two, "follow-up two")
        const replayed = yield* Effect.promise(() => ended)

        assert.deepStrictEqual(replayed.problems, [])
        assert.deepStrictEqual(replayed.end, Dialect.EndStream.Ok())
        assert.deepStrictEqual(replayed.events.flatMap((e) => (e.kind === "text_delta" ? [e.text] : [])), ["second", "third", "fourth"])
        // Every committed call of the turn: call 1 of the first process, then calls 2 (re-issued), 3 and 4.
        assert.deepStrictEqual(replayed.events.filter((e) => e.kind === "turn_ended"), [{ kind: "turn_ended", usage: usage(3 + 5 + 7 + 11, 2 + 4 + 6 + 10) }])
        assert.strictEqual(replayed.checkpoints.length, 1)

        const after = yield* loadState(server, CONVERSATION)
        assert.strictEqual(after.state.status, "final")
        assert.deepStrictEqual(after.state.messages.map((m) => [m.role, textOf(m)]), [
          ["user", "look at the code"],
          ["assistant", ""],
          ["toolResult", ""],
          ["assistant", "second"],
          ["user", FOLLOW_UP_ONE],
          ["assistant", "third"],
          ["user", FOLLOW_UP_TWO],
          ["assistant", "fourth"]
        ])
        const calls = yield* server.llmCalls
        assert.strictEqual(calls.length, 3)
        assert.strictEqual(calls[0]!.callId, inFlight.callId)
        assert.strictEqual(canonicalJson(calls[0]!.request), canonicalJson(inFlight.request))
      }))
  }

  it.scopedLive("an append past the window for a request that started no turn is refused out_of_range, with or without a RunSSE waiting on it, and changes nothing", () =>
    Effect.gen(function*() {
      const database = yield* tempDatabase
      yield* longTurnCutByRestart(database)
      const server = yield* serverOn(database, [], 300)
      const client = yield* clientFor(server)
      const before = yield* loadState(server, CONVERSATION)

      // No session: refused before one is made.
      assertRefused(yield* append(client, "req-never-seen", WINDOW + 1, userMessageAction("who is this")), "out_of_range")
      assertRefused(yield* append(client, "req-never-seen", 1_000_000, clientHeartbeat()), "out_of_range")
      assert.strictEqual(server.transport.sessionCount(), 0)
      // A prefix of a known request is not that request.
      assertRefused(yield* append(client, "req-lon", WINDOW + 1, clientHeartbeat()), "out_of_range")
      assert.strictEqual(server.transport.sessionCount(), 0)

      // A RunSSE waiting on the unknown request: its append past the window is refused all the same.
      const waiting = reattach(client, "req-never-seen", 0, 1_000)
      yield* poll(sessions(server), (n) => n === 1)
      assertRefused(yield* append(client, "req-never-seen", WINDOW + 1, userMessageAction("who is this")), "out_of_range")
      // Within the window it is held as before: no run request, so nothing applied, nor acknowledged (retryable after the bound).
      assertRefused(yield* append(client, "req-never-seen", WINDOW - 1, clientHeartbeat()), "unavailable", 503)
      const result = yield* Effect.promise(() => waiting)
      assert.deepStrictEqual(result.events, [])

      assert.deepStrictEqual(yield* loadState(server, CONVERSATION), before)
      assert.isTrue(Option.isNone(yield* server.store.load("req-never-seen").pipe(Effect.orDie)))
      assert.deepStrictEqual(yield* server.llmCalls, [])
    }))
})
