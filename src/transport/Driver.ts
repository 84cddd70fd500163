/**
 * The driver of the session machine (`Session.ts` at the root). It owns the sessions' channels
 * and waits, steps `sessionTransition` on what comes in (the client's messages, the runner's
 * commits, the context reads, the gap watch) and carries the commands out, in order. A client
 * message is taken in one path: the store is asked first when the machine's `questionsOf` says
 * so, then the transition runs under the request's lock, at once when the lock is free.
 */
import { Deferred, Effect, Exit, Option, Queue } from "effect"
import type { ClientMessage } from "../Dialect.js"
import * as Metrics from "../Metrics.js"
import type { StartedTurn } from "../Runner.js"
import { parseInputId, questionsOf, refusesUnknown, SessionInput, sessionTransition, unknownFarAhead } from "../Session.js"
import type { SessionCommand, StoreFacts, Submission } from "../Session.js"
import { ConnectError } from "./Connect.js"
import type { InputEnv } from "./InputEnv.js"
import type { Session } from "./Session.js"
import { locked, logLine, requestIdOf, write } from "./Session.js"
import { Settlement } from "./Settlement.js"

/** Steps the machine: the session's state is replaced; the commands are returned. */
export const apply = (session: Session, input: SessionInput): ReadonlyArray<SessionCommand> => {
  const step = sessionTransition(session.state, input)
  session.state = step.state
  return step.commands
}

/** Steps the machine and carries the commands out (the caller holds the request's lock, or needs none: see `committed`). */
export const step = (env: InputEnv, session: Session, input: SessionInput): Effect.Effect<void> =>
  Effect.suspend(() => perform(env, session, apply(session, input)))

/** The acknowledgement an append waits for: one per seqno, shared by its copies. */
export const waiterOf = (session: Session, seqno: number): Settlement => {
  let waiter = session.waiters.get(seqno)
  if (waiter === undefined) {
    waiter = new Settlement()
    session.waiters.set(seqno, waiter)
  }
  return waiter
}

const ack = (session: Session, seqno: number): void => {
  const waiter = session.waiters.get(seqno)
  if (waiter === undefined) return
  session.waiters.delete(seqno)
  waiter.settle()
}

/** Carries the commands out in order; acknowledgements at the front without an Effect. */
export const perform = (env: InputEnv, session: Session, commands: ReadonlyArray<SessionCommand>): Effect.Effect<void> => {
  let at = 0
  for (; at < commands.length; at++) {
    const command = commands[at]!
    if (command._tag !== "Ack") break
    ack(session, command.seqno)
  }
  if (at === commands.length) return Effect.void
  return Effect.forEach(commands.slice(at), (command) => carryOut(env, session, command), { discard: true })
}

const carryOut = (env: InputEnv, session: Session, command: SessionCommand): Effect.Effect<void> => {
  switch (command._tag) {
    case "Ack":
      return Effect.sync(() => ack(session, command.seqno))
    case "Submit":
      return submit(env, command.owner, command.submission)
    case "Release":
      return Effect.sync(() => committed(env, command.owner, command.inputId))
    case "Forward": {
      const target = session.resumeOf
      if (target === undefined) return Effect.void
      return step(env, target, SessionInput.Forwarded({ seqno: command.seqno, message: command.message, inputId: command.inputId, owner: session.requestId, atMs: command.atMs }))
    }
    case "Gave":
      return delivered(env, command.owner, command.seqno, command.submissions)
    case "Write":
      return write(session, command.messages)
    case "FlushGate":
      return Effect.sync(() => env.fork(locked(session, step(env, session, SessionInput.FlushGate()))))
    case "StartTurn":
    case "Deliver":
    case "Resume":
    case "End":
    case "WatchGaps":
    case "StartWork":
    case "StopSubagent":
      return env.carryOut(session, command)
    case "AdoptHeld":
      return Effect.asVoid(Queue.offer(env.sessions.adoptions, session))
    case "Log":
      return logLine(command)
    case "Refuse":
    case "Replace":
    case "ReplayEnd":
    case "GapWait":
    case "NextTurn":
    case "SendTurnEnd":
    case "DoneAtOnce":
    case "AwaitBlobs":
      // Their callers' own (`accept`, the gap watch, the runner's gateway, the turn's end).
      return Effect.void
  }
}

/** What a message of `owner`'s append `seqno` gave (handed to another session's turn, or by the driver): its append owes on them. */
export const delivered = (env: InputEnv, owner: string, seqno: number, submissions: ReadonlyArray<Submission>): Effect.Effect<void> =>
  Effect.suspend(() => {
    const session = env.sessions.get(owner)
    return session === undefined ? Effect.void : step(env, session, SessionInput.Delivered({ seqno, submissions }))
  })

