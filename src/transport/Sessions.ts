/**
 * The turn sessions of this process, by request id, and the runner's `ClientGateway` onto them:
 * what the loop emits is encoded by the Dialect and written to the request's channel, tool
 * calls start their machines, a turn's end goes out as `TurnEnd.ts` says.
 *
 * Needs no runner: a tool result the server has at once is returned to the runner, and a
 * recovered turn whose client's appends were held before the runner spoke is handed to the
 * client-input side through `adoptions`.
 */
import { Clock, Context, Effect, FiberSet, Layer, Queue } from "effect"
import * as Dialect from "../Dialect.js"
import type { ResponseEvent, Usage } from "../Llm.js"
import type { ConversationState } from "../Loop.js"
import { ClientGateway } from "../Runner.js"
import type { CompactionProgress, DispatchedOperation, TurnOutcome, TurnRef } from "../Runner.js"
import type { TransportOptions } from "./Options.js"
import { envelope } from "./Connect.js"
import { SessionInput, sessionTransition, toolContext } from "../Session.js"
import type { SessionCommand } from "../Session.js"
import { endFrameOf, frameOf, logLine, makeSession, requestIdOf, write } from "./Session.js"
import type { Session, SessionEnv } from "./Session.js"
import { beginNextTurn, sendTurnEnd } from "./TurnEnd.js"

/** A model call's events as the turn's frames, moving the session's correlation on. */
const encodeEvents = (session: Session, turn: TurnRef, callId: string, events: ReadonlyArray<ResponseEvent>, nowMs: number): Array<Uint8Array> => {
  const state = session.state
  let correlation = state.correlation
  const frames: Array<Uint8Array> = []
  let mcpTools: ReturnType<typeof toolContext>["mcpTools"] | undefined
  for (const event of events) {
    const bytes = Dialect.deltaBytesOf(correlation, callId, event)
    if (bytes !== undefined) {
      frames.push(envelope(0, bytes))
      continue
    }
    mcpTools ??= toolContext(state, turn).mcpTools
    const encoded = Dialect.encodeResponseEvent(correlation, callId, event, { nowMs, mcpTools, routedModelUpdates: turn.settings.routedModelUpdates })
    correlation = encoded.correlation
    for (const message of encoded.messages) frames.push(frameOf(message))
  }
  if (correlation !== state.correlation) session.state = { ...state, correlation }
  return frames
}

export interface SessionsService {
  readonly env: SessionEnv
  readonly get: (requestId: string) => Session | undefined
  /** The session of a request id, created by whichever of a reader, a client message or the runner comes first. */
  readonly sessionFor: (requestId: string) => Effect.Effect<Session>
  /** A fresh session in place of an ended one (the IDE reuses request ids for new turns). */
  readonly replace: (requestId: string) => Effect.Effect<Session>
  readonly entries: () => IterableIterator<[string, Session]>
  readonly remove: (requestId: string) => void
  readonly size: () => number
  /** Recovered turns the runner spoke for while their client's appends were held (`Recovery.adoptHeld`). */
  readonly adoptions: Queue.Queue<Session>
  readonly gateway: Context.Tag.Service<ClientGateway>
  /** Ends every open stream with a retryable error (graceful shutdown). */
  readonly shutdown: Effect.Effect<void>
}

export class Sessions extends Context.Tag("cursor-byok/transport/Sessions")<Sessions, SessionsService>() {}

