/**
 * One input through the loop, in the conversation's actor: commit the transition's new state
 * before acting on it (`step`; a model stream's deltas are folded and published without a
 * commit, `stepStream`), publish what it emits, then perform its command: stream a model call,
 * hand a tool call to the client, or end the turn.
 */
import { Clock, Effect, Fiber, FiberMap, Metric, Option } from "effect"
import { coalesceDeltas, emptyUsage } from "../Llm.js"
import type { ResponseEvent } from "../Llm.js"
import { Command, Input, isBusy, SUPERSEDED_REASON } from "../Loop.js"
import type { ConversationState } from "../Loop.js"
import * as Metrics from "../Metrics.js"
import { Envelope, offerEffect, turnRefOf } from "./Actor.js"
import type { Actor, ActorState, RunnerEnv } from "./Actor.js"
import type { TurnOutcome } from "./ClientGateway.js"
import { rootCauseOf } from "../Store.js"
import { commitOf, derivedInputId } from "./Commits.js"
import { foldPure } from "./FastPath.js"
import { logTurn } from "./TurnLog.js"
import { startModelCall } from "./ModelCall.js"
import { turnUsageOf } from "./Outcomes.js"

export const step = (env: RunnerEnv, actor: Actor, acc: ActorState, input: Input, inputId: string | null): Effect.Effect<ActorState> =>
  Effect.gen(function*() {
    const { gateway, load, options, remember, store, transition } = env
    const conversationId = actor.conversationId
    if (inputId !== null) {
      const seen = yield* store.findInputCommit(conversationId, inputId)
      if (Option.isSome(seen)) return acc
    }
    const t = transition(acc.runtime, yield* withSeed(env, acc, input))
    let version = acc.version
    if (t.state.committed !== acc.runtime.committed) {
      const id = inputId ?? derivedInputId(acc.runtime.committed, input)
      const committed = yield* store.commitInput(commitOf(options, conversationId, id, acc.version, t)).pipe(
        Effect.map(Option.some),
        Effect.catchTag("VersionConflict", () => Effect.succeed(Option.none<number>())),
        Effect.catchTag("DuplicateInput", () => Effect.succeed(Option.none<number>()))
      )
      if (Option.isNone(committed)) {
        // Another writer got there first: start again from what is committed, then re-apply.
        const reloaded = yield* load(conversationId, true)
        if (reloaded.version === acc.version) return yield* Effect.dieMessage(`commit of ${id} was refused but the version did not move`)
        return yield* step(env, actor, reloaded, input, inputId)
      }
      version = committed.value
      remember(t.state.committed, version)
    }
    const settledCall = t.settles.modelCall
    if (settledCall?.status === "committed") {
      yield* Metrics.countTokens(settledCall.message.usage)
      const cost = env.options.costOf?.(settledCall.model, settledCall.message)
      if (cost !== undefined) Metrics.addCost(cost.model, cost.usd)
    } else if (settledCall !== undefined && input._tag === "LlmEvent") {
      // The call's own stream ended it in error (not a cancel or a new turn).
      yield* Metric.increment(Metrics.llmErrors)
    }
    if (t.state.committed.segment !== acc.runtime.committed.segment && t.state.committed.segment.kind === "rewind") {
      yield* Metric.increment(Metrics.rewinds)
      yield* Effect.logInfo(`runner: the client kept ${t.state.committed.segment.kept} of ${acc.runtime.committed.messages.length} messages; the history rewinds to them`)
    }
    if (input._tag === "Start" && t.state.committed.turnId !== acc.runtime.committed.turnId) {
      yield* Metric.increment(Metrics.turnsStarted)
      env.turnClock.started.set(t.state.committed.turnId, yield* Clock.currentTimeMillis)
    }
    const next: ActorState = { runtime: t.state, version }
    if (t.emit.length > 0) {
      yield* gateway.publish(turnRefOf(t.state.committed), input._tag === "LlmEvent" ? input.callId : "", t.emit)
    }
    const compaction = t.settles.compaction
    if (compaction !== undefined) {
      Metrics.countCompaction(compaction._tag.toLowerCase())
      yield* gateway.compaction(turnRefOf(t.state.committed), compaction)
    }
    yield* supersede(env, acc.runtime.committed, t.state.committed)
    return yield* perform(env, actor, next, t.command)
  }).pipe(
    Effect.catchAll((error) =>
      Effect.gen(function*() {
        const { gateway, llmStreams } = env
        // The store failed: nothing of this input was committed. The turn cannot go on safely.
        yield* Effect.logError(`runner: ${input._tag} input could not be applied`, error)
        const state = acc.runtime.committed
        const failed = Command.Failed({ error: storeFailureText(error), retryable: false })
        if (isBusy(state)) {
          yield* FiberMap.remove(llmStreams, actor.conversationId)
          yield* gateway.finish(turnRefOf(state), failed, state, turnUsageOf(state))
        }
        // A turn this input would have begun (its client waits on it) ends too, with the history as it was committed.
        const begun = beganTurn(env, acc, input)
        if (begun !== undefined && begun.turnId !== state.turnId) yield* gateway.finish(turnRefOf(begun), failed, state, emptyUsage)
        return acc
      })
    )
  )

