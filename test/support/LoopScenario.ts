/**
 * Generated conversations for the loop's property tests: a scenario is a list of turns, each
 * with the model responses the fake provider will give (text, thinking, 0-5 tool calls, split
 * into arbitrary deltas), the order the client answers tool calls in, duplicated and late
 * events, stream errors, and a cancel or a follow-up message at a random input.
 *
 * `simulate` plays a scenario against a transition function the way the runner would, and
 * records every (state, input, transition). The `check*` functions each test one invariant on
 * that record and return a description of the first violation, or null.
 */
import { FastCheck as fc } from "effect"
import {
  canonicalJson,
  messagesHash,
  serializeMessage,
  toolCallsOf
} from "../../src/Llm.js"
import type { AssistantMessage, Message, ResponseEvent, ToolCall, ToolDefinition } from "../../src/Llm.js"
import { Command, initialRuntime, Input } from "../../src/Loop.js"
import type { Policy, RuntimeState, Transition, TurnSettings } from "../../src/Loop.js"

export type TransitionFn = (state: RuntimeState, input: Input) => Transition

export const testTools: ReadonlyArray<ToolDefinition> = [
  { name: "read", description: "Read a file", parameters: { type: "object", properties: { path: { type: "string" } } } },
  { name: "shell", description: "Run a command", parameters: { type: "object", properties: { command: { type: "string" } } } }
]

export const testPolicy: Policy = {
  buildPrompt: (context) => `You are a coding agent. Model: ${context.settings.model}. Turn: ${context.turnId}.`,
  buildTools: () => testTools,
  maxLlmCallsPerTurn: 8
}

// =============================================================================
// Generators
// =============================================================================

export interface ToolCallSpec {
  readonly name: string
  readonly args: string
}

export interface ResponseSpec {
  readonly thinking: ReadonlyArray<{ readonly text: string; readonly signature: string }>
  readonly texts: ReadonlyArray<string>
  readonly toolCalls: ReadonlyArray<ToolCallSpec>
  /** "natural": toolUse when there are tool calls, else stop. */
  readonly stop: "natural" | "length" | "stopDespiteTools"
  /** Seeds for where the deltas are cut. */
  readonly cuts: ReadonlyArray<number>
  /** Seeds for the order the client answers this message's tool calls in. */
  readonly resultOrder: ReadonlyArray<number>
  readonly resultIsError: boolean
  readonly duplicateDone: boolean
  readonly lateEventFirst: boolean
  readonly duplicateResult: boolean
  /** End the stream with an Error event after `errorAfter` of its events. */
  readonly failure: null | { readonly reason: "error" | "aborted"; readonly errorAfter: number }
}

export interface TurnSpec {
  readonly userText: string
  readonly context: ReadonlyArray<string>
  readonly responses: ReadonlyArray<ResponseSpec>
}

export interface Scenario {
  readonly turns: ReadonlyArray<TurnSpec>
  /** Index of the scripted input before which a Cancel is injected. */
  readonly cancelAt: number | null
  /** Index of the scripted input before which a follow-up user message is injected. */
  readonly followUpAt: number | null
}

/** `arbitrary` once in `oneIn + 1` draws, else null. */
const rarely = <A>(arbitrary: fc.Arbitrary<A>, oneIn: number): fc.Arbitrary<A | null> =>
  fc.oneof({ arbitrary: fc.constant(null), weight: oneIn }, { arbitrary, weight: 1 })

const text = fc.string({ unit: "grapheme", maxLength: 24 })

const argsArb = fc
  .dictionary(fc.string({ unit: "grapheme-ascii", maxLength: 6 }), fc.oneof(text, fc.integer(), fc.boolean()), { maxKeys: 3 })
  .map((record) => JSON.stringify(record))

