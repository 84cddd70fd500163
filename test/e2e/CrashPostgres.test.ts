/**
 * Crash at every commit point on PostgreSQL (issue 42): `Crash.test.ts`'s scripted session on a
 * child server whose database is a fresh PostgreSQL database for each run (on the cluster the
 * global setup started), SIGKILLed right after its k-th Store write and restarted on the same
 * database. The clean run on PostgreSQL makes the same writes as on SQLite, and every crash run
 * ends with the SQLite clean run's history and provider requests. In a file of its own so that
 * it runs beside the SQLite runs. Skipped when the run has no PostgreSQL (never in CI).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { inject } from "vitest"
import { check, clean, LANES, makeLane, runPoints, runSession, selectedPoints } from "../support/CrashRuns.js"

const postgresUrl = inject("postgresUrl")

describe("Crash at every commit point on PostgreSQL (child process, SIGKILL right after Store write k, restart on the same database)", () => {
  it.scopedLive.skipIf(postgresUrl === undefined)("every k on PostgreSQL: the same commit points, the SQLite clean run's history and requests", () =>
    Effect.gen(function*() {
      const reference = yield* clean
      const pgClean = yield* runSession(yield* makeLane(), { postgres: postgresUrl! })
      assert.deepStrictEqual(pgClean.writes.map((w) => w.split(" ")[1]), reference.writes.map((w) => w.split(" ")[1]))
      assert.deepStrictEqual(check(reference, pgClean), [])
      const points = selectedPoints(Array.from({ length: reference.writes.length }, (_, i) => i + 1))
      const failed = yield* runPoints(reference, points, LANES, { postgres: postgresUrl! })
      assert.deepStrictEqual(failed, [])
    }), { timeout: 600_000 })

})