/** The turn `input` begins from `acc` (a new turn's state, never committed), if it begins one. */
const beganTurn = (env: RunnerEnv, acc: ActorState, input: Input): ConversationState | undefined => {
  if (input._tag !== "Start" && input._tag !== "Summarize" && input._tag !== "UserMessage") return undefined
  const next = env.transition(acc.runtime, input).state.committed
  return next.turnId !== acc.runtime.committed.turnId ? next : undefined
}

/** The OS's codes of a database server that cannot be reached (PostgreSQL's own are classes 08 and 57P). */
const DATABASE_UNREACHABLE = new Set(["ECONNREFUSED", "ECONNRESET", "EPIPE", "ETIMEDOUT", "ENOTFOUND", "EHOSTUNREACH"])

/** What the client reads when the store could not save a turn: the cause in words, and that nothing of it was kept. */
const storeFailureText = (error: { readonly message: string; readonly cause?: unknown }): string => {
  const code = rootCauseOf(error.cause).code
  const what = code === "SQLITE_FULL" || code === "ENOSPC"
    ? "the disk that holds the conversation history is full: free some space, then send the message again"
    : code.startsWith("SQLITE_READONLY")
    ? "the conversation history is read-only for the server: make its database file writable, then send the message again"
    : code.startsWith("SQLITE_IOERR")
    ? `the conversation history could not be written (an I/O error: ${error.message}); check the disk, then send the message again`
    : DATABASE_UNREACHABLE.has(code) || code.startsWith("08") || code.startsWith("57P")
    ? `the database that holds the conversation history is not answering (${code}); send the message again once it is back`
    : `the server could not save the conversation: ${error.message}`
  return `${what[0]!.toUpperCase()}${what.slice(1)}. Nothing of this turn was saved.`
}

/**
 * Model stream events as they came off one network read. Events that only move the
 * in-memory pending response (deltas) are folded together and published once; the call's end
 * (Done, Error), which may change the committed state, goes through `step` to be committed first.
 */
export const stepStream = (env: RunnerEnv, actor: Actor, acc: ActorState, callId: string, events: ReadonlyArray<ResponseEvent>) =>
  Effect.gen(function*() {
    let current = acc
    let next = 0
    while (next < events.length) {
      const fold = foldPure(env.transition, current.runtime, callId, events, next)
      current = { ...current, runtime: fold.runtime }
      // A read's deltas leave as one event per run of the same block: fewer frames, same text.
      if (fold.emitted.length > 0) yield* env.gateway.publish(turnRefOf(current.runtime.committed), callId, coalesceDeltas(fold.emitted))
      next += fold.applied
      if (next < events.length) current = yield* step(env, actor, current, Input.LlmEvent({ callId, event: events[next++]! }), null)
    }
    return current
  })

/**
 * A conversation's first turn that names a history it does not have (a forked chat): the
 * stored messages with those client ids, from whichever conversation holds them, go in with
 * the input for the loop to seed from. A history only the client holds was read back from it
 * before the input was submitted (`imported`, `transport/History.ts`); not found here all the
 * same (the store failed that look-up): the input as it is.
 */