export const responseArb: fc.Arbitrary<ResponseSpec> = fc.record({
  thinking: fc.array(fc.record({ text, signature: fc.string({ unit: "grapheme-ascii", maxLength: 12 }) }), { maxLength: 1 }),
  texts: fc.array(text, { maxLength: 2 }),
  toolCalls: fc.array(fc.record({ name: fc.constantFrom("read", "shell", "grep"), args: argsArb }), { maxLength: 5 }),
  stop: fc.constantFrom("natural", "natural", "natural", "natural", "length", "stopDespiteTools"),
  cuts: fc.array(fc.nat(), { maxLength: 6 }),
  resultOrder: fc.array(fc.nat(), { minLength: 5, maxLength: 5 }),
  resultIsError: fc.boolean(),
  duplicateDone: fc.boolean(),
  lateEventFirst: fc.boolean(),
  duplicateResult: fc.boolean(),
  failure: rarely(fc.record({ reason: fc.constantFrom("error" as const, "aborted" as const), errorAfter: fc.nat(12) }), 8)
})

export const turnArb: fc.Arbitrary<TurnSpec> = fc.record({
  userText: text,
  context: fc.array(text, { maxLength: 2 }),
  responses: fc.array(responseArb, { minLength: 1, maxLength: 4 })
})

export const scenarioArb: fc.Arbitrary<Scenario> = fc.record({
  turns: fc.array(turnArb, { minLength: 1, maxLength: 3 }),
  cancelAt: rarely(fc.nat(60), 2),
  followUpAt: rarely(fc.nat(60), 2)
})

// =============================================================================
// From a response spec to provider events
// =============================================================================

/** Cuts `value` into pieces at positions chosen by `cuts` (code-unit safe: never inside a surrogate pair). */
export const splitText = (value: string, cuts: ReadonlyArray<number>): Array<string> => {
  const chars = Array.from(value)
  if (chars.length === 0) return []
  const points = [...new Set(cuts.map((cut) => cut % chars.length))].filter((p) => p > 0).sort((a, b) => a - b)
  const pieces: Array<string> = []
  let from = 0
  for (const point of points) {
    pieces.push(chars.slice(from, point).join(""))
    from = point
  }
  pieces.push(chars.slice(from).join(""))
  return pieces
}

export const assistantMessageOf = (spec: ResponseSpec, toolCalls: ReadonlyArray<ToolCall>): AssistantMessage => {
  const reason = spec.stop === "length" ? "length" : toolCalls.length > 0 && spec.stop === "natural" ? "toolUse" : "stop"
  return {
    role: "assistant",
    content: [
      ...spec.thinking.map((t) => ({ type: "thinking" as const, thinking: t.text, signature: t.signature })),
      ...spec.texts.map((t) => ({ type: "text" as const, text: t })),
      ...toolCalls
    ],
    api: "test",
    provider: "fake",
    model: "fake-model",
    usage: { input: 10, output: 5, cacheRead: 0, cacheWrite: 0, reasoning: 0 },
    stopReason: reason
  }
}

/** The events a provider adapter would emit for `message`, deltas cut by `cuts`. */
export const eventsOf = (message: AssistantMessage, cuts: ReadonlyArray<number>): Array<ResponseEvent> => {
  const events: Array<ResponseEvent> = [{ _tag: "Start", model: message.model }]
  message.content.forEach((block, index) => {
    switch (block.type) {
      case "thinking":
        events.push({ _tag: "ThinkingStart", index })
        for (const delta of splitText(block.thinking, cuts)) events.push({ _tag: "ThinkingDelta", index, delta })
        events.push(block.signature === undefined ? { _tag: "ThinkingEnd", index } : { _tag: "ThinkingEnd", index, signature: block.signature })
        break
      case "text":
        events.push({ _tag: "TextStart", index })
        for (const delta of splitText(block.text, cuts)) events.push({ _tag: "TextDelta", index, delta })
        events.push({ _tag: "TextEnd", index })
        break
      case "toolCall":
        events.push({ _tag: "ToolCallStart", index, id: block.id, name: block.name })
        for (const delta of splitText(block.arguments, cuts)) events.push({ _tag: "ToolCallDelta", index, delta })
        events.push({ _tag: "ToolCallEnd", index, toolCall: block })
        break
    }
  })
  events.push({ _tag: "Done", reason: message.stopReason, message })
  return events
}

