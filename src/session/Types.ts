/** The session machine's inputs, commands and step: plain data (see `Session.ts`). */
import { Data } from "effect"
import type * as Dialect from "../Dialect.js"
import type { ClientMessage, RunRequest } from "../Dialect.js"
import type { ConversationStateStructure, AgentServerMessage } from "../gen/agent/v1/agent_pb.js"
import type { ToolResultMessage, Usage } from "../Llm.js"
import type { ConversationState } from "../Loop.js"
import type { CompactionProgress, DispatchedOperation, TurnOutcome, TurnRef } from "../Runner.js"
import type { ServerWork, ToolRun, WorkResult } from "../Tools.js"
import type { SessionState, Submission } from "./State.js"

/**
 * What the store says about an append, looked up by the driver before the append goes in
 * (`questionsOf` says which): each is asked only when the rules need it.
 */
export interface StoreFacts {
  /** The store holds a turn this request started (an append far ahead, nothing handed on yet). */
  readonly startedTurnBefore?: boolean
  /** The run request's input id is committed (a run request re-sent). */
  readonly runRequestCommitted?: boolean
  /** The turn that committed run request started: still running (recovered), or ended (its end replayed). */
  readonly resentTurn?: "Running" | "Ended" | "Gone"
}

export type SessionInput = Data.TaggedEnum<{
  /**
   * The client's message numbered `seqno` (BidiAppend's `append_seqno`, or its place on a `Run`
   * stream). `newTurn`: the session was just replaced for it (a reused request id).
   */
  Append: {
    readonly seqno: number
    readonly message: ClientMessage
    readonly atMs: number
    readonly window: number
    readonly facts: StoreFacts
    readonly newTurn: boolean
  }
  /** The driver carried out a delivered message; these are the inputs it gave, to submit. */
  Delivered: { readonly seqno: number; readonly submissions: ReadonlyArray<Submission> }
  /**
   * A run request's turn is ready to start (its context read back, when it named any): the start
   * to submit (none: it starts nothing), with the run request as merged.
   */
  TurnReady: { readonly inputId: string; readonly run: RunRequest; readonly start: Submission | undefined }
  /**
   * The history the run request's checkpoint names is only the client's (the store holds none of
   * it): read these blobs back before its turn starts (`AwaitBlobs`, then `TurnReady` or `TurnRefused`).
   */
  ReadHistory: { readonly inputId: string; readonly blobIds: ReadonlyArray<Uint8Array> }
  /** The run request's turn cannot start (a history the client did not give back): nothing is submitted; the stream ends with `end`. */
  TurnRefused: { readonly inputId: string; readonly end: Dialect.EndStream }
  /** A word for the user before the turn's frames (a budget nearly spent): a server notice, not the model's. */
  Notice: { readonly text: string }
  /**
   * A request that resumes this session's turn hands on its append `seqno` (`owner`'s): a
   * follow-up or a cancel (`owner` owes on its commit), an exec, interaction or KV answer.
   */
  Forwarded: { readonly seqno: number; readonly message: ClientMessage; readonly inputId: string; readonly owner: string; readonly atMs: number }
  /** The runner applied input `inputId` (committed it, found it committed, or found it changes nothing). */
  Committed: { readonly inputId: string }
  /** The start committed: what queued behind the gate goes in, in order. */
  FlushGate: {}
  /** Look at a recovered inbox's gap: whether its input is committed, and the grace a missing append gets. */
  PassGap: { readonly committed: boolean; readonly atMs: number; readonly graceMs: number }
  /** A recovered turn's held appends: the inbox starts at the lowest of them. */
  AdoptHeld: { readonly window: number }
  /** The runner speaks for `turn` on this session (a delta, a tool call, a compaction, an abort, the end). */
  Spoke: { readonly turn: TurnRef }
  /** The runner dispatches a tool call of `turn` to the client. */
  Dispatch: { readonly turn: TurnRef; readonly dispatched: DispatchedOperation; readonly atMs: number; readonly subagentModel: string | undefined }
  /** The server's work for a tool call is done. */
  WorkDone: { readonly operationId: string; readonly run: ToolRun; readonly result: WorkResult; readonly atMs: number }
  /** The runner aborts the turn's tool calls. */
  Abort: {}
  /** A compaction's progress, to show (and the summary, for the checkpoint). */
  Compaction: { readonly progress: CompactionProgress }
  /** A child run opened for the Task `toolCallId` of this request (Cursor's `x-parent-*` headers). */
  ChildAttached: { readonly toolCallId: string; readonly child: { readonly conversationId: string; readonly requestId: string } }
  /**
   * The turn `turn` ends on the wire with `outcome`: its end, and for a final answer the
   * checkpoint projected from the committed `conversation` (the context meter out of `maxTokens`).
   */
  Ending: {
    readonly turn: TurnRef
    readonly outcome: TurnOutcome
    readonly conversation: ConversationState
    readonly usage: Usage
    readonly maxTokens: number
  }
  /** The end-stream frame is written. */
  Ended: { readonly atMs: number }
  /** The turn is over and its request id taken for a new one: what it holds is never handed on. */
  DropHeld: {}
  /** The end of a turn an earlier process ended is replayed here. */
  Replays: { readonly conversationId: string; readonly turnKey: string | undefined; readonly carried: ConversationStateStructure | undefined }
  /** This request mirrors the turn of another (`resume_action` on a turn in flight). */
  Mirrors: {}
}>
export const SessionInput = Data.taggedEnum<SessionInput>()

