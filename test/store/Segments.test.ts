/**
 * History as segments, in the store: the real loop driven input by input, each state change
 * committed as the runner commits it, on a SQLite file. The journal only grows: a compaction
 * or a rewind appends a new segment at its end and records it; loading reads the current
 * segment only; a commit that would open a segment anywhere else is refused.
 */
import { assert, describe, it } from "@effect/vitest"
import { NodeContext } from "@effect/platform-node"
import { Effect, Option } from "effect"
import {
  messageHash,
  messagesHash,
  
  
  
  
} from "../../src/Llm.js"
import type { Message } from "../../src/Llm.js"
import {
  Input,
  
  
  summaryMessage,
  
} from "../../src/Loop.js"
import type { ConversationState, Segment } from "../../src/Loop.js"
import * as Store from "../../src/Store.js"
import {
  loadSome,
  journalOf,
  conversationRow,
  countOf,
  segmentsOf,
  failure,
  serialized,
  manualPolicy,
  settings,
  user,
  answer,
  text,
  expectTag,
  makeDriver,
  twoTurnsThenSummarize
} from "./segmentsHarness.js"
import { engines } from "./engines.js"

describe.each(engines)("Store: history as segments, on $name", (engine) => {
  const { database: tempDatabase, withSql } = engine
  it.scoped("a compaction commits a new segment at the end of the journal: the old rows stay, the new ones follow at seq = old length, one compaction record, load gives exactly the new segment (after reopening too)", () =>
    Effect.gen(function*() {
      const filename = yield* tempDatabase
      const committed = yield* Effect.gen(function*() {
        const { before, cut, d, summaryCall } = yield* twoTurnsThenSummarize("conv-c")
        const after = d.state
        assert.strictEqual(before.messages.length, 4)
        assert.strictEqual(cut, 2, "a manual compaction of two short turns keeps the last exchange")
        assert.deepStrictEqual(after.segment, {
          start: 4,
          kind: "compaction",
          turnId: after.turnId,
          summaryCallId: summaryCall.callId,
          replaced: 2,
          kept: 2
        })
        assert.deepStrictEqual(serialized(after.messages), serialized([summaryMessage("The user asked two questions."), ...before.messages.slice(2)]))

        // The journal: the old segment's rows untouched, the new segment's rows after them.
        const rows = yield* journalOf("conv-c")
        assert.deepStrictEqual(rows.map((row) => Number(row.seq)), [0, 1, 2, 3, 4, 5, 6])
        assert.deepStrictEqual(rows.slice(0, 4).map((row) => row.message_json), serialized(before.messages))
        assert.deepStrictEqual(rows.slice(4).map((row) => row.message_json), serialized(after.messages))
        assert.strictEqual(yield* countOf("messages", "conv-c"), 7)
        const row = yield* conversationRow("conv-c")
        assert.strictEqual(Number(row.segment_start), 4)
        assert.strictEqual(Number(row.message_count), 7)
        assert.strictEqual(row.messages_hash, after.messagesHash)

        assert.deepStrictEqual(yield* segmentsOf("conv-c"), [{
          start: 4,
          kind: "compaction",
          turnId: after.turnId,
          summaryCallId: summaryCall.callId,
          previousStart: 0,
          replaced: 2,
          kept: 2
        }])

        const loaded = yield* loadSome("conv-c")
        assert.strictEqual(loaded.version, d.version)
        assert.deepStrictEqual(loaded.state, after)
        assert.deepStrictEqual(serialized(loaded.state.messages), serialized(after.messages))
        assert.strictEqual(loaded.state.messagesHash, after.messagesHash)
        assert.strictEqual(messagesHash(loaded.state.messages), after.messagesHash)
        return { state: after, version: d.version, summaryCallId: summaryCall.callId }
      }).pipe(Effect.provide(withSql(filename)))

      // Closed and reopened: the same segment, the same messages, the same hash.
      const reopened = yield* Effect.gen(function*() {
        return { loaded: yield* loadSome("conv-c"), segments: yield* segmentsOf("conv-c"), rows: yield* journalOf("conv-c") }
      }).pipe(Effect.provide(withSql(filename)))
      assert.strictEqual(reopened.loaded.version, committed.version)
      assert.deepStrictEqual(reopened.loaded.state, committed.state)
      assert.strictEqual(reopened.loaded.state.messagesHash, committed.state.messagesHash)
      assert.deepStrictEqual(serialized(reopened.loaded.state.messages), serialized(committed.state.messages))
      assert.strictEqual(reopened.rows.length, 7)
      assert.strictEqual(reopened.segments.length, 1)
      assert.strictEqual(reopened.segments[0]!.summaryCallId, committed.summaryCallId)
    }).pipe(Effect.provide(NodeContext.layer)))

  it.scoped("a rewind commits a new segment at the end of the journal (kind rewind, kept = the prefix the client named); later turns append to it; a second rewind records the first as its previous segment", () =>
    Effect.gen(function*() {
      const filename = yield* tempDatabase
      yield* Effect.gen(function*() {
        const d = yield* makeDriver("conv-r", manualPolicy)
        yield* d.turn("first question", "first answer")
        yield* d.turn("second question", "second answer")
        const before = d.state
        assert.strictEqual(before.checkpointed, 4)

        // The client edited its second message: it holds only the first exchange.
        const kept = before.messages.slice(0, 2)
        const edited = user("second question, edited")
        expectTag((yield* d.feed(Input.Start({
          message: edited,
          context: [],
          settings,
          clientHistory: { promptIds: kept.map(messageHash) }
        }))).command, "CallLlm")
        const rewound = d.state
        assert.deepStrictEqual(rewound.segment, { start: 4, kind: "rewind", turnId: rewound.turnId, replaced: 2, kept: 2 })
        assert.deepStrictEqual(serialized(rewound.messages), serialized([...kept, edited]))
        yield* d.done(answer([text("edited answer")]))
        // A later turn (the client names the whole segment) appends to the new segment.
        const same = d.state.messages.map(messageHash)
        expectTag((yield* d.feed(Input.Start({ message: user("third question"), context: [], settings, clientHistory: { promptIds: same } }))).command, "CallLlm")
        yield* d.done(answer([text("third answer")]))
        const after = d.state
        assert.strictEqual(after.segment.start, 4)
        assert.strictEqual(after.messages.length, 6)

        const rows = yield* journalOf("conv-r")
        assert.deepStrictEqual(rows.map((row) => Number(row.seq)), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
        assert.deepStrictEqual(rows.slice(0, 4).map((row) => row.message_json), serialized(before.messages))
        assert.deepStrictEqual(rows.slice(4).map((row) => row.message_json), serialized(after.messages))
        assert.deepStrictEqual(yield* segmentsOf("conv-r"), [{
          start: 4,
          kind: "rewind",
          turnId: rewound.turnId,
          summaryCallId: null,
          previousStart: 0,
          replaced: 2,
          kept: 2
        }])
        const loaded = yield* loadSome("conv-r")
        assert.deepStrictEqual(loaded.state, after)
        assert.strictEqual(loaded.state.messagesHash, after.messagesHash)

        // Rewind again, to the first message of the current segment: a segment at 10 whose previous one began at 4.
        yield* d.feed(Input.Start({ message: user("start over"), context: [], settings, clientHistory: { promptIds: [messageHash(after.messages[0]!)] } }))
        yield* d.done(answer([text("fresh answer")]))
        const again = d.state
        assert.deepStrictEqual(again.segment, { start: 10, kind: "rewind", turnId: again.turnId, replaced: 5, kept: 1 })
        const segments = yield* segmentsOf("conv-r")
        assert.deepStrictEqual(segments.map((s) => [s.start, s.kind, s.previousStart, s.replaced, s.kept]), [[4, "rewind", 0, 2, 2], [10, "rewind", 4, 5, 1]])
        assert.strictEqual(yield* countOf("messages", "conv-r"), 13)
        assert.deepStrictEqual((yield* loadSome("conv-r")).state, again)
      }).pipe(Effect.provide(withSql(filename)))
      // Reopened: only the current segment is loaded.
      const reopened = yield* loadSome("conv-r").pipe(Effect.provide(withSql(filename)))
      assert.strictEqual(reopened.state.segment.start, 10)
      assert.deepStrictEqual(reopened.state.messages.map((m) => m.role), ["user", "user", "assistant"])
    }).pipe(Effect.provide(NodeContext.layer)))

  it.scoped("a commit whose state opens a segment anywhere but at the journal's end fails with HistoryRewritten and writes nothing", () =>
    Effect.gen(function*() {
      const filename = yield* tempDatabase
      yield* Effect.gen(function*() {
        const store = yield* Store.Store
        // A state that claims a segment at `start` holding `messages`.
        const claim = (state: ConversationState, segment: Partial<Segment> & { readonly start: number }, messages: ReadonlyArray<Message>): ConversationState => ({
          ...state,
          segment: { kind: "rewind", turnId: state.turnId, replaced: 1, kept: messages.length, ...segment },
          messages,
          messagesHash: messagesHash(messages)
        })
        const snapshot = (conversationId: string) =>
          Effect.gen(function*() {
            return {
              loaded: yield* loadSome(conversationId),
              row: yield* conversationRow(conversationId),
              rows: yield* journalOf(conversationId),
              segments: yield* segmentsOf(conversationId),
              inputs: yield* countOf("input_commits", conversationId),
              calls: yield* countOf("llm_calls", conversationId),
              turns: yield* countOf("turn_starts", conversationId)
            }
          })
        const refused = (conversationId: string, version: number, next: ConversationState, label: string) =>
          Effect.gen(function*() {
            const before = yield* snapshot(conversationId)
            const exit = yield* Effect.exit(store.commitInput({
              conversationId,
              inputId: `bad/${label}`,
              expectedVersion: version,
              next: { ...next, turnSeq: next.turnSeq + 1, turnId: `${conversationId}/t-bad` },
              result: label
            }))
            const error = failure(exit)
            assert.strictEqual(error._tag, "HistoryRewritten", `${label}: ${JSON.stringify(error)}`)
            assert.deepStrictEqual(yield* snapshot(conversationId), before, `${label}: nothing written`)
            assert.isTrue(Option.isNone(yield* store.findInputCommit(conversationId, `bad/${label}`)), label)
          })

        // An origin segment of 4 messages.
        const d = yield* makeDriver("conv-bad", manualPolicy)
        yield* d.turn("first question", "first answer")
        yield* d.turn("second question", "second answer")
        const origin = d.state
        yield* refused("conv-bad", d.version, claim(origin, { start: 3 }, origin.messages.slice(0, 1)), "one before the end")
        yield* refused("conv-bad", d.version, claim(origin, { start: 1 }, origin.messages.slice(0, 2)), "inside the segment")
        yield* refused("conv-bad", d.version, claim(origin, { start: 5 }, origin.messages.slice(0, 2)), "past the end")
        yield* refused("conv-bad", d.version, claim(origin, { start: 0 }, origin.messages.slice(0, 2)), "over the segment, shorter")
        yield* refused("conv-bad", d.version, claim(origin, { start: 0 }, [user("another history"), ...origin.messages.slice(1)]), "over the segment, changed")

        // After a compaction: segment_start 4, journal length 7.
        const { d: c } = yield* twoTurnsThenSummarize("conv-bad-2")
        const compacted = c.state
        assert.strictEqual(compacted.segment.start, 4)
        yield* refused("conv-bad-2", c.version, claim(compacted, { start: 6 }, compacted.messages.slice(0, 1)), "journal length - 1")
        yield* refused("conv-bad-2", c.version, claim(compacted, { start: 2 }, compacted.messages.slice(0, 1)), "below segment_start")
        yield* refused("conv-bad-2", c.version, claim(compacted, { start: 0, kind: "origin", turnId: "", replaced: 0, kept: 0 }, origin.messages), "the origin again")
        yield* refused("conv-bad-2", c.version, claim(compacted, { start: 8 }, compacted.messages.slice(0, 1)), "past the end")

        // The stored conversation still commits at the end of its journal.
        yield* c.turn("third question", "third answer")
        assert.strictEqual(c.state.segment.start, 4)
        assert.strictEqual(yield* countOf("messages", "conv-bad-2"), 9)
      }).pipe(Effect.provide(withSql(filename)))
    }).pipe(Effect.provide(NodeContext.layer)))
})
