/**
 * The client's messages of one request, in order, whichever wire carried them: BidiAppend
 * numbers them with `append_seqno`, `Run` by their place on the stream. `accept` takes one
 * into the request's ordered inbox (`AppendInbox.ts`) and hands on what is ready: run
 * requests, follow-ups and cancels become Loop inputs (the Dialect makes them; their input id is
 * `<request id>/<turn key>:<seqno>`), exec answers drive the tool machines (`ToolOps.ts`), KV
 * answers settle the turn end's blobs and the context reads. What it returns is the
 * acknowledgement to wait for (`Acks.ts`).
 */
import { Clock, Deferred, Duration, Effect, Exit, FiberSet, Option } from "effect"
import type { Context } from "effect"
import * as Dialect from "../Dialect.js"
import * as Metrics from "../Metrics.js"
import type { ClientMessage, RunRequest } from "../Dialect.js"
import type { AgentServerMessage } from "../gen/agent/v1/agent_pb.js"
import { Input } from "../Loop.js"
import type { Runner } from "../Runner.js"
import * as Tools from "../Tools.js"
import { dropHeld, settle } from "./Acks.js"
import { adopt, holdUnstarted, offer } from "./AppendInbox.js"
import { ConnectError } from "./Connect.js"
import * as Recovery from "./Recovery.js"
import * as Resume from "./Resume.js"
import { awaitSettlement, Settlement, settleAfter } from "./Settlement.js"
import { conversationOf, inputIdOf, isEnded, isReplay, isUnresolved, Lifecycle, write } from "./Session.js"
import type { Session, SessionEnv, Taken } from "./Session.js"
import type { SessionsService } from "./Sessions.js"
import { attachChild, cancelSubagent } from "./Subagents.js"
import { isWork, onExecReply, onQueryReply, onWorkDone } from "./ToolOps.js"
import type { ToolDone, WorkToDo } from "./ToolOps.js"
import type { InputEnv, ServerWorker } from "./InputEnv.js"
import { noServerWork } from "./InputEnv.js"
import { endSession } from "./TurnEnd.js"

/** The env of the client's messages; `handOn` is this module's, bound to it. */
export const makeInputEnv = (base: SessionEnv, runner: Context.Tag.Service<Runner>, sessions: SessionsService, worker: ServerWorker = noServerWork): InputEnv => {
  const env: InputEnv = { ...base, runner, sessions, worker, handOn: (session, ready) => handOn(env, session, ready) }
  return env
}

/** Hands on appends the inbox released, in order; each settles on its own (`Acks.settle`). */
export const handOn = (env: InputEnv, session: Session, ready: ReadonlyArray<Taken>): Effect.Effect<void> =>
  Effect.forEach(ready, (item) =>
    Effect.gen(function*() {
      const durable: Array<Settlement> = []
      yield* handle(env, session, item.seqno, item.message, durable)
      settle(session, item.seqno, durable)
    }), { discard: true })

/**
 * Queues the input in order now and records, in `durable`, a wait for its commit (settled by
 * the conversation's actor once it applied the input): the acknowledgement waits for it outside
 * the request's lock, so that it means the input survives a crash, while the request's other
 * messages are not held up behind it.
 */
export const submitDurably = (env: InputEnv, durable: Array<Settlement>, conversationId: string, input: Input, inputId: string) =>
  Effect.suspend(() => {
    const applied = new Settlement()
    durable.push(applied)
    return env.runner.submitNotifying(conversationId, input, inputId, () => applied.settle())
  })

const submitToolDone = (env: InputEnv, durable: Array<Settlement>) => (done: ToolDone | undefined) =>
  done === undefined ? Effect.void : submitDurably(env, durable, done.conversationId, Dialect.toolResultInputOf(done.message), done.inputId)