export type LogLevel = "debug" | "info" | "warning"

export type SessionCommand = Data.TaggedEnum<{
  /** Acknowledge append `seqno` (and every copy of it waiting). */
  Ack: { readonly seqno: number }
  /** Refuse the append: nothing changed; the client sees this Connect error. */
  Refuse: { readonly code: "out_of_range"; readonly message: string }
  /** Submit an input to the runner; its commit comes back as `Committed` to the session of `owner`. */
  Submit: { readonly submission: Submission; readonly owner: string }
  /**
   * Start the run request's turn: read its context back first (the get_blob requests `reads`,
   * written already, by KV id and blob id; and the past chats it names); then report `TurnReady`.
   */
  StartTurn: {
    readonly seqno: number
    readonly run: RunRequest
    readonly inputId: string
    readonly readContext: boolean
    readonly reads: ReadonlyArray<{ readonly kvId: number; readonly blobId: string }>
  }
  /**
   * The get_blob requests `reads` (by KV id and hex blob id) go out in the `Write` that follows:
   * the caller of `ReadHistory` waits for their answers (registered before that write).
   */
  AwaitBlobs: { readonly reads: ReadonlyArray<{ readonly kvId: number; readonly blobId: string }> }
  /** Write these messages to the turn's stream, in order. */
  Write: { readonly messages: ReadonlyArray<AgentServerMessage> }
  /** Do the server's work for a tool call (off the request's lock); report `WorkDone`. */
  StartWork: { readonly operationId: string; readonly run: ToolRun; readonly work: ServerWork }
  /** A dispatched tool call the server finished at once (TodoWrite): its result, for the runner. */
  DoneAtOnce: { readonly message: ToolResultMessage }
  /** A forwarded answer gave these inputs: `owner`'s append `seqno` owes on them (`Delivered` there). */
  Gave: { readonly owner: string; readonly seqno: number; readonly submissions: ReadonlyArray<Submission> }
  /**
   * The user stopped subagent `subagentId`: cancel its child conversations (`child`, and any the
   * driver's registry knows), submit the Task's result `done`; report `Delivered` for `seqno`.
   */
  StopSubagent: {
    readonly seqno: number
    readonly owner: string
    readonly subagentId: string
    readonly inputId: string
    readonly child: string | undefined
    readonly done: Submission | undefined
  }
  /** Carry out a client message on the driver's side (tool machines, KV answers, subagents); report `Delivered` when `owes`. */
  Deliver: { readonly seqno: number; readonly message: ClientMessage; readonly inputId: string; readonly owes: boolean }
  /** Hand a client message to the turn this request resumes (`Forwarded` there). */
  Forward: { readonly seqno: number; readonly message: ClientMessage; readonly inputId: string; readonly atMs: number }
  /** A forwarded message gave no input: `owner` owes nothing on `inputId` (report `Committed` to it). */
  Release: { readonly owner: string; readonly inputId: string }
  /** Resume another request's turn (`resume_action`). */
  Resume: {}
  /** End the stream with `end`. */
  End: { readonly end: Dialect.EndStream }
  /**
   * Send the end of the turn that is ending (`replayed`: an earlier process ended it): `messages`
   * (the blobs' set_blob, whose KV ids are `blobs`, then turn_ended) at once, `checkpoint` once
   * every blob is acknowledged, `end` last. A failed or canceled turn has no checkpoint.
   */
  SendTurnEnd: {
    readonly replayed: boolean
    readonly messages: ReadonlyArray<AgentServerMessage>
    readonly blobs: ReadonlyArray<number>
    readonly checkpoint: ConversationStateStructure | undefined
    readonly end: Dialect.EndStream
  }
  /** Replay the end of the turn the store says this request ended. */
  ReplayEnd: {}
  /** A new turn on a reused request id: a fresh session takes this append. */
  Replace: {}
  /** Step `FlushGate` under the request's lock. */
  FlushGate: {}
  /** Start passing over this recovered inbox's gaps. */
  WatchGaps: {}
  /** Look at the gap again in `ms` (0: at once). */
  GapWait: { readonly ms: number }
  /** The runner spoke for a recovered turn whose appends were held: adopt them. */
  AdoptHeld: {}
  /** A queued message started the next turn on this stream: what the driver kept of the last turn goes. */
  NextTurn: {}
  Log: { readonly level: LogLevel; readonly message: string }
}>
export const SessionCommand = Data.taggedEnum<SessionCommand>()

/** One step of the machine: the next state and what to carry out, in order. */
export interface Step {
  readonly state: SessionState
  readonly commands: ReadonlyArray<SessionCommand>
}

export const NO_COMMANDS: ReadonlyArray<SessionCommand> = []
