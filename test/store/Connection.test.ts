import { SqlClient } from "@effect/sql"
import { assert, describe, it } from "@effect/vitest"
import { Cause, Deferred, Effect, Exit, Fiber } from "effect"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Store from "../../src/Store.js"
import { Direct } from "../../src/store/Connection.js"
import { fail, q as statement } from "../../src/store/Program.js"
import type { Program } from "../../src/store/Program.js"

// A real SQLite file (WAL), as the server opens it.
const database = () => Store.layerSqliteClient({ filename: join(mkdtempSync(join(tmpdir(), "byok-direct-")), "direct.db") })

const setup = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const direct = yield* Direct
  yield* sql`CREATE TABLE t (id TEXT PRIMARY KEY, n INTEGER, note TEXT)`
  const ids = Effect.map(sql<{ id: string }>`SELECT id FROM t ORDER BY id`, (rows) => rows.map((row) => row.id))
  return { sql, direct, ids }
})

describe("The Store's direct way on the server's SQLite connection", () => {
  it.scoped("commits a transaction's statements, binds undefined as NULL, returns RETURNING rows", () =>
    Effect.gen(function*() {
      const { direct, sql } = yield* setup
      const returned = yield* direct.transaction((q) =>
        Effect.gen(function*() {
          yield* q`INSERT INTO t (id, n, note) VALUES (${"a"}, ${1}, ${undefined})`
          return yield* q<{ id: string; n: number }>`INSERT INTO t (id, n, note) VALUES (${"b"}, ${2}, ${"two"}) RETURNING id, n`
        }))
      assert.deepStrictEqual(returned, [{ id: "b", n: 2 }])
      assert.deepStrictEqual(yield* direct.query<{ id: string; note: string | null }>`SELECT id, note FROM t ORDER BY id`, [
        { id: "a", note: null },
        { id: "b", note: "two" }
      ])
      assert.deepStrictEqual(yield* sql<{ n: number }>`SELECT n FROM t WHERE id = ${"b"}`, [{ n: 2 }])
    }).pipe(Effect.provide(database())))

  it.scoped("rolls back on a refused statement, on the body's error, on a defect and on interruption; the connection stays usable", () =>
    Effect.gen(function*() {
      const { direct, ids } = yield* setup
      const refused = yield* Effect.exit(direct.transaction((q) =>
        Effect.zipRight(q`INSERT INTO t (id, n) VALUES (${"a"}, ${1})`, q`INSERT INTO t (id, n) VALUES (${"a"}, ${2})`)))
      assert.isTrue(Exit.isFailure(refused))
      if (Exit.isFailure(refused)) assert.include(String(refused.cause), "SqlError")
      const own = yield* Effect.exit(direct.transaction((q) =>
        Effect.zipRight(q`INSERT INTO t (id, n) VALUES (${"b"}, ${1})`, Effect.fail("no" as const))))
      assert.deepStrictEqual(own, Exit.fail("no"))
      const defect = yield* Effect.exit(direct.transaction((q) =>
        Effect.zipRight(q`INSERT INTO t (id, n) VALUES (${"c"}, ${1})`, Effect.dieMessage("boom"))))
      assert.isTrue(Exit.isFailure(defect))
      const inside = yield* Deferred.make<void>()
      const fiber = yield* Effect.fork(direct.transaction((q) =>
        Effect.gen(function*() {
          yield* q`INSERT INTO t (id, n) VALUES (${"d"}, ${1})`
          yield* Deferred.succeed(inside, undefined)
          return yield* Effect.never
        })))
      yield* Deferred.await(inside)
      yield* Fiber.interrupt(fiber)
      assert.deepStrictEqual(yield* ids, [])
      yield* direct.transaction((q) => q`INSERT INTO t (id, n) VALUES (${"e"}, ${1})`)
      assert.deepStrictEqual(yield* ids, ["e"])
    }).pipe(Effect.provide(database())))

  it.scoped("keeps another fiber's statement out of an open transaction: it waits, and survives that transaction's rollback", () =>
    Effect.gen(function*() {
      const { direct, ids } = yield* setup
      const inside = yield* Deferred.make<void>()
      const go = yield* Deferred.make<void>()
      const open = yield* Effect.fork(Effect.exit(direct.transaction((q) =>
        Effect.gen(function*() {
          yield* q`INSERT INTO t (id, n) VALUES (${"a"}, ${1})`
          yield* Deferred.succeed(inside, undefined)
          yield* Deferred.await(go)
          return yield* Effect.fail("rolled back" as const)
        }))))
      yield* Deferred.await(inside)
      const outside = yield* Effect.fork(direct.query`INSERT INTO t (id, n) VALUES (${"b"}, ${2})`)
      const other = yield* Effect.fork(direct.transaction((q) => q`INSERT INTO t (id, n) VALUES (${"c"}, ${3})`))
      yield* Effect.yieldNow()
      yield* Deferred.succeed(go, undefined)
      assert.deepStrictEqual(yield* Fiber.join(open), Exit.fail("rolled back" as const))
      yield* Fiber.join(outside)
      yield* Fiber.join(other)
      // Had either run inside the open transaction, the rollback would have taken it too.
      assert.deepStrictEqual(yield* ids, ["b", "c"])
    }).pipe(Effect.provide(database())))

  it.scoped("waits for the client's transaction, and the client waits for its", () =>
    Effect.gen(function*() {
      const { direct, ids, sql } = yield* setup
      const inside = yield* Deferred.make<void>()
      const go = yield* Deferred.make<void>()
      const client = yield* Effect.fork(Effect.exit(sql.withTransaction(Effect.gen(function*() {
        yield* sql`INSERT INTO t (id, n) VALUES (${"a"}, ${1})`
        yield* Deferred.succeed(inside, undefined)
        yield* Deferred.await(go)
        return yield* Effect.fail("client rolled back" as const)
      }))))
      yield* Deferred.await(inside)
      const mine = yield* Effect.fork(direct.transaction((q) => q`INSERT INTO t (id, n) VALUES (${"b"}, ${2})`))
      yield* Effect.yieldNow()
      yield* Deferred.succeed(go, undefined)
      assert.deepStrictEqual(yield* Fiber.join(client), Exit.fail("client rolled back" as const))
      yield* Fiber.join(mine)
      assert.deepStrictEqual(yield* ids, ["b"])
    }).pipe(Effect.provide(database())))

  it.scoped("inside the client's transaction runs as a savepoint of it; a second transaction of the same fiber is refused", () =>
    Effect.gen(function*() {
      const { direct, ids, sql } = yield* setup
      yield* sql.withTransaction(Effect.gen(function*() {
        yield* sql`INSERT INTO t (id, n) VALUES (${"a"}, ${1})`
        const inner = yield* Effect.exit(direct.transaction((q) =>
          Effect.zipRight(q`INSERT INTO t (id, n) VALUES (${"b"}, ${2})`, Effect.fail("inner" as const))))
        assert.deepStrictEqual(inner, Exit.fail("inner"))
        yield* direct.transaction((q) => q`INSERT INTO t (id, n) VALUES (${"c"}, ${3})`)
      }))
      assert.deepStrictEqual(yield* ids, ["a", "c"])
      const nested = yield* Effect.exit(direct.transaction((q) =>
        Effect.zipRight(q`INSERT INTO t (id, n) VALUES (${"d"}, ${4})`, direct.transaction((inner) => inner`INSERT INTO t (id, n) VALUES (${"e"}, ${5})`))))
      assert.isTrue(Exit.isFailure(nested))
      if (Exit.isFailure(nested)) assert.include(String(nested.cause), "a transaction inside a transaction of the same fiber")
      assert.deepStrictEqual(yield* ids, ["a", "c"])
      yield* direct.query`INSERT INTO t (id, n) VALUES (${"f"}, ${6})`
      assert.deepStrictEqual(yield* ids, ["a", "c", "f"])
    }).pipe(Effect.provide(database())))

  it.scoped("a COMMIT SQLite refuses fails the transaction, rolls it back and frees the connection", () =>
    Effect.gen(function*() {
      const { direct, ids, sql } = yield* setup
      // A deferred foreign key is checked at COMMIT.
      yield* sql`CREATE TABLE parent (id TEXT PRIMARY KEY)`
      yield* sql`CREATE TABLE child (id TEXT PRIMARY KEY, parent TEXT REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)`
      const refused = yield* Effect.exit(direct.transaction((q) =>
        Effect.zipRight(q`INSERT INTO t (id, n) VALUES (${"a"}, ${1})`, q`INSERT INTO child (id, parent) VALUES (${"x"}, ${"nobody"})`)))
      assert.isTrue(Exit.isFailure(refused))
      if (Exit.isFailure(refused)) assert.include(String(refused.cause), "Failed to commit a transaction")
      assert.deepStrictEqual(yield* ids, [])
      assert.deepStrictEqual(yield* sql`SELECT id FROM child`, [])
      yield* direct.transaction((q) => q`INSERT INTO t (id, n) VALUES (${"b"}, ${2})`)
      assert.deepStrictEqual(yield* ids, ["b"])
    }).pipe(Effect.provide(database())))

  describe("a whole program in one call (`run`)", () => {
    const insert = (id: string, n: number) => function*(): Program<ReadonlyArray<{ id: string }>> {
      return yield* statement<{ id: string }>`INSERT INTO t (id, n) VALUES (${id}, ${n}) RETURNING id`
    }
    const insertThenFail = (id: string) => function*(): Program<never, "no"> {
      yield* statement`INSERT INTO t (id, n) VALUES (${id}, ${1})`
      return yield* fail("no" as const)
    }

    it.scoped("commits its statements, and rolls them back on its failure, a refused statement or a defect", () =>
      Effect.gen(function*() {
        const { direct, ids } = yield* setup
        assert.deepStrictEqual(yield* direct.run(insert("a", 1), true), [{ id: "a" }])
        assert.deepStrictEqual(yield* Effect.exit(direct.run(insertThenFail("b"), true)), Exit.fail("no" as const))
        const refused = yield* Effect.exit(direct.run(function*() {
          yield* statement`INSERT INTO t (id, n) VALUES (${"c"}, ${1})`
          yield* statement`INSERT INTO t (id, n) VALUES (${"a"}, ${2})`
        }, true))
        assert.isTrue(Exit.isFailure(refused))
        if (Exit.isFailure(refused)) assert.include(String(refused.cause), "SqlError")
        const defect = yield* Effect.exit(direct.run(function*() {
          yield* statement`INSERT INTO t (id, n) VALUES (${"d"}, ${1})`
          throw new Error("boom")
        }, true))
        assert.isTrue(Exit.isFailure(defect) && Cause.isDie(defect.cause))
        assert.deepStrictEqual(yield* ids, ["a"])
        // Without a transaction, what ran before the failure stays.
        assert.deepStrictEqual(yield* Effect.exit(direct.run(insertThenFail("e"), false)), Exit.fail("no" as const))
        assert.deepStrictEqual(yield* ids, ["a", "e"])
      }).pipe(Effect.provide(database())))

    it.scoped("waits for another fiber's transaction and survives its rollback; joins its own fiber's, as a statement does", () =>
      Effect.gen(function*() {
        const { direct, ids } = yield* setup
        const inside = yield* Deferred.make<void>()
        const go = yield* Deferred.make<void>()
        const open = yield* Effect.fork(Effect.exit(direct.transaction((q) =>
          Effect.gen(function*() {
            yield* q`INSERT INTO t (id, n) VALUES (${"a"}, ${1})`
            yield* Deferred.succeed(inside, undefined)
            yield* Deferred.await(go)
            return yield* Effect.fail("rolled back" as const)
          }))))
        yield* Deferred.await(inside)
        const outside = yield* Effect.fork(direct.run(insert("b", 2), false))
        const other = yield* Effect.fork(direct.run(insert("c", 3), true))
        yield* Effect.yieldNow()
        yield* Deferred.succeed(go, undefined)
        assert.deepStrictEqual(yield* Fiber.join(open), Exit.fail("rolled back" as const))
        yield* Fiber.join(outside)
        yield* Fiber.join(other)
        assert.deepStrictEqual(yield* ids, ["b", "c"])
        const own = yield* Effect.exit(direct.transaction(() =>
          Effect.zipRight(direct.run(insert("d", 4), false), Effect.fail("own" as const))))
        assert.deepStrictEqual(own, Exit.fail("own"))
        const nested = yield* Effect.exit(direct.transaction(() => direct.run(insert("e", 5), true)))
        assert.isTrue(Exit.isFailure(nested))
        if (Exit.isFailure(nested)) assert.include(String(nested.cause), "a transaction inside a transaction of the same fiber")
        assert.deepStrictEqual(yield* ids, ["b", "c"])
      }).pipe(Effect.provide(database())))

    it.scoped("inside the client's transaction runs there, a transaction as a savepoint of it", () =>
      Effect.gen(function*() {
        const { direct, ids, sql } = yield* setup
        yield* sql.withTransaction(Effect.gen(function*() {
          yield* sql`INSERT INTO t (id, n) VALUES (${"a"}, ${1})`
          assert.deepStrictEqual(yield* Effect.exit(direct.run(insertThenFail("b"), true)), Exit.fail("no" as const))
          yield* direct.run(insert("c", 3), true)
          yield* direct.run(insert("d", 4), false)
        }))
        assert.deepStrictEqual(yield* ids, ["a", "c", "d"])
        const rolledBack = yield* Effect.exit(sql.withTransaction(Effect.zipRight(direct.run(insert("e", 5), true), Effect.fail("client" as const))))
        assert.deepStrictEqual(rolledBack, Exit.fail("client"))
        assert.deepStrictEqual(yield* ids, ["a", "c", "d"])
      }).pipe(Effect.provide(database())))
  })
})
