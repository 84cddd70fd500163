import { NodeContext } from "@effect/platform-node"
import { FileSystem, Path } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { SqliteClient, SqliteMigrator } from "@effect/sql-sqlite-node"
import { assert, describe, it } from "@effect/vitest"
import { Cause, Context, Effect, Exit, Layer, Option } from "effect"
import { createHash } from "node:crypto"
import { canonicalJson, messageHash, messagesHash, requestHash, serializeMessage } from "../src/Llm.js"
import { initialConversation, turnIdOf } from "../src/Loop.js"
import type { ConversationState, TurnSettings } from "../src/Loop.js"
import * as Prompt from "../src/Prompt.js"
import * as Store from "../src/Store.js"
import { migrations } from "../src/store/migrations.js"
import { prefixUpperBound } from "../src/store/SqlStore.js"
import { engines, sqlite } from "./store/engines.js"
import { journey, plannedCall, user } from "./store/journey.js"
import type { Step } from "./store/journey.js"

/** The SQLite-only tests' Store and SQL beside it, on one connection. */
const withSql = sqlite.withSql
/** A file in folders that do not exist yet: opening it creates them. */
const tempDatabase = Effect.map(sqlite.database, (file) => file.replace(/store\.db$/, "nested/dir/store.db"))

/** Commits steps in order from `version`; returns the last version. */
const commitAll = (conversationId: string, steps: ReadonlyArray<Step>, version = 0) =>
  Effect.gen(function*() {
    const store = yield* Store.Store
    for (const step of steps) {
      version = yield* store.commitInput({ conversationId, expectedVersion: version, ...step })
    }
    return version
  })

const loadSome = (conversationId: string) =>
  Effect.flatMap(Store.Store, (store) => store.load(conversationId)).pipe(Effect.map(Option.getOrThrow))

/** A state that appends `text` as a user message to `state`. */
const appendUser = (state: ConversationState, text: string): ConversationState => {
  const messages = [...state.messages, user(text)]
  return { ...state, messages, messagesHash: messagesHash(messages) }
}

const failure = <A, E>(exit: Exit.Exit<A, E>): E => {
  if (Exit.isSuccess(exit)) throw new Error(`expected a failure, got ${JSON.stringify(exit.value)}`)
  const error = Cause.failureOption(exit.cause)
  if (Option.isNone(error)) throw new Error(`expected a typed failure, got ${Cause.pretty(exit.cause)}`)
  return error.value
}

/** An error's own fields, for comparing with a plain object. */
const fieldsOf = (error: object): Record<string, unknown> => ({ ...error })

