/**
 * The `LlmEvent` input: what a model call's stream brings. Deltas only move the response kept in
 * memory; the call's `Done` commits its one assistant message and runs its tool calls (or ends
 * the step), its `Error` ends the turn (an overflow compacts once and asks again). A summary
 * call's stream shows nothing; its `Done` opens the new segment [summary, verbatim tail].
 */
import { toolCallsOf } from "../Llm.js"
import type { AssistantMessage, ResponseEvent, UserMessage } from "../Llm.js"
import { Command, settlesNothing } from "./Contract.js"
import type { Policy, Settles, Transition } from "./Contract.js"
import { countedSize, summaryMessage, summaryTextOf } from "./Segments.js"
import type { CompactionRun } from "./Segments.js"
import { appendMessages, appendQueued, applyDelta, errorResult, openSegment, operationIdOf } from "./State.js"
import type { ConversationState, PendingResponse, RuntimeState, WaitingClient } from "./State.js"
import { callLlm, compact, endOfStep, finished, requestFor, settling, unchanged } from "./Steps.js"

export const CUT_OFF_RESULT =
  "Not executed: the response hit the output token limit before this tool call was complete."

type ErrorEvent = Extract<ResponseEvent, { _tag: "Error" }>

/**
 * Whether a model stream event may change the committed state: only a call's end (`Done`,
 * `Error`). Any other event moves the response kept in memory (or, late, changes nothing) and
 * its command is `ContinueLlm` or `WaitInput`, so a runner may apply it without a commit.
 */
export const endsModelCall = (event: ResponseEvent): boolean => event._tag === "Done" || event._tag === "Error"

export const onLlmEvent = (policy: Policy, state: RuntimeState, callId: string, event: ResponseEvent): Transition => {
  const committed = state.committed
  // Late, duplicate or foreign stream events: the call is not the one being read.
  if (committed.status !== "waitingLlm" || committed.activeCallId !== callId) return unchanged(state)
  if (committed.compaction !== null) return onSummaryEvent(policy, state, committed.compaction, event)
  switch (event._tag) {
    case "Start":
      // A (re)started stream discards whatever an earlier attempt streamed: never merged.
      return streaming(state, { callId, blocks: [], deltaCount: 0 }, event)
    case "TextStart":
    case "ThinkingStart":
    case "ToolCallStart":
    case "TextDelta":
    case "ThinkingDelta":
    case "ToolCallDelta":
    case "TextEnd":
    case "ThinkingEnd":
    case "ToolCallEnd":
      return streaming(state, applyDelta(state.pending ?? { callId, blocks: [], deltaCount: 0 }, event), event)
    case "Done":
      return settling(onDone(policy, committed, event.reason, event.message, event), answered(committed, event.message))
    case "Error": {
      // Too long for the model: compact once, then ask again (an overflow right after a compaction fails).
      if (event.code === "contextOverflow" && !committed.compactGuard) {
        const retry = compact(policy, { ...committed, activeCallId: null }, "overflow", "", requestFor(policy, committed))
        if (retry !== undefined) return callFailed(retry, callId, event)
      }
      return callFailed(endedByError(committed, event), callId, event)
    }
  }
}

/** Every delta passes here: nothing is allocated that need not be. */
const continueLlm = Command.ContinueLlm()

const streaming = (state: RuntimeState, pending: PendingResponse, event: ResponseEvent): Transition => ({
  state: { committed: state.committed, pending },
  emit: [event],
  command: continueLlm,
  settles: settlesNothing
})

/** The active call's answer is committed with this step. */
const answered = (committed: ConversationState, message: AssistantMessage): Settles => ({
  modelCall: { callId: committed.activeCallId!, status: "committed", model: committed.settings!.model, message }
})

/** The call ended with an error or an abort: in the turn's own words when the turn fails here, so a restarted process tells the same. */
const callFailed = (t: Transition, callId: string, event: ErrorEvent): Transition =>
  settling(t, {
    modelCall: {
      callId,
      status: event.reason === "aborted" ? "canceled" : "failed",
      error: t.command._tag === "Failed" ? t.command.error : event.message
    }
  })

const endedByError = (committed: ConversationState, event: ErrorEvent): Transition => {
  const ended: ConversationState = {
    ...appendQueued(committed),
    activeCallId: null,
    compaction: null,
    status: event.reason === "aborted" ? "canceled" : "failed"
  }
  return {
    state: { committed: ended, pending: null },
    emit: [event],
    command: event.reason === "aborted"
      ? Command.Canceled({ reason: event.message })
      : Command.Failed({ error: event.message, retryable: event.retryable }),
    settles: settlesNothing
  }
}

