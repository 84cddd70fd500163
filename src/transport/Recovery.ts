/**
 * Restart recovery on the client side: what a session does when this process has no turn for
 * a request an earlier process served.
 *
 * REPLAYING THE END OF A TURN. A process can die after committing the end of a turn and before
 * sending it (set_blob, turn_ended, checkpoint, end-stream): the history is complete, but the
 * client, which reopens RunSSE with the same request id and re-sends the appends it has no
 * acknowledgement for, reaches a process with no turn for that request (an `Open` session).
 * The store records the input that started each turn, so the request's turns are found by their
 * input ids (`<request id>/<turn key>:<seqno>`). The end is replayed, from the committed state,
 * only when that turn is the conversation's current turn, is over, and there is evidence the
 * client still waits for THAT turn:
 *
 * 1. a run request arrives whose input (`<request id>/<user message id>:<seqno>`) is already
 *    committed and started that turn: it is a re-send (`onResentRunRequest`). Or
 * 2. RunSSE has waited `orphanTimeoutMs` and no run request arrived (`resolveOrphan`); the turn
 *    is the request's newest.
 *
 * Otherwise nothing is replayed. Cursor reuses request ids: the RunSSE of a new turn on a
 * reused id may arrive before its run request, and must get the new turn; its run request is
 * not committed, so it starts the turn as always. Follow-ups and cancels are not evidence (they
 * name no turn): like any append ahead of the inbox they are held, and a replay drops them
 * unapplied, acknowledging them then. A turn still in progress (recovered, its model call
 * re-issued) is waited for: the runner speaks and the session adopts it. A request the store
 * knows no turn of, or whose turn a later one replaced, ends `unavailable` after
 * `orphanTimeoutMs`.
 *
 * What is replayed is what the gateway's `finish` sends, from the committed settings and
 * history (typed tool results the old process held in memory are lost: those steps are
 * partial tool calls); or, for a failed or canceled turn, the error end it had. The replaying
 * session acknowledges every later append and applies none but the KV answers to its own
 * set_blobs; a run request that is not committed (a new turn on the id) replaces it.
 */
import { Clock, Duration, Effect, FiberSet, Option } from "effect"
import * as Dialect from "../Dialect.js"
import type { RunRequest } from "../Dialect.js"
import type { StartedTurn } from "../Runner.js"
import { dropHeld } from "./Acks.js"
import { adopt, emptyInbox, skipGap } from "./AppendInbox.js"
import type { InputEnv } from "./InputEnv.js"
import { ConnectError } from "./Connect.js"
import { conversationOf, inputIdOf, isReplay, isUnresolved, Lifecycle, parseInputId, requestIdOf } from "./Session.js"
import type { Session, Taken } from "./Session.js"
import { endSession, sendTurnEnd } from "./TurnEnd.js"

/** The input id a run request gets, when it has one that a later process computes alike: from its user message id. */
const runRequestInputId = (session: Session, seqno: number, run: RunRequest): string | undefined =>
  run.action._tag === "StartTurn" && run.action.userMessageId !== "" ? `${session.requestId}/${run.action.userMessageId}:${seqno}` : undefined

/** The run request's input id when it was applied before (by this process or an earlier one): then it is a re-send. */
export const committedRunRequest = (env: InputEnv, session: Session, seqno: number, run: RunRequest) =>
  Effect.gen(function*() {
    const inputId = runRequestInputId(session, seqno, run)
    if (inputId === undefined) return undefined
    return (yield* env.runner.isCommitted(conversationOf(session, run), inputId)) ? inputId : undefined
  })

/** The turn the store says a request started most recently, when it is that request's and is over. */
const endedTurnOf = (requestId: string, found: Option.Option<StartedTurn>) =>
  Option.isSome(found) && found.value._tag === "Ended" && requestIdOf(found.value.turn) === requestId ? found.value : undefined

/** Sends the end of a turn an earlier process ended (the rules above). */
export const replayEnd = (env: InputEnv, session: Session, ended: Extract<StartedTurn, { readonly _tag: "Ended" }>) =>
  Effect.gen(function*() {
    session.lifecycle = Lifecycle.Replaying()
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
    yield* sendTurnEnd(env, session, ended.turn, ended.outcome, ended.state, ended.usage)
  })

