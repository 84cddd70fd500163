/**
 * The console's pure pieces: how each prefix status reads, and the charts' buckets.
 */
import { assert, describe, it } from "@effect/vitest"
import { bucketsOf, cacheShare, windowStart } from "../../src/console/Charts.js"
import { prefixCell } from "../../src/console/Pages.js"
import type { RecentCall } from "../../src/Store.js"

describe("Console pages", () => {
  it("prefix statuses: an intended boundary names its kind; a break names its part, byte and message", () => {
    assert.include(prefixCell({ _tag: "Boundary", kind: "compaction", segmentStart: 12 }).value, "new segment (compaction, at message 12): an intended break")
    assert.include(prefixCell({ _tag: "Extends", addedMessages: 2 }).value, "extends the previous request (+2 messages)")
    const history = prefixCell({ _tag: "Break", part: "history", firstDifferingByte: 12345, where: "message 3" }).value
    assert.include(history, `data-byte="12345"`)
    assert.include(history, "break in the history: first differing byte 12,345 (in message 3)")
    const system = prefixCell({ _tag: "Break", part: "systemPrompt", firstDifferingByte: 529, where: "the system prompt" }).value
    assert.include(system, "break in the system prompt: first differing byte 529<")
    assert.include(prefixCell({ _tag: "Break", part: "tools", measureError: "a request is missing from the store" }).value, "not measured")
  })

  it("buckets: per hour over 48 hours, calls outside the window left out, cache share over all input", () => {
    const now = Date.UTC(2026, 11, 1, 12, 30)
    const call = (createdAtMs: number, input: number, cacheRead: number, costUsd: number): RecentCall => ({
      callId: `c${createdAtMs}`, conversationId: "c", turnId: "t", model: "m", status: "committed", systemPromptHash: "", toolsHash: "",
      segmentStart: 0, messageCount: 1, detached: false, usage: { input, output: 5, cacheRead, cacheWrite: 0, reasoning: 0 }, costUsd,
      error: null, createdAtMs, updatedAtMs: createdAtMs, firstDeltaMs: 10, target: "p/m", attempts: 1, requestChars: 0
    })
    const buckets = bucketsOf([call(now, 100, 300, 0.5), call(now - 60_000, 100, 0, 0.25), call(windowStart("48h", now) - 1, 999, 0, 9)], "48h", now)
    assert.strictEqual(buckets.length, 48)
    const last = buckets[47]!
    assert.deepStrictEqual([last.calls, last.input, last.cacheRead, last.output, last.costUsd], [2, 200, 300, 10, 0.75])
    assert.strictEqual(buckets.reduce((sum, b) => sum + b.calls, 0), 2)
    assert.strictEqual(cacheShare(last), 0.6)
    assert.strictEqual(bucketsOf([], "14d", now).length, 14)
  })
})
