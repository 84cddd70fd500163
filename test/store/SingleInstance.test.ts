/**
 * One serving instance per PostgreSQL database (until several can share one): a second
 * instance's start waits for the first's advisory lock, then fails saying why; once the first
 * is gone (its connection closed) the next one starts. Nothing on SQLite.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Layer, Scope } from "effect"
import { inject } from "vitest"
import * as Store from "../../src/Store.js"
import { freshDatabase } from "../support/Postgres.js"

const postgresUrl = inject("postgresUrl")

/** The instance lock on `database`, held while the returned scope is open. */
const instance = (database: string, waitMs: number) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const exit = yield* Layer.buildWithScope(
      Layer.provide(Layer.scopedDiscard(Store.singleInstanceFor(database, waitMs)), Store.layerClient(database)),
      scope
    ).pipe(Effect.exit)
    return { exit, close: Scope.close(scope, Exit.void) }
  })

describe.skipIf(postgresUrl === undefined)("one serving instance per PostgreSQL database", () => {
  it.live("a second waits, then fails readably; after the first stops, it starts", () =>
    Effect.gen(function*() {
      const database = yield* Effect.promise(() => freshDatabase(postgresUrl!, "single"))
      const first = yield* instance(database, 2_000)
      assert.isTrue(Exit.isSuccess(first.exit))
      const second = yield* instance(database, 600)
      assert.isTrue(Exit.isFailure(second.exit))
      if (Exit.isFailure(second.exit)) assert.include(String(second.exit.cause), "another cursor-byok instance serves the database")
      yield* second.close
      // Another database is another instance's.
      const elsewhere = yield* instance(yield* Effect.promise(() => freshDatabase(postgresUrl!, "single")), 600)
      assert.isTrue(Exit.isSuccess(elsewhere.exit))
      yield* elsewhere.close
      yield* first.close
      const third = yield* instance(database, 5_000)
      assert.isTrue(Exit.isSuccess(third.exit))
      yield* third.close
    }), { timeout: 30_000 })

  it.live("SQLite takes no lock here (its own file lock does the same)", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const exit = yield* Layer.buildWithScope(
        Layer.provide(Layer.scopedDiscard(Store.singleInstanceFor(":memory:", 100)), Store.layerClient(":memory:")),
        scope
      ).pipe(Effect.exit)
      assert.isTrue(Exit.isSuccess(exit))
      yield* Scope.close(scope, Exit.void)
    }))
})
