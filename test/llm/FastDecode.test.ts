/**
 * The compiled decoders of the wire schemas (`src/llm/common/FastDecode.ts`) against the
 * Schema's own decoding, on the four adapters' schemas: for values the schemas describe, for
 * those values mutated (a field replaced by any JSON, removed, nulled, an excess field added),
 * and for any JSON, both accept the same inputs and give the same output, key order included.
 */
import { assert, describe, it } from "@effect/vitest"
import { Arbitrary, Either, FastCheck as fc, Schema } from "effect"
import { AnthropicEvent } from "../../src/llm/Anthropic.js"
import { decoderFor } from "../../src/llm/Common.js"
import { compile, REFUSED } from "../../src/llm/common/FastDecode.js"
import { GeminiChunk } from "../../src/llm/Gemini.js"
import { ChatChunk } from "../../src/llm/openAiChat/Wire.js"
import { ResponsesEvent, ResponsesItem } from "../../src/llm/OpenAiResponses.js"

const schemas: Record<string, Schema.Schema<any, any>> = { ChatChunk, AnthropicEvent, GeminiChunk, ResponsesEvent, ResponsesItem }

/** A value's shape with its keys in order (undefined fields included), to compare outputs exactly. */
const ordered = (value: unknown): unknown => {
  if (Array.isArray(value)) return value.map(ordered)
  if (typeof value === "object" && value !== null) return Object.keys(value).map((key) => [key, ordered((value as Record<string, unknown>)[key])])
  return value
}

const agree = (schema: Schema.Schema<any, any>, input: unknown) => {
  const fast = compile(schema.ast)
  assert.isDefined(fast)
  const slow = Schema.decodeUnknownEither(schema, { onExcessProperty: "ignore" })(input)
  const out = fast!(input)
  if (Either.isLeft(slow)) {
    assert.strictEqual(out, REFUSED, `Schema refused ${JSON.stringify(input)?.slice(0, 300)}: ${slow.left.message}`)
    return
  }
  assert.notStrictEqual(out, REFUSED, `compiled decoder refused ${JSON.stringify(input)?.slice(0, 300)}`)
  assert.deepStrictEqual(ordered(out), ordered(slow.right))
}

/** Plain objects and arrays copied; anything else kept as it is. */
const copy = (value: unknown): unknown => {
  if (Array.isArray(value)) return value.map(copy)
  if (typeof value === "object" && value !== null && Object.getPrototypeOf(value) === Object.prototype) {
    return Object.fromEntries(Object.entries(value).map(([key, inner]) => [key, copy(inner)]))
  }
  return value
}

type Edit = readonly [pick: number, op: "replace" | "delete" | "null" | "excess", json: unknown]

/** Applies each edit at one of the value's containers (chosen by `pick`), on a copy. */
const mutate = (value: unknown, edits: ReadonlyArray<Edit>): unknown => {
  const root = { root: copy(value) }
  for (const [pick, op, json] of edits) {
    const slots: Array<[Record<string, unknown> | Array<unknown>, string | number]> = []
    const walk = (container: Record<string, unknown> | Array<unknown>) => {
      const keys: Array<string | number> = Array.isArray(container) ? container.map((_, i) => i) : Object.keys(container)
      for (const key of keys) {
        slots.push([container, key])
        const inner = (container as Record<string | number, unknown>)[key]
        if (typeof inner === "object" && inner !== null && (Array.isArray(inner) || Object.getPrototypeOf(inner) === Object.prototype)) {
          walk(inner as Record<string, unknown>)
        }
      }
    }
    walk(root)
    if (slots.length === 0) continue
    const [container, key] = slots[pick % slots.length]!
    const at = container as Record<string | number, unknown>
    if (op === "replace") at[key] = json
    else if (op === "null") at[key] = null
    else if (op === "delete" && !Array.isArray(container)) delete at[key]
    else if (op === "excess") {
      const target = at[key]
      if (typeof target === "object" && target !== null && !Array.isArray(target)) (target as Record<string, unknown>)[`x_${pick % 7}`] = json
    }
  }
  return root.root
}

const edit: fc.Arbitrary<Edit> = fc.tuple(fc.nat(), fc.constantFrom("replace" as const, "delete" as const, "null" as const, "excess" as const), fc.jsonValue({ maxDepth: 2 }))

describe("FastDecode: compiled wire decoders agree with Schema", () => {
  for (const [name, schema] of Object.entries(schemas)) {
    it(`${name}: values of the schema`, () => {
      fc.assert(fc.property(Arbitrary.make(schema) as fc.Arbitrary<unknown>, (value) => agree(schema, value)), { numRuns: 200 })
    })
    it(`${name}: values of the schema, mutated`, () => {
      fc.assert(fc.property(Arbitrary.make(schema) as fc.Arbitrary<unknown>, fc.array(edit, { minLength: 1, maxLength: 4 }), (value, edits) => agree(schema, mutate(value, edits))), { numRuns: 300 })
    })
    it(`${name}: any JSON`, () => {
      fc.assert(fc.property(fc.jsonValue({ maxDepth: 4 }), (value) => agree(schema, value)), { numRuns: 200 })
    })
  }

  it("a provider's chunk with excess fields and a __proto__ key decodes as Schema decodes it", () => {
    const chunk = JSON.parse(`{"id":"c1","object":"chat.completion.chunk","created":1,"choices":[{"index":0,"delta":{"role":"assistant","content":"hi","__proto__":{"x":1}},"logprobs":null,"finish_reason":null}],"__proto__":{"polluted":true}}`)
    agree(ChatChunk, chunk)
    const decoded = decoderFor(ChatChunk)(chunk)
    assert.isTrue(Either.isRight(decoded))
    assert.deepStrictEqual(Object.keys(Either.getOrThrow(decoded)), ["id", "choices"])
    assert.strictEqual(({} as Record<string, unknown>)["polluted"], undefined)
  })

  it("a refused input fails with the Schema's own message", () => {
    const input = { choices: [{ delta: { content: "x", tool_calls: [{ index: "zero" }] } }] }
    const fast = decoderFor(ChatChunk)(input)
    const slow = Schema.decodeUnknownEither(ChatChunk, { onExcessProperty: "ignore" })(input)
    assert.isTrue(Either.isLeft(fast) && Either.isLeft(slow))
    assert.strictEqual(Either.flip(fast).pipe(Either.getOrThrow).message, Either.flip(slow).pipe(Either.getOrThrow).message)
  })

  it("what it does not decode the same way is left to Schema: refinements, transformations, unions of structures", () => {
    assert.isUndefined(compile(Schema.Int.ast))
    assert.isUndefined(compile(Schema.NumberFromString.ast))
    assert.isUndefined(compile(Schema.Struct({ a: Schema.optionalWith(Schema.String, { default: () => "" }) }).ast))
    assert.isUndefined(compile(Schema.Union(Schema.Struct({ a: Schema.String }), Schema.Struct({ b: Schema.String })).ast))
    assert.isDefined(compile(Schema.NullOr(Schema.Struct({ a: Schema.String })).ast))
  })
})
