/**
 * What the store keeps beside a commit, translated from the transition: the model call or
 * client operation its command plans, and what it settles (the model call it ends, the operation
 * a tool result completes), as the loop decided them; and the ids of the inputs the runner
 * produces itself.
 */
import { messageHash, requestHash } from "../Llm.js"
import type { CallSettlement, Command, ConversationState, Input, Transition } from "../Loop.js"
import type { RunnerOptions } from "./Options.js"
import type { CommitInput, LlmCallUpdate, PlannedLlmCall, PlannedOperation } from "../Store.js"

/** The store's commit of a transition made from the state at `expectedVersion`. */
export const commitOf = (
  options: RunnerOptions,
  conversationId: string,
  inputId: string,
  expectedVersion: number,
  t: Transition
): CommitInput => {
  const next = t.state.committed
  const { command, settles } = t
  return {
    conversationId,
    inputId,
    expectedVersion,
    next,
    result: { command: command._tag, status: next.status },
    // Each new message keeps the id the client knows it by, so a forked chat can be seeded from it.
    ...(options.policy.promptIdOf !== undefined ? { messageKey: options.policy.promptIdOf } : {}),
    ...(command._tag === "CallLlm" ? { llmCall: plannedCall(conversationId, next, command) } : {}),
    ...(command._tag === "CallClient" ? { clientOperations: [plannedOperation(options, conversationId, next, command)] } : {}),
    ...(settles.modelCall !== undefined ? { llmCallUpdate: llmCallUpdateOf(options, settles.modelCall) } : {}),
    ...(settles.operation !== undefined ? { operationCompletion: settles.operation } : {})
  }
}

const plannedCall = (
  conversationId: string,
  state: ConversationState,
  command: Extract<Command, { _tag: "CallLlm" }>
): PlannedLlmCall => ({
  callId: command.callId,
  conversationId,
  turnId: state.turnId,
  model: command.model,
  request: command.request,
  messagesHash: command.messagesHash,
  requestHash: requestHash(command.model, command.request, command.messagesHash, command.request.messages.length),
  segmentStart: state.segment.start,
  detached: command.purpose === "summary"
})

const plannedOperation = (
  options: RunnerOptions,
  conversationId: string,
  state: ConversationState,
  command: Extract<Command, { _tag: "CallClient" }>
): PlannedOperation => {
  const { idempotent, kind } = options.classifyTool(command.toolCall)
  return {
    operationId: command.operationId,
    conversationId,
    turnId: state.turnId,
    toolCallId: command.toolCall.id,
    toolIndex: command.position,
    kind,
    idempotent,
    request: command.toolCall
  }
}

/** The model call's row as the loop settled it: a committed answer with its hash, usage, target and price, or why it ended. */
const llmCallUpdateOf = (options: RunnerOptions, settled: CallSettlement): LlmCallUpdate => {
  if (settled.status !== "committed") return { callId: settled.callId, status: settled.status, error: settled.error }
  const message = settled.message
  const costUsd = options.costOf?.(settled.model, message)?.usd
  return {
    callId: settled.callId,
    status: "committed",
    assistantHash: messageHash(message),
    usage: message.usage,
    target: `${message.provider}/${message.model}`,
    ...(costUsd === undefined ? {} : { costUsd })
  }
}

/** Ids for inputs the runner produces itself (model stream outcomes): stable for a given call. */
export const derivedInputId = (state: ConversationState, input: Input): string =>
  input._tag === "LlmEvent"
    ? `${input.callId}:${input.event._tag}`
    : `${state.turnId}:${input._tag}:${state.messages.length}`
