/**
 * Builds the server bundle (`npm run build`: `dist/main.js`) once before any test file runs,
 * so that the tests that start the server as a child process run what `npm start` runs.
 *
 * Then starts one throwaway PostgreSQL cluster for the whole run (`test/support/Postgres.ts`)
 * and provides its URL to the tests as `postgresUrl` (`inject("postgresUrl")`); the teardown
 * stops it and removes its directory. Without PostgreSQL's binaries the URL is `undefined` and
 * the PostgreSQL variants are skipped, with a warning; on CI (`CI=true`) that is an error.
 * `BYOK_TEST_POSTGRES=off` skips it on purpose.
 */
import { execFileSync } from "node:child_process"
import type { TestProject } from "vitest/node"
import { findPgBin, startCluster } from "./support/Postgres.js"

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  execFileSync(process.platform === "win32" ? "npm.cmd" : "npm", ["run", "--silent", "build"], { stdio: "inherit" })

  if (process.env["BYOK_TEST_POSTGRES"] === "off") {
    console.warn("PostgreSQL variants skipped: BYOK_TEST_POSTGRES=off")
    project.provide("postgresUrl", undefined)
    return async () => {}
  }
  const bin = findPgBin()
  if (bin === undefined) {
    if (process.env["CI"] === "true") {
      throw new Error(
        "PostgreSQL's initdb/pg_ctl not found (PG_BIN, PATH, /usr/lib/postgresql/*/bin); CI needs them: " +
          "apt-get install -y postgresql (.ci/run does), or BYOK_TEST_POSTGRES=off to skip the PostgreSQL variants"
      )
    }
    console.warn(
      "PostgreSQL not found (initdb/pg_ctl: PG_BIN, PATH, /usr/lib/postgresql/*/bin): the PostgreSQL variants will be skipped"
    )
    project.provide("postgresUrl", undefined)
    return async () => {}
  }
  const cluster = await startCluster({ bin })
  project.provide("postgresUrl", cluster.url)
  return () => cluster.stop()
}
