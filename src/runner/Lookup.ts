/**
 * Where a turn stands, from the committed state: the turn an input started (`findStartedTurn`,
 * for a client that asks after a restart), the conversation's current turn, and whether an
 * input is committed.
 */
import { Effect, Option } from "effect"
import type { Message } from "../Llm.js"
import { callIdOf, isBusy } from "../Loop.js"
import type { ConversationState } from "../Loop.js"
import { turnRefOf } from "./Actor.js"
import type { RunnerEnv } from "./Actor.js"
import { StartedTurn } from "./ClientGateway.js"
import { endedOutcome, turnUsageOf } from "./Outcomes.js"

/** Where the conversation's committed current turn stands; `startInputId` names what started it. */
const standing = ({ store }: RunnerEnv, state: ConversationState, startInputId: string) =>
  Effect.gen(function*() {
    const turn = turnRefOf(state)
    if (isBusy(state)) return Option.some(StartedTurn.Running({ turn, startInputId }))
    const lastCall = state.llmCallSeq > 0
      ? yield* store.loadLlmCall(callIdOf(state.turnId, state.llmCallSeq - 1)).pipe(
        Effect.catchAll((error) =>
          Effect.logWarning(`runner: the last model call of ${state.turnId} could not be read`, error).pipe(Effect.as(Option.none()))
        )
      )
      : Option.none()
    const outcome = endedOutcome(state, Option.getOrUndefined(lastCall))
    if (outcome === undefined) return Option.none<StartedTurn>()
    return Option.some(StartedTurn.Ended({ turn, startInputId, outcome, state, usage: turnUsageOf(state) }))
  })

export const findStartedTurn = (env: RunnerEnv) => (inputIdPrefix: string, accept: (inputId: string) => boolean) =>
  Effect.gen(function*() {
    const { load, store } = env
    const starts = yield* store.findTurnStarts(inputIdPrefix)
    const start = starts.find((candidate) => accept(candidate.inputId))
    if (start === undefined) return Option.none<StartedTurn>()
    const state = (yield* load(start.conversationId)).runtime.committed
    const startInputId = start.inputId
    if (state.turnId !== start.turnId) {
      return Option.some(StartedTurn.Past({ conversationId: start.conversationId, turnId: start.turnId, startInputId }))
    }
    return yield* standing(env, state, startInputId)
  }).pipe(
    Effect.catchAll((error) =>
      Effect.logWarning(`runner: the turn started by ${inputIdPrefix}... could not be looked up`, error).pipe(
        Effect.as(Option.none<StartedTurn>())
      )
    )
  )

export const currentTurn = (env: RunnerEnv) => (conversationId: string) =>
  Effect.gen(function*() {
    const { load } = env
    const state = (yield* load(conversationId)).runtime.committed
    if (state.turnSeq === 0 || state.settings === null) return Option.none<StartedTurn>()
    return yield* standing(env, state, "")
  }).pipe(
    Effect.catchAll((error) =>
      Effect.logWarning(`runner: the current turn of ${conversationId} could not be looked up`, error).pipe(
        Effect.as(Option.none<StartedTurn>())
      )
    )
  )

/**
 * The model-visible history of a conversation (its current segment), for a past chat the user
 * attaches to a message in another; empty for a conversation this server does not know (a
 * store failure is logged and answers empty too).
 */
export const historyOf = (env: RunnerEnv) => (conversationId: string) =>
  env.load(conversationId).pipe(
    Effect.map((loaded) => loaded.runtime.committed.messages),
    Effect.catchAll((error) =>
      Effect.logWarning(`runner: the history of ${conversationId} could not be read`, error).pipe(Effect.as([] as ReadonlyArray<Message>))
    )
  )

/**
 * Whether this server can continue a conversation from the history a client's checkpoint names
 * (`promptIds`): the conversation has turns of its own here (its history continues or rewinds),
 * or its first turn names stored messages (a fork). False: only the client holds that history,
 * to be read back from it (a store failure is logged and answers false too: the client has it).
 */
export const holdsHistory = (env: RunnerEnv) => (conversationId: string, promptIds: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    if (promptIds.length === 0) return true
    const state = (yield* env.load(conversationId)).runtime.committed
    if (state.turnSeq > 0 || state.messages.length > 0) return true
    return Option.isSome(yield* env.store.findHistory(promptIds))
  }).pipe(
    Effect.catchAll((error) =>
      Effect.logWarning(`runner: could not tell whether the history ${conversationId} names is stored`, error).pipe(Effect.as(false))
    )
  )

export const isCommitted = ({ store }: RunnerEnv) => (conversationId: string, inputId: string) =>
  store.findInputCommit(conversationId, inputId).pipe(
    Effect.map(Option.isSome),
    Effect.catchAll((error) =>
      Effect.logWarning(`runner: could not tell whether ${inputId} is committed`, error).pipe(Effect.as(false))
    )
  )
