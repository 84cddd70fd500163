/**
 * The loop's state, and the pure operations on it the transition is built from: the committed
 * conversation (history segment, turn, waiting tool calls, compaction in flight), the streamed
 * response kept in memory only, the ids derived from the state, appending to the history and
 * opening a new segment. `Loop.ts` re-exports all of it beside the transition.
 */
import { Schema } from "effect"
import { emptyMessagesHash, emptyUsage, extendMessagesHash, Message, messageHash, ToolCall, ToolResultMessage, UserMessage } from "../Llm.js"
import type { AssistantMessage, ResponseEvent, TextContent } from "../Llm.js"
import { CompactionRun, ContextSize, originSegment, Segment, unknownContextSize } from "./Segments.js"

// =============================================================================
// State
// =============================================================================

export const ConversationStatus = Schema.Literal(
  "ready",
  "waitingLlm",
  "waitingClient",
  "final",
  "failed",
  "canceled"
)
export type ConversationStatus = typeof ConversationStatus.Type

/** Cursor's modes (`AgentMode`): each implies the tools and guidance the model gets. */
export const TurnMode = Schema.Literal("agent", "ask", "plan", "debug", "triage", "project", "multitask", "custom")
export type TurnMode = typeof TurnMode.Type

/** A custom mode the user entered: its name and, when the client sent its skill, its instructions. */
export const TurnCustomMode = Schema.Struct({
  id: Schema.String,
  label: Schema.String,
  instructions: Schema.String
})
export type TurnCustomMode = typeof TurnCustomMode.Type

/** A subagent the model may hand work to (Cursor's own types, or one the user defined). */
export const TurnSubagentInfo = Schema.Struct({
  name: Schema.String,
  description: Schema.String
})
export type TurnSubagentInfo = typeof TurnSubagentInfo.Type

/**
 * The turn is a subagent's (a child run Cursor opened for a parent's Task): its type, its
 * instructions and tools when the user defined it, whether it only reads, and its parent.
 */
export const TurnSubagentRun = Schema.Struct({
  type: Schema.String,
  instructions: Schema.String,
  /** The tool names a custom subagent may use; empty: its mode's. */
  tools: Schema.Array(Schema.String),
  readonly: Schema.Boolean,
  parentRequestId: Schema.optional(Schema.String),
  parentToolCallId: Schema.optional(Schema.String)
})
export type TurnSubagentRun = typeof TurnSubagentRun.Type

/** The server-side tools a turn may offer: what the client allows and this server can do. */
export const TurnWebTools = Schema.Struct({
  search: Schema.Boolean,
  fetch: Schema.Boolean
})
export type TurnWebTools = typeof TurnWebTools.Type

/** Where the client runs, as the run request described it. */
export const TurnWorkspace = Schema.Struct({
  workspacePaths: Schema.Array(Schema.String),
  projectFolder: Schema.String,
  osVersion: Schema.String,
  shell: Schema.String,
  timeZone: Schema.String,
  terminalsFolder: Schema.String
})
export type TurnWorkspace = typeof TurnWorkspace.Type

/** One rule the client sent for the system prompt (`path` is `""` for a rule that is not a file). */
export const TurnRule = Schema.Struct({
  path: Schema.String,
  content: Schema.String
})
export type TurnRule = typeof TurnRule.Type

/** An MCP tool the client offered: plain JSON, `inputSchema` being the JSON Schema of its arguments. */
export const TurnMcpTool = Schema.Struct({
  /** The name the client wants back when the tool is called. */
  name: Schema.String,
  description: Schema.String,
  providerIdentifier: Schema.String,
  toolName: Schema.String,
  inputSchema: Schema.Unknown,
  /** The JSON Schema of its result and its MCP annotations, when the client sent them (`McpToolDefinition` 7, 8). */
  outputSchema: Schema.optional(Schema.Unknown),
  annotations: Schema.optional(Schema.Unknown)
})
export type TurnMcpTool = typeof TurnMcpTool.Type

