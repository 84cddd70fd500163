/**
 * The state of one Cursor request's turn session, as an immutable value: where it stands (a
 * tagged lifecycle), its ordered inbox, the acknowledgements it owes, the start gate, the queued
 * next turn and its restart-recovery marks. `Session.ts` moves it; nothing else assigns it.
 */
import { Data } from "effect"
import type { ClientMessage, RunRequest } from "../Dialect.js"
import * as Dialect from "../Dialect.js"
import type { ConversationStateStructure, PrewarmRequest, TodoItem, ToolCall as CursorToolCall } from "../gen/agent/v1/agent_pb.js"
import type { Input } from "../Loop.js"
import type { CreatedPlan, CursorMode, SubagentRun, ToolRun } from "../Tools.js"
import { emptyInbox } from "./Inbox.js"
import type { AppendInbox } from "./Inbox.js"

/**
 * Where a session stands.
 * - `Open`: created by a reader or an append that came first; no run request yet and the runner
 *   has not spoken for it (after a restart: maybe a turn being resumed, or one that ended).
 * - `Running`: a turn runs for this request (its run request arrived, or the runner spoke).
 * - `Replaying`: the end of a turn an earlier process committed is being sent.
 * - `Ending`: the turn is over; its end is on its way (blobs, turn_ended, checkpoint) and a
 *   message the user queued may still start the next turn on the same stream.
 * - `Ended`: the end-stream frame is written; `replayed` when it was a replay.
 */
export type Lifecycle = Data.TaggedEnum<{
  Open: {}
  Running: {}
  Replaying: {}
  Ending: { readonly turnId: string; readonly replayed: boolean }
  Ended: { readonly atMs: number; readonly replayed: boolean }
}>
export const Lifecycle = Data.taggedEnum<Lifecycle>()

/** An append the inbox took, with when it arrived (a held one's wait counts from then). */
export interface Taken {
  readonly seqno: number
  readonly message: ClientMessage
  readonly arrivedAtMs: number
}

/** The user message of the current turn when it is not the run request's (a queued message). */
export interface TurnUserMessage {
  readonly text: string
  readonly messageId: string
  readonly mode: CursorMode
}

/**
 * What an append's acknowledgement waits for: `held` behind a gap, `delivering` while the
 * driver carries out what it asked for, the input ids whose commits it waits on, or `behind`:
 * nothing of its own, an append before it is still owed. An append owed nothing is acknowledged.
 */
export type Owed = "held" | "delivering" | "behind" | ReadonlySet<string>

/** An input to submit to the runner, for `conversationId`, under `inputId`. */
export interface Submission {
  readonly conversationId: string
  readonly input: Input
  readonly inputId: string
}

/**
 * The start gate. `Open`: follow-ups and cancels are submitted as they come. `Reading`: the run
 * request's context parts are read back before its turn starts; `Starting`: the start is
 * submitted and not committed yet; `Flushing`: it committed, and what queued is about to go in.
 * Meanwhile follow-ups and cancels queue, and go in order once the start committed (or turned
 * out to start nothing).
 */
export type Gate = Data.TaggedEnum<{
  Open: {}
  Reading: { readonly inputId: string; readonly queued: ReadonlyArray<Submission> }
  Starting: { readonly inputId: string; readonly queued: ReadonlyArray<Submission> }
  /** The start committed: what queued goes in at `FlushGate`, under the request's lock, before anything that comes after. */
  Flushing: { readonly queued: ReadonlyArray<Submission> }
}>
export const Gate = Data.taggedEnum<Gate>()

/** What restart recovery tracks. */
export interface RecoveryMarks {
  /**
   * The runner spoke for this request before any run request reached this process (a turn
   * recovered after a restart): the first append this process sees sets where its inbox starts.
   */
  readonly adoptFirstAppend: boolean
  /** A fiber is passing over this recovered inbox's gaps. */
  readonly passingGaps: boolean
  /** The store says this request started a turn in an earlier process. */
  readonly knownToStore: boolean
}

