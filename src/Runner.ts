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
 */
import { Chunk, Clock, Context, Data, Deferred, Effect, Exit, FiberMap, Layer, Mailbox, Metric, Option, Stream } from "effect"
import type { Duration } from "effect"
import { addUsage, coalesceDeltas, emptyUsage, Llm, messageHash, requestHash } from "./Llm.js"
import type { AssistantMessage, ResponseEvent, ToolCall, ToolResultMessage, Usage } from "./Llm.js"
import { callIdOf, Command, initialRuntime, Input, isBusy, makeTransition } from "./Loop.js"
import type { ConversationState, Policy, RuntimeState, Transition, TurnSettings } from "./Loop.js"
import { makeKeyedLock } from "./internal/KeyedLock.js"
import * as Metrics from "./Metrics.js"
import { Store } from "./Store.js"
import type { CommitInput, LlmCallRecord, LlmCallUpdate, PlannedOperation } from "./Store.js"

// =============================================================================
// The client side, as the runner sees it
// =============================================================================

/** Which turn a call is about; the transport finds the Cursor request from the settings. */
export interface TurnRef {
  readonly conversationId: string
  readonly turnId: string
  readonly settings: TurnSettings
}

export interface DispatchedOperation {
  readonly operationId: string
  readonly toolCall: ToolCall
  /** The model call whose answer holds this tool call. */
  readonly modelCallId: string
  /** True when this is a re-send after a restart (the operation was sent before the crash). */
  readonly resend: boolean
}

export type TurnOutcome = Extract<Command, { _tag: "Final" | "Failed" | "Canceled" }>

/**
 * Where a turn that a client input started stands now, from the committed state (see
 * `Runner.findStartedTurn`).
 */
export type StartedTurn = Data.TaggedEnum<{
  /** The conversation's current turn, not over: running in this process, or resumed by recovery. */
  Running: { readonly turn: TurnRef; readonly startInputId: string }
  /**
   * The conversation's current turn, over: what `ClientGateway.finish` is given for it, rebuilt
   * from the committed state (see `endedOutcome`); `usage` sums the turn's committed answers.
   */
  Ended: {
    readonly turn: TurnRef
    readonly startInputId: string
    readonly outcome: TurnOutcome
    readonly state: ConversationState
    readonly usage: Usage
  }
  /** A later turn has started on the conversation since: the committed state is no longer this turn's. */
  Past: { readonly conversationId: string; readonly turnId: string; readonly startInputId: string }
}>
export const StartedTurn = Data.taggedEnum<StartedTurn>()

export class ClientGateway extends Context.Tag("cursor-byok/ClientGateway")<ClientGateway, {
  /** Streamed events of a running turn's model call `callId`, in order. */
  readonly publish: (turn: TurnRef, callId: string, events: ReadonlyArray<ResponseEvent>) => Effect.Effect<void>
  /**
   * Runs one tool call on the client; its result comes back through `Runner.submit` as a
   * ToolResult, or is returned here when the tool is done at once (a tool the server keeps,
   * such as TodoWrite): the runner applies it as `<operation id>:result`.
   */
  readonly dispatch: (turn: TurnRef, operation: DispatchedOperation) => Effect.Effect<ToolResultMessage | undefined>
  /** Stops the turn's client operations (a cancel). */
  readonly abort: (turn: TurnRef) => Effect.Effect<void>
  /** The turn is over: send what ends it (usage, checkpoint, end of stream); `usage` sums the turn's committed answers (`turnUsageOf`). */
  readonly finish: (
    turn: TurnRef,
    outcome: TurnOutcome,
    state: ConversationState,
    usage: Usage
  ) => Effect.Effect<void>
}>() {}

// =============================================================================
// The runner
// =============================================================================

