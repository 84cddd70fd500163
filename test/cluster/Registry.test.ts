/**
 * The instances' registry on a real PostgreSQL database (`cluster/Registry.ts`), two instances
 * in this process, each on a pool of its own: a request is held by the first to route it and
 * routed to it by the other; a conversation's lease waits while the other holds it; a stopped
 * instance's requests are taken over; a hung one (heartbeat stopped, connection open) has its
 * locks' connection ended by the other's heartbeat. Skipped when the run has no PostgreSQL.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Layer, Scope } from "effect"
import { inject } from "vitest"
import { Cluster } from "../../src/Cluster.js"
import type { ClusterService } from "../../src/Cluster.js"
import * as Registry from "../../src/cluster/Registry.js"
import * as Store from "../../src/Store.js"
import { freshDatabase } from "../support/Postgres.js"

const postgresUrl = inject("postgresUrl")

interface Instance {
  readonly cluster: ClusterService
  readonly sql: SqlClient.SqlClient
  readonly stop: Effect.Effect<void>
}

const instance = (database: string, address: string, options: Partial<Registry.RegistryOptions> = {}) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const context = yield* Layer.buildWithScope(
      Layer.provideMerge(Registry.layer({ address, heartbeatMs: 100, goneAfterMs: 1_000, ...options }), Store.layerClient(database)),
      scope
    )
    return { cluster: context.unsafeMap.get(Cluster.key) as ClusterService, sql: context.unsafeMap.get(SqlClient.SqlClient.key) as SqlClient.SqlClient, stop: Scope.close(scope, Exit.void) } satisfies Instance
  })

describe.skipIf(postgresUrl === undefined)("the instances' registry on PostgreSQL", () => {
  it.live("routes a request to the instance that claimed it; a stopped one's requests are taken over", () =>
    Effect.gen(function*() {
      const database = yield* Effect.promise(() => freshDatabase(postgresUrl!, "registry"))
      const a = yield* instance(database, "http://127.0.0.1:1111")
      const b = yield* instance(database, "http://127.0.0.1:2222")
      assert.isTrue(yield* a.cluster.othersAlive)
      assert.isTrue(yield* b.cluster.othersAlive)
      assert.deepStrictEqual(yield* a.cluster.route("r1"), { _tag: "Here", tookOver: false })
      assert.deepStrictEqual(yield* a.cluster.route("r1"), { _tag: "Here", tookOver: false })
      assert.deepStrictEqual(yield* b.cluster.route("r1"), { _tag: "There", instanceId: a.cluster.instanceId, address: "http://127.0.0.1:1111" })
      assert.deepStrictEqual(yield* b.cluster.route("r2"), { _tag: "Here", tookOver: false })
      assert.deepStrictEqual(yield* a.cluster.route("r2"), { _tag: "There", instanceId: b.cluster.instanceId, address: "http://127.0.0.1:2222" })
      // Both at once on a new request: one holds it, the other is sent there.
      const [x, y] = yield* Effect.all([a.cluster.route("r3"), b.cluster.route("r3")], { concurrency: 2 })
      assert.deepStrictEqual([x._tag, y._tag].sort(), ["Here", "There"])
      yield* a.stop
      assert.isFalse(yield* b.cluster.othersAlive)
      b.cluster.forget("r1")
      assert.deepStrictEqual(yield* b.cluster.route("r1"), { _tag: "Here", tookOver: true })
      assert.deepStrictEqual(yield* b.cluster.route("r1"), { _tag: "Here", tookOver: false })
      yield* b.stop
    }), { timeout: 30_000 })

  it.live("another database's instances on the same server (the same keys) do not keep a stopped one alive", () =>
    Effect.gen(function*() {
      const elsewhere = yield* instance(yield* Effect.promise(() => freshDatabase(postgresUrl!, "registry")), "http://127.0.0.1:3333")
      const database = yield* Effect.promise(() => freshDatabase(postgresUrl!, "registry"))
      // `a` beats once: its lock, once its connection is ended, is not taken again (as a killed process's).
      const a = yield* instance(database, "http://127.0.0.1:1111", { heartbeatMs: 3_600_000 })
      const b = yield* instance(database, "http://127.0.0.1:2222")
      assert.deepStrictEqual(yield* a.cluster.route("r1"), { _tag: "Here", tookOver: false })
      // `a` killed: its row stays, its connection (and lock) goes.
      yield* b.sql.unsafe(
        `SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND classid = ${0x62796f69} AND objid = 1 AND objsubid = 2
         AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`
      )
      yield* Effect.sleep("200 millis")
      // `elsewhere` holds the lock of key 1 on its own database, as `a` did on this one.
      assert.isFalse(yield* b.cluster.othersAlive)
      assert.deepStrictEqual(yield* b.cluster.route("r1"), { _tag: "Here", tookOver: true })
      yield* b.stop
      yield* a.stop
      yield* elsewhere.stop
    }), { timeout: 30_000 })

  it.live("one instance at a time holds a conversation's lease", () =>
    Effect.gen(function*() {
      const database = yield* Effect.promise(() => freshDatabase(postgresUrl!, "registry"))
      const a = yield* instance(database, "http://127.0.0.1:1111")
      const b = yield* instance(database, "http://127.0.0.1:2222")
      const release = yield* Deferred.make<void>()
      const held = yield* Deferred.make<void>()
      const first = yield* Effect.fork(Effect.scoped(Effect.zipRight(a.cluster.lease("c1"), Effect.zipRight(Deferred.succeed(held, undefined), Deferred.await(release)))))
      yield* Deferred.await(held)
      const order: Array<string> = []
      const second = yield* Effect.fork(Effect.scoped(Effect.zipRight(b.cluster.lease("c1"), Effect.sync(() => order.push("b leased")))))
      // Another conversation is free meanwhile.
      yield* Effect.scoped(b.cluster.lease("c2"))
      yield* Effect.sleep("300 millis")
      assert.deepStrictEqual(order, [])
      order.push("a released")
      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(first)
      yield* Fiber.join(second)
      assert.deepStrictEqual(order, ["a released", "b leased"])
      yield* a.stop
      yield* b.stop
    }), { timeout: 30_000 })

  it.live("a hung instance (heartbeat stopped, connection open) loses its locks to the others' heartbeat", () =>
    Effect.gen(function*() {
      const database = yield* Effect.promise(() => freshDatabase(postgresUrl!, "registry"))
      // `a` beats once an hour: as good as hung after its first.
      const a = yield* instance(database, "http://127.0.0.1:1111", { heartbeatMs: 3_600_000 })
      const b = yield* instance(database, "http://127.0.0.1:2222")
      assert.deepStrictEqual(yield* a.cluster.route("r1"), { _tag: "Here", tookOver: false })
      const holding = yield* Deferred.make<void>()
      yield* Effect.fork(Effect.scoped(Effect.zipRight(a.cluster.lease("c1"), Effect.zipRight(Deferred.succeed(holding, undefined), Effect.never))))
      yield* Deferred.await(holding)
      // Past the 1 s timeout, b's heartbeat ends a's locks' connection: the lease and the request are b's.
      yield* Effect.scoped(b.cluster.lease("c1")).pipe(Effect.timeoutFail({ duration: "10 seconds", onTimeout: () => new Error("the lease stayed with the hung instance") }))
      assert.deepStrictEqual(yield* b.cluster.route("r1"), { _tag: "Here", tookOver: true })
      yield* b.stop
      yield* a.stop
    }), { timeout: 30_000 })
})