/** A permutation of `items` driven by `seeds`. */
export const permute = <A>(items: ReadonlyArray<A>, seeds: ReadonlyArray<number>): Array<A> => {
  const pool = items.slice()
  const out: Array<A> = []
  let i = 0
  while (pool.length > 0) out.push(pool.splice((seeds[i++ % Math.max(seeds.length, 1)] ?? 0) % pool.length, 1)[0]!)
  return out
}

// =============================================================================
// Simulation
// =============================================================================

export interface LogEntry {
  readonly before: RuntimeState
  /** The serialized history before the input, taken at the time (so in-place mutation shows). */
  readonly historyBefore: ReadonlyArray<string>
  readonly input: Input
  readonly transition: Transition
}

export interface Simulation {
  readonly log: ReadonlyArray<LogEntry>
  readonly final: RuntimeState
  /** Tool call ids that were part of a `length`-stopped message. */
  readonly truncatedToolCallIds: ReadonlySet<string>
}

const settings: TurnSettings = { model: "fake-model", mode: "agent" }

export const simulate = (transition: TransitionFn, scenario: Scenario, conversationId = "conv-1"): Simulation => {
  const log: Array<LogEntry> = []
  const truncated = new Set<string>()
  let state = initialRuntime(conversationId)
  let scripted = 0
  let toolCounter = 0
  let override: Command | null = null
  let lastSpec: ResponseSpec = plainAnswer

  const feed = (input: Input): Command => {
    const historyBefore = state.committed.messages.map(serializeMessage)
    const result = transition(state, input)
    log.push({ before: state, historyBefore, input, transition: result })
    state = result.state
    return result.command
  }
  const feedScripted = (input: Input): Command => {
    if (scripted === scenario.cancelAt) {
      const canceled = feed(Input.Cancel({ reason: "user pressed stop" }))
      if (canceled._tag === "Canceled") override = canceled
    }
    if (scripted === scenario.followUpAt) {
      const followUp = feed(Input.UserMessage({ message: { role: "user", content: [{ type: "text", text: "also: check the tests" }] } }))
      if (followUp._tag === "CallLlm") override = followUp
    }
    scripted++
    return feed(input)
  }

  for (const turn of scenario.turns) {
    const responses = turn.responses.slice()
    let command = feedScripted(Input.Start({
      message: { role: "user", content: [{ type: "text", text: turn.userText }] },
      context: turn.context.map((t) => ({ type: "text" as const, text: t })),
      settings
    }))
    for (let guard = 0; guard < 100; guard++) {
      if (override !== null) {
        command = override
        override = null
      }
      if (command._tag === "CallLlm") {
        const spec = responses.shift() ?? plainAnswer
        lastSpec = spec
        const callId = command.callId
        const toolCalls = spec.toolCalls.map((call): ToolCall => ({
          type: "toolCall",
          id: `tool-${++toolCounter}`,
          name: call.name,
          arguments: call.args
        }))
        const message = assistantMessageOf(spec, toolCalls)
        if (message.stopReason === "length") for (const call of toolCalls) truncated.add(call.id)
        let events = eventsOf(message, spec.cuts)
        if (spec.failure !== null) {
          events = [...events.slice(0, Math.min(spec.failure.errorAfter, events.length - 1)), {
            _tag: "Error",
            reason: spec.failure.reason,
            message: spec.failure.reason === "aborted" ? "aborted by the client" : "upstream 500",
            retryable: spec.failure.reason === "error"
          }]
        }
        if (spec.lateEventFirst) feed(Input.LlmEvent({ callId: `${callId}-stale`, event: { _tag: "TextDelta", index: 0, delta: "stale" } }))
        let next: Command | null = null
        for (const event of events) {
          const result = feedScripted(Input.LlmEvent({ callId, event }))
          if (next === null && result._tag !== "ContinueLlm" && result._tag !== "WaitInput") next = result
        }
        const last = events[events.length - 1]!
        if (spec.duplicateDone) feed(Input.LlmEvent({ callId, event: last }))
        command = next ?? Command.WaitInput()
        continue
      }
      if (command._tag === "CallClient") {
        const waiting = state.committed.waiting
        if (waiting === null) break
        const spec = lastSpec
        const open = waiting.toolCalls.slice(waiting.appended)
        let next: Command | null = null
        for (const call of permute(open, spec.resultOrder)) {
          const result = feedScripted(Input.ToolResult({ message: resultFor(call.toolCall, spec.resultIsError) }))
          if (result._tag !== "WaitInput" && result._tag !== "CallClient") next = result
        }
        if (spec.duplicateResult && open[0] !== undefined) {
          feed(Input.ToolResult({ message: resultFor(open[0].toolCall, false) }))
        }
        command = next ?? Command.WaitInput()
        continue
      }
      break
    }
  }
  return { log, final: state, truncatedToolCallIds: truncated }
}

