/**
 * RESUMING A TURN FROM A NEW REQUEST. A client whose stream broke (the CLI after a network drop,
 * some IDE flows) sends a new request whose run request carries `resume_action`, the
 * conversation id and its last checkpoint. Nothing runs again for it:
 *
 * - the conversation's turn is in flight (in this process, or recovered after a restart and
 *   about to speak): the new request mirrors that turn's frames, its backlog first (execs the
 *   client already answered left out, so they do not run twice), then the live ones and its
 *   end; the client's messages on the new request (exec answers, KV answers, cancels) act on
 *   that turn;
 * - the turn is over: its end (turn_ended, checkpoint, end-stream, or its error) is sent again
 *   from the committed state;
 * - the conversation has no turn: the request ends `failed_precondition`, so the client sends
 *   its message again.
 */
import { Clock, Effect, Either, FiberSet, Option, Stream } from "effect"
import * as Dialect from "../Dialect.js"
import type { InputEnv } from "./InputEnv.js"
import { FLAG_END_STREAM } from "./Connect.js"
import { SessionInput, sessionTransition } from "../Session.js"
import { isUnresolved, requestIdOf } from "./Session.js"
import type { Session } from "./Session.js"
import { endSession, sendTurnEnd } from "./TurnEnd.js"

/** The newest other session of this process that runs (or ran) a turn of the conversation. */
const turnInFlight = (env: InputEnv, resumer: Session, conversationId: string): Session | undefined => {
  let found: Session | undefined
  for (const [, session] of env.sessions.entries()) {
    if (session === resumer || session.resumeOf !== undefined || session.state.conversationId !== conversationId || isUnresolved(session)) continue
    if (found === undefined || session.createdAtMs > found.createdAtMs) found = session
  }
  return found
}

export const resume = (env: InputEnv, session: Session) =>
  Effect.gen(function*() {
    const conversationId = session.state.conversationId ?? session.requestId
    const refusal = yield* env.admit.resume(session.caller, conversationId)
    if (refusal !== undefined) return yield* endSession(session, Dialect.turnRefused(refusal))
    const inFlight = turnInFlight(env, session, conversationId)
    if (inFlight !== undefined) return yield* mirror(env, session, inFlight)
    const current = yield* env.runner.currentTurn(conversationId)
    if (Option.isSome(current) && current.value._tag === "Running") {
      const turnRequest = requestIdOf(current.value.turn)
      const route = yield* Effect.either(env.cluster.route(turnRequest))
      if (Either.isRight(route) && route.right._tag === "There") {
        // A live other instance runs it: a resume that reaches it mirrors it there.
        return yield* endSession(session, Dialect.EndStream.Error({
          code: "unavailable",
          message: `The turn of conversation ${conversationId} runs on another instance of this server (${route.right.address}); resume again.`,
          detail: undefined
        }))
      }
      const turn = yield* env.sessions.sessionFor(turnRequest)
      // Taken over from an instance that is gone: resumed here from the store (the model call re-issued).
      if (Either.isRight(route) && route.right._tag === "Here" && route.right.tookOver) yield* env.runner.recoverConversation(conversationId)
      // Recovered after a restart (or just now): the runner speaks for it under its own request id.
      return yield* mirror(env, session, turn)
    }
    if (Option.isSome(current) && current.value._tag === "Ended") {
      const ended = current.value
      yield* Effect.logInfo(`transport: ${session.requestId} resumes conversation ${conversationId}, whose turn ${ended.turn.turnId} is over: its end is sent again`)
      const carried = session.state.run?.conversationState ?? Dialect.carriedCheckpointOf(ended.turn.settings)
      session.state = sessionTransition(session.state, SessionInput.Replays({ conversationId, turnKey: undefined, carried })).state
      return yield* sendTurnEnd(env.sessions.env, session, ended.turn, ended.outcome, ended.state, ended.usage)
    }
    yield* endSession(session, Dialect.EndStream.Error({
      code: "failed_precondition",
      message: `There is no turn to resume in conversation ${conversationId}; send your message again.`,
      detail: undefined
    }))
  })

/** The resuming request's output becomes the turn's frames; its client messages go to the turn (see `ClientInput.handle`). */
const mirror = (env: InputEnv, resumer: Session, turn: Session) =>
  Effect.gen(function*() {
    resumer.resumeOf = turn
    // The turn's client is back: its answers can come again.
    turn.inputEnded = false
    resumer.state = sessionTransition(resumer.state, SessionInput.Mirrors()).state
    yield* Effect.logInfo(`transport: ${resumer.requestId} resumes the turn of ${turn.requestId} (conversation ${turn.state.conversationId})`)
    // Only the backlog can hold execs the client answered already; later frames are new.
    const backlog = turn.channel.size()
    let read = 0
    const frames = yield* turn.channel.attach()
    yield* FiberSet.run(env.background, Stream.runForEach(frames, (frame) => {
      const replayed = read++ < backlog
      if ((frame[0]! & FLAG_END_STREAM) !== 0) {
        return Effect.flatMap(Clock.currentTimeMillis, (atMs) => {
          resumer.state = sessionTransition(resumer.state, SessionInput.Ended({ atMs })).state
          return resumer.channel.close(frame)
        })
      }
      return replayed && answeredExec(turn, frame) ? Effect.void : resumer.channel.write([frame])
    }))
  })

/** An exec frame for an exec that is no longer running: the client answered it already. */
const answeredExec = (turn: Session, frame: Uint8Array): boolean => {
  const decoded = Dialect.fromFrame(frame.subarray(5))
  if (decoded._tag === "Left") return false
  const message = decoded.right.message
  return message.case === "execServerMessage" && !turn.state.correlation.execs.some((exec) => exec.id === message.value.id)
}
