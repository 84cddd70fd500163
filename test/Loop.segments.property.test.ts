/**
 * The segment invariants as properties over generated conversations, played against a loop
 * whose context window is tiny, so that automatic compactions happen often and at any point
 * (mid-turn, between tool results, after errors and cancels). The scripted responses answer
 * summary calls too: some with text, some with only tool calls or an error (a failed summary).
 */
import { assert, describe, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import { messageHash, serializeMessage, toolCallsOf } from "../src/Llm.js"
import type { Message } from "../src/Llm.js"
import { Input, makeTransition, summaryOfMessage } from "../src/Loop.js"
import type { Policy } from "../src/Loop.js"
import { checkDeterminism, scenarioArb, simulate, testPolicy } from "./support/LoopScenario.js"
import type { LogEntry, Simulation } from "./support/LoopScenario.js"

const policyFor = (window: number, tailShare: number): Policy => ({
  ...testPolicy,
  maxLlmCallsPerTurn: 16,
  compaction: { contextWindowOf: () => window, auto: true, threshold: 0.6, tailShare, summaryMaxTokens: 64, elideToolResultChars: 16 },
  promptIdOf: (message) => messageHash(message)
})
const knobsArb = fc.record({ window: fc.integer({ min: 120, max: 600 }), tailShare: fc.double({ min: 0.05, max: 0.5, noNaN: true }) })
const options = { fastCheck: { numRuns: 200 } }

const bytes = (messages: ReadonlyArray<Message>) => messages.map((m) => serializeMessage(m) + "\n").join("")

/** Within a segment each answer request extends the previous one; a summary request is the segment plus one message. */
const checkSegmentPrefix = (sim: Simulation): string | null => {
  let previous: { readonly start: number; readonly bytes: string } | null = null
  for (const entry of sim.log) {
    const command = entry.transition.command
    if (command._tag !== "CallLlm") continue
    const state = entry.transition.state.committed
    const sent = bytes(command.request.messages)
    if (command.purpose === "answer") {
      if (bytes(state.messages) !== sent) return `answer ${command.callId} does not send the segment`
      if (previous !== null && previous.start === state.segment.start && !(sent.length > previous.bytes.length && sent.startsWith(previous.bytes))) {
        return `answer ${command.callId} does not extend the previous request of its segment`
      }
      previous = { start: state.segment.start, bytes: sent }
    } else if (state.compaction?.trigger !== "overflow") {
      if (sent !== bytes([...state.messages, command.request.messages[command.request.messages.length - 1]!])) {
        return `summary ${command.callId} is not the segment plus an instruction`
      }
      if (previous !== null && previous.start === state.segment.start && !sent.startsWith(previous.bytes)) {
        return `summary ${command.callId} does not extend the last request (no cache hit)`
      }
    }
  }
  return null
}

/** A new segment opens at the end of the journal; a compaction's is [summary, the previous segment's last `kept`]. */
const checkBoundaries = (sim: Simulation): string | null => {
  for (const entry of sim.log) {
    const before = entry.before.committed
    const after = entry.transition.state.committed
    if (after.segment === before.segment) continue
    if (after.segment.start !== before.segment.start + before.messages.length) return `segment at ${after.segment.start} is not at the journal's end`
    if (after.segment.kind === "compaction") {
      if (summaryOfMessage(after.messages[0]) === undefined) return "a compaction segment does not open with the summary"
      const kept = after.segment.kept
      if (after.segment.replaced + kept !== before.messages.length) return "replaced + kept is not the previous segment's length"
      if (bytes(after.messages.slice(1)) !== bytes(before.messages.slice(before.messages.length - kept))) return "the tail is not verbatim"
      if (after.messages[1]?.role === "toolResult") return "the tail begins with a tool result"
    } else if (after.segment.kind === "rewind" && entry.input._tag !== "Start" && entry.input._tag !== "Summarize") {
      return `a rewind by ${entry.input._tag}`
    }
  }
  return null
}

/** Every answer request is a valid history: each tool call answered, in order, and no result without its call. */
const checkValidRequests = (sim: Simulation): string | null => {
  for (const entry of sim.log) {
    const command = entry.transition.command
    if (command._tag !== "CallLlm" || command.purpose !== "answer") continue
    const messages = command.request.messages
    let open: Array<string> = []
    for (const message of messages) {
      if (message.role === "toolResult") {
        if (open[0] !== message.toolCallId) return `${command.callId}: result ${message.toolCallId} is not the next open call`
        open = open.slice(1)
        continue
      }
      if (open.length > 0) return `${command.callId}: ${open.length} tool calls left unanswered`
      if (message.role === "assistant") open = toolCallsOf(message).map((call) => call.id)
    }
    if (open.length > 0) return `${command.callId}: the request ends with unanswered tool calls`
  }
  return null
}

/** An automatic compaction is tried at most once until an answer commits; a summary's Done appends no assistant message. */
const checkNoLoop = (sim: Simulation): string | null => {
  let triedSinceAnswer = false
  for (const entry of sim.log) {
    const before = entry.before.committed
    const after = entry.transition.state.committed
    const input = entry.input
    if (input._tag === "LlmEvent" && input.event._tag === "Done" && before.activeCallId === input.callId) {
      const appended = after.segment === before.segment ? after.messages.length - before.messages.length : -1
      if (before.compaction !== null && after.messages.some((m, i) => m.role === "assistant" && i >= after.messages.length - 1 && after.segment !== before.segment)) {
        return "a summary's Done appended an assistant message"
      }
      if (before.compaction === null && appended < 1 && after.segment === before.segment) return "an answer's Done appended nothing"
      if (before.compaction === null) triedSinceAnswer = false
    }
    // A new turn (a Start, a Summarize, or a message between turns) may compact again.
    if (after.turnId !== before.turnId) triedSinceAnswer = false
    const command = entry.transition.command
    if (command._tag === "CallLlm" && command.purpose === "summary" && after.compaction?.trigger !== "manual") {
      if (triedSinceAnswer) return `a second automatic compaction (${command.callId}) before any answer`
      triedSinceAnswer = true
    }
  }
  return null
}

/** The rewind property: after the conversation, a client naming the history one final turn left continues from exactly it. */
const checkRewind = (transition: ReturnType<typeof makeTransition>, sim: Simulation, pick: number): string | null => {
  const finals: Array<LogEntry> = sim.log.filter((entry) => entry.transition.command._tag === "Final")
  const state = sim.final
  const committed = state.committed
  if (finals.length === 0 || committed.status === "waitingLlm" || committed.status === "waitingClient") return null
  const chosen = finals[pick % finals.length]!.transition.state.committed
  if (chosen.segment.start !== committed.segment.start) return null
  const kept = chosen.messages
  const message = { role: "user" as const, content: [{ type: "text" as const, text: "edited" }] }
  const t = transition(state, Input.Start({
    message,
    context: [],
    settings: { model: "fake-model" },
    clientHistory: { promptIds: kept.map((m) => messageHash(m)) }
  }))
  if (t.command._tag !== "CallLlm") return `a rewound Start gave ${t.command._tag}`
  // Naming less than the last final turn left rewinds; naming all of it (a failed or canceled turn since) keeps everything.
  const rewound = kept.length < committed.checkpointed
  const expected = bytes([...(rewound ? kept : committed.messages), message])
  const sent = t.command.request.messages
  if (t.command.purpose === "answer" && bytes(sent) !== expected) {
    return `the request after the client's history sends ${sent.length} messages, expected ${rewound ? kept.length : committed.messages.length} and the new one`
  }
  if (rewound !== (t.state.committed.segment.kind === "rewind" && t.state.committed.segment !== committed.segment)) {
    return `rewound is ${t.state.committed.segment.kind}, expected a rewind: ${rewound}`
  }
  return null
}

describe("Loop segment invariants (tiny context window: compactions anywhere)", () => {
  it.prop("determinism holds with compactions and rewinds", [scenarioArb, knobsArb], ([scenario, knobs]) => {
    const transition = makeTransition(policyFor(knobs.window, knobs.tailShare))
    assert.isNull(checkDeterminism(transition, simulate(transition, scenario)))
  }, options)

  it.prop("within a segment every request extends the last; a summary request is the segment plus its instruction", [scenarioArb, knobsArb], ([scenario, knobs]) => {
    const transition = makeTransition(policyFor(knobs.window, knobs.tailShare))
    assert.isNull(checkSegmentPrefix(simulate(transition, scenario)))
  }, options)

  it.prop("a segment opens at the journal's end, with the summary and a verbatim tail that never begins with a tool result", [scenarioArb, knobsArb], ([scenario, knobs]) => {
    const transition = makeTransition(policyFor(knobs.window, knobs.tailShare))
    assert.isNull(checkBoundaries(simulate(transition, scenario)))
  }, options)

  it.prop("every answer request is a valid history: no call without its result, no result without its call", [scenarioArb, knobsArb], ([scenario, knobs]) => {
    const transition = makeTransition(policyFor(knobs.window, knobs.tailShare))
    assert.isNull(checkValidRequests(simulate(transition, scenario)))
  }, options)

  it.prop("compaction never loops, and a summary is never committed as an answer", [scenarioArb, knobsArb], ([scenario, knobs]) => {
    const transition = makeTransition(policyFor(knobs.window, knobs.tailShare))
    assert.isNull(checkNoLoop(simulate(transition, scenario)))
  }, options)

  it.prop("a client naming the history a final turn left continues from exactly that history", [scenarioArb, knobsArb, fc.nat()], ([scenario, knobs, pick]) => {
    const transition = makeTransition(policyFor(knobs.window, knobs.tailShare))
    assert.isNull(checkRewind(transition, simulate(transition, scenario), pick))
  }, options)
})
