/**
 * The plain parts of users: tokens are prefixed, random and kept as their SHA-256; names, model
 * lists and USD limits are read as an operator types them, and refused with a message that says
 * what to type instead.
 */
import { assert, describe, it } from "@effect/vitest"
import { Either } from "effect"
import { createHash } from "node:crypto"
import * as Tokens from "../../src/users/Tokens.js"

const messageOf = <A>(result: Either.Either<A, { readonly message: string }>): string =>
  Either.isLeft(result) ? result.left.message : assert.fail(`expected a refusal, got ${JSON.stringify(result.right)}`)

describe("users' tokens", () => {
  it("a token is byok_u_ and 32 random bytes in base64url, a new one each time", () => {
    const tokens = Array.from({ length: 20 }, Tokens.issueToken)
    for (const token of tokens) {
      assert.match(token, /^byok_u_[A-Za-z0-9_-]{43}$/)
      assert.strictEqual(Buffer.from(token.slice("byok_u_".length), "base64url").length, 32)
    }
    assert.strictEqual(new Set(tokens).size, tokens.length)
  })

  it("a token is kept as its SHA-256 in lowercase hex", () => {
    const token = "byok_u_example"
    assert.strictEqual(Tokens.tokenHash(token), createHash("sha256").update(token).digest("hex"))
    assert.match(Tokens.tokenHash(token), /^[0-9a-f]{64}$/)
    assert.notStrictEqual(Tokens.tokenHash(token), Tokens.tokenHash(`${token}x`))
  })
})

describe("what an operator types", () => {
  it("a name is 1 to 64 letters, digits and . _ @ -", () => {
    for (const name of ["alice", "a", "bob.smith@example.com", "ci-bot_2", "x".repeat(64)]) assert.isTrue(Tokens.validName(name), name)
    for (const name of ["", "x".repeat(65), "has space", "semi;colon", "é", "a/b"]) assert.isFalse(Tokens.validName(name), name)
    assert.match(messageOf(Tokens.checkName("has space")), /cannot name a user/)
  })

  it("a models list is trimmed and without repeats; an empty one is refused", () => {
    assert.deepStrictEqual(Tokens.parseModels(" gpt-5 , claude-x,gpt-5,, "), Either.right(["gpt-5", "claude-x"]))
    assert.deepStrictEqual(Tokens.parseModels("one"), Either.right(["one"]))
    assert.match(messageOf(Tokens.parseModels(" , ,")), /empty/)
    assert.match(messageOf(Tokens.checkModels([])), /empty/)
  })

  it("a USD limit is a plain amount of 0 or more; NaN, negatives and the rest are refused by name", () => {
    assert.deepStrictEqual(Tokens.parseUsd("12.5", "--daily"), Either.right(12.5))
    assert.deepStrictEqual(Tokens.parseUsd(" $3 ", "--daily"), Either.right(3))
    assert.deepStrictEqual(Tokens.parseUsd("0", "--daily"), Either.right(0))
    assert.deepStrictEqual(Tokens.parseUsd(".25", "--daily"), Either.right(0.25))
    for (const text of ["-1", "NaN", "", "abc", "0x10", "1e3", "Infinity", "5 USD"]) {
      assert.match(messageOf(Tokens.parseUsd(text, "--monthly")), /^--monthly must be an amount in USD, 0 or more/, text)
    }
    assert.deepStrictEqual(Tokens.checkUsd(7.125, "the daily limit"), Either.right(7.125))
    for (const value of [Number.NaN, -0.01, Number.POSITIVE_INFINITY]) {
      assert.match(messageOf(Tokens.checkUsd(value, "the daily limit")), /^the daily limit must be/)
    }
  })
})
