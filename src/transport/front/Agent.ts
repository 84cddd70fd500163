/**
 * The agent calls on HTTP/1.1, served on Node's request and response: BidiAppend (unary: the
 * append's answer) and RunSSE (a server stream: the turn's frames). The request's protocol
 * (`Protocol.ts`) reads the body and writes the answer, the frames and the errors; the
 * transport's effect runs in a fiber of the request's own. Why not through the Effect router:
 * docs/architecture.md, "The front door".
 */
import { Cause, Effect, Exit, Option } from "effect"
import type { Fiber } from "effect"
import type { IncomingMessage, ServerResponse } from "node:http"
import { ConnectError } from "../Connect.js"
import { BIDI_APPEND_PATH, RUN_SSE_PATH } from "../Service.js"
import type { TransportService } from "../Service.js"
import { parentLinkOf } from "../Subagents.js"
import type { FrameSink } from "../TurnChannel.js"
import type { CallKind, Protocol } from "./Protocol.js"

/** Forks an effect in the front's fiber set (`FiberSet.makeRuntime`). */
export type RunFork = <A, E>(effect: Effect.Effect<A, E, never>) => Fiber.RuntimeFiber<A, E>

export type AgentCall = "BidiAppend" | "RunSSE"

const KIND: Record<AgentCall, CallKind> = { BidiAppend: "unary", RunSSE: "stream" }

/** The agent call a request makes, by its method and path (a query aside); undefined: not one. */
export const agentCallOf = (method: string | undefined, url: string): AgentCall | undefined => {
  if (method !== "POST") return undefined
  const query = url.indexOf("?")
  const path = query === -1 ? url : url.slice(0, query)
  return path === BIDI_APPEND_PATH ? "BidiAppend" : path === RUN_SSE_PATH ? "RunSSE" : undefined
}

/** Serves one agent call, in the protocol the request speaks. */
export type AgentWire = (call: AgentCall, protocol: Protocol, request: IncomingMessage, response: ServerResponse) => void

const headerOf = (request: IncomingMessage, name: string): string => {
  const value = request.headers[name]
  return typeof value === "string" ? value : ""
}

/** A refused call: its answer, and a warning in the log. */
const refuse = (runFork: RunFork, protocol: Protocol, request: IncomingMessage, response: ServerResponse, call: AgentCall, error: ConnectError) => {
  protocol.error(response, KIND[call], error)
  runFork(Effect.logWarning(`${call} refused: ${error.code}: ${error.message}`).pipe(
    Effect.annotateLogs({ requestId: headerOf(request, "x-request-id") })
  ))
}

/**
 * Runs `effect` for a call in its own fiber: stopped when the client goes away first; a
 * Connect error is refused, a defect answered `internal` and logged; `onSuccess` answers.
 */
const serve = <A>(
  runFork: RunFork,
  protocol: Protocol,
  request: IncomingMessage,
  response: ServerResponse,
  call: AgentCall,
  effect: Effect.Effect<A, ConnectError>,
  onSuccess: (value: A) => void
) => {
  const fiber = runFork(effect)
  const onClose = () => {
    if (!response.writableEnded) fiber.unsafeInterruptAsFork(fiber.id())
  }
  response.once("close", onClose)
  fiber.addObserver((exit) => {
    response.off("close", onClose)
    if (Exit.isSuccess(exit)) return onSuccess(exit.value)
    const failure = Cause.failureOption(exit.cause)
    if (Option.isSome(failure)) return refuse(runFork, protocol, request, response, call, failure.value)
    if (response.destroyed || Cause.isInterruptedOnly(exit.cause)) return
    protocol.error(response, KIND[call], new ConnectError("internal", `the ${call} request could not be handled`))
    runFork(Effect.logError(`${call} failed`, exit.cause))
  })
}

/** BidiAppend: the append's answer. */
const bidiAppend = (transport: TransportService, runFork: RunFork, protocol: Protocol, request: IncomingMessage, response: ServerResponse) =>
  protocol.read(request, transport.options.bidiAppendMaxBytes, (body) => {
    if (body instanceof ConnectError) return refuse(runFork, protocol, request, response, "BidiAppend", body)
    const answer = transport.bidiAppend(body, parentLinkOf(request.headers))
    // Taken in this call (`Driver.acceptNow`): answered without a fiber.
    if (answer instanceof Uint8Array) return protocol.answer(response, answer)
    serve(runFork, protocol, request, response, "BidiAppend", answer, (bytes) => protocol.answer(response, bytes))
  })

/**
 * RunSSE: the turn's frames, written to Node's response by the turn's sink as they come (the
 * first, a heartbeat or the backlog, at once: it sends the headers). The sink is detached when
 * the connection closes; the turn goes on for the next reader.
 */
const runSse = (transport: TransportService, runFork: RunFork, protocol: Protocol, request: IncomingMessage, response: ServerResponse) =>
  protocol.read(request, transport.options.runSseMaxBytes, (body) => {
    if (body instanceof ConnectError) return refuse(runFork, protocol, request, response, "RunSSE", body)
    const sink: FrameSink = {
      write: (frames) => protocol.write(response, frames),
      end: () => protocol.end(response)
    }
    const attached = Effect.flatMap(transport.runSse(body, parentLinkOf(request.headers)), (attach) =>
      Effect.suspend(() => {
        protocol.open(response)
        return attach(sink)
      }))
    serve(runFork, protocol, request, response, "RunSSE", attached, (detach) => {
      if (response.destroyed) return detach()
      response.once("close", detach)
    })
  })

/** The agent calls of `transport`, their fibers forked by `runFork`. */
export const make = (transport: TransportService, runFork: RunFork): AgentWire => (call, protocol, request, response) =>
  call === "BidiAppend" ? bidiAppend(transport, runFork, protocol, request, response) : runSse(transport, runFork, protocol, request, response)