const handle = (env: InputEnv, request: Session, seqno: number, message: ClientMessage, durable: Array<Settlement>): Effect.Effect<void> => {
  const inputId = inputIdOf(request, seqno)
  // A request that resumes another's turn acts on that turn (`Resume.ts`); its input ids stay its own.
  const session = message._tag === "RunRequest" ? request : request.resumeOf ?? request
  const conversationId = session.conversationId
  switch (message._tag) {
    case "RunRequest":
      return onRunRequest(env, request, seqno, message, durable)
    case "Prewarm":
      return onPrewarm(request, message)
    case "UserMessage":
      if (session.prewarm !== undefined && session.run === undefined) {
        return onRunRequest(env, session, seqno, Dialect.runRequestOfPrewarm(session.prewarm, message.userMessage), durable)
      }
      if (conversationId === undefined) return Effect.logWarning(`transport: a follow-up message on ${session.requestId} arrived before any run request; dropped`)
      if (session.lifecycle._tag === "Ending") {
        // Queued while the agent worked, sent right after turn_ended: the next turn, on this stream.
        session.queuedUserMessage = { text: message.userMessage.text, messageId: message.messageId, mode: Dialect.cursorModeOf(message.userMessage.mode) }
        session.queuedTurnExpected = true
      }
      return afterStart(env, session, durable, (wait) => submitDurably(env, wait, conversationId, Dialect.followUpInputOf(message), inputId))
    case "CancelSubagent":
      return Effect.flatMap(cancelSubagent(env.sessions, session, message.subagentId), ({ children, done }) =>
        Effect.zipRight(
          Effect.forEach(children, (child) => submitDurably(env, durable, child, Input.Cancel({ reason: "the user stopped this subagent" }), `${inputId}/subagent`), { discard: true }),
          submitToolDone(env, durable)(done)
        ))
    case "Cancel":
      return conversationId === undefined
        ? Effect.void
        : afterStart(env, session, durable, (wait) => submitDurably(env, wait, conversationId, Dialect.cancelInputOf(message), inputId))
    case "ExecResult":
      return Effect.flatMap(onExecReply(session, message.id, message.execId, (run) => Tools.onExecReply(run, message.reply), true), nextOf(env, session, durable))
    case "ExecStream":
      return Effect.flatMap(
        onExecReply(session, message.id, message.execId, (run) => Tools.onExecReply(run, message.reply), message.terminal),
        nextOf(env, session, durable)
      )
    case "ExecThrow":
      return Effect.flatMap(onExecReply(session, message.id, undefined, (run) => Tools.onExecThrow(run, message.error), true), nextOf(env, session, durable))
    case "KvResult":
      return onKvResult(session, message)
    case "InteractionResponse":
      return Effect.flatMap(onQueryReply(session, message.id, message.reply), nextOf(env, session, durable))
    case "Unknown":
      return Effect.logInfo(`transport: ${session.requestId}: ${message.where} (fields ${message.fields.join(",") || "none"}) is not supported by this server; acknowledged, nothing changed`)
    case "ExecStreamClose":
    case "ExecHeartbeat":
    case "Heartbeat":
      // Liveness only: a stream close is never a result (it may arrive before the result).
      return Effect.void
  }
}

/**
 * The server's work for an approved tool call runs in the background, off the request's lock
 * (a fetch may take seconds; the client's other messages go on meanwhile). Its result goes back
 * through the tool machine under the lock and is submitted like any tool result; a turn that was
 * canceled meanwhile drops it (`onWorkDone`).
 */
const startWork = (env: InputEnv, session: Session, todo: WorkToDo): Effect.Effect<void> =>
  FiberSet.run(env.background, Effect.gen(function*() {
    const work = todo.work
    const result = work._tag === "Sleep" ? yield* Effect.as(Effect.sleep(work.ms), Tools.WorkResult.Slept()) : yield* env.worker.perform(work)
    const next = yield* session.lock.withPermits(1)(onWorkDone(session, todo, result))
    if (next === undefined) return
    const committed: Array<Settlement> = []
    yield* nextOf(env, session, committed)(next)
    yield* Effect.forEach(committed, awaitSettlement, { discard: true })
  }).pipe(Effect.catchAllCause((cause) => Effect.logError(`transport: ${session.requestId}: ${todo.run.call.name} failed on the server`, cause)))).pipe(Effect.asVoid)

