/**
 * The synced-file store behind `rely_on_filesync`: uploads, incremental updates by model
 * version (UTF-16 offsets, in order within a version), the drop on any drift so that the
 * client re-uploads, LRU bounds, and the recent files offered as context.
 */
import { describe, expect, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import { createHash } from "node:crypto"
import { make, sha256Hex } from "../../src/tab/Files.js"
import type { Update, VersionUpdates } from "../../src/tab/Files.js"

const ws = "/home/me/project"

const replace = (startPosition: number, endPosition: number, replacedString: string): Update => ({ startPosition, endPosition, replacedString })
const version = (modelVersion: number, updates: ReadonlyArray<Update>, expectedFileLength = 0): VersionUpdates => ({ modelVersion, updates, expectedFileLength })

const uploaded = (contents: string, modelVersion = 1) => {
  const files = make()
  expect(files.upload(ws, "a.ts", contents, modelVersion)).toBe("ok")
  return files
}

describe("upload and get", () => {
  it("an upload is read back with its version and workspace; another path is not there", () => {
    const files = uploaded("const x = 1\n", 3)
    expect(files.get(ws, "a.ts")).toEqual({ contents: "const x = 1\n", modelVersion: 3, workspace: ws })
    expect(files.get(ws, "b.ts")).toBeUndefined()
  })

  it("a workspace with no such file reads the most recently used file of that path in any workspace", () => {
    const files = make()
    files.upload("/one", "a.ts", "one", 1)
    files.upload("/two", "a.ts", "two", 1)
    expect(files.get("another-id", "a.ts")).toEqual({ contents: "two", modelVersion: 1, workspace: "/two" })
    files.get("/one", "a.ts")
    expect(files.get("another-id", "a.ts")?.workspace).toBe("/one")
    expect(files.get("another-id", "b.ts")).toBeUndefined()
  })

  it("an upload with the right sha256 is stored; a wrong one is refused and drops what was held", () => {
    const files = uploaded("old")
    expect(files.upload(ws, "a.ts", "héllo", 2, sha256Hex("héllo"))).toBe("ok")
    expect(files.upload(ws, "a.ts", "héllo", 3, sha256Hex("hello"))).toBe("mismatch")
    expect(files.get(ws, "a.ts")).toBeUndefined()
    expect(files.upload(ws, "a.ts", "x", 4, "")).toBe("ok")
  })

  it("the hash is of the UTF-8 bytes, in lower- or upper-case hex", () => {
    const files = make()
    const hex = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" // sha256("test")
    expect(sha256Hex("test")).toBe(hex)
    expect(files.upload(ws, "a.ts", "test", 1, hex.toUpperCase())).toBe("ok")
    const utf8 = createHash("sha256").update(Buffer.from("é€😀", "utf8")).digest("hex")
    expect(files.upload(ws, "b.ts", "é€😀", 1, utf8)).toBe("ok")
    expect(files.upload(ws, "c.ts", "é", 1, createHash("sha256").update(Buffer.from("é", "latin1")).digest("hex"))).toBe("mismatch")
  })

  it("a file over maxFileBytes (in UTF-8 bytes) is too_large and drops the older copy", () => {
    const files = make({ maxFileBytes: 8 })
    expect(files.upload(ws, "a.ts", "12345678", 1)).toBe("ok")
    expect(files.upload(ws, "a.ts", "éééé€", 2)).toBe("too_large") // 5 UTF-16 units, 11 bytes
    expect(files.get(ws, "a.ts")).toBeUndefined()
    expect(files.stats()).toEqual({ files: 0, bytes: 0 })
  })
})

describe("sync", () => {
  it("applies an insert, a delete and a replace, and takes the request's version", () => {
    const files = uploaded("hello world")
    expect(files.sync(ws, "a.ts", 2, [version(2, [replace(5, 5, ",")])], "")).toBe("ok")
    expect(files.get(ws, "a.ts")).toEqual({ contents: "hello, world", modelVersion: 2, workspace: ws })
    expect(files.sync(ws, "a.ts", 3, [version(3, [replace(0, 7, "")])], "")).toBe("ok")
    expect(files.get(ws, "a.ts")?.contents).toBe("world")
    expect(files.sync(ws, "a.ts", 4, [version(4, [replace(0, 5, "there")], 5)], sha256Hex("there"))).toBe("ok")
    expect(files.get(ws, "a.ts")).toEqual({ contents: "there", modelVersion: 4, workspace: ws })
  })

  it("updates of one version apply in order, each against the text the previous ones left", () => {
    const files = uploaded("abc")
    // After "X" at 0 the text is "Xabc": offset 4 is its end, which would be out of range in "abc".
    const updates = [replace(0, 0, "X"), replace(4, 4, "Y"), replace(1, 2, "")]
    expect(files.sync(ws, "a.ts", 2, [version(2, updates, 4)], sha256Hex("XbcY"))).toBe("ok")
    expect(files.get(ws, "a.ts")?.contents).toBe("XbcY")
  })

  it("several versions in one call apply in ascending version order, whatever their order in the call", () => {
    const files = uploaded("a")
    const versions = [version(4, [replace(3, 3, "d")]), version(2, [replace(1, 1, "b")]), version(3, [replace(2, 2, "c")])]
    expect(files.sync(ws, "a.ts", 4, versions, sha256Hex("abcd"))).toBe("ok")
    expect(files.get(ws, "a.ts")).toEqual({ contents: "abcd", modelVersion: 4, workspace: ws })
  })

  it("versions already applied are skipped", () => {
    const files = uploaded("a", 5)
    const versions = [version(4, [replace(0, 1, "zzz")]), version(5, [replace(0, 0, "q")]), version(6, [replace(1, 1, "b")])]
    expect(files.sync(ws, "a.ts", 6, versions, sha256Hex("ab"))).toBe("ok")
    expect(files.get(ws, "a.ts")?.contents).toBe("ab")
    expect(files.sync(ws, "a.ts", 6, versions, sha256Hex("ab"))).toBe("ok")
    expect(files.get(ws, "a.ts")).toEqual({ contents: "ab", modelVersion: 6, workspace: ws })
  })

  it("a file never uploaded is missing", () => {
    expect(make().sync(ws, "a.ts", 2, [version(2, [])], "")).toBe("missing")
  })

  it("a gap in versions is a mismatch and drops the file, before or between pending versions", () => {
    const files = uploaded("a")
    expect(files.sync(ws, "a.ts", 3, [version(3, [replace(0, 0, "x")])], "")).toBe("mismatch")
    expect(files.get(ws, "a.ts")).toBeUndefined()
    expect(files.sync(ws, "a.ts", 3, [version(3, [])], "")).toBe("missing")
    files.upload(ws, "a.ts", "a", 1)
    expect(files.sync(ws, "a.ts", 4, [version(2, []), version(4, [])], "")).toBe("mismatch")
    expect(files.get(ws, "a.ts")).toBeUndefined()
  })

  it("a length other than the expected one is a mismatch and drops the file", () => {
    const files = uploaded("abc")
    expect(files.sync(ws, "a.ts", 2, [version(2, [replace(0, 0, "x")], 3)], "")).toBe("mismatch")
    expect(files.get(ws, "a.ts")).toBeUndefined()
  })

  it("offsets out of range are a mismatch and drop the file", () => {
    for (const bad of [replace(2, 4, ""), replace(-1, 0, ""), replace(2, 1, ""), replace(0.5, 1, "")]) {
      const files = uploaded("abc")
      expect(files.sync(ws, "a.ts", 2, [version(2, [bad])], "")).toBe("mismatch")
      expect(files.get(ws, "a.ts")).toBeUndefined()
    }
  })

  it("a final sha256 that does not match is a mismatch and drops the file", () => {
    const files = uploaded("abc")
    expect(files.sync(ws, "a.ts", 2, [version(2, [replace(3, 3, "d")])], sha256Hex("abc"))).toBe("mismatch")
    expect(files.get(ws, "a.ts")).toBeUndefined()
  })

  it("offsets count UTF-16 code units: an emoji is two", () => {
    const files = uploaded("a😀b")
    expect(files.sync(ws, "a.ts", 2, [version(2, [replace(3, 4, "c")], 4)], sha256Hex("a😀c"))).toBe("ok")
    expect(files.sync(ws, "a.ts", 3, [version(3, [replace(1, 3, "🎉🎉")], 6)], sha256Hex("a🎉🎉c"))).toBe("ok")
    expect(files.get(ws, "a.ts")?.contents).toBe("a🎉🎉c")
  })

  it("a sync that makes the file too large is a mismatch and drops it", () => {
    const files = make({ maxFileBytes: 4 })
    files.upload(ws, "a.ts", "abc", 1)
    expect(files.sync(ws, "a.ts", 2, [version(2, [replace(3, 3, "€")])], "")).toBe("mismatch")
    expect(files.stats()).toEqual({ files: 0, bytes: 0 })
  })
})

describe("bounds", () => {
  it("past maxFiles the least recently used file goes; get counts as a use", () => {
    const files = make({ maxFiles: 2 })
    files.upload(ws, "a.ts", "a", 1)
    files.upload(ws, "b.ts", "b", 1)
    files.get(ws, "a.ts")
    files.upload(ws, "c.ts", "c", 1)
    expect(files.get(ws, "b.ts")).toBeUndefined()
    expect(files.get(ws, "a.ts")).toBeDefined()
    expect(files.stats()).toEqual({ files: 2, bytes: 2 })
  })

  it("past maxBytes the least recently used files go; a sync counts as a use and its new size is counted", () => {
    const files = make({ maxBytes: 10 })
    files.upload(ws, "a.ts", "aaaa", 1)
    files.upload(ws, "b.ts", "bbbb", 1)
    expect(files.sync(ws, "a.ts", 2, [version(2, [replace(4, 4, "é")])], "")).toBe("ok") // 6 bytes
    expect(files.stats()).toEqual({ files: 2, bytes: 10 })
    files.upload(ws, "c.ts", "c", 1)
    expect(files.get(ws, "b.ts")).toBeUndefined()
    expect(files.stats()).toEqual({ files: 2, bytes: 7 })
  })

  it("clear empties the store", () => {
    const files = uploaded("abc")
    files.clear()
    expect(files.get(ws, "a.ts")).toBeUndefined()
    expect(files.stats()).toEqual({ files: 0, bytes: 0 })
  })
})

describe("recent", () => {
  it("gives the workspace's files newest first, without the current one, skipping those that do not fit", () => {
    const files = make()
    files.upload(ws, "a.ts", "aaaa", 1)
    files.upload(ws, "b.ts", "bbbbbbbb", 1)
    files.upload("/other", "x.ts", "x", 1)
    files.upload(ws, "c.ts", "cc", 1)
    files.upload(ws, "current.ts", "z", 1)
    files.get(ws, "a.ts")
    expect(files.recent(ws, "current.ts", 100).map((file) => file.path)).toEqual(["a.ts", "c.ts", "b.ts"])
    expect(files.recent(ws, "current.ts", 7)).toEqual([{ path: "a.ts", contents: "aaaa" }, { path: "c.ts", contents: "cc" }])
    expect(files.recent(ws, "a.ts", 3)).toEqual([{ path: "current.ts", contents: "z" }, { path: "c.ts", contents: "cc" }])
    expect(files.recent(ws, "current.ts", 0)).toEqual([])
    expect(files.recent("/other", "", 100)).toEqual([{ path: "x.ts", contents: "x" }])
  })

  it("workspaces are isolated: the same path in two workspaces is two files", () => {
    const files = make()
    files.upload("/one", "a.ts", "one", 1)
    files.upload("/two", "a.ts", "two", 7)
    expect(files.sync("/one", "a.ts", 2, [version(2, [replace(3, 3, "!")])], "")).toBe("ok")
    expect(files.get("/one", "a.ts")).toEqual({ contents: "one!", modelVersion: 2, workspace: "/one" })
    expect(files.get("/two", "a.ts")).toEqual({ contents: "two", modelVersion: 7, workspace: "/two" })
  })
})

/** An edit as fractions of the text it lands on, so that it is always in range. */
const editArb = fc.record({ start: fc.double({ min: 0, max: 1, noNaN: true }), span: fc.double({ min: 0, max: 1, noNaN: true }), text: fc.string({ unit: "grapheme", maxLength: 6 }) })
const versionsArb = fc.array(fc.array(editArb, { maxLength: 4 }), { maxLength: 6 })

describe("sync properties", () => {
  it.prop(
    "random edits sent as updates, several to a version and several versions to a call, give the text applied directly, and its sha256",
    [fc.string({ unit: "grapheme", maxLength: 40 }), versionsArb, fc.integer({ min: 1, max: 3 })],
    ([initial, editsByVersion, versionsPerCall]) => {
      const files = uploaded(initial)
      let expected = initial
      const pending: Array<VersionUpdates> = []
      const sendPending = () => {
        const modelVersion = pending[pending.length - 1]!.modelVersion
        expect(files.sync(ws, "a.ts", modelVersion, pending.splice(0), sha256Hex(expected))).toBe("ok")
      }
      editsByVersion.forEach((edits, index) => {
        const updates = edits.map(({ start, span, text }) => {
          const startPosition = Math.floor(start * expected.length)
          const endPosition = startPosition + Math.floor(span * (expected.length - startPosition))
          expected = expected.slice(0, startPosition) + text + expected.slice(endPosition)
          return replace(startPosition, endPosition, text)
        })
        pending.push(version(index + 2, updates, expected.length))
        if (pending.length === versionsPerCall) sendPending()
      })
      if (pending.length > 0) sendPending()
      const stored = files.get(ws, "a.ts")
      expect(stored?.contents).toBe(expected)
      expect(stored?.modelVersion).toBe(editsByVersion.length + 1)
      expect(sha256Hex(stored!.contents)).toBe(sha256Hex(expected))
    },
    { fastCheck: { numRuns: 300 } }
  )
})
