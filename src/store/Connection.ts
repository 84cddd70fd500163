/**
 * The one SQLite connection of the server, two ways in: the `SqlClient` of `@effect/sql` (the
 * migrations, the console, the client's templates) and `Direct` (the Store's statements on
 * better-sqlite3's prepared statements), sharing one handle and one lock that a transaction
 * holds from BEGIN to its end. Why by hand, and the lock's rules: docs/architecture.md, "The
 * SQLite connection".
 *
 * `Direct.run` takes a whole Store operation (a `Program.ts` program) and, when no transaction
 * is open on the connection, runs all of it, BEGIN to COMMIT included, in one synchronous call:
 * better-sqlite3 runs each statement synchronously and JavaScript runs one call at a time, so
 * nothing else in the process reaches the connection before the call returns, and no lock is
 * needed. Only while a transaction is open (another fiber's, or the caller's own) does it wait
 * for the lock or join that transaction, as a single statement (`query`) does.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { Connection as SqlConnection } from "@effect/sql/SqlConnection"
import { SqlError } from "@effect/sql/SqlError"
import * as Statement from "@effect/sql/Statement"
import * as SqliteClient from "@effect/sql-sqlite-node/SqliteClient"
import Database from "better-sqlite3"

type Db = InstanceType<typeof Database>
import { Context, Effect, Either, Exit, Option, Scope } from "effect"
import type { Fiber } from "effect"
import { drive, runSync } from "./Program.js"
import type { ErrorOf, Step } from "./Program.js"
import { bindValues, onConnection, textOf } from "./Tx.js"
import type { Query, Value } from "./Tx.js"

/** The Store's way past the client: its statements and transactions on the connection's own handle. */
export interface DirectService {
  /** A statement outside any transaction. */
  readonly query: Query
  /** `body` in a transaction: BEGIN, COMMIT on success, ROLLBACK on any failure, defect or interruption. */
  readonly transaction: <A, E, R>(body: (q: Query) => Effect.Effect<A, E, R>) => Effect.Effect<A, E | SqlError, R>
  /**
   * A fresh `program()` (`Program.ts`), in a transaction when `transaction` is set (BEGIN,
   * COMMIT on success, ROLLBACK on its failure or a defect): in one synchronous call when no
   * transaction is open on the connection, else after that transaction ends (or inside it, as a
   * savepoint, when it is the calling fiber's client transaction).
   */
  readonly run: <Y extends Step, A>(program: () => Generator<Y, A, any>, transaction: boolean) => Effect.Effect<A, ErrorOf<Y> | SqlError>
}

export class Direct extends Context.Tag("cursor-byok/store/Direct")<Direct, DirectService>() {}

const PREPARED_LIMIT = 256

const failed = (cause: unknown, message = "Failed to execute statement") => new SqlError({ cause, message })