export const make = (options: TransportOptions) =>
  Effect.gen(function*() {
    const background = yield* FiberSet.make()
    const run = yield* FiberSet.runtime(background)<never>()
    const env: SessionEnv = { options, background, fork: (effect) => void run(effect) }
    const sessions = new Map<string, Session>()
    const adoptions = yield* Queue.unbounded<Session>()

    const sessionFor = (requestId: string): Effect.Effect<Session> =>
      Effect.gen(function*() {
        const at = yield* Clock.currentTimeMillis
        const existing = sessions.get(requestId)
        if (existing !== undefined) {
          existing.lastActivityMs = at
          return existing
        }
        const session = yield* makeSession(requestId, at)
        sessions.set(requestId, session)
        return session
      })

    const replace = (requestId: string): Effect.Effect<Session> =>
      Effect.gen(function*() {
        const session = yield* makeSession(requestId, yield* Clock.currentTimeMillis)
        sessions.set(requestId, session)
        return session
      })

    /**
     * The runner speaks for `turn` on its request's session (the machine's `Spoke`): a queued
     * message's turn releases the stream that waited for it; held appends of a recovered turn
     * are adopted (`Recovery.adoptHeld`, through `adoptions`).
     */
    const spoke = (session: Session, turn: TurnRef): void => {
      const step = sessionTransition(session.state, SessionInput.Spoke({ turn }))
      session.state = step.state
      for (const command of step.commands) {
        if (command._tag === "NextTurn") beginNextTurn(session)
        else if (command._tag === "AdoptHeld") Queue.unsafeOffer(adoptions, session)
      }
    }

    /** The session of a turn the runner speaks for. */
    const turnSession = (turn: TurnRef): Effect.Effect<Session> =>
      Effect.map(sessionFor(requestIdOf(turn)), (session) => {
        spoke(session, turn)
        return session
      })

    const publish = (turn: TurnRef, callId: string, events: ReadonlyArray<ResponseEvent>) =>
      Effect.gen(function*() {
        const session = yield* turnSession(turn)
        const nowMs = yield* Clock.currentTimeMillis
        yield* session.channel.write(encodeEvents(session, turn, callId, events, nowMs))
      })

    /** `publish` in the caller's fiber, for a session that exists already (the delta fast path); false: `publish` it. */
    const publishNow = (turn: TurnRef, callId: string, events: ReadonlyArray<ResponseEvent>, nowMs: number): boolean => {
      const session = sessions.get(requestIdOf(turn))
      if (session === undefined) return false
      spoke(session, turn)
      session.lastActivityMs = nowMs
      session.channel.unsafeWrite(encodeEvents(session, turn, callId, events, nowMs))
      return true
    }

    /** The machine's step for what the runner says of `turn`: its frames written, its log lines; a tool result it gave at once. */
    const stepTurn = (turn: TurnRef, input: SessionInput) =>
      Effect.flatMap(turnSession(turn), (session) => {
        const step = sessionTransition(session.state, input)
        session.state = step.state
        const done = step.commands.find((command): command is Extract<SessionCommand, { readonly _tag: "DoneAtOnce" }> => command._tag === "DoneAtOnce")?.message
        return Effect.as(
          Effect.forEach(step.commands, (command) =>
            command._tag === "Write" ? write(session, command.messages) : command._tag === "Log" ? logLine(command) : Effect.void, { discard: true }),
          done
        )
      })

    const dispatch = (turn: TurnRef, dispatched: DispatchedOperation) =>
      Effect.flatMap(Clock.currentTimeMillis, (atMs) => stepTurn(turn, SessionInput.Dispatch({ turn, dispatched, atMs, subagentModel: options.subagentModel?.() })))

    const abort = (turn: TurnRef) => Effect.asVoid(stepTurn(turn, SessionInput.Abort()))

    /** The summarizing display, and the summary kept for the turn's checkpoint. */
    const compaction = (turn: TurnRef, progress: CompactionProgress) => Effect.asVoid(stepTurn(turn, SessionInput.Compaction({ progress })))

    const finish = (turn: TurnRef, outcome: TurnOutcome, state: ConversationState, usage: Usage) =>
      Effect.flatMap(turnSession(turn), (session) => sendTurnEnd(env, session, turn, outcome, state, usage))

    // The sessions open when it runs (a list taken when the service was made would be empty).
    const shutdown = Effect.suspend(() =>
      Effect.forEach([...sessions.values()], (session) =>
        session.channel.isClosed()
          ? Effect.void
          : session.channel.close(endFrameOf(Dialect.EndStream.Error({ code: "unavailable", message: "The server is shutting down; try again.", detail: undefined }))),
        { discard: true }))
    yield* Effect.addFinalizer(() => shutdown)

    return Sessions.of({
      env,
      get: (requestId) => sessions.get(requestId),
      sessionFor,
      replace,
      entries: () => sessions.entries(),
      remove: (requestId) => void sessions.delete(requestId),
      size: () => sessions.size,
      adoptions,
      gateway: ClientGateway.of({ publish, publishNow, dispatch, compaction, abort, finish }),
      shutdown
    })
  })

/** The sessions, and the runner's gateway onto them. */
export const layer = (options: TransportOptions): Layer.Layer<Sessions | ClientGateway> =>
  Layer.scopedContext(Effect.map(make(options), (service) => Context.make(Sessions, service).pipe(Context.add(ClientGateway, service.gateway))))