const plainAnswer: ResponseSpec = {
  thinking: [],
  texts: ["Done."],
  toolCalls: [],
  stop: "natural",
  cuts: [],
  resultOrder: [0],
  resultIsError: false,
  duplicateDone: false,
  lateEventFirst: false,
  duplicateResult: false,
  failure: null
}

export const resultFor = (call: ToolCall, isError: boolean): Message & { role: "toolResult" } => ({
  role: "toolResult",
  toolCallId: call.id,
  toolName: call.name,
  content: [{ type: "text", text: `output of ${call.name} ${call.id}` }],
  isError
})

// =============================================================================
// Invariants
// =============================================================================

type Violation = string | null

const addedMessages = (entry: LogEntry): ReadonlyArray<Message> =>
  entry.transition.state.committed.messages.slice(entry.historyBefore.length)

const isDone = (input: Input): input is Input & { _tag: "LlmEvent"; event: { _tag: "Done" } } =>
  input._tag === "LlmEvent" && input.event._tag === "Done"

/** 1. Equal state and input give a byte-equal transition. */
export const checkDeterminism = (transition: TransitionFn, sim: Simulation): Violation => {
  for (const entry of sim.log) {
    const again = canonicalJson(transition(entry.before, entry.input))
    if (again !== canonicalJson(entry.transition)) return `input ${entry.input._tag} gave two different transitions`
  }
  return null
}

/** 2. Each request's serialized messages are a strict byte prefix of the next request's. */
export const checkPrefix = (sim: Simulation): Violation => {
  let previous: string | null = null
  for (const entry of sim.log) {
    const command = entry.transition.command
    if (command._tag !== "CallLlm") continue
    const bytes = command.request.messages.map((m) => serializeMessage(m) + "\n").join("")
    if (command.messagesHash !== messagesHash(command.request.messages)) return `CallLlm ${command.callId} carries a stale messagesHash`
    if (previous !== null && !(bytes.length > previous.length && bytes.startsWith(previous))) {
      return `request ${command.callId} does not extend the previous request's messages`
    }
    previous = bytes
  }
  return null
}

/** 3. Exactly one assistant message per model call, appended by its Done and by nothing else. */
export const checkOneAssistantPerCall = (sim: Simulation): Violation => {
  const answered = new Set<string>()
  for (const entry of sim.log) {
    const assistants = addedMessages(entry).filter((m) => m.role === "assistant").length
    if (isDone(entry.input) && entry.before.committed.activeCallId === entry.input.callId) {
      if (assistants !== 1) return `Done for ${entry.input.callId} appended ${assistants} assistant messages`
      if (answered.has(entry.input.callId)) return `a second assistant message for ${entry.input.callId}`
      answered.add(entry.input.callId)
    } else if (assistants !== 0) {
      return `${entry.input._tag}${entry.input._tag === "LlmEvent" ? `(${entry.input.event._tag})` : ""} appended ${assistants} assistant messages`
    }
  }
  const total = sim.final.committed.messages.filter((m) => m.role === "assistant").length
  return total === answered.size ? null : `${total} assistant messages for ${answered.size} answered calls`
}

