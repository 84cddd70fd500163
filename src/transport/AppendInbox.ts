/**
 * The ordered inbox of one request id's BidiAppends.
 *
 * Cursor posts appends concurrently (up to 16 in flight), so they arrive in any order, and a
 * retried POST can arrive twice. The server acknowledges each at once and hands them on in
 * `append_seqno` order: a seqno below the next expected one is a duplicate and dropped, one
 * above it is held until the gap fills, one far above it is refused. Pure: the transport keeps
 * one `AppendInbox` value per request id and threads it through `offer`.
 */

export interface AppendInbox<A> {
  /** The seqno handed on next. */
  readonly next: number
  /** Appends that arrived ahead of a gap, by seqno. */
  readonly held: ReadonlyMap<number, A>
}

export type Verdict =
  /** Handed on now, with any held appends it unblocked. */
  | "delivered"
  /** Kept until the appends before it arrive. */
  | "held"
  /** Seen before (below `next`, or already held): dropped, acknowledged. */
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
 * held (so a forged seqno cannot make the server hold memory forever).
 */
export const offer = <A>(inbox: AppendInbox<A>, seqno: number, item: A, window: number): Offered<A> => {
  if (!Number.isSafeInteger(seqno) || seqno < 0 || seqno - inbox.next >= window) return { inbox, verdict: "outOfRange", ready: [] }
  if (seqno < inbox.next || inbox.held.has(seqno)) return { inbox, verdict: "duplicate", ready: [] }
  if (seqno > inbox.next) {
    const held = new Map(inbox.held)
    held.set(seqno, item)
    return { inbox: { next: inbox.next, held }, verdict: "held", ready: [] }
  }
  const ready: Array<A> = [item]
  let next = seqno + 1
  let held = inbox.held
  if (held.has(next)) {
    const remaining = new Map(held)
    for (let waiting = remaining.get(next); waiting !== undefined; waiting = remaining.get(next)) {
      ready.push(waiting)
      remaining.delete(next)
      next++
    }
    held = remaining
  }
  return { inbox: { next, held }, verdict: "delivered", ready }
}

/**
 * Holds the append numbered `seqno` in an inbox that has handed nothing on and whose first
 * seqno is not known yet: a turn an earlier process started, whose client numbers on from
 * where that process left off, before the turn says where the inbox starts (the transport's
 * `adoptHeld`). Bounded like `offer`: the held appends span fewer than `window` seqnos.
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