/** Submits an input; its commit comes back to the session of `owner` (`committed`). */
const submit = (env: InputEnv, owner: string, submission: Submission): Effect.Effect<void> =>
  env.runner.submitNotifying(submission.conversationId, submission.input, submission.inputId, () => committed(env, owner, submission.inputId))

/**
 * The runner applied `inputId`, owed by a message of `owner`: stepped at once, in the runner's
 * fiber, outside the request's lock (a plain state change: it only acknowledges, or asks for
 * `FlushGate` under the lock).
 */
export const committed = (env: InputEnv, owner: string, inputId: string): void => {
  const session = env.sessions.get(owner)
  if (session === undefined) return
  const commands = apply(session, SessionInput.Committed({ inputId }))
  if (commands.length === 0) return
  const rest = commands.filter((command) => {
    if (command._tag !== "Ack") return true
    ack(session, command.seqno)
    return false
  })
  if (rest.length > 0) env.fork(perform(env, session, rest))
}

// -----------------------------------------------------------------------------
// The client's messages
// -----------------------------------------------------------------------------

/** The session an incoming message is for, and the acknowledgement to wait for (none: acknowledge at once). */
export interface Accepted {
  readonly session: Session
  readonly settled: Settlement | undefined
}

/**
 * Takes client message `seqno` of `requestId` (decoded already) in the caller's own call, when
 * it can be taken whole there: its session exists, nobody holds or waits for the request's lock,
 * the store need not be asked, and the machine's step (the one `accept` takes under the lock)
 * acknowledges it at once with nothing to carry out but acknowledgements, KV answers and log
 * lines (a blob's acknowledgement, a heartbeat, an exec stream's liveness). False: nothing was
 * changed (the step is a pure value until it is kept); `accept` takes it.
 */
export const acceptNow = (env: InputEnv, requestId: string, seqno: number, message: ClientMessage): boolean => {
  const session = env.sessions.get(requestId)
  if (session === undefined || session.pending > 0) return false
  const window = env.options.appendWindow
  const questions = questionsOf(session.state, requestId, seqno, message, window)
  if (questions.startedTurnBefore || questions.runRequestInputId !== undefined) return false
  const nowMs = Date.now()
  const step = sessionTransition(session.state, SessionInput.Append({ seqno, message, atMs: nowMs, window, facts: {}, newTurn: false }))
  if (step.state.owed.has(seqno) || !step.commands.every(inline)) return false
  session.state = step.state
  session.lastActivityMs = nowMs
  session.inputEnded = false
  for (const command of step.commands) {
    if (command._tag === "Ack") ack(session, command.seqno)
    else if (command._tag === "Deliver" && command.message._tag === "KvResult") {
      const logged = kvAnswered(session, command.message)
      if (logged !== undefined) env.fork(logged)
    } else if (command._tag === "Log") env.fork(logLine(command))
  }
  Metrics.countAppend("at_once")
  return true
}

/** What `acceptNow` carries out in the caller's call. */
const inline = (command: SessionCommand): boolean =>
  command._tag === "Ack" || command._tag === "Log" || (command._tag === "Deliver" && command.message._tag === "KvResult")


/**
 * A KV answer settles what waits on it on the driver's side: a blob read back (a failed one is
 * logged: the effect returned), or a blob's acknowledgement (the last of a turn's writes its
 * checkpoint). Undefined when there is nothing to log.
 */
export const kvAnswered = (session: Session, message: Extract<ClientMessage, { _tag: "KvResult" }>): Effect.Effect<void> | undefined => {
  const failed = message.error !== undefined && message.error !== ""
  const read = session.blobReads.get(message.id)
  if (read !== undefined) {
    session.blobReads.delete(message.id)
    Deferred.unsafeDone(read, Exit.succeed(failed ? undefined : message.data ?? new Uint8Array()))
    return failed ? Effect.logWarning(`transport: the client could not read back blob ${message.id}: ${message.error}`) : undefined
  }
  const settle = session.blobAcks.get(message.id)
  if (settle === undefined) return Effect.logDebug(`transport: KV answer ${message.id} matches no request; dropped`)
  session.blobAcks.delete(message.id)
  settle(!failed)
  return undefined
}

/**
 * Takes client message `seqno` of `requestId` (decoded already) into its session, under the
 * request's lock, the store asked first when the machine's rules need it. Fails with a Connect
 * error, changing nothing, when the machine refuses it.
 */
