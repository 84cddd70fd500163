/**
 * The agent calls, served on Node's request and response (HTTP/1.1, or HTTP/2's compatibility
 * API): BidiAppend (unary: the append's answer), RunSSE (a server stream: the turn's frames) and,
 * on HTTP/2, `Run` (a bidi stream, `Run.ts`). The request's protocol (`Protocol.ts`) reads the
 * body and writes the answer, the frames and the errors; the transport's effect runs in a fiber
 * of the request's own. Why not through the Effect router: docs/architecture.md, "The front door".
 */
import { Context, Effect } from "effect"
import type { IncomingHttpHeaders } from "node:http"
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2"
import type { Route } from "../../Cluster.js"
import { clientVersionOf } from "../../Drift.js"
import * as Dialect from "../../Dialect.js"
import { ConnectError } from "../Connect.js"
import { callerOf } from "../Door.js"
import { BIDI_APPEND_PATH, RUN_SSE_PATH } from "../Service.js"
import type { TransportService } from "../Service.js"
import { parentLinkOf } from "../Subagents.js"
import type { FrameSink } from "../TurnChannel.js"
import * as Hop from "./Hop.js"
import type { CallKind, NodeRequest, NodeResponse, Protocol } from "./Wire.js"
import { RUN_PATH, serveRun } from "./Run.js"
import { inJson } from "./Json.js"
import { refuse, serve } from "./Serve.js"
import type { CallOf, RunFork } from "./Serve.js"

export type { RunFork } from "./Serve.js"

export type AgentCall = "BidiAppend" | "RunSSE" | "Run"

export const KIND: Record<AgentCall, CallKind> = { BidiAppend: "unary", RunSSE: "stream", Run: "bidi" }

const callOf = (call: AgentCall): CallOf => ({ name: call, kind: KIND[call] })

/** The agent call a request makes, by its method and path (a query aside); undefined: not one (`Run` on HTTP/1.1 neither: it needs HTTP/2). */
export const agentCallOf = (method: string | undefined, url: string, http2: boolean): AgentCall | undefined => {
  if (method !== "POST") return undefined
  const query = url.indexOf("?")
  const path = query === -1 ? url : url.slice(0, query)
  return path === BIDI_APPEND_PATH ? "BidiAppend" : path === RUN_SSE_PATH ? "RunSSE" : path === RUN_PATH && http2 ? "Run" : undefined
}

/** Serves one agent call, in the protocol the request speaks. */
export type AgentWire = (call: AgentCall, protocol: Protocol, request: NodeRequest, response: NodeResponse) => void

/**
 * Where a BidiAppend or a RunSSE is served when several instances share the database
 * (`cluster/Routing.ts`): undefined, here and now (alone, a forwarded call, a request this
 * instance holds); otherwise its route, found in the database.
 */
export interface AgentRouterService {
  readonly instanceId: string
  readonly where: (call: "BidiAppend" | "RunSSE", body: Uint8Array, headers: IncomingHttpHeaders) => Effect.Effect<Route, ConnectError> | undefined
  /** A holder that did not answer: the request's route is asked again next time. */
  readonly forget: (body: Uint8Array, call: "BidiAppend" | "RunSSE") => void
}

export class AgentRouter extends Context.Tag("cursor-byok/transport/AgentRouter")<AgentRouter, AgentRouterService>() {}

type Routed = "BidiAppend" | "RunSSE"

/** Serves `call` here (`here`), or on the instance that holds its request (asked again once if that one is gone). */
const routed = (
  router: AgentRouterService | undefined,
  runFork: RunFork,
  call: Routed,
  protocol: Protocol,
  request: NodeRequest,
  response: NodeResponse,
  body: Uint8Array,
  here: () => void,
  again = true
) => {
  const where = router?.where(call, body, request.headers)
  if (where === undefined) return here()
  serve(runFork, protocol, request, response, callOf(call), where, (route) => {
    if (route._tag === "Here") return here()
    forward(router!, call, route.address, protocol, request, response, body, (error) => {
      router!.forget(body, call)
      if (again && Hop.isUnreachable(error)) return routed(router, runFork, call, protocol, request, response, body, here, false)
      protocol.error(response, KIND[call], error)
    })
  })
}

