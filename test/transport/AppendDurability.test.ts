/**
 * What an acknowledged BidiAppend promises (Transport `bidiAppend`, the rule at
 * `ACKNOWLEDGING AN APPEND`), and how a recovered turn takes re-sent appends with gaps
 * (`PASSING OVER GAPS AFTER A RESTART`).
 *
 * The client re-sends only the appends it holds no acknowledgement for. So an append held
 * behind a gap must not be acknowledged before it is handed on (a crash would lose it), and
 * after a restart the re-sent appends can have gaps: the seqnos the old process acknowledged,
 * which never come back. As in RestartAppends.test.ts, two servers run one after the other on
 * one database; the first stops with a model call in flight, which is what a crash leaves.
 *
 * An acknowledgement also waits for the commit of the input the append carries; a commit slower
 * than the bound is answered `unavailable`, not acknowledged anyway.
 *
 * Every wait is bounded (the client's timeouts, the server's acknowledgement bound); no test
 * asserts a duration. Where a test depends on something happening "at once" it gives the
 * alternative (a grace period) a length that would make it fail instead.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Layer, Option, Schedule, Scope } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { Message } from "../../src/Llm.js"
import * as Store from "../../src/Store.js"
import type { TransportOptions } from "../../src/Transport.js"
import { clientHeartbeat, CursorClient, runRequestMessage, userMessageAction } from "../support/CursorClient.js"
import type { AgentClientMessageInit, RawResponse } from "../support/CursorClient.js"
import type { Script } from "../support/FakeRuntime.js"
import * as ServerHarness from "../support/ServerHarness.js"
import { clientFor } from "../support/Transcripts.js"

const tempDatabase = Effect.acquireRelease(
  Effect.sync(() => mkdtempSync(join(tmpdir(), "cursor-byok-append-durability-"))),
  (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
).pipe(Effect.map((dir) => join(dir, "byok.sqlite")))

/** A server on `database`; the RunSSE orphan timeout longer than any test. */
const serverOn = (database: string, scripts: ReadonlyArray<Script>, transport: Partial<TransportOptions> = {}) =>
  ServerHarness.make({
    scripts,
    store: Store.layerSqlite({ filename: database }),
    transport: { orphanTimeoutMs: 60_000, sweepIntervalMs: 50, heartbeatMs: 100, ...transport }
  })

/** Runs `body` against a server on `database` and stops it (sessions, streams and held appends gone) before returning. */
const firstProcess = <A>(
  database: string,
  scripts: ReadonlyArray<Script>,
  transport: Partial<TransportOptions>,
  body: (server: ServerHarness.Harness, client: CursorClient) => Effect.Effect<A, never, Scope.Scope>
) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const result = yield* Scope.extend(Effect.gen(function*() {
      const server = yield* serverOn(database, scripts, transport)
      return yield* body(server, yield* clientFor(server))
    }), scope)
    yield* Scope.close(scope, Exit.void)
    return result
  })

const poll = <A>(value: Effect.Effect<A>, until: (a: A) => boolean) => Effect.repeat(value, { until, schedule: Schedule.spaced("10 millis") })

const append = (client: CursorClient, requestId: string, seqno: number, message: AgentClientMessageInit) =>
  Effect.promise(() => client.append(requestId, seqno, message))

/** As the client does with a retryable answer: the same append again, until it is acknowledged (bounded). */
const appendUntilAcknowledged = (client: CursorClient, requestId: string, seqno: number, message: AgentClientMessageInit) =>
  Effect.promise(async () => {
    const answers: Array<number> = []
    for (let attempt = 0; attempt < 20; attempt++) {
      const response = await client.append(requestId, seqno, message)
      answers.push(response.status)
      if (response.status !== 503) return { response, answers }
    }
    throw new Error(`append ${seqno} of ${requestId} never acknowledged: ${answers.join(",")}`)
  })

const codeOf = (response: RawResponse) => (JSON.parse(Buffer.from(response.body).toString("utf8")) as { code?: unknown }).code

const assertAck = (response: RawResponse, what: string) =>
  assert.strictEqual(response.status, 200, `${what}: ${Buffer.from(response.body).toString("utf8")}`)

const assertRetryable = (response: RawResponse, what: string) => {
  assert.strictEqual(response.status, 503, `${what}: expected unavailable, got ${response.status} ${Buffer.from(response.body).toString("utf8")}`)
  assert.strictEqual(codeOf(response), "unavailable", what)
}

const loadState = (server: ServerHarness.Harness, conversationId: string) =>
  server.store.load(conversationId).pipe(Effect.map(Option.getOrThrow), Effect.orDie)

const textOf = (message: Message) =>
  message.role === "toolResult" ? "" : message.content.flatMap((block) => (block.type === "text" ? [block.text] : [])).join("")

