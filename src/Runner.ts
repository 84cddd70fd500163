/**
 * The runner drives the pure loop: it feeds each conversation's inputs through `transition`
 * one at a time, commits every state change before acting on it, publishes the emitted events,
 * and performs the commands (stream a model call, run a tool call on the client, end the turn).
 *
 * Each conversation has an actor: a Mailbox of inputs consumed by one Stream pipeline, which
 * holds the conversation's keyed lock for its whole life, so two actors for one conversation
 * (a late input racing an actor that is shutting down, a recovery) never interleave; the
 * store's version compare-and-swap is the final arbiter between processes. Model streams run
 * in a FiberMap keyed by conversation and feed their events back into the mailbox. An actor
 * ends once its mailbox is drained and no model stream is feeding it; the next input (a tool
 * result, a new turn) starts a new one from the committed state.
 *
 * The client side (Cursor's protocol) is behind `ClientGateway`, which the transport provides.
 *
 * The parts live in `runner/`: the client side (`ClientGateway.ts`), one input through the loop
 * (`Step.ts`), a model call's stream (`ModelCall.ts`), restart recovery (`Recovery.ts`), the
 * turn lookups (`Lookup.ts`), what a commit keeps (`Commits.ts`) and a turn's outcome from the
 * committed state (`Outcomes.ts`); each is a function of the `RunnerEnv` (`Actor.ts`) that
 * `make` builds once. This module keeps the service, its layer and the actors.
 */
import { Chunk, Context, Deferred, Effect, Exit, FiberMap, Layer, Mailbox, Option, Stream } from "effect"
import { Cluster, solo } from "./Cluster.js"
import type { ClusterService } from "./Cluster.js"
import { Llm } from "./Llm.js"
import type { Message } from "./Llm.js"
import { initialRuntime, makeTransition } from "./Loop.js"
import type { ConversationState, Input } from "./Loop.js"
import { makeKeyedLock } from "./internal/KeyedLock.js"
import { URGENT } from "./internal/Scheduler.js"
import { Envelope, offer, priorityOf } from "./runner/Actor.js"
import { makeTurnClock } from "./runner/TurnLog.js"
import type { Actor, ActorState, RecoveryOutcome, RunnerEnv } from "./runner/Actor.js"
import { ClientGateway } from "./runner/ClientGateway.js"
import type { StartedTurn } from "./runner/ClientGateway.js"
import { currentTurn, findStartedTurn, historyOf, holdsHistory, isCommitted } from "./runner/Lookup.js"
import { recover, recoverOne, resume } from "./runner/Recovery.js"
import type { RunnerOptions } from "./runner/Options.js"
import { step, stepStream } from "./runner/Step.js"
import { Store } from "./Store.js"

export * from "./runner/ClientGateway.js"
export type { RunnerOptions } from "./runner/Options.js"
export { endedOutcome, turnUsageOf, UNRECORDED_FAILURE } from "./runner/Outcomes.js"

// =============================================================================
// The runner
// =============================================================================

export interface RecoveryReport {
  readonly conversations: number
  readonly llmCallsReissued: number
  readonly operationsResent: number
  readonly operationsInterrupted: number
}

export class Runner extends Context.Tag("cursor-byok/Runner")<Runner, {
  /**
   * Queues an input for a conversation and returns at once. `inputId` is stable across
   * redeliveries (e.g. `requestId:appendSeqno`): an input already committed is skipped.
   */
  readonly submit: (conversationId: string, input: Input, inputId: string) => Effect.Effect<void>
  /**
   * Queues the input now (so inputs keep the order they were submitted in) and calls `applied`
   * once, in the conversation's actor, when it has been applied (committed, found already
   * committed, or ignored) or has failed: the caller can acknowledge it as durable without a
   * fiber of its own waiting (the transport's acknowledgements, `transport/Settlement.ts`).
   * `applied` must not block or fail.
   */
  readonly submitNotifying: (conversationId: string, input: Input, inputId: string, applied: () => void) => Effect.Effect<void>
  /**
   * The newest turn started by an input whose id begins with `inputIdPrefix` and passes
   * `accept`, and where it stands now; none when the store knows no such turn (a store failure
   * is logged and answers none too). Lets the client side tell a client that asks after a
   * restart how the turn its request started ended.
   */
  readonly findStartedTurn: (
    inputIdPrefix: string,
    accept: (inputId: string) => boolean
  ) => Effect.Effect<Option.Option<StartedTurn>>
  /**
   * The conversation's current turn and where it stands (running, or over with its outcome);
   * none for a conversation with no turn (a store failure is logged and answers none too).
   */
  readonly currentTurn: (conversationId: string) => Effect.Effect<Option.Option<StartedTurn>>
  /** A conversation's model-visible history (empty for one this server does not know): a past chat attached to a message. */
  readonly historyOf: (conversationId: string) => Effect.Effect<ReadonlyArray<Message>>
  /**
   * Whether the server holds what a client's checkpoint names of a conversation's history
   * (`promptIds`): its own turns, or stored messages to fork from. False: only the client does.
   */
  readonly holdsHistory: (conversationId: string, promptIds: ReadonlyArray<string>) => Effect.Effect<boolean>
  /** Whether `inputId` is committed on the conversation (so a redelivery of it changes nothing). A store failure is logged and answers false. */
  readonly isCommitted: (conversationId: string, inputId: string) => Effect.Effect<boolean>
  /** Resumes what a previous process left in flight; run once at startup. */
  readonly recover: Effect.Effect<RecoveryReport>
  /**
   * Resumes what one conversation has in flight, as `recover` does, when the instance that ran
   * it is gone (`Cluster`); nothing when this process runs it already.
   */
  readonly recoverConversation: (conversationId: string) => Effect.Effect<RecoveryOutcome>
  /** Completes when the conversation has no actor (its inputs are all processed and no turn runs). */
  readonly awaitIdle: (conversationId: string) => Effect.Effect<void>
}>() {}