/** The call on the holder (`Hop.ts`), its answer or frames written here in the client's protocol; `failed` before any. */
const forward = (
  router: AgentRouterService,
  call: Routed,
  address: string,
  protocol: Protocol,
  request: NodeRequest,
  response: NodeResponse,
  body: Uint8Array,
  failed: (error: ConnectError) => void
) => {
  const hop: Hop.HopRequest = { address, path: call === "BidiAppend" ? BIDI_APPEND_PATH : RUN_SSE_PATH, body, headers: request.headers, from: router.instanceId }
  if (call === "BidiAppend") return Hop.unary(hop, (answer) => answer instanceof ConnectError ? failed(answer) : protocol.answer(response, answer))
  let opened = false
  const cancel = Hop.stream(hop, {
    frames: (frames) => {
      if (!opened) protocol.open(response)
      opened = true
      protocol.write(response, frames)
    },
    end: () => {
      if (!opened) protocol.open(response)
      protocol.end(response)
    },
    error: failed
  })
  response.once("close", cancel)
}

/** BidiAppend: the append's answer. */
const bidiAppend = (transport: TransportService, router: AgentRouterService | undefined, runFork: RunFork, protocol: Protocol, request: NodeRequest, response: NodeResponse) =>
  protocol.read(request, transport.options.bidiAppendMaxBytes, "unary", (body) => {
    if (body instanceof ConnectError) return refuse(runFork, protocol, request, response, callOf("BidiAppend"), body)
    routed(router, runFork, "BidiAppend", protocol, request, response, body, () => appendHere(transport, runFork, protocol, request, response, body))
  })

const appendHere = (transport: TransportService, runFork: RunFork, protocol: Protocol, request: NodeRequest, response: NodeResponse, body: Uint8Array) => {
  const answer = transport.bidiAppend(body, parentLinkOf(request.headers), clientVersionOf(request.headers), callerOf(request))
  // Taken in this call (`Driver.acceptNow`): answered without a fiber.
  if (answer instanceof Uint8Array) return protocol.answer(response, answer)
  serve(runFork, protocol, request, response, callOf("BidiAppend"), answer, (bytes) => protocol.answer(response, bytes))
}

/**
 * RunSSE: the turn's frames, written to Node's response by the turn's sink as they come (the
 * first, a heartbeat or the backlog, at once: it sends the headers). The sink is detached when
 * the connection closes; the turn goes on for the next reader.
 */
const runSse = (transport: TransportService, router: AgentRouterService | undefined, runFork: RunFork, protocol: Protocol, request: NodeRequest, response: NodeResponse) =>
  protocol.read(request, transport.options.runSseMaxBytes, "stream", (body) => {
    if (body instanceof ConnectError) return refuse(runFork, protocol, request, response, callOf("RunSSE"), body)
    routed(router, runFork, "RunSSE", protocol, request, response, body, () => readHere(transport, runFork, protocol, request, response, body))
  })

const readHere = (transport: TransportService, runFork: RunFork, protocol: Protocol, request: NodeRequest, response: NodeResponse, body: Uint8Array) => {
  const sink: FrameSink = {
    write: (frames) => protocol.write(response, frames),
    end: () => protocol.end(response)
  }
  const attached = Effect.flatMap(transport.runSse(body, parentLinkOf(request.headers), clientVersionOf(request.headers), callerOf(request)), (attach) =>
    Effect.suspend(() => {
      protocol.open(response)
      return attach(sink)
    }))
  serve(runFork, protocol, request, response, callOf("RunSSE"), attached, (detach) => {
    if (!("stream" in response ? !response.stream.destroyed : !response.destroyed)) return detach()
    response.once("close", detach)
  })
}

/** `Run` (HTTP/2 only: `agentCallOf` names it on HTTP/2); its fiber is stopped when the stream closes (the session and its turn go on). */
const run = (transport: TransportService, runFork: RunFork, protocol: Protocol, request: NodeRequest, response: NodeResponse) => {
  const fiber = runFork(serveRun(transport, protocol, request as Http2ServerRequest, response as Http2ServerResponse))
  response.once("close", () => fiber.unsafeInterruptAsFork(fiber.id()))
}

/** The agent calls of `transport`, their fibers forked by `runFork`; with a router, each on the instance holding its request. */
export const make = (transport: TransportService, runFork: RunFork, router?: AgentRouterService): AgentWire => (call, protocol, request, response) => {
  // `Run` takes binary only (`Run.ts` refuses a JSON codec); the others speak JSON through `inJson`.
  if (call === "Run") return run(transport, runFork, protocol, request, response)
  const spoken = protocol.codec === "json" ? inJson(protocol, Dialect.agentJson[call]) : protocol
  return call === "BidiAppend"
    ? bidiAppend(transport, router, runFork, spoken, request, response)
    : runSse(transport, router, runFork, spoken, request, response)
}