const withSeed = (env: RunnerEnv, acc: ActorState, input: Input): Effect.Effect<Input> => {
  if ((input._tag !== "Start" && input._tag !== "Summarize") || input.clientHistory === undefined) return Effect.succeed(input)
  const history = input.clientHistory
  const state = acc.runtime.committed
  if (history.promptIds.length === 0 || history.seed !== undefined || history.imported !== undefined || state.turnSeq > 0 || state.messages.length > 0) {
    return Effect.succeed(input)
  }
  return env.store.findHistory(history.promptIds).pipe(
    Effect.map(Option.match({
      onNone: () => input,
      onSome: (seed) => ({ ...input, clientHistory: { ...history, seed } })
    })),
    Effect.tap((seeded) =>
      seeded === input
        ? Effect.logWarning(`runner: ${state.conversationId} names a history of ${history.promptIds.length} messages this server does not hold and was not given; it starts without it`)
        : Effect.logInfo(`runner: ${state.conversationId} is a fork; seeded with ${history.promptIds.length} messages`)
    ),
    Effect.catchAll((error) => Effect.as(Effect.logWarning("runner: could not look up a forked chat's history", error), input))
  )
}

/**
 * A Start that replaced a running turn: the old turn's model stream is stopped (its fiber
 * interrupted and finished, so its HTTP request is aborted) before anything else, its client
 * work is aborted, and its stream ends canceled, saying why.
 */
const supersede = (env: RunnerEnv, before: ConversationState, after: ConversationState) =>
  isBusy(before) && after.turnId !== before.turnId
    ? Effect.gen(function*() {
      const { gateway, llmStreams } = env
      yield* FiberMap.remove(llmStreams, before.conversationId)
      yield* gateway.abort(turnRefOf(before))
      yield* gateway.finish(turnRefOf(before), Command.Canceled({ reason: SUPERSEDED_REASON }), after, turnUsageOf(before))
    })
    : Effect.void

const perform = (env: RunnerEnv, actor: Actor, acc: ActorState, command: Command): Effect.Effect<ActorState> =>
  Command.$match(command, {
    ContinueLlm: () => Effect.succeed(acc),
    WaitInput: () => Effect.succeed(acc),
    CallLlm: (call) => Effect.as(startModelCall(env, actor, call), acc),
    CallClient: ({ operationId, toolCall }) =>
      Effect.sync(() => Metrics.countToolCall(env.options.classifyTool(toolCall).kind)).pipe(
        Effect.zipRight(env.store.markOperationSent(operationId)),
        Effect.zipRight(env.gateway.dispatch(turnRefOf(acc.runtime.committed), {
          operationId,
          toolCall,
          modelCallId: acc.runtime.committed.waiting?.callId ?? "",
          resend: false
        })),
        // Done at once (a tool the server keeps): its result goes in after this input.
        Effect.flatMap((done) =>
          done === undefined ? Effect.void : offerEffect(actor, Envelope.Apply({ input: Input.ToolResult({ message: done }), inputId: `${operationId}:result` }))
        ),
        Effect.catchAll((error) => Effect.logError("runner: could not mark an operation sent", error)),
        Effect.as(acc)
      ),
    Final: (outcome) => endTurn(env, actor, acc, outcome),
    Failed: (outcome) => endTurn(env, actor, acc, outcome),
    Canceled: (outcome) => endTurn(env, actor, acc, outcome)
  })

const endTurn = (env: RunnerEnv, actor: Actor, acc: ActorState, outcome: TurnOutcome) =>
  Effect.gen(function*() {
    const { gateway, llmStreams } = env
    // The end goes out without waiting for the model stream to wind down at its own (normal)
    // scheduling priority, behind a busy server's backlog (`internal/Scheduler.ts`). Its late
    // events name a call the committed state no longer runs, and change nothing.
    const stream = yield* Effect.option(FiberMap.get(llmStreams, actor.conversationId))
    if (Option.isSome(stream)) yield* Fiber.interruptFork(stream.value)
    const turn = turnRefOf(acc.runtime.committed)
    Metrics.countTurnFinished(outcome._tag === "Final" ? outcome.reason : outcome._tag.toLowerCase())
    if (outcome._tag === "Canceled") yield* gateway.abort(turn)
    // From the committed answers, once: a turn recovered after a restart counts the calls the previous process made too.
    const usage = turnUsageOf(acc.runtime.committed)
    yield* logTurn(env.turnClock, env.options, acc.runtime.committed, outcome, usage)
    yield* gateway.finish(turn, outcome, acc.runtime.committed, usage)
    return acc
  })
