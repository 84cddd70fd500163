/**
 * One Cursor request's turn session, as data: what the wires (RunSSE + BidiAppend, or `Run`)
 * bind to. It knows nothing of HTTP: an ordered inbox for the client's messages, a turn channel
 * for the server's frames (with a backlog for a reconnecting reader), the protocol correlation
 * the Dialect threads (exec, KV and tool call ids), the tool machines in flight and the
 * lifecycle, an explicit tagged union.
 *
 * The modules beside this one act on it: `Sessions.ts` (the registry and the runner's
 * gateway), `TurnEnd.ts`, `ToolOps.ts`, `ClientInput.ts` (the client's messages in order),
 * `Acks.ts` and `Recovery.ts` (restart recovery).
 */
import { Data, Deferred, Effect } from "effect"
import type { FiberSet } from "effect"
import * as Dialect from "../Dialect.js"
import type { ClientMessage, RunRequest } from "../Dialect.js"
import type { CursorMode } from "../Tools.js"
import type { AgentServerMessage, ConversationStateStructure, PrewarmRequest, TodoItem, ToolCall as CursorToolCall } from "../gen/agent/v1/agent_pb.js"
import type { TurnRef } from "../Runner.js"
import type { CreatedPlan, ToolRun } from "../Tools.js"
import type * as Tools from "../Tools.js"
import { emptyInbox } from "./AppendInbox.js"
import type { AppendInbox } from "./AppendInbox.js"
import { envelope } from "./Connect.js"
import type { Settlement } from "./Settlement.js"
import { makeTurnChannel } from "./TurnChannel.js"
import type { TurnChannel } from "./TurnChannel.js"
import type { TransportOptions } from "./Options.js"

/**
 * Where a session stands.
 * - `Open`: created by a reader or an append that came first; no run request yet and the runner
 *   has not spoken for it (after a restart: maybe a turn being resumed, or one that ended).
 * - `Running`: a turn runs for this request (its run request arrived, or the runner spoke).
 * - `Replaying`: the end of a turn an earlier process committed is being sent (`Recovery.ts`).
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

export interface RunningOperation {
  readonly operationId: string
  readonly conversationId: string
  readonly toolCallId: string
  readonly modelCallId: string
  readonly startedAtMs: number
  run: ToolRun | undefined
  /** A Task's child run, once Cursor opened it (`Subagents.attachChild`). */
  child?: { readonly conversationId: string; readonly requestId: string }
}

/** An append the inbox took, with when it arrived (a held one's wait counts from then). */
export interface Taken {
  readonly seqno: number
  readonly message: ClientMessage
  readonly arrivedAtMs: number
}

/** The user message a turn answers, as its checkpoint names it. */
export interface TurnUserMessage {
  readonly text: string
  readonly messageId: string
  readonly mode: CursorMode
}

/** What restart recovery tracks about a session (see `Recovery.ts`). */
export interface RecoveryMarks {
  /**
   * The runner spoke for this request before any run request reached this process (a turn
   * recovered after a restart): the first append this process sees sets where its inbox starts.
   */
  adoptFirstAppend: boolean
  /** A fiber is passing over this recovered inbox's gaps (`Recovery.watchGaps`). */
  passingGaps: boolean
  /** The store says this request started a turn in an earlier process (`Recovery.startedTurnBefore`). */
  knownToStore: boolean
  /** When the sweep last asked the store about this request. */
  storeCheckedAtMs: number | undefined
}

