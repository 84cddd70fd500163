/** An append's acknowledgement, awaited by its wire (the rules are the machine's: `session/Owed.ts`). */
import { ConnectError } from "./Connect.js"
import type { Session, SessionEnv } from "./Session.js"
import { awaitSettlementFor } from "./Settlement.js"
import type { Settlement } from "./Settlement.js"

/**
 * Waits for an append's acknowledgement, at most `appendAckTimeoutMs`; then `unavailable`, a
 * retryable error, never a success the server cannot stand behind: the append stays where it
 * was (held, or queued for its commit) and the client sends it again.
 */
export const awaitSettled = (env: SessionEnv, session: Session, seqno: number, settled: Settlement) =>
  awaitSettlementFor(settled, env.options.appendAckTimeoutMs, () => {
    const inbox = session.state.inbox
    return new ConnectError(
      "unavailable",
      inbox.held.has(seqno)
        ? `append_seqno ${seqno} of request ${session.requestId} waits for the appends before it (next expected ${inbox.next}); not applied yet, send it again`
        : `append_seqno ${seqno} of request ${session.requestId} is not committed yet; send it again`
    )
  })