/** A tool machine's next step after a client's answer or the server's work: more work (off the lock), or the result to submit. */
const nextOf = (env: InputEnv, session: Session, durable: Array<Settlement>) => (step: ToolDone | WorkToDo | undefined): Effect.Effect<void> =>
  isWork(step) ? startWork(env, session, step) : submitToolDone(env, durable)(step)

/**
 * A KV answer that settles at once what waits on it: a blob read back, or a blob's
 * acknowledgement (the last of a turn's writes its checkpoint). Undefined when the answer needs
 * more (a log line: it failed, or matches nothing); nothing is changed then.
 */
const kvAtOnce = (session: Session, message: Extract<ClientMessage, { _tag: "KvResult" }>): (() => void) | undefined => {
  const failed = message.error !== undefined && message.error !== ""
  const read = session.blobReads.get(message.id)
  if (read !== undefined) {
    if (failed) return undefined
    return () => {
      session.correlation = Dialect.resolveKv(session.correlation, message.id).correlation
      session.blobReads.delete(message.id)
      Deferred.unsafeDone(read, Exit.succeed(message.data ?? new Uint8Array()))
    }
  }
  const ack = session.blobAcks.get(message.id)
  if (ack === undefined) return undefined
  return () => {
    session.correlation = Dialect.resolveKv(session.correlation, message.id).correlation
    session.blobAcks.delete(message.id)
    ack(!failed)
  }
}

const onKvResult = (session: Session, message: Extract<ClientMessage, { _tag: "KvResult" }>) => {
  const settle = kvAtOnce(session, message)
  if (settle !== undefined) return Effect.sync(settle)
  // What needs a log line: a read back that failed, or an answer that matches nothing.
  session.correlation = Dialect.resolveKv(session.correlation, message.id).correlation
  const read = session.blobReads.get(message.id)
  if (read === undefined) return Effect.logDebug(`transport: KV answer ${message.id} matches no request; dropped`)
  session.blobReads.delete(message.id)
  return Effect.zipRight(Effect.logWarning(`transport: the client could not read back blob ${message.id}: ${message.error}`), Deferred.succeed(read, undefined))
}

/** A prewarm opens the request without a turn: the user message that follows starts it, with the prewarm's settings. */
const onPrewarm = (session: Session, message: Extract<ClientMessage, { _tag: "Prewarm" }>) =>
  Effect.sync(() => {
    if (session.run !== undefined || !isUnresolved(session)) return
    session.prewarm = message.prewarm
    const conversationId = message.prewarm.conversationId
    session.conversationId = conversationId !== undefined && conversationId !== "" ? conversationId : session.requestId
  })

const onRunRequest = (env: InputEnv, session: Session, seqno: number, run: RunRequest, durable: Array<Settlement>) =>
  Effect.gen(function*() {
    const action = run.action
    switch (action._tag) {
      case "StartTurn":
      case "Summarize": {
        session.run = run
        session.todos = Dialect.todosOf(run.conversationState)
        session.conversationId = conversationOf(session, run)
        // A recovered turn may be running or ending already (this is its run request, re-sent).
        if (session.lifecycle._tag === "Open") session.lifecycle = Lifecycle.Running()
        if (action.userMessageId !== "") session.turnKey = action.userMessageId
        // A summarize reads the context back too: its call must send the same system prompt (the rules) to hit the cache.
        if (run.contextToFetch.length > 0 || run.pastChatsToRead.length > 0) return yield* startAfterContext(env, session, seqno, run, durable)
        const input = Dialect.turnInputOf(run, session.requestId, env.worker.capabilities(), session.parent, env.options.childModel)
        if (input === undefined) return
        yield* attachChild(env.sessions, session, session.conversationId)
        return yield* submitDurably(env, durable, session.conversationId, input, inputIdOf(session, seqno))
      }
      case "Resume":
        session.run = run
        session.conversationId = conversationOf(session, run)
        return yield* Resume.resume(env, session)
      case "Unsupported":
        if (session.lifecycle._tag === "Running" || session.lifecycle._tag === "Ending") {
          // On a live request it must not end the running turn.
          return yield* Effect.logInfo(`transport: ${session.requestId}: conversation action ${action.field} is not supported by this server yet; acknowledged, nothing changed`)
        }
        session.run = run
        yield* endSession(session, Dialect.EndStream.Error({
          code: "unimplemented",
          message: `This server does not support conversation action ${action.field} yet.`,
          detail: undefined
        }))
        return
    }
  })

