/**
 * The durable journal of conversations: the committed `ConversationState` of each one, its
 * append-only history, the inputs already applied (with what they answered) and which of them
 * started each turn, the model calls with their exact requests, and the client operations, so that a restarted process loses
 * nothing committed and does nothing twice silently.
 *
 * Every change to a conversation is one `commitInput`: a compare-and-swap on its version, in
 * one transaction with the new messages, the input record and the calls it plans. The runner
 * commits before it acts (the call is saved before the stream opens, the operation before it
 * is sent). The records, errors and service shape are in `store/Model.ts`; the SQL in
 * `store/SqlStore.ts`; the SQLite connection and schema in `store/Sqlite.ts` and
 * `store/migrations.ts`, PostgreSQL's in `store/Postgres.ts` and `store/pgMigrations.ts`.
 */
import type * as SqlClient from "@effect/sql/SqlClient"
import { Context, Layer } from "effect"
import type { StoreError, StoreService } from "./store/Model.js"
import * as Postgres from "./store/Postgres.js"
import * as Sqlite from "./store/Sqlite.js"
import { make } from "./store/SqlStore.js"

export * from "./store/Model.js"
export type { PostgresOptions } from "./store/Postgres.js"
export { displayDatabase, isPostgresUrl } from "./store/Postgres.js"
export type { SqliteOptions } from "./store/Sqlite.js"

export class Store extends Context.Tag("cursor-byok/Store")<Store, StoreService>() {}

/** The Store on a `SqlClient` already provided (its database migrated, see `layerSqliteClient`). */
export const layerSql: Layer.Layer<Store, never, SqlClient.SqlClient> = Layer.effect(Store, make)

/** The Store on a SQLite file: creates its directory, sets WAL and the PRAGMAs, runs the migrations. */
export const layerSqlite = (options: Sqlite.SqliteOptions): Layer.Layer<Store, StoreError> =>
  layerSql.pipe(Layer.provide(Sqlite.layerClient(options)))

/** A migrated SQLite connection, for callers (tests, tools) that need SQL beside the Store. */
export const layerSqliteClient = Sqlite.layerClient

/** The Store on a PostgreSQL database: runs the migrations (once, whichever instance comes first). */
export const layerPostgres = (options: Postgres.PostgresOptions): Layer.Layer<Store, StoreError> =>
  layerSql.pipe(Layer.provide(Postgres.layerClient(options)))

/** A migrated PostgreSQL pool, for callers (tests, tools) that need SQL beside the Store. */
export const layerPostgresClient = Postgres.layerClient

/** The migrated database `database` names (a `postgres://` URL, or a SQLite file), as the `SqlClient` the Store and the users run on. */
export const layerClient = (database: string): Layer.Layer<SqlClient.SqlClient, StoreError> =>
  Postgres.isPostgresUrl(database) ? Postgres.layerClient({ url: database }) : Sqlite.layerClient({ filename: database })

/** The Store `database` names. */
export const layer = (database: string): Layer.Layer<Store, StoreError> => layerSql.pipe(Layer.provide(layerClient(database)))

/** A private in-memory database per build: for tests. */
export const layerMemory: Layer.Layer<Store, StoreError> = layerSqlite({ filename: ":memory:" })
