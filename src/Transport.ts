/**
 * Cursor's agent transport in its HTTP/1.1 mode, over Connect: `RunSSE` streams a request's
 * server messages, `BidiAppend` carries the client's messages one POST at a time.
 *
 * Each request id (one Cursor turn) has a session: an ordered inbox for its appends (handed
 * on in `append_seqno` order, each acknowledged once it is handed on and the input it carries
 * is committed: the rule at `ACKNOWLEDGING AN APPEND`), a turn channel for its output (with a
 * backlog so a reconnecting RunSSE gets everything), and the protocol correlation the Dialect
 * threads (exec ids, KV ids, tool call ids). Decoded client messages become loop inputs for the
 * Runner; exec results drive the tool machines of `Tools.ts`, whose final results go back to
 * the Runner as `ToolResult` inputs. The session also implements the Runner's `ClientGateway`:
 * what the loop emits is encoded by the Dialect and written to the request's channel.
 *
 * A request this process has no turn for (after a restart) may be one whose turn ended in the
 * previous process before its end reached the client: that end is replayed from the store
 * under the rule written at `replayEnd`.
 */
import { create, fromBinary, toBinary } from "@bufbuild/protobuf"
import { HttpLayerRouter, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Chunk, Clock, Context, Deferred, Duration, Effect, Either, FiberSet, Layer, Option, Schedule, Stream } from "effect"
import * as Dialect from "./Dialect.js"
import type { ClientMessage, RunRequest } from "./Dialect.js"
import type { AgentServerMessage, TodoItem, ToolCall as CursorToolCall } from "./gen/agent/v1/agent_pb.js"
import { BidiAppendRequestSchema, BidiAppendResponseSchema } from "./gen/aiserver/v1/aiserver_pb.js"
import type { ResponseEvent, Usage } from "./Llm.js"
import { Input } from "./Loop.js"
import type { ConversationState } from "./Loop.js"
import { ClientGateway, Runner } from "./Runner.js"
import type { DispatchedOperation, StartedTurn, TurnOutcome, TurnRef } from "./Runner.js"
import * as Tools from "./Tools.js"
import type { ToolRun, ToolStep } from "./Tools.js"
import { adopt, emptyInbox, holdUnstarted, offer, skipGap } from "./transport/AppendInbox.js"
import type { AppendInbox } from "./transport/AppendInbox.js"
import { ConnectError, decodeUnaryBody, endStreamFrame, envelope, httpStatusOf, parseEnvelopes } from "./transport/Connect.js"
import { makeTurnChannel } from "./transport/TurnChannel.js"
import type { TurnChannel } from "./transport/TurnChannel.js"

// =============================================================================
// Options
// =============================================================================

export interface TransportOptions {
  /** Heartbeat cadence on an open RunSSE (Cursor aborts after ~30 s of silence). */
  readonly heartbeatMs: number
  readonly bidiAppendMaxBytes: number
  readonly runSseMaxBytes: number
  /**
   * How far ahead of the next expected seqno an append may be held (for a request with no turn
   * in this process, past 0 only when the store knows the request: see `startedTurnBefore`).
   */
  readonly appendWindow: number
  /**
   * How long a BidiAppend waits to be handed on (when held behind a gap) and for the commit of
   * the input it carries, before it is answered `unavailable` so that the client sends it again
   * (see `ACKNOWLEDGING AN APPEND`). Below the ~5 s the IDE is reported to wait for an append.
   */
  readonly appendAckTimeoutMs: number
  /**
   * How long a recovered turn's inbox waits for a missing seqno that is not a committed input
   * before passing over it (see `PASSING OVER GAPS AFTER A RESTART`); shorter than
   * `appendAckTimeoutMs`, so the appends held behind it are still acknowledged in time.
   */
  readonly gapGraceMs: number
  /** How long the end of a turn waits for the client to acknowledge the checkpoint's blobs. */
  readonly blobAckTimeoutMs: number
  /** How long a turn waits for the request-context parts it reads back (ref_only transport) before starting without them. */
  readonly contextFetchTimeoutMs: number
  /** How long a finished request's output stays available to a reconnecting RunSSE. */
  readonly finishedRetentionMs: number
  /** A request that never becomes a turn (no run request) is forgotten after this long. */
  readonly idleRetentionMs: number
  /**
   * How long a RunSSE for a request with no run request and no turn in this process waits for
   * one; then the end of the request's turn that ended before a restart is replayed, and a
   * request the store knows no turn of is ended (unavailable). See `replayEnd`.
   */
  readonly orphanTimeoutMs: number
  /** How often finished and orphaned requests are looked for. */
  readonly sweepIntervalMs: number
  /** The context window of a model, for the checkpoint's context meter. */
  readonly contextWindowOf: (model: string) => number
}

export const defaultTransportOptions: TransportOptions = {
  heartbeatMs: 5_000,
  bidiAppendMaxBytes: 16 * 1024 * 1024,
  runSseMaxBytes: 64 * 1024,
  appendWindow: 1024,
  appendAckTimeoutMs: 4_000,
  gapGraceMs: 1_000,
  blobAckTimeoutMs: 30_000,
  contextFetchTimeoutMs: 10_000,
  finishedRetentionMs: 30_000,
  idleRetentionMs: 10 * 60_000,
  orphanTimeoutMs: 30_000,
  sweepIntervalMs: 5_000,
  contextWindowOf: () => 200_000
}

// =============================================================================
// Sessions
// =============================================================================

interface RunningOperation {
  readonly operationId: string
  readonly conversationId: string
  readonly toolCallId: string
  readonly modelCallId: string
  readonly startedAtMs: number
  run: ToolRun | undefined
}

/** An append the inbox took, with when it arrived (a held one's wait counts from then). */
interface Taken {
  readonly seqno: number
  readonly message: ClientMessage
  readonly arrivedAtMs: number
}

interface Session {
  readonly requestId: string
  /**
   * Tells this request's turns apart in input ids: the IDE reuses a request id for a new turn,
   * so `requestId:seqno` alone would make the runner skip the new turn as already applied.
   * The run request's user message id when there is one (stable across redeliveries and
   * restarts; a turn recovered after a restart takes it from the turn's settings), else a
   * per-process generation.
   */
  turnKey: string
  channel: TurnChannel
  inbox: AppendInbox<Taken>
  /**
   * Appends taken whose acknowledgement must wait, by seqno: held ones until they are handed on
   * (or dropped with their turn), and handed-on ones until the inputs they carry are committed.
   * A duplicate of one waits on the same entry (see `ACKNOWLEDGING AN APPEND`).
   */
  readonly unsettled: Map<number, Deferred.Deferred<void>>
  /** A fiber is passing over this recovered inbox's gaps (`passGaps`). */
  passingGaps: boolean
  correlation: Dialect.TurnCorrelation
  conversationId: string | undefined
  run: RunRequest | undefined
  todos: ReadonlyArray<TodoItem>
  /** Typed tool calls as the UI saw them complete, for the checkpoint's steps. */
  readonly cursorToolCalls: Record<string, CursorToolCall>
  readonly operations: Map<string, RunningOperation>
  readonly blobAcks: Map<number, Deferred.Deferred<boolean>>
  /** get_blob reads in flight (request-context parts, attached images), by KV id: the blob, or undefined on an error. */
  readonly blobReads: Map<number, Deferred.Deferred<Uint8Array | undefined>>
  /**
   * Set while the run request's context parts are read back, before its turn starts: follow-ups
   * and cancels that arrive meanwhile run after the start, in order (each waits for this one,
   * and becomes the one the next waits for).
   */
  startGate: Deferred.Deferred<void> | undefined
  /** Serializes this request's appends: the inbox and what it hands on. */
  readonly lock: Effect.Semaphore
  finishing: boolean
  /**
   * The runner spoke for this request before any run request reached this process: a turn
   * recovered after a restart. The client's appends go on numbering from where the previous
   * process left off, so the first append this process sees sets where its inbox starts (a
   * lower one that comes later is handed on late: `PASSING OVER GAPS AFTER A RESTART`).
   */
  adopted: boolean
  /** The runner has published or dispatched for this request (it is a turn this process runs). */
  runnerSpoke: boolean
  /**
   * This session replays the end of a turn an earlier process ended (see `replayEnd`): its
   * appends are acknowledged and dropped, but the KV answers to the replayed blobs.
   */
  replaying: boolean
  /** When the sweep last asked the store about this request (a RunSSE waiting on a turn not resumed yet). */
  storeCheckedAtMs: number | undefined
  /**
   * The store says this request started a turn (in an earlier process): its client's appends,
   * numbered on from there, are held past the window until the turn says where the inbox
   * starts (see `startedTurnBefore`).
   */
  knownToStore: boolean
  readonly createdAtMs: number
  lastActivityMs: number
  finishedAtMs: number | undefined
}

