/**
 * Restart recovery on the driver's side: replaying the end of a turn an earlier process ended,
 * a reader's orphan timeout, the gap watch of a recovered inbox, and the sweep. The rules (when
 * an end is replayed, when a gap is passed over) are the session machine's; their reasons are
 * in docs/architecture.md, "Restarts".
 */
import { Clock, Duration, Effect, FiberSet } from "effect"
import * as Dialect from "../Dialect.js"
import type { StartedTurn } from "../Runner.js"
import { SessionInput } from "../Session.js"
import type { SessionCommand } from "../Session.js"
import { apply, endedTurnOf, perform, step } from "./Driver.js"
import type { InputEnv } from "./InputEnv.js"
import { inputIdOf, isUnresolved, locked, parseInputId, requestIdOf } from "./Session.js"
import type { Session } from "./Session.js"
import { endSession, sendTurnEnd } from "./TurnEnd.js"

/** Sends the end of a turn an earlier process ended (the rules above). */
export const replayEnd = (env: InputEnv, session: Session, ended: Extract<StartedTurn, { readonly _tag: "Ended" }>) =>
  Effect.gen(function*() {
    const started = parseInputId(session.requestId, ended.startInputId)
    yield* step(env, session, SessionInput.Replays({ conversationId: ended.turn.conversationId, turnKey: started?.turnKey, carried: Dialect.carriedCheckpointOf(ended.turn.settings) }))
    yield* Effect.logInfo(
      `transport: replaying the end (${ended.outcome._tag}) of turn ${ended.turn.turnId} of ${session.requestId}, committed before a restart`
    )
    yield* sendTurnEnd(env, session, ended.turn, ended.outcome, ended.state, ended.usage)
  })

/** Rule 2: a RunSSE that waited `orphanTimeoutMs` on an unresolved request. */
export const resolveOrphan = (env: InputEnv, session: Session) =>
  locked(session, Effect.gen(function*() {
    if (!isUnresolved(session) || session.channel.isClosed()) return
    const requestId = session.requestId
    const found = yield* env.runner.findStartedTurn(`${requestId}/`, (inputId) => parseInputId(requestId, inputId) !== undefined)
    const ended = endedTurnOf(requestId, found)
    if (ended !== undefined) return yield* replayEnd(env, session, ended)
    // In progress (a turn being resumed): the runner will speak for it. Asked again after another timeout.
    if (found._tag === "Some" && found.value._tag === "Running" && requestIdOf(found.value.turn) === requestId) return
    yield* endSession(session, Dialect.EndStream.Error({
      code: "unavailable",
      message: "The server has no turn for this request (it may have restarted after the turn ended). The conversation is saved; send your message again.",
      detail: undefined
    }))
  }))

/** A recovered turn whose client re-sent appends before the runner spoke: the machine adopts them (`session/Gaps.ts`). */
export const adoptHeld = (env: InputEnv, session: Session) =>
  locked(session, step(env, session, SessionInput.AdoptHeld({ window: env.options.appendWindow })))

/** Passes over the gaps of a recovered inbox (the machine's rules, `session/Gaps.ts`), in the background. */
export const watchGaps = (env: InputEnv, session: Session): Effect.Effect<void> =>
  Effect.asVoid(FiberSet.run(env.background, passGaps(env, session)))

const passGaps = (env: InputEnv, session: Session): Effect.Effect<void> =>
  locked(session, passGap(env, session)).pipe(
    Effect.flatMap((waitMs) =>
      waitMs === undefined
        ? Effect.void
        : waitMs === 0
        ? passGaps(env, session)
        : Effect.zipRight(Effect.sleep(Duration.millis(waitMs)), passGaps(env, session))
    )
  )

/** One look at the gap: how long to wait before the next (0: at once), or undefined when nothing is held behind one. */
const passGap = (env: InputEnv, session: Session) =>
  Effect.gen(function*() {
    const state = session.state
    const conversationId = state.conversationId
    const committed = state.inbox.recovered !== undefined && state.inbox.held.size > 0 && conversationId !== undefined &&
      (yield* env.runner.isCommitted(conversationId, inputIdOf(session, state.inbox.next)))
    const commands = apply(session, SessionInput.PassGap({ committed, atMs: yield* Clock.currentTimeMillis, graceMs: env.options.gapGraceMs }))
    yield* perform(env, session, commands)
    const wait = commands.find((command): command is Extract<SessionCommand, { readonly _tag: "GapWait" }> => command._tag === "GapWait")
    return wait?.ms
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
      const state = session.state
      if (
        isUnresolved(session) && state.prewarm === undefined && !session.channel.isClosed() && session.channel.isAttached() &&
        at - session.createdAtMs > options.orphanTimeoutMs &&
        (session.storeCheckedAtMs === undefined || at - session.storeCheckedAtMs > options.orphanTimeoutMs)
      ) {
        session.storeCheckedAtMs = at
        yield* resolveOrphan(env, session)
      }
      const lifecycle = state.lifecycle
      const finishedLongAgo = lifecycle._tag === "Ended" && at - lifecycle.atMs > options.finishedRetentionMs
      const idleLongAgo = state.conversationId === undefined && at - session.lastActivityMs > options.idleRetentionMs
      const prewarmedLongAgo = state.prewarm !== undefined && state.run === undefined && at - session.lastActivityMs > options.idleRetentionMs
      if ((finishedLongAgo || idleLongAgo || prewarmedLongAgo) && !session.channel.isAttached()) env.sessions.remove(requestId)
    }
  })
