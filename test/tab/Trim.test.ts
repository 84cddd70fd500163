/**
 * From the model's completion to Cursor's suggestion: where a completion stops (line limit,
 * blank line, end of block), the repeat of the code after the cursor cut, the whole-line
 * suggestion, and typing through a suggestion without a model call.
 */
import { describe, expect, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import { cursorLineOf } from "../../src/tab/Prompt.js"
import { continues, suggestionOf, trimCompletion } from "../../src/tab/Trim.js"

const trim = (completion: string, prefix: string, suffix: string, maxLines = 12): string =>
  trimCompletion(completion, { prefix, suffix }, { maxLines })

describe("trimCompletion", () => {
  it("a completion of only whitespace is nothing", () => {
    expect(trim("  \n\t\n", "x = ", "\n")).toBe("")
    expect(trim("", "x = ", "\n")).toBe("")
  })

  it("strips trailing whitespace on the last line", () => {
    expect(trim("1  \t", "const a = ", "\n")).toBe("1")
  })

  it("stops at the first blank line after text (blank lines before any text are kept)", () => {
    expect(trim("1\n\nconst b = 2", "const a = ", "\n")).toBe("1")
    expect(trim("\n\nfoo()\nbar()\n\nbaz()", "}", "")).toBe("\n\nfoo()\nbar()")
  })

  it("stops at the end of the cursor's block: a line indented less than the cursor line", () => {
    expect(trim("return 1\nprint(f())", "def f():\n    ", "")).toBe("return 1")
  })

  it("keeps the dedented line when it only closes a bracket the suffix does not start with", () => {
    expect(trim("return 1\n}\n\nfunction g() {}", "function f() {\n  ", "")).toBe("return 1\n}")
    expect(trim("return 1\n}\nfunction g() {}", "function f() {\n  ", "\n} // end\n")).toBe("return 1")
  })

  it("a deeper or equal indentation goes on (a block the completion opens and closes)", () => {
    expect(trim("\n    y()\n  }\n  z()", "function f() {\n  if (x) {", "")).toBe("\n    y()\n  }\n  z()")
  })

  it("cuts at maxLines lines", () => {
    expect(trim("a\nb\nc\nd", "", "", 2)).toBe("a\nb")
    expect(trim("a\nb", "", "", 0)).toBe("")
  })

  it("cuts the end that repeats the rest of the cursor line", () => {
    expect(trim("x)", "foo(", ")\n")).toBe("x")
    expect(trim("a, b } from './x'", "import { ", " } from './x'\n")).toBe("a, b")
    expect(trim("hi\")", "print(\"", "\")\n")).toBe("hi")
  })

  it("keeps a closing bracket the line needs (`bar(|)` completed with `foo(x)`)", () => {
    expect(trim("foo(x)", "bar(", ")\n")).toBe("foo(x)")
    expect(trim("foo(x))", "bar(", ")\n")).toBe("foo(x)")
    expect(trim("x)))", "foo(", ")\n")).toBe("x")
  })

  it("stops before a line that repeats the first non-empty line of the suffix", () => {
    expect(trim("const x = 1\n  return x\n}", "function f() {\n  ", "\n  return x\n}\n")).toBe("const x = 1")
    expect(trim("return x", "function f() {\n  ", "\n  return x\n}\n")).toBe("")
  })

  it("lines written before the code on the cursor's line keep their break, and the code its indentation", () => {
    const insert = trim("bar()\n", "x\n  ", "foo()\n")
    expect(insert).toBe("bar()\n  ")
    expect(suggestionOf("x\n  foo()\n", 1, 2, insert)?.text).toBe("  bar()\n  foo()")
    expect(trim("bar()\n  foo()\nmore", "x\n  ", "foo()\n")).toBe("bar()\n  ")
  })
})

describe("suggestionOf", () => {
  it("is the cursor's whole line with the insert at the cursor", () => {
    expect(suggestionOf("let x = \nnext", 0, 8, "1")).toEqual({ text: "let x = 1", startLine: 0, endLineInclusive: 0, insert: "1" })
    expect(suggestionOf("foo()\n", 0, 4, "a, b")).toEqual({ text: "foo(a, b)", startLine: 0, endLineInclusive: 0, insert: "a, b" })
  })

  it("clamps the cursor like cursorOffset, and leaves a CRLF line's \\r out", () => {
    expect(suggestionOf("a\nb", 9, 9, "!")).toMatchObject({ text: "b!", startLine: 1, endLineInclusive: 1 })
    expect(suggestionOf("ab\r\ncd\r\n", 0, 9, "!")).toMatchObject({ text: "ab!", startLine: 0 })
  })

  it("is undefined for an empty insert", () => {
    expect(suggestionOf("a", 0, 1, "")).toBeUndefined()
  })
})

describe("continues", () => {
  const previous = { prefix: "const a = ", insert: "compute(1)" }
  it("returns the rest of the insert when the user typed its start", () => {
    expect(continues(previous, "const a = comp")).toBe("ute(1)")
  })
  it("is undefined when nothing was typed, everything was, or something else was", () => {
    expect(continues(previous, "const a = ")).toBeUndefined()
    expect(continues(previous, "const a = compute(1)")).toBeUndefined()
    expect(continues(previous, "const a = x")).toBeUndefined()
    expect(continues(previous, "const b = comp")).toBeUndefined()
  })
})

const lineArb = fc.constantFrom("", "  ", "x", "  y", "    z)", "}", "  }", "foo(", ")", "a b", "\t")
const textArb = fc.array(lineArb, { maxLength: 8 }).map((lines) => lines.join("\n"))
const restArb = fc.constantFrom("", ")", "foo()", "a b", "  ", "x", "]);")

/** The lines the insert brings; a trailing break and indentation (the cursor line's code moved below) are not one. */
const ownLinesOf = (insert: string, before: string): number => {
  if (insert === "") return 0
  const own = before.trim() === "" && insert.endsWith("\n" + before) ? insert.slice(0, insert.length - before.length - 1) : insert
  return own.split("\n").length
}

describe("trimCompletion properties", () => {
  it.prop(
    "never whitespace only; never more than maxLines lines; never a line equal to the suffix's first non-empty line; no end repeating a bracket-free rest of the line",
    [textArb, fc.constantFrom("", "  ", "foo(", "  x = "), restArb, textArb, fc.integer({ min: 0, max: 5 })],
    ([completion, before, rest, after, maxLines]) => {
      const prefix = `top\n${before}`
      const suffix = `${rest}\n${after}`
      const insert = trimCompletion(completion, { prefix, suffix }, { maxLines })
      expect(ownLinesOf(insert, before)).toBeLessThanOrEqual(maxLines)
      expect(insert === "" || insert.trim() !== "").toBe(true)
      const suffixLines = suffix.split("\n")
      const firstNonEmpty = rest.trim() !== "" ? before + rest : suffixLines.slice(1).find((line) => line.trim() !== "")
      if (firstNonEmpty !== undefined && insert !== "") {
        const lines = (before + insert).split("\n")
        const own = rest.trim() !== "" ? lines.slice(1) : lines
        for (const line of own) expect(line.trimEnd()).not.toBe(firstNonEmpty.trimEnd())
      }
      if (rest.trim() !== "" && !/[()[\]{}]/.test(rest)) expect(insert.endsWith(rest)).toBe(false)
    },
    { fastCheck: { numRuns: 500 } }
  )
})

describe("suggestionOf and continues properties", () => {
  it.prop(
    "the suggestion is the cursor's line with the insert at the cursor: taking the insert out gives the line back",
    [fc.array(fc.constantFrom("ab", " ", "\n", "\r\n", "😀"), { maxLength: 20 }).map((pieces) => pieces.join("")), fc.integer({ min: -1, max: 12 }), fc.integer({ min: -1, max: 12 }), fc.string({ minLength: 1, maxLength: 10 })],
    ([contents, line, column, insert]) => {
      const suggestion = suggestionOf(contents, line, column, insert)!
      const lines = contents.split(/\r?\n/)
      expect(suggestion.startLine).toBe(Math.min(Math.max(line, 0), lines.length - 1))
      expect(suggestion.endLineInclusive).toBe(suggestion.startLine)
      const cursor = cursorLineOf(contents, line, column)
      const at = cursor.offset - cursor.start
      expect(suggestion.text.slice(at, at + insert.length)).toBe(insert)
      expect(suggestion.text.slice(0, at) + suggestion.text.slice(at + insert.length)).toBe(lines[suggestion.startLine])
    }
  )

  it.prop(
    "typing through: the first k characters typed leave the rest of the insert",
    [fc.string({ maxLength: 40 }), fc.string({ minLength: 2, maxLength: 40 }), fc.nat()],
    ([prefix, insert, seed]) => {
      const k = 1 + (seed % (insert.length - 1))
      expect(continues({ prefix, insert }, prefix + insert.slice(0, k))).toBe(insert.slice(k))
    }
  )

  it.prop(
    "typing anything that is not the start of the insert is no continuation",
    [fc.string({ maxLength: 20 }), fc.string({ minLength: 1, maxLength: 20 }), fc.string({ minLength: 1, maxLength: 5 })],
    ([prefix, insert, typed]) => {
      fc.pre(!insert.startsWith(typed) || typed.length >= insert.length)
      expect(continues({ prefix, insert }, prefix + typed)).toBeUndefined()
    }
  )
})
