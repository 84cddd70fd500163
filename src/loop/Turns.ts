/**
 * The inputs that begin or end a turn: `Start` (a user's message), `Summarize` (a turn that only
 * compacts), `UserMessage` (queued while a turn runs, else the next turn) and `Cancel`. A new
 * turn supersedes a running one (the text its model call had streamed is kept as its partial
 * answer, and the call is settled canceled, so the runner stops its stream before the next
 * opens); a client that holds less of the history rewinds it, and a forked chat's first turn is
 * seeded with the history it names.
 */
import type { UserContent, UserMessage } from "../Llm.js"
import { Command, settlesNothing } from "./Contract.js"
import type { Policy, Settles, Transition } from "./Contract.js"
import type { ClientHistory, ImportedHistory } from "./Segments.js"
import { appendMessages, closeTurn, isBusy, openSegment, partialAnswerOf, turnIdOf } from "./State.js"
import type { ConversationState, RuntimeState, TurnSettings } from "./State.js"
import { callLlm, compact, endOfStep, finished, requestFor, settling, unchanged } from "./Steps.js"

export const CANCELED_RESULT = "Not executed: the user canceled the turn."
export const SUPERSEDED_RESULT = "Not executed: the user started a new turn."
/** Why a superseded turn ended (its model call's recorded error, and the end its client's stream gets). */
export const SUPERSEDED_REASON = "Superseded: a new message was sent in this conversation, so this turn stopped."
const SUPERSEDED_CALL = SUPERSEDED_REASON

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
 * A new turn's state: a running turn is superseded (what its model call had streamed kept as
 * its partial answer, then its open tool calls closed with a result, then its queued
 * messages), and a client that holds less of the history than the last turn left rewinds it.
 */
const beginTurn = (
  policy: Policy,
  state: RuntimeState,
  settings: TurnSettings,
  clientHistory: ClientHistory | undefined
): ConversationState => {
  const closed = isBusy(state.committed) ? closeTurn(withPartialAnswer(state), SUPERSEDED_RESULT) : state.committed
  const turnSeq = closed.turnSeq + 1
  // A new turn may compact again (a guard left by a failed turn would otherwise fail every later turn).
  const next = { ...closed, turnSeq, turnId: turnIdOf(closed.conversationId, turnSeq), settings, llmCallSeq: 0, compactGuard: false }
  const turn = closed.turnSeq === 0 ? seedFrom(policy, next, clientHistory) : rewindAtJournalEnd(policy, state.committed, next, clientHistory)
  return { ...turn, turnStart: turn.messages.length }
}

/** The committed state with the superseded call's partial answer appended, when it streamed any text. */
const withPartialAnswer = (state: RuntimeState): ConversationState => {
  const partial = partialAnswerOf(state)
  return partial === undefined ? state.committed : appendMessages(state.committed, [partial])
}

/**
 * `rewindTo`, its segment opened where the stored journal ends: what closing a superseded turn
 * appended (partial answer, closing results, queued messages) lies past the prefix the client
 * keeps, so a rewind opens from the history as it was before them, never past unstored messages.
 */
const rewindAtJournalEnd = (
  policy: Policy,
  before: ConversationState,
  next: ConversationState,
  history: ClientHistory | undefined
): ConversationState => {
  const turn = rewindTo(policy, next, history)
  if (turn.segment === next.segment || next.messages.length === before.messages.length) return turn
  return rewindTo(policy, { ...next, messages: before.messages, messagesHash: before.messagesHash }, history)
}

/**
 * A conversation's first turn that names a history (a forked chat): seeded with the stored
 * messages the runner found under exactly those ids, as a `fork` segment the client holds. A
 * history only the client held, read back from it (`imported`), opens an `import` segment of
 * those messages instead, its system prompt the conversation's from then on.
 */
const seedFrom = (policy: Policy, state: ConversationState, history: ClientHistory | undefined): ConversationState => {
  const imported = history?.imported
  if (imported !== undefined) return importFrom(state, imported)
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

/** The `import` segment of a history read back from the client; nothing to import (a new chat) changes nothing. */
const importFrom = (state: ConversationState, imported: ImportedHistory): ConversationState => {
  if (state.messages.length > 0 || (imported.messages.length === 0 && imported.systemPrompt === undefined)) return state
  const opened = openSegment(state, { kind: "import", turnId: state.turnId, replaced: 0, kept: imported.messages.length }, imported.messages)
  return {
    ...opened,
    checkpointed: opened.messages.length,
    ...(imported.systemPrompt !== undefined ? { clientSystemPrompt: imported.systemPrompt } : {})
  }
}

/**
 * The client names a strict prefix of what the last final turn left (the user edited an
 * earlier message or restored a checkpoint): a new segment holds exactly that prefix. Anything
 * else (the same history, a longer or foreign one, or none named: no checkpoint at all) changes
 * nothing: the stored history continues.
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
