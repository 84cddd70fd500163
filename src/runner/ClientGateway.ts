/**
 * The client side, as the runner sees it: which turn a call is about, the tool calls it hands
 * to the client, how a turn ended, and the `ClientGateway` the transport provides to publish a
 * turn's events, run its tool calls on the client, stop them, and end the turn.
 */
import { Context, Data } from "effect"
import type { Effect } from "effect"
import type { ResponseEvent, ToolCall, ToolResultMessage, Usage } from "../Llm.js"
import type { Command, CompactionProgress, ConversationState, TurnSettings } from "../Loop.js"

/** Which turn a call is about; the transport finds the Cursor request from the settings. */
export interface TurnRef {
  readonly conversationId: string
  readonly turnId: string
  readonly settings: TurnSettings
}

export interface DispatchedOperation {
  readonly operationId: string
  readonly toolCall: ToolCall
  /** The model call whose answer holds this tool call. */
  readonly modelCallId: string
  /** True when this is a re-send after a restart (the operation was sent before the crash). */
  readonly resend: boolean
}

export type TurnOutcome = Extract<Command, { _tag: "Final" | "Failed" | "Canceled" }>

/**
 * Where a turn that a client input started stands now, from the committed state (see
 * `Runner.findStartedTurn`).
 */
export type StartedTurn = Data.TaggedEnum<{
  /** The conversation's current turn, not over: running in this process, or resumed by recovery. */
  Running: { readonly turn: TurnRef; readonly startInputId: string }
  /**
   * The conversation's current turn, over: what `ClientGateway.finish` is given for it, rebuilt
   * from the committed state (see `endedOutcome`); `usage` sums the turn's committed answers.
   */
  Ended: {
    readonly turn: TurnRef
    readonly startInputId: string
    readonly outcome: TurnOutcome
    readonly state: ConversationState
    readonly usage: Usage
  }
  /** A later turn has started on the conversation since: the committed state is no longer this turn's. */
  Past: { readonly conversationId: string; readonly turnId: string; readonly startInputId: string }
}>
export const StartedTurn = Data.taggedEnum<StartedTurn>()

export { CompactionProgress } from "../Loop.js"

export class ClientGateway extends Context.Tag("cursor-byok/ClientGateway")<ClientGateway, {
  /** Streamed events of a running turn's model call `callId`, in order. */
  readonly publish: (turn: TurnRef, callId: string, events: ReadonlyArray<ResponseEvent>) => Effect.Effect<void>
  /**
   * `publish` as a plain call, for the delta fast path: done when the turn's request is open
   * and running (true), else nothing is done and the caller publishes through `publish` (false).
   */
  readonly publishNow: (turn: TurnRef, callId: string, events: ReadonlyArray<ResponseEvent>, nowMs: number) => boolean
  /**
   * Runs one tool call on the client; its result comes back through `Runner.submit` as a
   * ToolResult, or is returned here when the tool is done at once (a tool the server keeps,
   * such as TodoWrite): the runner applies it as `<operation id>:result`.
   */
  readonly dispatch: (turn: TurnRef, operation: DispatchedOperation) => Effect.Effect<ToolResultMessage | undefined>
  /** A compaction in the running turn started, ended or failed (committed before this is called). */
  readonly compaction: (turn: TurnRef, progress: CompactionProgress) => Effect.Effect<void>
  /** Stops the turn's client operations (a cancel). */
  readonly abort: (turn: TurnRef) => Effect.Effect<void>
  /** The turn is over: send what ends it (usage, checkpoint, end of stream); `usage` sums the turn's committed answers (`turnUsageOf`). */
  readonly finish: (
    turn: TurnRef,
    outcome: TurnOutcome,
    state: ConversationState,
    usage: Usage
  ) => Effect.Effect<void>
}>() {}