/** The user texts the conversation holds: in its history, then queued for the next model call. */
const userTexts = (server: ServerHarness.Harness, conversationId: string) =>
  Effect.map(loadState(server, conversationId), ({ state }) => [
    ...state.messages.filter((m) => m.role === "user").map(textOf),
    ...state.queued.map(textOf)
  ])

const stall: Script = { _tag: "Stall", events: [{ _tag: "Start" }, { _tag: "TextStart", index: 0 }, { _tag: "TextDelta", index: 0, delta: "half an answer" }] }

/** Fixed message ids, so a re-sent follow-up is byte for byte the one sent before. */
const followUp = (textValue: string) => userMessageAction(textValue, "agent", `msg-${textValue.replace(/\W/g, "-")}`)

/** Seq 0: a run request whose model call stalls (the turn stays in progress); acknowledged once committed. */
/**
 * The client re-sends `seq1` and seq 3 (a follow-up "two") to the restarted process while the
 * recovered turn re-issues its model call; both are acknowledged, across the gap at seq 2.
 */
const resendAcrossGap = (server: ServerHarness.Harness, client: CursorClient, requestId: string, seq1: AgentClientMessageInit) =>
  Effect.gen(function*() {
    const resent = yield* Effect.forkScoped(Effect.all([
      append(client, requestId, 1, seq1),
      append(client, requestId, 3, followUp("two"))
    ], { concurrency: "unbounded" }))
    assert.strictEqual((yield* server.runner.recover).llmCallsReissued, 1)
    const [first, third] = yield* resent
    assertAck(first, "seq 1 re-sent")
    assertAck(third, "seq 3")
  })

const startStalledTurn = (server: ServerHarness.Harness, client: CursorClient, requestId: string, conversationId: string) =>
  Effect.gen(function*() {
    assertAck(yield* append(client, requestId, 0, runRequestMessage({ conversationId, messageId: `msg-${requestId}`, text: "look at the code" })), "run request")
    yield* poll(server.llmCalls, (calls) => calls.length === 1)
  })

describe("An append held behind a gap is acknowledged only once it is handed on", () => {
  it.scopedLive("not acknowledged while the gap is open (a retryable unavailable after the bound), acknowledged once the gap fills, applied once however often it is re-sent", () =>
    Effect.gen(function*() {
      const database = yield* tempDatabase
      const server = yield* serverOn(database, [stall], { appendAckTimeoutMs: 300 })
      const client = yield* clientFor(server)
      yield* startStalledTurn(server, client, "req-gap", "conv-gap")

      // Seq 1 is still on its way: seq 2 is held, and its POST ends with a retryable error, not an acknowledgement.
      assertRetryable(yield* append(client, "req-gap", 2, followUp("two")), "seq 2 held behind the gap")
      assert.deepStrictEqual(yield* userTexts(server, "conv-gap"), ["look at the code"])

      // The client sends seq 2 again while seq 1 arrives: both acknowledged, seq 2 once its input is committed.
      const [resent, filled] = yield* Effect.all([
        appendUntilAcknowledged(client, "req-gap", 2, followUp("two")),
        appendUntilAcknowledged(client, "req-gap", 1, clientHeartbeat())
      ], { concurrency: "unbounded" })
      assertAck(resent.response, "seq 2 re-sent")
      assertAck(filled.response, "seq 1")
      assert.deepStrictEqual(yield* userTexts(server, "conv-gap"), ["look at the code", "two"])

      // Once more, later: a duplicate whose input is committed is acknowledged at once and changes nothing.
      const before = yield* loadState(server, "conv-gap")
      assertAck(yield* append(client, "req-gap", 2, followUp("two")), "seq 2 again")
      assert.deepStrictEqual(yield* loadState(server, "conv-gap"), before)
    }))

  it.scopedLive("a crash while appends are held behind a gap loses nothing the client believes acknowledged: it re-sends them and the restarted process applies each once", () =>
    Effect.gen(function*() {
      const database = yield* tempDatabase
      const request = "req-crash"
      const conversation = "conv-crash"
      // What the client sent and what it was told; seq 1 never reached the first process.
      const sent = new Map<number, AgentClientMessageInit>([[0, runRequestMessage({ conversationId: conversation, messageId: `msg-${request}`, text: "look at the code" })], [1, clientHeartbeat()], [2, followUp("two")], [3, followUp("three")]])
      const acknowledged = new Set<number>()
      yield* firstProcess(database, [stall], { appendAckTimeoutMs: 300 }, (server, client) =>
        Effect.gen(function*() {
          yield* startStalledTurn(server, client, request, conversation)
          acknowledged.add(0)
          for (const seqno of [2, 3]) {
            const response = yield* append(client, request, seqno, sent.get(seqno)!)
            if (response.status === 200) acknowledged.add(seqno)
          }
          // Held when the process stops: nothing of them was applied.
          assert.deepStrictEqual(yield* userTexts(server, conversation), ["look at the code"])
        }))
      assert.deepStrictEqual([...acknowledged], [0], "an append held behind a gap was acknowledged")

      // The re-issued model call streams and stalls: the recovered turn speaks and stays busy, so follow-ups are queued.
      const server = yield* serverOn(database, [stall])
      const client = yield* clientFor(server)
      // The client re-sends everything it holds no acknowledgement for (before the recovered turn speaks).
      const resent = yield* Effect.forkScoped(Effect.all(
        [...sent].filter(([seqno]) => !acknowledged.has(seqno)).map(([seqno, message]) => appendUntilAcknowledged(client, request, seqno, message)),
        { concurrency: "unbounded" }
      ))
      assert.strictEqual((yield* server.runner.recover).llmCallsReissued, 1)
      for (const { response } of yield* resent) assertAck(response, "re-sent append")
      assert.strictEqual((yield* loadState(server, conversation)).state.status, "waitingLlm")
      assert.deepStrictEqual(yield* userTexts(server, conversation), ["look at the code", "two", "three"])
    }))
})

