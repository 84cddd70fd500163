/**
 * What `npm start` runs before the server: builds the bundle only when its sources changed
 * since the last build (`scripts/stamp.mjs`); `npm run build` always builds.
 */
import { spawnSync } from "node:child_process"
import { dirname, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { isFresh } from "./stamp.mjs"

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..")
if (!isFresh(root)) {
  process.stderr.write("cursor-byok: building the server (its sources changed since the last build)...\n")
  const built = spawnSync(process.execPath, [resolve(root, "node_modules/tsx/dist/cli.mjs"), resolve(root, "scripts/build.ts")], { cwd: root, stdio: "inherit" })
  process.exitCode = built.status ?? 1
}