describe.each(engines)("Store on $name", (engine) => {
  const memory = engine.fresh
  it.effect("a realistic conversation commits step by step and loads back equal", () =>
    Effect.gen(function*() {
      const store = yield* Store.Store
      const { final, steps } = journey("conv-a")
      const version = yield* commitAll("conv-a", steps)
      assert.strictEqual(version, steps.length)
      const loaded = yield* loadSome("conv-a")
      assert.strictEqual(loaded.version, steps.length)
      assert.deepStrictEqual(loaded.state, final)
      assert.isTrue(Option.isNone(yield* store.load("unknown")))
    }).pipe(Effect.provide(memory)))

  it.effect("two writers with the same expected version: exactly one wins, the loser's rows are absent", () =>
    Effect.gen(function*() {
      const store = yield* Store.Store
      const { steps } = journey("conv-race")
      const first = steps[0]!
      // A new conversation: both insert at version 0.
      const racers = [
        store.commitInput({ conversationId: "conv-race", expectedVersion: 0, ...first, inputId: "a" }),
        store.commitInput({
          conversationId: "conv-race",
          expectedVersion: 0,
          ...first,
          inputId: "b",
          next: appendUser(first.next, "from b")
        })
      ]
      const exits = yield* Effect.all(racers.map(Effect.exit), { concurrency: "unbounded" })
      assert.strictEqual(exits.filter(Exit.isSuccess).length, 1)
      const loser = failure(exits.find(Exit.isFailure)!)
      assert.strictEqual(loser._tag, "VersionConflict")

      // An existing conversation: both load version 1 and commit different next states.
      const loaded = yield* loadSome("conv-race")
      const winnerIsA = Exit.isSuccess(exits[0]!)
      const base = loaded.state
      const nextA = appendUser(base, "A says")
      const nextB = appendUser(appendUser(base, "B says"), "B again")
      const callB = plannedCall(nextB, {
        _tag: "CallLlm",
        callId: "call-of-b",
        model: "fake-model",
        request: { systemPrompt: "p", messages: nextB.messages, tools: [] },
        messagesHash: nextB.messagesHash,
        purpose: "answer"
      })
      const second = yield* Effect.all([
        Effect.exit(store.commitInput({ conversationId: "conv-race", inputId: "a2", expectedVersion: 1, next: nextA, result: "A" })),
        Effect.exit(store.commitInput({
          conversationId: "conv-race",
          inputId: "b2",
          expectedVersion: 1,
          next: nextB,
          result: "B",
          llmCall: callB,
          clientOperations: [{
            operationId: "op-of-b",
            conversationId: "conv-race",
            turnId: nextB.turnId,
            toolCallId: "t",
            toolIndex: 0,
            kind: "shell",
            idempotent: false,
            request: {}
          }]
        }))
      ], { concurrency: "unbounded" })
      assert.strictEqual(second.filter(Exit.isSuccess).length, 1)
      const conflict = failure(second.find(Exit.isFailure)!)
      assert.strictEqual(conflict._tag, "VersionConflict")
      assert.deepStrictEqual(
        fieldsOf(conflict),
        { _tag: "VersionConflict", conversationId: "conv-race", expectedVersion: 1, actualVersion: 2 }
      )
      const after = yield* loadSome("conv-race")
      assert.strictEqual(after.version, 2)
      const aWon = Exit.isSuccess(second[0]!)
      assert.deepStrictEqual(after.state, aWon ? nextA : nextB)
      // The loser left nothing: no input record, no message, no call, no operation.
      assert.isTrue(Option.isNone(yield* store.findInputCommit("conv-race", aWon ? "b2" : "a2")))
      assert.isTrue(Option.isNone(yield* store.findInputCommit("conv-race", winnerIsA ? "b" : "a")))
      if (aWon) {
        assert.isTrue(Option.isNone(yield* store.loadLlmCall("call-of-b")))
        assert.isTrue(Option.isNone(yield* store.loadOperation("op-of-b")))
      }
      const sql = yield* SqlClient.SqlClient
      const counted = yield* sql<{ n: number }>`SELECT count(*) AS n FROM messages WHERE conversation_id = 'conv-race'`
      assert.strictEqual(counted[0]!.n, after.state.messages.length)
    }).pipe(Effect.provide(memory)))

  it.scoped("two connections to one database: the writer with a stale version gets VersionConflict and writes nothing", () =>
    Effect.gen(function*() {
      const filename = yield* engine.database
      const contextA = yield* Layer.build(engine.withSql(filename))
      const contextB = yield* Layer.build(engine.withSql(filename))
      const storeA = Context.get(contextA, Store.Store)
      const storeB = Context.get(contextB, Store.Store)
      const { steps } = journey("conv-two")
      yield* commitAll("conv-two", steps.slice(0, 1)).pipe(Effect.provide(contextA))
      // Both processes read version 1.
      const seenA = Option.getOrThrow(yield* storeA.load("conv-two"))
      const seenB = Option.getOrThrow(yield* storeB.load("conv-two"))
      assert.strictEqual(seenA.version, 1)
      assert.strictEqual(seenB.version, 1)
      yield* storeA.commitInput({
        conversationId: "conv-two",
        inputId: "x",
        expectedVersion: 1,
        next: appendUser(seenA.state, "A"),
        result: 1
      })
      const exit = yield* Effect.exit(storeB.commitInput({
        conversationId: "conv-two",
        inputId: "y",
        expectedVersion: 1,
        next: appendUser(appendUser(seenB.state, "B"), "B"),
        result: 2
      }))
      assert.strictEqual(failure(exit)._tag, "VersionConflict")
      const fromB = Option.getOrThrow(yield* storeB.load("conv-two"))
      assert.strictEqual(fromB.version, 2)
      assert.deepStrictEqual(fromB.state, appendUser(seenA.state, "A"))
      assert.isTrue(Option.isNone(yield* storeB.findInputCommit("conv-two", "y")))
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("a duplicate input id returns the recorded result and changes nothing", () =>
    Effect.gen(function*() {
      const store = yield* Store.Store
      const { steps } = journey("conv-dup")
      const version = yield* commitAll("conv-dup", steps.slice(0, 2))
      const before = yield* loadSome("conv-dup")
      const recorded = Option.getOrThrow(yield* store.findInputCommit("conv-dup", steps[1]!.inputId))
      assert.deepStrictEqual(recorded, { version: 2, result: steps[1]!.result })

      // Replayed with the version it was first applied at (stale now) and with the current one.
      for (const expectedVersion of [1, version]) {
        const exit = yield* Effect.exit(store.commitInput({
          conversationId: "conv-dup",
          expectedVersion,
          ...steps[1]!,
          next: appendUser(before.state, "must not be stored")
        }))
        const error = failure(exit)
        assert.strictEqual(error._tag, "DuplicateInput")
        if (error._tag === "DuplicateInput") {
          assert.strictEqual(error.version, 2)
          assert.deepStrictEqual(error.result, steps[1]!.result)
        }
      }
      assert.deepStrictEqual(yield* loadSome("conv-dup"), before)
      // The same input id in another conversation is another input.
      const other = journey("conv-dup-2").steps[0]!
      yield* store.commitInput({ conversationId: "conv-dup-2", expectedVersion: 0, ...other, inputId: steps[1]!.inputId })
    }).pipe(Effect.provide(memory)))

  it.scoped("save, close, reopen: the same state, the same bytes of every message, the same messagesHash", () =>
    Effect.gen(function*() {
      const database = yield* engine.database
      const { final, steps } = journey("conv-file")
      yield* commitAll("conv-file", steps).pipe(Effect.provide(engine.withSql(database)))
      if (engine.name === "SQLite") {
        const fs = yield* FileSystem.FileSystem
        assert.isTrue(yield* fs.exists(database))
      }

      const reopened = yield* Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const pragmas = engine.name !== "SQLite" ? undefined : {
          journal: (yield* sql<{ journal_mode: string }>`PRAGMA journal_mode`)[0]!.journal_mode,
          foreignKeys: (yield* sql<{ foreign_keys: number }>`PRAGMA foreign_keys`)[0]!.foreign_keys,
          synchronous: (yield* sql<{ synchronous: number }>`PRAGMA synchronous`)[0]!.synchronous
        }
        const migrations = yield* sql<{ migration_id: number }>`SELECT migration_id FROM effect_sql_migrations ORDER BY migration_id`
        const rows = yield* sql<{ message_json: string }>`
          SELECT message_json FROM messages WHERE conversation_id = 'conv-file' ORDER BY seq`
        return { loaded: yield* loadSome("conv-file"), pragmas, migrations, rows }
      }).pipe(Effect.provide(engine.withSql(database)))

      if (engine.name === "SQLite") assert.deepStrictEqual(reopened.pragmas, { journal: "wal", foreignKeys: 1, synchronous: 1 })
      // Every migration ran once, none again on reopening.
      assert.deepStrictEqual(reopened.migrations.map((m) => m.migration_id), engine.migrationIds)
      const { state, version } = reopened.loaded
      assert.strictEqual(version, steps.length)
      assert.deepStrictEqual(state, final)
      assert.strictEqual(state.messages.length, final.messages.length)
      state.messages.forEach((message, seq) => {
        assert.strictEqual(serializeMessage(message), serializeMessage(final.messages[seq]!))
        assert.strictEqual(reopened.rows[seq]!.message_json, serializeMessage(final.messages[seq]!))
      })
      assert.strictEqual(state.messagesHash, final.messagesHash)
      assert.strictEqual(messagesHash(state.messages), final.messagesHash)
    }).pipe(Effect.provide(NodeContext.layer)))

  it.effect("the exact request of a saved model call is rebuilt byte for byte from its references", () =>
    Effect.gen(function*() {
      const store = yield* Store.Store
      const { steps } = journey("conv-req")
      yield* commitAll("conv-req", steps)
      const calls = steps.flatMap((step) => step.llmCall === undefined ? [] : [step.llmCall])
      assert.strictEqual(calls.length, 3)
      for (const call of calls) {
        // Every call but the last was made on a prefix of the history now stored.
        const loaded = Option.getOrThrow(yield* store.loadLlmCall(call.callId))
        assert.strictEqual(canonicalJson(loaded.request), canonicalJson(call.request))
        assert.strictEqual(loaded.request.systemPrompt, call.request.systemPrompt)
        assert.deepStrictEqual(loaded.request.messages.map(serializeMessage), call.request.messages.map(serializeMessage))
        const rebuilt = requestHash(loaded.model, loaded.request, messagesHash(loaded.request.messages), loaded.messageCount)
        assert.strictEqual(rebuilt, call.requestHash)
        assert.strictEqual(loaded.requestHash, call.requestHash)
        assert.strictEqual(loaded.messageCount, call.request.messages.length)
        assert.strictEqual(loaded.status, "committed")
      }
      // The prompt and tool list are stored once however many calls use them.
      const sql = yield* SqlClient.SqlClient
      const parts = yield* sql<{ n: number }>`SELECT count(*) AS n FROM request_parts`
      assert.strictEqual(parts[0]!.n, 1 + new Set(calls.map((c) => c.request.systemPrompt)).size)
      assert.isTrue(Option.isNone(yield* store.loadLlmCall("no-such-call")))
    }).pipe(Effect.provide(memory)))

  it.effect("a call whose hashes do not match its request is refused before anything is written", () =>
    Effect.gen(function*() {
      const store = yield* Store.Store
      const { steps } = journey("conv-badcall")
      const first = steps[0]!
      const exit = yield* Effect.exit(store.commitInput({
        conversationId: "conv-badcall",
        expectedVersion: 0,
        ...first,
        llmCall: { ...first.llmCall!, requestHash: "0".repeat(64) }
      }))
      assert.strictEqual(failure(exit)._tag, "InvalidCommit")
      assert.isTrue(Option.isNone(yield* store.load("conv-badcall")))
    }).pipe(Effect.provide(memory)))

  describe("bad data is a typed error naming the conversation and seq", () => {
    const damaged = (damage: (sql: SqlClient.SqlClient) => Effect.Effect<unknown, unknown>) =>
      Effect.gen(function*() {
        const store = yield* Store.Store
        const sql = yield* SqlClient.SqlClient
        yield* commitAll("conv-bad", journey("conv-bad").steps)
        // Damage from outside the store: the triggers that guard history have to go first.
        yield* engine.dropHistoryGuards(sql)
        yield* damage(sql).pipe(Effect.orDie)
        return yield* Effect.exit(store.load("conv-bad"))
      }).pipe(Effect.provide(memory))

    const expectCorrupt = (exit: Exit.Exit<unknown, unknown>, expected: { table: string; seq: number | null }) => {
      const error = failure(exit) as Store.CorruptRow
      assert.strictEqual(error._tag, "CorruptRow")
      assert.strictEqual(error.conversationId, "conv-bad")
      assert.strictEqual(error.table, expected.table)
      assert.strictEqual(error.seq, expected.seq)
      assert.include(error.message, "conv-bad")
      return error
    }

    it.effect("a message that is not JSON", () =>
      Effect.gen(function*() {
        const exit = yield* damaged((sql) => sql`UPDATE messages SET message_json = '{"role":' WHERE seq = 2`)
        assert.include(expectCorrupt(exit, { table: "messages", seq: 2 }).reason, "invalid JSON")
      }))

    it.effect("a message that fails schema decoding", () =>
      Effect.gen(function*() {
        const exit = yield* damaged((sql) =>
          sql`UPDATE messages SET message_json = '{"role":"assistant","content":"not an array"}' WHERE seq = 1`
        )
        expectCorrupt(exit, { table: "messages", seq: 1 })
      }))

    it.effect("a message whose bytes no longer match its hash", () =>
      Effect.gen(function*() {
        const exit = yield* damaged((sql) =>
          sql`UPDATE messages SET message_json = ${serializeMessage(user("tampered"))} WHERE seq = 0`
        )
        assert.include(expectCorrupt(exit, { table: "messages", seq: 0 }).reason, "hash")
      }))

    it.effect("a message that is not in canonical form", () =>
      Effect.gen(function*() {
        const exit = yield* damaged((sql) =>
          sql`UPDATE messages SET message_json = '{"role":"user","content":[{"type":"text","text":"x"}],"extra":1}' WHERE seq = 0`
        )
        expectCorrupt(exit, { table: "messages", seq: 0 })
      }))

    it.effect("a missing message", () =>
      Effect.gen(function*() {
        const exit = yield* damaged((sql) =>
          sql`DELETE FROM messages WHERE seq = 3`
        )
        expectCorrupt(exit, { table: "messages", seq: 3 })
      }))

    it.effect("a conversation row with a bad state column", () =>
      Effect.gen(function*() {
        const exit = yield* damaged((sql) => sql`UPDATE conversations SET state_json = '{"turnSeq":"two"}'`)
        expectCorrupt(exit, { table: "conversations", seq: null })
      }))

    it.effect("a history hash that does not match the rows", () =>
      Effect.gen(function*() {
        const exit = yield* damaged((sql) => sql`UPDATE conversations SET messages_hash = ${"f".repeat(64)}`)
        expectCorrupt(exit, { table: "messages", seq: null })
      }))

    it.effect("a saved call whose tool list was damaged, or whose request hash is wrong", () =>
      Effect.gen(function*() {
        const store = yield* Store.Store
        const sql = yield* SqlClient.SqlClient
        const { steps } = journey("conv-bad")
        yield* commitAll("conv-bad", steps)
        const callId = steps[0]!.llmCall!.callId
        yield* sql`UPDATE llm_calls SET request_hash = ${"a".repeat(64)} WHERE call_id = ${callId}`
        const mismatch = failure(yield* Effect.exit(store.loadLlmCall(callId)))
        assert.strictEqual(mismatch._tag, "RequestHashMismatch")
        yield* sql`UPDATE request_parts SET body = '[{"name":1}]' WHERE body LIKE '[%'`
        const corrupt = failure(yield* Effect.exit(store.loadLlmCall(callId)))
        assert.strictEqual(corrupt._tag, "CorruptRow")
      }).pipe(Effect.provide(memory)))
  })

  describe("history is append-only", () => {
    it.effect("a next state with fewer messages is refused and nothing changes", () =>
      Effect.gen(function*() {
        const store = yield* Store.Store
        const { steps } = journey("conv-ao")
        const version = yield* commitAll("conv-ao", steps)
        const before = yield* loadSome("conv-ao")
        const shorter = before.state.messages.slice(0, -1)
        const exit = yield* Effect.exit(store.commitInput({
          conversationId: "conv-ao",
          inputId: "shrink",
          expectedVersion: version,
          next: { ...before.state, messages: shorter, messagesHash: messagesHash(shorter) },
          result: null
        }))
        const error = failure(exit)
        assert.strictEqual(error._tag, "HistoryRewritten")
        assert.deepStrictEqual(yield* loadSome("conv-ao"), before)
        assert.isTrue(Option.isNone(yield* store.findInputCommit("conv-ao", "shrink")))
      }).pipe(Effect.provide(memory)))

    it.effect("a next state that changed an old message is refused, even with a recomputed hash", () =>
      Effect.gen(function*() {
        const store = yield* Store.Store
        const { steps } = journey("conv-ao")
        const version = yield* commitAll("conv-ao", steps)
        const before = yield* loadSome("conv-ao")
        const rewritten = [user("a different first message"), ...before.state.messages.slice(1), user("new")]
        const exit = yield* Effect.exit(store.commitInput({
          conversationId: "conv-ao",
          inputId: "rewrite",
          expectedVersion: version,
          next: { ...before.state, messages: rewritten, messagesHash: messagesHash(rewritten) },
          result: null
        }))
        assert.strictEqual(failure(exit)._tag, "HistoryRewritten")
        assert.deepStrictEqual(yield* loadSome("conv-ao"), before)
      }).pipe(Effect.provide(memory)))

    it.effect("the database refuses to update or delete a stored message", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* commitAll("conv-ao", journey("conv-ao").steps)
        const update = yield* Effect.exit(sql`UPDATE messages SET message_json = 'x' WHERE seq = 0`)
        const remove = yield* Effect.exit(sql`DELETE FROM messages WHERE seq = 0`)
        for (const exit of [update, remove]) {
          const error = failure(exit)
          assert.include(String((error.cause as Error).message), "append-only")
        }
        const loaded = yield* loadSome("conv-ao")
        assert.strictEqual(loaded.state.messages.length, journey("conv-ao").final.messages.length)
      }).pipe(Effect.provide(memory)))
  })

  it.effect("a committed call's cost is stored with it and summed per turn and conversation; calls not committed do not count", () =>
    Effect.gen(function*() {
      const store = yield* Store.Store
      const { steps } = journey("conv-cost")
      const priced = steps.map((step, i) =>
        i === 1 && step.llmCallUpdate !== undefined ? { ...step, llmCallUpdate: { ...step.llmCallUpdate, costUsd: 0.25 } } : step
      )
      yield* commitAll("conv-cost", priced.slice(0, 1))
      assert.deepStrictEqual(yield* store.costs("conv-cost"), { conversationId: "conv-cost", usd: 0, calls: 0, pricedCalls: 0, turns: [] })
      yield* commitAll("conv-cost", priced.slice(1, 2), 1)
      const costs = yield* store.costs("conv-cost")
      assert.strictEqual(costs.usd, 0.25)
      assert.strictEqual(costs.calls, 1)
      assert.strictEqual(costs.pricedCalls, 1)
      assert.deepStrictEqual(costs.turns.map((t) => t.usd), [0.25])
    }).pipe(Effect.provide(memory)))

  it.effect("in-flight listing follows model calls and operations through their lifecycle", () =>
    Effect.gen(function*() {
      const store = yield* Store.Store
      const { steps } = journey("conv-fly")
      const inFlight = () =>
        Effect.map(store.listInFlight(), (f) => ({
          calls: f.llmCalls.map((c) => `${c.callId}:${c.status}`),
          operations: f.operations.map((o) => `${o.operationId}:${o.status}`)
        }))
      const callId = steps[0]!.llmCall!.callId
      yield* commitAll("conv-fly", steps.slice(0, 1))
      assert.deepStrictEqual(yield* inFlight(), { calls: [`${callId}:planned`], operations: [] })
      yield* store.markLlmCall(callId, "streaming")
      assert.deepStrictEqual(yield* inFlight(), { calls: [`${callId}:streaming`], operations: [] })

      // The Done commit marks the call committed and plans the first tool call.
      yield* commitAll("conv-fly", steps.slice(1, 2), 1)
      const operation = steps[1]!.clientOperations![0]!
      assert.deepStrictEqual(yield* inFlight(), { calls: [], operations: [`${operation.operationId}:planned`] })
      const call = Option.getOrThrow(yield* store.loadLlmCall(callId))
      assert.strictEqual(call.status, "committed")
      assert.strictEqual(call.assistantHash, steps[1]!.llmCallUpdate!.assistantHash)
      assert.deepStrictEqual(call.usage, steps[1]!.llmCallUpdate!.usage)

      yield* store.markOperationSent(operation.operationId)
      assert.deepStrictEqual(yield* inFlight(), { calls: [], operations: [`${operation.operationId}:sent`] })
      // The tool result commit completes the operation and plans the next one.
      yield* commitAll("conv-fly", steps.slice(2, 3), 2)
      const completed = Option.getOrThrow(yield* store.loadOperation(operation.operationId))
      assert.strictEqual(completed.status, "completed")
      assert.deepStrictEqual(completed.result, steps[2]!.operationCompletion!.result)
      const nextOperation = steps[2]!.clientOperations![0]!
      assert.deepStrictEqual(yield* inFlight(), { calls: [], operations: [`${nextOperation.operationId}:planned`] })
      assert.isFalse((yield* store.listInFlight()).operations[0]!.idempotent)
    }).pipe(Effect.provide(memory)))

  it.effect("operations: planned, sent, completed once; canceled stays canceled; unknown ids are NotFound", () =>
    Effect.gen(function*() {
      const store = yield* Store.Store
      const { steps } = journey("conv-ops")
      yield* commitAll("conv-ops", steps.slice(0, 1))
      const base = { conversationId: "conv-ops", turnId: "conv-ops/t1", kind: "read", idempotent: true }
      yield* store.saveOperations([
        { ...base, operationId: "op-1", toolCallId: "a", toolIndex: 0, request: { path: "é.ts", n: [1, 2] } },
        { ...base, operationId: "op-2", toolCallId: "b", toolIndex: 1, request: null }
      ])
      // Saving again keeps the first record.
      yield* store.saveOperations([{ ...base, operationId: "op-1", toolCallId: "z", toolIndex: 9, request: "other" }])
      const planned = Option.getOrThrow(yield* store.loadOperation("op-1"))
      assert.deepStrictEqual(planned, {
        operationId: "op-1",
        conversationId: "conv-ops",
        turnId: "conv-ops/t1",
        toolCallId: "a",
        toolIndex: 0,
        kind: "read",
        idempotent: true,
        status: "planned",
        request: { path: "é.ts", n: [1, 2] },
        result: null
      })
      assert.strictEqual((yield* store.markOperationSent("op-1")).status, "sent")
      assert.strictEqual((yield* store.markOperationSent("op-1")).status, "sent")
      const done = yield* store.completeOperation("op-1", { text: "first" })
      assert.deepStrictEqual([done.status, done.result], ["completed", { text: "first" }])
      // A late duplicate result and a cancel after completion change nothing.
      const again = yield* store.completeOperation("op-1", { text: "second" })
      assert.deepStrictEqual(again.result, { text: "first" })
      assert.strictEqual((yield* store.cancelOperation("op-1")).status, "completed")
      assert.strictEqual((yield* store.markOperationSent("op-1")).status, "completed")

      assert.strictEqual((yield* store.cancelOperation("op-2")).status, "canceled")
      const late = yield* store.completeOperation("op-2", "late")
      assert.deepStrictEqual([late.status, late.result], ["canceled", null])

      for (const attempt of [store.markOperationSent("nope"), store.completeOperation("nope", 1), store.cancelOperation("nope")]) {
        const error = failure(yield* Effect.exit(attempt))
        assert.deepStrictEqual(fieldsOf(error), { _tag: "NotFound", entity: "operation", id: "nope" })
      }
      const missingCall = failure(yield* Effect.exit(store.markLlmCall("nope", "failed", { error: "x" })))
      assert.deepStrictEqual(fieldsOf(missingCall), { _tag: "NotFound", entity: "llmCall", id: "nope" })
      assert.isTrue(Option.isNone(yield* store.loadOperation("nope")))
    }).pipe(Effect.provide(memory)))

  it.effect("markLlmCall records failure details and keeps earlier ones", () =>
    Effect.gen(function*() {
      const store = yield* Store.Store
      const { steps } = journey("conv-mark")
      yield* commitAll("conv-mark", steps.slice(0, 1))
      const callId = steps[0]!.llmCall!.callId
      yield* store.markLlmCall(callId, "streaming", { usage: { input: 1, output: 2, cacheRead: 3, cacheWrite: 4, reasoning: 0 } })
      yield* store.markLlmCall(callId, "failed", { error: "HTTP 500" })
      const call = Option.getOrThrow(yield* store.loadLlmCall(callId))
      assert.strictEqual(call.status, "failed")
      assert.strictEqual(call.error, "HTTP 500")
      assert.deepStrictEqual(call.usage, { input: 1, output: 2, cacheRead: 3, cacheWrite: 4, reasoning: 0 })
      assert.isNull(call.assistantHash)
    }).pipe(Effect.provide(memory)))

  it.effect("saveLlmCall outside a commit: the same call saved twice is one call, another request under its id is refused", () =>
    Effect.gen(function*() {
      const store = yield* Store.Store
      const { steps } = journey("conv-save")
      yield* commitAll("conv-save", steps.slice(0, 1))
      const call = steps[0]!.llmCall!
      yield* store.saveLlmCall(call)
      const request = { ...call.request, systemPrompt: "another prompt" }
      const other = {
        ...call,
        request,
        requestHash: requestHash(call.model, request, call.messagesHash, request.messages.length)
      }
      assert.strictEqual(failure(yield* Effect.exit(store.saveLlmCall(other)))._tag, "InvalidCommit")
      const elsewhere = { ...call, conversationId: "no-such-conversation" }
      assert.strictEqual(failure(yield* Effect.exit(store.saveLlmCall(elsewhere)))._tag, "InvalidCommit")
      const loaded = Option.getOrThrow(yield* store.loadLlmCall(call.callId))
      assert.strictEqual(loaded.request.systemPrompt, call.request.systemPrompt)
    }).pipe(Effect.provide(memory)))

  it.effect("stream diagnostics append once per event index", () =>
    Effect.gen(function*() {
      const store = yield* Store.Store
      const sql = yield* SqlClient.SqlClient
      yield* store.appendDiagnostic("c", 0, { _tag: "TextDelta", index: 0, delta: "a" })
      yield* store.appendDiagnostic("c", 0, { _tag: "TextDelta", index: 0, delta: "b" })
      yield* store.appendDiagnostic("c", 1, { _tag: "Done" })
      const rows = yield* sql<{ event_json: string }>`SELECT event_json FROM stream_diagnostics ORDER BY event_index`
      assert.deepStrictEqual(rows.map((r) => r.event_json), [
        `{"_tag":"TextDelta","delta":"a","index":0}`,
        `{"_tag":"Done"}`
      ])
    }).pipe(Effect.provide(memory)))

  describe("turn starts: which input started each turn, found by input id prefix", () => {
    /** The journey's steps with input ids as the transport makes them for its two turn starts, and others elsewhere. */
    const requestSteps = (conversationId: string, startIds: readonly [string, string]) => {
      const { steps } = journey(conversationId)
      const starts = steps.flatMap((step, i) => (i === 0 || step.next.turnId !== steps[i - 1]!.next.turnId ? [i] : []))
      assert.strictEqual(starts.length, 2)
      return {
        starts,
        steps: steps.map((step, i) => ({ ...step, inputId: i === starts[0] ? startIds[0] : i === starts[1] ? startIds[1] : `${conversationId}/derived:${i}` }))
      }
    }

    it.effect("a turn's first commit records its input; a request's turns come back newest first; other commits and duplicates record nothing", () =>
      Effect.gen(function*() {
        const store = yield* Store.Store
        const { starts, steps } = requestSteps("conv-ts", ["req-a/msg-1:0", "req-a/msg-2:0"])
        yield* commitAll("conv-ts", steps)
        const found = yield* store.findTurnStarts("req-a/")
        assert.deepStrictEqual(found.map(({ conversationId, inputId, turnId, version }) => ({ conversationId, turnId, inputId, version })), [
          { conversationId: "conv-ts", turnId: turnIdOf("conv-ts", 2), inputId: "req-a/msg-2:0", version: starts[1]! + 1 },
          { conversationId: "conv-ts", turnId: turnIdOf("conv-ts", 1), inputId: "req-a/msg-1:0", version: starts[0]! + 1 }
        ])
        assert.deepStrictEqual(yield* store.findTurnStarts("conv-ts/"), [], "commits that start no turn record none")
        // The start applied again: DuplicateInput, and still one record per turn.
        const again = yield* Effect.exit(store.commitInput({ conversationId: "conv-ts", expectedVersion: starts[1]!, ...steps[starts[1]!]! }))
        assert.strictEqual(failure(again)._tag, "DuplicateInput")
        assert.strictEqual((yield* store.findTurnStarts("req-a/")).length, 2)
      }).pipe(Effect.provide(memory)))

    it.effect("the prefix is exact: ids that sort next to it (a longer request id, the next character, non-ASCII) are not returned", () =>
      Effect.gen(function*() {
        const store = yield* Store.Store
        const cases: ReadonlyArray<readonly [string, readonly [string, string]]> = [
          ["conv-p1", ["req/m1:0", "req/m2:0"]],
          ["conv-p2", ["req0/m1:0", "req./m2:0"]],
          ["conv-p3", ["reqa/m1:0", "re/m2:0"]],
          ["conv-p4", ["rêq/m1:0", "réq/m2:0"]],
          ["conv-p5", ["réq0/m1:0", "rép/m2:0"]]
        ]
        for (const [conversationId, ids] of cases) yield* commitAll(conversationId, requestSteps(conversationId, ids).steps)
        const ids = (prefix: string) => Effect.map(store.findTurnStarts(prefix), (found) => found.map((start) => start.inputId))
        assert.deepStrictEqual(yield* ids("req/"), ["req/m2:0", "req/m1:0"])
        assert.deepStrictEqual(yield* ids("réq/"), ["réq/m2:0"])
        assert.deepStrictEqual(yield* ids("rêq/"), ["rêq/m1:0"])
        assert.deepStrictEqual(yield* ids("nobody/"), [])
        assert.deepStrictEqual(yield* ids("\u{10FFFF}"), [], "no upper bound: the prefix test alone")
        // The range uses the input_id index.
        const sql = yield* SqlClient.SqlClient
        if (engine.name === "SQLite") {
          const plan = yield* sql<{ detail: string }>`EXPLAIN QUERY PLAN SELECT * FROM turn_starts WHERE input_id >= 'req/' AND input_id < 'req0'`
          assert.isTrue(plan.some((row) => row.detail.includes("turn_starts_input")), JSON.stringify(plan))
        } else {
          // PostgreSQL plans a scan of a table this small; with scans off it must find the index (the "C" collation makes it usable for the range).
          yield* sql`SET enable_seqscan = off`
          const plan = yield* sql<{ "QUERY PLAN": string }>`EXPLAIN SELECT * FROM turn_starts WHERE input_id >= 'req/' AND input_id < 'req0'`
          yield* sql`SET enable_seqscan = on`
          assert.isTrue(plan.some((row) => row["QUERY PLAN"].includes("turn_starts_input")), JSON.stringify(plan))
        }
      }).pipe(Effect.provide(memory)))

    it("the range's upper bound is the prefix with its last code point raised (surrogates skipped, U+10FFFF carried)", () => {
      assert.strictEqual(prefixUpperBound("req/"), "req0")
      assert.strictEqual(prefixUpperBound("é"), "ê")
      assert.strictEqual(prefixUpperBound("a\uD7FF"), "a\uE000")
      assert.strictEqual(prefixUpperBound("a\u{10FFFF}"), "b")
      assert.strictEqual(prefixUpperBound("\u{10FFFF}"), undefined)
    })

    if (engine.name === "SQLite") it.scoped("a database made before turn starts were recorded is upgraded in place: 0002 to 0004 run once, later turns record their starts", () =>
      Effect.gen(function*() {
        const filename = yield* tempDatabase
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        yield* fs.makeDirectory(path.dirname(filename), { recursive: true })
        yield* SqliteMigrator.run({ loader: SqliteMigrator.fromRecord({ "0001_init": migrations["0001_init"] }) }).pipe(
          Effect.provide(SqliteClient.layer({ filename }))
        )
        const { steps } = requestSteps("conv-old", ["req-old/m1:0", "req-old/m2:0"])
        const result = yield* Effect.gen(function*() {
          const store = yield* Store.Store
          const sql = yield* SqlClient.SqlClient
          const migrated = yield* sql<{ migration_id: number }>`SELECT migration_id FROM effect_sql_migrations ORDER BY migration_id`
          yield* commitAll("conv-old", steps)
          return { migrated: migrated.map((m) => m.migration_id), found: yield* store.findTurnStarts("req-old/") }
        }).pipe(Effect.provide(withSql(filename)))
        assert.deepStrictEqual(result.migrated, [1, 2, 3, 4, 5, 6, 7, 8])
        assert.deepStrictEqual(result.found.map((start) => start.inputId), ["req-old/m2:0", "req-old/m1:0"])
      }).pipe(Effect.provide(NodeContext.layer)))
  })

  describe("turn settings: typed, and rows in the untyped shape of earlier releases still load", () => {
    /** Settings with every field set, as `Dialect.decodeRunRequest` and the transport fill them. */
    const fullSettings: TurnSettings = {
      model: "claude-x",
      mode: "ask",
      workspace: { workspacePaths: ["/w/é"], projectFolder: "/w/é", osVersion: "linux 6.1", shell: "bash", timeZone: "Europe/Paris", terminalsFolder: "/t" },
      mcpTools: [{
        name: "gh",
        description: "GitHub search",
        providerIdentifier: "github",
        toolName: "search",
        inputSchema: { type: "object", properties: { q: { type: "string" } }, required: ["q"] }
      }],
      rules: [{ path: ".cursor/rules/a.mdc", content: "use tabs" }, { path: "", content: "user rule" }],
      customSystemPrompt: "be brief",
      modelParameters: { thinking_effort: "high" },
      maxMode: false,
      requestId: "req-1",
      userMessageId: "msg-1",
      carriedCheckpoint: "EgQKAnQx"
    }
    const { model: _model, ...fullOptions } = fullSettings
    /** What state_json holds of them: the MCP tools and rules named by request parts, the SHA-256 of their canonical JSON. */
    const partName = (list: unknown) => `settings:${createHash("sha256").update(canonicalJson(list)).digest("hex")}`
    const { mcpTools: _mcpTools, rules: _rules, ...inlineSettings } = fullSettings
    const storedSettings = { ...inlineSettings, mcpToolsPart: partName(fullSettings.mcpTools), rulesPart: partName(fullSettings.rules) }

    const turnMessage = user("fix the bug")

    /** The state fields column as the release before typed settings wrote it (canonical JSON, settings untyped). */
    const untypedStateJson = (options: Record<string, unknown>) =>
      canonicalJson({ activeCallId: null, llmCallSeq: 1, queued: [], settings: { model: "claude-x", options }, turnSeq: 1, turnStart: 0 })

    /** A database as the earlier release left it: its migrations run, and one conversation row with its message, written by hand. */
    const untypedDatabase = (conversationId: string, options: Record<string, unknown>) =>
      Effect.gen(function*() {
        const filename = yield* tempDatabase
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        yield* fs.makeDirectory(path.dirname(filename), { recursive: true })
        yield* Effect.gen(function*() {
          yield* SqliteMigrator.run({ loader: SqliteMigrator.fromRecord(migrations) })
          const sql = yield* SqlClient.SqlClient
          yield* sql`
            INSERT INTO conversations (conversation_id, version, status, turn_id, message_count, messages_hash, waiting_json, state_json, updated_at_ms)
            VALUES (${conversationId}, 2, 'final', ${turnIdOf(conversationId, 1)}, 1, ${messagesHash([turnMessage])}, NULL, ${untypedStateJson(options)}, 0)`
          yield* sql`
            INSERT INTO messages (conversation_id, seq, message_json, hash)
            VALUES (${conversationId}, 0, ${serializeMessage(turnMessage)}, ${messageHash(turnMessage)})`
        }).pipe(Effect.provide(SqliteClient.layer({ filename })))
        return filename
      })

    const storedSettingsOf = (conversationId: string) =>
      Effect.flatMap(SqlClient.SqlClient, (sql) =>
        sql<{ state_json: string }>`SELECT state_json FROM conversations WHERE conversation_id = ${conversationId}`).pipe(
          Effect.map((rows) => (JSON.parse(rows[0]!.state_json) as { settings: unknown }).settings)
        )

    it.effect("new rows: every typed field commits and loads back equal, stored as typed JSON", () =>
      Effect.gen(function*() {
        const state = appendUser({ ...initialConversation("conv-typed"), status: "final", turnSeq: 1, turnId: turnIdOf("conv-typed", 1), settings: fullSettings }, "fix the bug")
        yield* Effect.flatMap(Store.Store, (store) => store.commitInput({ conversationId: "conv-typed", inputId: "i1", expectedVersion: 0, next: state, result: null }))
        const loaded = yield* loadSome("conv-typed")
        assert.deepStrictEqual(loaded.state, state)
        assert.deepStrictEqual(yield* storedSettingsOf("conv-typed"), storedSettings)
        // Only the model is required.
        const bare = { ...state, settings: { model: "m" } }
        yield* Effect.flatMap(Store.Store, (store) => store.commitInput({ conversationId: "conv-typed", inputId: "i2", expectedVersion: 1, next: bare, result: null }))
        assert.deepStrictEqual((yield* loadSome("conv-typed")).state.settings, { model: "m" })
      }).pipe(Effect.provide(memory)))

    if (engine.name === "SQLite") it.scoped("an untyped row from an earlier release loads with typed settings, and its next commit stores them typed", () =>
      Effect.gen(function*() {
        const filename = yield* untypedDatabase("conv-untyped", fullOptions)
        yield* Effect.gen(function*() {
          const store = yield* Store.Store
          const loaded = yield* loadSome("conv-untyped")
          assert.strictEqual(loaded.version, 2)
          assert.deepStrictEqual(loaded.state.settings, fullSettings)
          assert.deepStrictEqual(loaded.state.messages, [turnMessage])
          assert.deepStrictEqual((yield* storedSettingsOf("conv-untyped")), { model: "claude-x", options: fullOptions }, "loading rewrites nothing")
          const next = appendUser(loaded.state, "and the tests")
          yield* store.commitInput({ conversationId: "conv-untyped", inputId: "i3", expectedVersion: 2, next, result: null })
          assert.deepStrictEqual(yield* storedSettingsOf("conv-untyped"), storedSettings)
          assert.deepStrictEqual((yield* loadSome("conv-untyped")).state, next)
        }).pipe(Effect.provide(withSql(filename)))
      }).pipe(Effect.provide(NodeContext.layer)))

    if (engine.name === "SQLite") it.scoped("an untyped option of the wrong type or an unknown key is left out, as the old readers ignored it: the same prompt and tools", () =>
      Effect.gen(function*() {
        const filename = yield* untypedDatabase("conv-odd", {
          mode: "freestyle",
          workspace: "/home/u/é",
          rules: "none",
          mcpTools: { gh: true },
          requestId: 7,
          userMessageId: "msg-2",
          customSystemPrompt: "be brief",
          somethingElse: { a: 1 }
        })
        const loaded = yield* loadSome("conv-odd").pipe(Effect.provide(withSql(filename)))
        const settings = { model: "claude-x", userMessageId: "msg-2", customSystemPrompt: "be brief" }
        assert.deepStrictEqual(loaded.state.settings, settings)
        // What the old readers made of these options: agent mode, no environment, no rules, no MCP tools.
        const context = { conversationId: "conv-odd", turnId: loaded.state.turnId, settings: loaded.state.settings! }
        assert.strictEqual(Prompt.buildPrompt(context), Prompt.buildPrompt({ ...context, settings: { model: "claude-x", mode: "agent", customSystemPrompt: "be brief" } }))
        assert.deepStrictEqual(Prompt.buildTools(context).map((tool) => tool.name), Prompt.buildTools({ ...context, settings: { model: "claude-x", mode: "agent" } }).map((tool) => tool.name))
      }).pipe(Effect.provide(NodeContext.layer)))
  })

  it.effect("a commit for another conversation's state is refused", () =>
    Effect.gen(function*() {
      const store = yield* Store.Store
      const step = journey("conv-x").steps[0]!
      const exit = yield* Effect.exit(store.commitInput({ conversationId: "conv-y", expectedVersion: 0, ...step }))
      assert.strictEqual(failure(exit)._tag, "InvalidCommit")
    }).pipe(Effect.provide(memory)))
})
