/** A chat model's answer for Tab loses its code fence however it streams (`Chat.makeUnfence`). */
import { describe, expect, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import { makeUnfence } from "../../src/tab/Chat.js"

/** The answer fed in the given pieces, then its end. */
const unfenced = (pieces: ReadonlyArray<string>) => {
  const unfence = makeUnfence()
  return pieces.map((piece) => unfence(piece, false)).join("") + unfence("", true)
}

/** `text` cut at the given fractions of its length. */
const cut = (text: string, cuts: ReadonlyArray<number>) => {
  const points = [...new Set(cuts.map((c) => Math.floor(c * (text.length + 1))))].sort((a, b) => a - b)
  const pieces: Array<string> = []
  let at = 0
  for (const point of points) {
    pieces.push(text.slice(at, point))
    at = point
  }
  return [...pieces, text.slice(at)]
}

describe("Tab on a chat model: the answer's code fence", () => {
  it("a plain answer passes as it is", () => {
    expect(unfenced(["ite", "m * 2"])).toBe("item * 2")
    expect(unfenced(["`x` + 1"])).toBe("`x` + 1")
  })
  it("a fenced answer loses its fence lines and what follows the closing one", () => {
    expect(unfenced(["```ts\nitem\n```\nThat completes it."])).toBe("item")
    expect(unfenced(["``", "`python\n", "return a + b", "\n``", "`"])).toBe("return a + b")
    expect(unfenced(["```\nx"])).toBe("x")
  })
  it("whatever the pieces, the same text", () => {
    const code = fc.stringMatching(/^[a-z (){}=+;\n]{0,30}$/).filter((text) => !text.startsWith("\n"))
    fc.assert(fc.property(code, fc.boolean(), fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { maxLength: 8 }), (body, fenced, cuts) => {
      const answer = fenced ? "```js\n" + body + "\n```\nnote" : body
      const whole = unfenced([answer])
      expect(unfenced(cut(answer, cuts))).toBe(whole)
      expect(whole).toBe(body)
    }), { numRuns: 500 })
  })
})
