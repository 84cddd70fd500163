import { SqlClient } from "@effect/sql"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Store from "../../src/Store.js"
import * as Tx from "../../src/store/Tx.js"

const database = () => Store.layerSqliteClient({ filename: join(mkdtempSync(join(tmpdir(), "byok-tx-")), "tx.db") })

const setup = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE t (id TEXT PRIMARY KEY, n INTEGER, note TEXT)`
  return sql
})

describe("Store transactions on the transaction's connection", () => {
  it("gives SQLite the text the client's template compiles to, worked out once per call site", () => {
    const sql = Effect.runSync(Effect.gen(function*() {
      return yield* SqlClient.SqlClient
    }).pipe(Effect.provide(Store.layerSqliteClient({ filename: ":memory:" })), Effect.scoped))
    const capture = (strings: TemplateStringsArray, ..._values: ReadonlyArray<unknown>) => strings
    const seen: Array<TemplateStringsArray> = []
    for (let i = 0; i < 2; i++) seen.push(capture`UPDATE t SET n = ${i}, note = ${"x"}\n  WHERE id = ${"a"} AND n IN (1, 2)`)
    assert.strictEqual(seen[0], seen[1])
    const id = "a"
    const [compiled] = sql`UPDATE t SET n = ${1}, note = ${"x"}\n  WHERE id = ${id} AND n IN (1, 2)`.compile()
    assert.strictEqual(Tx.textOf(seen[0]!), compiled)
    assert.strictEqual(Tx.textOf(seen[1]!), compiled)
  })

  it.scoped("commits every statement of the body, binds undefined as NULL and returns RETURNING rows", () =>
    Effect.gen(function*() {
      const sql = yield* setup
      const returned = yield* Tx.transaction(sql, (q) =>
        Effect.gen(function*() {
          yield* q`INSERT INTO t (id, n, note) VALUES (${"a"}, ${1}, ${undefined})`
          const rows = yield* q<{ id: string; n: number }>`INSERT INTO t (id, n, note) VALUES (${"b"}, ${2}, ${"two"}) RETURNING id, n`
          const read = yield* q<{ n: number }>`SELECT n FROM t WHERE id = ${"a"}`
          return { rows, read }
        }))
      assert.deepStrictEqual(returned.rows, [{ id: "b", n: 2 }])
      assert.deepStrictEqual(returned.read, [{ n: 1 }])
      const stored = yield* sql<{ id: string; n: number; note: string | null }>`SELECT id, n, note FROM t ORDER BY id`
      assert.deepStrictEqual(stored, [{ id: "a", n: 1, note: null }, { id: "b", n: 2, note: "two" }])
    }).pipe(Effect.provide(database())))

  it.scoped("rolls back every statement when the body fails, on a failed statement as on its own error", () =>
    Effect.gen(function*() {
      const sql = yield* setup
      const failed = yield* Effect.exit(Tx.transaction(sql, (q) =>
        Effect.gen(function*() {
          yield* q`INSERT INTO t (id, n) VALUES (${"a"}, ${1})`
          // The same key again: SQLite refuses it.
          yield* q`INSERT INTO t (id, n) VALUES (${"a"}, ${2})`
        })))
      assert.isTrue(Exit.isFailure(failed))
      const refused = yield* Effect.exit(Tx.transaction(sql, (q) =>
        Effect.gen(function*() {
          yield* q`INSERT INTO t (id, n) VALUES (${"c"}, ${3})`
          return yield* Effect.fail("the body's own error" as const)
        })))
      assert.deepStrictEqual(refused, Exit.fail("the body's own error"))
      assert.deepStrictEqual(yield* sql`SELECT id FROM t`, [])
      // The connection is free again: the client's own statements and transactions go on.
      yield* Tx.transaction(sql, (q) => q`INSERT INTO t (id, n) VALUES (${"d"}, ${4})`)
      assert.deepStrictEqual(yield* sql<{ id: string }>`SELECT id FROM t`, [{ id: "d" }])
    }).pipe(Effect.provide(database())))

  it.scoped("keeps other fibers' statements out of a transaction that is open", () =>
    Effect.gen(function*() {
      const sql = yield* setup
      const outside = yield* Effect.fork(Effect.gen(function*() {
        yield* Effect.yieldNow()
        return yield* sql<{ count: number }>`SELECT count(*) AS count FROM t`
      }))
      yield* Tx.transaction(sql, (q) =>
        Effect.gen(function*() {
          yield* q`INSERT INTO t (id, n) VALUES (${"a"}, ${1})`
          // The other fiber runs here, and waits for the connection.
          yield* Effect.yieldNow()
          yield* Effect.yieldNow()
          yield* q`INSERT INTO t (id, n) VALUES (${"b"}, ${2})`
        }))
      const seen = yield* outside.await
      // It ran after the commit (both rows) or, had it run first, before (none): never between.
      assert.isTrue(Exit.isSuccess(seen))
      if (Exit.isSuccess(seen)) assert.include([0, 2], seen.value[0]!.count)
    }).pipe(Effect.provide(database())))
})