export interface RunnerOptions {
  readonly policy: Policy
  /** The tool's kind and whether running it twice is harmless (decides crash recovery). */
  readonly classifyTool: (toolCall: ToolCall) => { readonly kind: string; readonly idempotent: boolean }
  /** The result a non-idempotent operation gets when a restart interrupted it. */
  readonly interruptedResult: (toolCall: ToolCall) => ToolResultMessage
  /** How long a conversation's lock lingers after its last user. */
  readonly lockIdleTimeToLive?: Duration.DurationInput
  /**
   * How many conversations' committed states stay in memory between actors (most recently
   * used first), so that a tool result does not reload and re-verify a long history.
   */
  readonly stateCacheSize?: number
}

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
   * Like `submit`, but completes only once the input has been applied (committed, found
   * already committed, or ignored), so the caller can acknowledge it as durable. Never call it
   * from inside the conversation's own processing (a gateway callback): that would wait on itself.
   */
  readonly submitAndWait: (conversationId: string, input: Input, inputId: string) => Effect.Effect<void>
  /**
   * Queues the input now (so inputs keep the order they were submitted in) and returns an
   * effect that waits until it has been applied: the caller can wait outside its own locks.
   */
  readonly submitTracked: (conversationId: string, input: Input, inputId: string) => Effect.Effect<Effect.Effect<void>>
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
  /** Whether `inputId` is committed on the conversation (so a redelivery of it changes nothing). A store failure is logged and answers false. */
  readonly isCommitted: (conversationId: string, inputId: string) => Effect.Effect<boolean>
  /** Resumes what a previous process left in flight; run once at startup. */
  readonly recover: Effect.Effect<RecoveryReport>
  /** Completes when the conversation has no actor (its inputs are all processed and no turn runs). */
  readonly awaitIdle: (conversationId: string) => Effect.Effect<void>
}>() {}

type RecoveryOutcome = "reissued" | "resent" | "interrupted" | "none"

type Envelope = Data.TaggedEnum<{
  Apply: { readonly input: Input; readonly inputId: string | null; readonly applied?: Deferred.Deferred<void> }
  /** The events of one model call that arrived together. */
  Stream: { readonly callId: string; readonly events: ReadonlyArray<ResponseEvent> }
  /** Restart recovery: resume what the committed state says is in flight, then report what was done. */
  Resume: { readonly reply: Deferred.Deferred<RecoveryOutcome> }
}>
const Envelope = Data.taggedEnum<Envelope>()

interface Actor {
  readonly conversationId: string
  readonly mailbox: Mailbox.Mailbox<Envelope>
  readonly done: Effect.Effect<void>
}

interface ActorState {
  readonly runtime: RuntimeState
  readonly version: number
}

const turnRefOf = (state: ConversationState): TurnRef => ({
  conversationId: state.conversationId,
  turnId: state.turnId,
  settings: state.settings ?? { model: "" }
})

