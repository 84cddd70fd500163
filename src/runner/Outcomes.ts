/**
 * A turn's end from what is committed: the usage its answers sum to, and how it ended (for a
 * turn that ended in an earlier process, or whose end has to be sent again).
 */
import { addUsage, emptyUsage } from "../Llm.js"
import type { AssistantMessage, Usage } from "../Llm.js"
import { Command } from "../Loop.js"
import type { ConversationState } from "../Loop.js"
import type { LlmCallRecord } from "../Store.js"
import type { TurnOutcome } from "./ClientGateway.js"

/**
 * Usage summed over the answers committed in the state's current turn: what `finish` is given
 * for it, whichever process made its model calls (every committed answer records its usage, and
 * only the answer in a call's Done is committed). Computed once, when the turn ends.
 */
export const turnUsageOf = (state: ConversationState): Usage => {
  let sum = emptyUsage
  for (let index = state.turnStart; index < state.messages.length; index++) {
    const message = state.messages[index]!
    if (message.role === "assistant") sum = addUsage(sum, message.usage)
  }
  return sum
}

/**
 * How the state's current turn ended, when it is over, from what is committed: the status says
 * final, failed or canceled. A final turn's answer is its last assistant message, cut off
 * (`length`) when that message stopped at the output limit (none for a turn that only summarized). A failure's error and a cancel's
 * reason are what the turn's last model call recorded when it ended the turn (a provider error,
 * a cancel or abort while it streamed); a turn that failed or was canceled otherwise (the
 * per-turn call limit, a cancel while a tool ran) recorded no text, and gets a plain one.
 * `retryable` is not recorded: false (the client is never told to retry a provider call).
 */
export const endedOutcome = (state: ConversationState, lastCall: LlmCallRecord | undefined): TurnOutcome | undefined => {
  const recorded = (status: LlmCallRecord["status"]) =>
    lastCall !== undefined && lastCall.status === status && lastCall.error !== null && lastCall.error !== "" ? lastCall.error : undefined
  switch (state.status) {
    case "final": {
      let answer: AssistantMessage | undefined
      for (const message of state.messages.slice(state.turnStart)) if (message.role === "assistant") answer = message
      // A turn that only summarized has no answer.
      if (answer === undefined) return Command.Final({ message: null, reason: "stop" })
      return Command.Final({ message: answer, reason: answer.stopReason === "length" ? "length" : "stop" })
    }
    case "failed":
      return Command.Failed({ error: recorded("failed") ?? UNRECORDED_FAILURE, retryable: false })
    case "canceled":
      return Command.Canceled({ reason: recorded("canceled") ?? "" })
    case "ready":
    case "waitingLlm":
    case "waitingClient":
      return undefined
  }
}

/** The error of a failed turn whose failure left no text in the store. */
export const UNRECORDED_FAILURE = "The turn failed; the server restarted before it could report why."
