import { assert, describe, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import { gzipSync } from "node:zlib"
import {
  ConnectError,
  decodeUnaryBody,
  endStreamFrame,
  envelope,
  FLAG_COMPRESSED,
  FLAG_END_STREAM,
  httpStatusOf,
  parseEnvelopes
} from "../../src/transport/Connect.js"

const concat = (...parts: ReadonlyArray<Uint8Array>) => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0))
  let offset = 0
  for (const part of parts) {
    out.set(part, offset)
    offset += part.length
  }
  return out
}

describe("Connect framing", () => {
  it.prop("envelopes round-trip through parseEnvelopes", [fc.array(fc.uint8Array({ maxLength: 300 }), { maxLength: 5 })], ([payloads]) => {
    const body = concat(...payloads.map((p) => envelope(0, p)))
    const parsed = parseEnvelopes(body, 1 << 20)
    assert.isFalse(parsed instanceof ConnectError)
    assert.deepStrictEqual((parsed as ReadonlyArray<{ payload: Uint8Array }>).map((e) => Array.from(e.payload)), payloads.map((p) => Array.from(p)))
  })

  it.prop("random bytes never throw: envelopes or a Connect error", [fc.uint8Array({ maxLength: 64 })], ([bytes]) => {
    const parsed = parseEnvelopes(bytes, 1024)
    assert.isTrue(parsed instanceof ConnectError || Array.isArray(parsed))
  }, { fastCheck: { numRuns: 2000 } })

  it("inflates gzip envelopes", () => {
    const payload = new TextEncoder().encode("hello hello hello")
    const parsed = parseEnvelopes(envelope(FLAG_COMPRESSED, gzipSync(payload)), 1024)
    assert.deepStrictEqual(Array.from((parsed as ReadonlyArray<{ payload: Uint8Array }>)[0]!.payload), Array.from(payload))
  })

  it("refuses a truncated body, an oversized envelope and bad gzip with clear errors", () => {
    const truncated = parseEnvelopes(envelope(0, new Uint8Array(10)).subarray(0, 9), 1024)
    assert.strictEqual((truncated as ConnectError).code, "invalid_argument")
    const big = parseEnvelopes(envelope(0, new Uint8Array(2000)), 1024)
    assert.strictEqual((big as ConnectError).code, "resource_exhausted")
    const badGzip = parseEnvelopes(envelope(FLAG_COMPRESSED, new Uint8Array([1, 2, 3])), 1024)
    assert.strictEqual((badGzip as ConnectError).code, "invalid_argument")
  })

  it("end-stream frames carry {} or the error JSON with base64 details without padding", () => {
    const ok = endStreamFrame()
    assert.strictEqual(ok[0], FLAG_END_STREAM)
    assert.strictEqual(new TextDecoder().decode(ok.subarray(5)), "{}")
    const failed = endStreamFrame(new ConnectError("unavailable", "provider down", [{ type: "aiserver.v1.ErrorDetails", value: new Uint8Array([8, 57]) }]))
    assert.deepStrictEqual(JSON.parse(new TextDecoder().decode(failed.subarray(5))), {
      error: { code: "unavailable", message: "provider down", details: [{ type: "aiserver.v1.ErrorDetails", value: "CDk" }] }
    })
  })

  it("unary gzip bodies inflate within the limit, and a bomb is resource_exhausted", () => {
    const body = gzipSync(Buffer.alloc(4096))
    assert.strictEqual((decodeUnaryBody(body, "gzip", 8192) as Uint8Array).length, 4096)
    assert.strictEqual((decodeUnaryBody(body, "gzip", 1024) as ConnectError).code, "resource_exhausted")
    assert.strictEqual((decodeUnaryBody(body, "br", 8192) as ConnectError).code, "unimplemented")
    assert.strictEqual(httpStatusOf("invalid_argument"), 400)
    assert.strictEqual(httpStatusOf("unimplemented"), 501)
  })
})