/**
 * READING BACK THE REQUEST CONTEXT. In Cursor's ref_only context transport the run request
 * names its rules and MCP tool definitions by blob id instead of carrying them (from the
 * second turn of a conversation on), and an attached image may come as a blob id alone. They
 * are read back first (`RunRequest.contextToFetch`): one get_blob per blob, answered by the
 * client's KV results in later messages (handed on meanwhile: this waits in the background).
 * A past chat the user attached is read from the store (`RunRequest.pastChatsToRead`).
 * Then the turn starts with them merged in (`Dialect.withContextParts`); a part that does not
 * come within `contextFetchTimeoutMs`, or does not match its id, is left out with a warning.
 * The run request's acknowledgement waits for the start's commit; follow-ups and cancels that
 * arrive meanwhile wait for the start (`afterStart`).
 */
const startAfterContext = (env: InputEnv, session: Session, seqno: number, run: RunRequest, durable: Array<Settlement>) =>
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
    const started = new Settlement()
    session.startGate = started
    durable.push(started)
    // The start's commit: the gate opens once it is settled (at once when no start was submitted).
    const committed: Array<Settlement> = []
    const timeout = Duration.millis(env.options.contextFetchTimeoutMs)
    yield* FiberSet.run(env.background, Effect.gen(function*() {
      const fetched = new Map<string, Uint8Array>()
      yield* Effect.forEach(reads, ([id, read]) =>
        Deferred.await(read).pipe(
          Effect.timeoutTo({ duration: timeout, onSuccess: (data) => data, onTimeout: () => undefined }),
          Effect.map((data) => {
            if (data !== undefined) fetched.set(id, data)
          })
        ), { concurrency: "unbounded", discard: true })
      const merged = Dialect.withContextParts(run, fetched, yield* pastChatsOf(env, run))
      for (const problem of merged.problems) yield* Effect.logWarning(`transport: ${session.requestId}: ${problem}; the turn starts without it`)
      const input = Dialect.turnInputOf(merged.run, session.requestId, env.worker.capabilities(), session.parent, env.options.childModel)
      if (isEnded(session) || input === undefined) return
      yield* attachChild(env.sessions, session, conversationOf(session, merged.run))
      session.run = merged.run
      yield* submitDurably(env, committed, conversationOf(session, merged.run), input, inputIdOf(session, seqno))
    }).pipe(Effect.ensuring(Effect.sync(() => {
      started.onSettled(() => {
        if (session.startGate === started) session.startGate = undefined
      })
      settleAfter(started, committed)
    }))))
  })

/** How much of a past chat the model gets (the end of it, when longer). */
const PAST_CHAT_CHARS = 20_000

/** The digests of the past chats a run request attaches that this server holds, by agent id. */
const pastChatsOf = (env: InputEnv, run: RunRequest) =>
  Effect.map(
    Effect.forEach(run.pastChatsToRead, (agentId) => Effect.map(env.runner.historyOf(agentId), (messages) => [agentId, messages] as const)),
    (histories) => new Map(histories.filter(([, messages]) => messages.length > 0).map(([agentId, messages]) => [agentId, Dialect.pastChatDigest(messages, PAST_CHAT_CHARS)]))
  )

