/**
 * `npm start` builds only when the bundle's sources changed (`scripts/fresh.mjs`, the stamp of
 * `scripts/stamp.mjs`): run in a copy of its scripts over a small tree of its own, so the real
 * build is never started here.
 */
import { assert, describe, it } from "@effect/vitest"
import { spawnSync } from "node:child_process"
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"

const scripts = resolve(process.cwd(), "scripts")

/** A tree with sources, a lock file and a "built" dist/, and the two scripts. */
const tree = () => {
  const root = mkdtempSync(join(tmpdir(), "cursor-byok-fresh-"))
  for (const dir of ["src/loop", "scripts", "dist"]) mkdirSync(join(root, dir), { recursive: true })
  writeFileSync(join(root, "src/main.ts"), "export const a = 1\n")
  writeFileSync(join(root, "src/loop/Turns.ts"), "export const b = 2\n")
  writeFileSync(join(root, "package.json"), "{}\n")
  writeFileSync(join(root, "package-lock.json"), "{}\n")
  writeFileSync(join(root, "tsconfig.json"), "{}\n")
  writeFileSync(join(root, "scripts/build.ts"), "// the build\n")
  writeFileSync(join(root, "dist/main.js"), "")
  writeFileSync(join(root, "dist/main.bundle.cjs"), "")
  copyFileSync(join(scripts, "fresh.mjs"), join(root, "scripts/fresh.mjs"))
  copyFileSync(join(scripts, "stamp.mjs"), join(root, "scripts/stamp.mjs"))
  return root
}

const fresh = (root: string) => {
  const result = spawnSync(process.execPath, [join(root, "scripts/fresh.mjs")], { cwd: root, encoding: "utf8" })
  return { status: result.status, built: result.stderr.includes("building the server") }
}

const stamp = async (root: string) => (await import(join(root, "scripts/stamp.mjs")) as { writeStamp: (root: string) => void }).writeStamp(root)

describe("npm start's build step", () => {
  it("starts without a build when nothing changed, and builds when a source, the lock file or the build script did", async () => {
    const root = tree()
    try {
      // Never built (no stamp): a build.
      assert.isTrue(fresh(root).built)
      await stamp(root)
      assert.deepStrictEqual(fresh(root), { status: 0, built: false })
      assert.deepStrictEqual(fresh(root), { status: 0, built: false })
      // Rewritten with the same bytes: still fresh.
      writeFileSync(join(root, "src/loop/Turns.ts"), "export const b = 2\n")
      assert.deepStrictEqual(fresh(root), { status: 0, built: false })
      for (const [file, text] of [["src/loop/Turns.ts", "export const b = 3\n"], ["package-lock.json", "{\"v\":2}\n"], ["scripts/build.ts", "// changed\n"], ["src/New.ts", "new\n"]]) {
        await stamp(root)
        writeFileSync(join(root, file!), text!)
        assert.isTrue(fresh(root).built, file)
      }
      // The bundle gone: a build, whatever the stamp says.
      await stamp(root)
      rmSync(join(root, "dist/main.bundle.cjs"))
      assert.isTrue(fresh(root).built)
    } finally {
      rmSync(root, { recursive: true, force: true })
    }
  })
})
