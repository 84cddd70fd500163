/**
 * Prefix diagnostics: each model call against the previous answer call (extends, a summary, an
 * intended segment boundary, or a break with its first differing byte), on crafted shapes and
 * on a conversation committed through the real loop and store.
 */
import { assert, describe, it } from "@effect/vitest"
import { NodeContext } from "@effect/platform-node"
import { Effect, Option } from "effect"
import { serializeMessage } from "../../src/Llm.js"
import type { Message, RequestMessages } from "../../src/Llm.js"
import { Input } from "../../src/Loop.js"
import type { Policy } from "../../src/Loop.js"
import * as Store from "../../src/Store.js"
import { firstDifference, prefixStatuses, requestBytes } from "../../src/store/Prefix.js"
import type { CallShape } from "../../src/store/Prefix.js"
import { engines } from "./engines.js"
import { answer, expectTag, makeDriver, manualPolicy, settings, text, user } from "./segmentsHarness.js"

const shape = (callId: string, overrides: Partial<CallShape> = {}): CallShape => ({
  callId,
  turnId: "c/t1",
  systemPromptHash: "p",
  toolsHash: "t",
  segmentStart: 0,
  messageCount: 1,
  detached: false,
  ...overrides
})

describe("prefix statuses", () => {
  it("tells extensions, summaries, intended boundaries and breaks apart, always against the previous answer call", () => {
    const statuses = prefixStatuses([
      shape("c0"),
      shape("c1", { messageCount: 3 }),
      shape("c2", { messageCount: 4, detached: true }),
      shape("c3", { segmentStart: 4, messageCount: 3 }),
      shape("c4", { segmentStart: 4, messageCount: 5, systemPromptHash: "p2" }),
      shape("c5", { segmentStart: 4, messageCount: 7, systemPromptHash: "p2", toolsHash: "t2" }),
      shape("c6", { segmentStart: 4, messageCount: 7, systemPromptHash: "p2", toolsHash: "t2" })
    ], [{ start: 4, kind: "compaction" }])
    assert.deepStrictEqual(statuses, [
      { _tag: "First" },
      { _tag: "Extends", addedMessages: 2 },
      { _tag: "Summary" },
      { _tag: "Boundary", kind: "compaction", segmentStart: 4 },
      { _tag: "Break", part: "systemPrompt" },
      { _tag: "Break", part: "tools" },
      { _tag: "Break", part: "history" }
    ])
  })

  it("the first differing byte counts UTF-8 bytes through the system prompt, the tools and each message", () => {
    const base: RequestMessages = { systemPrompt: "héllo 🚀", tools: [], messages: [user("one"), user("two é")] }
    assert.isUndefined(firstDifference(base, { ...base, messages: [...base.messages, user("three")] }))
    const changed: Array<Message> = [user("one"), user("two è")]
    const difference = firstDifference(base, { ...base, messages: changed })!
    const before = requestBytes(base).slice(0, 3).reduce((sum, part) => sum + Buffer.byteLength(part.text, "utf8"), 0)
    const serialized = serializeMessage(user("two é"))
    const common = serialized.indexOf("é")
    assert.strictEqual(difference.where, "message 1")
    assert.isAbove(common, 0)
    assert.strictEqual(difference.byte - before, Buffer.byteLength(serialized.slice(0, common), "utf8"))
    assert.deepStrictEqual(firstDifference(base, { ...base, systemPrompt: "héllo 🌍" }), { byte: Buffer.byteLength(`"héllo `, "utf8"), where: "the system prompt" })
    assert.strictEqual(firstDifference(base, { ...base, messages: [user("one")] })?.where, "message 1 (missing from the next request)")
  })
})

describe.each(engines)("prefix diagnostics on a stored conversation, on $name", (engine) => {
  const { database: tempDatabase, withSql } = engine
  // The prompt is the same every turn unless the settings carry the user's own.
  const steady: Policy = { ...manualPolicy, buildPrompt: (context) => context.settings.customSystemPrompt ?? "You are a coding agent." }

  it.scoped("two turns, a summarize, a turn on the new segment, then a changed system prompt: first, extends, summary, boundary, break at its byte", () =>
    Effect.gen(function*() {
      const filename = yield* tempDatabase
      yield* Effect.gen(function*() {
        const store = yield* Store.Store
        const d = yield* makeDriver("conv-prefix", steady)
        yield* d.turn("first question", "first answer")
        yield* d.turn("second question", "second answer")
        expectTag((yield* d.feed(Input.Summarize({ instructions: "", settings }))).command, "CallLlm")
        yield* d.done(answer([text("summary")]))
        yield* d.turn("third question", "third answer")
        const custom = { ...settings, customSystemPrompt: "You are another agent." }
        expectTag((yield* d.feed(Input.Start({ message: user("fourth question"), context: [], settings: custom }))).command, "CallLlm")
        yield* d.done(answer([text("fourth answer")]))

        const calls = yield* store.callsOf("conv-prefix")
        assert.deepStrictEqual(calls.map((call) => call.status), ["committed", "committed", "committed", "committed", "committed"])
        assert.deepStrictEqual(calls.map((call) => call.detached), [false, false, true, false, false])
        assert.deepStrictEqual(calls[0]!.usage, { input: 10, output: 5, cacheRead: 0, cacheWrite: 0, reasoning: 0 })
        const statuses = prefixStatuses(calls, yield* store.segments("conv-prefix"))
        assert.deepStrictEqual(statuses.map((status) => status._tag), ["First", "Extends", "Summary", "Boundary", "Break"])
        assert.deepStrictEqual(statuses[3], { _tag: "Boundary", kind: "compaction", segmentStart: 4 })

        const previous = Option.getOrThrow(yield* store.loadLlmCall(calls[3]!.callId)).request
        const next = Option.getOrThrow(yield* store.loadLlmCall(calls[4]!.callId)).request
        assert.deepStrictEqual(firstDifference(previous, next), { byte: `"You are a`.length, where: "the system prompt" })
      }).pipe(Effect.provide(withSql(filename)))
    }).pipe(Effect.provide(NodeContext.layer)))
})