/**
 * Runs `submit` (a follow-up's or a cancel's) now, or, while the run request's context is
 * read back (`startGate`), once the turn has started and every earlier such message went in.
 */
const afterStart = (
  env: InputEnv,
  session: Session,
  durable: Array<Settlement>,
  submit: (durable: Array<Settlement>) => Effect.Effect<void>
): Effect.Effect<void> =>
  Effect.gen(function*() {
    const gate = session.startGate
    if (gate === undefined) return yield* submit(durable)
    const done = new Settlement()
    session.startGate = done
    durable.push(done)
    const waits: Array<Settlement> = []
    yield* FiberSet.run(env.background, awaitSettlement(gate).pipe(
      Effect.zipRight(Effect.suspend(() => submit(waits))),
      Effect.ensuring(Effect.sync(() => {
        done.onSettled(() => {
          if (session.startGate === done) session.startGate = undefined
        })
        settleAfter(done, waits)
      }))
    ))
  })

/**
 * The common append, taken in one step: a message that carries no input (a blob's
 * acknowledgement, a heartbeat, an exec stream's liveness) for a live request, next in order,
 * while no other message of the request is being taken. It is handed on and settled at once,
 * under the request's lock when it is free (`withPermitsIfAvailable`), so its acknowledgement
 * waits for nothing: `accept`'s general path costs about a hundred Effect operations more
 * (counted with a scratch patch of the run loop) and may wait for the lock, and a turn's end
 * brings one such append per blob. False when the message is not such a one; nothing was
 * changed then, and `accept` takes it.
 */
export const acceptAtOnce = (env: InputEnv, requestId: string, seqno: number, message: ClientMessage): Effect.Effect<boolean> => {
  if (!settlesAtOnce(message)) return Effect.succeed(false)
  const session = env.sessions.get(requestId)
  if (session === undefined) return Effect.succeed(false)
  return Effect.clockWith((clock) =>
    session.lock.withPermitsIfAvailable(1)(Effect.sync(() => takeAtOnce(session, seqno, message, env.options.appendWindow, clock.unsafeCurrentTimeMillis())))
  ).pipe(Effect.map(Option.getOrElse(() => false)))
}

const settlesAtOnce = (message: ClientMessage): boolean =>
  message._tag === "KvResult" || message._tag === "Heartbeat" || message._tag === "ExecHeartbeat" || message._tag === "ExecStreamClose"

/** `acceptAtOnce`'s step, under the request's lock: what `accept` would do for such a message, or false with nothing changed. */
const takeAtOnce = (session: Session, seqno: number, message: ClientMessage, window: number, nowMs: number): boolean => {
  if (isEnded(session) || isReplay(session) || session.recovery.adoptFirstAppend) return false
  // Only the next seqno with nothing held: a gap, a duplicate, a late or far append are `accept`'s.
  if (seqno !== session.inbox.next || session.inbox.held.size > 0) return false
  // A request that resumes another's turn answers that turn's KV requests (as `handle` does).
  const settle = message._tag === "KvResult" ? kvAtOnce(session.resumeOf ?? session, message) : undefined
  if (message._tag === "KvResult" && settle === undefined) return false
  const offered = offer(session.inbox, seqno, { seqno, message, arrivedAtMs: nowMs }, window)
  if (offered.verdict !== "delivered" || offered.ready.length !== 1) return false
  session.lastActivityMs = nowMs
  session.inputEnded = false
  session.inbox = offered.inbox
  settle?.()
  Metrics.countAppend("at_once")
  const waiting = session.unsettled.get(seqno)
  if (waiting !== undefined) {
    session.unsettled.delete(seqno)
    waiting.settle()
  }
  return true
}