/**
 * Committed states by conversation, least recently used first, in front of the store (the
 * store's CAS catches a stale one): `load` a conversation's (a fresh one, or the store's when
 * `fresh`), `remember` one just committed.
 */
const stateCache = (store: Context.Tag.Service<Store>, size: number, shared: boolean) => {
  const cache = new Map<string, { readonly state: ConversationState; readonly version: number }>()
  const remember = (state: ConversationState, version: number) => {
    cache.delete(state.conversationId)
    cache.set(state.conversationId, { state, version })
    if (cache.size > size) cache.delete(cache.keys().next().value!)
  }
  const load = (conversationId: string, fresh = false) => {
    // Shared with other instances (`Cluster`), the store's is the only current state.
    const cached = fresh || shared ? undefined : cache.get(conversationId)
    if (cached !== undefined) return Effect.succeed<ActorState>({ runtime: { committed: cached.state, pending: null }, version: cached.version })
    return store.load(conversationId).pipe(Effect.map(Option.match({
      onNone: (): ActorState => ({ runtime: initialRuntime(conversationId), version: 0 }),
      onSome: ({ state, version }): ActorState => {
        remember(state, version)
        return { runtime: { committed: state, pending: null }, version }
      }
    })))
  }
  return { load, remember }
}

/** `work` under the conversation's lease among instances, when there are others. */
const leased = <A, E, R>(cluster: ClusterService, conversationId: string, work: Effect.Effect<A, E, R>) =>
  cluster.shared ? Effect.scoped(Effect.zipRight(cluster.lease(conversationId), work)) : work