/**
 * What the client chose for the current turn. The loop reads only `model`; the rest it carries
 * for the prompt builder (mode, workspace, rules, MCP tools, custom prompt) and for the client
 * side (which request the turn answers, and what its checkpoint needs after a restart).
 * Committed with the state at every change, so it stays small.
 */
export const TurnSettings = Schema.Struct({
  model: Schema.String,
  mode: Schema.optional(TurnMode),
  customMode: Schema.optional(TurnCustomMode),
  webTools: Schema.optional(TurnWebTools),
  /** The user's own subagents the Task tool may name (`.cursor/agents`). */
  subagents: Schema.optional(Schema.Array(TurnSubagentInfo)),
  /** Set when the turn is a subagent's child run. */
  subagent: Schema.optional(TurnSubagentRun),
  workspace: Schema.optional(TurnWorkspace),
  mcpTools: Schema.optional(Schema.Array(TurnMcpTool)),
  rules: Schema.optional(Schema.Array(TurnRule)),
  customSystemPrompt: Schema.optional(Schema.String),
  /** The client's own system prompt (`system_prompt_spec`): in place of the server's, or after it. */
  systemPromptSpec: Schema.optional(Schema.Struct({ mode: Schema.Literal("replace", "append"), text: Schema.String })),
  /** The client's agent session (`agent_session_id`): kept, not acted on. */
  agentSessionId: Schema.optional(Schema.String),
  /** The client shows which model answered (`client_supports_routed_model_update`). */
  routedModelUpdates: Schema.optional(Schema.Boolean),
  /** The requested model's parameters, by id (e.g. `thinking_effort`). */
  modelParameters: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.String })),
  maxMode: Schema.optional(Schema.Boolean),
  /** The client request (RunSSE request id) the turn answers. */
  requestId: Schema.optional(Schema.String),
  /** The id of the client's user message that started the turn. */
  userMessageId: Schema.optional(Schema.String),
  /** The part of the client's checkpoint the turn's own checkpoint carries over, as opaque base64. */
  carriedCheckpoint: Schema.optional(Schema.String)
})
export type TurnSettings = typeof TurnSettings.Type

/** The mode of the turn; `agent` (Cursor's default) when the settings name none. */
export const modeOfSettings = (settings: TurnSettings): TurnMode => settings.mode ?? "agent"

/** The MCP tools the client offered for the turn. */
export const mcpToolsOf = (settings: TurnSettings): ReadonlyArray<TurnMcpTool> => settings.mcpTools ?? []

export const PendingToolCall = Schema.Struct({
  operationId: Schema.String,
  toolCall: ToolCall
})
export type PendingToolCall = typeof PendingToolCall.Type

/** The tool calls of the last assistant message that are still being run on the client. */
export const WaitingClient = Schema.Struct({
  /** The model call whose message holds these tool calls. */
  callId: Schema.String,
  /** All tool calls of that message, in content order. */
  toolCalls: Schema.Array(PendingToolCall),
  /** How many results have been appended to `messages` (always a prefix of `toolCalls`). */
  appended: Schema.Int,
  /** How many calls have been handed to the client (one at a time, in order). */
  dispatched: Schema.Int,
  /** Results that arrived ahead of an earlier call's result, by call position; appended once their turn comes. */
  held: Schema.Array(Schema.Struct({ position: Schema.Int, result: ToolResultMessage }))
})
export type WaitingClient = typeof WaitingClient.Type

