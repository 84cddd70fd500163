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

/** What routing needs of a call: its request id and, for a run request, its conversation (undefined: a body the wire refuses itself). */
const callOf = (call: "BidiAppend" | "RunSSE", body: Uint8Array): { readonly requestId: string; readonly conversationId?: string } | undefined => {
  if (call === "BidiAppend") {
    const frame = Dialect.decodeBidiAppendFrame(body)
    if (Either.isLeft(frame)) return undefined
    const message = Either.getOrUndefined(frame.right.message)
    if (message?._tag !== "RunRequest") return { requestId: frame.right.requestId }
    // A chat with no id of its own is keyed by its request, as the session keys it.
    return { requestId: frame.right.requestId, conversationId: message.conversationId ?? frame.right.requestId }
  }
  const envelopes = parseEnvelopes(body, body.length)
  const first = envelopes instanceof ConnectError ? undefined : envelopes[0]
  const requestId = first === undefined ? undefined : Either.getOrUndefined(Dialect.decodeRunSseRequest(first.payload))
  return requestId === undefined ? undefined : { requestId }
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

export const takeOver = (cluster: ClusterService, runner: RunnerService, requestId: string) =>
  Effect.gen(function*() {
    const found = yield* runner.findStartedTurn(`${requestId}/`, (inputId: string) => parseInputId(requestId, inputId) !== undefined)
    if (Option.isNone(found) || found.value._tag !== "Running") return
    const conversationId = found.value.turn.conversationId
    // Its next requests come here too (the gone instance was its home).
    yield* cluster.adopt(conversationId).pipe(Effect.catchAll((error) => Effect.logWarning(`cluster: ${error.message}`)))
    const outcome = yield* runner.recoverConversation(conversationId)
    yield* Effect.logInfo(`cluster: took over ${requestId} (conversation ${conversationId}) from an instance that is gone: ${outcome}`)
  })

export const make = (cluster: ClusterService, sessions: { readonly get: (requestId: string) => unknown }, runner: RunnerService): AgentRouterService => ({
  instanceId: cluster.instanceId,
  where: (call, body, headers) => {
    if (!cluster.shared || headers[HOP_HEADER] !== undefined) return undefined
    const named = callOf(call, body)
    if (named === undefined || sessions.get(named.requestId) !== undefined) return undefined
    const { conversationId, requestId } = named
    const route = call === "RunSSE"
      ? readerRoute(cluster, sessions, requestId)
      : conversationId !== undefined
      ? cluster.routeTurn(requestId, conversationId)
      : cluster.route(requestId)
    return route.pipe(
      Effect.tap((route) => route._tag === "Here" && route.tookOver ? takeOver(cluster, runner, requestId) : Effect.void),
      Effect.mapError((error) => new ConnectError("unavailable", `${error.message}; send it again`))
    )
  },
  forget: (body, call) => {
    const named = callOf(call, body)
    if (named !== undefined) cluster.forget(named.requestId)
  }
})

/** The router (alone, it serves every call here without a look). */
export const layer: Layer.Layer<AgentRouter, never, Cluster | Sessions | Runner> = Layer.effect(
  AgentRouter,
  Effect.gen(function*() {
    return make(yield* Cluster, yield* Sessions, yield* Runner)
  })
)