export interface TransportService {
  readonly options: TransportOptions
  readonly gateway: Context.Tag.Service<ClientGateway>
  /** Handles a BidiAppend body; answers with the (empty) response bytes or a Connect error. */
  readonly bidiAppend: (body: Uint8Array, requestIdHeader: string | undefined) => Effect.Effect<Uint8Array, ConnectError>
  /** Opens the output of a RunSSE request body: the frames to stream, ending with end-stream. */
  readonly runSse: (body: Uint8Array) => Effect.Effect<Stream.Stream<Uint8Array>, ConnectError>
  /** Ends every open stream with a retryable error (graceful shutdown). */
  readonly shutdown: Effect.Effect<void>
  /** Open sessions, for metrics and tests. */
  readonly sessionCount: () => number
}

export class Transport extends Context.Tag("cursor-byok/Transport")<Transport, TransportService>() {}

const frameOf = (message: AgentServerMessage): Uint8Array => envelope(0, Dialect.toFrame(message))
const HEARTBEAT_FRAME = frameOf(Dialect.encodeHeartbeat())

const endFrameOf = (end: Dialect.EndStream): Uint8Array => envelope(0x02, Dialect.encodeEndStream(end))

/** The Cursor request a turn belongs to: the run request's id, kept in the turn settings. */
export const requestIdOf = (turn: TurnRef): string => {
  return Dialect.requestIdOfSettings(turn.settings) ?? turn.turnId
}

