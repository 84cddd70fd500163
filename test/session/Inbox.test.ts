import { assert, describe, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import { adopt, emptyInbox, holdUnstarted, offer, skipGap } from "../../src/session/Inbox.js"
import type { AppendInbox } from "../../src/session/Inbox.js"

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

  it("a recovered inbox (adopt) passes over a gap on request, and hands on a passed or lower seqno that arrives later once, out of order", () => {
    let inbox = emptyInbox<number>()
    for (const seqno of [12, 10, 15]) inbox = holdUnstarted(inbox, seqno, seqno, WINDOW).inbox
    const adopted = adopt(inbox, 10, WINDOW)
    assert.deepStrictEqual(adopted.ready, [10])
    inbox = adopted.inbox
    assert.strictEqual(inbox.next, 11)
    assert.deepStrictEqual([...inbox.held.keys()].sort(), [12, 15])
    // 11 never comes: passed over, 12 is ready; then 13 and 14.
    const passed = skipGap(inbox)
    assert.strictEqual(passed.verdict, "delivered")
    assert.deepStrictEqual(passed.ready, [12])
    inbox = passed.inbox
    const stillHeld = skipGap(inbox)
    assert.deepStrictEqual(stillHeld.ready, [])
    inbox = skipGap(stillHeld.inbox).inbox
    assert.strictEqual(inbox.next, 16)
    assert.strictEqual(inbox.held.size, 0)
    // Nothing held: nothing to pass over.
    assert.strictEqual(skipGap(inbox).inbox, inbox)
    // Passed over, then arrives: late, once. Handed on 10 and 12: duplicates.
    const late = offer(inbox, 11, 11, WINDOW)
    assert.strictEqual(late.verdict, "late")
    assert.deepStrictEqual(late.ready, [11])
    inbox = late.inbox
    for (const seqno of [11, 10, 12, 15]) assert.strictEqual(offer(inbox, seqno, seqno, WINDOW).verdict, "duplicate", `seqno ${seqno}`)
    // Below where the inbox started, within the window: late, once; further below: a duplicate.
    const below = offer(inbox, 9, 9, WINDOW)
    assert.strictEqual(below.verdict, "late")
    inbox = below.inbox
    assert.strictEqual(offer(inbox, 9, 9, WINDOW).verdict, "duplicate")
    assert.strictEqual(offer(emptyInbox<number>(), 0, 0, WINDOW).verdict, "delivered")
    const farBelow = offer(adopt(emptyInbox<number>(), 1_000, WINDOW).inbox, 1_000 - WINDOW - 1, 0, WINDOW)
    assert.strictEqual(farBelow.verdict, "duplicate")
    // Far ahead is refused as in any inbox.
    assert.strictEqual(offer(inbox, inbox.next + WINDOW, 0, WINDOW).verdict, "outOfRange")
  })

  it("an inbox that is not recovered never passes over a gap, and drops what is below next", () => {
    const inbox = offer(offer(emptyInbox<number>(), 0, 0, WINDOW).inbox, 2, 2, WINDOW).inbox
    assert.strictEqual(skipGap(inbox).inbox, inbox)
    assert.strictEqual(offer(inbox, 0, 0, WINDOW).verdict, "duplicate")
  })

  /**
   * After a restart the client re-sends only what the old process did not acknowledge: some
   * seqnos never come (`gone`); the rest arrive 1-3 times, shuffled within windows of 16. The
   * inbox starts at the first arrival (`adopt`, as when the recovered turn spoke first), and at
   * random moments the grace runs out and every gap blocking held appends is passed over.
   */
  const recoveredArb = fc.integer({ min: 1, max: 60 }).chain((n) =>
    fc.tuple(
      fc.array(fc.boolean(), { minLength: n, maxLength: n }),
      fc.array(fc.integer({ min: 1, max: 3 }), { minLength: n, maxLength: n }),
      fc.array(fc.nat(), { minLength: n * 3, maxLength: n * 3 }),
      fc.array(fc.boolean(), { minLength: n * 3, maxLength: n * 3 })
    ).map(([goneFlags, copies, seeds, graceRunsOut]) => {
      // Every third seqno is always sent, so something arrives.
      const gone = new Set(goneFlags.flatMap((isGone, seqno) => (isGone && seqno % 3 !== 0 ? [seqno] : [])))
      const sends = copies.flatMap((count, seqno) => (gone.has(seqno) ? [] : Array.from({ length: count }, () => seqno)))
      const arrivals: Array<number> = []
      for (let start = 0; start < sends.length; start += 16) {
        const window = sends.slice(start, start + 16)
        while (window.length > 0) arrivals.push(window.splice(seeds[arrivals.length]! % window.length, 1)[0]!)
      }
      return { n, gone, arrivals, graceRunsOut }
    })
  )

  it.prop("a recovered inbox hands on every re-sent append exactly once, in seqno order but for late ones, and never a seqno that was not sent", [recoveredArb], ([{ arrivals, gone, graceRunsOut, n }]) => {
    let inbox: AppendInbox<number> = emptyInbox()
    const inOrder: Array<number> = []
    const late: Array<number> = []
    const passAllGaps = () => {
      for (let passed = skipGap(inbox); ; passed = skipGap(inbox)) {
        inOrder.push(...passed.ready)
        if (passed.inbox === inbox) return
        inbox = passed.inbox
      }
    }
    arrivals.forEach((seqno, i) => {
      if (i === 0) inbox = adopt(inbox, seqno, WINDOW).inbox
      const offered = offer(inbox, seqno, seqno, WINDOW)
      assert.notStrictEqual(offered.verdict, "outOfRange")
      inbox = offered.inbox
      if (offered.verdict === "late") late.push(...offered.ready)
      else inOrder.push(...offered.ready)
      if (graceRunsOut[i]) passAllGaps()
    })
    passAllGaps()
    const handedOn = [...inOrder, ...late].sort((a, b) => a - b)
    const sent = Array.from({ length: n }, (_, i) => i).filter((seqno) => !gone.has(seqno))
    assert.deepStrictEqual(handedOn, sent)
    assert.deepStrictEqual(inOrder, [...inOrder].sort((a, b) => a - b))
    assert.strictEqual(inbox.held.size, 0)
  }, { fastCheck: { numRuns: 500 } })
})