/** The session an incoming message is for, and the acknowledgement to wait for (none: acknowledge at once). */
export interface Accepted {
  readonly session: Session
  readonly settled: Settlement | undefined
}

/**
 * Takes client message `seqno` of `requestId` (decoded already) into its session: the inbox
 * orders it, what is ready is handed on, restart recovery is consulted where it applies (see
 * `Recovery.ts`). Fails with a Connect error, changing nothing, when the seqno is refused.
 */
export const accept = (env: InputEnv, requestId: string, seqno: number, message: ClientMessage): Effect.Effect<Accepted, ConnectError> =>
  Effect.gen(function*() {
    const { options } = env
    Metrics.countAppend("general")
    // A first append far ahead of seqno 0 creates no session, unless the store knows the request (a restart).
    const farAheadOfNew = env.sessions.get(requestId) === undefined && seqno >= options.appendWindow
    if (farAheadOfNew && !(yield* Recovery.startedTurnBefore(env, requestId))) return yield* Effect.fail(Recovery.unknownRequestFarAhead(env, requestId, seqno))
    let session = yield* env.sessions.sessionFor(requestId)
    if (farAheadOfNew) session.recovery.knownToStore = true
    session.inputEnded = false
    const settled = yield* session.lock.withPermits(1)(Effect.gen(function*() {
      let newTurn = false
      if ((isEnded(session) || isReplay(session)) && seqno === 0 && message._tag === "RunRequest") {
        // The run request of the turn that ended here, sent again: acknowledged, not applied again.
        if ((yield* Recovery.committedRunRequest(env, session, seqno, message)) !== undefined) return undefined
        // A request id reused for a new turn (the IDE does this): start its session afresh.
        yield* dropHeld(session)
        session = yield* env.sessions.replace(requestId)
        newTurn = true
      }
      if (isReplay(session)) {
        // Appends of a turn whose end is replayed change nothing; the replayed blobs' acknowledgements are awaited.
        if (message._tag === "KvResult") yield* handle(env, session, seqno, message, [])
        return undefined
      }
      if (!newTurn && isUnresolved(session) && message._tag === "RunRequest" && (yield* Recovery.onResentRunRequest(env, session, seqno, message))) {
        return undefined
      }
      if (session.recovery.adoptFirstAppend) {
        // A recovered turn: the client's numbering continues from the previous process.
        if (session.inbox.next === 0 && session.inbox.held.size === 0 && session.inbox.recovered === undefined) {
          session.inbox = adopt(session.inbox, seqno, options.appendWindow).inbox
        }
        session.recovery.adoptFirstAppend = false
      }
      const item: Taken = { seqno, message, arrivedAtMs: yield* Clock.currentTimeMillis }
      let offered = offer(session.inbox, seqno, item, options.appendWindow)
      if (offered.verdict === "outOfRange" && isUnresolved(session) && session.inbox.next === 0) {
        // Nothing handed on, no turn of the request in this process: a client re-sending after a restart?
        if (!session.recovery.knownToStore) session.recovery.knownToStore = yield* Recovery.startedTurnBefore(env, requestId)
        if (!session.recovery.knownToStore) return yield* Effect.fail(Recovery.unknownRequestFarAhead(env, requestId, seqno))
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
          session.unsettled.set(seqno, new Settlement())
          break
        case "late":
          // A run request below where a recovered turn's inbox started is that turn's, re-sent (its
          // input is committed: the turn is running) or a stale one: never applied out of order.
          if (message._tag === "RunRequest") yield* Effect.logDebug(`transport: late run request ${seqno} of ${requestId} not applied`)
          else yield* handOn(env, session, offered.ready)
          break
        case "delivered":
          yield* handOn(env, session, offered.ready)
          break
        case "duplicate":
          break
      }
      yield* Recovery.watchGaps(env, session)
      return session.unsettled.get(seqno)
    }))
    return { session, settled }
  })