describe("An append whose input is not committed within the bound is not acknowledged", () => {
  it.scopedLive("a slow commit answers unavailable (the re-send too, while it is pending); once committed, a re-send is acknowledged and nothing is applied twice", () =>
    Effect.gen(function*() {
      // The store holds back the commit of the follow-up's input until the test opens the gate.
      const gate = yield* Deferred.make<void>()
      const gated = Layer.effect(Store.Store, Effect.map(Store.Store, (store) => ({
        ...store,
        commitInput: (commit: Parameters<typeof store.commitInput>[0]) =>
          commit.inputId.endsWith(":1") ? Effect.zipRight(Deferred.await(gate), store.commitInput(commit)) : store.commitInput(commit)
      }))).pipe(Layer.provide(Store.layerMemory))
      const server = yield* ServerHarness.make({ scripts: [stall], store: gated, transport: { appendAckTimeoutMs: 300 } })
      const client = yield* clientFor(server)
      yield* startStalledTurn(server, client, "req-slow", "conv-slow")

      assertRetryable(yield* append(client, "req-slow", 1, followUp("one")), "seq 1, its commit held back")
      assertRetryable(yield* append(client, "req-slow", 1, followUp("one")), "seq 1 re-sent, its commit still held back")
      assert.deepStrictEqual(yield* userTexts(server, "conv-slow"), ["look at the code"])

      yield* Deferred.succeed(gate, undefined)
      assertAck((yield* appendUntilAcknowledged(client, "req-slow", 1, followUp("one"))).response, "seq 1 once committed")
      assert.deepStrictEqual(yield* userTexts(server, "conv-slow"), ["look at the code", "one"])
      const before = yield* loadState(server, "conv-slow")
      assertAck(yield* append(client, "req-slow", 1, followUp("one")), "seq 1 again")
      assertAck(yield* append(client, "req-slow", 2, clientHeartbeat()), "seq 2")
      assert.deepStrictEqual(yield* loadState(server, "conv-slow"), before)
    }))
})

