/**
 * The text and thinking deltas written by hand (`src/dialect/DeltaBytes.ts`) against protobuf-es
 * writing the same messages: the same bytes, for any text (multi-byte characters, lone
 * surrogates, lengths whose varints take one to three bytes).
 */
import { assert, describe, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import { fromFrame, toFrame, update } from "../../src/dialect/Correlation.js"
import { deltaBytesOf, deltaMessageBytes } from "../../src/dialect/DeltaBytes.js"
import { initialCorrelation } from "../../src/dialect/Correlation.js"
import { ThinkingStyle } from "../../src/gen/agent/v1/agent_pb.js"

const text = fc.oneof(
  fc.string({ unit: "binary", maxLength: 200 }),
  fc.string({ unit: "grapheme", minLength: 100, maxLength: 400 }),
  fc.string({ minLength: 16_000, maxLength: 17_000 })
)

describe("DeltaBytes: deltas written by hand", () => {
  it("a text delta's bytes are protobuf-es's", () => {
    fc.assert(fc.property(text, (t) => {
      assert.deepStrictEqual(Buffer.from(deltaMessageBytes(t, false)), Buffer.from(toFrame(update({ case: "textDelta", value: { text: t } }))))
    }), { numRuns: 300 })
  })

  it("a thinking delta's bytes are protobuf-es's, with the default style", () => {
    fc.assert(fc.property(text, (t) => {
      assert.deepStrictEqual(
        Buffer.from(deltaMessageBytes(t, true)),
        Buffer.from(toFrame(update({ case: "thinkingDelta", value: { text: t, thinkingStyle: ThinkingStyle.DEFAULT } })))
      )
    }), { numRuns: 300 })
  })

  it("they parse back to the delta", () => {
    const parsed = fromFrame(deltaMessageBytes("héllo 👋", true))
    assert.isTrue(parsed._tag === "Right")
    const message = parsed._tag === "Right" ? parsed.right.message : undefined
    assert.strictEqual(message?.case, "interactionUpdate")
    const inner = message?.case === "interactionUpdate" ? message.value.message : undefined
    assert.deepStrictEqual(inner?.case === "thinkingDelta" ? [inner.value.text, inner.value.thinkingStyle] : undefined, ["héllo 👋", ThinkingStyle.DEFAULT])
  })

  it("only a non-empty delta of the correlation's model call is written by hand", () => {
    const correlation = { ...initialCorrelation("r1"), modelCallId: "c/t1/c0" }
    assert.isDefined(deltaBytesOf(correlation, "c/t1/c0", { _tag: "TextDelta", index: 0, delta: "a" }))
    assert.isDefined(deltaBytesOf(correlation, "c/t1/c0", { _tag: "ThinkingDelta", index: 0, delta: "a" }))
    assert.isUndefined(deltaBytesOf(correlation, "c/t1/c0", { _tag: "TextDelta", index: 0, delta: "" }))
    assert.isUndefined(deltaBytesOf(correlation, "c/t1/c1", { _tag: "TextDelta", index: 0, delta: "a" }))
    assert.isUndefined(deltaBytesOf(correlation, "c/t1/c0", { _tag: "ToolCallDelta", index: 0, delta: "a" }))
  })
})
