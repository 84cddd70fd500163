/**
 * The agent calls' routes among several instances (`Cluster`): a call for a request whose
 * session is in this process is served here without asking anyone; another is routed by the
 * registry, and a request taken over from an instance that is gone has its conversation's turn
 * resumed here from the store first (the model call re-issued, as after a restart), so that the
 * client's reader finds it running.
 */
import { Duration, Effect, Either, Layer, Option } from "effect"
import type { Context } from "effect"
import { Cluster, HERE, HOP_HEADER } from "../Cluster.js"
import type { ClusterService } from "../Cluster.js"
import * as Dialect from "../Dialect.js"
import { Runner } from "../Runner.js"
import { ConnectError, parseEnvelopes } from "../transport/Connect.js"
import { AgentRouter } from "../transport/front/Agent.js"
import type { AgentRouterService } from "../transport/front/Agent.js"
import { parseInputId } from "../transport/Session.js"
import { Sessions } from "../transport/Sessions.js"

/** The request id a call names (a RunSSE's body is its envelopes); undefined for a body the wire refuses itself. */
const requestIdOf = (call: "BidiAppend" | "RunSSE", body: Uint8Array): string | undefined => {
  if (call === "BidiAppend") return Either.getOrUndefined(Dialect.decodeBidiAppendRequestId(body))
  const envelopes = parseEnvelopes(body, body.length)
  const first = envelopes instanceof ConnectError ? undefined : envelopes[0]
  return first === undefined ? undefined : Either.getOrUndefined(Dialect.decodeRunSseRequest(first.payload))
}

/** The conversation a run request names (one with no id of its own is keyed by its request, as the session keys it); undefined for any other append. */
const runConversationOf = (body: Uint8Array, requestId: string): string | undefined => {
  const frame = Dialect.decodeBidiAppendFrame(body)
  const message = Either.isRight(frame) ? Either.getOrUndefined(frame.right.message) : undefined
  return message?._tag === "RunRequest" ? message.conversationId ?? requestId : undefined
}

/** How long a reader waits for its request's run request to say where the request is served, and how often it looks. */
const READER_WAIT_MS = 1_000
const READER_POLL_MS = 10

/**
 * A RunSSE usually comes with its request's run request, which names the conversation and so
 * the instance that serves it: the reader waits (briefly) for that one to claim the request, so
 * that it is read where the turn runs. Alone, or when no run request comes (a reconnect), it
 * claims the request itself.
 */
const readerRoute = (cluster: ClusterService, sessions: { readonly get: (requestId: string) => unknown }, requestId: string) =>
  Effect.gen(function*() {
    if (cluster.alone()) return yield* cluster.route(requestId)
    for (let waited = 0; waited < READER_WAIT_MS; waited += READER_POLL_MS) {
      if (sessions.get(requestId) !== undefined) return HERE
      const held = yield* cluster.holderOf(requestId)
      if (held !== undefined) return held
      yield* Effect.sleep(Duration.millis(READER_POLL_MS))
    }
    return yield* cluster.route(requestId)
  })

/** A request taken from an instance that is gone: its turn, when one is running, resumed here. */
type RunnerService = Context.Tag.Service<Runner>

export const takeOver = (runner: RunnerService, requestId: string) =>
  Effect.gen(function*() {
    const found = yield* runner.findStartedTurn(`${requestId}/`, (inputId: string) => parseInputId(requestId, inputId) !== undefined)
    if (Option.isNone(found) || found.value._tag !== "Running") return
    const conversationId = found.value.turn.conversationId
    const outcome = yield* runner.recoverConversation(conversationId)
    yield* Effect.logInfo(`cluster: took over ${requestId} (conversation ${conversationId}) from an instance that is gone: ${outcome}`)
  })

export const make = (cluster: ClusterService, sessions: { readonly get: (requestId: string) => unknown }, runner: RunnerService): AgentRouterService => ({
  instanceId: cluster.instanceId,
  where: (call, body, headers) => {
    if (!cluster.shared || headers[HOP_HEADER] !== undefined) return undefined
    const requestId = requestIdOf(call, body)
    if (requestId === undefined || sessions.get(requestId) !== undefined) return undefined
    const conversationId = call === "BidiAppend" ? runConversationOf(body, requestId) : undefined
    const route = call === "RunSSE"
      ? readerRoute(cluster, sessions, requestId)
      : conversationId !== undefined
      ? cluster.routeTurn(requestId, conversationId)
      : cluster.route(requestId)
    return route.pipe(
      Effect.tap((route) => route._tag === "Here" && route.tookOver ? takeOver(runner, requestId) : Effect.void),
      Effect.mapError((error) => new ConnectError("unavailable", `${error.message}; send it again`))
    )
  },
  forget: (body, call) => {
    const requestId = requestIdOf(call, body)
    if (requestId !== undefined) cluster.forget(requestId)
  }
})

/** The router (alone, it serves every call here without a look). */
export const layer: Layer.Layer<AgentRouter, never, Cluster | Sessions | Runner> = Layer.effect(
  AgentRouter,
  Effect.gen(function*() {
    return make(yield* Cluster, yield* Sessions, yield* Runner)
  })
)
