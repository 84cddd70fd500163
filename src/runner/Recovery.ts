/**
 * Restart recovery: what a previous process left in flight is resumed by each conversation's
 * actor once it has loaded the committed state (`resume`): a model call is re-issued with its
 * exact saved request, a read-only tool call is re-sent, any other tool call is reported to the
 * model as interrupted. `recover` asks every such conversation, then settles what no running
 * turn holds.
 */
import { Deferred, Effect, FiberMap, Option } from "effect"
import { solo } from "../Cluster.js"
import type { ClusterService } from "../Cluster.js"
import type { ToolResultMessage } from "../Llm.js"
import { Command, Input } from "../Loop.js"
import { Envelope, offerEffect, turnRefOf } from "./Actor.js"
import type { Actor, ActorState, RecoveryOutcome, RunnerEnv } from "./Actor.js"
import { startModelCall } from "./ModelCall.js"

export const resume = (env: RunnerEnv, actor: Actor, acc: ActorState) =>
  Effect.gen(function*() {
    const { gateway, options, store } = env
    const state = acc.runtime.committed
    const turn = turnRefOf(state)
    // This process streams it already (a takeover asked for a conversation it runs): nothing to resume.
    if (yield* FiberMap.has(env.llmStreams, actor.conversationId)) return "none" as const
    if (state.status === "waitingLlm" && state.activeCallId !== null) {
      const saved = yield* store.loadLlmCall(state.activeCallId)
      if (Option.isSome(saved)) {
        // The exact saved request, not a rebuilt one; the half-streamed response is gone with the old process.
        yield* startModelCall(env, actor, Command.CallLlm({
          callId: saved.value.callId,
          model: saved.value.model,
          request: saved.value.request,
          messagesHash: saved.value.messagesHash,
          ...(state.compaction?.callId === saved.value.callId
            ? { purpose: "summary" as const, maxOutputTokens: state.compaction.maxOutputTokens }
            : { purpose: "answer" as const })
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
        yield* offerEffect(actor, Envelope.Apply({
          input: Input.ToolResult({ message: record.value.result as ToolResultMessage }),
          inputId: `${current.operationId}:result`
        }))
        return "resent" as const
      }
      if (options.classifyTool(current.toolCall).idempotent) {
        yield* store.markOperationSent(current.operationId).pipe(Effect.ignore)
        const done = yield* gateway.dispatch(turn, { operationId: current.operationId, toolCall: current.toolCall, modelCallId: waiting.callId, resend: true })
        if (done !== undefined) yield* offerEffect(actor, Envelope.Apply({ input: Input.ToolResult({ message: done }), inputId: `${current.operationId}:result` }))
        return "resent" as const
      }
      const recovered = options.recoveredResult === undefined ? undefined : yield* options.recoveredResult(current.toolCall, store)
      yield* offerEffect(actor, Envelope.Apply({
        input: Input.ToolResult({ message: recovered ?? options.interruptedResult(current.toolCall) }),
        inputId: `${current.operationId}:result`
      }))
      return recovered === undefined ? "interrupted" as const : "resent" as const
    }
    return "none" as const
  }).pipe(Effect.catchAll((error) => Effect.logError("runner: recovery failed", error).pipe(Effect.as("none" as const))))

/**
 * One conversation's actor resumes what its committed state says is in flight; what it did. With
 * other instances (a conversation taken over from one that is gone), this one becomes its home first.
 */
export const recoverOne = (env: RunnerEnv, cluster: ClusterService = solo) => (conversationId: string) =>
  Effect.gen(function*() {
    yield* cluster.adopt(conversationId).pipe(Effect.catchAll((error) => Effect.logWarning(`cluster: ${error.message}`)))
    const reply = yield* Deferred.make<RecoveryOutcome>()
    yield* env.deliver(conversationId, Envelope.Resume({ reply }))
    return yield* Deferred.await(reply)
  })

export const recover = (env: RunnerEnv) => Effect.gen(function*() {
  const { store } = env
  const inFlight = yield* store.listInFlight().pipe(Effect.orDie)
  const conversations = new Set<string>([
    ...inFlight.llmCalls.map((call) => call.conversationId),
    ...inFlight.operations.map((operation) => operation.conversationId)
  ])
  const report = { conversations: conversations.size, llmCallsReissued: 0, operationsResent: 0, operationsInterrupted: 0 }
  for (const conversationId of conversations) {
    const value = yield* recoverOne(env)(conversationId)
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
