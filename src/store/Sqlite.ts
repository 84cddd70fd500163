/**
 * The SQLite connection the Store runs on: one better-sqlite3 connection (`Connection.ts`: the
 * `SqlClient` of `@effect/sql` and the Store's `Direct` way on one handle), the parent directory
 * created and the files kept private (`FileModes.ts`), the PRAGMAs set, and the migrations
 * applied before anything else may use it.
 *
 * Everything SQLite-specific sits here and in `migrations.ts`; `SqlStore.ts` only needs a
 * `SqlClient` whose database has the Store's tables.
 */
import * as Reactivity from "@effect/experimental/Reactivity"
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as SqlClient from "@effect/sql/SqlClient"
import * as SqliteClient from "@effect/sql-sqlite-node/SqliteClient"
import * as SqliteMigrator from "@effect/sql-sqlite-node/SqliteMigrator"
import { Context, Effect, Layer } from "effect"
import * as Connection from "./Connection.js"
import type { Direct } from "./Connection.js"
import * as FileModes from "./FileModes.js"
import { StoreError } from "./Model.js"
import { migrations } from "./migrations.js"

export interface SqliteOptions {
  /** A file path (its directory is created), or `:memory:` for a private database that dies with the layer. */
  readonly filename: string
  /** How long a writer waits for another process's lock before failing (ms). */
  readonly busyTimeoutMs?: number
}

const fail = (operation: string) => (cause: { readonly message: string }) =>
  new StoreError({ operation, message: cause.message, cause })

/** A migrated SQLite database as `SqliteClient`, the generic `SqlClient` and the Store's `Direct` way, on one connection. */
export const layerClient = (
  options: SqliteOptions
): Layer.Layer<SqliteClient.SqliteClient | SqlClient.SqlClient | Direct, StoreError> =>
  Layer.scopedContext(
    Effect.gen(function*() {
      yield* FileModes.prepare(options.filename).pipe(Effect.mapError(fail("open")))
      const context = yield* Connection.context(options.filename).pipe(Effect.mapError(fail("open")))
      const client = Context.get(context, SqlClient.SqlClient)
      // WAL is set by the client for files; NORMAL is durable in WAL mode except for the last commits on power loss.
      yield* client.unsafe("PRAGMA synchronous = NORMAL")
      yield* client.unsafe(`PRAGMA busy_timeout = ${Math.max(0, Math.floor(options.busyTimeoutMs ?? 5000))}`)
      yield* client.unsafe("PRAGMA foreign_keys = ON")
      yield* SqliteMigrator.run({ loader: SqliteMigrator.fromRecord(migrations) }).pipe(
        Effect.provide(context),
        Effect.mapError(fail("migrate"))
      )
      return context
    }).pipe(Effect.catchTag("SqlError", (error) => Effect.fail(fail("open")(error))))
  ).pipe(Layer.provide(Layer.merge(Reactivity.layer, NodeContext.layer)))
