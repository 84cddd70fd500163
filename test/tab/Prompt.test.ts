/**
 * The FIM prompt of a Tab request: where the cursor falls (clamped, UTF-16, CRLF), how the
 * file is cut around it (line boundaries, limits) and what the context holds, in which order.
 */
import { describe, expect, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import { defaultLimits, type TabLimits, type TabRequest } from "../../src/Tab.js"
import { cursorOffset, lineCommentOf, promptOf } from "../../src/tab/Prompt.js"

const request = (contents: string, line: number, column: number, more: Partial<TabRequest> = {}): TabRequest => ({
  workspace: "/w",
  path: "src/x.ts",
  languageId: "typescript",
  contents,
  line,
  column,
  recentEdits: [],
  otherFiles: [],
  diagnostics: [],
  ...more
})

const limits = (more: Partial<TabLimits>): TabLimits => ({ ...defaultLimits, ...more })

describe("cursorOffset", () => {
  const text = "ab\ncd\nef"
  it("counts lines and columns from 0", () => {
    expect(cursorOffset(text, 1, 1)).toBe(4)
    expect(cursorOffset(text, 2, 2)).toBe(text.length)
  })

  it("clamps a column past its line to the line's end, and a line past the last to the end of the file", () => {
    expect(cursorOffset(text, 0, 99)).toBe(2)
    expect(cursorOffset(text, 9, 0)).toBe(text.length)
    expect(cursorOffset(text, -1, -5)).toBe(0)
    expect(cursorOffset("", 3, 3)).toBe(0)
  })

  it("in a CRLF file a column past the line stops before the \\r", () => {
    expect(cursorOffset("ab\r\ncd\r\n", 0, 9)).toBe(2)
    expect(cursorOffset("ab\r\ncd\r\n", 1, 1)).toBe(5)
  })

  it("counts columns in UTF-16 code units, and never splits a surrogate pair", () => {
    const line = "s = '😀x'"
    expect(cursorOffset(line, 0, 7)).toBe(7)
    expect(line.slice(0, cursorOffset(line, 0, 7))).toBe("s = '😀")
    expect(cursorOffset(line, 0, 6)).toBe(5)
  })
})

describe("promptOf: the file around the cursor", () => {
  it("a cursor inside a function: the text before and after it", () => {
    const prompt = promptOf(request("function f() {\n  return 1\n}\n", 1, 2), defaultLimits)
    expect(prompt.prefix).toBe("function f() {\n  ")
    expect(prompt.suffix).toBe("return 1\n}\n")
    expect(prompt.maxTokens).toBe(defaultLimits.maxTokens)
  })

  it("a cursor at or past the end of the file has an empty suffix", () => {
    expect(promptOf(request("a\nb", 1, 1), defaultLimits)).toMatchObject({ prefix: "a\nb", suffix: "" })
    expect(promptOf(request("a\nb", 7, 0), defaultLimits)).toMatchObject({ prefix: "a\nb", suffix: "" })
    expect(promptOf(request("a\nb", 0, 40), defaultLimits)).toMatchObject({ prefix: "a", suffix: "\nb" })
  })

  it("an empty file: empty prefix and suffix, the path line as context", () => {
    expect(promptOf(request("", 0, 0), defaultLimits)).toMatchObject({ prefix: "", suffix: "", context: "// Path: src/x.ts\n" })
    expect(promptOf(request("", 0, 0, { path: "" }), defaultLimits).context).toBe("")
  })

  it("a CRLF file is cut after whole \\r\\n and its stops use \\r\\n", () => {
    const contents = "one\r\ntwo\r\nthree\r\nfour\r\n"
    const prompt = promptOf(request(contents, 2, 2), limits({ prefixChars: 9, suffixChars: 10 }))
    expect(prompt.prefix).toBe("two\r\nth")
    expect(prompt.suffix).toBe("ree\r\n")
    expect(prompt.stop).toEqual(["\r\n\r\n\r\n"])
  })

  it("a huge file is cut to the limits at line boundaries", () => {
    const contents = Array.from({ length: 2000 }, (_, i) => `line ${i}`).join("\n")
    const prompt = promptOf(request(contents, 1000, 3), limits({ prefixChars: 100, suffixChars: 50 }))
    expect(prompt.prefix.length).toBeLessThanOrEqual(100)
    expect(prompt.prefix.startsWith("line ")).toBe(true)
    expect(prompt.prefix.endsWith("line 999\nlin")).toBe(true)
    expect(prompt.suffix.length).toBeLessThanOrEqual(50)
    expect(prompt.suffix.startsWith("e 1000\nline 1001\n")).toBe(true)
    expect(prompt.suffix.endsWith("\n")).toBe(true)
  })

  it("a single line longer than the limit is cut inside it, to exactly the limit", () => {
    const contents = "x".repeat(10_000)
    const prompt = promptOf(request(contents, 0, 5_000), limits({ prefixChars: 300, suffixChars: 200 }))
    expect(prompt.prefix).toBe("x".repeat(300))
    expect(prompt.suffix).toBe("x".repeat(200))
  })

  it("stops never end a suggestion at a single newline; python also stops at a new top-level def", () => {
    for (const languageId of ["typescript", "python", "go", "rust", "sql", ""]) {
      const stop = promptOf(request("x\n", 0, 0, { languageId }), defaultLimits).stop
      expect(stop).toContain("\n\n\n")
      for (const sequence of stop) expect(sequence.trim() !== "" || sequence === "\n\n\n").toBe(true)
    }
    expect(promptOf(request("x\n", 0, 0, { languageId: "python" }), defaultLimits).stop).toContain("\ndef ")
  })
})

describe("promptOf: the context", () => {
  const rich = request("a\n".repeat(100), 50, 0, {
    diagnostics: [
      { line: 90, message: "far away", severity: "error" },
      { line: 55, message: "five below", severity: "warning" },
      { line: 49, message: "just above", severity: "error" }
    ],
    recentEdits: ["-old first\n+new first", "-old second\n+new second"],
    otherFiles: [
      { path: "src/x.ts", contents: "the request's own file" },
      { path: "src/y.ts", contents: "export const y = 1\n" }
    ]
  })

  it("holds the path, the problems near the cursor (nearest first), the edits (newest first), then other files", () => {
    expect(promptOf(rich, defaultLimits).context).toBe(
      [
        "// Path: src/x.ts",
        "// src/x.ts:50: error: just above",
        "// src/x.ts:56: warning: five below",
        "// Recent edit:",
        "// -old second",
        "// +new second",
        "// Recent edit:",
        "// -old first",
        "// +new first",
        "// Compare this snippet from src/y.ts:",
        "// export const y = 1",
        ""
      ].join("\n")
    )
  })

  it("is written in the language's line comments", () => {
    expect(lineCommentOf("python")).toBe("#")
    expect(lineCommentOf("SQL")).toBe("--")
    expect(lineCommentOf("rust")).toBe("//")
    expect(lineCommentOf("something-new")).toBe("//")
    const context = promptOf({ ...rich, languageId: "python" }, defaultLimits).context
    expect(context.split("\n").filter((line) => line !== "").every((line) => line.startsWith("#"))).toBe(true)
  })

  it("is bounded: an item that does not fit is dropped whole, a later smaller one still comes", () => {
    const big = "x".repeat(200)
    const context = promptOf(
      request("a", 0, 0, { recentEdits: [big, "small"], otherFiles: [{ path: "b.ts", contents: "b" }] }),
      limits({ contextChars: 120 })
    ).context
    expect(context).toBe("// Path: src/x.ts\n// Recent edit:\n// small\n// Compare this snippet from b.ts:\n// b\n")
  })

  it("the first item, alone too big, is cut to fit (whole lines first), and nothing else comes", () => {
    const edit = Array.from({ length: 50 }, (_, i) => `+line ${i}`).join("\n")
    const context = promptOf(request("a", 0, 0, { recentEdits: ["x", edit] }), limits({ contextChars: 60 })).context
    expect(context).toBe("// Path: src/x.ts\n// Recent edit:\n// +line 0\n// +line 1\n")
    expect(context.length).toBeLessThanOrEqual(60)
  })
})

const piece = fc.constantFrom("a", "b", " ", "  ", "\n", "\r\n", "😀", "é", "{", "}", "xyz")
const contentsArb = fc.array(piece, { maxLength: 60 }).map((pieces) => pieces.join(""))
const limitsArb = fc.record({
  prefixChars: fc.integer({ min: 0, max: 40 }),
  suffixChars: fc.integer({ min: 0, max: 40 }),
  contextChars: fc.integer({ min: 0, max: 200 }),
  maxLines: fc.constant(5),
  maxTokens: fc.constant(64)
})
const cursorArb = fc.tuple(fc.integer({ min: -2, max: 25 }), fc.integer({ min: -2, max: 30 }))

const runs = { fastCheck: { numRuns: 400 } }

describe("promptOf properties", () => {
  it.prop(
    "prefix and suffix meet at the cursor: the prefix ends the text before it, the suffix begins the text after it",
    [contentsArb, cursorArb, limitsArb],
    ([contents, [line, column], bounds]) => {
      const offset = cursorOffset(contents, line, column)
      const prompt = promptOf(request(contents, line, column), bounds)
      expect(contents.slice(0, offset).endsWith(prompt.prefix)).toBe(true)
      expect(contents.slice(offset).startsWith(prompt.suffix)).toBe(true)
      expect(contents[offset - 1] === "\r" && contents[offset] === "\n").toBe(false)
    },
    runs
  )

  it.prop(
    "the prefix is within its limit: whole lines from the first line start inside the window, else cut inside the line (one less to keep a surrogate pair)",
    [contentsArb, cursorArb, limitsArb],
    ([contents, [line, column], bounds]) => {
      const before = contents.slice(0, cursorOffset(contents, line, column))
      const prefix = promptOf(request(contents, line, column), bounds).prefix
      expect(prefix.length).toBeLessThanOrEqual(bounds.prefixChars)
      if (prefix === before || bounds.prefixChars === 0) return
      const cut = before.length - prefix.length
      const windowStart = before.length - bounds.prefixChars
      const lineStartInWindow = before.slice(windowStart - 1, before.length - 1).includes("\n")
      if (lineStartInWindow) {
        expect(before[cut - 1]).toBe("\n")
        expect(before.slice(windowStart - 1, cut - 1).includes("\n")).toBe(false)
      } else {
        expect(prefix.length).toBeGreaterThanOrEqual(bounds.prefixChars - 1)
      }
    },
    runs
  )

  it.prop(
    "the suffix is within its limit: up to the last line break inside the window, else cut inside the line",
    [contentsArb, cursorArb, limitsArb],
    ([contents, [line, column], bounds]) => {
      const after = contents.slice(cursorOffset(contents, line, column))
      const suffix = promptOf(request(contents, line, column), bounds).suffix
      expect(suffix.length).toBeLessThanOrEqual(bounds.suffixChars)
      if (suffix === after || bounds.suffixChars === 0) return
      const window = after.slice(0, bounds.suffixChars)
      if (window.includes("\n")) expect(suffix).toBe(window.slice(0, window.lastIndexOf("\n") + 1))
      else expect(suffix.length).toBeGreaterThanOrEqual(bounds.suffixChars - 1)
    },
    runs
  )

  it.prop(
    "the context starts with the path line, ends with a newline, and is within its limit (or is the path line alone)",
    [
      limitsArb,
      fc.array(fc.string({ maxLength: 60 }), { maxLength: 4 }),
      fc.array(fc.record({ path: fc.constantFrom("src/x.ts", "a.ts", "b.py"), contents: fc.string({ maxLength: 80 }) }), { maxLength: 4 }),
      fc.array(fc.record({ line: fc.integer({ min: 0, max: 60 }), message: fc.string({ maxLength: 30 }), severity: fc.constantFrom("error", "") }), { maxLength: 4 })
    ],
    ([bounds, recentEdits, otherFiles, diagnostics]) => {
      const context = promptOf(request("a\nb\n", 1, 0, { recentEdits, otherFiles, diagnostics }), bounds).context
      expect(context.startsWith("// Path: src/x.ts\n")).toBe(true)
      expect(context.endsWith("\n")).toBe(true)
      expect(context.length).toBeLessThanOrEqual(Math.max(bounds.contextChars, "// Path: src/x.ts\n".length))
      expect(context.includes("Compare this snippet from src/x.ts")).toBe(false)
    },
    runs
  )
})