/** Rule 2: a RunSSE that waited `orphanTimeoutMs` on an unresolved request. */
export const resolveOrphan = (env: InputEnv, session: Session) =>
  session.lock.withPermits(1)(Effect.gen(function*() {
    if (!isUnresolved(session) || session.channel.isClosed()) return
    const requestId = session.requestId
    const found = yield* env.runner.findStartedTurn(`${requestId}/`, (inputId) => parseInputId(requestId, inputId) !== undefined)
    const ended = endedTurnOf(requestId, found)
    if (ended !== undefined) return yield* replayEnd(env, session, ended)
    // In progress (a turn being resumed): the runner will speak for it. Asked again after another timeout.
    if (Option.isSome(found) && found.value._tag === "Running" && requestIdOf(found.value.turn) === requestId) return
    yield* endSession(session, Dialect.EndStream.Error({
      code: "unavailable",
      message: "The server has no turn for this request (it may have restarted after the turn ended). The conversation is saved; send your message again.",
      detail: undefined
    }))
  }))

/**
 * Rule 1, for an append to an unresolved request: true when it re-sends a committed run request
 * and was dealt with here (the end replayed, or nothing left to do), false when it goes on as
 * usual (not a re-send, or its turn is still in progress: the runner skips the committed
 * input). A turn in progress was started by an earlier process: the inbox adopts that process's
 * numbering from this seqno, so gaps after it are passed over as `passGap` says.
 */
export const onResentRunRequest = (env: InputEnv, session: Session, seqno: number, run: RunRequest) =>
  Effect.gen(function*() {
    const inputId = yield* committedRunRequest(env, session, seqno, run)
    if (inputId === undefined) return false
    const found = yield* env.runner.findStartedTurn(`${session.requestId}/`, (id) => id === inputId)
    if (Option.isSome(found) && found.value._tag === "Running") {
      if (session.inbox.next === 0 && session.inbox.recovered === undefined) {
        const adopted = adopt(session.inbox, seqno, env.options.appendWindow)
        session.inbox = adopted.inbox
        yield* env.handOn(session, adopted.ready)
      }
      return false
    }
    const ended = endedTurnOf(session.requestId, found)
    if (ended !== undefined) yield* replayEnd(env, session, ended)
    else yield* Effect.logDebug(`transport: append ${seqno} of ${session.requestId} re-sends a run request whose turn is no longer current; not applied`)
    return true
  })

/**
 * APPENDS NUMBERED PAST THE WINDOW AFTER A RESTART. An append for a request this process has no
 * turn for is refused when its seqno is `appendWindow` or more past 0, so that forged seqnos
 * cannot make the server hold memory. But a long turn's client numbers on from the previous
 * process, and may re-send before the recovered turn speaks. Such an append is held when the
 * store says the request started a turn; an unknown request is refused (`out_of_range`).
 */
export const startedTurnBefore = (env: InputEnv, requestId: string) =>
  env.runner.findStartedTurn(`${requestId}/`, (inputId) => parseInputId(requestId, inputId) !== undefined).pipe(Effect.map(Option.isSome))

export const unknownRequestFarAhead = (env: InputEnv, requestId: string, seqno: number) =>
  new ConnectError(
    "out_of_range",
    `append_seqno ${seqno} is more than ${env.options.appendWindow} ahead of the next expected 0 for request ${requestId}, which started no turn known to this server`
  )

/**
 * A recovered turn whose client re-sent appends before the runner spoke: they were held waiting
 * for seqno 0, which this process will never see. The inbox now starts at the lowest of them
 * (`adopt`); the ones in order are handed on, and gaps after them are passed over (`passGap`).
 */
export const adoptHeld = (env: InputEnv, session: Session) =>
  session.lock.withPermits(1)(Effect.gen(function*() {
    const inbox = session.inbox
    if (session.run !== undefined || inbox.next !== 0 || inbox.recovered !== undefined || inbox.held.size === 0) return
    const adopted = adopt(inbox, Math.min(...inbox.held.keys()), env.options.appendWindow)
    session.inbox = adopted.inbox
    yield* env.handOn(session, adopted.ready)
    yield* watchGaps(env, session)
  }))

