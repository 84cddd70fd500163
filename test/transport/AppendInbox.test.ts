import { assert, describe, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import { emptyInbox, holdUnstarted, offer } from "../../src/transport/AppendInbox.js"
import type { AppendInbox } from "../../src/transport/AppendInbox.js"

const WINDOW = 64

/** Delivers `arrivals` (seqnos) into a fresh inbox; returns what was handed on, in order. */
const deliver = (arrivals: ReadonlyArray<number>) => {
  let inbox: AppendInbox<number> = emptyInbox()
  const handedOn: Array<number> = []
  for (const seqno of arrivals) {
    const result = offer(inbox, seqno, seqno, WINDOW)
    inbox = result.inbox
    handedOn.push(...result.ready)
  }
  return { handedOn, inbox }
}

/** Each of 0..n-1 sent 1-3 times, shuffled within windows of 16 (as concurrent POSTs and retries arrive). */
const arrivalsArb = fc.integer({ min: 1, max: 60 }).chain((n) =>
  fc.tuple(
    fc.array(fc.integer({ min: 1, max: 3 }), { minLength: n, maxLength: n }),
    fc.array(fc.nat(), { minLength: n * 3, maxLength: n * 3 })
  ).map(([copies, seeds]) => {
    const sends = copies.flatMap((count, seqno) => Array.from({ length: count }, () => seqno))
    // Shuffle inside consecutive windows of 16 sends.
    const out: Array<number> = []
    for (let start = 0; start < sends.length; start += 16) {
      const window = sends.slice(start, start + 16)
      while (window.length > 0) out.push(window.splice(seeds[out.length]! % window.length, 1)[0]!)
    }
    return { n, arrivals: out }
  })
)

describe("AppendInbox", () => {
  it.prop("appends delivered 1-3 times each and shuffled are handed on exactly once, in seqno order", [arrivalsArb], ([{ arrivals, n }]) => {
    const { handedOn, inbox } = deliver(arrivals)
    assert.deepStrictEqual(handedOn, Array.from({ length: n }, (_, i) => i))
    assert.strictEqual(inbox.next, n)
    assert.strictEqual(inbox.held.size, 0)
  }, { fastCheck: { numRuns: 500 } })

  it("holds a gap until it fills", () => {
    let inbox = emptyInbox<string>()
    const second = offer(inbox, 1, "b", WINDOW)
    assert.strictEqual(second.verdict, "held")
    assert.deepStrictEqual(second.ready, [])
    inbox = second.inbox
    const first = offer(inbox, 0, "a", WINDOW)
    assert.strictEqual(first.verdict, "delivered")
    assert.deepStrictEqual(first.ready, ["a", "b"])
  })

  it("drops duplicates below next and of held appends", () => {
    const afterFirst = offer(emptyInbox<string>(), 0, "a", WINDOW).inbox
    assert.strictEqual(offer(afterFirst, 0, "a", WINDOW).verdict, "duplicate")
    const holding = offer(afterFirst, 2, "c", WINDOW).inbox
    const again = offer(holding, 2, "c", WINDOW)
    assert.strictEqual(again.verdict, "duplicate")
    assert.strictEqual(again.inbox, holding)
  })

  it("refuses seqnos far ahead, negative or not integers, without a change", () => {
    const inbox = emptyInbox<string>()
    for (const seqno of [WINDOW, 1e15, -1, 1.5, Number.NaN, 2 ** 60]) {
      const result = offer(inbox, seqno, "x", WINDOW)
      assert.strictEqual(result.verdict, "outOfRange", `seqno ${seqno}`)
      assert.strictEqual(result.inbox, inbox)
    }
  })

  it("an inbox not started yet holds appends far past 0 while they span fewer than the window; a start at the lowest hands them on in order", () => {
    let inbox = emptyInbox<number>()
    for (const seqno of [5_002, 5_000, 5_001, 5_004]) {
      const held = holdUnstarted(inbox, seqno, seqno, WINDOW)
      assert.strictEqual(held.verdict, "held", `seqno ${seqno}`)
      assert.deepStrictEqual(held.ready, [])
      inbox = held.inbox
    }
    assert.strictEqual(holdUnstarted(inbox, 5_001, 5_001, WINDOW).verdict, "duplicate")
    for (const seqno of [5_000 + WINDOW, 5_004 - WINDOW, -1, 1.5, 2 ** 60]) {
      const refused = holdUnstarted(inbox, seqno, seqno, WINDOW)
      assert.strictEqual(refused.verdict, "outOfRange", `seqno ${seqno}`)
      assert.strictEqual(refused.inbox, inbox)
    }
    assert.strictEqual(inbox.next, 0)
    // What the transport does once the recovered turn speaks (`adoptHeld`): start at the lowest held seqno.
    let started: AppendInbox<number> = emptyInbox(5_000)
    const handedOn: Array<number> = []
    for (const [seqno, item] of [...inbox.held.entries()].sort(([a], [b]) => a - b)) {
      const offered = offer(started, seqno, item, WINDOW)
      started = offered.inbox
      handedOn.push(...offered.ready)
    }
    assert.deepStrictEqual(handedOn, [5_000, 5_001, 5_002])
    assert.deepStrictEqual([...started.held.keys()], [5_004])
  })
})
