import { assert, describe, it } from "@effect/vitest"
import { Effect, FastCheck as fc, Schema } from "effect"
import { createHash } from "node:crypto"
import {
  coalesceDeltas,
  canonicalJson,
  emptyMessagesHash,
  extendMessagesHash,
  LlmError,
  Message,
  messageHash,
  messagesHash,
  requestHash,
  ResponseEvent,
  serializeMessage
} from "../src/Llm.js"
import { sha256, sha256Bytes, sha256Digest } from "../src/internal/Sha256.js"

const message: Message = {
  role: "assistant",
  content: [
    { type: "thinking", thinking: "plan", signature: "c2ln", redacted: false },
    { type: "text", text: "Hi é 😀" },
    { type: "toolCall", id: "t1", name: "read", arguments: `{"path":"a.ts"}`, extras: { thoughtSignature: "abc" } }
  ],
  api: "anthropic",
  provider: "anthropic",
  model: "claude",
  usage: { input: 1, output: 2, cacheRead: 3, cacheWrite: 4, reasoning: 0 },
  stopReason: "toolUse"
}

describe("Llm: canonical serialization", () => {
  it("is independent of the order keys were built in", () => {
    const reordered = JSON.parse(JSON.stringify(message, Object.keys(message).reverse().concat(
      "type", "thinking", "signature", "redacted", "text", "id", "name", "arguments", "extras", "thoughtSignature",
      "input", "output", "cacheRead", "cacheWrite", "reasoning"
    )))
    assert.strictEqual(serializeMessage(reordered), serializeMessage(message))
  })

  it.prop("is byte-identical for equal JSON values, and parses back to them", [fc.jsonValue()], ([value]) => {
    const text = canonicalJson(value)
    assert.strictEqual(canonicalJson(JSON.parse(text)), text)
    assert.deepStrictEqual(JSON.parse(text), JSON.parse(JSON.stringify(value)))
  }, { fastCheck: { numRuns: 300 } })

  it("leaves out undefined members, so an absent optional field and a missing one agree", () => {
    assert.strictEqual(canonicalJson({ a: 1, b: undefined }), `{"a":1}`)
  })

  it.effect("survives a Schema encode/decode round trip byte for byte", () =>
    Effect.gen(function*() {
      const decoded = yield* Schema.decodeUnknown(Message)(JSON.parse(serializeMessage(message)))
      assert.strictEqual(serializeMessage(decoded), serializeMessage(message))
    }))
})

describe("Llm: hashes", () => {
  it.prop("sha256 agrees with node:crypto on any text", [fc.string({ unit: "grapheme", maxLength: 300 })], ([text]) => {
    assert.strictEqual(sha256(text), createHash("sha256").update(text, "utf8").digest("hex"))
  }, { fastCheck: { numRuns: 500 } })

  it("sha256 agrees with node:crypto around the block boundaries", () => {
    for (let length = 0; length < 200; length++) {
      const text = "x".repeat(length)
      assert.strictEqual(sha256(text), createHash("sha256").update(text).digest("hex"), `length ${length}`)
    }
  })

  it("sha256 agrees with node:crypto on large inputs read block by block (a 1 MiB image, lengths around many block boundaries)", () => {
    const big = new Uint8Array(1024 * 1024 + 37)
    for (let i = 0; i < big.length; i++) big[i] = (i * 2654435761) >>> 24
    assert.strictEqual(sha256Bytes(big), createHash("sha256").update(big).digest("hex"))
    for (const blocks of [1, 2, 7, 40]) {
      for (const delta of [-9, -8, -1, 0, 1, 8]) {
        const bytes = big.subarray(0, blocks * 64 + delta)
        assert.strictEqual(sha256Bytes(bytes), createHash("sha256").update(bytes).digest("hex"), `length ${bytes.length}`)
      }
    }
  })

  it.prop("sha256Digest is node:crypto's digest, as bytes", [fc.uint8Array({ maxLength: 300 })], ([bytes]) => {
    assert.deepStrictEqual(Buffer.from(sha256Digest(bytes)), createHash("sha256").update(bytes).digest())
  })

  it("messagesHash extends by one message without rehashing the history", () => {
    const history: Array<Message> = [{ role: "user", content: [{ type: "text", text: "hi" }] }, message]
    assert.strictEqual(messagesHash([]), emptyMessagesHash)
    assert.strictEqual(messagesHash(history), extendMessagesHash(messagesHash(history.slice(0, 1)), messageHash(message)))
    assert.notStrictEqual(messagesHash(history), messagesHash(history.slice().reverse()))
  })

  it("requestHash changes with the model, the prompt, the tools and the history", () => {
    const parts = { systemPrompt: "sys", tools: [] }
    const base = requestHash("m", parts, emptyMessagesHash, 0)
    assert.notStrictEqual(requestHash("m2", parts, emptyMessagesHash, 0), base)
    assert.notStrictEqual(requestHash("m", { ...parts, systemPrompt: "sys2" }, emptyMessagesHash, 0), base)
    assert.notStrictEqual(requestHash("m", { ...parts, tools: [{ name: "a", description: "", parameters: {} }] }, emptyMessagesHash, 0), base)
    assert.notStrictEqual(requestHash("m", parts, messagesHash([message]), 1), base)
    assert.strictEqual(requestHash("m", parts, emptyMessagesHash, 0), base)
  })
})

