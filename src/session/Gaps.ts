/**
 * PASSING OVER GAPS AFTER A RESTART. A recovered turn's inbox continues a numbering an earlier
 * process began. The client re-sends only what that process did not acknowledge, so some seqnos
 * among the re-sent ones never come back. While appends are held behind a missing seqno `g`:
 *
 * 1. `g`'s input id is committed: `g` was applied and will not come back. Passed over at once.
 * 2. Otherwise: passed over once the lowest held append has waited the grace, so a re-send that
 *    arrives within it still lands in order.
 *
 * A seqno passed over, or below where the inbox started, that arrives later is handed on when it
 * arrives, out of order, once (the runner skips its input if committed); a run request is not.
 * An inbox that is not recovered never passes over a gap.
 */
import { handOnAll, watchGaps } from "./Appends.js"
import { adopt, skipGap } from "./Inbox.js"
import { isReplay, type SessionState, type Taken } from "./State.js"
import { SessionCommand, type Step } from "./Types.js"

/** Looks at the gap: passed over (`GapWait` 0: look again at once), waited for (`GapWait` ms), or nothing held behind one (no `GapWait`). */
export const passGap = (state: SessionState, committed: boolean, atMs: number, graceMs: number): Step => {
  const inbox = state.inbox
  if (inbox.recovered === undefined || inbox.held.size === 0 || isReplay(state)) {
    return { state: { ...state, recovery: { ...state.recovery, passingGaps: false } }, commands: [] }
  }
  const gap = inbox.next
  let blocked: Taken | undefined
  for (const [seqno, item] of inbox.held) if (blocked === undefined || seqno < blocked.seqno) blocked = item
  const waited = atMs - blocked!.arrivedAtMs
  if (!committed && waited < graceMs) return { state, commands: [SessionCommand.GapWait({ ms: graceMs - waited })] }
  const commands: Array<SessionCommand> = [SessionCommand.Log({
    level: "info",
    message: `transport: append ${gap} of ${state.requestId} passed over (${committed ? "its input is committed" : `not received within ${graceMs} ms`}), a turn recovered after a restart`
  })]
  const next = handOnAll(state, skipGap(inbox), commands)
  commands.push(SessionCommand.GapWait({ ms: 0 }))
  return { state: next, commands }
}

/**
 * A recovered turn whose client re-sent appends before the runner spoke: they were held waiting
 * for seqno 0, which this process will never see. The inbox now starts at the lowest of them;
 * the ones in order are handed on, and gaps after them are passed over.
 */
export const adoptHeld = (state: SessionState, window: number): Step => {
  const inbox = state.inbox
  if (state.run !== undefined || inbox.next !== 0 || inbox.recovered !== undefined || inbox.held.size === 0) return { state, commands: [] }
  const commands: Array<SessionCommand> = []
  const next = handOnAll(state, adopt(inbox, Math.min(...inbox.held.keys()), window), commands)
  return { state: watchGaps(next, commands), commands }
}
