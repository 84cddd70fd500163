/**
 * The Store suite's two engines: SQLite (an in-memory database per test, a temporary file when
 * a test needs two connections or a reopening) and PostgreSQL (a fresh database per test on the
 * cluster the global setup started; absent when PostgreSQL is not installed outside CI).
 */
import { FileSystem, Path } from "@effect/platform"
import type { SqlClient } from "@effect/sql"
import { Effect, Layer } from "effect"
import type { Scope } from "effect"
import { inject } from "vitest"
import * as Store from "../../src/Store.js"
import { freshDatabase } from "../support/Postgres.js"

export interface Engine {
  readonly name: "SQLite" | "PostgreSQL"
  /** A new, empty database: a file path or a URL, removed (files) with the scope. */
  readonly database: Effect.Effect<string, never, Scope.Scope | FileSystem.FileSystem | Path.Path>
  /** The Store and the SQL beside it on `database` (so tests can inspect and damage rows). */
  readonly withSql: (database: string) => Layer.Layer<Store.Store | SqlClient.SqlClient, Store.StoreError>
  /** The Store and its SQL on a new, empty database of its own. */
  readonly fresh: Layer.Layer<Store.Store | SqlClient.SqlClient, Store.StoreError>
  /** The ids of the migrations a new database has run. */
  readonly migrationIds: ReadonlyArray<number>
  /** Drops what makes history append-only, so that a test can damage it from outside. */
  readonly dropHistoryGuards: (sql: SqlClient.SqlClient) => Effect.Effect<unknown, unknown>
  /** `damage` with the foreign keys unchecked, so that a test can remove a row others reference. */
  readonly withoutForeignKeys: <A, E, R>(sql: SqlClient.SqlClient, damage: Effect.Effect<A, E, R>) => Effect.Effect<A, unknown, R>
}

const sqliteWithSql = (filename: string) => Store.layerSql.pipe(Layer.provideMerge(Store.layerSqliteClient({ filename })))

export const sqlite: Engine = {
  name: "SQLite",
  database: Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const directory = yield* fs.makeTempDirectoryScoped({ prefix: "cursor-byok-store-" })
    return path.join(directory, "store.db")
  }).pipe(Effect.orDie),
  withSql: sqliteWithSql,
  fresh: sqliteWithSql(":memory:"),
  migrationIds: [1, 2, 3, 4, 5, 6, 7, 8],
  dropHistoryGuards: (sql) => Effect.zipRight(sql`DROP TRIGGER messages_no_update`, sql`DROP TRIGGER messages_no_delete`),
  withoutForeignKeys: (sql, damage) =>
    Effect.acquireUseRelease(sql`PRAGMA foreign_keys = OFF`, () => damage, () => Effect.orDie(sql`PRAGMA foreign_keys = ON`))
}

const postgresUrl = inject("postgresUrl")

const pgWithSql = (url: string) => Store.layerSql.pipe(Layer.provideMerge(Store.layerPostgresClient({ url })))

const newPgDatabase = (adminUrl: string) => Effect.promise(() => freshDatabase(adminUrl, "store"))

export const postgres: Engine | undefined = postgresUrl === undefined ? undefined : {
  name: "PostgreSQL",
  database: newPgDatabase(postgresUrl),
  withSql: pgWithSql,
  fresh: Layer.unwrapEffect(Effect.map(newPgDatabase(postgresUrl), pgWithSql)),
  migrationIds: [1, 2, 3, 4],
  dropHistoryGuards: (sql) => sql`DROP TRIGGER messages_no_change ON messages`,
  // Triggers (foreign keys' among them) are off for this transaction's connection alone.
  withoutForeignKeys: (sql, damage) => sql.withTransaction(Effect.zipRight(sql`SET LOCAL session_replication_role = replica`, damage))
}

/** The engines this run has: SQLite always, PostgreSQL when the global setup started it. */
export const engines: ReadonlyArray<Engine> = postgres === undefined ? [sqlite] : [sqlite, postgres]
