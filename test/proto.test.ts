/**
 * Guards `src/gen/` against drift: regenerates the protobuf code from `src/proto/` into a
 * temporary directory with the checked-in buf templates and compares it byte for byte with
 * the committed output. Runs offline: buf and protoc-gen-es are local binaries.
 */
import { execFileSync } from "node:child_process"
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, relative } from "node:path"
import { afterAll, assert, describe, it } from "@effect/vitest"

const root = join(import.meta.dirname, "..")
const bin = join(root, "node_modules", ".bin")

const listFiles = (dir: string): Array<string> =>
  readdirSync(dir).flatMap((name) => {
    const path = join(dir, name)
    return statSync(path).isDirectory() ? listFiles(path) : [path]
  })

describe("generated protobuf code", () => {
  const out = mkdtempSync(join(tmpdir(), "cursor-byok-gen-"))
  afterAll(() => rmSync(out, { recursive: true, force: true }))

  it("src/gen matches a fresh `buf generate` of src/proto", () => {
    // `-o` prefixes the template's `out: src/gen`, so the fresh copy lands in <out>/src/gen.
    execFileSync(join(bin, "buf"), ["generate", "--template", "buf.gen.yaml", "-o", out], {
      cwd: root,
      env: { ...process.env, PATH: `${bin}:${process.env.PATH ?? ""}` },
      stdio: "pipe"
    })
    const committed = join(root, "src", "gen")
    const fresh = join(out, "src", "gen")
    const committedFiles = listFiles(committed).map((path) => relative(committed, path)).sort()
    const freshFiles = listFiles(fresh).map((path) => relative(fresh, path)).sort()
    assert.deepStrictEqual(committedFiles, freshFiles, "run `npm run gen`: the set of generated files differs")
    for (const file of freshFiles) {
      const same = readFileSync(join(committed, file)).equals(readFileSync(join(fresh, file)))
      assert.isTrue(same, `run \`npm run gen\`: src/gen/${file} is stale`)
    }
  })
})
