/**
 * The PostgreSQL connection the Store runs on (a team's server): a pool of `@effect/sql-pg`, the
 * migrations of `pgMigrations.ts` applied before anything else may use it (one instance at a
 * time under an advisory lock, so instances starting together apply them once), and BIGINT and NUMERIC read back
 * as numbers, as SQLite gives them. `SqlStore.ts` runs the same programs on it statement by
 * statement, in the client's transactions.
 */
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as SqlClient from "@effect/sql/SqlClient"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as PgMigrator from "@effect/sql-pg/PgMigrator"
import { Duration, Effect, Layer, Redacted } from "effect"
import pg from "pg"
import { rootCauseOf, StoreError } from "./Model.js"
import { pgMigrations } from "./pgMigrations.js"

export interface PostgresOptions {
  /** `postgres://user:password@host:port/database` (or `postgresql://`), with libpq's `?sslmode=` if wanted. */
  readonly url: string
  /** The pool's size: one connection per transaction in flight. */
  readonly maxConnections?: number
  /** How long to wait for a connection (ms). */
  readonly connectTimeoutMs?: number
}

/** Whether `database` names a PostgreSQL server rather than a SQLite file. */
export const isPostgresUrl = (database: string): boolean => /^postgres(ql)?:\/\//i.test(database)

/** `database` as it may be shown: a PostgreSQL URL without its password. */
export const displayDatabase = (database: string): string => {
  if (!isPostgresUrl(database)) return database
  try {
    const url = new URL(database)
    if (url.password !== "") url.password = "***"
    return url.toString()
  } catch {
    return "postgres://(an address that does not parse)"
  }
}

const INT8 = 20
const NUMERIC = 1700

/** BIGINT (counts, versions, milliseconds) and NUMERIC (sums) as numbers; the rest as `pg` reads them. */
const types: pg.CustomTypesConfig = {
  getTypeParser: ((oid: number, format?: "text" | "binary") =>
    oid === INT8 || oid === NUMERIC ? Number : pg.types.getTypeParser(oid, format as "text")) as pg.CustomTypesConfig["getTypeParser"]
}

/** The fix for a server that could not be reached or used, by PostgreSQL's or the OS's code. */
const fixOf = (code: string): string => {
  if (code === "ECONNREFUSED" || code === "ENOTFOUND" || code === "EAI_AGAIN" || code === "ETIMEDOUT") {
    return "check that PostgreSQL is running and that the host and port in `database` (BYOK_DB) are right"
  }
  if (code === "28P01" || code === "28000") return "check the user and password in `database` (BYOK_DB)"
  if (code === "3D000") return "create the database (`createdb <name>`) or name an existing one in `database` (BYOK_DB)"
  if (code === "42501") return "grant this user the right to create tables in the database, or use its owner"
  return "check the URL in `database` (BYOK_DB) and the server's log"
}

/** A database that could not be reached or migrated: one line with the address (no password), the reason and the fix. */
const openFailed = (operation: "open" | "migrate", url: string) => (cause: unknown) => {
  const reason = rootCauseOf(cause)
  const text = reason.text === "" ? "no answer" : reason.text
  return new StoreError({
    operation,
    message: `the database ${displayDatabase(url)} could not be ${operation === "migrate" ? "brought up to date" : "reached"}: ${text}${reason.code === "" ? "" : ` (${reason.code})`}; ${fixOf(reason.code)}`,
    cause
  })
}

/** The advisory lock instances starting together take in turn to migrate (the migrator's own table races otherwise). */
const MIGRATION_LOCK = 0x62796f6d // "byom"

/** The migrations, one instance at a time: the others wait on the lock, then find nothing to do. */
const migrateAlone = Effect.scoped(Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const connection = yield* sql.reserve
  yield* Effect.acquireRelease(
    connection.execute(`SELECT pg_advisory_lock(${MIGRATION_LOCK})`, [], undefined),
    () => connection.execute(`SELECT pg_advisory_unlock(${MIGRATION_LOCK})`, [], undefined).pipe(Effect.ignore)
  )
  yield* PgMigrator.run({ loader: PgMigrator.fromRecord(pgMigrations) })
}))

/** A migrated PostgreSQL database as `PgClient` and the generic `SqlClient`. */
export const layerClient = (options: PostgresOptions): Layer.Layer<PgClient.PgClient | SqlClient.SqlClient, StoreError> =>
  Layer.scopedContext(
    Effect.gen(function*() {
      const context = yield* Layer.build(PgClient.layer({
        url: Redacted.make(options.url),
        types,
        maxConnections: options.maxConnections ?? 10,
        connectTimeout: Duration.millis(options.connectTimeoutMs ?? 5000),
        applicationName: "cursor-byok",
        // Rows keep the column names the statements give (snake_case), as on SQLite.
        transformJson: false
      })).pipe(Effect.mapError(openFailed("open", options.url)))
      yield* migrateAlone.pipe(Effect.provide(context), Effect.mapError(openFailed("migrate", options.url)))
      return context
    })
  ).pipe(Layer.provide(NodeContext.layer))
