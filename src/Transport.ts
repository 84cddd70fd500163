/**
 * Cursor's agent transport in its HTTP/1.1 mode, over Connect: `RunSSE` streams a request's
 * server messages, `BidiAppend` carries the client's messages one POST at a time.
 *
 * Each request id (one Cursor turn) has a session: an ordered inbox for its appends (answered
 * at once, handed on in `append_seqno` order), a turn channel for its output (with a backlog
 * so a reconnecting RunSSE gets everything), and the protocol correlation the Dialect threads
 * (exec ids, KV ids, tool call ids). Decoded client messages become loop inputs for the
 * Runner; exec results drive the tool machines of `Tools.ts`, whose final results go back to
 * the Runner as `ToolResult` inputs. The session also implements the Runner's `ClientGateway`:
 * what the loop emits is encoded by the Dialect and written to the request's channel.
 */
import { create, fromBinary, toBinary } from "@bufbuild/protobuf"
import { HttpLayerRouter, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Chunk, Clock, Context, Deferred, Duration, Effect, Either, FiberSet, Layer, Schedule, Stream } from "effect"
import * as Dialect from "./Dialect.js"
import type { ClientMessage, RunRequest } from "./Dialect.js"
import type { AgentServerMessage, TodoItem, ToolCall as CursorToolCall } from "./gen/agent/v1/agent_pb.js"
import { BidiAppendRequestSchema, BidiAppendResponseSchema } from "./gen/aiserver/v1/aiserver_pb.js"
import type { ResponseEvent, Usage } from "./Llm.js"
import { Input } from "./Loop.js"
import type { ConversationState } from "./Loop.js"
import { ClientGateway, Runner } from "./Runner.js"
import type { DispatchedOperation, TurnOutcome, TurnRef } from "./Runner.js"
import * as Tools from "./Tools.js"
import type { ToolRun, ToolStep } from "./Tools.js"
import { emptyInbox, offer } from "./transport/AppendInbox.js"
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
  /** How far ahead of the next expected seqno an append may be held. */
  readonly appendWindow: number
  /** How long the end of a turn waits for the client to acknowledge the checkpoint's blobs. */
  readonly blobAckTimeoutMs: number
  /** How long a finished request's output stays available to a reconnecting RunSSE. */
  readonly finishedRetentionMs: number
  /** A request that never becomes a turn (no run request) is forgotten after this long. */
  readonly idleRetentionMs: number
  /** A RunSSE for a request with no run request and no turn is ended (unavailable) after this long. */
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
  blobAckTimeoutMs: 10_000,
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