/** Opens `filename` (WAL for a file) as the `SqliteClient`, the `SqlClient` and `Direct`, closed with the scope. */
export const open = (filename: string) =>
  Effect.gen(function*() {
    const scope = yield* Effect.scope
    const db = yield* Effect.try({ try: () => new Database(filename), catch: (cause) => failed(cause, "Failed to open the database") })
    yield* Scope.addFinalizer(scope, Effect.sync(() => db.close()))
    // The first statement reads the file: a damaged one or one that is not a database fails here.
    if (filename !== ":memory:") yield* Effect.try({ try: () => db.pragma("journal_mode = WAL"), catch: (cause) => failed(cause, "Failed to open the database") })

    const { connection, execute, executeNow } = statementsOf(db)
    const lock = yield* Effect.makeSemaphore(1)
    const client = yield* SqlClient.make({
      acquirer: lock.withPermits(1)(Effect.succeed(connection)),
      transactionAcquirer: Effect.uninterruptibleMask((restore) =>
        Effect.as(
          Effect.zipRight(restore(lock.take(1)), Effect.tap(Effect.scope, (scope) => Scope.addFinalizer(scope, lock.release(1)))),
          connection
        )
      ),
      compiler: Statement.makeCompilerSqlite(),
      spanAttributes: [["db.system.name", "sqlite"]]
    })
    const sqlite: SqliteClient.SqliteClient = Object.assign(client, {
      [SqliteClient.TypeId]: SqliteClient.TypeId as typeof SqliteClient.TypeId,
      config: { filename },
      export: Effect.try({ try: () => db.serialize() as Uint8Array, catch: (cause) => failed(cause, "Failed to export database") }),
      backup: (destination: string) =>
        Effect.tryPromise({ try: () => db.backup(destination), catch: (cause) => failed(cause, "Failed to backup database") }),
      loadExtension: (path: string) =>
        Effect.try({ try: () => void db.loadExtension(path), catch: (cause) => failed(cause, "Failed to load extension") }),
      updateValues: undefined as never
    })

    // Inside a Direct transaction (its fiber holds the lock): straight on the connection.
    const inTransaction = onConnection(connection)
    /** Whether the fiber runs inside the client's transaction (a caller's `sql.withTransaction`). */
    const inClientTransaction = (fiber: Fiber.RuntimeFiber<unknown, unknown>) =>
      Option.isSome(Context.getOption(fiber.currentContext, SqlClient.TransactionConnection))

    const { begin, commit, rollBack, runNow } = transactionsOf(db, executeNow)

    /** The fiber whose `Direct` transaction is open (it holds the lock), if any. */
    let holder: unknown

    const query: Query = <A extends object>(strings: TemplateStringsArray, ...values: ReadonlyArray<Value>) =>
      Effect.withFiberRuntime<ReadonlyArray<A>, SqlError>((fiber) => {
        const statement = execute(textOf(strings), bindValues(values))
        // No transaction open: nothing to wait for, and nothing to join by mistake.
        if (!db.inTransaction || holder === fiber) return statement
        // Inside the client's transaction: on its connection, as the client's own statements there.
        if (inClientTransaction(fiber)) return client.unsafe<A>(textOf(strings), bindValues(values))
        // Another fiber's transaction: after it ends.
        return lock.withPermits(1)(statement)
      })

    const transaction = <A, E, R>(body: (q: Query) => Effect.Effect<A, E, R>): Effect.Effect<A, E | SqlError, R> =>
      Effect.withFiberRuntime((fiber) => {
        // Inside the client's transaction: a savepoint there.
        if (inClientTransaction(fiber)) return client.withTransaction(Effect.suspend(() => body(query)))
        if (holder === fiber) return Effect.dieMessage("Store: a transaction inside a transaction of the same fiber")
        return lock.withPermits(1)(Effect.uninterruptibleMask((restore) =>
          Effect.suspend(() => {
            try {
              begin.run()
            } catch (cause) {
              return Effect.fail(failed(cause, "Failed to begin a transaction"))
            }
            holder = fiber
            return Effect.flatMap(Effect.exit(restore(body(inTransaction))), (exit): Effect.Effect<A, E | SqlError> => {
              holder = undefined
              // A failed body keeps its own failure, whatever the rollback does.
              if (Exit.isFailure(exit)) {
                rollBack()
                return exit
              }
              try {
                commit.run()
                return exit
              } catch (cause) {
                return Effect.fail(failed(cause, rollBack() ? "Failed to commit a transaction" : "Failed to commit a transaction, and to roll it back"))
              }
            })
          })
        ))
      })

    const run = <Y extends Step, A>(program: () => Generator<Y, A, any>, transactional: boolean): Effect.Effect<A, ErrorOf<Y> | SqlError> =>
      Effect.withFiberRuntime((fiber) => {
        // No transaction open: the whole program now; nothing can come between its statements.
        if (!db.inTransaction) return runNow(program, transactional)
        if (holder === fiber) {
          return transactional ? Effect.dieMessage("Store: a transaction inside a transaction of the same fiber") : runNow(program, false)
        }
        // Inside the client's transaction: its statements there, as `query` and `transaction` run them.
        if (inClientTransaction(fiber)) {
          return transactional ? client.withTransaction(drive(program, query)) : drive(program, query)
        }
        // Another fiber's transaction: after it ends (its permit released, no transaction is open).
        return lock.withPermits(1)(Effect.suspend(() => runNow(program, transactional)))
      })

    return { client: sqlite, direct: Direct.of({ query, transaction, run }) }
  })

