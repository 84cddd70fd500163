/**
 * The agent loop as one pure function: `transition(state, input) -> { state, emit, command }`.
 *
 * The model only names tools; the loop decides what happens next. A turn starts with a user
 * message, asks the model, runs the tool calls it names one at a time on the client, appends
 * their results, and asks again until the model answers without tools. The outer runner
 * performs each `Command` and feeds what comes back (stream events, tool results, user
 * messages, cancels) in as the next `Input`.
 *
 * A long conversation is compacted: before a call whose estimated prompt passes a share of the
 * model's window (or once after the provider refused it as too long, or when the user asks),
 * a summary call sends the same prefix plus an instruction, and its summary opens a new history
 * segment [summary, verbatim tail]. A client whose checkpoint names a strict prefix of the
 * history (an edited earlier message, a restored checkpoint) rewinds it: a new segment holds
 * that prefix. The journal itself is never rewritten (the store appends each segment).
 *
 * Rules this module keeps, each guarded by a property test:
 * - history (`messages`, the current segment) is append-only; streamed deltas live in
 *   `pending` (memory only) and the one assistant message committed per model call is the
 *   one in `Done` (a summary call's answer becomes the new segment's summary instead);
 * - within a segment each request's messages extend the previous request's; a new segment
 *   opens at the journal's end, its tail verbatim and never starting with a tool result;
 * - an automatic compaction is tried at most once until an answer commits (never loops);
 * - a `length` stop never runs its (possibly truncated) tool calls;
 * - tool calls run one at a time in content order, and their results are appended in that
 *   order, matched by tool call id, whatever order they arrive in;
 * - errors and aborts never become assistant messages;
 * - duplicate and late inputs change nothing;
 * - ids are derived from the state, never from a clock or a random source.
 *
 * No I/O, no services, no clock: it imports `effect` data modules, `Llm.ts` and its own
 * `loop/` (the state and its operations, segments and their pure choices).
 */
import { Data } from "effect"
import { extendMessagesHash, messageHash, messagesHash as messagesHashOf, toolCallsOf } from "./Llm.js"
import type {
  AssistantMessage,
  Message,
  RequestMessages,
  ResponseEvent,
  ToolCall,
  ToolDefinition,
  ToolResultMessage,
  UserContent,
  UserMessage
} from "./Llm.js"
import {
  chooseCut,
  countedSize,
  defaultCompactionPolicy,
  elideStale,
  estimateTokens,
  manualCut,
  summaryInstruction,
  summaryMessage,
  summaryTextOf,
  tailBudget
} from "./loop/Segments.js"
import type { ClientHistory, CompactionPolicy, CompactionRun, CompactionTrigger } from "./loop/Segments.js"
import {
  appendMessages,
  appendQueued,
  applyDelta,
  callIdOf,
  closeTurn,
  errorResult,
  heldAt,
  isBusy,
  openSegment,
  operationIdOf,
  turnIdOf
} from "./loop/State.js"
import type { ConversationState, PendingResponse, RuntimeState, TurnSettings, WaitingClient } from "./loop/State.js"

export * from "./loop/Segments.js"
export * from "./loop/State.js"

// =============================================================================
// Inputs and commands
// =============================================================================

export type Input = Data.TaggedEnum<{
  /**
   * A new turn: the user's message, context the client attached, and the turn's settings.
   * `clientHistory` is what the client holds of the history: naming fewer messages than the
   * last turn left, as a prefix of them, it rewinds to that prefix.
   */
  Start: {
    readonly message: UserMessage
    readonly context: ReadonlyArray<UserContent>
    readonly settings: TurnSettings
    readonly clientHistory?: ClientHistory
  }
  /** A turn that only compacts the history (the user's summarize), with what the user asks of the summary. */
  Summarize: {
    readonly instructions: string
    readonly settings: TurnSettings
    readonly clientHistory?: ClientHistory
  }
  LlmEvent: { readonly callId: string; readonly event: ResponseEvent }
  ToolResult: { readonly message: ToolResultMessage }
  UserMessage: { readonly message: UserMessage }
  Cancel: { readonly reason: string }
}>
export const Input = Data.taggedEnum<Input>()

