/**
 * Where a compaction stands after a transition, from the states before and after it and its
 * command: `transition` attaches it to what the input settles (`Settles.compaction`), so the
 * runner only tells the client side, which shows "summarizing" and records the summary.
 */
import { CompactionProgress } from "./Contract.js"
import type { Input, Transition } from "./Contract.js"
import { summaryOfMessage } from "./Segments.js"
import type { ConversationState } from "./State.js"

export const compactionOf = (before: ConversationState, input: Input, t: Transition): CompactionProgress | undefined => {
  const after = t.state.committed
  const run = before.compaction
  if (run !== null && input._tag === "LlmEvent" && input.callId === run.callId && (input.event._tag === "Done" || input.event._tag === "Error")) {
    if (after.segment !== before.segment && after.segment.kind === "compaction") {
      const summaryMessage = after.messages[0]!
      return CompactionProgress.Completed({
        trigger: run.trigger,
        summary: summaryOfMessage(summaryMessage) ?? "",
        summarized: before.messages.slice(0, run.cut),
        kept: after.segment.kept,
        summaryMessage
      })
    }
    // An abort is a cancel of the turn, not a failed summary.
    if (input.event._tag === "Error" && input.event.reason === "aborted") return undefined
    return CompactionProgress.Failed({
      trigger: run.trigger,
      error: input.event._tag === "Error" ? input.event.message : "the model answered without a summary"
    })
  }
  if (t.command._tag === "CallLlm" && t.command.purpose === "summary" && after.compaction !== null) {
    return CompactionProgress.Started({ trigger: after.compaction.trigger })
  }
  if (input._tag === "Summarize" && t.command._tag === "Final" && after.turnId !== before.turnId) return CompactionProgress.Skipped()
  return undefined
}
