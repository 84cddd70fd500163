/**
 * What the store keeps beside a commit: the model call or client operation the transition
 * plans, the model call it settles, the operation a tool result completes, and the ids of the
 * inputs the runner produces itself.
 */
import { messageHash, requestHash } from "../Llm.js"
import type { ToolResultMessage } from "../Llm.js"
import type { Command, ConversationState, Input, Transition } from "../Loop.js"
import type { RunnerOptions } from "./Options.js"
import type { CommitInput, LlmCallUpdate, PlannedOperation } from "../Store.js"
import type { ActorState } from "./Actor.js"

/** What the store keeps beside a commit: the planned call or operation, and the status changes it settles. */
export const commitOf = (options: RunnerOptions, conversationId: string, inputId: string, acc: ActorState, input: Input, t: Transition): CommitInput => {
  const next = t.state.committed
  const before = acc.runtime.committed
  const command = t.command
  const llmCall = command._tag === "CallLlm"
    ? {
      callId: command.callId,
      conversationId,
      turnId: next.turnId,
      model: command.model,
      request: command.request,
      messagesHash: command.messagesHash,
      requestHash: requestHash(command.model, command.request, command.messagesHash, command.request.messages.length),
      segmentStart: next.segment.start,
      detached: command.purpose === "summary"
    }
    : undefined
  const clientOperations = command._tag === "CallClient" ? [plannedOperation(options, conversationId, next, command)] : undefined
  const llmCallUpdate = llmCallUpdateOf(options, before, input, command)
  const operationCompletion = input._tag === "ToolResult" ? operationCompletionOf(before, input.message) : undefined
  return {
    conversationId,
    inputId,
    expectedVersion: acc.version,
    next,
    result: { command: command._tag, status: next.status },
    // Each new message keeps the id the client knows it by, so a forked chat can be seeded from it.
    ...(options.policy.promptIdOf !== undefined ? { messageKey: options.policy.promptIdOf } : {}),
    ...(llmCall !== undefined ? { llmCall } : {}),
    ...(clientOperations !== undefined ? { clientOperations } : {}),
    ...(llmCallUpdate !== undefined ? { llmCallUpdate } : {}),
    ...(operationCompletion !== undefined ? { operationCompletion } : {})
  }
}

const plannedOperation = (
  options: RunnerOptions,
  conversationId: string,
  state: ConversationState,
  command: Extract<Command, { _tag: "CallClient" }>
): PlannedOperation => {
  const position = state.waiting?.toolCalls.findIndex((call) => call.operationId === command.operationId) ?? 0
  const { idempotent, kind } = options.classifyTool(command.toolCall)
  return {
    operationId: command.operationId,
    conversationId,
    turnId: state.turnId,
    toolCallId: command.toolCall.id,
    toolIndex: position,
    kind,
    idempotent,
    request: command.toolCall
  }
}

/** Ids for inputs the runner produces itself (model stream outcomes): stable for a given call. */
export const derivedInputId = (state: ConversationState, input: Input): string =>
  input._tag === "LlmEvent"
    ? `${input.callId}:${input.event._tag}`
    : `${state.turnId}:${input._tag}:${state.messages.length}`

/** The status a model call reaches with this input, if it settles one. */
const llmCallUpdateOf = (options: RunnerOptions, before: ConversationState, input: Input, command: Command): LlmCallUpdate | undefined => {
  const active = before.activeCallId
  if (active === null || before.status !== "waitingLlm") return undefined
  if (input._tag === "LlmEvent" && input.callId === active) {
    if (input.event._tag === "Done") {
      const message = input.event.message
      const costUsd = before.settings === null ? undefined : options.costOf?.(before.settings.model, message)?.usd
      return {
        callId: active,
        status: "committed",
        assistantHash: messageHash(message),
        usage: message.usage,
        target: `${message.provider}/${message.model}`,
        ...(costUsd === undefined ? {} : { costUsd })
      }
    }
    if (input.event._tag === "Error") {
      // The turn's own words when it failed here (a failed summary says so), so a restarted process tells the same.
      const error = command._tag === "Failed" ? command.error : input.event.message
      return { callId: active, status: input.event.reason === "aborted" ? "canceled" : "failed", error }
    }
    return undefined
  }
  if (input._tag === "Cancel") return { callId: active, status: "canceled", error: input.reason }
  if (input._tag === "Start") return { callId: active, status: "canceled", error: "superseded by a new turn" }
  return undefined
}

/**
 * The operation a tool result completes: the open call with that id, if it was dispatched (a
 * result that arrives before its call was dispatched is held by the loop; that call is then
 * never sent, so it has no operation).
 */
const operationCompletionOf = (before: ConversationState, result: ToolResultMessage) => {
  const waiting = before.waiting
  if (waiting === null) return undefined
  const position = waiting.toolCalls.findIndex((c, i) =>
    i >= waiting.appended && c.toolCall.id === result.toolCallId && !waiting.held.some((h) => h.position === i)
  )
  return position < 0 || position >= waiting.dispatched
    ? undefined
    : { operationId: waiting.toolCalls[position]!.operationId, result }
}
