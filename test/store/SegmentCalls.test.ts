/**
 * The model calls of segments, in the store: a summary call keeps its whole request (the
 * history plus the instruction, or the elided history after an overflow), an answer after a
 * compaction is rebuilt from the new segment's rows, and a database from before segments loads
 * as the origin segment and can then compact.
 */
import { assert, describe, it } from "@effect/vitest"
import { NodeContext } from "@effect/platform-node"
import { SqlClient } from "@effect/sql"
import { SqliteClient, SqliteMigrator } from "@effect/sql-sqlite-node"
import { Effect, Option } from "effect"
import {
  canonicalJson,
  messageHash,
  messagesHash,
  requestHash,
  serializeMessage,
  systemPromptHash,
  toolsHash
} from "../../src/Llm.js"
import {
  Input,
  originSegment,
  summaryInstruction,
  summaryMessage,
  unknownContextSize
} from "../../src/Loop.js"
import * as Store from "../../src/Store.js"
import { migrations } from "../../src/store/migrations.js"
import { journey } from "./journey.js"
import {
  loadSome,
  journalOf,
  segmentsOf,
  failure,
  serialized,
  knobs,
  policyWith,
  manualPolicy,
  settings,
  user,
  answer,
  text,
  readCall,
  readResult,
  expectTag,
  makeDriver,
  twoTurnsThenSummarize
} from "./segmentsHarness.js"
import { engines } from "./engines.js"