describe("A recovered turn passes over the gaps in its client's re-sent appends", () => {
  it.scopedLive("a gap whose input the old process committed is passed over at once (the grace is longer than the acknowledgement bound)", () =>
    Effect.gen(function*() {
      const database = yield* tempDatabase
      const request = "req-committed-gap"
      const conversation = "conv-committed-gap"
      yield* firstProcess(database, [stall], {}, (server, client) =>
        Effect.gen(function*() {
          yield* startStalledTurn(server, client, request, conversation)
          assertAck(yield* append(client, request, 1, clientHeartbeat()), "seq 1")
          // Committed and acknowledged: the client will never send it again.
          assertAck(yield* append(client, request, 2, followUp("one")), "seq 2")
        }))

      const server = yield* serverOn(database, [stall], { gapGraceMs: 60_000, appendAckTimeoutMs: 10_000 })
      const client = yield* clientFor(server)
      // Re-sent: seq 1 (its acknowledgement lost in the crash) and seq 3 (never got there). Seq 2 is the gap.
      yield* resendAcrossGap(server, client, request, clientHeartbeat())
      assert.deepStrictEqual(yield* userTexts(server, conversation), ["look at the code", "one", "two"])
    }))

  it.scopedLive("a re-sent run request of a recovered turn, then a gap whose input is committed: passed over at once", () =>
    Effect.gen(function*() {
      const database = yield* tempDatabase
      const request = "req-resent-run"
      const conversation = "conv-resent-run"
      const run = runRequestMessage({ conversationId: conversation, messageId: `msg-${request}`, text: "look at the code" })
      yield* firstProcess(database, [stall], {}, (server, client) =>
        Effect.gen(function*() {
          yield* startStalledTurn(server, client, request, conversation)
          assertAck(yield* append(client, request, 1, followUp("one")), "seq 1")
        }))

      const server = yield* serverOn(database, [stall], { gapGraceMs: 60_000, appendAckTimeoutMs: 10_000 })
      const client = yield* clientFor(server)
      // Seq 0's acknowledgement was lost, seq 1's was not; seq 2 never got there. Seq 2 first, then seq 0.
      const second = yield* Effect.forkScoped(append(client, request, 2, followUp("two")))
      assertAck(yield* append(client, request, 0, run), "seq 0 re-sent")
      assertAck(yield* second, "seq 2")
      assert.deepStrictEqual(yield* userTexts(server, conversation), ["look at the code", "one", "two"])
      assert.deepStrictEqual(yield* server.llmCalls, [])
    }))

  it.scopedLive("a gap that is no input (a heartbeat the old process acknowledged) is passed over after the grace period; nothing is applied twice", () =>
    Effect.gen(function*() {
      const database = yield* tempDatabase
      const request = "req-heartbeat-gap"
      const conversation = "conv-heartbeat-gap"
      yield* firstProcess(database, [stall], {}, (server, client) =>
        Effect.gen(function*() {
          yield* startStalledTurn(server, client, request, conversation)
          assertAck(yield* append(client, request, 1, followUp("one")), "seq 1")
          assertAck(yield* append(client, request, 2, clientHeartbeat()), "seq 2")
        }))

      const server = yield* serverOn(database, [stall], { gapGraceMs: 200, appendAckTimeoutMs: 30_000 })
      const client = yield* clientFor(server)
      // Re-sent: seq 1 (committed; its acknowledgement lost) and seq 3 (new). Seq 2 will not come back.
      yield* resendAcrossGap(server, client, request, followUp("one"))
      assert.deepStrictEqual(yield* userTexts(server, conversation), ["look at the code", "one", "two"])
    }))

  it.scopedLive("a gap re-sent within the grace period is handed on in order", () =>
    Effect.gen(function*() {
      const database = yield* tempDatabase
      const request = "req-late-in-time"
      const conversation = "conv-late-in-time"
      yield* firstProcess(database, [stall], {}, (server, client) => startStalledTurn(server, client, request, conversation))

      const server = yield* serverOn(database, [stall], { gapGraceMs: 60_000, appendAckTimeoutMs: 300 })
      const client = yield* clientFor(server)
      assert.strictEqual((yield* server.runner.recover).llmCallsReissued, 1)
      // The recovered turn spoke (its re-issued call streams): the first append sets where the inbox starts.
      yield* poll(Effect.sync(() => server.transport.sessionCount()), (n) => n === 1)
      assertAck(yield* append(client, request, 1, followUp("one")), "seq 1")
      // Seq 3 waits behind seq 2 (not passed over: the grace is long), so it is not acknowledged yet.
      assertRetryable(yield* append(client, request, 3, followUp("three")), "seq 3 held")
      assertAck((yield* appendUntilAcknowledged(client, request, 2, followUp("two"))).response, "seq 2")
      assertAck((yield* appendUntilAcknowledged(client, request, 3, followUp("three"))).response, "seq 3 re-sent")
      assert.deepStrictEqual(yield* userTexts(server, conversation), ["look at the code", "one", "two", "three"])
    }))

  it.scopedLive("a lower seqno that arrives after the recovered turn's inbox started, never applied, is applied (not dropped as a duplicate); sent again, it changes nothing", () =>
    Effect.gen(function*() {
      const database = yield* tempDatabase
      const request = "req-lower"
      const conversation = "conv-lower"
      yield* firstProcess(database, [stall], {}, (server, client) => startStalledTurn(server, client, request, conversation))

      const server = yield* serverOn(database, [stall])
      const client = yield* clientFor(server)
      assert.strictEqual((yield* server.runner.recover).llmCallsReissued, 1)
      yield* poll(Effect.sync(() => server.transport.sessionCount()), (n) => n === 1)
      // Re-sent seq 3 arrives first and starts the inbox; seq 1 (never committed) after it; seq 2 was acknowledged and does not come.
      assertAck(yield* append(client, request, 3, followUp("three")), "seq 3")
      assertAck(yield* append(client, request, 1, followUp("one")), "seq 1, late")
      assert.deepStrictEqual(yield* userTexts(server, conversation), ["look at the code", "three", "one"])
      const before = yield* loadState(server, conversation)
      assertAck(yield* append(client, request, 1, followUp("one")), "seq 1 again")
      assertAck(yield* append(client, request, 3, followUp("three")), "seq 3 again")
      assert.deepStrictEqual(yield* loadState(server, conversation), before)
    }))
})