export interface SessionState {
  readonly requestId: string
  readonly lifecycle: Lifecycle
  /**
   * Tells this request's turns apart in input ids: the IDE reuses a request id for a new turn,
   * so `requestId:seqno` alone would make the runner skip the new turn as already applied.
   * The run request's user message id when there is one (stable across redeliveries and
   * restarts; a recovered turn takes it from its settings), else a per-process generation.
   */
  readonly turnKey: string
  /** The turn the runner last spoke for on this session. */
  readonly turnId: string | undefined
  readonly inbox: AppendInbox<Taken>
  /** The acknowledgements owed, by seqno. */
  readonly owed: ReadonlyMap<number, Owed>
  readonly gate: Gate
  readonly conversationId: string | undefined
  readonly run: RunRequest | undefined
  /** A `prewarm_request` took the request before any run request: the settings of the turn its user message starts. */
  readonly prewarm: PrewarmRequest | undefined
  /** This request resumes another request's turn (`resume_action`): its client messages act on that turn. */
  readonly resumes: boolean
  /** The user message of the current turn when it is not the run request's (a queued message). */
  readonly queuedUserMessage: TurnUserMessage | undefined
  /** A queued message was handed to the runner while the turn was ending: the stream waits for its turn. */
  readonly queuedTurnExpected: boolean
  readonly recovery: RecoveryMarks
  /** The protocol correlation the Dialect threads: exec, KV and tool call ids. */
  readonly correlation: Dialect.TurnCorrelation
  /** The tool calls running on the client, by operation id (`ToolCalls.ts`). */
  readonly operations: ReadonlyMap<string, Operation>
  /** The conversation's todo list as the turn's tool calls left it. */
  readonly todos: ReadonlyArray<TodoItem>
  /** The plans CreatePlan made (those the client's checkpoint held first), for the checkpoint's `plan` and `plans`. */
  readonly plans: ReadonlyArray<CreatedPlan>
  /** The subagents this turn's Tasks ran, for the checkpoint's `subagent_runs_by_parent_tool_call_id`. */
  readonly subagentRuns: ReadonlyArray<SubagentRun>
  /** Typed tool calls as the UI saw them complete, for the checkpoint's steps. */
  readonly cursorToolCalls: Readonly<Record<string, CursorToolCall>>
  /** The compactions the current turn made, for its checkpoint's summary fields. */
  readonly summaries: ReadonlyArray<Dialect.CheckpointSummary>
  /** The checkpoint this stream last published: the next turn on the stream builds on it. */
  readonly lastCheckpoint: ConversationStateStructure | undefined
}

/** A tool call running on the client (its machine's state is `run`). */
export interface Operation {
  readonly operationId: string
  readonly conversationId: string
  readonly toolCallId: string
  readonly modelCallId: string
  readonly startedAtMs: number
  readonly run: ToolRun | undefined
  /** A Task's child run, once Cursor opened it. */
  readonly child?: { readonly conversationId: string; readonly requestId: string }
}

export const initialState = (requestId: string, turnKey: string): SessionState => ({
  requestId,
  lifecycle: Lifecycle.Open(),
  turnKey,
  turnId: undefined,
  inbox: emptyInbox(),
  owed: new Map(),
  gate: Gate.Open(),
  conversationId: undefined,
  run: undefined,
  prewarm: undefined,
  resumes: false,
  queuedUserMessage: undefined,
  queuedTurnExpected: false,
  recovery: { adoptFirstAppend: false, passingGaps: false, knownToStore: false },
  correlation: Dialect.initialCorrelation(requestId),
  operations: new Map(),
  todos: [],
  plans: [],
  subagentRuns: [],
  cursorToolCalls: {},
  summaries: [],
  lastCheckpoint: undefined
})

/** No run request reached this process for the request, the runner never spoke for it, and nothing ended it yet. */
export const isUnresolved = (state: SessionState): boolean => state.lifecycle._tag === "Open"

/** The session replays (or replayed) the end of a turn an earlier process ended. */
export const isReplay = (state: SessionState): boolean => {
  const lifecycle = state.lifecycle
  return lifecycle._tag === "Replaying" || ((lifecycle._tag === "Ending" || lifecycle._tag === "Ended") && lifecycle.replayed)
}

export const isEnded = (state: SessionState): boolean => state.lifecycle._tag === "Ended"

/** Whether the session is still ending the turn `turnId` (no later turn started on it, not ended). */
export const stillEnding = (state: SessionState, turnId: string): boolean =>
  state.lifecycle._tag === "Ending" && state.lifecycle.turnId === turnId

/** The conversation a run request is for: its conversation id, else the request id. */
export const conversationOf = (requestId: string, run: RunRequest): string =>
  run.conversationId !== undefined && run.conversationId !== "" ? run.conversationId : requestId

/** The input id of a request's append: `<request id>/<turn key>:<seqno>`. */
export const inputIdOf = (state: SessionState, seqno: number): string => `${state.requestId}/${state.turnKey}:${seqno}`

/** The turn key and seqno of one of the request's input ids (`inputIdOf`); undefined for any other id. */
export const parseInputId = (requestId: string, inputId: string): { readonly turnKey: string; readonly seqno: number } | undefined => {
  const prefix = `${requestId}/`
  const colon = inputId.lastIndexOf(":")
  if (!inputId.startsWith(prefix) || colon <= prefix.length) return undefined
  const turnKey = inputId.slice(prefix.length, colon)
  const seqno = inputId.slice(colon + 1)
  // A key with a slash would be another request's (`<request>/<more>/<key>:n`): message ids and generations have none.
  return /^\d+$/.test(seqno) && !turnKey.includes("/") ? { turnKey, seqno: Number(seqno) } : undefined
}

/** The input id a run request gets when a later process computes it alike: from its user message id. */
export const runRequestInputId = (requestId: string, seqno: number, run: RunRequest): string | undefined =>
  run.action._tag === "StartTurn" && run.action.userMessageId !== "" ? `${requestId}/${run.action.userMessageId}:${seqno}` : undefined