export const make = (options: RunnerOptions) =>
  Effect.gen(function*() {
    const store = yield* Store
    const llm = yield* Llm
    const gateway = yield* ClientGateway
    const transition = makeTransition(options.policy)
    const locks = yield* makeKeyedLock()
    const llmStreams = yield* FiberMap.make<string>()
    const actorFibers = yield* FiberMap.make<Actor>()
    const actors = new Map<string, Actor>()

    // -------------------------------------------------------------------------
    // Committed states, and what the runner's parts share
    // -------------------------------------------------------------------------

    // Alone unless a `Cluster` of several instances is provided (a team's server on PostgreSQL).
    const cluster = Option.getOrElse(yield* Effect.serviceOption(Cluster), () => solo)
    const { load, remember } = stateCache(store, options.stateCacheSize ?? 256, cluster.shared)

    // `deliver` is defined with the actors below: a model stream feeds its events back through it.
    const env: RunnerEnv = {
      options,
      store,
      llm,
      gateway,
      transition,
      llmStreams,
      turnClock: makeTurnClock(),
      load,
      remember,
      deliver: (conversationId, envelope) => deliver(conversationId, envelope),
      isLive: (actor) => actors.get(actor.conversationId) === actor
    }

    // -------------------------------------------------------------------------
    // Actors
    // -------------------------------------------------------------------------

    /** One envelope through the actor: the state it folds lives on the actor, so a model stream's fast path sees it. */
    const process = (actor: Actor, envelope: Envelope) =>
      Effect.suspend(() => {
        const current = actor.state!
        const next: Effect.Effect<ActorState> = Envelope.$match(envelope, {
          Apply: ({ applied, input, inputId }) =>
            applied === undefined
              ? step(env, actor, current, input, inputId)
              : step(env, actor, current, input, inputId).pipe(Effect.ensuring(Effect.sync(applied))),
          Stream: ({ callId, events }) => stepStream(env, actor, current, callId, events),
          Resume: ({ reply }) =>
            resume(env, actor, current).pipe(Effect.flatMap((outcome) => Deferred.succeed(reply, outcome)), Effect.as(current))
        })
        return next.pipe(
          Effect.tap((state) => {
            actor.state = state
            actor.pending--
            return endWhenIdle(actor, state)
          })
        )
      })

    /**
     * A chunk's envelopes in order, each at its priority. The actor runs at URGENT (`actorFor`):
     * only the others are set (each setting is a few fiber operations an envelope).
     */
    const processAll = (actor: Actor, envelopes: ReadonlyArray<Envelope>, index: number): Effect.Effect<void> => {
      if (index === envelopes.length) return Effect.void
      const envelope = envelopes[index]!
      const priority = priorityOf(envelope)
      const processed = priority === URGENT ? process(actor, envelope) : Effect.withSchedulingPriority(process(actor, envelope), priority)
      return Effect.flatMap(processed, () => processAll(actor, envelopes, index + 1))
    }

    const work = (actor: Actor) =>
      Effect.gen(function*() {
        actor.state = yield* load(actor.conversationId).pipe(Effect.orDie)
        yield* Mailbox.toStream(actor.mailbox).pipe(Stream.runForEachChunk((envelopes) => processAll(actor, Chunk.toReadonlyArray(envelopes), 0)))
      })

    // The keyed lock within this instance; with other instances, the conversation's lease among them too, for the actor's life.
    const runActor = (actor: Actor) =>
      locks.withLock(actor.conversationId)(leased(cluster, actor.conversationId, work(actor))).pipe(
        Effect.catchAllCause((cause) => Effect.logError("runner: conversation actor stopped", cause)),
        Effect.ensuring(Effect.sync(() => {
          if (actors.get(actor.conversationId) === actor) actors.delete(actor.conversationId)
        })),
        Effect.annotateLogs({ conversationId: actor.conversationId })
      )

    /**
     * Nothing queued and no model stream feeding the mailbox: this actor is done and frees its
     * memory and lock (a turn waiting on the client resumes from the committed state when the
     * result arrives).
     */
    const endWhenIdle = (actor: Actor, acc: ActorState) =>
      Effect.sync(() => {
        // Counted at offer: the envelopes queued and those taken but not yet processed.
        if (actor.pending === 0 && acc.runtime.committed.status !== "waitingLlm") {
          if (actors.get(actor.conversationId) === actor) actors.delete(actor.conversationId)
          actor.mailbox.unsafeDone(Exit.void)
        }
      })

    const actorFor = (conversationId: string) =>
      Effect.gen(function*() {
        const existing = actors.get(conversationId)
        if (existing !== undefined) return existing
        const mailbox = yield* Mailbox.make<Envelope>()
        const actor: Actor = { conversationId, mailbox, done: Effect.asVoid(mailbox.await), state: undefined, pending: 0 }
        actors.set(conversationId, actor)
        // Urgent between envelopes (it wakes for a client's input at once), each envelope at the
        // priority `priorityOf` gives it (`internal/Scheduler.ts`).
        yield* FiberMap.run(actorFibers, actor, Effect.withSchedulingPriority(runActor(actor), URGENT))
        return actor
      })

    const deliver = (conversationId: string, envelope: Envelope): Effect.Effect<void> =>
      Effect.gen(function*() {
        const actor = yield* actorFor(conversationId)
        if (!offer(actor, envelope)) {
          // That actor was ending; the next one waits on the conversation's lock until it has.
          if (actors.get(conversationId) === actor) actors.delete(conversationId)
          yield* deliver(conversationId, envelope)
        }
      })

    const submit = (conversationId: string, input: Input, inputId: string) =>
      deliver(conversationId, Envelope.Apply({ input, inputId }))

    const submitNotifying = (conversationId: string, input: Input, inputId: string, applied: () => void) =>
      deliver(conversationId, Envelope.Apply({ input, inputId, applied }))

    const awaitIdle = (conversationId: string): Effect.Effect<void> =>
      Effect.suspend(() => {
        const actor = actors.get(conversationId)
        return actor === undefined ? Effect.void : Effect.zipRight(actor.done, awaitIdle(conversationId))
      })

    return Runner.of({
      submit,
      submitNotifying,
      findStartedTurn: findStartedTurn(env),
      currentTurn: currentTurn(env),
      historyOf: historyOf(env),
      holdsHistory: holdsHistory(env),
      isCommitted: isCommitted(env),
      recover: recover(env),
      recoverConversation: recoverOne(env, cluster),
      awaitIdle
    })
  })

export const layer = (options: RunnerOptions): Layer.Layer<Runner, never, Store | Llm | ClientGateway> =>
  Layer.scoped(Runner, make(options))
