/**
 * The end of a turn replayed by a restarted process (Transport `replayEnd`).
 *
 * A process can die after committing the end of a turn and before sending it. Here the first
 * process runs its turns to their end (the client got them) and stops; a second process on the
 * same database has no session for those requests, which is exactly what a crash between the
 * final commit and `finish` leaves: the committed state, and a client asking about a request
 * this process never saw. The second process must then replay the turn's end from the store
 * (the same frames `finish` sent), acknowledge re-sent appends without applying them again, and
 * still start a new turn on a reused request id.
 *
 * Every wait is bounded (the client's timeouts); no test asserts a duration.
 */
import { toBinary } from "@bufbuild/protobuf"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Option, Scope } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Dialect from "../../src/Dialect.js"
import { ConversationStateStructureSchema } from "../../src/gen/agent/v1/agent_pb.js"
import type { ConversationStateStructure } from "../../src/gen/agent/v1/agent_pb.js"
import * as Store from "../../src/Store.js"
import {
  cancelAction,
  CursorClient,
  runRequestMessage,
  toHex,
  userMessageAction
} from "../support/CursorClient.js"
import type { FrameEvent, RunRequestSpec, Transcript } from "../support/CursorClient.js"
import { providerDown, text, usage } from "../support/FakeRuntime.js"
import type { Script } from "../support/FakeRuntime.js"
import { reattach } from "../support/Reattach.js"
import * as ServerHarness from "../support/ServerHarness.js"
import { assertCleanOk, clientFor } from "../support/Transcripts.js"

// -----------------------------------------------------------------------------
// Two processes on one database
// -----------------------------------------------------------------------------

const tempDatabase = Effect.acquireRelease(
  Effect.sync(() => mkdtempSync(join(tmpdir(), "cursor-byok-replay-"))),
  (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
).pipe(Effect.map((dir) => join(dir, "byok.sqlite")))

/** Runs `body` against a server on `database` and stops that server (its sessions gone) before returning. */
const firstProcess = <A>(database: string, scripts: ReadonlyArray<Script>, body: (server: ServerHarness.Harness, client: CursorClient) => Effect.Effect<A, never, Scope.Scope>) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const result = yield* Scope.extend(Effect.gen(function*() {
      const server = yield* ServerHarness.make({ scripts, store: Store.layerSqlite({ filename: database }) })
      return yield* body(server, yield* clientFor(server))
    }), scope)
    yield* Scope.close(scope, Exit.void)
    return result
  })

/** The process after the restart: same database, short orphan timeout and sweep unless told otherwise. */
const secondProcess = (database: string, scripts: ReadonlyArray<Script> = [], orphanTimeoutMs = 300) =>
  ServerHarness.make({ scripts, store: Store.layerSqlite({ filename: database }), transport: { orphanTimeoutMs, sweepIntervalMs: 50, heartbeatMs: 100 } })

const committed = (server: ServerHarness.Harness, conversationId: string) =>
  server.store.load(conversationId).pipe(
    Effect.map((loaded) => {
      const { state, version } = Option.getOrThrow(loaded)
      return { version, messages: state.messages.length, status: state.status }
    }),
    Effect.orDie
  )

const spec = (conversationId: string, messageId: string, textValue: string, conversationState?: ConversationStateStructure): RunRequestSpec => ({
  conversationId,
  messageId,
  text: textValue,
  ...(conversationState !== undefined ? { conversationState } : {})
})

const lastCheckpoint = (transcript: Transcript): ConversationStateStructure => {
  const checkpoint = transcript.checkpoints[transcript.checkpoints.length - 1]
  assert.isDefined(checkpoint, "the first process published no checkpoint")
  return checkpoint!
}

const bytesOf = (checkpoint: ConversationStateStructure) => toHex(toBinary(ConversationStateStructureSchema, checkpoint))

const kindsOf = (events: ReadonlyArray<FrameEvent>) => events.map((e) => e.kind).filter((kind, i, all) => i === 0 || all[i - 1] !== kind)

// -----------------------------------------------------------------------------
// Tests
// -----------------------------------------------------------------------------