export const make = (options: TransportOptions) =>
  Effect.gen(function*() {
    const runnerReady = yield* Deferred.make<Context.Tag.Service<Runner>>()
    const background = yield* FiberSet.make()
    const sessions = new Map<string, Session>()
    const now = Clock.currentTimeMillis

    let generation = 0
    const newSession = (requestId: string, at: number): Effect.Effect<Session> =>
      Effect.map(Effect.makeSemaphore(1), (lock) => ({
        requestId,
        turnKey: `g${++generation}`,
        channel: makeTurnChannel(requestId),
        inbox: emptyInbox(),
        unsettled: new Map(),
        passingGaps: false,
        correlation: Dialect.initialCorrelation(requestId),
        conversationId: undefined,
        run: undefined,
        todos: [],
        cursorToolCalls: {},
        operations: new Map(),
        blobAcks: new Map(),
        blobReads: new Map(),
        startGate: undefined,
        lock,
        finishing: false,
        adopted: false,
        runnerSpoke: false,
        replaying: false,
        storeCheckedAtMs: undefined,
        knownToStore: false,
        createdAtMs: at,
        lastActivityMs: at,
        finishedAtMs: undefined
      }))

    /** The session of a request id, created by whichever of RunSSE, BidiAppend or the runner comes first. */
    const sessionFor = (requestId: string): Effect.Effect<Session> =>
      Effect.gen(function*() {
        const at = yield* now
        const existing = sessions.get(requestId)
        if (existing !== undefined) {
          existing.lastActivityMs = at
          return existing
        }
        const session = yield* newSession(requestId, at)
        sessions.set(requestId, session)
        return session
      })

    /** The session of a turn the runner speaks for; marked adopted when this process never saw its run request. */
    const turnSession = (turn: TurnRef): Effect.Effect<Session> =>
      Effect.gen(function*() {
        const session = yield* sessionFor(requestIdOf(turn))
        if (!session.runnerSpoke && session.run === undefined) {
          // A turn recovered after a restart: its todos start from what the run request's checkpoint
          // held; the client's follow-ups and cancels go to its conversation, under the input ids
          // the previous process gave them (`inputIdOf`), so one it applied already is skipped.
          session.todos = Dialect.todosOf(Dialect.carriedCheckpointOf(turn.settings))
          session.conversationId = turn.conversationId
          const userMessageId = Dialect.userMessageIdOf(turn.settings)
          if (userMessageId !== "") session.turnKey = userMessageId
        }
        session.runnerSpoke = true
        if (session.run === undefined && session.inbox.next === 0 && session.inbox.recovered === undefined) {
          if (session.inbox.held.size === 0) session.adopted = true
          else yield* adoptHeld(session)
        }
        return session
      })

    /**
     * A recovered turn whose client re-sent appends before the runner spoke: they were held
     * waiting for seqno 0, which this process will never see. The inbox now starts at the lowest
     * of them (`adopt`); the ones in order are handed on (and acknowledged as they settle), and
     * gaps after them are passed over under the rule at `passGap`.
     */
    const adoptHeld = (session: Session) =>
      session.lock.withPermits(1)(Effect.gen(function*() {
        const inbox = session.inbox
        if (session.run !== undefined || inbox.next !== 0 || inbox.recovered !== undefined || inbox.held.size === 0) return
        const adopted = adopt(inbox, Math.min(...inbox.held.keys()), options.appendWindow)
        session.inbox = adopted.inbox
        yield* handOn(session, adopted.ready)
        yield* watchGaps(session)
      }))

    /** Hands on appends the inbox released, in order; each settles on its own (`settle`). */
    const handOn = (session: Session, ready: ReadonlyArray<Taken>) =>
      Effect.forEach(ready, (item) =>
        Effect.gen(function*() {
          const durable: Array<Effect.Effect<void>> = []
          yield* handle(session, item.seqno, item.message, durable)
          yield* settle(session, item.seqno, durable)
        }), { discard: true })

    /**
     * An append was handed on: its acknowledgement (and any duplicate's) now waits only for the
     * commits of the inputs it carried, `durable` (none for heartbeats, KV answers, stream chunks).
     */
    const settle = (session: Session, seqno: number, durable: ReadonlyArray<Effect.Effect<void>>) =>
      Effect.gen(function*() {
        const waiting = session.unsettled.get(seqno)
        if (durable.length === 0) {
          if (waiting === undefined) return
          session.unsettled.delete(seqno)
          yield* Deferred.succeed(waiting, undefined)
          return
        }
        const settled = waiting ?? (yield* Deferred.make<void>())
        session.unsettled.set(seqno, settled)
        yield* FiberSet.run(background, Effect.all(durable, { concurrency: "unbounded", discard: true }).pipe(
          Effect.zipRight(Deferred.succeed(settled, undefined)),
          Effect.ensuring(Effect.sync(() => {
            if (session.unsettled.get(seqno) === settled) session.unsettled.delete(seqno)
          }))
        ))
      })

    /**
     * The held appends of a turn that is over (its end replayed, or its request id reused for a
     * new turn): never to be handed on, they are acknowledged, as every later append of that turn.
     */
    const dropHeld = (session: Session) =>
      Effect.forEach([...session.inbox.held.keys()], (seqno) => {
        const waiting = session.unsettled.get(seqno)
        if (waiting === undefined) return Effect.void
        session.unsettled.delete(seqno)
        return Deferred.succeed(waiting, undefined)
      }, { discard: true })

    const write = (session: Session, messages: ReadonlyArray<AgentServerMessage>) =>
      session.channel.write(messages.map(frameOf))

    const endSession = (session: Session, end: Dialect.EndStream) =>
      Effect.gen(function*() {
        session.finishedAtMs = yield* now
        for (const ack of session.blobAcks.values()) yield* Deferred.succeed(ack, false)
        for (const read of session.blobReads.values()) yield* Deferred.succeed(read, undefined)
        yield* session.channel.close(endFrameOf(end))
      })

    const submit = (conversationId: string, input: Input, inputId: string) =>
      Effect.flatMap(Deferred.await(runnerReady), (runner) => runner.submit(conversationId, input, inputId))

    /**
     * For inputs that arrive in a BidiAppend: queues the input in order now and records, in
     * `durable`, a wait for its commit. The append's acknowledgement waits for those (`settle`),
     * outside the request's lock, so that it means the input survives a crash, while the
     * request's other appends (heartbeats, KV answers, stream chunks) are not held behind it.
     */
    const submitDurably = (durable: Array<Effect.Effect<void>>, conversationId: string, input: Input, inputId: string) =>
      Effect.flatMap(Deferred.await(runnerReady), (runner) => runner.submitTracked(conversationId, input, inputId)).pipe(
        Effect.map((applied) => {
          durable.push(applied)
        })
      )

    // -------------------------------------------------------------------------
    // Tool calls on the client
    // -------------------------------------------------------------------------

    const toolContext = (session: Session, turn: TurnRef | undefined): Tools.ToolContext => ({
      mcpTools: session.run?.mcpTools ?? (turn === undefined ? [] : Dialect.mcpToolsOf(turn.settings)),
      todos: session.todos
    })

    /**
     * Carries a tool machine's step out: an exec to send, a chunk to show, or the final result.
     * `durable` is set when an append drove it (its result is then committed before the append
     * is acknowledged); undefined inside the runner's own dispatch, which must not wait on itself.
     */
    const advance = (
      session: Session,
      operation: RunningOperation,
      step: ToolStep,
      durable: Array<Effect.Effect<void>> | undefined
    ): Effect.Effect<void> =>
      Effect.gen(function*() {
        const ids = { toolCallId: operation.toolCallId, modelCallId: operation.modelCallId }
        switch (step._tag) {
          case "Exec": {
            operation.run = step.run
            const sent = Dialect.encodeExec(session.correlation, { operationId: operation.operationId, toolCallId: operation.toolCallId, exec: step.exec })
            session.correlation = sent.correlation
            yield* write(session, [sent.message])
            return
          }
          case "Continue": {
            operation.run = step.run
            if (step.delta !== undefined) yield* write(session, [Dialect.encodeToolDelta(ids, step.delta)])
            return
          }
          case "Done": {
            const completedAtMs = yield* now
            const { outcome } = step
            session.cursorToolCalls[operation.toolCallId] = outcome.cursor
            if (outcome.todos !== undefined) session.todos = outcome.todos
            session.operations.delete(operation.operationId)
            yield* write(session, [Dialect.encodeToolCompleted(ids, outcome.cursor, { startedAtMs: operation.startedAtMs, completedAtMs })])
            const input = Input.ToolResult({ message: outcome.message })
            const inputId = `${operation.operationId}:result`
            yield* durable !== undefined
              ? submitDurably(durable, operation.conversationId, input, inputId)
              : submit(operation.conversationId, input, inputId)
            return
          }
        }
      })

    const dispatch = (turn: TurnRef, dispatched: DispatchedOperation) =>
      Effect.gen(function*() {
        const session = yield* turnSession(turn)
        const startedAtMs = yield* now
        const operation: RunningOperation = {
          operationId: dispatched.operationId,
          conversationId: turn.conversationId,
          toolCallId: dispatched.toolCall.id,
          modelCallId: dispatched.modelCallId,
          startedAtMs,
          run: undefined
        }
        session.operations.set(operation.operationId, operation)
        const { started, step } = Tools.startTool(dispatched.toolCall, toolContext(session, turn))
        yield* write(session, [Dialect.encodeToolStarted({ toolCallId: operation.toolCallId, modelCallId: operation.modelCallId }, started, startedAtMs)])
        yield* advance(session, operation, step, undefined)
      })

    /** An exec answer from the client: the running exec it belongs to, its tool machine's next step. */
    const onExecReply = (
      session: Session,
      id: number,
      execId: string | undefined,
      next: (run: ToolRun) => ToolStep,
      finished: boolean,
      durable: Array<Effect.Effect<void>>
    ) =>
      Effect.gen(function*() {
        const exec = Dialect.resolveExec(session.correlation, id, execId)
        const operation = exec === undefined ? undefined : session.operations.get(exec.operationId)
        if (exec === undefined || operation === undefined || operation.run === undefined) {
          yield* Effect.logDebug(`transport: exec answer for unknown exec ${id}${execId === undefined ? "" : ` (${execId})`} dropped`)
          return
        }
        if (finished) session.correlation = Dialect.completeExec(session.correlation, exec.id)
        yield* advance(session, operation, next(operation.run), durable)
      })

    // -------------------------------------------------------------------------
    // Client messages, in seqno order
    // -------------------------------------------------------------------------

    const inputIdOf = (session: Session, seqno: number) => `${session.requestId}/${session.turnKey}:${seqno}`

    const handle = (session: Session, seqno: number, message: ClientMessage, durable: Array<Effect.Effect<void>>): Effect.Effect<void> => {
      const inputId = inputIdOf(session, seqno)
      const conversationId = session.conversationId
      switch (message._tag) {
        case "RunRequest":
          return onRunRequest(session, seqno, message, durable)
        case "UserMessage":
          return conversationId === undefined
            ? Effect.logWarning("transport: a follow-up message arrived before any run request; dropped")
            : afterStart(session, durable, (wait) => submitDurably(wait, conversationId, Input.UserMessage({ message: message.message }), inputId))
        case "Cancel":
          return conversationId === undefined
            ? Effect.void
            : afterStart(session, durable, (wait) => submitDurably(wait, conversationId, Input.Cancel({ reason: message.reason }), inputId))
        case "ExecResult":
          return onExecReply(session, message.id, message.execId, (run) => Tools.onExecReply(run, message.reply), true, durable)
        case "ExecStream":
          return onExecReply(session, message.id, message.execId, (run) => Tools.onExecReply(run, message.reply), message.terminal, durable)
        case "ExecThrow":
          return onExecReply(session, message.id, undefined, (run) => Tools.onExecThrow(run, message.error), true, durable)
        case "KvResult": {
          const resolved = Dialect.resolveKv(session.correlation, message.id)
          session.correlation = resolved.correlation
          const read = session.blobReads.get(message.id)
          if (read !== undefined) {
            session.blobReads.delete(message.id)
            if (message.error !== undefined && message.error !== "") {
              return Effect.zipRight(Effect.logWarning(`transport: the client could not read back blob ${message.id}: ${message.error}`), Deferred.succeed(read, undefined))
            }
            return Deferred.succeed(read, message.data ?? new Uint8Array()).pipe(Effect.asVoid)
          }
          const ack = session.blobAcks.get(message.id)
          if (ack === undefined) return Effect.logDebug(`transport: KV answer ${message.id} matches no request; dropped`)
          session.blobAcks.delete(message.id)
          return Deferred.succeed(ack, message.error === undefined || message.error === "").pipe(Effect.asVoid)
        }
        case "Unknown":
          return Effect.logDebug(`transport: unknown ${message.where} case (fields ${message.fields.join(",")}) dropped`)
        case "ExecStreamClose":
        case "ExecHeartbeat":
        case "InteractionResponse":
        case "Heartbeat":
          // Liveness only: a stream close is never a result (it may arrive before the result).
          return Effect.void
      }
    }

    const onRunRequest = (session: Session, seqno: number, run: RunRequest, durable: Array<Effect.Effect<void>>) =>
      Effect.gen(function*() {
        session.run = run
        session.todos = Dialect.todosOf(run.conversationState)
        const conversationId = conversationOf(session, run)
        session.conversationId = conversationId
        switch (run.action._tag) {
          case "StartTurn": {
            if (run.action.userMessageId !== "") session.turnKey = run.action.userMessageId
            if (run.contextToFetch.length > 0) return yield* startAfterContext(session, seqno, run, durable)
            yield* startTurn(session, seqno, conversationId, run.action, durable)
            return
          }
          case "Resume":
            yield* endSession(session, Dialect.EndStream.Error({
              code: "failed_precondition",
              message: "This server does not resume a turn from a new request; send the message again.",
              detail: undefined
            }))
            return
          case "Unsupported":
            yield* endSession(session, Dialect.EndStream.Error({
              code: "unimplemented",
              message: `This server does not support conversation action ${run.action.field} yet.`,
              detail: undefined
            }))
            return
        }
      })

    const startTurn = (
      session: Session,
      seqno: number,
      conversationId: string,
      action: Extract<Dialect.RunAction, { _tag: "StartTurn" }>,
      durable: Array<Effect.Effect<void>>
    ) => {
      const { start } = action
      const settings = Dialect.withRequestId(start.settings, session.requestId)
      return submitDurably(durable, conversationId, Input.Start({ ...start, settings }), inputIdOf(session, seqno))
    }

    /**
     * READING BACK THE REQUEST CONTEXT. In Cursor's ref_only context transport the run request
     * names its rules and MCP tool definitions by blob id instead of carrying them (from the
     * second turn of a conversation on), and an attached image may come as a blob id alone. The
     * turn would start without them, so they are read back first (`RunRequest.contextToFetch`):
     * one get_blob per blob, answered by the client's KV results in later appends
     * (which are handed on meanwhile: this waits in the background, not in the inbox). Then the
     * turn starts with them merged in (`Dialect.withContextParts`); a part that does not come
     * within `contextFetchTimeoutMs`, or does not match its id, is left out with a warning. The
     * run request's acknowledgement waits for the start's commit, as always; follow-ups and
     * cancels that arrive meanwhile wait for the start (`afterStart`).
     */
    const startAfterContext = (session: Session, seqno: number, run: RunRequest, durable: Array<Effect.Effect<void>>) =>
      Effect.gen(function*() {
        const reads: Array<readonly [string, Deferred.Deferred<Uint8Array | undefined>]> = []
        const messages: Array<AgentServerMessage> = []
        for (const ref of run.contextToFetch) {
          const sent = Dialect.encodeGetBlob(session.correlation, ref.blobId)
          session.correlation = sent.correlation
          const read = yield* Deferred.make<Uint8Array | undefined>()
          session.blobReads.set(sent.kvId, read)
          reads.push([Dialect.bytesToHex(ref.blobId), read])
          messages.push(sent.message)
        }
        yield* write(session, messages)
        const started = yield* Deferred.make<void>()
        session.startGate = started
        durable.push(Deferred.await(started))
        const timeout = Duration.millis(options.contextFetchTimeoutMs)
        yield* FiberSet.run(background, Effect.gen(function*() {
          const fetched = new Map<string, Uint8Array>()
          yield* Effect.forEach(reads, ([id, read]) =>
            Deferred.await(read).pipe(
              Effect.timeoutTo({ duration: timeout, onSuccess: (data) => data, onTimeout: () => undefined }),
              Effect.map((data) => {
                if (data !== undefined) fetched.set(id, data)
              })
            ), { concurrency: "unbounded", discard: true })
          const merged = Dialect.withContextParts(run, fetched)
          for (const problem of merged.problems) yield* Effect.logWarning(`transport: ${session.requestId}: ${problem}; the turn starts without it`)
          if (session.finishedAtMs !== undefined || merged.run.action._tag !== "StartTurn") return
          session.run = merged.run
          const committed: Array<Effect.Effect<void>> = []
          yield* startTurn(session, seqno, conversationOf(session, merged.run), merged.run.action, committed)
          yield* Effect.all(committed, { discard: true })
        }).pipe(Effect.ensuring(Effect.suspend(() => {
          if (session.startGate === started) session.startGate = undefined
          return Deferred.succeed(started, undefined)
        }))))
      })

    /**
     * Runs `submit` (a follow-up's or a cancel's) now, or, while the run request's context is
     * read back (`startGate`), once the turn has started and every earlier such message went in.
     */
    const afterStart = (
      session: Session,
      durable: Array<Effect.Effect<void>>,
      submit: (durable: Array<Effect.Effect<void>>) => Effect.Effect<void>
    ): Effect.Effect<void> =>
      Effect.gen(function*() {
        const gate = session.startGate
        if (gate === undefined) return yield* submit(durable)
        const done = yield* Deferred.make<void>()
        session.startGate = done
        durable.push(Deferred.await(done))
        yield* FiberSet.run(background, Deferred.await(gate).pipe(
          Effect.zipRight(Effect.suspend(() => {
            const waits: Array<Effect.Effect<void>> = []
            return Effect.zipRight(submit(waits), Effect.all(waits, { discard: true }))
          })),
          Effect.ensuring(Effect.suspend(() => {
            if (session.startGate === done) session.startGate = undefined
            return Deferred.succeed(done, undefined)
          }))
        ))
      })

    /** The conversation a run request is for: its conversation id, else the request id. */
    const conversationOf = (session: Session, run: RunRequest) =>
      run.conversationId !== undefined && run.conversationId !== "" ? run.conversationId : session.requestId

    // -------------------------------------------------------------------------
    // Turns that ended in an earlier process
    // -------------------------------------------------------------------------

    /** No run request reached this process for the request, the runner never spoke for it, and nothing ended it yet. */
    const unresolved = (session: Session) =>
      session.run === undefined && !session.runnerSpoke && !session.replaying && session.finishedAtMs === undefined

    /** The turn key and seqno of one of the request's input ids (`inputIdOf`); undefined for any other id. */
    const parseInputId = (requestId: string, inputId: string): { readonly turnKey: string; readonly seqno: number } | undefined => {
      const prefix = `${requestId}/`
      const colon = inputId.lastIndexOf(":")
      if (!inputId.startsWith(prefix) || colon <= prefix.length) return undefined
      const turnKey = inputId.slice(prefix.length, colon)
      const seqno = inputId.slice(colon + 1)
      // A key with a slash would be another request's (`<request>/<more>/<key>:n`): message ids and generations have none.
      return /^\d+$/.test(seqno) && !turnKey.includes("/") ? { turnKey, seqno: Number(seqno) } : undefined
    }

    /** The input id a run request gets (see `onRunRequest`), when it has one that a later process computes alike: from its user message id. */
    const runRequestInputId = (session: Session, seqno: number, run: RunRequest): string | undefined =>
      run.action._tag === "StartTurn" && run.action.userMessageId !== "" ? `${session.requestId}/${run.action.userMessageId}:${seqno}` : undefined

    /** The run request's input id when it was applied before (by this process or an earlier one): then it is a re-send. */
    const committedRunRequest = (session: Session, seqno: number, run: RunRequest) =>
      Effect.gen(function*() {
        const inputId = runRequestInputId(session, seqno, run)
        if (inputId === undefined) return undefined
        const runner = yield* Deferred.await(runnerReady)
        return (yield* runner.isCommitted(conversationOf(session, run), inputId)) ? inputId : undefined
      })

    /** The turn the store says a request started most recently, when it is that request's and is over. */
    const endedTurnOf = (requestId: string, found: Option.Option<StartedTurn>) =>
      Option.isSome(found) && found.value._tag === "Ended" && requestIdOf(found.value.turn) === requestId ? found.value : undefined

    /**
     * REPLAYING THE END OF A TURN. A process can die after committing the end of a turn and
     * before sending it (set_blob, turn_ended, checkpoint, end-stream): the history is complete,
     * but the client, which reopens RunSSE with the same request id and re-sends the appends it
     * has no acknowledgement for, reaches a process with no turn for that request (`unresolved`).
     * The store records the input that started each turn, so the request's turns are found by
     * their input ids (`<request id>/<turn key>:<seqno>`). The end of the request's turn is
     * replayed, from the committed state, only when that turn is the conversation's current turn,
     * is over, and there is evidence the client still waits for THAT turn:
     *
     * 1. a run request arrives whose input (`<request id>/<user message id>:<seqno>`) is already
     *    committed and started that turn: it is a re-send. Or
     * 2. RunSSE has waited `orphanTimeoutMs` and no run request arrived (`resolveOrphan`); the
     *    turn is the request's newest.
     *
     * Otherwise nothing is replayed. Cursor reuses request ids: the RunSSE of a new turn on a
     * reused id may arrive before its run request, and must get the new turn; its run request is
     * not committed, so it starts the turn as always, and rule 2 cannot fire first unless the run
     * request comes `orphanTimeoutMs` late (before replays existed, that RunSSE then got
     * `unavailable` at the same moment). Follow-ups and cancels are not evidence: they carry
     * nothing that names their turn, and on a reused id the new turn's may arrive before its run
     * request. Like any append ahead of the inbox they are held (not acknowledged), and a replay
     * drops them unapplied, acknowledging them then (their turn is over). A turn still in
     * progress (recovered, its model call re-issued) is waited for: the runner speaks and the
     * session adopts it. A request the store knows no turn of, or whose turn a later one
     * replaced, ends `unavailable` after `orphanTimeoutMs`.
     *
     * What is replayed is what `finish` sends: turn_ended with the usage of the turn's committed
     * answers (exact: every answer records its usage), set_blob for the blobs of the checkpoint
     * projected from the committed settings and history (typed tool results the old process
     * held in memory are lost: those steps are partial tool calls), the checkpoint once the
     * client acknowledged them, then end-stream `{}`; or, for a failed or canceled turn, the
     * error end it had (its text as far as the store recorded it, see `Runner.endedOutcome`).
     * The replaying session acknowledges every later append and applies none but the KV answers
     * to its own set_blobs; a run request that is not committed (a new turn on the id) replaces
     * it with a fresh session.
     */
    const replayEnd = (session: Session, ended: Extract<StartedTurn, { readonly _tag: "Ended" }>) =>
      Effect.gen(function*() {
        session.replaying = true
        session.conversationId = ended.turn.conversationId
        const started = parseInputId(session.requestId, ended.startInputId)
        if (started !== undefined) session.turnKey = started.turnKey
        // Appends held so far were the ended turn's (re-sent): acknowledged now, never applied.
        yield* dropHeld(session)
        session.inbox = emptyInbox()
        session.todos = Dialect.todosOf(Dialect.carriedCheckpointOf(ended.turn.settings))
        yield* Effect.logInfo(
          `transport: replaying the end (${ended.outcome._tag}) of turn ${ended.turn.turnId} of ${session.requestId}, committed before a restart`
        )
        yield* sendTurnEnd(session, ended.turn, ended.outcome, ended.state, ended.usage)
      })

    /** Rule 2 of `replayEnd`, for a RunSSE that waited `orphanTimeoutMs` on an unresolved request. */
    const resolveOrphan = (session: Session) =>
      session.lock.withPermits(1)(Effect.gen(function*() {
        if (!unresolved(session) || session.channel.isClosed()) return
        const runner = yield* Deferred.await(runnerReady)
        const requestId = session.requestId
        const found = yield* runner.findStartedTurn(`${requestId}/`, (inputId) => parseInputId(requestId, inputId) !== undefined)
        const ended = endedTurnOf(requestId, found)
        if (ended !== undefined) return yield* replayEnd(session, ended)
        // In progress (a turn being resumed): the runner will speak for it. Asked again after another timeout.
        if (Option.isSome(found) && found.value._tag === "Running" && requestIdOf(found.value.turn) === requestId) return
        yield* endSession(session, Dialect.EndStream.Error({
          code: "unavailable",
          message: "The server has no turn for this request (it may have restarted after the turn ended). The conversation is saved; send your message again.",
          detail: undefined
        }))
      }))

    /**
     * Rule 1 of `replayEnd`, for an append to an unresolved request: true when the append re-sends
     * a committed run request and was dealt with here (the end replayed, or nothing left to do),
     * false when it goes on as usual (not a re-send, or its turn is still in progress: the runner
     * skips the committed input). A turn in progress was started by an earlier process: the inbox
     * adopts that process's numbering from this seqno, so gaps after it (appends that process
     * acknowledged) are passed over as `passGap` says.
     */
    const onResentRunRequest = (session: Session, seqno: number, run: RunRequest) =>
      Effect.gen(function*() {
        const inputId = yield* committedRunRequest(session, seqno, run)
        if (inputId === undefined) return false
        const runner = yield* Deferred.await(runnerReady)
        const found = yield* runner.findStartedTurn(`${session.requestId}/`, (id) => id === inputId)
        if (Option.isSome(found) && found.value._tag === "Running") {
          if (session.inbox.next === 0 && session.inbox.recovered === undefined) {
            const adopted = adopt(session.inbox, seqno, options.appendWindow)
            session.inbox = adopted.inbox
            yield* handOn(session, adopted.ready)
          }
          return false
        }
        const ended = endedTurnOf(session.requestId, found)
        if (ended !== undefined) yield* replayEnd(session, ended)
        else yield* Effect.logDebug(`transport: append ${seqno} of ${session.requestId} re-sends a run request whose turn is no longer current; not applied`)
        return true
      })

    /**
     * APPENDS NUMBERED PAST THE WINDOW AFTER A RESTART. An append for a request this process has
     * no turn for is refused when its seqno is `appendWindow` or more past 0, so that forged
     * seqnos cannot make the server hold memory. But a long turn's client numbers on from the
     * previous process: after a restart it re-sends its unacknowledged appends far past 0, and
     * may do so before the recovered turn speaks (which starts the inbox where the client is,
     * `adoptHeld`). Such an append is held when the store says the request started a turn (the
     * request's input ids, `<request id>/<turn key>:<seqno>`): as for any held append, the turn
     * it belongs to decides (adopted and handed on in order, or dropped by a replayed end).
     * Asked only for an append past the window with no turn of the request in this process (the
     * normal path never asks), once per session when the answer is yes; an unknown request is
     * still refused (`out_of_range`) and leaves nothing behind.
     */
    const startedTurnBefore = (requestId: string) =>
      Effect.flatMap(Deferred.await(runnerReady), (runner) =>
        runner.findStartedTurn(`${requestId}/`, (inputId) => parseInputId(requestId, inputId) !== undefined)).pipe(Effect.map(Option.isSome))

    const unknownRequestFarAhead = (requestId: string, seqno: number) =>
      new ConnectError(
        "out_of_range",
        `append_seqno ${seqno} is more than ${options.appendWindow} ahead of the next expected 0 for request ${requestId}, which started no turn known to this server`
      )

    // -------------------------------------------------------------------------
    // Acknowledgements and gaps
    // -------------------------------------------------------------------------

    /**
     * ACKNOWLEDGING AN APPEND. The client re-sends only the appends it holds no acknowledgement
     * for, so an acknowledgement promises that what the append carried survives a crash. A
     * BidiAppend is answered 200 only once it is settled:
     *
     * - it was handed on in seqno order: an append held behind a gap waits until the gap fills
     *   (or, in a recovered turn, is passed over: `passGap`); and
     * - the input it carried, if any (a run request, a follow-up, a cancel, the exec answer that
     *   completes a tool call), was applied: committed, found committed already, or found to
     *   change nothing.
     *
     * Handed-on appends without an input (heartbeats, KV answers, stream chunks) settle at once.
     * The wait is bounded by `appendAckTimeoutMs`: past it the append is answered `unavailable`,
     * a retryable error, never a success the server cannot stand behind; it stays where it was
     * (held, or queued for its commit) and the client sends it again. A re-sent append is a
     * duplicate (below `next`, or held already): while the first copy is unsettled it waits for
     * that same settlement (bounded alike); once it is settled, it is acknowledged at once (its
     * input is committed and the runner will not apply it twice). Acknowledged without being
     * applied: the appends of a turn that is over and will never take them (its end replayed,
     * its request id reused for a new turn: `dropHeld`, and the rules of `replayEnd`).
     */
    const awaitSettled = (session: Session, seqno: number, settled: Deferred.Deferred<void>) =>
      Deferred.await(settled).pipe(
        Effect.timeoutFail({
          duration: Duration.millis(options.appendAckTimeoutMs),
          onTimeout: () =>
            new ConnectError(
              "unavailable",
              session.inbox.held.has(seqno)
                ? `append_seqno ${seqno} of request ${session.requestId} waits for the appends before it (next expected ${session.inbox.next}); not applied yet, send it again`
                : `append_seqno ${seqno} of request ${session.requestId} is not committed yet; send it again`
            )
        })
      )

    /** Starts passing over the gaps of a recovered inbox that holds appends, unless that runs already. */
    const watchGaps = (session: Session) =>
      Effect.suspend(() => {
        if (session.passingGaps || session.inbox.recovered === undefined || session.inbox.held.size === 0) return Effect.void
        session.passingGaps = true
        return Effect.asVoid(FiberSet.run(background, passGaps(session)))
      })

    const passGaps = (session: Session): Effect.Effect<void> =>
      session.lock.withPermits(1)(passGap(session)).pipe(
        Effect.flatMap((waitMs) =>
          waitMs === undefined
            ? Effect.void
            : waitMs === 0
            ? passGaps(session)
            : Effect.zipRight(Effect.sleep(Duration.millis(waitMs)), passGaps(session))
        )
      )

    /**
     * PASSING OVER GAPS AFTER A RESTART. A recovered turn's inbox (`adopt`) continues a numbering
     * an earlier process began; it starts at the lowest append held when the turn first speaks
     * (`adoptHeld`), at the first append after that, or at a re-sent run request of a turn in
     * progress. The client re-sends only what the earlier process did not acknowledge, and that
     * process acknowledged an append once it was handed on (and its input committed), so with
     * up to 16 appends in flight some seqnos among the re-sent ones never come back. While
     * appends are held behind a missing seqno `g`:
     *
     * 1. `g`'s input id (`<request id>/<turn key>:<g>`, `inputIdOf`) is committed: `g` was
     *    applied and will not come back (nor change anything if it did). Passed over at once.
     * 2. Otherwise (a heartbeat, a KV answer, an exec chunk, an input that changed nothing, or
     *    an append still on its way): passed over once the lowest held append has waited
     *    `gapGraceMs`, so a re-send that arrives within the grace still lands in order.
     *
     * A seqno passed over, or below where the inbox started (by at most `appendWindow`), that
     * arrives later was never handed on by this process: it is handed on when it arrives, out of
     * order, once (the runner skips its input if committed); a run request is not (see
     * `bidiAppend`). Rule 1 needs the turn key the earlier process used, the run request's user
     * message id; a turn whose run request had none gets rule 2 only. The rules hold for the
     * rest of the recovered turn: a gap that outlasts the grace later on is passed over too, and
     * its append, if it comes, is handed on late. An inbox that is not recovered never passes
     * over a gap: every seqno below a held one is the client's to send. Returns how long to wait
     * before looking again (0: at once), or undefined when nothing is held behind a gap.
     */
    const passGap = (session: Session) =>
      Effect.gen(function*() {
        const inbox = session.inbox
        if (inbox.recovered === undefined || inbox.held.size === 0 || session.replaying) {
          session.passingGaps = false
          return undefined
        }
        const gap = inbox.next
        let blocked: Taken | undefined
        for (const [seqno, item] of inbox.held) if (blocked === undefined || seqno < blocked.seqno) blocked = item
        const runner = yield* Deferred.await(runnerReady)
        const committed = session.conversationId !== undefined && (yield* runner.isCommitted(session.conversationId, inputIdOf(session, gap)))
        const waited = (yield* now) - blocked!.arrivedAtMs
        if (!committed && waited < options.gapGraceMs) return options.gapGraceMs - waited
        yield* Effect.logInfo(
          `transport: append ${gap} of ${session.requestId} passed over (${committed ? "its input is committed" : `not received within ${options.gapGraceMs} ms`}), a turn recovered after a restart`
        )
        const passed = skipGap(inbox)
        session.inbox = passed.inbox
        yield* handOn(session, passed.ready)
        return 0
      })

    // -------------------------------------------------------------------------
    // Endpoints
    // -------------------------------------------------------------------------

    const bidiAppend = (body: Uint8Array, requestIdHeader: string | undefined) =>
      Effect.gen(function*() {
        let request
        try {
          request = fromBinary(BidiAppendRequestSchema, body)
        } catch (error) {
          return yield* Effect.fail(new ConnectError("invalid_argument", `BidiAppendRequest is not valid protobuf: ${(error as Error).message}`))
        }
        const requestId = request.requestId?.requestId ?? ""
        if (requestId === "") return yield* Effect.fail(new ConnectError("invalid_argument", "BidiAppendRequest.request_id is missing"))
        if (request.appendSeqno < 0n || request.appendSeqno > BigInt(Number.MAX_SAFE_INTEGER)) {
          return yield* Effect.fail(new ConnectError("out_of_range", `append_seqno ${request.appendSeqno} is out of range`))
        }
        const seqno = Number(request.appendSeqno)
        const decoded = Dialect.decodeBidiAppendRequest(request)
        // Undecodable data still takes its seqno (the client will not send it again): logged, acknowledged, dropped.
        if (Either.isLeft(decoded)) yield* Effect.logWarning(`transport: append ${seqno} of ${requestId} dropped: ${decoded.left.message}`)
        const message: ClientMessage = Either.isRight(decoded)
          ? decoded.right.message
          : Dialect.ClientMessage.Unknown({ where: "undecodable append", fields: [] })
        // A first append far ahead of seqno 0 creates no session, unless the store knows the request (a restart).
        const farAheadOfNew = !sessions.has(requestId) && seqno >= options.appendWindow
        if (farAheadOfNew && !(yield* startedTurnBefore(requestId))) return yield* Effect.fail(unknownRequestFarAhead(requestId, seqno))
        let session = yield* sessionFor(requestId)
        if (farAheadOfNew) session.knownToStore = true
        const settled = yield* session.lock.withPermits(1)(Effect.gen(function*() {
          let newTurn = false
          if ((session.finishedAtMs !== undefined || session.replaying) && seqno === 0 && message._tag === "RunRequest") {
            // The run request of the turn that ended here, sent again: acknowledged, not applied again.
            if ((yield* committedRunRequest(session, seqno, message)) !== undefined) return undefined
            // A request id reused for a new turn (the IDE does this): start its session afresh.
            yield* dropHeld(session)
            const fresh = yield* newSession(requestId, yield* now)
            sessions.set(requestId, fresh)
            session = fresh
            newTurn = true
          }
          if (session.replaying) {
            // Appends of a turn whose end is replayed change nothing; the replayed blobs' acknowledgements are awaited.
            if (message._tag === "KvResult") yield* handle(session, seqno, message, [])
            return undefined
          }
          if (!newTurn && unresolved(session) && message._tag === "RunRequest" && (yield* onResentRunRequest(session, seqno, message))) {
            return undefined
          }
          if (session.adopted) {
            // A recovered turn: the client's numbering continues from the previous process.
            if (session.inbox.next === 0 && session.inbox.held.size === 0 && session.inbox.recovered === undefined) {
              session.inbox = adopt(session.inbox, seqno, options.appendWindow).inbox
            }
            session.adopted = false
          }
          const item: Taken = { seqno, message, arrivedAtMs: yield* now }
          let offered = offer(session.inbox, seqno, item, options.appendWindow)
          if (offered.verdict === "outOfRange" && unresolved(session) && session.inbox.next === 0) {
            // Nothing handed on, no turn of the request in this process: a client re-sending after a restart?
            if (!session.knownToStore) session.knownToStore = yield* startedTurnBefore(requestId)
            if (!session.knownToStore) return yield* Effect.fail(unknownRequestFarAhead(requestId, seqno))
            offered = holdUnstarted(session.inbox, seqno, item, options.appendWindow)
            if (offered.verdict === "outOfRange") {
              return yield* Effect.fail(new ConnectError(
                "out_of_range",
                `append_seqno ${seqno} is ${options.appendWindow} or more away from the appends held for request ${requestId} (a turn started before a restart)`
              ))
            }
          }
          if (offered.verdict === "outOfRange") {
            return yield* Effect.fail(new ConnectError(
              "out_of_range",
              `append_seqno ${seqno} is more than ${options.appendWindow} ahead of the next expected ${session.inbox.next} for request ${requestId}`
            ))
          }
          session.inbox = offered.inbox
          switch (offered.verdict) {
            case "held":
              session.unsettled.set(seqno, yield* Deferred.make<void>())
              break
            case "late":
              // A run request below where a recovered turn's inbox started is that turn's, re-sent (its
              // input is committed: the turn is running) or a stale one: never applied out of order.
              if (message._tag === "RunRequest") yield* Effect.logDebug(`transport: late run request ${seqno} of ${requestId} not applied`)
              else yield* handOn(session, offered.ready)
              break
            case "delivered":
              yield* handOn(session, offered.ready)
              break
            case "duplicate":
              break
          }
          yield* watchGaps(session)
          return session.unsettled.get(seqno)
        }))
        // Outside the lock, so the request's other appends are not held up behind this one.
        if (settled !== undefined) yield* awaitSettled(session, seqno, settled)
        return toBinary(BidiAppendResponseSchema, create(BidiAppendResponseSchema))
      }).pipe(Effect.annotateLogs({ requestId: requestIdHeader ?? "" }))

    const runSse = (body: Uint8Array) =>
      Effect.gen(function*() {
        const envelopes = parseEnvelopes(body, options.runSseMaxBytes)
        if (envelopes instanceof ConnectError) return yield* Effect.fail(envelopes)
        const first = envelopes[0]
        if (first === undefined) return yield* Effect.fail(new ConnectError("invalid_argument", "RunSSE request has no message"))
        const requestId = Dialect.decodeRunSseRequest(first.payload)
        if (Either.isLeft(requestId)) return yield* Effect.fail(new ConnectError("invalid_argument", requestId.left.message))
        let session = yield* sessionFor(requestId.right)
        // A finished turn whose end a reader already received: this RunSSE starts a new turn on a reused id.
        if (session.channel.isClosed() && session.channel.endDelivered() && !session.channel.isAttached()) {
          yield* session.lock.withPermits(1)(dropHeld(session))
          session = yield* newSession(requestId.right, yield* now)
          sessions.set(requestId.right, session)
        }
        // The first heartbeat goes out at once: it flushes the response headers, so a client that
        // waits for them before posting its run request is not held up until the turn speaks.
        const frames = yield* session.channel.attach({ frame: HEARTBEAT_FRAME, interval: Duration.millis(options.heartbeatMs) })
        // Frames that are ready together leave in one socket write.
        return Stream.mapChunks(frames, joinFrames)
      })

    // -------------------------------------------------------------------------
    // The runner's view
    // -------------------------------------------------------------------------

    const publish = (turn: TurnRef, callId: string, events: ReadonlyArray<ResponseEvent>) =>
      Effect.gen(function*() {
        const session = yield* turnSession(turn)
        const nowMs = yield* now
        const mcpTools = toolContext(session, turn).mcpTools
        const messages: Array<AgentServerMessage> = []
        for (const event of events) {
          const encoded = Dialect.encodeResponseEvent(session.correlation, callId, event, { nowMs, mcpTools })
          session.correlation = encoded.correlation
          messages.push(...encoded.messages)
        }
        yield* write(session, messages)
      })

    const abort = (turn: TurnRef) =>
      Effect.gen(function*() {
        const session = yield* turnSession(turn)
        const aborted = Dialect.encodeAbortAll(session.correlation)
        session.correlation = aborted.correlation
        session.operations.clear()
        yield* write(session, aborted.messages)
      })

    const finish = (turn: TurnRef, outcome: TurnOutcome, state: ConversationState, usage: Usage) =>
      Effect.flatMap(turnSession(turn), (session) => sendTurnEnd(session, turn, outcome, state, usage))

    /** What ends a turn on the wire, once: the blobs and turn_ended, then (a final answer, once the blobs are acknowledged) the checkpoint, then end-stream. */
    const sendTurnEnd = (session: Session, turn: TurnRef, outcome: TurnOutcome, state: ConversationState, usage: Usage) =>
      Effect.gen(function*() {
        if (session.finishing) return
        session.finishing = true
        session.correlation = { ...session.correlation, usage }
        const end = Dialect.encodeTurnEnd(session.correlation, outcome)
        session.correlation = end.correlation
        if (outcome._tag !== "Final") {
          yield* write(session, end.messages)
          yield* endSession(session, end.end)
          return
        }
        // As the real server orders it: the set_blob messages, then turn_ended (Cursor shows
        // the turn done at once), then the wait for the acknowledgements (heartbeats keep the
        // stream open), then the checkpoint, which names the blobs and so goes out only once
        // all of them are acknowledged, and the end-stream.
        const checkpoint = projectTurn(session, turn, state, usage)
        const acks = yield* sendBlobs(session, checkpoint.blobs)
        yield* write(session, end.messages)
        yield* FiberSet.run(background, Effect.gen(function*() {
          const acknowledged = yield* awaitBlobAcks(acks)
          if (acknowledged) yield* write(session, [Dialect.encodeCheckpoint(checkpoint.checkpoint)])
          else yield* Effect.logWarning(`transport: the client did not acknowledge the blobs of ${session.requestId}; checkpoint not published`)
          yield* endSession(session, end.end)
        }))
      })

    /** The turn's checkpoint; without its run request (a turn recovered or replayed after a restart), from the committed settings and history. */
    const projectTurn = (session: Session, turn: TurnRef, state: ConversationState, usage: Usage) => {
      const run = session.run
      const action = run?.action
      const userMessage = action?._tag === "StartTurn"
        ? { text: action.userMessage.text, messageId: action.userMessageId, mode: run?.mode ?? "agent" as const }
        : Dialect.turnUserMessageOf(turn.settings, state.messages.slice(state.turnStart))
      return Dialect.projectCheckpoint({
        previous: run !== undefined ? run.conversationState : Dialect.carriedCheckpointOf(turn.settings),
        requestId: session.requestId,
        userMessage,
        turnMessages: state.messages.slice(state.turnStart),
        transcript: state.messages,
        cursorToolCalls: session.cursorToolCalls,
        pendingToolCalls: [],
        todos: session.todos,
        usedTokens: usage.input + usage.cacheRead + usage.cacheWrite + usage.output,
        maxTokens: options.contextWindowOf(turn.settings.model),
        workspaceUris: run?.workspace.workspacePaths ?? Dialect.workspacePathsOf(turn.settings),
        mcpTools: toolContext(session, turn).mcpTools
      })
    }

    /** Sends `set_blob` for each blob; the acknowledgements to wait for. */
    const sendBlobs = (session: Session, blobs: ReadonlyArray<Dialect.Blob>) =>
      Effect.gen(function*() {
        const acks: Array<Deferred.Deferred<boolean>> = []
        const messages: Array<AgentServerMessage> = []
        for (const blob of blobs) {
          const sent = Dialect.encodeSetBlob(session.correlation, blob)
          session.correlation = sent.correlation
          const ack = yield* Deferred.make<boolean>()
          session.blobAcks.set(sent.kvId, ack)
          acks.push(ack)
          messages.push(sent.message)
        }
        yield* write(session, messages)
        return acks
      })

    /** Waits for every acknowledgement: false on an error, on the end of the session or after `blobAckTimeoutMs`. */
    const awaitBlobAcks = (acks: ReadonlyArray<Deferred.Deferred<boolean>>) =>
      Effect.all(acks.map(Deferred.await), { concurrency: "unbounded" }).pipe(
        Effect.timeoutTo({ duration: Duration.millis(options.blobAckTimeoutMs), onSuccess: (r) => r, onTimeout: () => [false] }),
        Effect.map((results) => results.every((ok) => ok))
      )

    const gateway = ClientGateway.of({ publish, dispatch, abort, finish })

    // -------------------------------------------------------------------------
    // Housekeeping
    // -------------------------------------------------------------------------

    const sweep = Effect.gen(function*() {
      const at = yield* now
      for (const [requestId, session] of sessions) {
        // A RunSSE waiting on a request this process knows nothing of (no run request, no turn):
        // after a restart, a turn that ended before the crash (its end is replayed), one being
        // resumed (waited for), or one never received (ended with an error the client can act
        // on rather than heartbeats forever). See `replayEnd`.
        if (
          unresolved(session) && !session.channel.isClosed() && session.channel.isAttached() &&
          at - session.createdAtMs > options.orphanTimeoutMs &&
          (session.storeCheckedAtMs === undefined || at - session.storeCheckedAtMs > options.orphanTimeoutMs)
        ) {
          session.storeCheckedAtMs = at
          yield* resolveOrphan(session)
        }
        const finishedLongAgo = session.finishedAtMs !== undefined && at - session.finishedAtMs > options.finishedRetentionMs
        const idleLongAgo = session.conversationId === undefined && at - session.lastActivityMs > options.idleRetentionMs
        if ((finishedLongAgo || idleLongAgo) && !session.channel.isAttached()) sessions.delete(requestId)
      }
    })
    yield* FiberSet.run(background, Effect.repeat(sweep, Schedule.spaced(Duration.millis(options.sweepIntervalMs))))

    const shutdown = Effect.forEach([...sessions.values()], (session) =>
      session.channel.isClosed()
        ? Effect.void
        : session.channel.close(endFrameOf(Dialect.EndStream.Error({ code: "unavailable", message: "The server is shutting down; try again.", detail: undefined }))),
      { discard: true })
    yield* Effect.addFinalizer(() => shutdown)

    return {
      service: Transport.of({ options, gateway, bidiAppend, runSse, shutdown, sessionCount: () => sessions.size }),
      bindRunner: (runner: Context.Tag.Service<Runner>) => Deferred.succeed(runnerReady, runner)
    }
  })