export const accept = (env: InputEnv, requestId: string, seqno: number, message: ClientMessage): Effect.Effect<Accepted, ConnectError> =>
  Effect.suspend(() => {
    const existing = env.sessions.get(requestId)
    const window = env.options.appendWindow
    const questions = questionsOf(existing?.state, requestId, seqno, message, window)
    if (existing !== undefined && !questions.startedTurnBefore && questions.runRequestInputId === undefined) {
      return locked(existing, take(env, existing, seqno, message, {}, undefined, false))
    }
    return Effect.gen(function*() {
      const facts: { startedTurnBefore?: boolean } = {}
      if (questions.startedTurnBefore) facts.startedTurnBefore = yield* startedTurnBefore(env, requestId)
      if (refusesUnknown(existing?.state, seqno, window, facts)) return yield* Effect.fail(refusal(unknownFarAhead(requestId, seqno, window)))
      const session = yield* env.sessions.sessionFor(requestId)
      return yield* locked(session, Effect.gen(function*() {
        const resent = questions.runRequestInputId === undefined ? undefined : yield* resentTurnOf(env, session, message, questions.runRequestInputId)
        return yield* take(env, session, seqno, message, { ...facts, ...resent?.facts }, resent?.ended, false)
      }))
    })
  })

/** What the store says of a run request that may be a re-send: committed, and the turn it started. */
const resentTurnOf = (env: InputEnv, session: Session, message: ClientMessage, inputId: string) =>
  Effect.gen(function*() {
    if (message._tag !== "RunRequest") return undefined
    const conversationId = message.conversationId !== undefined && message.conversationId !== "" ? message.conversationId : session.requestId
    if (!(yield* env.runner.isCommitted(conversationId, inputId))) return { facts: { runRequestCommitted: false } satisfies StoreFacts, ended: undefined }
    const found = yield* env.runner.findStartedTurn(`${session.requestId}/`, (id) => id === inputId)
    const turn = Option.getOrUndefined(found)
    const resentTurn = turn?._tag === "Running" ? "Running" as const : endedTurnOf(session.requestId, found) !== undefined ? "Ended" as const : "Gone" as const
    return { facts: { runRequestCommitted: true, resentTurn } satisfies StoreFacts, ended: endedTurnOf(session.requestId, found) }
  })

/** The turn the store says a request started most recently, when it is that request's and is over. */
export const endedTurnOf = (requestId: string, found: Option.Option<StartedTurn>) =>
  Option.isSome(found) && found.value._tag === "Ended" && requestIdOf(found.value.turn) === requestId ? found.value : undefined

/** Whether the store holds a turn this request started (in an earlier process). */
export const startedTurnBefore = (env: InputEnv, requestId: string) =>
  env.runner.findStartedTurn(`${requestId}/`, (inputId) => parseInputId(requestId, inputId) !== undefined).pipe(Effect.map(Option.isSome))

const refusal = (command: Extract<SessionCommand, { readonly _tag: "Refuse" }>) => new ConnectError(command.code, command.message)

/** The append goes into the machine (under the request's lock); a new turn on a reused request id takes a fresh session. */
const take = (
  env: InputEnv,
  session: Session,
  seqno: number,
  message: ClientMessage,
  facts: StoreFacts,
  ended: Extract<StartedTurn, { readonly _tag: "Ended" }> | undefined,
  newTurn: boolean
): Effect.Effect<Accepted, ConnectError> =>
  Effect.clockWith((clock) => {
    const nowMs = clock.unsafeCurrentTimeMillis()
    session.lastActivityMs = nowMs
    session.inputEnded = false
    const commands = apply(session, SessionInput.Append({ seqno, message, atMs: nowMs, window: env.options.appendWindow, facts, newTurn }))
    const last = commands[commands.length - 1]
    if (last?._tag === "Refuse") return Effect.fail(refusal(last))
    if (last?._tag === "Replace") {
      return Effect.zipRight(
        perform(env, session, commands),
        Effect.flatMap(env.sessions.replace(session.requestId), (fresh) => take(env, fresh, seqno, message, facts, undefined, true))
      )
    }
    const replay = ended !== undefined && commands.some((command) => command._tag === "ReplayEnd") ? env.replayEnd(session, ended) : Effect.void
    // The wait is taken before the commands run: an acknowledgement they give settles it.
    const settled = session.state.owed.has(seqno) ? waiterOf(session, seqno) : undefined
    Metrics.countAppend("general")
    return Effect.as(Effect.zipRight(perform(env, session, commands), replay), { session, settled })
  })