describe("The end of a turn committed before a restart is replayed to the reconnecting client", () => {
  it.scopedLive("RunSSE reconnects, no run request comes: after the orphan timeout it gets turn_ended, the blobs and the same checkpoint the turn had, then {}; re-sent appends are acknowledged and change nothing", () =>
    Effect.gen(function*() {
      const database = yield* tempDatabase
      const { first, second, storedBefore } = yield* firstProcess(database, [text("first answer", usage(3, 2)), text("second answer", usage(5, 4))], (_server, client) =>
        Effect.promise(async () => {
          const first = await client.run({ requestId: "req-one", ...spec("conv-replay", "msg-one", "first question") })
          const storedBefore = new Set(client.blobs.keys())
          const second = await client.run({ requestId: "req-two", ...spec("conv-replay", "msg-two", "second question", lastCheckpoint(first)) })
          return { first, second, storedBefore }
        }))
      assertCleanOk(first)
      assertCleanOk(second)

      const server = yield* secondProcess(database)
      const client = yield* clientFor(server)
      const before = yield* committed(server, "conv-replay")
      // The client re-sends what it has no acknowledgement for: a follow-up (seq 1) and a cancel (seq 2).
      // Held behind seq 0, which never comes; acknowledged when the replay drops them (their turn is
      // over), never applied (a follow-up between turns would start a turn).
      const resent = yield* Effect.forkScoped(Effect.all([
        Effect.promise(() => client.append("req-two", 1, userMessageAction("and one more thing"))),
        Effect.promise(() => client.append("req-two", 2, cancelAction()))
      ], { concurrency: "unbounded" }))
      const replayed = yield* Effect.promise(() => reattach(client, "req-two", 3))
      assert.deepStrictEqual((yield* resent).map((response) => response.status), [200, 200])

      assert.deepStrictEqual(replayed.problems, [])
      assert.deepStrictEqual(replayed.end, Dialect.EndStream.Ok())
      assert.deepStrictEqual(kindsOf(replayed.events), ["kv_set", "turn_ended", "checkpoint"])
      assert.deepStrictEqual(replayed.events.find((e) => e.kind === "turn_ended"), { kind: "turn_ended", usage: second.usage! })
      // Projected from the committed state, it is the checkpoint the first process published, byte for byte: both turns.
      assert.strictEqual(replayed.checkpoints.length, 1)
      assert.strictEqual(bytesOf(replayed.checkpoints[0]!), bytesOf(lastCheckpoint(second)))
      assert.strictEqual(replayed.checkpoints[0]!.turns.length, 2)
      // Every blob it names the client holds: sent again now, or stored by the first turn (its turn structure).
      for (const id of [...replayed.checkpoints[0]!.turns, ...replayed.checkpoints[0]!.rootPromptMessagesJson]) {
        assert.isTrue(replayed.blobs.has(toHex(id)) || storedBefore.has(toHex(id)), `the checkpoint names blob ${toHex(id)} the client was never sent`)
      }
      assert.isFalse(replayed.blobs.has(toHex(replayed.checkpoints[0]!.turns[0]!)))
      assert.isTrue(replayed.blobs.has(toHex(replayed.checkpoints[0]!.turns[1]!)))
      // Nothing was applied again: no model call, the committed state as it was.
      assert.deepStrictEqual(yield* server.llmCalls, [])
      assert.deepStrictEqual(yield* committed(server, "conv-replay"), before)

      // The first request's turn is no longer the conversation's current one: no replay, `unavailable` as before.
      const older = yield* Effect.promise(() => reattach(client, "req-one", 1))
      assert.strictEqual(older.end?._tag === "Error" ? older.end.code : older.end?._tag, "unavailable")
      assert.isFalse(older.events.some((e) => e.kind === "turn_ended"))
      // A request the store knows nothing of: `unavailable` as before.
      const unknown = yield* Effect.promise(() => reattach(client, "req-never-seen", 0))
      assert.strictEqual(unknown.end?._tag === "Error" ? unknown.end.code : unknown.end?._tag, "unavailable")
    }))

  it.scopedLive("a re-sent run request whose turn ended is acknowledged, not applied again, and the end is replayed at once (long orphan timeout); a reused request id with a new run request still starts a new turn", () =>
    Effect.gen(function*() {
      const database = yield* tempDatabase
      const original = yield* firstProcess(database, [text("the answer", usage(2, 1))], (_server, client) =>
        Effect.promise(() => client.run({ requestId: "req-resent", ...spec("conv-resent", "msg-1", "a question") })))
      assertCleanOk(original)

      // The orphan timeout is longer than the reattach timeout: only the re-sent run request can trigger the replay.
      const server = yield* secondProcess(database, [text("a new answer", usage(4, 3))], 60_000)
      const client = yield* clientFor(server)
      const before = yield* committed(server, "conv-resent")
      const resent = runRequestMessage(spec("conv-resent", "msg-1", "a question"))
      assert.strictEqual((yield* Effect.promise(() => client.append("req-resent", 0, resent))).status, 200)
      const replayed = yield* Effect.promise(() => reattach(client, "req-resent", 1))
      assert.deepStrictEqual(replayed.problems, [])
      assert.deepStrictEqual(replayed.end, Dialect.EndStream.Ok())
      assert.deepStrictEqual(kindsOf(replayed.events), ["kv_set", "turn_ended", "checkpoint"])
      assert.strictEqual(bytesOf(replayed.checkpoints[0]!), bytesOf(lastCheckpoint(original)))
      // Sent once more after the replay: still nothing applied.
      assert.strictEqual((yield* Effect.promise(() => client.append("req-resent", 0, resent))).status, 200)
      assert.deepStrictEqual(yield* server.llmCalls, [])
      assert.deepStrictEqual(yield* committed(server, "conv-resent"), before)

      // Cursor reuses the request id for the next turn (a new user message id): a new turn, not the old end.
      const next = yield* Effect.promise(() =>
        client.run({ requestId: "req-resent", order: "runSseFirst", ...spec("conv-resent", "msg-2", "another question", lastCheckpoint(original)) }))
      assertCleanOk(next)
      assert.strictEqual(next.text, "a new answer")
      assert.deepStrictEqual(next.usage, usage(4, 3))
      assert.strictEqual(lastCheckpoint(next).turns.length, 2)
      assert.strictEqual((yield* server.llmCalls).length, 1)
      assert.deepStrictEqual(yield* committed(server, "conv-resent"), { version: before.version + 2, messages: before.messages + 2, status: "final" })
    }))

  it.scopedLive("a reused request id after a restart, its RunSSE before its run request: the new turn streams, the old end is not replayed", () =>
    Effect.gen(function*() {
      const database = yield* tempDatabase
      const original = yield* firstProcess(database, [text("old answer", usage(1, 1))], (_server, client) =>
        Effect.promise(() => client.run({ requestId: "req-reused", ...spec("conv-reused", "msg-old", "old question") })))
      assertCleanOk(original)
      const server = yield* secondProcess(database, [text("new answer", usage(6, 6))], 3_000)
      const client = yield* clientFor(server)
      const next = yield* Effect.promise(() =>
        client.run({ requestId: "req-reused", order: "runSseFirst", ...spec("conv-reused", "msg-new", "new question", lastCheckpoint(original)) }))
      assertCleanOk(next)
      assert.strictEqual(next.text, "new answer")
      assert.deepStrictEqual(next.events.filter((e) => e.kind === "turn_ended"), [{ kind: "turn_ended", usage: usage(6, 6) }])
      assert.strictEqual(lastCheckpoint(next).turns.length, 2)
    }))

  it.scopedLive("a failed turn and a canceled turn: the reconnecting RunSSE gets the same error end, without turn_ended or checkpoint", () =>
    Effect.gen(function*() {
      const database = yield* tempDatabase
      const stall: Script = { _tag: "Stall", events: [{ _tag: "Start" }, { _tag: "TextStart", index: 0 }, { _tag: "TextDelta", index: 0, delta: "thinking about it" }] }
      const { canceled, failed } = yield* firstProcess(database, [{ _tag: "Fail", error: providerDown }, stall], (_server, client) =>
        Effect.promise(async () => {
          const failed = await client.run({ requestId: "req-failed", ...spec("conv-failed", "msg-f", "hi") })
          const turn = client.turn({ requestId: "req-canceled", ...spec("conv-canceled", "msg-c", "hi") })
          await turn.waitFor((f) => f.event.kind === "text_delta")
          await turn.cancel("user_stopped_generation")
          return { failed, canceled: await turn.done }
        }))
      assert.strictEqual(failed.end?._tag, "Error")
      assert.strictEqual(canceled.end?._tag === "Error" ? canceled.end.code : undefined, "canceled")

      const server = yield* secondProcess(database)
      const client = yield* clientFor(server)
      for (const [requestId, original] of [["req-failed", failed], ["req-canceled", canceled]] as const) {
        const replayed = yield* Effect.promise(() => reattach(client, requestId, 2))
        assert.deepStrictEqual(replayed.problems, [], requestId)
        assert.deepStrictEqual(replayed.end, original.end, requestId)
        assert.deepStrictEqual(replayed.events, [], requestId)
      }
      assert.deepStrictEqual(yield* server.llmCalls, [])
    }))
})
