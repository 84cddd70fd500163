/**
 * A model call's stream, run in the conversation's FiberMap: its events go back to the actor's
 * mailbox as they come off the network, and however it ends (done, an error, a stream cut
 * short) the actor gets an event that says so.
 */
import { Chunk, Clock, Effect, FiberMap, FiberRef, Metric, Runtime, Stream } from "effect"
import type { FailedAttempt, ResponseEvent } from "../Llm.js"
import type { Command } from "../Loop.js"
import * as Metrics from "../Metrics.js"
import { Envelope, offer } from "./Actor.js"
import { stepInline } from "./FastPath.js"
import { streamLaneOf } from "../internal/Scheduler.js"
import type { StreamLane } from "../internal/Scheduler.js"
import type { Actor, RunnerEnv } from "./Actor.js"
import { turnOfCall } from "./TurnLog.js"

type Events = ReadonlyArray<ResponseEvent>

/**
 * Streams a model call into the actor's mailbox; the call was saved (planned) by the commit
 * before this. One model stream per conversation, never two open even for a moment: a stream
 * still running for the conversation (a turn's end interrupts its stream without waiting for it)
 * is interrupted and waited for, its HTTP request aborted by its scope's close, before this one
 * opens.
 */
export const startModelCall = (env: RunnerEnv, actor: Actor, call: Extract<Command, { _tag: "CallLlm" }>) =>
  Effect.gen(function*() {
    const { deliver, llm, llmStreams, store } = env
    yield* FiberMap.remove(llmStreams, actor.conversationId)
    yield* store.markLlmCall(call.callId, "streaming").pipe(
      Effect.catchAll((error) => Effect.logWarning("runner: could not mark a model call streaming", error))
    )
    // Through `deliver`, not this actor's mailbox: should the actor have ended, the next one gets it.
    const feed = (events: Events) => deliver(actor.conversationId, Envelope.Stream({ callId: call.callId, events }))
    yield* Metric.increment(Metrics.llmCalls)
    const openedAt = yield* Clock.currentTimeMillis
    const clock = yield* Effect.clock
    const forks = callbackForks(yield* Effect.runtime<never>(), feed)
    const lane = streamLaneOf(yield* FiberRef.get(FiberRef.currentScheduler))
    const progress = new CallProgress(env, call.callId, clock, openedAt)
    const apply = applyEvents(env, actor, call.callId, clock, forks)
    /** Applies the events, then runs what `note` returned (in a fiber of its own, at the normal priority). */
    const applyNoted = (events: Events) => {
      const follow = progress.note(events)
      apply(events)
      if (follow !== undefined) forks.followUp(follow)
    }
    const reads = new ReadBatch(applyNoted, lane)
    /** What the stream itself says last (its end, a failure) goes after the batched events. */
    const flushFirst = Effect.sync(reads.flush)
    const options = {
      model: call.model,
      callId: call.callId,
      onEvents: reads.onRead,
      // One row per attempt that failed before answering (rare; an answer writes none), for the console.
      onAttemptFailed: (attempt: FailedAttempt) =>
        store.recordAttempt(call.callId, attempt).pipe(
          Effect.catchAll((error) => Effect.logWarning("runner: could not record a model call's failed attempt", error))
        ),
      ...(call.maxOutputTokens === undefined ? {} : { maxOutputTokens: call.maxOutputTokens })
    }
    const consume = llm.stream(call.request, options).pipe(
      // What comes on the stream (an adapter without the fast path: one chunk per network read).
      Stream.runForEachChunk((chunk) => {
        const events = Chunk.toReadonlyArray(chunk)
        const follow = progress.note(events)
        const deliverRest = Effect.sync(() => apply(events))
        // The write waits until the actor has had its turn: the first delta goes out before it.
        return follow === undefined ? deliverRest : Effect.zipRight(deliverRest, Effect.zipRight(Effect.yieldNow(), follow))
      }),
      Effect.catchAll((error) => {
        progress.finished = true
        return Effect.zipRight(flushFirst, feed([{
          _tag: "Error",
          reason: error.reason === "aborted" ? "aborted" : "error",
          message: error.message,
          retryable: error.retryable,
          ...(error.reason === "contextOverflow" ? { code: "contextOverflow" as const } : {})
        }]))
      }),
      Effect.zipRight(flushFirst),
      Effect.zipRight(Effect.suspend(() =>
        progress.finished
          ? Effect.void
          : feed([{ _tag: "Error", reason: "error", message: "The model stream ended before the response was complete.", retryable: true }])
      )),
      Effect.annotateLogs({ conversationId: actor.conversationId, callId: call.callId })
    )
    // At the normal priority whatever the actor's (`Runner.ts`): streaming is the bulk of the work.
    yield* FiberMap.run(llmStreams, actor.conversationId, Effect.withSchedulingPriority(consume, 0))
  })

// =============================================================================
// What the runner notes of a call's events
// =============================================================================

/**
 * What the runner notes of a call's events however they come (the stream or the fast path's
 * callback): its end, its attempt count, and the time of its first content (for the turn's
 * clock at once; the metric and the call's row in the effect `note` returns, run after the
 * content was applied).
 */
class CallProgress {
  /** A `Done` or an `Error` came: the stream's end needs no error of its own. */
  finished = false
  private attempts = 1
  private awaitingFirstDelta = true

  constructor(
    private readonly env: RunnerEnv,
    private readonly callId: string,
    private readonly clock: Clock.Clock,
    private readonly openedAt: number
  ) {}