/** The connection's statements, prepared once per text: as `@effect/sql`'s `SqlConnection`, and at once. */
const statementsOf = (db: Db) => {
  // Prepared once per text; the Store's texts are a fixed set, the client's few more.
  const prepared = new Map<string, Database.Statement>()
  const prepare = (sql: string): Database.Statement => {
    let statement = prepared.get(sql)
    if (statement === undefined) {
      statement = db.prepare(sql)
      if (prepared.size >= PREPARED_LIMIT) prepared.delete(prepared.keys().next().value!)
      prepared.set(sql, statement)
    }
    return statement
  }
  /** A statement's rows (none for one that returns none), as `@effect/sql-sqlite-node` gives them. */
  const rowsOf = (statement: Database.Statement, params: ReadonlyArray<unknown>): ReadonlyArray<any> => {
    if (statement.reader) return statement.all(...params)
    statement.run(...params)
    return []
  }
  const execute = (sql: string, params: ReadonlyArray<unknown>) =>
    Effect.try({ try: () => rowsOf(prepare(sql), params), catch: (cause) => failed(cause) })
  /** `execute` at once: the rows, or a thrown `SqlError`. */
  const executeNow = (sql: string, params: ReadonlyArray<unknown>): ReadonlyArray<any> => {
    try {
      return rowsOf(prepare(sql), params)
    } catch (cause) {
      throw failed(cause)
    }
  }

  const connection: SqlConnection = {
    execute: (sql, params, transformRows) =>
      transformRows === undefined ? execute(sql, params) : Effect.map(execute(sql, params), transformRows),
    executeRaw: (sql, params) =>
      Effect.try({ try: () => prepare(sql).run(...params), catch: (cause) => failed(cause) }),
    executeValues: (sql, params) =>
      Effect.try({
        try: () => {
          const statement = prepare(sql)
          if (!statement.reader) return rowsOf(statement, params)
          try {
            return statement.raw(true).all(...params) as ReadonlyArray<ReadonlyArray<unknown>>
          } finally {
            statement.raw(false)
          }
        },
        catch: (cause) => failed(cause)
      }),
    executeUnprepared: (sql, params, transformRows) => {
      const rows = Effect.try({ try: () => rowsOf(db.prepare(sql), params), catch: (cause) => failed(cause) })
      return transformRows === undefined ? rows : Effect.map(rows, transformRows)
    },
    executeStream: () => Effect.dieMessage("executeStream not implemented") as never
  }

  return { connection, execute, executeNow }
}

/** BEGIN, COMMIT and ROLLBACK on the connection, and a store program run whole in one synchronous call. */
const transactionsOf = (db: Db, executeNow: (sql: string, params: ReadonlyArray<unknown>) => ReadonlyArray<any>) => {
  const begin = db.prepare("BEGIN")
  const commit = db.prepare("COMMIT")
  const rollback = db.prepare("ROLLBACK")
  /** Rolls back what is still open; false when that fails too. */
  const rollBack = (): boolean => {
    try {
      if (db.inTransaction) rollback.run()
      return true
    } catch {
      return false
    }
  }

  /**
   * `program` now, to its end, in this one synchronous call (BEGIN to COMMIT when
   * `transactional`): the caller has made sure no other transaction is open on the connection.
   */
  const runNow = <Y extends Step, A>(program: () => Generator<Y, A, any>, transactional: boolean): Exit.Exit<A, ErrorOf<Y> | SqlError> => {
    if (transactional) {
      try {
        begin.run()
      } catch (cause) {
        return Exit.fail(failed(cause, "Failed to begin a transaction"))
      }
    }
    let result: Either.Either<A, ErrorOf<Y>>
    try {
      result = runSync(program(), executeNow)
    } catch (cause) {
      // A refused statement fails; anything else the program threw is a defect, as in an Effect.
      if (transactional) rollBack()
      return cause instanceof SqlError ? Exit.fail(cause) : Exit.die(cause)
    }
    if (Either.isLeft(result)) {
      // A failed program keeps its own failure, whatever the rollback does.
      if (transactional) rollBack()
      return Exit.fail(result.left)
    }
    if (transactional) {
      try {
        commit.run()
      } catch (cause) {
        return Exit.fail(failed(cause, rollBack() ? "Failed to commit a transaction" : "Failed to commit a transaction, and to roll it back"))
      }
    }
    return Exit.succeed(result.right)
  }

  return { begin, commit, rollBack, runNow }
}

/** `open` as a layer's context: `SqliteClient`, `SqlClient` and `Direct` on one connection. */
export const context = (filename: string) =>
  Effect.map(open(filename), ({ client, direct }) =>
    Context.make(SqliteClient.SqliteClient, client).pipe(Context.add(SqlClient.SqlClient, client), Context.add(Direct, direct))
  )
