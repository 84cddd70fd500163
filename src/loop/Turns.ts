/**
 * The inputs that begin or end a turn: `Start` (a user's message), `Summarize` (a turn that only
 * compacts), `UserMessage` (queued while a turn runs, else the next turn) and `Cancel`. A new
 * turn supersedes a running one; a client that holds less of the history rewinds it, and a
 * forked chat's first turn is seeded with the history it names.
 */
import type { UserContent, UserMessage } from "../Llm.js"
import { Command, settlesNothing } from "./Contract.js"
import type { Policy, Settles, Transition } from "./Contract.js"
import type { ClientHistory } from "./Segments.js"
import { appendMessages, closeTurn, isBusy, openSegment, turnIdOf } from "./State.js"
import type { ConversationState, RuntimeState, TurnSettings } from "./State.js"
import { callLlm, compact, endOfStep, finished, requestFor, settling, unchanged } from "./Steps.js"

export const CANCELED_RESULT = "Not executed: the user canceled the turn."
export const SUPERSEDED_RESULT = "Not executed: the user started a new turn."
/** Why a superseded turn's model call ended. */
const SUPERSEDED_CALL = "superseded by a new turn"

export const onStart = (
  policy: Policy,
  state: RuntimeState,
  message: UserMessage,
  context: ReadonlyArray<UserContent>,
  settings: TurnSettings,
  clientHistory: ClientHistory | undefined
): Transition => {
  const supplements: Array<UserMessage> = context.length > 0 ? [{ role: "user", content: context }] : []
  const turn = beginTurn(policy, state, settings, clientHistory)
  return settling(callLlm(policy, appendMessages(turn, [...supplements, message])), callCanceled(state.committed, SUPERSEDED_CALL))
}

/** A turn that only compacts: nothing to summarize ends it at once, the history as it was. */
export const onSummarize = (
  policy: Policy,
  state: RuntimeState,
  instructions: string,
  settings: TurnSettings,
  clientHistory: ClientHistory | undefined
): Transition => {
  const turn = beginTurn(policy, state, settings, clientHistory)
  const t = compact(policy, turn, "manual", instructions, requestFor(policy, turn)) ??
    endOfStep(policy, turn, (ended) => finished(ended, Command.Final({ message: null, reason: "stop" })))
  return settling(t, callCanceled(state.committed, SUPERSEDED_CALL))
}

export const onUserMessage = (policy: Policy, state: RuntimeState, message: UserMessage): Transition => {
  const committed = state.committed
  if (isBusy(committed)) {
    return {
      state: { ...state, committed: { ...committed, queued: [...committed.queued, message] } },
      emit: [],
      command: Command.WaitInput(),
      settles: settlesNothing
    }
  }
  // Between turns a user message starts the next turn with the previous turn's settings.
  if (committed.settings === null) return unchanged(state)
  return onStart(policy, state, message, [], committed.settings, undefined)
}

export const onCancel = (state: RuntimeState, reason: string): Transition => {
  if (!isBusy(state.committed)) return unchanged(state)
  return {
    state: { committed: { ...closeTurn(state.committed, CANCELED_RESULT), status: "canceled" }, pending: null },
    emit: [],
    command: Command.Canceled({ reason }),
    settles: callCanceled(state.committed, reason)
  }
}

/** The model call a turn that ends here was streaming, if any: canceled, and why. */
const callCanceled = (committed: ConversationState, why: string): Settles =>
  committed.status === "waitingLlm" && committed.activeCallId !== null
    ? { modelCall: { callId: committed.activeCallId, status: "canceled", error: why } }
    : settlesNothing

/**
 * A new turn's state: a running turn is superseded (its open tool calls closed with a result
 * first), and a client that holds less of the history than the last turn left rewinds it.
 */
const beginTurn = (
  policy: Policy,
  state: RuntimeState,
  settings: TurnSettings,
  clientHistory: ClientHistory | undefined
): ConversationState => {
  const closed = isBusy(state.committed) ? closeTurn(state.committed, SUPERSEDED_RESULT) : state.committed
  const turnSeq = closed.turnSeq + 1
  // A new turn may compact again (a guard left by a failed turn would otherwise fail every later turn).
  const next = { ...closed, turnSeq, turnId: turnIdOf(closed.conversationId, turnSeq), settings, llmCallSeq: 0, compactGuard: false }
  const turn = closed.turnSeq === 0 ? seedFrom(policy, next, clientHistory) : rewindTo(policy, next, clientHistory)
  return { ...turn, turnStart: turn.messages.length }
}

/**
 * A conversation's first turn that names a history (a forked chat): seeded with the stored
 * messages the runner found under exactly those ids, as a `fork` segment the client holds.
 */
const seedFrom = (policy: Policy, state: ConversationState, history: ClientHistory | undefined): ConversationState => {
  const seed = history?.seed
  const promptIdOf = policy.promptIdOf
  if (seed === undefined || promptIdOf === undefined || state.messages.length > 0) return state
  if (seed.messages.length !== history!.promptIds.length || seed.messages.some((message, index) => promptIdOf(message) !== history!.promptIds[index])) {
    return state
  }
  const forked = openSegment(
    state,
    { kind: "fork", turnId: state.turnId, source: seed.conversationId, replaced: 0, kept: seed.messages.length },
    seed.messages
  )
  return { ...forked, checkpointed: forked.messages.length }
}

/**
 * The client names a strict prefix of what the last final turn left (the user edited an
 * earlier message or restored a checkpoint): a new segment holds exactly that prefix. Anything
 * else (the same history, a longer or foreign one) changes nothing.
 */
const rewindTo = (policy: Policy, state: ConversationState, history: ClientHistory | undefined): ConversationState => {
  const promptIdOf = policy.promptIdOf
  if (history === undefined || promptIdOf === undefined) return state
  const kept = history.promptIds.length
  if (kept >= state.checkpointed || kept > state.messages.length) return state
  for (let index = 0; index < kept; index++) {
    if (promptIdOf(state.messages[index]!) !== history.promptIds[index]) return state
  }
  return openSegment(
    state,
    { kind: "rewind", turnId: state.turnId, replaced: state.messages.length - kept, kept },
    state.messages.slice(0, kept)
  )
}
