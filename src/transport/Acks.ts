/**
 * ACKNOWLEDGING AN APPEND. The client re-sends only the appends it holds no acknowledgement
 * for, so an acknowledgement promises that what the append carried survives a crash. A
 * BidiAppend is answered 200 only once it is settled:
 *
 * - it was handed on in seqno order: an append held behind a gap waits until the gap fills
 *   (or, in a recovered turn, is passed over: `Recovery.passGap`); and
 * - the input it carried, if any (a run request, a follow-up, a cancel, the exec answer that
 *   completes a tool call), was applied: committed, found committed already, or found to
 *   change nothing.
 *
 * Handed-on appends without an input (heartbeats, KV answers, stream chunks) settle at once.
 * The wait is bounded by `appendAckTimeoutMs`: past it the append is answered `unavailable`,
 * a retryable error, never a success the server cannot stand behind; it stays where it was
 * (held, or queued for its commit) and the client sends it again. A re-sent append is a
 * duplicate (below `next`, or held already): while the first copy is unsettled it waits for
 * that same settlement (bounded alike); once it is settled, it is acknowledged at once (its
 * input is committed and the runner will not apply it twice). Acknowledged without being
 * applied: the appends of a turn that is over and will never take them (its end replayed,
 * its request id reused for a new turn: `dropHeld`, and the rules of `Recovery.replayEnd`).
 */
import { Effect } from "effect"
import { ConnectError } from "./Connect.js"
import type { Session, SessionEnv } from "./Session.js"
import { awaitSettlementFor, Settlement, settleAfter } from "./Settlement.js"

/**
 * An append was handed on: its acknowledgement (and any duplicate's) now waits only for the
 * commits of the inputs it carried, `durable` (none for heartbeats, KV answers, stream chunks),
 * settled by whoever commits them (`Settlement.ts`): no fiber waits for them.
 */
export const settle = (session: Session, seqno: number, durable: ReadonlyArray<Settlement>): void => {
  const waiting = session.unsettled.get(seqno)
  if (durable.every((wait) => wait.isSettled)) {
    if (waiting === undefined) return
    session.unsettled.delete(seqno)
    return waiting.settle()
  }
  const settled = waiting ?? new Settlement()
  session.unsettled.set(seqno, settled)
  settled.onSettled(() => {
    if (session.unsettled.get(seqno) === settled) session.unsettled.delete(seqno)
  })
  settleAfter(settled, durable)
}

/**
 * The held appends of a turn that is over (its end replayed, or its request id reused for a
 * new turn): never to be handed on, they are acknowledged, as every later append of that turn.
 */
export const dropHeld = (session: Session) =>
  Effect.sync(() => {
    for (const seqno of [...session.inbox.held.keys()]) {
      const waiting = session.unsettled.get(seqno)
      if (waiting === undefined) continue
      session.unsettled.delete(seqno)
      waiting.settle()
    }
  })

/** Waits for an append's settlement, at most `appendAckTimeoutMs`; then `unavailable`, so the client sends it again. */
export const awaitSettled = (env: SessionEnv, session: Session, seqno: number, settled: Settlement) =>
  awaitSettlementFor(settled, env.options.appendAckTimeoutMs, () =>
    new ConnectError(
      "unavailable",
      session.inbox.held.has(seqno)
        ? `append_seqno ${seqno} of request ${session.requestId} waits for the appends before it (next expected ${session.inbox.next}); not applied yet, send it again`
        : `append_seqno ${seqno} of request ${session.requestId} is not committed yet; send it again`
    ))