/** The committed state of one conversation: what the store saves after every transition that changes it. */
export const ConversationState = Schema.Struct({
  conversationId: Schema.String,
  status: ConversationStatus,
  /** Turns started so far; the current turn is number `turnSeq`. */
  turnSeq: Schema.Int,
  turnId: Schema.String,
  /** Where the current turn's messages begin in `messages` (its context and user message). */
  turnStart: Schema.Int,
  settings: Schema.NullOr(TurnSettings),
  /** Model calls made in the current turn. */
  llmCallSeq: Schema.Int,
  /** The model call whose stream is being read, if any. */
  activeCallId: Schema.NullOr(Schema.String),
  /**
   * The model history: the current segment of the conversation's journal, append-only within
   * the segment. A compaction or a rewind replaces it by a new segment (see `segment`).
   */
  messages: Schema.Array(Message),
  /** Hash chain over `messages` (see `Llm.messagesHash`), extended at each append. */
  messagesHash: Schema.String,
  waiting: Schema.NullOr(WaitingClient),
  /** User messages that arrived mid-step; appended at the next step boundary, never lost. */
  queued: Schema.Array(UserMessage),
  /** Where `messages` begin in the journal, and how that segment began. */
  segment: Schema.optionalWith(Segment, { default: () => originSegment }),
  /** What the last answer counted the segment at (for the next request's estimate and the context meter). */
  context: Schema.optionalWith(ContextSize, { default: () => unknownContextSize }),
  /** Messages of the segment when a turn last ended final: the client's checkpoint names that many. */
  checkpointed: Schema.optionalWith(Schema.Int, { default: () => 0 }),
  /** The summary call in flight, if any. */
  compaction: Schema.optionalWith(Schema.NullOr(CompactionRun), { default: () => null }),
  /** A compaction was tried since the last answer: no automatic one until an answer commits (never loops). */
  compactGuard: Schema.optionalWith(Schema.Boolean, { default: () => false }),
  /** Compactions so far (Cursor's `self_summary_count`). */
  summaries: Schema.optionalWith(Schema.Int, { default: () => 0 }),
  /**
   * The system prompt of a history imported from the client (its leading system messages): sent
   * in place of the one the policy builds, for the rest of the conversation.
   */
  clientSystemPrompt: Schema.optional(Schema.String)
})
export type ConversationState = typeof ConversationState.Type

/** One block of the response being streamed. */
export interface PendingBlock {
  readonly kind: "text" | "thinking" | "toolCall"
  readonly text: string
  readonly id?: string
  readonly name?: string
  readonly open: boolean
}

/** The model response being streamed: memory only, never committed, dropped on error. */
export interface PendingResponse {
  readonly callId: string
  readonly blocks: ReadonlyArray<PendingBlock | undefined>
  readonly deltaCount: number
}

export interface RuntimeState {
  readonly committed: ConversationState
  readonly pending: PendingResponse | null
}

export const initialConversation = (conversationId: string): ConversationState => ({
  conversationId,
  status: "ready",
  turnSeq: 0,
  turnId: "",
  turnStart: 0,
  settings: null,
  llmCallSeq: 0,
  activeCallId: null,
  messages: [],
  messagesHash: emptyMessagesHash,
  waiting: null,
  queued: [],
  segment: originSegment,
  context: unknownContextSize,
  checkpointed: 0,
  compaction: null,
  compactGuard: false,
  summaries: 0
})

export const initialRuntime = (conversationId: string): RuntimeState => ({
  committed: initialConversation(conversationId),
  pending: null
})

/** Whether a turn is in progress (a model call or client tool calls outstanding). */
export const isBusy = (state: ConversationState): boolean =>
  state.status === "waitingLlm" || state.status === "waitingClient"


// =============================================================================
// Ids: derived from the state, never random
// =============================================================================

export const turnIdOf = (conversationId: string, turnSeq: number): string => `${conversationId}/t${turnSeq}`
export const callIdOf = (turnId: string, llmCallSeq: number): string => `${turnId}/c${llmCallSeq}`
/** One operation per tool call: the call's position makes it unique even if a provider repeats ids. */
export const operationIdOf = (callId: string, position: number, toolCallId: string): string =>
  `${callId}/${position}:${toolCallId}`

// =============================================================================
// State operations (pure)
// =============================================================================

export const heldAt = (waiting: WaitingClient, position: number): ToolResultMessage | undefined =>
  waiting.held.find((h) => h.position === position)?.result

/** A new segment holding `messages`, opened at the end of the journal. */
export const openSegment = (state: ConversationState, opening: Omit<Segment, "start">, messages: ReadonlyArray<Message>): ConversationState =>
  appendMessages({
    ...state,
    segment: { ...opening, start: state.segment.start + state.messages.length },
    messages: [],
    messagesHash: emptyMessagesHash,
    context: unknownContextSize,
    checkpointed: 0
  }, messages)

