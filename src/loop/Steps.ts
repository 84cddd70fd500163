/**
 * The steps every kind of input ends in: ask the model for the next answer, end the turn at a
 * step's end, or change nothing. A model call may begin with a summary call instead, whoever
 * asks for it (the user, a request past the compaction threshold, an overflow): its summary
 * then opens a new segment (`loop/ModelEvents.ts`) before the answer is asked for.
 */
import { extendMessagesHash, messageHash, messagesHash as messagesHashOf } from "../Llm.js"
import type { RequestMessages, ResponseEvent } from "../Llm.js"
import { Command, settlesNothing } from "./Contract.js"
import type { Policy, PromptContext, Settles, Transition } from "./Contract.js"
import { chooseCut, defaultCompactionPolicy, elideStale, estimateTokens, manualCut, summaryInstruction, tailBudget } from "./Segments.js"
import type { CompactionRun, CompactionTrigger } from "./Segments.js"
import { appendQueued, callIdOf } from "./State.js"
import type { ConversationState, RuntimeState, TurnSettings } from "./State.js"

/** An input that changes nothing (late, duplicate, foreign, or out of place). */
export const unchanged = (state: RuntimeState): Transition => ({ state, emit: [], command: Command.WaitInput(), settles: settlesNothing })

/** The committed state `state`, the streamed response dropped, and `command` (a turn's end). */
export const finished = (state: ConversationState, command: Command): Transition =>
  ({ state: { committed: state, pending: null }, emit: [], command, settles: settlesNothing })

/** `t`, settling `settles` besides what it settles itself. */
export const settling = (t: Transition, settles: Settles): Transition =>
  settles === settlesNothing ? t : { ...t, settles: { ...t.settles, ...settles } }

/**
 * At the end of a step the turn would end; user messages that arrived meanwhile are appended
 * and the model is asked again instead.
 */
export const endOfStep = (
  policy: Policy,
  state: ConversationState,
  finish: (state: ConversationState) => Transition,
  emit: ReadonlyArray<ResponseEvent> = []
): Transition => {
  if (state.queued.length === 0) return finish({ ...state, status: "final", checkpointed: state.messages.length })
  const next = callLlm(policy, appendQueued(state))
  return { ...next, emit }
}

/**
 * The next request for the state: the prompt and tools built for its settings, the history as
 * it is. An imported history's own system prompt stands in for the built one, unless the turn's
 * request carries a `system_prompt_spec` of its own (the newer word of the client's).
 */
export const requestFor = (policy: Policy, committed: ConversationState): RequestMessages => {
  const settings = committed.settings!
  const context: PromptContext = { conversationId: committed.conversationId, turnId: committed.turnId, settings }
  const imported = settings.systemPromptSpec === undefined ? committed.clientSystemPrompt : undefined
  return { systemPrompt: imported ?? policy.buildPrompt(context), messages: committed.messages, tools: policy.buildTools(context) }
}

/** What a summarize turn takes from its own request: the model the user picked and the request it answers. */
const SUMMARIZE_REQUEST_FIELDS = ["model", "modelParameters", "maxMode", "requestId", "userMessageId", "carriedCheckpoint"] as const satisfies ReadonlyArray<keyof TurnSettings>

/**
 * A summarize turn's settings: the conversation's own (those its last model call was built
 * from) for everything the system prompt and tools come from, so that the summary call extends
 * that call byte for byte whatever the summarize request carried (Cursor's `summarize_action`
 * has no request context of its own: no workspace, rules or MCP tools); the model and the
 * client request from the summarize request. A conversation without a turn: the request's.
 */
export const summarizeSettings = (conversation: TurnSettings | null, requested: TurnSettings): TurnSettings => {
  if (conversation === null) return requested
  const settings: Record<string, unknown> = { ...conversation }
  for (const field of SUMMARIZE_REQUEST_FIELDS) {
    if (requested[field] === undefined) delete settings[field]
    else settings[field] = requested[field]
  }
  return settings as TurnSettings
}

/**
 * Asks the model for the next answer; a request estimated past the compaction threshold is
 * compacted first (at most once until an answer commits: `mayCompact` false after one).
 */
export const callLlm = (policy: Policy, committed: ConversationState, mayCompact = true): Transition => {
  const settings = committed.settings!
  if (committed.llmCallSeq >= policy.maxLlmCallsPerTurn) {
    return {
      state: { committed: { ...committed, status: "failed", activeCallId: null }, pending: null },
      emit: [],
      command: Command.Failed({
        error: `The turn stopped after ${policy.maxLlmCallsPerTurn} model calls (the per-turn limit).`,
        retryable: false
      }),
      settles: settlesNothing
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
    command: Command.CallLlm({ callId, model: settings.model, request, messagesHash: committed.messagesHash, purpose: "answer" }),
    settles: settlesNothing
  }
}

const pastThreshold = (policy: Policy, committed: ConversationState, request: RequestMessages): boolean => {
  const knobs = policy.compaction
  if (knobs === undefined || !knobs.auto) return false
  const window = knobs.contextWindowOf(committed.settings!.model)
  return window !== undefined && estimateTokens(request, committed.context) > window * knobs.threshold
}

/**
 * Starts a summary call: the same system prompt, tools and messages as `request` (so the
 * provider's prefix cache serves it), plus an instruction; after an overflow, with stale tool
 * output elided. Undefined when there is nothing to summarize or no call left in the turn.
 */
export const compact = (
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
    }),
    settles: settlesNothing
  }
}
