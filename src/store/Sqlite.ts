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
import { rootCauseOf, StoreError } from "./Model.js"
import { migrations } from "./migrations.js"

export interface SqliteOptions {
  /** A file path (its directory is created), or `:memory:` for a private database that dies with the layer. */
  readonly filename: string
  /** How long a writer waits for another process's lock before failing (ms). */
  readonly busyTimeoutMs?: number
}

const fail = (operation: string) => (cause: { readonly message: string }) =>
  new StoreError({ operation, message: cause.message, cause })

/** The fix for a database that could not be opened, by SQLite's or the OS's code. */
const fixOf = (code: string, filename: string): string => {
  if (code === "SQLITE_NOTADB" || code.startsWith("SQLITE_CORRUPT")) {
    return `it is not a SQLite database, or it is damaged: move it aside (keep it: \`sqlite3 ${filename} .recover\` may save its history) and start again, or set \`database\` (BYOK_DB) to another file`
  }
  if (code.startsWith("SQLITE_READONLY") || code === "EACCES" || code === "EPERM") return "make the file and its folder writable by this user, or set `database` (BYOK_DB) to another file"
  if (code === "SQLITE_FULL" || code === "ENOSPC") return "free some disk space"
  if (code.startsWith("SQLITE_BUSY") || code.startsWith("SQLITE_LOCKED")) return "another process holds it: stop the other cursor-byok, or set `database` (BYOK_DB) to another file"
  return "check that the path names a file (not a folder) in a folder this user can write, or set `database` (BYOK_DB) to another file"
}

/** A database that could not be opened or migrated: one line with the path, SQLite's reason and the fix. */
const openFailed = (operation: string, filename: string) => (cause: { readonly message: string }) => {
  const reason = rootCauseOf(cause)
  return new StoreError({
    operation,
    message: `the database ${filename} could not be ${operation === "migrate" ? "brought up to date" : "opened"}: ${reason.text}${reason.code === "" ? "" : ` (${reason.code})`}; ${fixOf(reason.code, filename)}`,
    cause
  })
}

/** A migrated SQLite database as `SqliteClient`, the generic `SqlClient` and the Store's `Direct` way, on one connection. */
export const layerClient = (
  options: SqliteOptions
): Layer.Layer<SqliteClient.SqliteClient | SqlClient.SqlClient | Direct, StoreError> =>
  Layer.scopedContext(
    Effect.gen(function*() {
      yield* FileModes.prepare(options.filename).pipe(Effect.mapError(fail("open")))
      const context = yield* Connection.context(options.filename).pipe(Effect.mapError(openFailed("open", options.filename)))
      const client = Context.get(context, SqlClient.SqlClient)
      // WAL is set by the client for files; NORMAL is durable in WAL mode except for the last commits on power loss.
      yield* client.unsafe("PRAGMA synchronous = NORMAL")
      yield* client.unsafe(`PRAGMA busy_timeout = ${Math.max(0, Math.floor(options.busyTimeoutMs ?? 5000))}`)
      yield* client.unsafe("PRAGMA foreign_keys = ON")
      yield* SqliteMigrator.run({ loader: SqliteMigrator.fromRecord(migrations) }).pipe(
        Effect.provide(context),
        Effect.mapError(openFailed("migrate", options.filename))
      )
      return context
    }).pipe(Effect.catchTag("SqlError", (error) => Effect.fail(openFailed("open", options.filename)(error))))
  ).pipe(Layer.provide(Layer.merge(Reactivity.layer, NodeContext.layer)))
