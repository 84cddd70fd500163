/**
 * Cursor's agent transport: the wires a turn session binds to. HTTP/1.1 mode is `RunSSE` (a
 * request's server messages as a stream) plus `BidiAppend` (the client's messages, one POST
 * each, numbered by `append_seqno`); HTTP/2 mode is the bidi `Run` (`transport/Run.ts`), both
 * directions on one stream. Either way the client's messages go through `Driver.accept`
 * and the output is the session's turn channel, so a turn gives the same frames, checkpoints,
 * recovery and errors on either wire.
 *
 * The sessions and the runner's gateway onto them are `transport/Sessions.ts`, which needs no
 * runner; this module binds them to the runner. The HTTP/1.1 wire is served by the listener's
 * front door (`transport/Front.ts`, `transport/front/Agent.ts`), `Run` by `transport/Run.ts`.
 */
import { Duration, Effect, Either, FiberSet, Layer, Option, Queue, Schedule } from "effect"
import { Cluster, solo } from "./Cluster.js"
import * as Dialect from "./Dialect.js"
import type { ClientMessage } from "./Dialect.js"
import * as Drift from "./Drift.js"
import { ClientGateway, Runner } from "./Runner.js"
import { SessionInput } from "./Session.js"
import { awaitSettled } from "./transport/Acks.js"
import { makeInputEnv } from "./transport/ClientInput.js"
import { accept, acceptNow, step } from "./transport/Driver.js"
import { noServerWork } from "./transport/InputEnv.js"
import { linkParent } from "./transport/Subagents.js"
import { workerOf } from "./transport/Work.js"
import { Web } from "./Web.js"
import type { InputEnv } from "./transport/InputEnv.js"
import { ConnectError, parseEnvelopes } from "./transport/Connect.js"
import type { TransportOptions } from "./transport/Options.js"
import * as Recovery from "./transport/Recovery.js"
import { HEARTBEAT_FRAME, isUnresolved, locked } from "./transport/Session.js"
import type { Session } from "./transport/Session.js"
import { Transport } from "./transport/Service.js"
import type { AttachOutput } from "./transport/Service.js"
import * as Sessions from "./transport/Sessions.js"
import { endInput } from "./transport/TurnEnd.js"
import { Users } from "./Users.js"
import type { Caller } from "./Users.js"
import * as Admit from "./users/Admit.js"
import { callerRefusal, linkCaller, mayAct } from "./transport/Callers.js"

export { defaultTransportOptions } from "./transport/Options.js"
export { BIDI_APPEND_PATH, joinFrames, RUN_SSE_PATH, Transport } from "./transport/Service.js"
export type { AttachOutput, TransportService } from "./transport/Service.js"
export type { TransportOptions } from "./transport/Options.js"
export { requestIdOf } from "./transport/Session.js"

const APPEND_RESPONSE = Dialect.BIDI_APPEND_RESPONSE

