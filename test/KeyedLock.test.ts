import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Ref } from "effect"
import { makeKeyedLock } from "../src/internal/KeyedLock.js"

/** A lock whose key "k" a forked holder keeps until `release` completes. */
const heldKey = Effect.gen(function*() {
  const lock = yield* makeKeyedLock()
  const release = yield* Deferred.make<void>()
  const holder = yield* Effect.fork(lock.withLock("k")(Deferred.await(release)))
  yield* Effect.yieldNow()
  return { holder, lock, release }
})

describe("KeyedLock", () => {
  it.effect("serializes holders of one key and lets other keys run", () =>
    Effect.gen(function*() {
      const lock = yield* makeKeyedLock()
      const running = yield* Ref.make(new Map<string, number>())
      const peak = yield* Ref.make(new Map<string, number>())
      const gate = yield* Deferred.make<void>()
      const task = (key: string) =>
        lock.withLock(key)(Effect.gen(function*() {
          const now = (yield* Ref.get(running)).get(key) ?? 0
          yield* Ref.update(running, (m) => new Map(m).set(key, now + 1))
          yield* Ref.update(peak, (m) => new Map(m).set(key, Math.max(m.get(key) ?? 0, now + 1)))
          yield* Deferred.await(gate)
          yield* Effect.yieldNow()
          yield* Ref.update(running, (m) => new Map(m).set(key, (m.get(key) ?? 1) - 1))
        }))
      const fibers = yield* Effect.forEach(["a", "a", "a", "b", "b"], (key) => Effect.fork(task(key)))
      const total = Ref.get(running).pipe(Effect.map((m) => [...m.values()].reduce((x, y) => x + y, 0)))
      for (let i = 0; i < 100 && (yield* total) < 2; i++) yield* Effect.yieldNow()
      for (let i = 0; i < 20; i++) yield* Effect.yieldNow()
      const concurrent = yield* total
      assert.strictEqual(concurrent, 2, "one holder per key, both keys at once")
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.joinAll(fibers)
      assert.deepStrictEqual([...(yield* Ref.get(peak)).entries()].sort(), [["a", 1], ["b", 1]])
    }))

  it.effect("a waiter queued behind the holder can be interrupted, and the key still works", () =>
    Effect.gen(function*() {
      const { holder, lock, release } = yield* heldKey
      const waiter = yield* Effect.fork(lock.withLock("k")(Effect.succeed("never")))
      yield* Effect.yieldNow()
      yield* Fiber.interrupt(waiter)
      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(holder)
      assert.strictEqual(yield* lock.withLock("k")(Effect.succeed("ok")), "ok")
    }))

  it.effect("forgets a key once nobody holds it or waits for it, a failed or interrupted user too", () =>
    Effect.gen(function*() {
      const { holder, lock, release } = yield* heldKey
      const waiter = yield* Effect.fork(lock.withLock("k")(Effect.fail("refused" as const)))
      const other = yield* Effect.fork(lock.withLock("k")(Effect.never))
      yield* Effect.yieldNow()
      assert.strictEqual(lock.size(), 1)
      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(holder)
      assert.deepStrictEqual(yield* Fiber.await(waiter), Exit.fail("refused"))
      assert.strictEqual(lock.size(), 1, "the last user still holds it")
      yield* Fiber.interrupt(other)
      assert.strictEqual(lock.size(), 0)
      yield* lock.withLock("j")(Effect.void)
      assert.strictEqual(lock.size(), 0)
    }))
})
