/**
 * The properties are only worth something if they fail when the loop is wrong. Each case
 * here wraps the real transition in a deliberately broken one and asserts that fast-check
 * finds a scenario where the named invariant reports a violation. A second test checks that
 * the generated scenarios really reach every branch the invariants talk about.
 */
import { assert, describe, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import type { AssistantMessage, Message } from "../src/Llm.js"
import { Command, makeTransition } from "../src/Loop.js"
import type { Transition } from "../src/Loop.js"
import {
  checkAppendOnly,
  checkDeterminism,
  checkErrorsNeverCommit,
  checkLengthNeverRunsTools,
  checkOneAssistantPerCall,
  checkPrefix,
  checkRepeatedDone,
  checkToolResultOrder,
  scenarioArb,
  simulate,
  testPolicy
} from "./support/LoopScenario.js"
import type { Simulation, TransitionFn } from "./support/LoopScenario.js"

const transition = makeTransition(testPolicy)

const withMessages = (t: Transition, messages: ReadonlyArray<Message>): Transition => ({
  ...t,
  state: { ...t.state, committed: { ...t.state.committed, messages } }
})

const fragment = (text: string): AssistantMessage => ({
  role: "assistant",
  content: [{ type: "text", text }],
  api: "test",
  provider: "fake",
  model: "fake-model",
  usage: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, reasoning: 0 },
  stopReason: "stop"
})

interface Mutant {
  readonly name: string
  readonly broken: TransitionFn
  readonly caughtBy: (transition: TransitionFn, sim: Simulation) => string | null
}

const mutants: ReadonlyArray<Mutant> = [
  {
    name: "text deltas appended to the history",
    broken: (state, input) => {
      const t = transition(state, input)
      if (input._tag === "LlmEvent" && input.event._tag === "TextDelta" && t.command._tag === "ContinueLlm") {
        return withMessages(t, [...t.state.committed.messages, fragment(input.event.delta)])
      }
      return t
    },
    caughtBy: (_, sim) => checkOneAssistantPerCall(sim)
  },
  {
    name: "a stream error commits the partial response",
    broken: (state, input) => {
      const t = transition(state, input)
      if (input._tag === "LlmEvent" && input.event._tag === "Error" && t.command._tag === "Failed") {
        const partial = (state.pending?.blocks ?? []).map((b) => b?.text ?? "").join("")
        return withMessages(t, [...t.state.committed.messages, fragment(partial)])
      }
      return t
    },
    caughtBy: (_, sim) => checkErrorsNeverCommit(sim)
  },
  {
    name: "a length stop runs its tool calls",
    broken: (state, input) => {
      const t = transition(state, input)
      if (input._tag === "LlmEvent" && input.event._tag === "Done" && input.event.reason === "length") {
        const call = input.event.message.content.find((b) => b.type === "toolCall")
        if (call !== undefined && call.type === "toolCall" && t.command._tag === "Final") {
          return { ...t, command: Command.CallClient({ operationId: "op", toolCall: call, position: 0 }) }
        }
      }
      return t
    },
    caughtBy: (_, sim) => checkLengthNeverRunsTools(sim)
  },
  {
    name: "a clock leaks into the state",
    broken: (state, input) => {
      const t = transition(state, input)
      return { ...t, state: { ...t.state, committed: { ...t.state.committed, turnId: `${t.state.committed.turnId}@${process.hrtime.bigint()}` } } }
    },
    caughtBy: checkDeterminism
  },
  {
    name: "the first message is edited before each request",
    broken: (state, input) => {
      const t = transition(state, input)
      if (t.command._tag !== "CallLlm") return t
      const [first, ...rest] = t.command.request.messages
      if (first === undefined || first.role !== "user") return t
      const edited: Message = { ...first, content: [...first.content, { type: "text", text: `(edited at ${rest.length})` }] }
      const messages = [edited, ...rest]
      return { ...withMessages(t, messages), command: { ...t.command, request: { ...t.command.request, messages } } }
    },
    caughtBy: (_, sim) => checkPrefix(sim) ?? checkAppendOnly(sim)
  },
  {
    name: "tool results appended in arrival order",
    broken: (state, input) => {
      const t = transition(state, input)
      const waiting = t.state.committed.waiting
      if (input._tag === "ToolResult" && waiting !== null && waiting.held.length > (state.committed.waiting?.held.length ?? 0)) {
        return withMessages(t, [...t.state.committed.messages, input.message])
      }
      return t
    },
    caughtBy: (_, sim) => checkToolResultOrder(sim)
  },
  {
    name: "a repeated Done appends its message again",
    broken: (state, input) => {
      const t = transition(state, input)
      if (input._tag === "LlmEvent" && input.event._tag === "Done" && t.state === state && input.callId.includes("/c")) {
        const seen = state.committed.messages.some((m) => m.role === "assistant" && m === (input.event as { message: AssistantMessage }).message)
        if (seen) return withMessages(t, [...state.committed.messages, input.event.message])
      }
      return t
    },
    caughtBy: (_, sim) => checkRepeatedDone(sim)
  }
]

describe("the invariants catch a broken loop", () => {
  for (const mutant of mutants) {
    it(`mutant: ${mutant.name}`, () => {
      const result = fc.check(
        fc.property(scenarioArb, (scenario) => mutant.caughtBy(mutant.broken, simulate(mutant.broken, scenario)) === null),
        { numRuns: 300, seed: 42 }
      )
      assert.isTrue(result.failed, `no scenario exposed "${mutant.name}"`)
    })
  }

  it("the generated scenarios reach every branch the invariants speak of", () => {
    const seen = {
      toolDispatch: 0, outOfOrderResult: 0, lengthStop: 0, cancel: 0, streamError: 0, abort: 0,
      repeatedDone: 0, followUpQueued: 0, staleEvent: 0, multiStepTurn: 0
    }
    for (const scenario of fc.sample(scenarioArb, { numRuns: 300, seed: 7 })) {
      const sim = simulate(transition, scenario)
      const answered = new Set<string>()
      for (const { before, input, transition: t } of sim.log) {
        if (t.command._tag === "CallClient") seen.toolDispatch++
        if (t.command._tag === "Canceled" && input._tag === "Cancel") seen.cancel++
        if (t.command._tag === "Failed" && input._tag === "LlmEvent") seen.streamError++
        if (t.command._tag === "Canceled" && input._tag === "LlmEvent") seen.abort++
        if (t.command._tag === "Final" && t.command.reason === "length") seen.lengthStop++
        if (t.command._tag === "CallLlm" && t.command.callId.endsWith("/c1")) seen.multiStepTurn++
        if (input._tag === "ToolResult" && (t.state.committed.waiting?.held.length ?? 0) > (before.committed.waiting?.held.length ?? 0)) seen.outOfOrderResult++
        if (input._tag === "UserMessage" && t.state.committed.queued.length > 0) seen.followUpQueued++
        if (input._tag === "LlmEvent" && input.callId.endsWith("-stale")) seen.staleEvent++
        if (input._tag === "LlmEvent" && input.event._tag === "Done") {
          if (answered.has(input.callId)) seen.repeatedDone++
          answered.add(input.callId)
        }
      }
    }
    console.log("branches reached in 300 scenarios:", JSON.stringify(seen))
    for (const [branch, count] of Object.entries(seen)) assert.isAbove(count, 10, `branch ${branch} reached ${count} times`)
  })
})