export const make = (options: RunnerOptions) =>
  Effect.gen(function*() {
    const store = yield* Store
    const llm = yield* Llm
    const gateway = yield* ClientGateway
    const transition = makeTransition(options.policy)
    const locks = yield* makeKeyedLock(options.lockIdleTimeToLive ?? "30 seconds")
    const llmStreams = yield* FiberMap.make<string>()
    const actorFibers = yield* FiberMap.make<Actor>()
    const actors = new Map<string, Actor>()

    // -------------------------------------------------------------------------
    // One input through the loop
    // -------------------------------------------------------------------------

    // Committed states by conversation, least recently used first; the store's CAS catches a stale one.
    const cache = new Map<string, { readonly state: ConversationState; readonly version: number }>()
    const cacheSize = options.stateCacheSize ?? 256
    const remember = (state: ConversationState, version: number) => {
      cache.delete(state.conversationId)
      cache.set(state.conversationId, { state, version })
      if (cache.size > cacheSize) cache.delete(cache.keys().next().value!)
    }

    const load = (conversationId: string, fresh = false) => {
      const cached = fresh ? undefined : cache.get(conversationId)
      if (cached !== undefined) return Effect.succeed<ActorState>({ runtime: { committed: cached.state, pending: null }, version: cached.version })
      return store.load(conversationId).pipe(Effect.map(Option.match({
        onNone: (): ActorState => ({ runtime: initialRuntime(conversationId), version: 0 }),
        onSome: ({ state, version }): ActorState => {
          remember(state, version)
          return { runtime: { committed: state, pending: null }, version }
        }
      })))
    }

    /** What the store keeps beside a commit: the planned call or operation, and the status changes it settles. */
    const commitOf = (conversationId: string, inputId: string, acc: ActorState, input: Input, t: Transition): CommitInput => {
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
          requestHash: requestHash(command.model, command.request, command.messagesHash, command.request.messages.length)
        }
        : undefined
      const clientOperations = command._tag === "CallClient" ? [plannedOperation(conversationId, next, command)] : undefined
      const llmCallUpdate = llmCallUpdateOf(before, input)
      const operationCompletion = input._tag === "ToolResult" ? operationCompletionOf(before, input.message) : undefined
      return {
        conversationId,
        inputId,
        expectedVersion: acc.version,
        next,
        result: { command: command._tag, status: next.status },
        ...(llmCall !== undefined ? { llmCall } : {}),
        ...(clientOperations !== undefined ? { clientOperations } : {}),
        ...(llmCallUpdate !== undefined ? { llmCallUpdate } : {}),
        ...(operationCompletion !== undefined ? { operationCompletion } : {})
      }
    }

    const plannedOperation = (
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

    const step = (actor: Actor, acc: ActorState, input: Input, inputId: string | null): Effect.Effect<ActorState> =>
      Effect.gen(function*() {
        const conversationId = actor.conversationId
        if (inputId !== null) {
          const seen = yield* store.findInputCommit(conversationId, inputId)
          if (Option.isSome(seen)) return acc
        }
        const t = transition(acc.runtime, input)
        let version = acc.version
        if (t.state.committed !== acc.runtime.committed) {
          const id = inputId ?? derivedInputId(acc.runtime.committed, input)
          const committed = yield* store.commitInput(commitOf(conversationId, id, acc, input, t)).pipe(
            Effect.map(Option.some),
            Effect.catchTag("VersionConflict", () => Effect.succeed(Option.none<number>())),
            Effect.catchTag("DuplicateInput", () => Effect.succeed(Option.none<number>()))
          )
          if (Option.isNone(committed)) {
            // Another writer got there first: start again from what is committed, then re-apply.
            const reloaded = yield* load(conversationId, true)
            if (reloaded.version === acc.version) return yield* Effect.dieMessage(`commit of ${id} was refused but the version did not move`)
            return yield* step(actor, reloaded, input, inputId)
          }
          version = committed.value
          remember(t.state.committed, version)
        }
        if (input._tag === "LlmEvent" && input.event._tag === "Done" && acc.runtime.committed.activeCallId === input.callId) {
          yield* Metrics.countTokens(input.event.message.usage)
        }
        if (input._tag === "LlmEvent" && input.event._tag === "Error" && acc.runtime.committed.activeCallId === input.callId) {
          yield* Metric.increment(Metrics.llmErrors)
        }
        if (input._tag === "Start" && t.state.committed.turnId !== acc.runtime.committed.turnId) yield* Metric.increment(Metrics.turnsStarted)
        const next: ActorState = { runtime: t.state, version }
        if (t.emit.length > 0) {
          yield* gateway.publish(turnRefOf(t.state.committed), input._tag === "LlmEvent" ? input.callId : "", t.emit)
        }
        yield* supersede(acc.runtime.committed, t.state.committed)
        return yield* perform(actor, next, t.command)
      }).pipe(
        Effect.catchAll((error) =>
          Effect.gen(function*() {
            // The store failed: nothing of this input was committed. The turn cannot go on safely.
            yield* Effect.logError(`runner: ${input._tag} input could not be applied`, error)
            const state = acc.runtime.committed
            if (isBusy(state)) {
              yield* FiberMap.remove(llmStreams, actor.conversationId)
              yield* gateway.finish(
                turnRefOf(state),
                Command.Failed({ error: `The server could not save the conversation: ${error.message}`, retryable: false }),
                state,
                turnUsageOf(state)
              )
            }
            return acc
          })
        )
      )

    /**
     * Model stream events as they came off one network read. Events that only move the
     * in-memory pending response (deltas) are folded together and published once; an event that
     * changes the committed state (Done, Error) goes through `step` to be committed first.
     */
    const stepStream = (actor: Actor, acc: ActorState, callId: string, events: ReadonlyArray<ResponseEvent>) =>
      Effect.gen(function*() {
        let current = acc
        let emitted: Array<ResponseEvent> = []
        const flush = Effect.suspend(() => {
          if (emitted.length === 0) return Effect.void
          const batch = emitted
          emitted = []
          // A read's deltas leave as one event per run of the same block: fewer frames, same text.
          return gateway.publish(turnRefOf(current.runtime.committed), callId, coalesceDeltas(batch))
        })
        for (const event of events) {
          const input = Input.LlmEvent({ callId, event })
          const t = transition(current.runtime, input)
          if (t.state.committed === current.runtime.committed && (t.command._tag === "ContinueLlm" || t.command._tag === "WaitInput")) {
            for (const e of t.emit) emitted.push(e)
            current = { ...current, runtime: t.state }
            continue
          }
          yield* flush
          current = yield* step(actor, current, input, null)
        }
        yield* flush
        return current
      })

    /** A Start that replaced a running turn: the old turn's stream and client work end here. */
    const supersede = (before: ConversationState, after: ConversationState) =>
      isBusy(before) && after.turnId !== before.turnId
        ? Effect.gen(function*() {
          yield* FiberMap.remove(llmStreams, before.conversationId)
          yield* gateway.abort(turnRefOf(before))
          yield* gateway.finish(turnRefOf(before), Command.Canceled({ reason: "superseded by a new turn" }), after, turnUsageOf(before))
        })
        : Effect.void

    const perform = (actor: Actor, acc: ActorState, command: Command): Effect.Effect<ActorState> =>
      Command.$match(command, {
        ContinueLlm: () => Effect.succeed(acc),
        WaitInput: () => Effect.succeed(acc),
        CallLlm: (call) => Effect.as(startModelCall(actor, call), acc),
        CallClient: ({ operationId, toolCall }) =>
          Metric.increment(Metric.tagged(Metrics.toolCalls, "kind", options.classifyTool(toolCall).kind)).pipe(
            Effect.zipRight(store.markOperationSent(operationId)),
            Effect.zipRight(gateway.dispatch(turnRefOf(acc.runtime.committed), {
              operationId,
              toolCall,
              modelCallId: acc.runtime.committed.waiting?.callId ?? "",
              resend: false
            })),
            // Done at once (a tool the server keeps): its result goes in after this input.
            Effect.flatMap((done) =>
              done === undefined ? Effect.void : actor.mailbox.offer(Envelope.Apply({ input: Input.ToolResult({ message: done }), inputId: `${operationId}:result` }))
            ),
            Effect.catchAll((error) => Effect.logError("runner: could not mark an operation sent", error)),
            Effect.as(acc)
          ),
        Final: (outcome) => endTurn(actor, acc, outcome),
        Failed: (outcome) => endTurn(actor, acc, outcome),
        Canceled: (outcome) => endTurn(actor, acc, outcome)
      })

    const endTurn = (actor: Actor, acc: ActorState, outcome: TurnOutcome) =>
      Effect.gen(function*() {
        yield* FiberMap.remove(llmStreams, actor.conversationId)
        const turn = turnRefOf(acc.runtime.committed)
        yield* Metric.increment(Metric.tagged(Metrics.turnsFinished, "outcome", outcome._tag === "Final" ? outcome.reason : outcome._tag.toLowerCase()))
        if (outcome._tag === "Canceled") yield* gateway.abort(turn)
        // From the committed answers, once: a turn recovered after a restart counts the calls the previous process made too.
        yield* gateway.finish(turn, outcome, acc.runtime.committed, turnUsageOf(acc.runtime.committed))
        return acc
      })

    /** Streams a model call into the actor's mailbox; the call was saved (planned) by the commit before this. */
    const startModelCall = (actor: Actor, call: Extract<Command, { _tag: "CallLlm" }>) =>
      Effect.gen(function*() {
        yield* store.markLlmCall(call.callId, "streaming").pipe(
          Effect.catchAll((error) => Effect.logWarning("runner: could not mark a model call streaming", error))
        )
        // Through `deliver`, not this actor's mailbox: should the actor have ended, the next one gets it.
        const feed = (events: ReadonlyArray<ResponseEvent>) =>
          deliver(actor.conversationId, Envelope.Stream({ callId: call.callId, events }))
        yield* Metric.increment(Metrics.llmCalls)
        const openedAt = yield* Clock.currentTimeMillis
        let finished = false
        let firstDelta = true
        const consume = llm.stream(call.request, { model: call.model, callId: call.callId }).pipe(
          // One envelope per network read: under load a read carries many deltas.
          Stream.runForEachChunk((chunk) => {
            const events = Chunk.toReadonlyArray(chunk)
            let timing: Effect.Effect<void> = Effect.void
            for (const event of events) {
              if (event._tag === "Done" || event._tag === "Error") finished = true
              if (firstDelta && (event._tag === "TextDelta" || event._tag === "ThinkingDelta" || event._tag === "ToolCallStart")) {
                firstDelta = false
                timing = Clock.currentTimeMillis.pipe(Effect.flatMap((at) => Metric.update(Metrics.timeToFirstDelta, (at - openedAt) / 1000)))
              }
            }
            return Effect.zipRight(timing, feed(events))
          }),
          Effect.catchAll((error) => {
            finished = true
            return feed([{
              _tag: "Error",
              reason: error.reason === "aborted" ? "aborted" : "error",
              message: error.message,
              retryable: error.retryable
            }])
          }),
          Effect.zipRight(Effect.suspend(() =>
            finished
              ? Effect.void
              : feed([{ _tag: "Error", reason: "error", message: "The model stream ended before the response was complete.", retryable: true }])
          )),
          Effect.annotateLogs({ conversationId: actor.conversationId, callId: call.callId })
        )
        yield* FiberMap.run(llmStreams, actor.conversationId, consume)
      })

    // -------------------------------------------------------------------------
    // Restart recovery (in the actor, after it loaded the committed state)
    // -------------------------------------------------------------------------

    const resume = (actor: Actor, acc: ActorState) =>
      Effect.gen(function*() {
        const state = acc.runtime.committed
        const turn = turnRefOf(state)
        if (state.status === "waitingLlm" && state.activeCallId !== null) {
          const saved = yield* store.loadLlmCall(state.activeCallId)
          if (Option.isSome(saved)) {
            // The exact saved request, not a rebuilt one; the half-streamed response is gone with the old process.
            yield* startModelCall(actor, Command.CallLlm({
              callId: saved.value.callId,
              model: saved.value.model,
              request: saved.value.request,
              messagesHash: saved.value.messagesHash
            }))
            return "reissued" as const
          }
          yield* Effect.logError(`runner: model call ${state.activeCallId} is in flight but was never saved`)
          return "none" as const
        }
        const waiting = state.waiting
        if (state.status === "waitingClient" && waiting !== null && waiting.dispatched > waiting.appended) {
          const current = waiting.toolCalls[waiting.dispatched - 1]!
          const record = yield* store.loadOperation(current.operationId)
          if (Option.isSome(record) && record.value.status === "completed") {
            yield* actor.mailbox.offer(Envelope.Apply({
              input: Input.ToolResult({ message: record.value.result as ToolResultMessage }),
              inputId: `${current.operationId}:result`
            }))
            return "resent" as const
          }
          if (options.classifyTool(current.toolCall).idempotent) {
            yield* store.markOperationSent(current.operationId).pipe(Effect.ignore)
            const done = yield* gateway.dispatch(turn, { operationId: current.operationId, toolCall: current.toolCall, modelCallId: waiting.callId, resend: true })
            if (done !== undefined) yield* actor.mailbox.offer(Envelope.Apply({ input: Input.ToolResult({ message: done }), inputId: `${current.operationId}:result` }))
            return "resent" as const
          }
          yield* actor.mailbox.offer(Envelope.Apply({
            input: Input.ToolResult({ message: options.interruptedResult(current.toolCall) }),
            inputId: `${current.operationId}:result`
          }))
          return "interrupted" as const
        }
        return "none" as const
      }).pipe(Effect.catchAll((error) => Effect.logError("runner: recovery failed", error).pipe(Effect.as("none" as const))))

    // -------------------------------------------------------------------------
    // Actors
    // -------------------------------------------------------------------------

    const runActor = (actor: Actor) =>
      locks.withLock(actor.conversationId)(Effect.gen(function*() {
        const initial = yield* load(actor.conversationId).pipe(Effect.orDie)
        yield* Mailbox.toStream(actor.mailbox).pipe(
          Stream.chunks,
          Stream.runFoldEffect(initial, (acc, envelopes) =>
            Effect.reduce(envelopes, acc, (current, envelope) =>
              Envelope.$match(envelope, {
                Apply: ({ applied, input, inputId }) =>
                  applied === undefined
                    ? step(actor, current, input, inputId)
                    : step(actor, current, input, inputId).pipe(Effect.ensuring(Deferred.succeed(applied, undefined))),
                Stream: ({ callId, events }) => stepStream(actor, current, callId, events),
                Resume: ({ reply }) =>
                  resume(actor, current).pipe(Effect.flatMap((outcome) => Deferred.succeed(reply, outcome)), Effect.as(current))
              })).pipe(Effect.tap((next) => endWhenIdle(actor, next))))
        )
      })).pipe(
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
        const queued = Option.getOrElse(actor.mailbox.unsafeSize(), () => 0)
        if (queued === 0 && acc.runtime.committed.status !== "waitingLlm") {
          if (actors.get(actor.conversationId) === actor) actors.delete(actor.conversationId)
          actor.mailbox.unsafeDone(Exit.void)
        }
      })

    const actorFor = (conversationId: string) =>
      Effect.gen(function*() {
        const existing = actors.get(conversationId)
        if (existing !== undefined) return existing
        const mailbox = yield* Mailbox.make<Envelope>()
        const actor: Actor = { conversationId, mailbox, done: Effect.asVoid(mailbox.await) }
        actors.set(conversationId, actor)
        yield* FiberMap.run(actorFibers, actor, runActor(actor))
        return actor
      })

    const deliver = (conversationId: string, envelope: Envelope): Effect.Effect<void> =>
      Effect.gen(function*() {
        const actor = yield* actorFor(conversationId)
        if (!actor.mailbox.unsafeOffer(envelope)) {
          // That actor was ending; the next one waits on the conversation's lock until it has.
          if (actors.get(conversationId) === actor) actors.delete(conversationId)
          yield* deliver(conversationId, envelope)
        }
      })

    const submit = (conversationId: string, input: Input, inputId: string) =>
      deliver(conversationId, Envelope.Apply({ input, inputId }))

    const submitTracked = (conversationId: string, input: Input, inputId: string) =>
      Effect.gen(function*() {
        const applied = yield* Deferred.make<void>()
        yield* deliver(conversationId, Envelope.Apply({ input, inputId, applied }))
        return Deferred.await(applied)
      })

    const submitAndWait = (conversationId: string, input: Input, inputId: string) =>
      Effect.flatten(submitTracked(conversationId, input, inputId))

    const recover = Effect.gen(function*() {
      const inFlight = yield* store.listInFlight().pipe(Effect.orDie)
      const conversations = new Set<string>([
        ...inFlight.llmCalls.map((call) => call.conversationId),
        ...inFlight.operations.map((operation) => operation.conversationId)
      ])
      const report = { conversations: conversations.size, llmCallsReissued: 0, operationsResent: 0, operationsInterrupted: 0 }
      for (const conversationId of conversations) {
        const reply = yield* Deferred.make<RecoveryOutcome>()
        yield* deliver(conversationId, Envelope.Resume({ reply }))
        const value = yield* Deferred.await(reply)
        if (value === "reissued") report.llmCallsReissued++
        if (value === "resent") report.operationsResent++
        if (value === "interrupted") report.operationsInterrupted++
      }
      // Calls and operations that no longer belong to a running turn are settled, so they are not resumed twice.
      for (const call of inFlight.llmCalls) {
        const loaded = yield* store.load(call.conversationId).pipe(Effect.orDie)
        const active = Option.isSome(loaded) && loaded.value.state.activeCallId === call.callId
        if (!active) yield* store.markLlmCall(call.callId, "canceled", { error: "abandoned by a restart" }).pipe(Effect.ignore)
      }
      return report
    })

    /** Where the conversation's committed current turn stands; `startInputId` names what started it. */
    const standing = (state: ConversationState, startInputId: string) =>
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

    const findStartedTurn = (inputIdPrefix: string, accept: (inputId: string) => boolean) =>
      Effect.gen(function*() {
        const starts = yield* store.findTurnStarts(inputIdPrefix)
        const start = starts.find((candidate) => accept(candidate.inputId))
        if (start === undefined) return Option.none<StartedTurn>()
        const state = (yield* load(start.conversationId)).runtime.committed
        const startInputId = start.inputId
        if (state.turnId !== start.turnId) {
          return Option.some(StartedTurn.Past({ conversationId: start.conversationId, turnId: start.turnId, startInputId }))
        }
        return yield* standing(state, startInputId)
      }).pipe(
        Effect.catchAll((error) =>
          Effect.logWarning(`runner: the turn started by ${inputIdPrefix}... could not be looked up`, error).pipe(
            Effect.as(Option.none<StartedTurn>())
          )
        )
      )

    const currentTurn = (conversationId: string) =>
      Effect.gen(function*() {
        const state = (yield* load(conversationId)).runtime.committed
        if (state.turnSeq === 0 || state.settings === null) return Option.none<StartedTurn>()
        return yield* standing(state, "")
      }).pipe(
        Effect.catchAll((error) =>
          Effect.logWarning(`runner: the current turn of ${conversationId} could not be looked up`, error).pipe(
            Effect.as(Option.none<StartedTurn>())
          )
        )
      )

    const isCommitted = (conversationId: string, inputId: string) =>
      store.findInputCommit(conversationId, inputId).pipe(
        Effect.map(Option.isSome),
        Effect.catchAll((error) =>
          Effect.logWarning(`runner: could not tell whether ${inputId} is committed`, error).pipe(Effect.as(false))
        )
      )

    const awaitIdle = (conversationId: string): Effect.Effect<void> =>
      Effect.suspend(() => {
        const actor = actors.get(conversationId)
        return actor === undefined ? Effect.void : Effect.zipRight(actor.done, awaitIdle(conversationId))
      })

    return Runner.of({ submit, submitAndWait, submitTracked, findStartedTurn, currentTurn, isCommitted, recover, awaitIdle })
  })

