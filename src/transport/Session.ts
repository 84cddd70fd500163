/**
 * One Cursor request's turn session as the driver holds it: the session machine's state
 * (`Session.ts` at the root: lifecycle, inbox, acknowledgements, gate, correlation, tool
 * machines, the checkpoint's parts), and what only the driver can hold: the turn channel for
 * the server's frames, the waits of the appends, of the blobs and of the context reads.
 */
import { Deferred, Effect } from "effect"
import type { FiberSet } from "effect"
import * as Dialect from "../Dialect.js"
import type { AgentServerMessage } from "../gen/agent/v1/agent_pb.js"
import type { TurnRef } from "../Runner.js"
import * as State from "../Session.js"
import type { SessionState } from "../Session.js"
import { initialState } from "../Session.js"
import { envelope } from "./Connect.js"
import type { Settlement } from "./Settlement.js"
import { makeTurnChannel } from "./TurnChannel.js"
import type { TurnChannel } from "./TurnChannel.js"
import type { TransportOptions } from "./Options.js"
import type { Caller } from "../Users.js"

export { Lifecycle, parseInputId } from "../Session.js"





export interface Session {
  readonly requestId: string
  /** The session machine's state (`Session.ts` at the root): replaced by `Driver.step`, never edited. */
  state: SessionState
  readonly channel: TurnChannel
  /** The acknowledgements appends wait for, by seqno (settled by the machine's `Ack`). */
  readonly waiters: Map<number, Settlement>
  /**
   * This request resumes the turn that session runs (`resume_action`, `Resume.ts`): its output
   * mirrors that session's frames, and its client messages act on that session's turn.
   */
  resumeOf: Session | undefined
  /** Called when a turn starts on this stream after the one ending (`TurnEnd.beginNextTurn`). */
  nextTurnStarted: (() => void) | undefined
  /** The parent this request's run is a subagent for (Cursor's `x-parent-*` headers). */
  parent: Dialect.ParentLink | undefined
  /** Who opened it (the door's caller of its first request); its other requests must be theirs (`Callers.ts`). */
  caller: Caller | undefined
  /** `set_blob`s in flight, by KV id: each called once, with whether the client stored the blob (false: an error, the session's end). */
  readonly blobAcks: Map<number, (ok: boolean) => void>
  /** get_blob reads in flight (request-context parts, attached images), by KV id: the blob, or undefined on an error. */
  readonly blobReads: Map<number, Deferred.Deferred<Uint8Array | undefined>>
  /** The client's input has ended (a `Run` stream half-closed): no answer to a KV request can come any more. */
  inputEnded: boolean
  /** Serializes this request's client messages and what they lead to: take it with `locked`. */
  readonly lock: Effect.Semaphore
  /** How many hold the lock or wait for it (`locked`): a client message is taken inline only when none does. */
  pending: number
  /** When the sweep last asked the store about this request. */
  storeCheckedAtMs: number | undefined
  readonly createdAtMs: number
  lastActivityMs: number
}

/** What the session modules share: the options, and where background work runs (`fork`: from a plain callback). */
export interface SessionEnv {
  readonly options: TransportOptions
  readonly background: FiberSet.FiberSet
  readonly fork: (effect: Effect.Effect<void>) => void
}

let generation = 0

export const makeSession = (requestId: string, atMs: number): Effect.Effect<Session> =>
  Effect.map(Effect.makeSemaphore(1), (lock) => ({
    requestId,
    state: initialState(requestId, `g${++generation}`),
    channel: makeTurnChannel(requestId),
    waiters: new Map(),
    resumeOf: undefined,
    nextTurnStarted: undefined,
    parent: undefined,
    caller: undefined,
    blobAcks: new Map(),
    blobReads: new Map(),
    inputEnded: false,
    lock,
    pending: 0,
    storeCheckedAtMs: undefined,
    createdAtMs: atMs,
    lastActivityMs: atMs
  }))

/** Runs `effect` under the request's lock, counted in `pending` while it waits and holds it. */
export const locked = <A, E, R>(session: Session, effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.suspend(() => {
    session.pending++
    return Effect.ensuring(session.lock.withPermits(1)(effect), Effect.sync(() => void session.pending--))
  })

/** A log line the session machine asked for (`Log`). */
export const logLine = (command: Extract<State.SessionCommand, { readonly _tag: "Log" }>): Effect.Effect<void> =>
  command.level === "debug" ? Effect.logDebug(command.message) : command.level === "info" ? Effect.logInfo(command.message) : Effect.logWarning(command.message)

export const isUnresolved = (session: Session): boolean => State.isUnresolved(session.state)
export const isReplay = (session: Session): boolean => State.isReplay(session.state)
export const isEnded = (session: Session): boolean => State.isEnded(session.state)

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

/** The input id of a request's append: `<request id>/<turn key>:<seqno>`. */
export const inputIdOf = (session: Session, seqno: number): string => State.inputIdOf(session.state, seqno)