describe("Llm: schemas", () => {
  it.effect("every ResponseEvent kind decodes from its JSON form", () =>
    Effect.gen(function*() {
      const events: ReadonlyArray<unknown> = [
        { _tag: "Start" }, { _tag: "TextStart", index: 0 }, { _tag: "TextDelta", index: 0, delta: "a" }, { _tag: "TextEnd", index: 0 },
        { _tag: "ThinkingStart", index: 1 }, { _tag: "ThinkingDelta", index: 1, delta: "b" }, { _tag: "ThinkingEnd", index: 1, signature: "s" },
        { _tag: "ToolCallStart", index: 2, id: "t", name: "read" }, { _tag: "ToolCallDelta", index: 2, delta: "{}" },
        { _tag: "ToolCallEnd", index: 2, toolCall: { type: "toolCall", id: "t", name: "read", arguments: "{}" } },
        { _tag: "Done", reason: "toolUse", message },
        { _tag: "Error", reason: "error", message: "boom", retryable: true }
      ]
      for (const event of events) {
        const decoded = yield* Schema.decodeUnknown(ResponseEvent)(event)
        assert.strictEqual(canonicalJson(decoded), canonicalJson(event))
      }
    }))

  it.effect("a malformed message is a decode error, not a crash", () =>
    Effect.gen(function*() {
      const bad = yield* Effect.either(Schema.decodeUnknown(Message)({ role: "assistant", content: [{ type: "toolCall", id: 1 }] }))
      assert.isTrue(bad._tag === "Left")
      const negative = yield* Effect.either(Schema.decodeUnknown(Message)({ ...message, usage: { ...message.usage, input: -1 } }))
      assert.isTrue(negative._tag === "Left")
    }))

  it("LlmError carries its reason and retryability", () => {
    const error = new LlmError({ reason: "rateLimited", message: "slow down", retryable: true, retryAfterMs: 2000 })
    assert.strictEqual(error._tag, "LlmError")
    assert.strictEqual(error.retryAfterMs, 2000)
  })
})

describe("Llm: coalesceDeltas", () => {
  const kinds = ["TextDelta", "ThinkingDelta", "ToolCallDelta"] as const
  const eventArb: fc.Arbitrary<ResponseEvent> = fc.oneof(
    fc.record({ _tag: fc.constantFrom(...kinds), index: fc.integer({ min: 0, max: 2 }), delta: fc.string({ maxLength: 4 }) }),
    fc.record({ _tag: fc.constant("TextStart" as const), index: fc.integer({ min: 0, max: 2 }) }),
    fc.record({ _tag: fc.constant("TextEnd" as const), index: fc.integer({ min: 0, max: 2 }) })
  )
  /** Per (kind, index): the concatenated text, and the order in which non-delta events and block switches happen. */
  const textOf = (events: ReadonlyArray<ResponseEvent>) => {
    const texts = new Map<string, string>()
    for (const e of events) if ("delta" in e) texts.set(`${e._tag}/${e.index}`, (texts.get(`${e._tag}/${e.index}`) ?? "") + e.delta)
    return texts
  }
  const skeleton = (events: ReadonlyArray<ResponseEvent>) => {
    const out: Array<string> = []
    for (const e of events) {
      const key = "delta" in e ? `${e._tag}/${e.index}` : `${e._tag}/${"index" in e ? e.index : ""}!`
      if (out[out.length - 1] !== key || key.endsWith("!")) out.push(key)
    }
    return out
  }

  it("joins runs of the same delta kind and block, keeps everything else and the order", () => {
    const events: Array<ResponseEvent> = [
      { _tag: "TextStart", index: 0 },
      { _tag: "TextDelta", index: 0, delta: "a" },
      { _tag: "TextDelta", index: 0, delta: "b" },
      { _tag: "ThinkingDelta", index: 1, delta: "x" },
      { _tag: "TextDelta", index: 0, delta: "c" },
      { _tag: "TextEnd", index: 0 },
      { _tag: "ToolCallDelta", index: 2, delta: "{" },
      { _tag: "ToolCallDelta", index: 2, delta: "}" }
    ]
    assert.deepStrictEqual(coalesceDeltas(events), [
      { _tag: "TextStart", index: 0 },
      { _tag: "TextDelta", index: 0, delta: "ab" },
      { _tag: "ThinkingDelta", index: 1, delta: "x" },
      { _tag: "TextDelta", index: 0, delta: "c" },
      { _tag: "TextEnd", index: 0 },
      { _tag: "ToolCallDelta", index: 2, delta: "{}" }
    ])
  })

  it("property: same text per block, same sequence of blocks and other events, never two adjacent joinable deltas", () => {
    fc.assert(fc.property(fc.array(eventArb, { maxLength: 40 }), (events) => {
      const joined = coalesceDeltas(events)
      assert.deepStrictEqual(textOf(joined), textOf(events))
      assert.deepStrictEqual(skeleton(joined), skeleton(events))
      for (let i = 1; i < joined.length; i++) {
        const a = joined[i - 1]!, b = joined[i]!
        assert.isFalse("delta" in a && "delta" in b && a._tag === b._tag && a.index === b.index)
      }
    }), { numRuns: 300 })
  })
})
