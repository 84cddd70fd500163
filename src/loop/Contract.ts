/**
 * The loop's contract with its runner (DESIGN.md §3): the inputs it takes, the commands it
 * gives, the `Transition` one input makes (with what it settles of the work in flight) and the
 * `Policy` it is built with. `Loop.ts` re-exports all of it beside `transition`.
 */
import { Data } from "effect"
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
} from "../Llm.js"
import type { ClientHistory, CompactionPolicy, CompactionTrigger } from "./Segments.js"
import type { RuntimeState, TurnSettings } from "./State.js"

// =============================================================================
// Inputs and commands
// =============================================================================

export type Input = Data.TaggedEnum<{
  /**
   * A new turn: the user's message, context the client attached, and the turn's settings.
   * `clientHistory` is what the client holds of the history: naming fewer messages than the
   * last turn left, as a prefix of them (none included), it rewinds to that prefix. Without it
   * (the client sent no checkpoint at all) the stored history continues: the store is the truth.
   * A new conversation's first turn continues from the history it carries (`seed`, `imported`).
   */
  Start: {
    readonly message: UserMessage
    readonly context: ReadonlyArray<UserContent>
    readonly settings: TurnSettings
    readonly clientHistory?: ClientHistory
  }
  /**
   * A turn that only compacts the history (the user's summarize), with what the user asks of the
   * summary. Of `settings` it takes only the model and the client request: the summary call keeps
   * the prompt and tools of the conversation's last call (`summarizeSettings`).
   */
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
  /**
   * Save the operation, then run the tool call on the client; its result comes back as
   * `ToolResult`. `position` is the call's place among its message's tool calls.
   */
  CallClient: { readonly operationId: string; readonly toolCall: ToolCall; readonly position: number }
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

// =============================================================================
// The transition
// =============================================================================

export interface Transition {
  readonly state: RuntimeState
  readonly emit: ReadonlyArray<ResponseEvent>
  readonly command: Command
  /** What the input ends of the work in flight: the runner records it with the new state. */
  readonly settles: Settles
}

/**
 * What an input settles, decided with the transition: the model call it ends (its answer
 * committed, or failed or canceled) and the client operation a tool result completes.
 */
export interface Settles {
  readonly modelCall?: CallSettlement
  /** Where a compaction stands after this input (started, completed, failed, or a summarize with nothing to do). */
  readonly compaction?: CompactionProgress
  /** None for a result that arrived before its call was handed to the client (that call is never sent). */
  readonly operation?: { readonly operationId: string; readonly result: ToolResultMessage }
}

/** How a model call ended: its answer committed (`model` is the id the call asked for), or not, and why. */
export type CallSettlement =
  | { readonly callId: string; readonly status: "committed"; readonly model: string; readonly message: AssistantMessage }
  | { readonly callId: string; readonly status: "failed" | "canceled"; readonly error: string }

/** Where a compaction of the running turn stands, for the client's "summarizing" display. */
export type CompactionProgress = Data.TaggedEnum<{
  /** The summary call was saved and starts now. */
  Started: { readonly trigger: CompactionTrigger }
  /**
   * The new segment is committed: `summarized` are the previous segment's messages the summary
   * replaced, `kept` how many of its latest messages follow it verbatim, `summaryMessage` the
   * segment's first message.
   */
  Completed: {
    readonly trigger: CompactionTrigger
    readonly summary: string
    readonly summarized: ReadonlyArray<Message>
    readonly kept: number
    readonly summaryMessage: Message
  }
  /** The summary call failed; the history is as it was (an automatic compaction goes on without it). */
  Failed: { readonly trigger: CompactionTrigger; readonly error: string }
  /** The user asked for a summary of a conversation too short to need one: nothing changed. */
  Skipped: {}
}>
export const CompactionProgress = Data.taggedEnum<CompactionProgress>()

/** Most inputs settle nothing (every delta): one shared value. */
export const settlesNothing: Settles = {}

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
