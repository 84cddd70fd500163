/**
 * Questions to the client through the real loop, the real policy (`Prompt.ts`) and the real tool
 * machines (`Tools.ts`): a model message naming several CreatePlan / AskQuestion / SwitchMode /
 * WebFetch calls, the client's answers arriving in any order, some twice. Properties: each
 * answer is appended exactly once, in call order; the mode after the step is the one the last
 * approved switch (in call order) named, and the next request offers that mode's tools.
 */
import { assert, describe, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import type { ToolCall, ToolResultMessage } from "../src/Llm.js"
import { Command, Input, initialRuntime, makeTransition } from "../src/Loop.js"
import type { Policy, RuntimeState, TurnSettings } from "../src/Loop.js"
import * as Prompt from "../src/Prompt.js"
import * as Tools from "../src/Tools.js"
import type { CursorMode, QueryReply, ToolStep } from "../src/Tools.js"
import { assistantMessageOf, eventsOf, permute } from "./support/LoopScenario.js"

const policy: Policy = { ...Prompt.policy(8), settingsAfter: Prompt.settingsAfter }
const transition = makeTransition(policy)

type CallSpec =
  | { readonly kind: "switch"; readonly target: CursorMode; readonly approve: boolean }
  | { readonly kind: "ask"; readonly answer: "yes" | "declined" }
  | { readonly kind: "plan"; readonly ok: boolean }
  | { readonly kind: "fetch"; readonly approve: boolean }

const callArb: fc.Arbitrary<CallSpec> = fc.oneof(
  fc.record({ kind: fc.constant("switch" as const), target: fc.constantFrom<CursorMode>(...Tools.SWITCHABLE_MODES), approve: fc.boolean() }),
  fc.record({ kind: fc.constant("ask" as const), answer: fc.constantFrom("yes" as const, "declined" as const) }),
  fc.record({ kind: fc.constant("plan" as const), ok: fc.boolean() }),
  fc.record({ kind: fc.constant("fetch" as const), approve: fc.boolean() })
)

const scenarioArb = fc.record({
  startMode: fc.constantFrom<CursorMode>("agent", "ask", "plan", "debug", "triage", "project", "multitask"),
  calls: fc.array(callArb, { minLength: 1, maxLength: 5 }),
  order: fc.array(fc.nat(), { minLength: 5, maxLength: 5 }),
  duplicates: fc.array(fc.boolean(), { minLength: 5, maxLength: 5 })
})

const toolCallOf = (spec: CallSpec, index: number): ToolCall => {
  const id = `call-${index}`
  switch (spec.kind) {
    case "switch":
      return { type: "toolCall", id, name: "SwitchMode", arguments: JSON.stringify({ target_mode_id: spec.target }) }
    case "ask":
      return { type: "toolCall", id, name: "AskQuestion", arguments: JSON.stringify({ questions: [{ id: "q", prompt: "Go?", options: [{ id: "y", label: "yes" }] }] }) }
    case "plan":
      return { type: "toolCall", id, name: "CreatePlan", arguments: JSON.stringify({ name: "P", plan: "do it" }) }
    case "fetch":
      return { type: "toolCall", id, name: "WebFetch", arguments: JSON.stringify({ url: "https://example.com/" }) }
  }
}

const replyOf = (spec: CallSpec): QueryReply => {
  switch (spec.kind) {
    case "switch":
      return spec.approve
        ? { case: "switchModeRequestResponse", value: { $typeName: "agent.v1.SwitchModeRequestResponse", result: { case: "approved", value: { $typeName: "agent.v1.SwitchModeRequestResponse.Approved" } } } }
        : { case: "switchModeRequestResponse", value: { $typeName: "agent.v1.SwitchModeRequestResponse", result: { case: "rejected", value: { $typeName: "agent.v1.SwitchModeRequestResponse.Rejected", reason: "no" } } } }
    case "ask":
      return {
        case: "askQuestionInteractionResponse",
        value: {
          $typeName: "agent.v1.AskQuestionInteractionResponse",
          result: {
            $typeName: "agent.v1.AskQuestionResult",
            result: spec.answer === "yes"
              ? { case: "success", value: { $typeName: "agent.v1.AskQuestionSuccess", answers: [{ $typeName: "agent.v1.AskQuestionSuccess.Answer", questionId: "q", selectedOptionIds: ["y"], freeformText: "" }] } }
              : { case: "rejected", value: { $typeName: "agent.v1.AskQuestionRejected", reason: "later" } }
          }
        }
      }
    case "plan":
      return {
        case: "createPlanRequestResponse",
        value: {
          $typeName: "agent.v1.CreatePlanRequestResponse",
          result: {
            $typeName: "agent.v1.CreatePlanResult",
            planUri: "file:///p.plan.md",
            result: spec.ok ? { case: "success", value: { $typeName: "agent.v1.CreatePlanSuccess" } } : { case: "error", value: { $typeName: "agent.v1.CreatePlanError", error: "disk full" } }
          }
        }
      }
    case "fetch":
      return spec.approve
        ? { case: "webFetchRequestResponse", value: { $typeName: "agent.v1.WebFetchRequestResponse", result: { case: "approved", value: { $typeName: "agent.v1.WebFetchRequestResponse.Approved" } } } }
        : { case: "webFetchRequestResponse", value: { $typeName: "agent.v1.WebFetchRequestResponse", result: { case: "rejected", value: { $typeName: "agent.v1.WebFetchRequestResponse.Rejected", reason: "no" } } } }
  }
}

/** Runs one tool call's machine as the transport does: its query, the client's answer, the server's work (a page). */
const resultOf = (call: ToolCall, spec: CallSpec, mode: CursorMode): ToolResultMessage => {
  let step: ToolStep = Tools.startTool(call, { mcpTools: [], todos: [], mode }).step
  for (let guard = 0; guard < 4; guard++) {
    switch (step._tag) {
      case "Done":
        return step.outcome.message
      case "Query":
        if (!Tools.isQueryRun(step.run)) throw new Error("a query step without a query run")
        step = Tools.onQueryReply(step.run, replyOf(spec))
        break
      case "Work": {
        const run = step.run
        if (run._tag !== "WebFetch" && run._tag !== "WebSearch") throw new Error("work for a tool that does none")
        step = Tools.onWorkDone(run, Tools.WorkResult.Fetched({ url: "https://example.com/", markdown: "# Example", truncated: false }))
        break
      }
      default:
        throw new Error(`unexpected step ${step._tag}`)
    }
  }
  throw new Error("the machine did not finish")
}

const settings = (mode: CursorMode): TurnSettings => ({ model: "fake-model", mode, webTools: { search: false, fetch: true } })

describe("Questions to the client through the loop", () => {
  it.prop("each answer is appended once, in call order; the mode is the last approved switch's; the next request offers its tools", [scenarioArb], ([scenario]) => {
    let state: RuntimeState = initialRuntime("conv-q")
    let command = transition(state, Input.Start({ message: { role: "user", content: [{ type: "text", text: "go" }] }, context: [], settings: settings(scenario.startMode) }))
    state = command.state
    assert.strictEqual(command.command._tag, "CallLlm")
    if (command.command._tag !== "CallLlm") return
    const callId = command.command.callId
    const calls = scenario.calls.map(toolCallOf)
    const message = assistantMessageOf(
      { thinking: [], texts: [], toolCalls: [], stop: "natural", cuts: [], resultOrder: [], resultIsError: false, duplicateDone: false, lateEventFirst: false, duplicateResult: false, failure: null },
      calls
    )
    for (const event of eventsOf(message, [])) {
      command = transition(state, Input.LlmEvent({ callId, event }))
      state = command.state
    }

    // The results the machines give, each for the mode in effect when its call is dispatched (in call order).
    let mode = scenario.startMode
    const results = calls.map((call, index) => {
      const spec = scenario.calls[index]!
      const result = resultOf(call, spec, mode)
      const switched = Tools.switchedModeOf(result.toolName, result.isError, result.content.map((c) => (c.type === "text" ? c.text : "")).join(""))
      if (switched !== undefined) mode = switched
      return result
    })
    const expectedMode = mode

    const deliveries = permute(results, scenario.order).flatMap((result, index) => (scenario.duplicates[index] === true ? [result, result] : [result]))
    let last: Command = command.command
    for (const result of deliveries) {
      const next = transition(state, Input.ToolResult({ message: result }))
      state = next.state
      if (next.command._tag !== "WaitInput") last = next.command
    }

    const committed = state.committed.messages
    const appended = committed.slice(committed.findIndex((m) => m.role === "assistant") + 1)
    assert.deepStrictEqual(appended.map((m) => (m.role === "toolResult" ? m.toolCallId : m.role)), calls.map((call) => call.id), "each answer once, in call order")
    assert.deepStrictEqual(appended, results, "the answers as the machines gave them")
    assert.strictEqual(state.committed.settings?.mode, expectedMode)
    assert.strictEqual(last._tag, "CallLlm")
    if (last._tag === "CallLlm") {
      const expectedTools = Prompt.buildTools({ conversationId: "conv-q", turnId: "", settings: settings(expectedMode) })
      assert.deepStrictEqual(last.request.tools.map((tool) => tool.name), expectedTools.map((tool) => tool.name))
      assert.includeMembers(last.request.tools.map((tool) => tool.name), Tools.toolCatalog(expectedMode, [], { search: false, fetch: true }).map((tool) => tool.name))
      assert.include(last.request.systemPrompt, `${expectedMode} mode`)
    }
  }, { fastCheck: { numRuns: 200 } })
})