export type Command = Data.TaggedEnum<{
  /** Keep reading the current model stream. */
  ContinueLlm: {}
  /**
   * Save the call, then stream `request` from `model`; feed every event back as `LlmEvent(callId)`.
   * An `answer` sends the history as it is; a `summary` sends it plus an instruction (and, after
   * an overflow, with stale tool output elided), so its messages are not a prefix of the history.
   */
  CallLlm: {
    readonly callId: string
    readonly model: string
    readonly request: RequestMessages
    readonly messagesHash: string
    readonly purpose: "answer" | "summary"
    readonly maxOutputTokens?: number
  }
  /** Save the operation, then run the tool call on the client; its result comes back as `ToolResult`. */
  CallClient: { readonly operationId: string; readonly toolCall: ToolCall }
  /** Nothing to do until the next input. */
  WaitInput: {}
  /**
   * The turn is over; `reason: "length"` means the answer was cut off at the output limit. A
   * turn that only compacted the history has no answer (`message` null).
   */
  Final: { readonly message: AssistantMessage | null; readonly reason: "stop" | "length" }
  Failed: { readonly error: string; readonly retryable: boolean }
  Canceled: { readonly reason: string }
}>
export const Command = Data.taggedEnum<Command>()

export interface Transition {
  readonly state: RuntimeState
  readonly emit: ReadonlyArray<ResponseEvent>
  readonly command: Command
}

// =============================================================================
// Policy: what the loop is given
// =============================================================================

/** What the prompt and tool builders may see: never the history. */
export interface PromptContext {
  readonly conversationId: string
  readonly turnId: string
  readonly settings: TurnSettings
}

export interface Policy {
  /** Pure: the system prompt for the next request. */
  readonly buildPrompt: (context: PromptContext) => string
  /** Pure: the tools offered in the next request. */
  readonly buildTools: (context: PromptContext) => ReadonlyArray<ToolDefinition>
  /** A turn that would make more model calls than this fails instead. */
  readonly maxLlmCallsPerTurn: number
  /** Compaction's knobs; without them, only a compaction the user asks for, with the defaults. */
  readonly compaction?: CompactionPolicy
  /**
   * Pure: the id the client knows a history message by (Cursor: its prompt blob id), to tell
   * a rewind. Without it a client's history is never compared.
   */
  readonly promptIdOf?: (message: Message) => string
  /** Pure: the settings after a tool result is appended (Cursor: an approved SwitchMode changes the mode). */
  readonly settingsAfter?: (settings: TurnSettings, result: ToolResultMessage) => TurnSettings
}

// =============================================================================
// The transition
// =============================================================================

export const CUT_OFF_RESULT =
  "Not executed: the response hit the output token limit before this tool call was complete."
export const CANCELED_RESULT = "Not executed: the user canceled the turn."
export const SUPERSEDED_RESULT = "Not executed: the user started a new turn."

export const makeTransition = (policy: Policy) => (state: RuntimeState, input: Input): Transition => {
  switch (input._tag) {
    case "Start": return onStart(policy, state, input.message, input.context, input.settings, input.clientHistory)
    case "Summarize": return onSummarize(policy, state, input.instructions, input.settings, input.clientHistory)
    case "LlmEvent": return onLlmEvent(policy, state, input.callId, input.event)
    case "ToolResult": return onToolResult(policy, state, input.message)
    case "UserMessage": return onUserMessage(policy, state, input.message)
    case "Cancel": return onCancel(state, input.reason)
  }
}

const unchanged = (state: RuntimeState): Transition => ({ state, emit: [], command: Command.WaitInput() })

const onStart = (
  policy: Policy,
  state: RuntimeState,
  message: UserMessage,
  context: ReadonlyArray<UserContent>,
  settings: TurnSettings,
  clientHistory: ClientHistory | undefined
): Transition => {
  const supplements: Array<UserMessage> = context.length > 0 ? [{ role: "user", content: context }] : []
  return callLlm(policy, appendMessages(beginTurn(policy, state, settings, clientHistory), [...supplements, message]))
}

/** A turn that only compacts: nothing to summarize ends it at once, the history as it was. */
const onSummarize = (
  policy: Policy,
  state: RuntimeState,
  instructions: string,
  settings: TurnSettings,
  clientHistory: ClientHistory | undefined
): Transition => {
  const turn = beginTurn(policy, state, settings, clientHistory)
  return compact(policy, turn, "manual", instructions, requestFor(policy, turn)) ??
    endOfStep(policy, turn, (ended) => finished(ended, Command.Final({ message: null, reason: "stop" })))
}