interface Session {
  readonly requestId: string
  /**
   * Tells this request's turns apart in input ids: the IDE reuses a request id for a new turn,
   * so `requestId:seqno` alone would make the runner skip the new turn as already applied.
   * The run request's user message id when there is one (stable across redeliveries and
   * restarts), else a per-process generation.
   */
  turnKey: string
  channel: TurnChannel
  inbox: AppendInbox<{ readonly seqno: number; readonly message: ClientMessage }>
  correlation: Dialect.TurnCorrelation
  conversationId: string | undefined
  run: RunRequest | undefined
  todos: ReadonlyArray<TodoItem>
  /** Typed tool calls as the UI saw them complete, for the checkpoint's steps. */
  readonly cursorToolCalls: Record<string, CursorToolCall>
  readonly operations: Map<string, RunningOperation>
  readonly blobAcks: Map<number, Deferred.Deferred<boolean>>
  /** Serializes this request's appends: the inbox and what it hands on. */
  readonly lock: Effect.Semaphore
  finishing: boolean
  /**
   * The runner spoke for this request before any run request reached this process: a turn
   * recovered after a restart. The client's appends go on numbering from where the previous
   * process left off, so the first append this process sees sets where its inbox starts.
   */
  adopted: boolean
  /** The runner has published or dispatched for this request (it is a turn this process runs). */
  runnerSpoke: boolean
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
  const id = turn.settings.options["requestId"]
  return typeof id === "string" ? id : turn.turnId
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
        correlation: Dialect.initialCorrelation(requestId),
        conversationId: undefined,
        run: undefined,
        todos: [],
        cursorToolCalls: {},
        operations: new Map(),
        blobAcks: new Map(),
        lock,
        finishing: false,
        adopted: false,
        runnerSpoke: false,
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
        // A turn recovered after a restart: its todos start from what the run request's checkpoint held.
        if (!session.runnerSpoke && session.run === undefined) session.todos = Dialect.todosOf(Dialect.carriedCheckpointOf(turn.settings))
        session.runnerSpoke = true
        if (session.run === undefined && session.inbox.next === 0) {
          if (session.inbox.held.size === 0) session.adopted = true
          else yield* adoptHeld(session)
        }
        return session
      })

    /**
     * A recovered turn whose client re-sent appends before the runner spoke: they were held
     * waiting for seqno 0, which this process will never see. The inbox now starts at the first
     * of them and the ones in order are handed on (they were acknowledged when they arrived).
     */
    const adoptHeld = (session: Session) =>
      session.lock.withPermits(1)(Effect.gen(function*() {
        if (session.run !== undefined || session.inbox.next !== 0 || session.inbox.held.size === 0) return
        const held = [...session.inbox.held.entries()].sort(([a], [b]) => a - b)
        let inbox = emptyInbox<{ readonly seqno: number; readonly message: ClientMessage }>(held[0]![0])
        const ready: Array<{ readonly seqno: number; readonly message: ClientMessage }> = []
        for (const [seqno, item] of held) {
          const offered = offer(inbox, seqno, item, options.appendWindow)
          inbox = offered.inbox
          ready.push(...offered.ready)
        }
        session.inbox = inbox
        const durable: Array<Effect.Effect<void>> = []
        for (const item of ready) yield* handle(session, item.seqno, item.message, durable)
      }))

    const write = (session: Session, messages: ReadonlyArray<AgentServerMessage>) =>
      session.channel.write(messages.map(frameOf))

    const endSession = (session: Session, end: Dialect.EndStream) =>
      Effect.gen(function*() {
        session.finishedAtMs = yield* now
        for (const ack of session.blobAcks.values()) yield* Deferred.succeed(ack, false)
        yield* session.channel.close(endFrameOf(end))
      })

    const submit = (conversationId: string, input: Input, inputId: string) =>
      Effect.flatMap(Deferred.await(runnerReady), (runner) => runner.submit(conversationId, input, inputId))

    /**
     * For inputs that arrive in a BidiAppend: queues the input in order now and records, in
     * `durable`, a wait for its commit. The append handler waits for those after releasing the
     * request's lock, so that its acknowledgement means the input survives a crash, while the
     * request's other appends (heartbeats, KV answers, stream chunks) are not held behind it.
     */
    const submitDurably = (durable: Array<Effect.Effect<void>>, conversationId: string, input: Input, inputId: string) =>
      Effect.flatMap(Deferred.await(runnerReady), (runner) => runner.submitTracked(conversationId, input, inputId)).pipe(
        Effect.map((applied) => {
          durable.push(applied.pipe(
            Effect.timeoutTo({ duration: Duration.millis(DURABLE_ACK_WAIT_MS), onSuccess: () => true, onTimeout: () => false }),
            Effect.flatMap((done) => done ? Effect.void : Effect.logWarning(`transport: input ${inputId} not yet committed when acknowledged`))
          ))
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
            : submitDurably(durable, conversationId, Input.UserMessage({ message: message.message }), inputId)
        case "Cancel":
          return conversationId === undefined ? Effect.void : submitDurably(durable, conversationId, Input.Cancel({ reason: message.reason }), inputId)
        case "ExecResult":
          return onExecReply(session, message.id, message.execId, (run) => Tools.onExecReply(run, message.reply), true, durable)
        case "ExecStream":
          return onExecReply(session, message.id, message.execId, (run) => Tools.onExecReply(run, message.reply), message.terminal, durable)
        case "ExecThrow":
          return onExecReply(session, message.id, undefined, (run) => Tools.onExecThrow(run, message.error), true, durable)
        case "KvResult": {
          const resolved = Dialect.resolveKv(session.correlation, message.id)
          session.correlation = resolved.correlation
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
        const conversationId = run.conversationId !== undefined && run.conversationId !== "" ? run.conversationId : session.requestId
        session.conversationId = conversationId
        switch (run.action._tag) {
          case "StartTurn": {
            const { start } = run.action
            if (run.action.userMessageId !== "") session.turnKey = run.action.userMessageId
            const settings = { ...start.settings, options: { ...start.settings.options, requestId: session.requestId } }
            yield* submitDurably(durable, conversationId, Input.Start({ ...start, settings }), inputIdOf(session, seqno))
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
        // A first append far ahead of seqno 0 is refused before it can create a session.
        if (!sessions.has(requestId) && seqno >= options.appendWindow) {
          return yield* Effect.fail(new ConnectError(
            "out_of_range",
            `append_seqno ${seqno} is more than ${options.appendWindow} ahead of the next expected 0 for request ${requestId}`
          ))
        }
        let session = yield* sessionFor(requestId)
        const durable: Array<Effect.Effect<void>> = []
        yield* session.lock.withPermits(1)(Effect.gen(function*() {
          // A request id reused for a new turn (the IDE does this): start its session afresh.
          if (session.finishedAtMs !== undefined && seqno === 0 && message._tag === "RunRequest") {
            const fresh = yield* newSession(requestId, yield* now)
            sessions.set(requestId, fresh)
            session = fresh
          }
          if (session.adopted) {
            // A recovered turn: the client's numbering continues from the previous process.
            if (seqno > 0 && session.inbox.next === 0 && session.inbox.held.size === 0) session.inbox = emptyInbox(seqno)
            session.adopted = false
          }
          const offered = offer(session.inbox, seqno, { seqno, message }, options.appendWindow)
          if (offered.verdict === "outOfRange") {
            return yield* Effect.fail(new ConnectError(
              "out_of_range",
              `append_seqno ${seqno} is more than ${options.appendWindow} ahead of the next expected ${session.inbox.next} for request ${requestId}`
            ))
          }
          session.inbox = offered.inbox
          for (const ready of offered.ready) yield* handle(session, ready.seqno, ready.message, durable)
        }))
        // Outside the lock: the inputs this append handed on are committed before it is acknowledged.
        yield* Effect.all(durable, { concurrency: "unbounded", discard: true })
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
          session = yield* newSession(requestId.right, yield* now)
          sessions.set(requestId.right, session)
        }
        const frames = yield* session.channel.attach
        // The first heartbeat goes out at once: it flushes the response headers, so a client that
        // waits for them before posting its run request is not held up until the turn speaks.
        const heartbeats = Stream.repeatEffectWithSchedule(Effect.succeed(HEARTBEAT_FRAME), Schedule.spaced(Duration.millis(options.heartbeatMs)))
        // Frames that are ready together leave in one socket write.
        return Stream.merge(frames, heartbeats, { haltStrategy: "left" }).pipe(Stream.mapChunks(joinFrames))
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
      Effect.gen(function*() {
        const session = yield* turnSession(turn)
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
        // Blobs first; the checkpoint names them, so it goes out only once all are acknowledged.
        const checkpoint = projectTurn(session, turn, state, usage)
        yield* FiberSet.run(background, Effect.gen(function*() {
          const acknowledged = yield* storeBlobs(session, checkpoint.blobs)
          yield* write(session, end.messages)
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

    /** Sends `set_blob` for each blob and waits for every acknowledgement (false on an error or a timeout). */
    const storeBlobs = (session: Session, blobs: ReadonlyArray<Dialect.Blob>) =>
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
        const results = yield* Effect.all(acks.map(Deferred.await), { concurrency: "unbounded" }).pipe(
          Effect.timeoutTo({ duration: Duration.millis(options.blobAckTimeoutMs), onSuccess: (r) => r, onTimeout: () => [false] })
        )
        return results.every((ok) => ok)
      })

    const gateway = ClientGateway.of({ publish, dispatch, abort, finish })

    // -------------------------------------------------------------------------
    // Housekeeping
    // -------------------------------------------------------------------------

    const sweep = Effect.gen(function*() {
      const at = yield* now
      for (const [requestId, session] of sessions) {
        // A RunSSE waiting on a request this process knows nothing of (no run request, no turn):
        // after a restart that is a turn that ended before the crash, or one never received.
        // End it with an error the client can act on rather than heartbeats forever.
        if (
          session.run === undefined && !session.runnerSpoke && !session.channel.isClosed() &&
          session.channel.isAttached() && at - session.createdAtMs > options.orphanTimeoutMs
        ) {
          yield* endSession(session, Dialect.EndStream.Error({
            code: "unavailable",
            message: "The server has no turn for this request (it may have restarted after the turn ended). The conversation is saved; send your message again.",
            detail: undefined
          }))
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

/** How long a BidiAppend waits for its input to be committed before it is acknowledged anyway. */
const DURABLE_ACK_WAIT_MS = 2_000

/** How much of an oversized body is read and dropped before the connection is cut instead. */
const DRAIN_LIMIT = 64 * 1024 * 1024

/** Reads a request body up to `limit` bytes (after gzip), or fails with `resource_exhausted`. */
const readBody = (request: HttpServerRequest.HttpServerRequest, limit: number) =>
  Effect.gen(function*() {
    const declared = Number(request.headers["content-length"] ?? Number.NaN)
    if (Number.isFinite(declared) && declared > limit) {
      return yield* Effect.fail(new ConnectError("resource_exhausted", `request body of ${declared} bytes exceeds the limit of ${limit}`))
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