describe.each(engines)("Store: the model calls of segments, on $name", (engine) => {
  const { database: tempDatabase, withSql } = engine
  it.scoped("the summary call is saved (detached, whole) in the same commit as the transition that plans it; loadLlmCall returns exactly its request and verifies it; a damaged messages part is CorruptRow or RequestHashMismatch, never returned", () =>
    Effect.gen(function*() {
      const filename = yield* tempDatabase
      yield* Effect.gen(function*() {
        const store = yield* Store.Store
        const sql = yield* SqlClient.SqlClient
        const d = yield* makeDriver("conv-s", manualPolicy)
        yield* d.turn("first question", "first answer")
        yield* d.turn("second question", "second answer")
        const history = d.state.messages

        const prepared = d.prepare(Input.Summarize({ instructions: "keep the file names", settings }))
        const command = expectTag(prepared.t.command, "CallLlm")
        assert.strictEqual(command.purpose, "summary")
        assert.strictEqual(command.maxOutputTokens, 321)
        assert.deepStrictEqual(serialized(command.request.messages), serialized([...history, summaryInstruction("keep the file names")]))
        const commit = prepared.commit!
        assert.isTrue(commit.llmCall!.detached)
        assert.strictEqual(commit.llmCall!.callId, command.callId)

        // The same commit lost to another writer: no call either.
        const lost = yield* Effect.exit(store.commitInput({ ...commit, expectedVersion: commit.expectedVersion - 1 }))
        assert.strictEqual(failure(lost)._tag, "VersionConflict")
        assert.isTrue(Option.isNone(yield* store.loadLlmCall(command.callId)))

        yield* d.apply(prepared)
        const version = d.version
        const recorded = Option.getOrThrow(yield* store.findInputCommit("conv-s", commit.inputId))
        assert.strictEqual(recorded.version, version)
        const callRow = (yield* sql<{ messages_part_hash: string | null; segment_start: number; message_count: number; status: string }>`
          SELECT messages_part_hash, segment_start, message_count, status FROM llm_calls WHERE call_id = ${command.callId}`)[0]!
        assert.deepStrictEqual({ ...callRow, segment_start: Number(callRow.segment_start), message_count: Number(callRow.message_count) }, {
          messages_part_hash: `messages:${command.messagesHash}`,
          segment_start: 0,
          message_count: history.length + 1,
          status: "planned"
        })

        const loaded = Option.getOrThrow(yield* store.loadLlmCall(command.callId))
        assert.strictEqual(canonicalJson(loaded.request), canonicalJson(command.request))
        assert.deepStrictEqual(serialized(loaded.request.messages), serialized(command.request.messages))
        assert.strictEqual(loaded.messagesHash, command.messagesHash)
        assert.strictEqual(messagesHash(loaded.request.messages), command.messagesHash)
        assert.strictEqual(loaded.requestHash, requestHash(command.model, command.request, command.messagesHash, command.request.messages.length))
        assert.strictEqual(loaded.messageCount, history.length + 1)

        // The summary commits: the call is settled, its request still loads whole (no journal rows hold the instruction).
        yield* d.done(answer([text("A summary.")]))
        assert.strictEqual(d.state.segment.kind, "compaction")
        const settled = Option.getOrThrow(yield* store.loadLlmCall(command.callId))
        assert.strictEqual(settled.status, "committed")
        assert.strictEqual(canonicalJson(settled.request), canonicalJson(command.request))

        // Damage the part from outside: bad JSON, JSON that is not messages, other messages.
        const part = `messages:${command.messagesHash}`
        const damaged = (body: string) =>
          Effect.gen(function*() {
            yield* sql`UPDATE request_parts SET body = ${body} WHERE hash = ${part}`
            const exit = yield* Effect.exit(store.loadLlmCall(command.callId))
            return failure(exit)._tag
          })
        assert.strictEqual(yield* damaged("[{\"role\":"), "CorruptRow")
        assert.strictEqual(yield* damaged(`{"role":"user"}`), "CorruptRow")
        assert.strictEqual(yield* damaged(canonicalJson([{ role: "assistant" }])), "CorruptRow")
        assert.strictEqual(yield* damaged(canonicalJson(history)), "RequestHashMismatch")
        assert.strictEqual(yield* damaged(canonicalJson([...history, summaryInstruction("other instructions")])), "RequestHashMismatch")
        const deleted = yield* Effect.gen(function*() {
          yield* engine.withoutForeignKeys(sql, sql`DELETE FROM request_parts WHERE hash = ${part}`)
          return failure(yield* Effect.exit(store.loadLlmCall(command.callId)))._tag
        })
        assert.strictEqual(deleted, "CorruptRow")
      }).pipe(Effect.provide(withSql(filename)))
    }).pipe(Effect.provide(NodeContext.layer)))

  it.scoped("an overflow's summary call stores the elided messages it sent, not the history; loadLlmCall returns exactly those", () =>
    Effect.gen(function*() {
      const filename = yield* tempDatabase
      yield* Effect.gen(function*() {
        const store = yield* Store.Store
        const d = yield* makeDriver("conv-o", manualPolicy)
        const call = readCall("log")
        const longOutput = "x".repeat(200)
        yield* d.feed(Input.Start({ message: user("read the log"), context: [], settings }))
        yield* d.done(answer([call], 10, "toolUse"))
        yield* d.feed(Input.ToolResult({ message: readResult("log", longOutput) }))
        yield* d.done(answer([text("the log is long")]))
        const answerCall = expectTag((yield* d.feed(Input.Start({ message: user("and now?"), context: [], settings }))).command, "CallLlm")
        const history = d.state.messages

        const prepared = d.prepare(Input.LlmEvent({
          callId: answerCall.callId,
          event: { _tag: "Error", reason: "error", message: "prompt is too long", retryable: false, code: "contextOverflow" }
        }))
        const command = expectTag(prepared.t.command, "CallLlm")
        assert.strictEqual(command.purpose, "summary")
        assert.strictEqual(prepared.t.state.committed.compaction!.trigger, "overflow")
        // The tool output before the tail is elided in what is sent; the history keeps it.
        const sent = command.request.messages[2]!
        assert.strictEqual(sent.role, "toolResult")
        assert.include(JSON.stringify(sent.content), "characters of tool output elided")
        assert.notStrictEqual(serializeMessage(sent), serializeMessage(history[2]!))
        assert.strictEqual(command.messagesHash, messagesHash(command.request.messages))
        // The same commit settles the answer call as failed and plans the summary call.
        assert.deepStrictEqual(prepared.commit!.llmCallUpdate?.callId, answerCall.callId)
        assert.strictEqual(prepared.commit!.llmCallUpdate?.status, "failed")
        yield* d.apply(prepared)

        const loaded = Option.getOrThrow(yield* store.loadLlmCall(command.callId))
        assert.deepStrictEqual(serialized(loaded.request.messages), serialized(command.request.messages))
        assert.strictEqual(canonicalJson(loaded.request), canonicalJson(command.request))
        assert.strictEqual(Option.getOrThrow(yield* store.loadLlmCall(answerCall.callId)).status, "failed")
        // The stored history is untouched.
        assert.deepStrictEqual(serialized((yield* loadSome("conv-o")).state.messages), serialized(history))
        assert.include((yield* journalOf("conv-o"))[2]!.message_json, longOutput)
      }).pipe(Effect.provide(withSql(filename)))
    }).pipe(Effect.provide(NodeContext.layer)))

  it.scoped("an answer call planned after a compaction is stored with the new segment_start; loadLlmCall rebuilds its messages from the new segment's rows (also when the same commit opens the segment)", () =>
    Effect.gen(function*() {
      const filename = yield* tempDatabase
      yield* Effect.gen(function*() {
        const store = yield* Store.Store
        const sql = yield* SqlClient.SqlClient
        const callRow = (callId: string) =>
          sql<{ segment_start: number; message_count: number; messages_part_hash: string | null }>`
            SELECT segment_start, message_count, messages_part_hash FROM llm_calls WHERE call_id = ${callId}`.pipe(
            Effect.map((rows) => ({
              segmentStart: Number(rows[0]!.segment_start),
              messageCount: Number(rows[0]!.message_count),
              part: rows[0]!.messages_part_hash
            }))
          )

        // After the user's summarize: the next turn's call.
        const { d } = yield* twoTurnsThenSummarize("conv-a")
        const next = expectTag((yield* d.feed(Input.Start({ message: user("third question"), context: [], settings }))).command, "CallLlm")
        assert.strictEqual(next.purpose, "answer")
        assert.deepStrictEqual(yield* callRow(next.callId), { segmentStart: 4, messageCount: 4, part: null })
        const check = (callId: string, request: typeof next.request) =>
          Effect.gen(function*() {
            const loaded = Option.getOrThrow(yield* store.loadLlmCall(callId))
            assert.deepStrictEqual(serialized(loaded.request.messages), serialized(request.messages))
            assert.strictEqual(canonicalJson(loaded.request), canonicalJson(request))
          })
        yield* check(next.callId, next.request)
        // Still a prefix of the segment once more is appended.
        yield* d.done(answer([text("third answer")]))
        yield* d.turn("fourth question", "fourth answer")
        yield* check(next.callId, next.request)

        // An automatic compaction: the commit of the summary's Done opens the segment and plans the answer on it.
        const auto = yield* makeDriver("conv-auto", policyWith(knobs(1000, { tailShare: 0.01 })))
        yield* auto.turn("first question", "first answer", 900)
        const summary = expectTag((yield* auto.feed(Input.Start({ message: user("second question"), context: [], settings }))).command, "CallLlm")
        assert.strictEqual(summary.purpose, "summary")
        assert.strictEqual(auto.state.compaction!.trigger, "auto")
        const prepared = auto.prepare(Input.LlmEvent({
          callId: summary.callId,
          event: { _tag: "Done", reason: "stop", message: answer([text("The user asked a question.")]) }
        }))
        const answerCall = expectTag(prepared.t.command, "CallLlm")
        assert.strictEqual(answerCall.purpose, "answer")
        assert.strictEqual(prepared.commit!.llmCall!.segmentStart, 3)
        assert.strictEqual(prepared.commit!.llmCall!.detached, false)
        assert.strictEqual(prepared.commit!.llmCallUpdate!.callId, summary.callId)
        yield* auto.apply(prepared)
        assert.deepStrictEqual(auto.state.segment, {
          start: 3,
          kind: "compaction",
          turnId: auto.state.turnId,
          summaryCallId: summary.callId,
          replaced: 2,
          kept: 1
        })
        assert.deepStrictEqual(serialized(answerCall.request.messages), serialized([summaryMessage("The user asked a question."), user("second question")]))
        assert.deepStrictEqual(yield* callRow(answerCall.callId), { segmentStart: 3, messageCount: 2, part: null })
        yield* check(answerCall.callId, answerCall.request)
        yield* check(summary.callId, summary.request)
      }).pipe(Effect.provide(withSql(filename)))
    }).pipe(Effect.provide(NodeContext.layer)))

  if (engine.name === "SQLite") it.scoped("a database made by migrations 0001-0003 with a conversation in it loads after 0004 as the origin segment (start 0) and can then compact", () =>
    Effect.gen(function*() {
      const filename = yield* tempDatabase
      const { final, steps } = journey("conv-old")
      const calls = steps.flatMap((step) => (step.llmCall === undefined ? [] : [step.llmCall]))

      // The earlier release's schema and rows, written as it wrote them (no segment fields, no segment columns).
      yield* Effect.gen(function*() {
        yield* SqliteMigrator.run({
          loader: SqliteMigrator.fromRecord({
            "0001_init": migrations["0001_init"],
            "0002_turn_starts": migrations["0002_turn_starts"],
            "0003_call_costs": migrations["0003_call_costs"]
          })
        })
        const sql = yield* SqlClient.SqlClient
        const columns = yield* sql<{ name: string }>`PRAGMA table_info(conversations)`
        assert.notInclude(columns.map((c) => c.name), "segment_start")
        const oldStateJson = canonicalJson({
          activeCallId: final.activeCallId,
          llmCallSeq: final.llmCallSeq,
          queued: final.queued,
          settings: final.settings,
          turnSeq: final.turnSeq,
          turnStart: final.turnStart
        })
        yield* sql`
          INSERT INTO conversations (conversation_id, version, status, turn_id, message_count, messages_hash, waiting_json, state_json, updated_at_ms)
          VALUES ('conv-old', ${steps.length}, ${final.status}, ${final.turnId}, ${final.messages.length}, ${final.messagesHash}, NULL, ${oldStateJson}, 0)`
        for (const [seq, message] of final.messages.entries()) {
          yield* sql`
            INSERT INTO messages (conversation_id, seq, message_json, hash)
            VALUES ('conv-old', ${seq}, ${serializeMessage(message)}, ${messageHash(message)})`
        }
        for (const call of calls) {
          const prompt = systemPromptHash(call.request.systemPrompt)
          const tools = toolsHash(call.request.tools)
          yield* sql`INSERT INTO request_parts (hash, body) VALUES (${prompt}, ${canonicalJson(call.request.systemPrompt)}) ON CONFLICT (hash) DO NOTHING`
          yield* sql`INSERT INTO request_parts (hash, body) VALUES (${tools}, ${canonicalJson(call.request.tools)}) ON CONFLICT (hash) DO NOTHING`
          yield* sql`
            INSERT INTO llm_calls (call_id, conversation_id, turn_id, model, system_prompt_hash, tools_hash, message_count,
              messages_hash, request_hash, status, created_at_ms, updated_at_ms, cost_usd)
            VALUES (${call.callId}, 'conv-old', ${call.turnId}, ${call.model}, ${prompt}, ${tools}, ${call.request.messages.length},
              ${call.messagesHash}, ${call.requestHash}, 'committed', 0, 0, NULL)`
        }
      }).pipe(Effect.provide(SqliteClient.layer({ filename })))

      yield* Effect.gen(function*() {
        const store = yield* Store.Store
        const sql = yield* SqlClient.SqlClient
        const migrated = yield* sql<{ migration_id: number }>`SELECT migration_id FROM effect_sql_migrations ORDER BY migration_id`
        assert.deepStrictEqual(migrated.map((m) => Number(m.migration_id)), [1, 2, 3, 4, 5, 6, 7, 8])

        const loaded = yield* loadSome("conv-old")
        assert.strictEqual(loaded.version, steps.length)
        assert.deepStrictEqual(loaded.state.segment, originSegment)
        assert.deepStrictEqual(loaded.state.context, unknownContextSize)
        assert.strictEqual(loaded.state.checkpointed, 0)
        assert.isNull(loaded.state.compaction)
        assert.isFalse(loaded.state.compactGuard)
        assert.strictEqual(loaded.state.summaries, 0)
        assert.deepStrictEqual(serialized(loaded.state.messages), serialized(final.messages))
        assert.strictEqual(loaded.state.messagesHash, final.messagesHash)
        assert.deepStrictEqual(yield* segmentsOf("conv-old"), [])
        // The old calls load as prefixes of the origin segment.
        for (const call of calls) {
          const old = Option.getOrThrow(yield* store.loadLlmCall(call.callId))
          assert.strictEqual(canonicalJson(old.request), canonicalJson(call.request))
        }

        // It compacts: a new segment at the end of the old journal.
        const d = yield* makeDriver("conv-old", manualPolicy, { runtime: { committed: loaded.state, pending: null }, version: loaded.version })
        const summaryCall = expectTag((yield* d.feed(Input.Summarize({ instructions: "", settings }))).command, "CallLlm")
        assert.strictEqual(summaryCall.purpose, "summary")
        yield* d.done(answer([text("Files were listed.")]))
        const after = d.state
        const length = final.messages.length
        assert.strictEqual(after.segment.kind, "compaction")
        assert.strictEqual(after.segment.start, length)
        assert.deepStrictEqual(yield* segmentsOf("conv-old"), [{
          start: length,
          kind: "compaction",
          turnId: after.turnId,
          summaryCallId: summaryCall.callId,
          previousStart: 0,
          replaced: after.segment.replaced,
          kept: after.segment.kept
        }])
        assert.strictEqual(after.segment.replaced + after.segment.kept, length)
        const rows = yield* journalOf("conv-old")
        assert.strictEqual(rows.length, length + after.messages.length)
        assert.deepStrictEqual(rows.slice(0, length).map((row) => row.message_json), serialized(final.messages))
        const reloaded = yield* loadSome("conv-old")
        assert.deepStrictEqual(reloaded.state, after)
        assert.deepStrictEqual(Option.getOrThrow(yield* store.loadLlmCall(summaryCall.callId)).request.messages.length, length + 1)
        // The old calls still load from the old segment's rows.
        for (const call of calls) {
          const old = Option.getOrThrow(yield* store.loadLlmCall(call.callId))
          assert.strictEqual(canonicalJson(old.request), canonicalJson(call.request))
        }
      }).pipe(Effect.provide(withSql(filename)))
    }).pipe(Effect.provide(NodeContext.layer)))
})