/**
 * A new turn's state: a running turn is superseded (its open tool calls closed with a result
 * first), and a client that holds less of the history than the last turn left rewinds it.
 */
const beginTurn = (
  policy: Policy,
  state: RuntimeState,
  settings: TurnSettings,
  clientHistory: ClientHistory | undefined
): ConversationState => {
  const closed = isBusy(state.committed) ? closeTurn(state.committed, SUPERSEDED_RESULT) : state.committed
  const turnSeq = closed.turnSeq + 1
  // A new turn may compact again (a guard left by a failed turn would otherwise fail every later turn).
  const next = { ...closed, turnSeq, turnId: turnIdOf(closed.conversationId, turnSeq), settings, llmCallSeq: 0, compactGuard: false }
  const turn = closed.turnSeq === 0 ? seedFrom(policy, next, clientHistory) : rewindTo(policy, next, clientHistory)
  return { ...turn, turnStart: turn.messages.length }
}

/**
 * A conversation's first turn that names a history (a forked chat): seeded with the stored
 * messages the runner found under exactly those ids, as a `fork` segment the client holds.
 */
const seedFrom = (policy: Policy, state: ConversationState, history: ClientHistory | undefined): ConversationState => {
  const seed = history?.seed
  const promptIdOf = policy.promptIdOf
  if (seed === undefined || promptIdOf === undefined || state.messages.length > 0) return state
  if (seed.messages.length !== history!.promptIds.length || seed.messages.some((message, index) => promptIdOf(message) !== history!.promptIds[index])) {
    return state
  }
  const forked = openSegment(
    state,
    { kind: "fork", turnId: state.turnId, source: seed.conversationId, replaced: 0, kept: seed.messages.length },
    seed.messages
  )
  return { ...forked, checkpointed: forked.messages.length }
}

/**
 * The client names a strict prefix of what the last final turn left (the user edited an
 * earlier message or restored a checkpoint): a new segment holds exactly that prefix. Anything
 * else (the same history, a longer or foreign one) changes nothing.
 */
const rewindTo = (policy: Policy, state: ConversationState, history: ClientHistory | undefined): ConversationState => {
  const promptIdOf = policy.promptIdOf
  if (history === undefined || promptIdOf === undefined) return state
  const kept = history.promptIds.length
  if (kept >= state.checkpointed || kept > state.messages.length) return state
  for (let index = 0; index < kept; index++) {
    if (promptIdOf(state.messages[index]!) !== history.promptIds[index]) return state
  }
  return openSegment(
    state,
    { kind: "rewind", turnId: state.turnId, replaced: state.messages.length - kept, kept },
    state.messages.slice(0, kept)
  )
}

const onUserMessage = (policy: Policy, state: RuntimeState, message: UserMessage): Transition => {
  const committed = state.committed
  if (isBusy(committed)) {
    return { state: { ...state, committed: { ...committed, queued: [...committed.queued, message] } }, emit: [], command: Command.WaitInput() }
  }
  // Between turns a user message starts the next turn with the previous turn's settings.
  if (committed.settings === null) return unchanged(state)
  return onStart(policy, state, message, [], committed.settings, undefined)
}

const onCancel = (state: RuntimeState, reason: string): Transition => {
  if (!isBusy(state.committed)) return unchanged(state)
  return {
    state: { committed: { ...closeTurn(state.committed, CANCELED_RESULT), status: "canceled" }, pending: null },
    emit: [],
    command: Command.Canceled({ reason })
  }
}

