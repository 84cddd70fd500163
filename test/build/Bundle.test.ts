import { assert, describe, it } from "@effect/vitest"
import { decode, encode } from "@jridgewell/sourcemap-codec"
import { execFileSync, spawnSync } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { asciiOnly, buildBundle, bundleFileOf, keepOwnMappings, repoRoot } from "../../scripts/build.js"

describe("the server bundle (scripts/build.ts)", () => {
  it("keeps one mapping per line of our sources, marks a dependency's code unmapped, and drops the sources nothing maps to", () => {
    const map = {
      version: 3,
      sources: ["../node_modules/effect/a.js", "../src/A.ts", "../src/B.ts", "../node_modules/unused.js"],
      names: ["x"],
      mappings: encode([
        [[0, 0, 0, 0], [5, 1, 10, 0], [9, 1, 10, 4, 0], [12, 1, 11, 0], [20, 0, 3, 0], [30, 0, 4, 0], [40, 2, 7, 2], [44, 1, 11, 0]],
        [[0, 1, 12, 0], [8, 3, 1, 0]]
      ])
    }
    const reduced = keepOwnMappings(map, (source) => source.startsWith("../src/"))
    assert.deepStrictEqual(reduced.sources, ["../src/A.ts", "../src/B.ts"])
    assert.deepStrictEqual(reduced.names, [])
    assert.deepStrictEqual(decode(reduced.mappings), [
      // line start in a dependency: unmapped; A.ts:10 once; A.ts:11; the dependency's run once; B.ts:7; A.ts:11 again after another source
      [[0], [5, 0, 10, 0], [12, 0, 11, 0], [20], [40, 1, 7, 2], [44, 0, 11, 0]],
      [[0, 0, 12, 0], [8]]
    ])
  })

  it("a bundled program's stack trace names our file and line, and leaves the dependency's frames at their place in the bundle", async () => {
    const dir = mkdtempSync(join(tmpdir(), "byok-bundle-"))
    try {
      const out = join(dir, "throws.mjs")
      await buildBundle(join(repoRoot, "test/fixtures/bundle/throws.ts"), out)
      const map = JSON.parse(readFileSync(`${bundleFileOf(out)}.map`, "utf8")) as { sources: Array<string> }
      assert.deepStrictEqual(map.sources.map((source) => source.replace(/^.*\/test\//, "test/")), ["test/fixtures/bundle/throws.ts"])
      const run = spawnSync(process.execPath, ["--enable-source-maps", out], { encoding: "utf8" })
      assert.notStrictEqual(run.status, 0)
      const frames = run.stderr.split("\n").filter((line) => line.trimStart().startsWith("at "))
      assert.include(run.stderr, "thrown from our own line")
      assert.match(frames[0] ?? "", /test\/fixtures\/bundle\/throws\.ts:5:/)
      // Effect's run loop is in the bundle too: its frames point into the bundle, never at our file.
      const outside = frames.filter((frame) => frame.includes("throws.bundle.cjs:"))
      assert.isAbove(outside.length, 0)
      assert.strictEqual(frames.filter((frame) => frame.includes("throws.ts:")).length, frames.length - outside.length - frames.filter((f) => f.includes("node:")).length)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it("the server's bundle (built by the suite's setup) carries its packages but the native SQLite binding, and starts", () => {
    const bundle = readFileSync(join(repoRoot, "dist/main.bundle.cjs"), "utf8")
    assert.include(bundle, `require("better-sqlite3")`)
    for (const dependency of ["effect", "@effect/platform", "@effect/sql-sqlite-node", "@bufbuild/protobuf", "undici", "jsonc-parser"]) {
      assert.notMatch(bundle, new RegExp(`require\\("${dependency}[/"]`), dependency)
    }
    const help = execFileSync(process.execPath, ["--enable-source-maps", join(repoRoot, "dist/main.js"), "--help"], { encoding: "utf8" })
    assert.include(help, "cursor-byok")
    // One byte a character in memory (V8 keeps the source): nothing outside ASCII, the packages' license comments beside it.
    assert.notMatch(bundle, /[^\x00-\x7f]/)
    assert.include(readFileSync(join(repoRoot, "dist/main.bundle.cjs.LEGAL.txt"), "utf8"), "MIT")
  })

  it("refuses a bundle with a character outside ASCII, naming where it is", () => {
    asciiOnly("const a = `plain`\n", "ok.js")
    assert.throws(() => asciiOnly("const a = 1\nconst page = html`<p>a \u00b7 b</p>`\n", "page.js"), /page\.js: a character outside ASCII \("·" on line 2/)
  })
})
