/**
 * A model call's stream, run in the conversation's FiberMap: its events go back to the actor's
 * mailbox as they come off the network, and however it ends (done, an error, a stream cut
 * short) the actor gets an event that says so.
 */
import { Chunk, Clock, Effect, FiberMap, FiberRef, Metric, Runtime, Stream } from "effect"
import { SlicedScheduler } from "../internal/Scheduler.js"
import type { ResponseEvent } from "../Llm.js"
import type { Command } from "../Loop.js"
import * as Metrics from "../Metrics.js"
import { Envelope, offer } from "./Actor.js"
import { stepInline } from "./FastPath.js"
import type { Actor, RunnerEnv } from "./Actor.js"
import { turnOfCall } from "./TurnLog.js"

/** Streams a model call into the actor's mailbox; the call was saved (planned) by the commit before this. */
export const startModelCall = (env: RunnerEnv, actor: Actor, call: Extract<Command, { _tag: "CallLlm" }>) =>
  Effect.gen(function*() {
    const { deliver, llm, llmStreams, store } = env
    yield* store.markLlmCall(call.callId, "streaming").pipe(
      Effect.catchAll((error) => Effect.logWarning("runner: could not mark a model call streaming", error))
    )
    // Through `deliver`, not this actor's mailbox: should the actor have ended, the next one gets it.
    const feed = (events: ReadonlyArray<ResponseEvent>) =>
      deliver(actor.conversationId, Envelope.Stream({ callId: call.callId, events }))
    yield* Metric.increment(Metrics.llmCalls)
    const openedAt = yield* Clock.currentTimeMillis
    const clock = yield* Effect.clock
    const runtime = yield* Effect.runtime<never>()
    const scheduler = yield* FiberRef.get(FiberRef.currentScheduler)
    const sliced = scheduler instanceof SlicedScheduler ? scheduler : undefined
    let finished = false
    let firstDelta = true
    let attempts = 1
    /**
     * What the runner notes of a call's events however they come (the stream or the fast
     * path's callback): its end, its attempt count, and the time of its first content (for the
     * turn's clock at once; the metric and the call's row in the returned effect, run after
     * the content was applied).
     */
    const note = (events: ReadonlyArray<ResponseEvent>): Effect.Effect<void> | undefined => {
      let follow: Effect.Effect<void> | undefined
      for (const event of events) {
        if (event._tag === "Done" || event._tag === "Error") finished = true
        if (event._tag === "Start" && event.attempts !== undefined) attempts = event.attempts
        if (firstDelta && (event._tag === "TextDelta" || event._tag === "ThinkingDelta" || event._tag === "ToolCallStart")) {
          firstDelta = false
          const at = clock.unsafeCurrentTimeMillis()
          const turnId = turnOfCall(call.callId)
          if (!env.turnClock.firstDelta.has(turnId)) env.turnClock.firstDelta.set(turnId, at)
          // One small write per call, for the console (it never touches the call's status). It
          // yields first: started in the read's own call, it would otherwise run (a SQL write)
          // before the socket write of the first delta, which Node makes once this call returns.
          follow = Effect.zipRight(
            Effect.zipRight(Effect.yieldNow(), Metric.update(Metrics.timeToFirstDelta, (at - openedAt) / 1000)),
            store.recordCallTiming(call.callId, { firstDeltaMs: at - openedAt, attempts }).pipe(
              Effect.catchAll((error) => Effect.logWarning("runner: could not record a model call's first delta", error))
            )
          )
        }
      }
      return follow
    }
    /**
     * The delta fast path: the answer's events come to `onEvents` in the network read's own
     * call, from its first content on, and the first read of an event-loop iteration is applied
     * and written there and then. Further reads of the same stream in that iteration (a busy
     * stream: several reads per pass of the poll phase) are applied together in its check phase
     * (`setImmediate`, no timer): one run of the transition, one frame per block and one socket
     * write for them. What the actor would fold without a commit is applied and written at once
     * (`stepInline`); the rest goes to the actor's mailbox, in order after it (through
     * `deliver` should this actor have ended). On the server's scheduler
     * (`internal/Scheduler.ts`), while tasks wait for a later slice, a read is not applied in
     * its callback: it queues in the streams' lane, behind the urgent tasks and ahead of the
     * normal ones.
     */
    let batch: Array<ResponseEvent> | undefined
    let wroteThisIteration = false
    const apply = (events: ReadonlyArray<ResponseEvent>) => {
      let applied = 0
      try {
        applied = stepInline(env, actor, call.callId, events, clock.unsafeCurrentTimeMillis())
      } catch (cause) {
        // Outside any fiber: logged, and the events go the actor's way instead.
        Runtime.runFork(runtime)(Effect.logError("runner: the delta fast path failed; the actor takes the events", cause))
      }
      if (applied > 0) Metrics.countStreamEvents("fast", applied)
      if (applied === events.length) return
      Metrics.countStreamEvents("actor", events.length - applied)
      const rest = applied === 0 ? events : events.slice(applied)
      if (env.isLive(actor) && offer(actor, Envelope.Stream({ callId: call.callId, events: rest }))) return
      Runtime.runFork(runtime)(feed(rest))
    }
    /** Applies the events, then runs what `note` returned (in a fiber of its own, at the normal priority). */
    const applyNoted = (events: ReadonlyArray<ResponseEvent>) => {
      const follow = note(events)
      apply(events)
      if (follow !== undefined) Runtime.runFork(runtime)(Effect.withSchedulingPriority(follow, 0))
    }
    const flush = () => {
      wroteThisIteration = false
      const events = batch
      batch = undefined
      if (events !== undefined) applyNoted(events)
    }
    const onEvents = (events: ReadonlyArray<ResponseEvent>) => {
      if (wroteThisIteration) {
        if (batch === undefined) batch = events.slice()
        else for (const event of events) batch.push(event)
        return
      }
      wroteThisIteration = true
      if (sliced !== undefined && sliced.backlogged) {
        // The process is behind: the read's events queue for the check phase, so this poll
        // phase stays short (new connections are accepted one per event-loop iteration), in the
        // streams' lane: behind what a client waits on, ahead of turn starts.
        batch = events.slice()
        sliced.queueStream(flush)
        return
      }
      setImmediate(flush)
      return applyNoted(events)
    }
    /** What the stream itself says last (its end, a failure) goes after the batched events. */
    const flushFirst = Effect.sync(flush)
    const options = {
      model: call.model,
      callId: call.callId,
      onEvents,
      ...(call.maxOutputTokens === undefined ? {} : { maxOutputTokens: call.maxOutputTokens })
    }
    const consume = llm.stream(call.request, options).pipe(
      // What comes on the stream (an adapter without the fast path: one chunk per network read).
      Stream.runForEachChunk((chunk) => {
        const events = Chunk.toReadonlyArray(chunk)
        const follow = note(events)
        const deliverRest = Effect.sync(() => apply(events))
        // The write waits until the actor has had its turn: the first delta goes out before it.
        return follow === undefined ? deliverRest : Effect.zipRight(deliverRest, Effect.zipRight(Effect.yieldNow(), follow))
      }),
      Effect.catchAll((error) => {
        finished = true
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
        finished
          ? Effect.void
          : feed([{ _tag: "Error", reason: "error", message: "The model stream ended before the response was complete.", retryable: true }])
      )),
      Effect.annotateLogs({ conversationId: actor.conversationId, callId: call.callId })
    )
    // At the normal priority whatever the actor's (`Runner.ts`): streaming is the bulk of the work.
    yield* FiberMap.run(llmStreams, actor.conversationId, Effect.withSchedulingPriority(consume, 0))
  })