const onLlmEvent = (policy: Policy, state: RuntimeState, callId: string, event: ResponseEvent): Transition => {
  const committed = state.committed
  // Late, duplicate or foreign stream events: the call is not the one being read.
  if (committed.status !== "waitingLlm" || committed.activeCallId !== callId) return unchanged(state)
  if (committed.compaction !== null) return onSummaryEvent(policy, state, committed.compaction, event)
  switch (event._tag) {
    case "Start":
      // A (re)started stream discards whatever an earlier attempt streamed: never merged.
      return streaming(state, { callId, blocks: [], deltaCount: 0 }, event)
    case "TextStart":
    case "ThinkingStart":
    case "ToolCallStart":
    case "TextDelta":
    case "ThinkingDelta":
    case "ToolCallDelta":
    case "TextEnd":
    case "ThinkingEnd":
    case "ToolCallEnd":
      return streaming(state, applyDelta(state.pending ?? { callId, blocks: [], deltaCount: 0 }, event), event)
    case "Done":
      return onDone(policy, committed, event.reason, event.message, event)
    case "Error": {
      // Too long for the model: compact once, then ask again (an overflow right after a compaction fails).
      if (event.code === "contextOverflow" && !committed.compactGuard) {
        const retry = compact(policy, { ...committed, activeCallId: null }, "overflow", "", requestFor(policy, committed))
        if (retry !== undefined) return retry
      }
      return endedByError(committed, event)
    }
  }
}

const endedByError = (committed: ConversationState, event: Extract<ResponseEvent, { _tag: "Error" }>): Transition => {
  const ended: ConversationState = {
    ...appendQueued(committed),
    activeCallId: null,
    compaction: null,
    status: event.reason === "aborted" ? "canceled" : "failed"
  }
  return {
    state: { committed: ended, pending: null },
    emit: [event],
    command: event.reason === "aborted"
      ? Command.Canceled({ reason: event.message })
      : Command.Failed({ error: event.message, retryable: event.retryable })
  }
}

const streaming = (state: RuntimeState, pending: PendingResponse, event: ResponseEvent): Transition => ({
  state: { committed: state.committed, pending },
  emit: [event],
  command: Command.ContinueLlm()
})

const onDone = (
  policy: Policy,
  committed: ConversationState,
  reason: "stop" | "length" | "toolUse",
  message: AssistantMessage,
  event: ResponseEvent
): Transition => {
  const callId = committed.activeCallId!
  const appended = appendMessages({ ...committed, activeCallId: null, compactGuard: false }, [message])
  const withAnswer = { ...appended, context: countedSize(message, appended.messages.length) }
  const toolCalls = toolCallsOf(message)
  const done = (state: ConversationState, command: Command): Transition => ({
    state: { committed: state, pending: null },
    emit: [event],
    command
  })

  if (reason === "length") {
    // Truncated tool calls are never run; each gets a result saying so, keeping the history valid.
    const cutOff = appendMessages(withAnswer, toolCalls.map((call) => errorResult(call, CUT_OFF_RESULT)))
    return endOfStep(policy, cutOff, (ended) => done(ended, Command.Final({ message, reason: "length" })), [event])
  }
  if (toolCalls.length > 0) {
    // Tool calls are run whatever stop reason the provider reported with them.
    const pendingCalls = toolCalls.map((toolCall, position) => ({
      operationId: operationIdOf(callId, position, toolCall.id),
      toolCall
    }))
    const first = pendingCalls[0]!
    const waiting: WaitingClient = { callId, toolCalls: pendingCalls, appended: 0, dispatched: 1, held: [] }
    return done(
      { ...withAnswer, status: "waitingClient", waiting },
      Command.CallClient({ operationId: first.operationId, toolCall: first.toolCall })
    )
  }
  return endOfStep(policy, withAnswer, (ended) => done(ended, Command.Final({ message, reason: "stop" })), [event])
}

/**
 * At the end of a step the turn would end; user messages that arrived meanwhile are appended
 * and the model is asked again instead.
 */
const endOfStep = (
  policy: Policy,
  state: ConversationState,
  finish: (state: ConversationState) => Transition,
  emit: ReadonlyArray<ResponseEvent> = []
): Transition => {
  if (state.queued.length === 0) return finish({ ...state, status: "final", checkpointed: state.messages.length })
  const next = callLlm(policy, appendQueued(state))
  return { ...next, emit }
}

const finished = (state: ConversationState, command: Command): Transition => ({ state: { committed: state, pending: null }, emit: [], command })