export const make = Effect.gen(function*() {
  const sessions = yield* Sessions.Sessions
  const runner = yield* Runner
  // The web tools need the Web service; without it (tests of the transport alone) they are never offered.
  const web = yield* Effect.serviceOption(Web)
  const users = yield* Effect.serviceOption(Users)
  const env: InputEnv = makeInputEnv(
    sessions.env,
    runner,
    sessions,
    Option.match(web, { onNone: () => noServerWork, onSome: workerOf }),
    Option.match(users, { onNone: () => Admit.admitAll, onSome: (service) => Admit.make(service) }),
    Option.getOrElse(yield* Effect.serviceOption(Cluster), () => solo)
  )
  const { options } = env
  const background = yield* FiberSet.make()

  yield* FiberSet.run(background, Effect.repeat(Recovery.sweep(env), Schedule.spaced(Duration.millis(options.sweepIntervalMs))))
  yield* FiberSet.run(background, Effect.forever(Effect.flatMap(Queue.take(sessions.adoptions), (session) => Recovery.adoptHeld(env, session))))

  /** An append: its answer at once when the driver takes it in this call (`acceptNow`), else the effect that takes it. */
  const bidiAppend = (body: Uint8Array, parent?: Dialect.ParentLink, clientVersion?: string, caller?: Caller): Uint8Array | Effect.Effect<Uint8Array, ConnectError> => {
    const frame = Dialect.decodeBidiAppendFrame(body, Drift.sinkFor(clientVersion))
    if (Either.isLeft(frame)) return Effect.fail(new ConnectError("invalid_argument", frame.left.message))
    const { requestId, appendSeqno, message } = frame.right
    if (appendSeqno < 0n || appendSeqno > BigInt(Number.MAX_SAFE_INTEGER)) {
      return Effect.fail(new ConnectError("out_of_range", `append_seqno ${appendSeqno} is out of range`))
    }
    // A user's append is taken at once only on a session already theirs.
    const known = caller?._tag === "User" ? sessions.get(requestId) : undefined
    const plain = caller?._tag !== "User" || (known?.caller?._tag === "User" && mayAct(known.caller, caller))
    if (parent === undefined && plain && Either.isRight(message) && acceptNow(env, requestId, Number(appendSeqno), message.right)) return APPEND_RESPONSE
    return Effect.suspend(() => {
      // A subagent's run names its parent on its requests: the session keeps it before its run request is taken.
      if (parent === undefined && plain) return appendFor(requestId, Number(appendSeqno), message)
      return Effect.flatMap(sessions.sessionFor(requestId), (session) => {
        const refused = linkCaller(session, caller)
        if (refused !== undefined) return Effect.fail(refused)
        linkParent(session, parent)
        return appendFor(requestId, Number(appendSeqno), message)
      })
    }).pipe(Effect.annotateLogs("requestId", requestId))
  }

  /** An append: the logs of its handling carry its request id. */
  const appendFor = (requestId: string, seqno: number, decoded: Dialect.BidiAppendFrame["message"]) =>
    Effect.gen(function*() {
      // Undecodable data still takes its seqno (the client will not send it again): logged, acknowledged, dropped.
      if (Either.isLeft(decoded)) yield* Effect.logWarning(`transport: append ${seqno} of ${requestId} dropped: ${decoded.left.message}`)
      const message: ClientMessage = Either.isRight(decoded)
        ? decoded.right
        : Dialect.ClientMessage.Unknown({ where: "undecodable append", fields: [] })
      const accepted = yield* accept(env, requestId, seqno, message)
      // Outside the request's lock, so its other appends are not held up behind this one.
      if (accepted.settled !== undefined) yield* awaitSettled(env, accepted.session, seqno, accepted.settled)
      return APPEND_RESPONSE
    })

  /** A reader's session: a finished turn whose end a reader already received is a new turn on a reused id. */
  const readerSession = (requestId: string): Effect.Effect<Session> =>
    Effect.gen(function*() {
      const session = yield* sessions.sessionFor(requestId)
      if (!session.channel.isClosed() || !session.channel.endDelivered() || session.channel.isAttached()) return session
      yield* locked(session, step(env, session, SessionInput.DropHeld()))
      return yield* sessions.replace(requestId)
    })

  // The first heartbeat goes out at once: it flushes the response headers, so a client that
  // waits for them before sending its run request is not held up until the turn speaks.
  const output = (session: Session): AttachOutput => (sink) =>
    session.channel.attachSink(sink, { frame: HEARTBEAT_FRAME, interval: Duration.millis(options.heartbeatMs) })

  const runSse = (body: Uint8Array, parent?: Dialect.ParentLink, clientVersion?: string, caller?: Caller) =>
    Effect.gen(function*() {
      const envelopes = parseEnvelopes(body, options.runSseMaxBytes)
      if (envelopes instanceof ConnectError) return yield* Effect.fail(envelopes)
      const first = envelopes[0]
      if (first === undefined) return yield* Effect.fail(new ConnectError("invalid_argument", "RunSSE request has no message"))
      const requestId = Dialect.decodeRunSseRequest(first.payload, Drift.sinkFor(clientVersion))
      if (Either.isLeft(requestId)) return yield* Effect.fail(new ConnectError("invalid_argument", requestId.left.message))
      // Another user's session on this request id (a reader would replace it) first.
      const refusedBefore = callerRefusal(sessions.get(requestId.right), caller)
      if (refusedBefore !== undefined) return yield* Effect.fail(refusedBefore)
      const session = yield* readerSession(requestId.right)
      const refused = linkCaller(session, caller)
      if (refused !== undefined) return yield* Effect.fail(refused)
      linkParent(session, parent)
      return output(session)
    })

  const runMessage = (requestId: string, seqno: number, message: ClientMessage) =>
    acceptNow(env, requestId, seqno, message)
      ? Effect.void
      : Effect.asVoid(accept(env, requestId, seqno, message)).pipe(Effect.annotateLogs("requestId", requestId))


  const runOutput = (requestId: string, parent?: Dialect.ParentLink, caller?: Caller) =>
    Effect.suspend(() => {
      const refused = callerRefusal(sessions.get(requestId), caller)
      return refused === undefined ? readerSession(requestId) : Effect.fail(refused)
    }).pipe(Effect.flatMap((session) => {
      const refused = linkCaller(session, caller)
      if (refused !== undefined) return Effect.fail(refused)
      linkParent(session, parent)
      return Effect.succeed(output(session))
    }))

  const runInputEnded = (requestId: string) =>
    Effect.suspend(() => {
      const session = sessions.get(requestId)
      if (session === undefined) return Effect.succeed(true)
      return Effect.as(endInput(session.resumeOf ?? session), isUnresolved(session))
    })

  return Transport.of({ options, bidiAppend, runSse, runMessage, runInputEnded, runOutput, shutdown: sessions.shutdown, sessionCount: sessions.size })
})

// =============================================================================
// Layers
// =============================================================================

/** The turn sessions and the runner's gateway onto them (needs no runner). */
export const layerSessions = (options: TransportOptions): Layer.Layer<Sessions.Sessions | ClientGateway> => Sessions.layer(options)

/** The wires' binding of the sessions to the runner. */
export const layer: Layer.Layer<Transport, never, Sessions.Sessions | Runner> = Layer.scoped(Transport, make)