  note(events: Events): Effect.Effect<void> | undefined {
    let follow: Effect.Effect<void> | undefined
    for (const event of events) {
      if (event._tag === "Done" || event._tag === "Error") this.finished = true
      if (event._tag === "Start" && event.attempts !== undefined) this.attempts = event.attempts
      if (this.awaitingFirstDelta && (event._tag === "TextDelta" || event._tag === "ThinkingDelta" || event._tag === "ToolCallStart")) {
        this.awaitingFirstDelta = false
        follow = this.firstDeltaAt(this.clock.unsafeCurrentTimeMillis())
      }
    }
    return follow
  }

  private firstDeltaAt(at: number): Effect.Effect<void> {
    const turnId = turnOfCall(this.callId)
    if (!this.env.turnClock.firstDelta.has(turnId)) this.env.turnClock.firstDelta.set(turnId, at)
    // One small write per call, for the console (it never touches the call's status). It
    // yields first: started in the read's own call, it would otherwise run (a SQL write)
    // before the socket write of the first delta, which Node makes once this call returns.
    return Effect.zipRight(
      Effect.zipRight(Effect.yieldNow(), Metric.update(Metrics.timeToFirstDelta, (at - this.openedAt) / 1000)),
      this.env.store.recordCallTiming(this.callId, { firstDeltaMs: at - this.openedAt, attempts: this.attempts }).pipe(
        Effect.catchAll((error) => Effect.logWarning("runner: could not record a model call's first delta", error))
      )
    )
  }
}

// =============================================================================
// Applying events outside any fiber
// =============================================================================

/** The fibers a network read's callback starts: it runs outside any fiber. */
interface CallbackForks {
  /** The fast path threw: logged (its events go the actor's way instead). */
  readonly fastPathFailed: (cause: unknown) => void
  /** Events the actor's mailbox did not take, through `deliver`. */
  readonly deliver: (events: Events) => void
  /** What `CallProgress.note` returned, run after the events were applied, at the normal priority. */
  readonly followUp: (follow: Effect.Effect<void>) => void
}

const callbackForks = (runtime: Runtime.Runtime<never>, feed: (events: Events) => Effect.Effect<void>): CallbackForks => {
  const fork = Runtime.runFork(runtime)
  return {
    fastPathFailed: (cause) => {
      fork(Effect.logError("runner: the delta fast path failed; the actor takes the events", cause))
    },
    deliver: (events) => {
      fork(feed(events))
    },
    followUp: (follow) => {
      fork(Effect.withSchedulingPriority(follow, 0))
    }
  }
}

/**
 * Applies a read's events: what the actor would fold without a commit at once (`stepInline`),
 * the rest to the actor's mailbox, in order after it (through `deliver` should this actor have
 * ended).
 */
const applyEvents = (env: RunnerEnv, actor: Actor, callId: string, clock: Clock.Clock, forks: CallbackForks) => (events: Events): void => {
  let applied = 0
  try {
    applied = stepInline(env, actor, callId, events, clock.unsafeCurrentTimeMillis())
  } catch (cause) {
    forks.fastPathFailed(cause)
  }
  if (applied > 0) Metrics.countStreamEvents("fast", applied)
  if (applied === events.length) return
  Metrics.countStreamEvents("actor", events.length - applied)
  const rest = applied === 0 ? events : events.slice(applied)
  if (env.isLive(actor) && offer(actor, Envelope.Stream({ callId, events: rest }))) return
  forks.deliver(rest)
}

// =============================================================================
// Batching a stream's network reads
// =============================================================================

/**
 * A scheduler's lane for model streams' reads (the server's, `internal/Scheduler.ts`): while
 * tasks wait for a later slice, a read queues there rather than being applied in its callback.
 */
/**
 * The delta fast path's reads: the answer's events come to `onRead` in the network read's own
 * call, from its first content on, and the first read of an event-loop iteration is applied
 * and written there and then. Further reads of the same stream in that iteration (a busy
 * stream: several reads per pass of the poll phase) are applied together in its check phase
 * (`setImmediate`, no timer): one run of the transition, one frame per block and one socket
 * write for them. On a scheduler with a stream lane, while tasks wait for a later slice, a read
 * is not applied in its callback: it queues in that lane, behind the urgent tasks and ahead of
 * the normal ones.
 */
class ReadBatch {
  /** Events of this iteration's reads that wait for `flush`. */
  private waiting: Array<ResponseEvent> | undefined = undefined
  /** A read of this iteration was taken: `flush` is scheduled. */
  private flushScheduled = false

  constructor(
    private readonly apply: (events: Events) => void,
    private readonly lane: StreamLane | undefined
  ) {}

  /** A network read's events (`StreamOptions.onEvents`). */
  readonly onRead = (events: Events): void => {
    if (this.flushScheduled) {
      if (this.waiting === undefined) this.waiting = events.slice()
      else for (const event of events) this.waiting.push(event)
      return
    }
    this.flushScheduled = true
    if (this.lane !== undefined && this.lane.backlogged) {
      // The process is behind: the read's events queue for the check phase, so this poll
      // phase stays short (new connections are accepted one per event-loop iteration), in the
      // streams' lane: behind what a client waits on, ahead of turn starts.
      this.waiting = events.slice()
      this.lane.queueStream(this.flush)
      return
    }
    setImmediate(this.flush)
    this.apply(events)
  }

  /** Applies what waits (also run before what the stream itself says last). */
  readonly flush = (): void => {
    this.flushScheduled = false
    const events = this.waiting
    this.waiting = undefined
    if (events !== undefined) this.apply(events)
  }
}