const onToolResult = (policy: Policy, state: RuntimeState, result: ToolResultMessage): Transition => {
  const committed = state.committed
  const waiting = committed.waiting
  if (committed.status !== "waitingClient" || waiting === null) return unchanged(state)
  // The first open call with this id; calls sharing an id (a provider bug) are answered in order.
  const position = waiting.toolCalls.findIndex((call, index) =>
    index >= waiting.appended && call.toolCall.id === result.toolCallId && heldAt(waiting, index) === undefined
  )
  // Unknown id, or every call with that id already answered.
  if (position < 0) return unchanged(state)

  const held = [...waiting.held, { position, result }]
  const ready: Array<ToolResultMessage> = []
  let appended = waiting.appended
  for (let next = held.find((h) => h.position === appended); next !== undefined; next = held.find((h) => h.position === appended)) {
    held.splice(held.indexOf(next), 1)
    ready.push(next.result)
    appended++
  }
  const settingsAfter = policy.settingsAfter
  const settings = settingsAfter === undefined || committed.settings === null ? committed.settings : ready.reduce(settingsAfter, committed.settings)
  const withResults = { ...appendMessages(committed, ready), settings }

  if (appended === waiting.toolCalls.length) {
    return callLlm(policy, appendQueued({ ...withResults, waiting: null }))
  }
  const stillWaiting = (dispatched: number): RuntimeState => ({
    ...state,
    committed: { ...withResults, waiting: { ...waiting, appended, dispatched, held } }
  })
  if (appended >= waiting.dispatched) {
    const next = waiting.toolCalls[appended]!
    return {
      state: stillWaiting(appended + 1),
      emit: [],
      command: Command.CallClient({ operationId: next.operationId, toolCall: next.toolCall })
    }
  }
  return { state: stillWaiting(waiting.dispatched), emit: [], command: Command.WaitInput() }
}

// =============================================================================
// Helpers
// =============================================================================

/** The next request for the state: the prompt and tools built for its settings, the history as it is. */
const requestFor = (policy: Policy, committed: ConversationState): RequestMessages => {
  const context: PromptContext = { conversationId: committed.conversationId, turnId: committed.turnId, settings: committed.settings! }
  return { systemPrompt: policy.buildPrompt(context), messages: committed.messages, tools: policy.buildTools(context) }
}

/**
 * Asks the model for the next answer; a request estimated past the compaction threshold is
 * compacted first (at most once until an answer commits: `mayCompact` false after one).
 */
const callLlm = (policy: Policy, committed: ConversationState, mayCompact = true): Transition => {
  const settings = committed.settings!
  if (committed.llmCallSeq >= policy.maxLlmCallsPerTurn) {
    return {
      state: { committed: { ...committed, status: "failed", activeCallId: null }, pending: null },
      emit: [],
      command: Command.Failed({
        error: `The turn stopped after ${policy.maxLlmCallsPerTurn} model calls (the per-turn limit).`,
        retryable: false
      })
    }
  }
  const request = requestFor(policy, committed)
  if (mayCompact && !committed.compactGuard && pastThreshold(policy, committed, request)) {
    const compacted = compact(policy, committed, "auto", "", request)
    if (compacted !== undefined) return compacted
  }
  const callId = callIdOf(committed.turnId, committed.llmCallSeq)
  return {
    state: {
      committed: { ...committed, status: "waitingLlm", activeCallId: callId, llmCallSeq: committed.llmCallSeq + 1 },
      pending: null
    },
    emit: [],
    command: Command.CallLlm({ callId, model: settings.model, request, messagesHash: committed.messagesHash, purpose: "answer" })
  }
}

const pastThreshold = (policy: Policy, committed: ConversationState, request: RequestMessages): boolean => {
  const knobs = policy.compaction
  if (knobs === undefined || !knobs.auto) return false
  const window = knobs.contextWindowOf(committed.settings!.model)
  return window !== undefined && estimateTokens(request, committed.context) > window * knobs.threshold
}

// =============================================================================
// Compaction: a summary call, then a new segment [summary, verbatim tail]
// =============================================================================

/**
 * Starts a summary call: the same system prompt, tools and messages as `request` (so the
 * provider's prefix cache serves it), plus an instruction; after an overflow, with stale tool
 * output elided. Undefined when there is nothing to summarize or no call left in the turn.
 */
