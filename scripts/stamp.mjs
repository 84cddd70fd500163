/**
 * The build's stamp: the SHA-256 of everything the bundle is made from (the sources, the build
 * script, the lock file and the compiler settings), kept in `dist/build.stamp` by
 * `scripts/build.ts`. `scripts/fresh.mjs` (what `npm start` runs first) builds only when the
 * stamp differs. Plain JavaScript, so that checking it needs no compiler.
 */
import { createHash } from "node:crypto"
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs"
import { join, relative, resolve } from "node:path"

const INPUTS = ["src", "scripts/build.ts", "scripts/stamp.mjs", "package.json", "package-lock.json", "tsconfig.json"]

/** The files under `path` (a file, or a folder read recursively), relative to `root`, in a fixed order. */
const filesOf = (root, path) => {
  const full = join(root, path)
  if (!existsSync(full)) return []
  if (!statSync(full).isDirectory()) return [path]
  return readdirSync(full, { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile())
    .map((entry) => relative(root, join(entry.parentPath ?? entry.path, entry.name)))
    .sort()
}

/** The stamp of the repository at `root`. */
export const stampOf = (root) => {
  const hash = createHash("sha256")
  for (const input of INPUTS) {
    for (const file of filesOf(root, input)) hash.update(`${file}\0`).update(readFileSync(join(root, file))).update("\0")
  }
  return hash.digest("hex")
}

export const stampFile = (root) => resolve(root, "dist/build.stamp")

/** Writes the stamp of what was just built. */
export const writeStamp = (root) => writeFileSync(stampFile(root), `${stampOf(root)}\n`)

/** True when the bundle in `dist/` was built from exactly these sources. */
export const isFresh = (root) => {
  if (!existsSync(resolve(root, "dist/main.js")) || !existsSync(resolve(root, "dist/main.bundle.cjs")) || !existsSync(stampFile(root))) return false
  return readFileSync(stampFile(root), "utf8").trim() === stampOf(root)
}
