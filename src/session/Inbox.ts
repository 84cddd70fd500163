/**
 * The ordered inbox of one request id's BidiAppends.
 *
 * Cursor posts appends concurrently (up to 16 in flight), so they arrive in any order, and a
 * retried POST can arrive twice. The inbox hands them on in `append_seqno` order: a seqno below
 * the next expected one is a duplicate and dropped, one above it is held until the gap fills,
 * one far above it is refused. (When each is acknowledged is `Owed.ts`'s rule: not before it
 * is handed on.) Pure: the session's state holds one `AppendInbox` and threads it through
 * `offer`.
 *
 * An inbox that takes over a numbering an earlier process began (a turn recovered after a
 * restart, `adopt`) differs in two ways, because the client re-sends only the appends that
 * process did not acknowledge: a gap may never be filled, so the session may pass over it
 * (`skipGap`); and a seqno below `next` that this process never handed on (below where it
 * started, or passed over) is handed on when it arrives, late, instead of being dropped.
 */

export interface AppendInbox<A> {
  /** The seqno handed on next. */
  readonly next: number
  /** Appends that arrived ahead of a gap, by seqno. */
  readonly held: ReadonlyMap<number, A>
  /** Set when the inbox took over a numbering an earlier process began (`adopt`). */
  readonly recovered?: Recovered
}

export interface Recovered {
  /** The first seqno this process expected; below it, it handed on only late arrivals. */
  readonly start: number
  /** Seqnos from `start` to `next` passed over (`skipGap`) and not handed on since. */
  readonly skipped: ReadonlySet<number>
  /** Seqnos below `start` handed on late (at most `window` of them). */
  readonly lateBelowStart: ReadonlySet<number>
}

export type Verdict =
  /** Handed on now, with any held appends it unblocked. */
  | "delivered"
  /** Kept until the appends before it arrive. */
  | "held"
  /**
   * Below `next` in a recovered inbox, never handed on by this process (passed over, or below
   * `start` by less than the window): handed on now, out of order.
   */
  | "late"
  /** Seen before (below `next`, or already held): dropped. */
  | "duplicate"
  /** Too far ahead of `next`: refused without a change. */
  | "outOfRange"

export interface Offered<A> {
  readonly inbox: AppendInbox<A>
  readonly verdict: Verdict
  /** The appends to hand on, in seqno order. */
  readonly ready: ReadonlyArray<A>
}

export const emptyInbox = <A>(next = 0): AppendInbox<A> => ({ next, held: new Map() })

/**
 * Offers the append numbered `seqno`. `window` bounds how far ahead of `next` an append may be
 * held (so a forged seqno cannot make the server hold memory forever), and how far below the
 * start of a recovered inbox a late append is still handed on.
 */
export const offer = <A>(inbox: AppendInbox<A>, seqno: number, item: A, window: number): Offered<A> => {
  if (!Number.isSafeInteger(seqno) || seqno < 0 || seqno - inbox.next >= window) return { inbox, verdict: "outOfRange", ready: [] }
  if (seqno < inbox.next) {
    const recovered = inbox.recovered
    return recovered !== undefined && isLate(recovered, seqno, window)
      ? { inbox: { ...inbox, recovered: takeLate(recovered, seqno) }, verdict: "late", ready: [item] }
      : { inbox, verdict: "duplicate", ready: [] }
  }
  if (inbox.held.has(seqno)) return { inbox, verdict: "duplicate", ready: [] }
  if (seqno > inbox.next) {
    const held = new Map(inbox.held)
    held.set(seqno, item)
    return { inbox: { ...inbox, held }, verdict: "held", ready: [] }
  }
  const released = release(inbox.held, seqno + 1)
  return { inbox: { ...inbox, next: released.next, held: released.held }, verdict: "delivered", ready: [item, ...released.ready] }
}

