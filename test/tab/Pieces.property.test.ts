/**
 * A suggestion streams in pieces as the model writes it (`nextPiece`): whatever the chunks
 * the completion arrives in, the pieces sent join into exactly the trimmed whole completion
 * (`trimCompletion`), so what Cursor shows while streaming is never taken back.
 */
import { describe, expect, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import { nextPiece } from "../../src/tab/Service.js"
import { trimCompletion } from "../../src/tab/Trim.js"

const line = fc.stringMatching(/^[ a-z(){};=+.,]{0,12}$/)
const indented = fc.tuple(fc.constantFrom("", "  ", "    ", "\t"), line).map(([indent, text]) => indent + text)
const completion = fc.array(indented, { minLength: 0, maxLength: 14 }).map((lines) => lines.join("\n"))
const prompt = fc.record({
  prefix: fc.tuple(fc.array(indented, { maxLength: 4 }), indented).map(([lines, last]) => [...lines, last].join("\n")),
  suffix: fc.array(indented, { maxLength: 4 }).map((lines) => lines.join("\n"))
})

/** The completion cut into chunks at the given points (as a provider's reads would). */
const chunked = (text: string, cuts: ReadonlyArray<number>) => {
  const points = [...new Set(cuts.map((cut) => Math.floor(cut * (text.length + 1))))].sort((a, b) => a - b)
  const chunks: Array<string> = []
  let at = 0
  for (const point of points) {
    chunks.push(text.slice(at, point))
    at = point
  }
  chunks.push(text.slice(at))
  return chunks
}

describe("Tab: a suggestion's pieces", () => {
  it("join into the trimmed whole completion, whatever the chunks", () => {
    fc.assert(fc.property(completion, prompt, fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { maxLength: 12 }), fc.integer({ min: 1, max: 12 }), (text, around, cuts, maxLines) => {
      const limits = { maxLines }
      let sent = ""
      let so = ""
      for (const chunk of chunked(text, cuts)) {
        so += chunk
        sent += nextPiece(sent, so, false, around, limits)
      }
      sent += nextPiece(sent, so, true, around, limits)
      expect(sent).toBe(trimCompletion(text, around, limits))
    }), { numRuns: 1000 })
  })
})
