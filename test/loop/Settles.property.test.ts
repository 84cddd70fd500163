/**
 * What the runner takes from a transition without deriving it: that only a model call's end
 * can change the committed state (the delta fast path applies everything else without a
 * commit), the model call and the client operation each input settles, and a dispatched tool
 * call's position. Properties over generated conversations, with and without compactions.
 */
import { assert, describe, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import { messageHash } from "../../src/Llm.js"
import { endsModelCall, makeTransition } from "../../src/Loop.js"
import type { Policy } from "../../src/Loop.js"
import { scenarioArb, simulate, testPolicy } from "../support/LoopScenario.js"
import type { Simulation } from "../support/LoopScenario.js"

type Violation = string | null

const compactingPolicy = (window: number): Policy => ({
  ...testPolicy,
  maxLlmCallsPerTurn: 16,
  compaction: { contextWindowOf: () => window, auto: true, threshold: 0.6, tailShare: 0.2, summaryMaxTokens: 64, elideToolResultChars: 16 },
  promptIdOf: (message) => messageHash(message)
})

const options = { fastCheck: { numRuns: 200 } }

/** Every stream event but a call's end keeps the committed state, settles nothing and lets the stream go on (or waits). */
const checkOnlyEndsCommit = (sim: Simulation): Violation => {
  for (const { before, input, transition: t } of sim.log) {
    if (input._tag !== "LlmEvent" || endsModelCall(input.event)) continue
    if (t.state.committed !== before.committed) return `${input.event._tag} changed the committed state`
    if (t.command._tag !== "ContinueLlm" && t.command._tag !== "WaitInput") return `${input.event._tag} gave ${t.command._tag}`
    if (t.settles.modelCall !== undefined || t.settles.operation !== undefined) return `${input.event._tag} settled something`
  }
  return null
}

/** A model call is settled exactly when the state stops waiting on it, once, and committed only by its own Done. */
const checkSettledCalls = (sim: Simulation): Violation => {
  const settled = new Set<string>()
  for (const { before, input, transition: t } of sim.log) {
    const active = before.committed.status === "waitingLlm" ? before.committed.activeCallId : null
    const ended = active !== null && t.state.committed.activeCallId !== active
    const call = t.settles.modelCall
    if (ended !== (call !== undefined)) return `${input._tag}: call ${active} ${ended ? "ended unsettled" : "settled while still read"}`
    if (call === undefined) continue
    if (call.callId !== active) return `${input._tag} settled ${call.callId}, not the active ${active}`
    if (settled.has(call.callId)) return `${call.callId} settled twice`
    settled.add(call.callId)
    const done = input._tag === "LlmEvent" && input.event._tag === "Done" ? input.event : undefined
    if ((call.status === "committed") !== (done !== undefined)) return `${call.callId} is ${call.status} after ${input._tag}`
    if (call.status === "committed" && call.message !== done!.message) return `${call.callId} settled with another message`
  }
  return null
}

/** A tool result completes the operation of the call it answers when that call was dispatched (once), else it is held. */
const checkCompletedOperations = (sim: Simulation): Violation => {
  const completed = new Set<string>()
  for (const { before, input, transition: t } of sim.log) {
    const operation = t.settles.operation
    if (input._tag !== "ToolResult") {
      if (operation !== undefined) return `${input._tag} completed an operation`
      continue
    }
    if (t.state.committed === before.committed) continue
    const waiting = before.committed.waiting!
    if (operation === undefined) {
      if (!(t.state.committed.waiting?.held.some((h) => h.result === input.message) ?? false)) return "a result for a dispatched call completed nothing"
      continue
    }
    const position = waiting.toolCalls.findIndex((call) => call.operationId === operation.operationId)
    if (position < 0 || position >= waiting.dispatched) return `${operation.operationId} completed but never dispatched`
    if (waiting.toolCalls[position]!.toolCall.id !== input.message.toolCallId || operation.result !== input.message) return `${operation.operationId} completed by another call's result`
    if (completed.has(operation.operationId)) return `${operation.operationId} completed twice`
    completed.add(operation.operationId)
  }
  return null
}

/** A CallClient names its call's position among the waiting tool calls. */
const checkDispatchPositions = (sim: Simulation): Violation => {
  for (const { transition: t } of sim.log) {
    if (t.command._tag !== "CallClient") continue
    const at = t.state.committed.waiting?.toolCalls[t.command.position]
    if (at?.operationId !== t.command.operationId) return `${t.command.operationId} is not at position ${t.command.position}`
  }
  return null
}

const checkAll = (sim: Simulation): Violation =>
  checkOnlyEndsCommit(sim) ?? checkSettledCalls(sim) ?? checkCompletedOperations(sim) ?? checkDispatchPositions(sim)

describe("what a transition settles", () => {
  it.prop(
    "only a call's end commits; each model call and client operation is settled once, when it ends; a dispatch names its position",
    [scenarioArb],
    ([scenario]) => {
      assert.isNull(checkAll(simulate(makeTransition(testPolicy), scenario)))
    },
    options
  )

  it.prop("the same with compactions anywhere (summary calls, failed summaries)", [scenarioArb, fc.integer({ min: 120, max: 600 })], ([scenario, window]) => {
    assert.isNull(checkAll(simulate(makeTransition(compactingPolicy(window)), scenario)))
  }, options)
})
