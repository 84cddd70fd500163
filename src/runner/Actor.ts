/**
 * A conversation's actor, as the runner's parts see it: the envelopes its mailbox takes, the
 * state it folds, and `RunnerEnv`, what every part of the runner is given.
 */
import { Data, Effect } from "effect"
import type { Context, Deferred, FiberMap, Mailbox } from "effect"
import { URGENT } from "../internal/Scheduler.js"
import type { Llm, ResponseEvent } from "../Llm.js"
import type { ConversationState, Input, makeTransition, RuntimeState } from "../Loop.js"
import type { RunnerOptions } from "./Options.js"
import type { CorruptRow, StoreError, StoreService } from "../Store.js"
import type { ClientGateway, TurnRef } from "./ClientGateway.js"
import type { TurnClock } from "./TurnLog.js"

export type RecoveryOutcome = "reissued" | "resent" | "interrupted" | "none"

export type Envelope = Data.TaggedEnum<{
  /** `applied` is called once the input has been applied (committed, found committed, or ignored) or has failed. */
  Apply: { readonly input: Input; readonly inputId: string | null; readonly applied?: () => void }
  /** The events of one model call that arrived together. */
  Stream: { readonly callId: string; readonly events: ReadonlyArray<ResponseEvent> }
  /** Restart recovery: resume what the committed state says is in flight, then report what was done. */
  Resume: { readonly reply: Deferred.Deferred<RecoveryOutcome> }
}>
export const Envelope = Data.taggedEnum<Envelope>()

export interface Actor {
  readonly conversationId: string
  readonly mailbox: Mailbox.Mailbox<Envelope>
  readonly done: Effect.Effect<void>
  /** The state the actor folds: set once its committed state is loaded, then after every envelope. */
  state: ActorState | undefined
  /**
   * Envelopes offered and not yet processed. While none are, a model stream's pure events may
   * be applied to `state` in the stream's own fiber (`RunnerEnv.inline`), in arrival order.
   */
  pending: number
}

/**
 * The scheduling priority an envelope is processed at (`internal/Scheduler.ts`). A client's
 * input to a running turn (a tool's result, a follow-up, a cancel) is committed ahead of other
 * work: the client's acknowledgement, or the stop the user pressed, waits for that commit. A
 * new turn, a model stream's events and recovery are the bulk of the work and wait their turn.
 */
export const priorityOf = (envelope: Envelope): number =>
  envelope._tag === "Apply" && envelope.input._tag !== "Start" && envelope.input._tag !== "Summarize" ? URGENT : 0

/** `offer` as an effect (the actor's own follow-up inputs). */
export const offerEffect = (actor: Actor, envelope: Envelope): Effect.Effect<boolean> => Effect.sync(() => offer(actor, envelope))

/** Offers an envelope to the actor's mailbox; false when the actor is ending (it took no more). */
export const offer = (actor: Actor, envelope: Envelope): boolean => {
  if (!actor.mailbox.unsafeOffer(envelope)) return false
  actor.pending++
  return true
}

export interface ActorState {
  readonly runtime: RuntimeState
  readonly version: number
}

export const turnRefOf = (state: ConversationState): TurnRef => ({
  conversationId: state.conversationId,
  turnId: state.turnId,
  settings: state.settings ?? { model: "" }
})

/**
 * What the parts of the runner (`runner/*`) are given, built once by `Runner.make`: the
 * options, the services, the transition, the model streams, the committed-state cache, and
 * `deliver` to the conversation's actor.
 */
export interface RunnerEnv {
  readonly options: RunnerOptions
  readonly store: StoreService
  readonly llm: Context.Tag.Service<Llm>
  readonly gateway: Context.Tag.Service<ClientGateway>
  readonly transition: ReturnType<typeof makeTransition>
  /** The running model stream of each conversation. */
  readonly llmStreams: FiberMap.FiberMap<string>
  /** When this process saw each running turn start and stream its first delta (for the turn's log line). */
  readonly turnClock: TurnClock
  /** The conversation's committed state and version: cached, or loaded from the store (always when `fresh`). */
  readonly load: (conversationId: string, fresh?: boolean) => Effect.Effect<ActorState, CorruptRow | StoreError>
  /** Caches a committed state. */
  readonly remember: (state: ConversationState, version: number) => void
  /** Hands an envelope to the conversation's actor, starting one if none runs. */
  readonly deliver: (conversationId: string, envelope: Envelope) => Effect.Effect<void>
  /** Whether `actor` is the conversation's live actor. */
  readonly isLive: (actor: Actor) => boolean
}