const onDone = (
  policy: Policy,
  committed: ConversationState,
  reason: "stop" | "length" | "toolUse",
  message: AssistantMessage,
  event: ResponseEvent
): Transition => {
  const callId = committed.activeCallId!
  const appended = appendMessages({ ...committed, activeCallId: null, compactGuard: false }, [message])
  const withAnswer = { ...appended, context: countedSize(message, appended.messages.length) }
  const toolCalls = toolCallsOf(message)
  const done = (state: ConversationState, command: Command): Transition => ({
    state: { committed: state, pending: null },
    emit: [event],
    command,
    settles: settlesNothing
  })

  if (reason === "length") {
    // Truncated tool calls are never run; each gets a result saying so, keeping the history valid.
    const cutOff = appendMessages(withAnswer, toolCalls.map((call) => errorResult(call, CUT_OFF_RESULT)))
    return endOfStep(policy, cutOff, (ended) => done(ended, Command.Final({ message, reason: "length" })), [event])
  }
  if (toolCalls.length > 0) {
    // Tool calls are run whatever stop reason the provider reported with them.
    const pendingCalls = toolCalls.map((toolCall, position) => ({
      operationId: operationIdOf(callId, position, toolCall.id),
      toolCall
    }))
    const first = pendingCalls[0]!
    const waiting: WaitingClient = { callId, toolCalls: pendingCalls, appended: 0, dispatched: 1, held: [] }
    return done(
      { ...withAnswer, status: "waitingClient", waiting },
      Command.CallClient({ operationId: first.operationId, toolCall: first.toolCall, position: 0 })
    )
  }
  return endOfStep(policy, withAnswer, (ended) => done(ended, Command.Final({ message, reason: "stop" })), [event])
}

// =============================================================================
// A summary call's stream
// =============================================================================

/** The summary call's stream: nothing of it is shown as an answer; its Done opens the new segment. */
const onSummaryEvent = (policy: Policy, state: RuntimeState, run: CompactionRun, event: ResponseEvent): Transition => {
  const committed = state.committed
  switch (event._tag) {
    case "Done": {
      const summary = summaryTextOf(event.message)
      const t = summary === ""
        ? summaryFailed(policy, committed, run, "the model answered without a summary", false)
        : compacted(policy, committed, run, summary)
      return settling(t, answered(committed, event.message))
    }
    case "Error": {
      const t = event.reason === "aborted" ? endedByError(committed, event) : summaryFailed(policy, committed, run, event.message, event.retryable)
      return callFailed(t, run.callId, event)
    }
    default:
      return { state: { committed, pending: null }, emit: [], command: continueLlm, settles: settlesNothing }
  }
}

const compacted = (policy: Policy, committed: ConversationState, run: CompactionRun, summary: string): Transition => {
  const tail = committed.messages.slice(run.cut)
  const opened = openSegment(
    committed,
    { kind: "compaction", turnId: committed.turnId, summaryCallId: run.callId, replaced: run.cut, kept: tail.length },
    // The request the turn is working on stays word for word when the cut passes it.
    [summaryMessage(summary, run.trigger !== "manual" && run.cut > committed.turnStart ? requestOf(committed) : undefined), ...tail]
  )
  const next: ConversationState = {
    ...opened,
    // The turn's own messages that were kept begin after the summary (a user's summarize turn has none).
    turnStart: run.trigger === "manual" ? opened.messages.length : 1 + Math.max(0, committed.turnStart - run.cut),
    activeCallId: null,
    compaction: null,
    compactGuard: true,
    summaries: committed.summaries + 1
  }
  if (run.trigger === "manual") return endOfStep(policy, next, (ended) => finished(ended, Command.Final({ message: null, reason: "stop" })))
  return callLlm(policy, next, false)
}

/** The text of the user message that opened the current turn (after any context supplement). */
const requestOf = (committed: ConversationState): string | undefined => {
  let typed: UserMessage | undefined
  for (let index = committed.turnStart; index < committed.messages.length; index++) {
    const message = committed.messages[index]!
    if (message.role !== "user") break
    typed = message
  }
  const text = typed?.content.flatMap((block) => (block.type === "text" ? [block.text] : [])).join("")
  return text === undefined || text === "" ? undefined : text
}

/** The summary failed: the history stays as it was; an automatic compaction goes on without it. */
const summaryFailed = (policy: Policy, committed: ConversationState, run: CompactionRun, why: string, retryable: boolean): Transition => {
  const base: ConversationState = { ...committed, activeCallId: null, compaction: null, compactGuard: true }
  if (run.trigger === "auto") return callLlm(policy, base, false)
  const error = run.trigger === "manual"
    ? `The conversation could not be summarized: ${why}`
    : `The conversation is longer than the model's context window, and summarizing it failed: ${why}`
  return finished({ ...appendQueued(base), status: "failed" }, Command.Failed({ error, retryable }))
}
