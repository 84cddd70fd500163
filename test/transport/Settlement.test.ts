/**
 * `Settlement`: what an append's acknowledgement waits on, settled by a plain call. Settled
 * once (later calls change nothing), listeners called in order and taken back on request,
 * `settleAfter` joins several, and a wait with a limit fails with the error made at its end
 * and leaves no listener behind (nor does an interrupted wait).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Fiber } from "effect"
import { awaitSettlement, awaitSettlementFor, Settlement, settleAfter } from "../../src/transport/Settlement.js"

/** How many listeners a settlement holds (its private list, read for the test). */
const listenersOf = (settlement: Settlement): number => (settlement as unknown as { listeners: Array<unknown> }).listeners.length

describe("Settlement", () => {
  it("settles once: listeners run in order, then a late listener runs at once; a taken-back one never", () => {
    const settlement = new Settlement()
    const calls: Array<string> = []
    settlement.onSettled(() => calls.push("a"))
    const remove = settlement.onSettled(() => calls.push("b"))
    settlement.onSettled(() => calls.push("c"))
    remove()
    assert.isFalse(settlement.isSettled)
    assert.deepStrictEqual(calls, [])
    settlement.settle()
    settlement.settle()
    assert.isTrue(settlement.isSettled)
    assert.deepStrictEqual(calls, ["a", "c"])
    settlement.onSettled(() => calls.push("d"))
    assert.deepStrictEqual(calls, ["a", "c", "d"])
  })

  it("settleAfter settles the target once every wait has, in any order, and at once when none is pending", () => {
    const waits = [new Settlement(), new Settlement(), new Settlement()]
    waits[1]!.settle()
    const target = new Settlement()
    settleAfter(target, waits)
    waits[2]!.settle()
    assert.isFalse(target.isSettled)
    waits[0]!.settle()
    assert.isTrue(target.isSettled)
    const none = new Settlement()
    settleAfter(none, [])
    assert.isTrue(none.isSettled)
    const done = new Settlement()
    settleAfter(done, waits)
    assert.isTrue(done.isSettled)
  })

  it.effect("a wait ends when the settlement is settled, after the wait began or before", () =>
    Effect.gen(function*() {
      const settlement = new Settlement()
      const waiting = yield* Effect.fork(awaitSettlementFor(settlement, 60_000, () => "timed out"))
      yield* Effect.yieldNow()
      assert.strictEqual(listenersOf(settlement), 1)
      settlement.settle()
      assert.deepStrictEqual(yield* Fiber.join(waiting), undefined)
      yield* awaitSettlementFor(settlement, 1, () => "timed out")
      yield* awaitSettlement(settlement)
    }))

  it.live("a wait with a limit fails with the error made at its end and takes its listener back", () =>
    Effect.gen(function*() {
      const settlement = new Settlement()
      let made = 0
      const result = yield* Effect.either(awaitSettlementFor(settlement, 20, () => {
        made++
        return `not settled within 20 ms (${made})`
      }))
      assert.deepStrictEqual(result, Either.left("not settled within 20 ms (1)"))
      assert.strictEqual(listenersOf(settlement), 0)
      settlement.settle()
      assert.strictEqual(made, 1)
    }))

  it.effect("an interrupted wait takes its listener back", () =>
    Effect.gen(function*() {
      const settlement = new Settlement()
      const limited = yield* Effect.fork(awaitSettlementFor(settlement, 60_000, () => "timed out"))
      const unlimited = yield* Effect.fork(awaitSettlement(settlement))
      yield* Effect.yieldNow()
      assert.strictEqual(listenersOf(settlement), 2)
      yield* Fiber.interrupt(limited)
      yield* Fiber.interrupt(unlimited)
      assert.strictEqual(listenersOf(settlement), 0)
    }))
})