export interface Session {
  readonly requestId: string
  lifecycle: Lifecycle
  /**
   * Tells this request's turns apart in input ids: the IDE reuses a request id for a new turn,
   * so `requestId:seqno` alone would make the runner skip the new turn as already applied.
   * The run request's user message id when there is one (stable across redeliveries and
   * restarts; a recovered turn takes it from its settings), else a per-process generation.
   */
  turnKey: string
  /** The turn the runner last spoke for on this session. */
  turnId: string | undefined
  readonly channel: TurnChannel
  inbox: AppendInbox<Taken>
  /**
   * Appends taken whose acknowledgement must wait, by seqno (held ones until handed on,
   * handed-on ones until the inputs they carry are committed): see `Acks.ts`.
   */
  readonly unsettled: Map<number, Settlement>
  correlation: Dialect.TurnCorrelation
  conversationId: string | undefined
  run: RunRequest | undefined
  /** A `prewarm_request` took the request before any run request: the settings of the turn its user message starts. */
  prewarm: PrewarmRequest | undefined
  /**
   * This request resumes the turn that session runs (`resume_action`, `Resume.ts`): its output
   * mirrors that session's frames, and its client messages act on that session's turn.
   */
  resumeOf: Session | undefined
  /** The user message of the current turn when it is not the run request's (a queued message). */
  queuedUserMessage: TurnUserMessage | undefined
  /** A queued message was handed to the runner while the turn was ending: the stream waits for its turn. */
  queuedTurnExpected: boolean
  /** Completed when a turn starts on this stream after the one ending (`TurnEnd.beginNextTurn`). */
  nextTurnStarted: Deferred.Deferred<void> | undefined
  /** The checkpoint this stream last published: the next turn on the stream builds on it. */
  lastCheckpoint: ConversationStateStructure | undefined
  todos: ReadonlyArray<TodoItem>
  /** The parent this request's run is a subagent for (Cursor's `x-parent-*` headers). */
  parent: Dialect.ParentLink | undefined
  /** The subagents this turn's Tasks ran, for the checkpoint's `subagent_runs_by_parent_tool_call_id`. */
  subagentRuns: Array<Tools.SubagentRun>
  /** The plans CreatePlan made (those the client's checkpoint held first), for the checkpoint's `plan` and `plans`. */
  plans: ReadonlyArray<CreatedPlan>
  /** Typed tool calls as the UI saw them complete, for the checkpoint's steps. */
  cursorToolCalls: Record<string, CursorToolCall>
  /** The compactions the current turn made, for its checkpoint's summary fields. */
  summaries: Array<Dialect.CheckpointSummary>
  readonly operations: Map<string, RunningOperation>
  /** `set_blob`s in flight, by KV id: each called once, with whether the client stored the blob (false: an error, the session's end). */
  readonly blobAcks: Map<number, (ok: boolean) => void>
  /** get_blob reads in flight (request-context parts, attached images), by KV id: the blob, or undefined on an error. */
  readonly blobReads: Map<number, Deferred.Deferred<Uint8Array | undefined>>
  /**
   * Set while the run request's context parts are read back, before its turn starts: follow-ups
   * and cancels that arrive meanwhile run after the start, in order.
   */
  startGate: Settlement | undefined
  /** The client's input has ended (a `Run` stream half-closed): no answer to a KV request can come any more. */
  inputEnded: boolean
  /** Serializes this request's client messages: the inbox and what it hands on. */
  readonly lock: Effect.Semaphore
  readonly recovery: RecoveryMarks
  readonly createdAtMs: number
  lastActivityMs: number
}

/** What the session modules share: the options, the clock, and where background work runs. */
export interface SessionEnv {
  readonly options: TransportOptions
  readonly background: FiberSet.FiberSet
}

let generation = 0

export const makeSession = (requestId: string, atMs: number): Effect.Effect<Session> =>
  Effect.map(Effect.makeSemaphore(1), (lock) => ({
    requestId,
    lifecycle: Lifecycle.Open(),
    turnKey: `g${++generation}`,
    turnId: undefined,
    channel: makeTurnChannel(requestId),
    inbox: emptyInbox(),
    unsettled: new Map(),
    correlation: Dialect.initialCorrelation(requestId),
    conversationId: undefined,
    run: undefined,
    prewarm: undefined,
    resumeOf: undefined,
    queuedUserMessage: undefined,
    queuedTurnExpected: false,
    nextTurnStarted: undefined,
    lastCheckpoint: undefined,
    todos: [],
    plans: [],
    parent: undefined,
    subagentRuns: [],
    cursorToolCalls: {},
    summaries: [],
    operations: new Map(),
    blobAcks: new Map(),
    blobReads: new Map(),
    startGate: undefined,
    inputEnded: false,
    lock,
    recovery: { adoptFirstAppend: false, passingGaps: false, knownToStore: false, storeCheckedAtMs: undefined },
    createdAtMs: atMs,
    lastActivityMs: atMs
  }))

/** No run request reached this process for the request, the runner never spoke for it, and nothing ended it yet. */
export const isUnresolved = (session: Session): boolean => session.lifecycle._tag === "Open"

/** The session replays (or replayed) the end of a turn an earlier process ended. */
export const isReplay = (session: Session): boolean => {
  const lifecycle = session.lifecycle
  return lifecycle._tag === "Replaying" || ((lifecycle._tag === "Ending" || lifecycle._tag === "Ended") && lifecycle.replayed)
}

export const isEnded = (session: Session): boolean => session.lifecycle._tag === "Ended"

// -----------------------------------------------------------------------------
// Frames
// -----------------------------------------------------------------------------

export const frameOf = (message: AgentServerMessage): Uint8Array => envelope(0, Dialect.toFrame(message))
export const HEARTBEAT_FRAME = frameOf(Dialect.encodeHeartbeat())
export const endFrameOf = (end: Dialect.EndStream): Uint8Array => envelope(0x02, Dialect.encodeEndStream(end))

export const write = (session: Session, messages: ReadonlyArray<AgentServerMessage>): Effect.Effect<void> =>
  session.channel.write(messages.map(frameOf))

/** The Cursor request a turn belongs to: the run request's id, kept in the turn settings. */
export const requestIdOf = (turn: TurnRef): string => Dialect.requestIdOfSettings(turn.settings) ?? turn.turnId

/** The conversation a run request is for: its conversation id, else the request id. */
export const conversationOf = (session: Session, run: RunRequest): string =>
  run.conversationId !== undefined && run.conversationId !== "" ? run.conversationId : session.requestId

/** The input id of a request's append: `<request id>/<turn key>:<seqno>`. */
export const inputIdOf = (session: Session, seqno: number): string => `${session.requestId}/${session.turnKey}:${seqno}`

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