/** The held appends from `from` on without a gap, and what stays held. */
const release = <A>(held: ReadonlyMap<number, A>, from: number) => {
  const ready: Array<A> = []
  let next = from
  if (!held.has(next)) return { next, held, ready }
  const remaining = new Map(held)
  for (let waiting = remaining.get(next); waiting !== undefined; waiting = remaining.get(next)) {
    ready.push(waiting)
    remaining.delete(next)
    next++
  }
  return { next, held: remaining as ReadonlyMap<number, A>, ready }
}

const isLate = (recovered: Recovered, seqno: number, window: number) =>
  seqno >= recovered.start
    ? recovered.skipped.has(seqno)
    : recovered.start - seqno <= window && !recovered.lateBelowStart.has(seqno)

const takeLate = (recovered: Recovered, seqno: number): Recovered => {
  if (seqno >= recovered.start) {
    const skipped = new Set(recovered.skipped)
    skipped.delete(seqno)
    return { ...recovered, skipped }
  }
  return { ...recovered, lateBelowStart: new Set(recovered.lateBelowStart).add(seqno) }
}

/**
 * Holds the append numbered `seqno` in an inbox that has handed nothing on and whose first
 * seqno is not known yet: a turn an earlier process started, whose client numbers on from
 * where that process left off, before the turn says where the inbox starts (`Gaps.adoptHeld`). Bounded like `offer`: the held appends span fewer than `window` seqnos.
 */
export const holdUnstarted = <A>(inbox: AppendInbox<A>, seqno: number, item: A, window: number): Offered<A> => {
  if (!Number.isSafeInteger(seqno) || seqno < 0) return { inbox, verdict: "outOfRange", ready: [] }
  if (seqno < inbox.next || inbox.held.has(seqno)) return { inbox, verdict: "duplicate", ready: [] }
  let lowest = seqno
  let highest = seqno
  for (const held of inbox.held.keys()) {
    if (held < lowest) lowest = held
    if (held > highest) highest = held
  }
  if (highest - lowest >= window) return { inbox, verdict: "outOfRange", ready: [] }
  const held = new Map(inbox.held)
  held.set(seqno, item)
  return { inbox: { next: inbox.next, held }, verdict: "held", ready: [] }
}

/**
 * Starts an inbox that has handed nothing on at `start`, as the continuation of a numbering an
 * earlier process began (a recovered turn: `start` is the lowest held seqno, or the first
 * append's). The held appends are offered again: those from `start` on without a gap are ready,
 * any below `start` are late.
 */
export const adopt = <A>(inbox: AppendInbox<A>, start: number, window: number): Offered<A> => {
  let adopted: AppendInbox<A> = { next: start, held: new Map(), recovered: { start, skipped: new Set(), lateBelowStart: new Set() } }
  const ready: Array<A> = []
  for (const [seqno, item] of [...inbox.held.entries()].sort(([a], [b]) => a - b)) {
    const offered = offer(adopted, seqno, item, window)
    adopted = offered.inbox
    ready.push(...offered.ready)
  }
  return { inbox: adopted, verdict: ready.length > 0 ? "delivered" : "held", ready }
}

/**
 * Passes over `next` in a recovered inbox that holds appends behind it (`Gaps.ts` decides when): the held appends it blocked
 * are ready, and the passed seqno is handed on late should it still arrive. No change to an
 * inbox that is not recovered or holds nothing.
 */
export const skipGap = <A>(inbox: AppendInbox<A>): Offered<A> => {
  const recovered = inbox.recovered
  if (recovered === undefined || inbox.held.size === 0) return { inbox, verdict: "held", ready: [] }
  const released = release(inbox.held, inbox.next + 1)
  return {
    inbox: { next: released.next, held: released.held, recovered: { ...recovered, skipped: new Set(recovered.skipped).add(inbox.next) } },
    verdict: released.ready.length > 0 ? "delivered" : "held",
    ready: released.ready
  }
}