/** 4. A Done for a call that was already answered changes nothing. */
export const checkRepeatedDone = (sim: Simulation): Violation => {
  const answered = new Set<string>()
  for (const entry of sim.log) {
    if (!isDone(entry.input)) continue
    if (answered.has(entry.input.callId)) {
      if (canonicalJson(entry.transition.state) !== canonicalJson(entry.before)) return `a repeated Done for ${entry.input.callId} changed the state`
      if (entry.transition.emit.length > 0 || entry.transition.command._tag !== "WaitInput") return `a repeated Done for ${entry.input.callId} emitted or commanded`
    }
    answered.add(entry.input.callId)
  }
  return null
}

/** 5. Every assistant message's tool calls are followed by their results, in call order. */
export const checkToolResultOrder = (sim: Simulation): Violation => {
  const messages = sim.final.committed.messages
  const waitingOpen = sim.final.committed.waiting !== null
  for (let i = 0; i < messages.length; i++) {
    const message = messages[i]!
    if (message.role === "toolResult") {
      // A result must belong to the nearest assistant message before it.
      let j = i - 1
      while (j >= 0 && messages[j]!.role === "toolResult") j--
      const owner = messages[j]
      if (owner === undefined || owner.role !== "assistant") return `tool result ${message.toolCallId} has no assistant message before it`
    }
    if (message.role !== "assistant") continue
    const calls = toolCallsOf(message)
    for (let k = 0; k < calls.length; k++) {
      const result = messages[i + 1 + k]
      if (result === undefined && waitingOpen) break
      if (result === undefined || result.role !== "toolResult" || result.toolCallId !== calls[k]!.id) {
        return `result ${k} of message ${i} is ${result === undefined ? "missing" : result.role === "toolResult" ? result.toolCallId : result.role}, expected ${calls[k]!.id}`
      }
    }
  }
  return null
}

/** 6. Committed messages never change: each history is a prefix of the next one. */
export const checkAppendOnly = (sim: Simulation): Violation => {
  for (const entry of sim.log) {
    const after = entry.transition.state.committed.messages
    if (after.length < entry.historyBefore.length) return `${entry.input._tag} shortened the history`
    for (let i = 0; i < entry.historyBefore.length; i++) {
      if (serializeMessage(after[i]!) !== entry.historyBefore[i]) return `${entry.input._tag} rewrote message ${i}`
    }
  }
  return null
}

/** 7. A length stop never yields CallClient, and its tool calls are never run. */
export const checkLengthNeverRunsTools = (sim: Simulation): Violation => {
  for (const entry of sim.log) {
    const command = entry.transition.command
    if (isDone(entry.input) && entry.input.event.reason === "length" && command._tag === "CallClient") {
      return `Done(length) yielded CallClient ${command.toolCall.id}`
    }
    if (command._tag === "CallClient" && sim.truncatedToolCallIds.has(command.toolCall.id)) {
      return `truncated tool call ${command.toolCall.id} was dispatched`
    }
  }
  return null
}

/** 8. Errors and aborts never append an assistant message. */
export const checkErrorsNeverCommit = (sim: Simulation): Violation => {
  for (const entry of sim.log) {
    const input = entry.input
    const failing = (input._tag === "LlmEvent" && input.event._tag === "Error") || input._tag === "Cancel"
    if (failing && addedMessages(entry).some((m) => m.role === "assistant")) return `${input._tag} appended an assistant message`
  }
  return null
}

export const allInvariants = (transition: TransitionFn, sim: Simulation): ReadonlyArray<string> =>
  [
    checkDeterminism(transition, sim),
    checkPrefix(sim),
    checkOneAssistantPerCall(sim),
    checkRepeatedDone(sim),
    checkToolResultOrder(sim),
    checkAppendOnly(sim),
    checkLengthNeverRunsTools(sim),
    checkErrorsNeverCommit(sim)
  ].filter((v): v is string => v !== null)
