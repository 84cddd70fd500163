import { assert, describe, it } from "@effect/vitest"
import { jsonKeyOf, recentMap } from "../src/internal/JsonKey.js"

describe("JsonKey", () => {
  it("an object's JSON is made once: the same text for the same object, even if edited after (values are immutable)", () => {
    const list = [{ a: 1 }]
    const key = jsonKeyOf(list)
    assert.strictEqual(key, "[{\"a\":1}]")
    list.push({ a: 2 })
    assert.strictEqual(jsonKeyOf(list), key)
    assert.strictEqual(jsonKeyOf([{ a: 1 }, { a: 2 }]), "[{\"a\":1},{\"a\":2}]")
  })

  it("a recent map keeps its most recently used entries: a read counts as a use", () => {
    const map = recentMap<string, number>(2)
    map.set("a", 1)
    map.set("b", 2)
    assert.strictEqual(map.get("a"), 1)
    map.set("c", 3)
    assert.strictEqual(map.size, 2)
    assert.strictEqual(map.get("b"), undefined, "b was the least recently used")
    assert.strictEqual(map.get("a"), 1)
    assert.strictEqual(map.get("c"), 3)
  })
})