// =============================================================================
// Layers
// =============================================================================

/** The transport's state; provides the runner's `ClientGateway` too. */
export const layer = (options: TransportOptions): Layer.Layer<Transport | ClientGateway | TransportBinding> =>
  Layer.scopedContext(Effect.map(make(options), ({ bindRunner, service }) =>
    Context.make(Transport, service).pipe(
      Context.add(ClientGateway, service.gateway),
      Context.add(TransportBinding, { bindRunner })
    )))

/** Hands the runner to the transport once both exist (they depend on each other). */
export class TransportBinding extends Context.Tag("cursor-byok/TransportBinding")<TransportBinding, {
  readonly bindRunner: (runner: Context.Tag.Service<Runner>) => Effect.Effect<boolean>
}>() {}

export const layerBindRunner: Layer.Layer<never, never, TransportBinding | Runner> = Layer.effectDiscard(
  Effect.gen(function*() {
    const binding = yield* TransportBinding
    yield* binding.bindRunner(yield* Runner)
  })
)

/** One buffer for the frames of a chunk (a single frame passes as it is). */
const joinFrames = (frames: Chunk.Chunk<Uint8Array>): Chunk.Chunk<Uint8Array> => {
  if (frames.length <= 1) return frames
  const parts = Chunk.toReadonlyArray(frames)
  const out = new Uint8Array(parts.reduce((size, part) => size + part.length, 0))
  let offset = 0
  for (const part of parts) {
    out.set(part, offset)
    offset += part.length
  }
  return Chunk.of(out)
}