/** Starts passing over the gaps of a recovered inbox that holds appends, unless that runs already. */
export const watchGaps = (env: InputEnv, session: Session) =>
  Effect.suspend(() => {
    if (session.recovery.passingGaps || session.inbox.recovered === undefined || session.inbox.held.size === 0) return Effect.void
    session.recovery.passingGaps = true
    return Effect.asVoid(FiberSet.run(env.background, passGaps(env, session)))
  })

const passGaps = (env: InputEnv, session: Session): Effect.Effect<void> =>
  session.lock.withPermits(1)(passGap(env, session)).pipe(
    Effect.flatMap((waitMs) =>
      waitMs === undefined
        ? Effect.void
        : waitMs === 0
        ? passGaps(env, session)
        : Effect.zipRight(Effect.sleep(Duration.millis(waitMs)), passGaps(env, session))
    )
  )

/**
 * PASSING OVER GAPS AFTER A RESTART. A recovered turn's inbox continues a numbering an earlier
 * process began. The client re-sends only what that process did not acknowledge, and it
 * acknowledged an append once handed on (and its input committed), so some seqnos among the
 * re-sent ones never come back. While appends are held behind a missing seqno `g`:
 *
 * 1. `g`'s input id is committed: `g` was applied and will not come back. Passed over at once.
 * 2. Otherwise: passed over once the lowest held append has waited `gapGraceMs`, so a re-send
 *    that arrives within the grace still lands in order.
 *
 * A seqno passed over, or below where the inbox started, that arrives later is handed on when
 * it arrives, out of order, once (the runner skips its input if committed); a run request is
 * not. An inbox that is not recovered never passes over a gap. Returns how long to wait before
 * looking again (0: at once), or undefined when nothing is held behind a gap.
 */
const passGap = (env: InputEnv, session: Session) =>
  Effect.gen(function*() {
    const inbox = session.inbox
    if (inbox.recovered === undefined || inbox.held.size === 0 || isReplay(session)) {
      session.recovery.passingGaps = false
      return undefined
    }
    const gap = inbox.next
    let blocked: Taken | undefined
    for (const [seqno, item] of inbox.held) if (blocked === undefined || seqno < blocked.seqno) blocked = item
    const committed = session.conversationId !== undefined && (yield* env.runner.isCommitted(session.conversationId, inputIdOf(session, gap)))
    const waited = (yield* Clock.currentTimeMillis) - blocked!.arrivedAtMs
    if (!committed && waited < env.options.gapGraceMs) return env.options.gapGraceMs - waited
    yield* Effect.logInfo(
      `transport: append ${gap} of ${session.requestId} passed over (${committed ? "its input is committed" : `not received within ${env.options.gapGraceMs} ms`}), a turn recovered after a restart`
    )
    const passed = skipGap(inbox)
    session.inbox = passed.inbox
    yield* env.handOn(session, passed.ready)
    return 0
  })

/**
 * Housekeeping, every `sweepIntervalMs`: a reader waiting on a request this process knows
 * nothing of gets rule 2; finished and idle sessions are forgotten once no one reads them.
 */
export const sweep = (env: InputEnv) =>
  Effect.gen(function*() {
    const at = yield* Clock.currentTimeMillis
    const { options } = env
    for (const [requestId, session] of env.sessions.entries()) {
      const recovery = session.recovery
      if (
        isUnresolved(session) && session.prewarm === undefined && !session.channel.isClosed() && session.channel.isAttached() &&
        at - session.createdAtMs > options.orphanTimeoutMs &&
        (recovery.storeCheckedAtMs === undefined || at - recovery.storeCheckedAtMs > options.orphanTimeoutMs)
      ) {
        recovery.storeCheckedAtMs = at
        yield* resolveOrphan(env, session)
      }
      const finishedLongAgo = session.lifecycle._tag === "Ended" && at - session.lifecycle.atMs > options.finishedRetentionMs
      const idleLongAgo = session.conversationId === undefined && at - session.lastActivityMs > options.idleRetentionMs
      const prewarmedLongAgo = session.prewarm !== undefined && session.run === undefined && at - session.lastActivityMs > options.idleRetentionMs
      if ((finishedLongAgo || idleLongAgo || prewarmedLongAgo) && !session.channel.isAttached()) env.sessions.remove(requestId)
    }
  })
