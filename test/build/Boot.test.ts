/**
 * The entry's code cache (`src/Boot.ts`): a bundle runs without one and gets one written, runs
 * from it the next time, and a cache that is damaged, refused by V8, or made for another source
 * (even one of the same length, which V8 alone would accept) is never used and is replaced.
 * The stack mapping is covered by `Bundle.test.ts`, which runs a built bundle in a process of
 * its own (here the bundles run in the test's process, where the mapping is not installed).
 */
import { assert, describe, it } from "@effect/vitest"
import { createHash, randomBytes } from "node:crypto"
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterEach, beforeEach } from "vitest"
import { cacheFileOf, readCache, runBundle, writeCache } from "../../src/Boot.js"

/** A small CommonJS bundle: counts its runs on the global object and exports what its wrapper gave it. */
const bundleSource = (digit: number) => `"use strict";
const counter = (n) => { let total = 0; for (let i = 0; i < n; i++) total += i % 7; return total };
globalThis.__bootTestRuns = (globalThis.__bootTestRuns ?? 0) + 1;
module.exports.value = ${digit} + counter(10);
module.exports.file = require("node:path").basename(__filename);
`

const runs = () => (globalThis as { __bootTestRuns?: number }).__bootTestRuns ?? 0

describe("the entry's code cache (src/Boot.ts)", () => {
  let dir = ""
  let bundle = ""
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "byok-boot-"))
    bundle = join(dir, "main.bundle.cjs")
    writeFileSync(bundle, bundleSource(1))
  })
  afterEach(() => {
    rmSync(dir, { recursive: true, force: true })
  })

  it("runs a bundle without a cache and writes one; the next run uses it", async () => {
    const before = runs()
    const first = runBundle(bundle, 0)
    assert.strictEqual(first.outcome, "absent")
    assert.isTrue(await first.written)
    const bytes = readFileSync(first.cacheFile)
    assert.isTrue(createHash("sha256").update(bytes.subarray(32)).digest().equals(bytes.subarray(0, 32)))
    const second = runBundle(bundle, 0)
    assert.strictEqual(second.outcome, "used")
    assert.isFalse(await second.written)
    assert.strictEqual(second.cacheFile, first.cacheFile)
    assert.strictEqual(runs() - before, 2)
  })

  it("a damaged cache is not used, and is written again", async () => {
    const first = runBundle(bundle, 0)
    await first.written
    const bytes = readFileSync(first.cacheFile)
    bytes.writeUInt8(bytes.readUInt8(bytes.length - 10) ^ 0xff, bytes.length - 10)
    writeFileSync(first.cacheFile, bytes)
    assert.isUndefined(readCache(first.cacheFile))
    const second = runBundle(bundle, 0)
    assert.strictEqual(second.outcome, "absent")
    assert.isTrue(await second.written)
    assert.isDefined(readCache(first.cacheFile))
  })

  it("a whole file that V8 refuses (not a code cache) is rejected without harm, and replaced", async () => {
    const cacheFile = cacheFileOf(bundle, readFileSync(bundle, "utf8"))
    assert.isTrue(writeCache(cacheFile, randomBytes(4096)))
    const before = runs()
    const run = runBundle(bundle, 0)
    assert.strictEqual(run.outcome, "rejected")
    assert.strictEqual(runs() - before, 1)
    assert.isTrue(await run.written)
    assert.strictEqual(runBundle(bundle, 0).outcome, "used")
  })

  it("a changed bundle of the same length gets a cache of its own; the old build's caches are removed when it is written", async () => {
    const first = runBundle(bundle, 0)
    await first.written
    // The same build under other flags keeps its cache; the new build's own other flags too.
    const otherFlags = first.cacheFile.replace(/\.[0-9a-f]+\.v8cache$/, ".0123456789abcdef01234567.v8cache")
    writeFileSync(otherFlags, "")
    const changed = bundleSource(2)
    assert.strictEqual(changed.length, bundleSource(1).length)
    writeFileSync(bundle, changed)
    const second = runBundle(bundle, 0)
    assert.notStrictEqual(second.cacheFile, first.cacheFile)
    assert.strictEqual(second.outcome, "absent")
    assert.isTrue(await second.written)
    assert.isFalse(existsSync(first.cacheFile))
    assert.isFalse(existsSync(otherFlags))
    assert.deepStrictEqual(readdirSync(dir).filter((name) => name.endsWith(".v8cache")), [second.cacheFile.slice(dir.length + 1)])
    const sameBuildOtherFlags = second.cacheFile.replace(/\.[0-9a-f]+\.v8cache$/, ".0123456789abcdef01234567.v8cache")
    writeFileSync(sameBuildOtherFlags, "")
    assert.isTrue(writeCache(second.cacheFile, new Uint8Array(8)))
    assert.isTrue(existsSync(sameBuildOtherFlags))
  })

  it("a folder that cannot be written leaves the bundle running without a cache", () => {
    assert.isFalse(writeCache(join(bundle, "not-a-folder.v8cache"), new Uint8Array(8)))
    assert.isUndefined(readCache(join(dir, "missing.v8cache")))
  })
})