/** How much of an oversized body is read and dropped before the connection is cut instead. */
const DRAIN_LIMIT = 64 * 1024 * 1024

/** Reads a request body up to `limit` bytes (after gzip), or fails with `resource_exhausted`. */
const readBody = (request: HttpServerRequest.HttpServerRequest, limit: number) =>
  Effect.gen(function*() {
    const declared = Number(request.headers["content-length"] ?? Number.NaN)
    if (Number.isFinite(declared) && declared > limit) {
      return yield* Effect.fail(new ConnectError("resource_exhausted", `request body of ${declared} bytes exceeds the limit of ${limit}`))
    }
    if (Number.isFinite(declared)) {
      // The HTTP parser frames the body by its declared length (within the limit, checked
      // above): read it in one go, which costs far less than a body stream.
      const bytes = yield* request.arrayBuffer.pipe(
        Effect.mapError(() => new ConnectError("invalid_argument", "the request body could not be read"))
      )
      const whole = decodeUnaryBody(new Uint8Array(bytes), request.headers["content-encoding"], limit)
      return whole instanceof ConnectError ? yield* Effect.fail(whole) : whole
    }
    const chunks: Array<Uint8Array> = []
    let size = 0
    // Past the limit the rest is read and dropped, so the client gets the error rather than a
    // reset connection; a body far past it (abuse) is cut off.
    yield* request.stream.pipe(
      Stream.mapError(() => new ConnectError("invalid_argument", "the request body could not be read")),
      Stream.runForEach((chunk) => {
        size += chunk.length
        if (size > limit + DRAIN_LIMIT) return Effect.fail(new ConnectError("resource_exhausted", `request body exceeds the limit of ${limit} bytes`))
        if (size <= limit) chunks.push(chunk)
        return Effect.void
      })
    )
    if (size > limit) return yield* Effect.fail(new ConnectError("resource_exhausted", `request body of ${size} bytes exceeds the limit of ${limit}`))
    const body = Buffer.concat(chunks)
    const decoded = decodeUnaryBody(new Uint8Array(body.buffer, body.byteOffset, body.byteLength), request.headers["content-encoding"], limit)
    return decoded instanceof ConnectError ? yield* Effect.fail(decoded) : decoded
  })

