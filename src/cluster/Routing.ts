/**
 * The agent calls' routes among several instances (`Cluster`): a call for a request whose
 * session is in this process is served here without asking anyone; another is routed by the
 * registry, and a request taken over from an instance that is gone has its conversation's turn
 * resumed here from the store first (the model call re-issued, as after a restart), so that the
 * client's reader finds it running.
 */
import { Effect, Either, Layer, Option } from "effect"
import type { Context } from "effect"
import { Cluster, HOP_HEADER } from "../Cluster.js"
import type { ClusterService } from "../Cluster.js"
import * as Dialect from "../Dialect.js"
import { Runner } from "../Runner.js"
import { ConnectError, parseEnvelopes } from "../transport/Connect.js"
import { AgentRouter } from "../transport/front/Agent.js"
import type { AgentRouterService } from "../transport/front/Agent.js"
import { parseInputId } from "../transport/Session.js"
import { Sessions } from "../transport/Sessions.js"

/** The request id a call names (a RunSSE's body is its envelopes), or undefined for a body the wire will refuse itself. */
const requestIdOf = (call: "BidiAppend" | "RunSSE", body: Uint8Array): string | undefined => {
  if (call === "BidiAppend") return Either.getOrUndefined(Either.map(Dialect.decodeBidiAppendFrame(body), (frame) => frame.requestId))
  const envelopes = parseEnvelopes(body, body.length)
  const first = envelopes instanceof ConnectError ? undefined : envelopes[0]
  return first === undefined ? undefined : Either.getOrUndefined(Dialect.decodeRunSseRequest(first.payload))
}

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
    return cluster.route(requestId).pipe(
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