export const appendMessages = (state: ConversationState, messages: ReadonlyArray<Message>): ConversationState => {
  if (messages.length === 0) return state
  let hash = state.messagesHash
  for (const message of messages) hash = extendMessagesHash(hash, messageHash(message))
  return { ...state, messages: [...state.messages, ...messages], messagesHash: hash }
}

export const appendQueued = (state: ConversationState): ConversationState =>
  state.queued.length === 0 ? state : { ...appendMessages(state, state.queued), queued: [] }

export const errorResult = (call: ToolCall, text: string): ToolResultMessage => ({
  role: "toolResult",
  toolCallId: call.id,
  toolName: call.name,
  content: [{ type: "text", text }],
  isError: true
})

/**
 * Ends the running turn early: every tool call still open gets its result (the real one if it
 * already arrived, else an error saying why), in call order, so the history stays valid for
 * the next request; queued user messages follow.
 */
export const closeTurn = (state: ConversationState, why: string): ConversationState => {
  const waiting = state.waiting
  const results: Array<ToolResultMessage> = []
  if (waiting !== null) {
    for (let position = waiting.appended; position < waiting.toolCalls.length; position++) {
      const call = waiting.toolCalls[position]!.toolCall
      results.push(heldAt(waiting, position) ?? errorResult(call, why))
    }
  }
  return appendQueued({ ...appendMessages(state, results), waiting: null, activeCallId: null, compaction: null })
}

// =============================================================================
// The streamed response (memory only)
// =============================================================================

/**
 * The answer the running model call had streamed when a new turn superseded it: its text
 * blocks, in content order, as one assistant message (no usage; `api` and `provider` empty, so
 * it is replayed to any target as plain text). Thinking and tool calls, complete or not, are
 * left out: no tool call of it ever ran. None when the state reads no answer (no call, a
 * summary call, a stream that showed no text).
 */
export const partialAnswerOf = (state: RuntimeState): AssistantMessage | undefined => {
  const { committed, pending } = state
  if (pending === null || committed.status !== "waitingLlm" || committed.compaction !== null || pending.callId !== committed.activeCallId) return undefined
  const content: Array<TextContent> = []
  for (const block of pending.blocks) {
    if (block !== undefined && block.kind === "text" && block.text !== "") content.push({ type: "text", text: block.text })
  }
  if (content.length === 0) return undefined
  return { role: "assistant", content, api: "", provider: "", model: committed.settings?.model ?? "", usage: emptyUsage, stopReason: "stop" }
}

export const applyDelta = (pending: PendingResponse, event: ResponseEvent): PendingResponse => {
  if (!("index" in event)) return pending
  const blocks = pending.blocks.slice()
  const current = blocks[event.index]
  switch (event._tag) {
    case "TextStart":
      blocks[event.index] = { kind: "text", text: "", open: true }
      break
    case "ThinkingStart":
      blocks[event.index] = { kind: "thinking", text: "", open: true }
      break
    case "ToolCallStart":
      blocks[event.index] = { kind: "toolCall", text: "", id: event.id, name: event.name, open: true }
      break
    case "TextDelta":
    case "ThinkingDelta":
    case "ToolCallDelta": {
      const kind = event._tag === "TextDelta" ? "text" : event._tag === "ThinkingDelta" ? "thinking" : "toolCall"
      blocks[event.index] = { ...(current ?? { kind, open: true }), text: (current?.text ?? "") + event.delta }
      break
    }
    case "TextEnd":
    case "ThinkingEnd":
      if (current !== undefined) blocks[event.index] = { ...current, open: false }
      break
    case "ToolCallEnd":
      blocks[event.index] = {
        kind: "toolCall",
        text: event.toolCall.arguments,
        id: event.toolCall.id,
        name: event.toolCall.name,
        open: false
      }
      break
    default:
      return pending
  }
  return { ...pending, blocks, deltaCount: pending.deltaCount + 1 }
}