const unaryError = (error: ConnectError) =>
  HttpServerResponse.unsafeJson(error.toJson(), { status: httpStatusOf(error.code) })

/** A server-streaming call that fails before it starts still answers 200 with one end-stream frame. */
const streamError = (error: ConnectError) =>
  HttpServerResponse.uint8Array(endStreamFrame(error), { contentType: "application/connect+proto" })

/** The agent endpoints: RunSSE and BidiAppend. */
export const layerRoutes: Layer.Layer<never, never, HttpLayerRouter.HttpRouter | Transport> = HttpLayerRouter.use((router) =>
  Effect.gen(function*() {
    const transport = yield* Transport
    yield* router.add("POST", "/aiserver.v1.BidiService/BidiAppend", (request) =>
      readBody(request, transport.options.bidiAppendMaxBytes).pipe(
        Effect.flatMap((body) => transport.bidiAppend(body, request.headers["x-request-id"])),
        Effect.map((bytes) => HttpServerResponse.uint8Array(bytes, { contentType: "application/proto" })),
        Effect.catchAll((error) =>
          Effect.logWarning(`BidiAppend refused: ${error.code}: ${error.message}`).pipe(
            Effect.annotateLogs({ requestId: request.headers["x-request-id"] ?? "" }),
            Effect.as(unaryError(error))
          ))
      ))
    yield* router.add("POST", "/agent.v1.AgentService/RunSSE", (request) =>
      readBody(request, transport.options.runSseMaxBytes).pipe(
        Effect.flatMap(transport.runSse),
        Effect.map((frames) =>
          HttpServerResponse.stream(frames, {
            contentType: "text/event-stream",
            headers: { "cache-control": "no-cache", "connect-protocol-version": "1" }
          })
        ),
        Effect.catchAll((error) =>
          Effect.logWarning(`RunSSE refused: ${error.code}: ${error.message}`).pipe(
            Effect.annotateLogs({ requestId: request.headers["x-request-id"] ?? "" }),
            Effect.as(streamError(error))
          ))
      ))
  })
)
