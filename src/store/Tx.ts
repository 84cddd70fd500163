/**
 * The Store's transactions: their statements run on the transaction's own connection.
 *
 * `SqlClient`'s tagged template compiles its statement and acquires a connection, in a scope of
 * its own, at every execution, inside a transaction too, where the connection is held already.
 * That per-statement scope was most of a statement's cost: a scratch microbenchmark (an insert
 * in a transaction, on a file database, tracer off as the server runs) measured ~40-48 µs of
 * CPU through the template against ~8-10 µs through the transaction's `Connection.execute`
 * with the same text. A commit runs six to ten statements; a turn commits at least twice.
 *
 * A `Query` is written like the template (`q\`SELECT ... WHERE id = ${id}\``) and gives the same
 * text to SQLite: the literal parts joined by `?`, worked out once per call site (a template's
 * strings are the same array at every call), so each statement is prepared once and found in
 * the client's cache of prepared statements by its text. Its values are bound as they are
 * (`undefined` as NULL, as the template binds it); only plain values are allowed, no fragments.
 * Outside a transaction the client itself is a `Query`. This is how the Store's programs
 * (`Program.drive`) run on any `SqlClient`; on the server's own SQLite connection the same
 * programs run in one synchronous call on its prepared statements (`Connection.ts`, same texts),
 * but for the reads that need the client's fragments and the console's, which stay on the
 * template.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { Connection } from "@effect/sql/SqlConnection"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect, Option } from "effect"

/** What the Store binds. */
export type Value = string | number | bigint | Uint8Array | null | undefined

/** Runs a statement written as a tagged template; rows as SQLite returns them. */
export type Query = <A extends object = Record<string, unknown>>(
  strings: TemplateStringsArray,
  ...values: ReadonlyArray<Value>
) => Effect.Effect<ReadonlyArray<A>, SqlError>

/** A template's statement text in one dialect's placeholders. */
export type TextOf = (strings: TemplateStringsArray) => string

const texts = new WeakMap<TemplateStringsArray, string>()

/** A template's statement text: its literal parts joined by SQLite's placeholder. */
export const textOf: TextOf = (strings) => {
  let text = texts.get(strings)
  if (text === undefined) {
    text = strings.join("?")
    texts.set(strings, text)
  }
  return text
}

const pgTexts = new WeakMap<TemplateStringsArray, string>()

/** A template's statement text with PostgreSQL's numbered placeholders (`$1`, `$2`, ...). */
export const pgTextOf: TextOf = (strings) => {
  let text = pgTexts.get(strings)
  if (text === undefined) {
    text = strings.reduce((joined, part, index) => index === 0 ? part : `${joined}$${index}${part}`, "")
    pgTexts.set(strings, text)
  }
  return text
}

/** The statement text of `sql`'s dialect. */
export const textOfClient = (sql: SqlClient.SqlClient): TextOf => sql.onDialectOrElse({ pg: () => pgTextOf, orElse: () => textOf })

/** A statement's values as SQLite binds them: `undefined` as NULL, as the client's template does. */
export const bindValues = (values: ReadonlyArray<Value>): Array<Exclude<Value, undefined>> =>
  values.map((value) => value === undefined ? null : value)

/** Statements on one connection (a transaction's), without a scope or a compile per statement. */
export const onConnection = (connection: Connection, text: TextOf = textOf): Query => (strings, ...values) =>
  connection.execute(text(strings), bindValues(values), undefined)

/**
 * `body` in a transaction (`sql.withTransaction`: BEGIN, COMMIT on success, ROLLBACK on any
 * failure or defect), its statements on the transaction's connection.
 */
export const transaction = <A, E, R>(
  sql: SqlClient.SqlClient,
  body: (q: Query) => Effect.Effect<A, E, R>
): Effect.Effect<A, E | SqlError, R> =>
  sql.withTransaction(
    Effect.flatMap(Effect.serviceOption(SqlClient.TransactionConnection), (held) =>
      Option.isSome(held)
        ? body(onConnection(held.value[0], textOfClient(sql)))
        : Effect.dieMessage("Store: a transaction without its connection"))
  )