const compact = (
  policy: Policy,
  committed: ConversationState,
  trigger: CompactionTrigger,
  instructions: string,
  request: RequestMessages
): Transition | undefined => {
  const knobs = policy.compaction ?? defaultCompactionPolicy
  const model = committed.settings!.model
  const messages = committed.messages
  let cut = chooseCut(messages, tailBudget(knobs, model))
  // Asked for, or too long already: summarize even when everything would fit the tail's budget.
  if (cut === 0 && trigger !== "auto") cut = manualCut(messages)
  if (cut === 0 || committed.llmCallSeq >= policy.maxLlmCallsPerTurn) return undefined
  const callId = callIdOf(committed.turnId, committed.llmCallSeq)
  const instruction = summaryInstruction(instructions)
  const overflowed = trigger === "overflow"
  const history = overflowed ? elideStale(messages, cut, knobs.elideToolResultChars) : messages
  const summaryRequest: RequestMessages = { systemPrompt: request.systemPrompt, tools: request.tools, messages: [...history, instruction] }
  const hash = overflowed ? messagesHashOf(summaryRequest.messages) : extendMessagesHash(committed.messagesHash, messageHash(instruction))
  const run: CompactionRun = { callId, trigger, cut, maxOutputTokens: knobs.summaryMaxTokens }
  return {
    state: {
      committed: { ...committed, status: "waitingLlm", activeCallId: callId, llmCallSeq: committed.llmCallSeq + 1, compaction: run },
      pending: null
    },
    emit: [],
    command: Command.CallLlm({
      callId,
      model,
      request: summaryRequest,
      messagesHash: hash,
      purpose: "summary",
      maxOutputTokens: knobs.summaryMaxTokens
    })
  }
}

/** The summary call's stream: nothing of it is shown as an answer; its Done opens the new segment. */
const onSummaryEvent = (policy: Policy, state: RuntimeState, run: CompactionRun, event: ResponseEvent): Transition => {
  const committed = state.committed
  switch (event._tag) {
    case "Done": {
      const summary = summaryTextOf(event.message)
      return summary === ""
        ? summaryFailed(policy, committed, run, "the model answered without a summary", false)
        : compacted(policy, committed, run, summary)
    }
    case "Error":
      return event.reason === "aborted" ? endedByError(committed, event) : summaryFailed(policy, committed, run, event.message, event.retryable)
    default:
      return { state: { committed, pending: null }, emit: [], command: Command.ContinueLlm() }
  }
}

const compacted = (policy: Policy, committed: ConversationState, run: CompactionRun, summary: string): Transition => {
  const tail = committed.messages.slice(run.cut)
  const opened = openSegment(
    committed,
    { kind: "compaction", turnId: committed.turnId, summaryCallId: run.callId, replaced: run.cut, kept: tail.length },
    // The request the turn is working on stays word for word when the cut passes it.
    [summaryMessage(summary, run.trigger !== "manual" && run.cut > committed.turnStart ? requestOf(committed) : undefined), ...tail]
  )
  const next: ConversationState = {
    ...opened,
    // The turn's own messages that were kept begin after the summary (a user's summarize turn has none).
    turnStart: run.trigger === "manual" ? opened.messages.length : 1 + Math.max(0, committed.turnStart - run.cut),
    activeCallId: null,
    compaction: null,
    compactGuard: true,
    summaries: committed.summaries + 1
  }
  if (run.trigger === "manual") return endOfStep(policy, next, (ended) => finished(ended, Command.Final({ message: null, reason: "stop" })))
  return callLlm(policy, next, false)
}

/** The text of the user message that opened the current turn (after any context supplement). */
const requestOf = (committed: ConversationState): string | undefined => {
  let typed: UserMessage | undefined
  for (let index = committed.turnStart; index < committed.messages.length; index++) {
    const message = committed.messages[index]!
    if (message.role !== "user") break
    typed = message
  }
  const text = typed?.content.flatMap((block) => (block.type === "text" ? [block.text] : [])).join("")
  return text === undefined || text === "" ? undefined : text
}

/** The summary failed: the history stays as it was; an automatic compaction goes on without it. */
const summaryFailed = (policy: Policy, committed: ConversationState, run: CompactionRun, why: string, retryable: boolean): Transition => {
  const base: ConversationState = { ...committed, activeCallId: null, compaction: null, compactGuard: true }
  if (run.trigger === "auto") return callLlm(policy, base, false)
  const error = run.trigger === "manual"
    ? `The conversation could not be summarized: ${why}`
    : `The conversation is longer than the model's context window, and summarizing it failed: ${why}`
  return finished({ ...appendQueued(base), status: "failed" }, Command.Failed({ error, retryable }))
}