export const layer = (options: RunnerOptions): Layer.Layer<Runner, never, Store | Llm | ClientGateway> =>
  Layer.scoped(Runner, make(options))

// =============================================================================
// Pure helpers
// =============================================================================

/** Ids for inputs the runner produces itself (model stream outcomes): stable for a given call. */
const derivedInputId = (state: ConversationState, input: Input): string =>
  input._tag === "LlmEvent"
    ? `${input.callId}:${input.event._tag}`
    : `${state.turnId}:${input._tag}:${state.messages.length}`

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
 * (`length`) when that message stopped at the output limit. A failure's error and a cancel's
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
      if (answer === undefined) return undefined
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

/** The status a model call reaches with this input, if it settles one. */
const llmCallUpdateOf = (before: ConversationState, input: Input): LlmCallUpdate | undefined => {
  const active = before.activeCallId
  if (active === null || before.status !== "waitingLlm") return undefined
  if (input._tag === "LlmEvent" && input.callId === active) {
    if (input.event._tag === "Done") {
      return { callId: active, status: "committed", assistantHash: messageHash(input.event.message), usage: input.event.message.usage }
    }
    if (input.event._tag === "Error") {
      return { callId: active, status: input.event.reason === "aborted" ? "canceled" : "failed", error: input.event.message }
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
