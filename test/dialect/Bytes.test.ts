/**
 * Hex as BidiAppend carries it (`src/dialect/Bytes.ts`): decoded natively, still strict. Against
 * a reference that reads two characters at a time: the same bytes, and an error for exactly the
 * strings of odd length or with a character that is not hex, wherever it is.
 */
import { assert, describe, it } from "@effect/vitest"
import { Either, FastCheck as fc } from "effect"
import { bytesToHex, hexToBytes } from "../../src/dialect/Bytes.js"

const reference = (hex: string): Uint8Array | undefined => {
  if (hex.length % 2 !== 0 || !/^[0-9a-fA-F]*$/.test(hex)) return undefined
  const bytes = new Uint8Array(hex.length / 2)
  for (let i = 0; i < bytes.length; i++) bytes[i] = parseInt(hex.slice(i * 2, i * 2 + 2), 16)
  return bytes
}

/** Mostly hex, now and then a character that is not. */
const hexish = fc.array(fc.oneof(
  { weight: 20, arbitrary: fc.constantFrom(..."0123456789abcdefABCDEF") },
  { weight: 1, arbitrary: fc.constantFrom("g", "G", "x", " ", "-", "\u00e9", "\u0660", "\ud83d", "\u0000") }
), { maxLength: 64 }).map((chars) => chars.join(""))

describe("Bytes: hex", () => {
  it.prop("hexToBytes agrees with a strict two-characters-at-a-time reader on any string", [hexish], ([hex]) => {
    const expected = reference(hex)
    const decoded = hexToBytes(hex)
    if (expected === undefined) assert.isTrue(Either.isLeft(decoded), JSON.stringify(hex))
    else assert.deepStrictEqual(Either.getOrThrow(decoded), expected)
  })

  it.prop("bytesToHex is lowercase hex that hexToBytes reads back, for any bytes (also a view into a larger buffer)", [fc.uint8Array({ maxLength: 300 }), fc.nat(8)], ([bytes, offset]) => {
    const big = new Uint8Array(bytes.length + offset + 3)
    big.set(bytes, offset)
    const view = big.subarray(offset, offset + bytes.length)
    const hex = bytesToHex(view)
    assert.strictEqual(hex, [...bytes].map((b) => b.toString(16).padStart(2, "0")).join(""))
    assert.deepStrictEqual(Either.getOrThrow(hexToBytes(hex)), new Uint8Array(bytes))
  })

  it("says which rule a bad string breaks", () => {
    const message = (hex: string) => Either.match(hexToBytes(hex), { onLeft: (e) => e.message, onRight: () => "ok" })
    assert.strictEqual(message("abc"), "hex data has odd length 3")
    assert.strictEqual(message("00g0"), "hex data contains a non-hex character")
    assert.strictEqual(message("000g"), "hex data contains a non-hex character")
    assert.strictEqual(message("AbCd"), "ok")
  })
})
