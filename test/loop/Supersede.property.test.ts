/**
 * Two clients on one conversation (issue 39, finding 2), as properties of the pure loop: random
 * interleavings of client A's and client B's new turns (some naming a shorter history: a
 * rewind), A's follow-ups, the model's deltas (text, thinking, a tool call still streaming), a
 * stream that starts over, its end (an answer, with or without tool calls, or an error), tool
 * results, cancels, and late events of calls that are no longer read. Whatever the order:
 * - at most one model call is open at any moment (open from its `CallLlm` until the transition
 *   that settles it), and the state waits on exactly that call;
 * - the history only grows, except by a rewind a new turn asks for, which opens a new segment
 *   at the journal's end holding a prefix of the history;
 * - no answer is lost or duplicated: a call's `Done` appends its message, once; a call a new
 *   turn supersedes leaves the text it had streamed (what its client saw, since the stream last
 *   started), once, as the first message the new turn appends, without its thinking or tool
 *   calls; a cancel or an error appends nothing (DESIGN.md §4.6); nothing else appends an answer.
 */
import { assert, describe, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import { messageHash, serializeMessage } from "../../src/Llm.js"
import type { AssistantMessage, Message, ResponseEvent, ToolCall } from "../../src/Llm.js"
import { initialRuntime, Input, makeTransition } from "../../src/Loop.js"
import type { Policy, RuntimeState, Transition, TurnSettings } from "../../src/Loop.js"
import { resultFor, testPolicy } from "../support/LoopScenario.js"

const policy: Policy = { ...testPolicy, maxLlmCallsPerTurn: 6, promptIdOf: (message) => messageHash(message) }
const transition = makeTransition(policy)

// =============================================================================
// Actions and their interpretation against the state
// =============================================================================

type Action =
  | { readonly _tag: "Start"; readonly client: "A" | "B"; readonly text: string; readonly keep: number | null }
  | { readonly _tag: "FollowUp"; readonly text: string }
  | { readonly _tag: "Delta"; readonly kind: "text" | "thinking" | "toolCall"; readonly text: string }
  | { readonly _tag: "StreamStart" }
  | { readonly _tag: "Done"; readonly tools: number }
  | { readonly _tag: "Error"; readonly reason: "error" | "aborted" }
  | { readonly _tag: "ToolResult"; readonly pick: number }
  | { readonly _tag: "Cancel" }
  | { readonly _tag: "Late"; readonly pick: number; readonly done: boolean }

const words = fc.string({ unit: "grapheme", minLength: 1, maxLength: 8 })

const actionArb: fc.Arbitrary<Action> = fc.oneof(
  { weight: 2, arbitrary: fc.record({ _tag: fc.constant("Start" as const), client: fc.constantFrom("A" as const, "B" as const), text: words, keep: fc.option(fc.nat(12), { freq: 2 }) }) },
  { weight: 1, arbitrary: fc.record({ _tag: fc.constant("FollowUp" as const), text: words }) },
  { weight: 8, arbitrary: fc.record({ _tag: fc.constant("Delta" as const), kind: fc.constantFrom("text" as const, "text" as const, "text" as const, "thinking" as const, "toolCall" as const), text: words }) },
  { weight: 1, arbitrary: fc.constant({ _tag: "StreamStart" as const }) },
  { weight: 2, arbitrary: fc.record({ _tag: fc.constant("Done" as const), tools: fc.constantFrom(0, 0, 1, 2) }) },
  { weight: 1, arbitrary: fc.record({ _tag: fc.constant("Error" as const), reason: fc.constantFrom("error" as const, "aborted" as const) }) },
  { weight: 3, arbitrary: fc.record({ _tag: fc.constant("ToolResult" as const), pick: fc.nat() }) },
  { weight: 1, arbitrary: fc.constant({ _tag: "Cancel" as const }) },
  { weight: 1, arbitrary: fc.record({ _tag: fc.constant("Late" as const), pick: fc.nat(), done: fc.boolean() }) }
)

const actionsArb = fc.array(actionArb, { minLength: 1, maxLength: 60, size: "large" }).map((actions): ReadonlyArray<Action> => [
  { _tag: "Start", client: "A", text: "first", keep: null },
  ...actions
])

const settingsOf = (client: "A" | "B"): TurnSettings => ({ model: "fake-model", mode: "agent", requestId: `req-${client}` })

/** What a model call streams, as a provider adapter would: one text block, one thinking block, one tool call. */
interface CallStream {
  text: string
  thinking: string
  toolCall: ToolCall | undefined
}

interface Entry {
  readonly before: RuntimeState
  readonly input: Input
  readonly t: Transition
}

const TEXT = 0
const THINKING = 1
const TOOL = 2

const answerOf = (stream: CallStream, tools: ReadonlyArray<ToolCall>): AssistantMessage => ({
  role: "assistant",
  content: [
    ...(stream.thinking === "" ? [] : [{ type: "thinking" as const, thinking: stream.thinking, signature: "sig" }]),
    ...(stream.text === "" ? [] : [{ type: "text" as const, text: stream.text }]),
    ...tools
  ],
  api: "test",
  provider: "fake",
  model: "fake-model",
  usage: { input: 10, output: 5, cacheRead: 0, cacheWrite: 0, reasoning: 0 },
  stopReason: tools.length > 0 ? "toolUse" : "stop"
})

/** Runs the actions through the loop; each becomes at most a few inputs, made from the state it finds. */
const simulate = (actions: ReadonlyArray<Action>): ReadonlyArray<Entry> => {
  const log: Array<Entry> = []
  let state = initialRuntime("conv-1")
  const streams = new Map<string, CallStream>()
  const calls: Array<string> = []
  let toolCounter = 0
  const feed = (input: Input) => {
    const t = transition(state, input)
    log.push({ before: state, input, t })
    state = t.state
  }
  const active = (): string | undefined => {
    const committed = state.committed
    return committed.status === "waitingLlm" && committed.activeCallId !== null ? committed.activeCallId : undefined
  }
  const streamOf = (callId: string): CallStream => {
    let stream = streams.get(callId)
    if (stream === undefined) {
      stream = { text: "", thinking: "", toolCall: undefined }
      streams.set(callId, stream)
      calls.push(callId)
    }
    return stream
  }
  const event = (callId: string, e: ResponseEvent) => feed(Input.LlmEvent({ callId, event: e }))

  for (const action of actions) {
    const callId = active()
    switch (action._tag) {
      case "Start": {
        const messages = state.committed.messages
        const clientHistory = action.keep === null
          ? undefined
          : { promptIds: messages.slice(0, action.keep % (messages.length + 1)).map((m) => messageHash(m)) }
        feed(Input.Start({
          message: { role: "user", content: [{ type: "text", text: `${action.client}: ${action.text}` }] },
          context: [],
          settings: settingsOf(action.client),
          ...(clientHistory === undefined ? {} : { clientHistory })
        }))
        break
      }
      case "FollowUp":
        feed(Input.UserMessage({ message: { role: "user", content: [{ type: "text", text: `A+: ${action.text}` }] } }))
        break
      case "Delta": {
        if (callId === undefined) break
        const stream = streamOf(callId)
        if (action.kind === "text") {
          stream.text += action.text
          event(callId, { _tag: "TextDelta", index: TEXT, delta: action.text })
        } else if (action.kind === "thinking") {
          stream.thinking += action.text
          event(callId, { _tag: "ThinkingDelta", index: THINKING, delta: action.text })
        } else {
          if (stream.toolCall === undefined) {
            stream.toolCall = { type: "toolCall", id: `tool-${++toolCounter}`, name: "read", arguments: "" }
            event(callId, { _tag: "ToolCallStart", index: TOOL, id: stream.toolCall.id, name: stream.toolCall.name })
          }
          stream.toolCall = { ...stream.toolCall, arguments: stream.toolCall.arguments + action.text }
          event(callId, { _tag: "ToolCallDelta", index: TOOL, delta: action.text })
        }
        break
      }
      case "StreamStart": {
        if (callId === undefined) break
        // The stream starts over (a retried attempt): what it streamed before is discarded.
        streams.set(callId, { text: "", thinking: "", toolCall: undefined })
        event(callId, { _tag: "Start" })
        break
      }
      case "Done": {
        if (callId === undefined) break
        const stream = streamOf(callId)
        const tools = Array.from({ length: action.tools }, (_, i): ToolCall => ({ type: "toolCall", id: `tool-${++toolCounter}`, name: i === 0 ? "read" : "shell", arguments: "{}" }))
        const message = answerOf(stream, tools)
        event(callId, { _tag: "Done", reason: message.stopReason, message })
        break
      }
      case "Error":
        if (callId === undefined) break
        event(callId, { _tag: "Error", reason: action.reason, message: action.reason === "aborted" ? "aborted" : "upstream 500", retryable: false })
        break
      case "ToolResult": {
        const waiting = state.committed.waiting
        if (state.committed.status !== "waitingClient" || waiting === null) break
        const open = waiting.toolCalls.slice(waiting.appended)
        const call = open[action.pick % open.length]!
        feed(Input.ToolResult({ message: resultFor(call.toolCall, false) }))
        break
      }
      case "Cancel":
        feed(Input.Cancel({ reason: "user_stopped_generation" }))
        break
      case "Late": {
        const old = calls.filter((id) => id !== callId)
        if (old.length === 0) break
        const late = old[action.pick % old.length]!
        event(late, action.done
          ? { _tag: "Done", reason: "stop", message: answerOf({ text: "late answer", thinking: "", toolCall: undefined }, []) }
          : { _tag: "TextDelta", index: TEXT, delta: "late" })
        break
      }
    }
    // Every call the loop opens gets a stream record (so that late events can name it).
    const opened = active()
    if (opened !== undefined) streamOf(opened)
  }
  return log
}

// =============================================================================
// Invariants
// =============================================================================

type Violation = string | null

const describeInput = (input: Input): string => (input._tag === "LlmEvent" ? `LlmEvent(${input.event._tag}, ${input.callId})` : input._tag)

const isRewind = (entry: Entry): boolean => entry.t.state.committed.segment.start !== entry.before.committed.segment.start

/** At most one model call open at any moment, and the state waits on exactly that one. */
const checkOneOpenCall = (log: ReadonlyArray<Entry>): Violation => {
  let open: string | null = null
  for (const { input, t } of log) {
    const settled = t.settles.modelCall
    if (settled !== undefined) {
      if (settled.callId !== open) return `${describeInput(input)} settled ${settled.callId}, but the open call is ${open}`
      open = null
    }
    if (t.command._tag === "CallLlm") {
      if (open !== null) return `${describeInput(input)} opened ${t.command.callId} while ${open} is open`
      open = t.command.callId
    }
    const committed = t.state.committed
    const waitingOn = committed.status === "waitingLlm" ? committed.activeCallId : null
    if (waitingOn !== open) return `after ${describeInput(input)} the state waits on ${waitingOn}, the open call is ${open}`
  }
  return null
}

const serialized = (messages: ReadonlyArray<Message>) => messages.map(serializeMessage)

/** The history only grows, except by a rewind a new turn asked for: a new segment at the journal's end, a prefix of the history. */
const checkAppendOnly = (log: ReadonlyArray<Entry>): Violation => {
  for (const entry of log) {
    const before = entry.before.committed
    const after = entry.t.state.committed
    const was = serialized(before.messages)
    const now = serialized(after.messages)
    if (!isRewind(entry)) {
      if (now.length < was.length || was.some((m, i) => now[i] !== m)) return `${describeInput(entry.input)} rewrote the history`
      continue
    }
    if (entry.input._tag !== "Start" || entry.input.clientHistory === undefined || after.segment.kind !== "rewind") {
      return `${describeInput(entry.input)} opened a ${after.segment.kind} segment`
    }
    if (after.segment.start !== before.segment.start + before.messages.length) {
      return `a rewind opened its segment at ${after.segment.start}, not at the journal's end ${before.segment.start + before.messages.length}`
    }
    const kept = after.segment.kept
    if (kept > was.length || was.slice(0, kept).some((m, i) => now[i] !== m)) return "a rewind kept something other than a prefix of the history"
  }
  return null
}

const textOf = (message: AssistantMessage): string => message.content.map((block) => (block.type === "text" ? block.text : "")).join("")

/** No answer lost or duplicated: each call's end appends its answer once (a superseded call: the text it streamed); nothing else appends one. */
const checkAnswers = (log: ReadonlyArray<Entry>): Violation => {
  const streamed = new Map<string, string>()
  for (const entry of log) {
    const { input, t } = entry
    if (input._tag === "LlmEvent") {
      for (const e of t.emit) {
        if (e._tag === "Start") streamed.set(input.callId, "")
        if (e._tag === "TextDelta") streamed.set(input.callId, (streamed.get(input.callId) ?? "") + e.delta)
      }
    }
    const before = entry.before.committed
    const after = t.state.committed
    const added = isRewind(entry) ? after.messages.slice(after.segment.kept) : after.messages.slice(before.messages.length)
    const answers = added.filter((m): m is AssistantMessage => m.role === "assistant")
    const settled = t.settles.modelCall
    const summary = before.compaction !== null
    if (settled?.status === "committed") {
      if (summary) continue
      if (answers.length !== 1 || answers[0] !== settled.message) return `the Done of ${settled.callId} appended ${answers.length} answers`
      continue
    }
    const superseded = settled !== undefined && (input._tag === "Start" || input._tag === "Summarize")
    const text = superseded && !summary ? streamed.get(settled.callId) ?? "" : ""
    if (text === "" || isRewind(entry)) {
      if (answers.length > 0) return `${describeInput(input)} appended ${answers.length} answers${settled === undefined ? "" : ` ending ${settled.callId} (${settled.status})`}`
      continue
    }
    const partial = added[0]
    if (answers.length !== 1 || partial?.role !== "assistant") return `the superseded ${settled!.callId} left ${answers.length} answers, first appended: ${partial?.role}`
    if (textOf(partial) !== text) return `the superseded ${settled!.callId} streamed ${JSON.stringify(text)} but left ${JSON.stringify(textOf(partial))}`
    if (partial.content.some((block) => block.type !== "text")) return `the superseded ${settled!.callId} left thinking or tool calls`
  }
  return null
}

const options = { fastCheck: { numRuns: 400 } }

describe("two clients on one conversation (the pure loop)", () => {
  it.prop("at most one model call is open at any moment", [actionsArb], ([actions]) => {
    assert.isNull(checkOneOpenCall(simulate(actions)))
  }, options)

  it.prop("the history only grows, except by a rewind a new turn asks for", [actionsArb], ([actions]) => {
    assert.isNull(checkAppendOnly(simulate(actions)))
  }, options)

  it.prop("no answer is lost or duplicated: a superseded call leaves what it streamed, once", [actionsArb], ([actions]) => {
    assert.isNull(checkAnswers(simulate(actions)))
  }, options)

  it("the generated interleavings reach what the properties speak of", () => {
    const reached = { supersededWithText: 0, supersededSilent: 0, supersededWhileTools: 0, rewindWhileBusy: 0, partialToolCallDropped: 0, canceledWithText: 0, late: 0 }
    for (const actions of fc.sample(actionsArb, { numRuns: 400, seed: 39 })) {
      for (const entry of simulate(actions)) {
        const { before, input, t } = entry
        if (input._tag === "LlmEvent" && before.committed.activeCallId !== input.callId) reached.late++
        const text = before.pending?.blocks.some((b) => b?.kind === "text" && b.text !== "") === true
        if (input._tag === "Cancel" && text) reached.canceledWithText++
        if (input._tag !== "Start" || before.committed.status === "ready" || before.committed.status === "final" || before.committed.status === "failed" || before.committed.status === "canceled") continue
        if (isRewind(entry)) reached.rewindWhileBusy++
        if (before.committed.status === "waitingClient") reached.supersededWhileTools++
        else if (text) reached.supersededWithText++
        else reached.supersededSilent++
        if (text && before.pending?.blocks.some((b) => b?.kind === "toolCall") === true && t.settles.modelCall !== undefined) reached.partialToolCallDropped++
      }
    }
    for (const [branch, count] of Object.entries(reached)) assert.isAbove(count, 0, `no interleaving reached ${branch}`)
  })
})
