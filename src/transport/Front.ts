/**
 * The agent front: BidiAppend and RunSSE taken from Node's request straight to the transport
 * (their body read by `readNodeBody`, their answer or frames written on Node's response), every
 * other request left to the Effect server, after the door (`Door.ts`) has checked it. Why, with
 * the measurement: docs/architecture.md, "The agent front".
 */
import { Cause, Context, Effect, Exit, FiberSet, Layer, Option } from "effect"
import type { Fiber } from "effect"
import type { IncomingMessage, ServerResponse } from "node:http"
import { Server as HttpServer } from "node:http"
import { URGENT } from "../internal/Scheduler.js"
import { BIDI_APPEND_PATH, joinFrames, RUN_SSE_PATH, Transport } from "./Service.js"
import type { TransportService } from "./Service.js"
import { readNodeBody } from "./Body.js"
import { Door } from "./Door.js"
import { ConnectError, endStreamFrame, httpStatusOf } from "./Connect.js"
import { parentLinkOf } from "./Subagents.js"
import type { FrameSink } from "./TurnChannel.js"

/** Forks an effect in the front's fiber set (`FiberSet.makeRuntime`). */
type RunFork = <A, E>(effect: Effect.Effect<A, E, never>) => Fiber.RuntimeFiber<A, E>

/** Takes a request (and answers it) or returns false to leave it to the Effect server. */
export type FrontHandler = (request: IncomingMessage, response: ServerResponse) => boolean

/**
 * A Node HTTP server whose `request` events go through its door (`transport/Door.ts`), then its
 * front, when they are installed. While `accepting` is false every request is answered 503: the
 * server's own listener opens before the rest of the server is built, and closes after.
 */
export class FrontedServer extends HttpServer {
  front: FrontHandler | undefined = undefined
  door: FrontHandler | undefined = undefined
  accepting = true

  override emit(event: string | symbol, ...args: Array<any>): boolean {
    if (event === "request") {
      const request = args[0] as IncomingMessage
      const response = args[1] as ServerResponse
      if (!this.accepting) return starting(request, response)
      if (this.door !== undefined && !this.door(request, response)) return true
      if (this.front !== undefined && this.front(request, response)) return true
    }
    return super.emit(event as string, ...args)
  }
}

const STARTING = JSON.stringify({ code: "unavailable", message: "the server is starting or stopping; try again in a moment" })

const starting = (request: IncomingMessage, response: ServerResponse) => {
  response.writeHead(503, { "content-type": "application/json", "content-length": Buffer.byteLength(STARTING), "retry-after": "1" })
  response.end(STARTING)
  request.resume()
  return true
}

/** The server's front, where the transport installs its handler (absent: every request goes the Effect way). */
export class HttpFront extends Context.Tag("cursor-byok/HttpFront")<HttpFront, FrontedServer>() {}

const answer = (response: ServerResponse, status: number, contentType: string, body: Uint8Array | string) => {
  if (response.headersSent || response.writableEnded || response.destroyed) return
  response.writeHead(status, { "content-type": contentType, "content-length": typeof body === "string" ? Buffer.byteLength(body) : body.byteLength })
  response.end(body)
}

type Route = "BidiAppend" | "RunSSE"

/** A Connect error as each route answers it: RunSSE 200 with one end-stream frame, BidiAppend JSON with its HTTP status. */
const answerError = (response: ServerResponse, what: Route, error: ConnectError) =>
  what === "RunSSE"
    ? answer(response, 200, "application/connect+proto", endStreamFrame(error))
    : answer(response, httpStatusOf(error.code), "application/json", JSON.stringify(error.toJson()))

/** A refused request: its answer, and a warning in the log (as the Effect routes did). */
const refuse = (runFork: RunFork, request: IncomingMessage, response: ServerResponse, what: Route, error: ConnectError) => {
  answerError(response, what, error)
  runFork(Effect.logWarning(`${what} refused: ${error.code}: ${error.message}`).pipe(
    Effect.annotateLogs({ requestId: headerOf(request, "x-request-id") })
  ))
}

const headerOf = (request: IncomingMessage, name: string): string => {
  const value = request.headers[name]
  return typeof value === "string" ? value : ""
}

/**
 * Runs `effect` for a request in its own fiber: stopped when the client goes away first; a
 * Connect error is refused, a defect answered `internal` and logged; `onSuccess` answers.
 */
const serve = <A>(runFork: RunFork, request: IncomingMessage, response: ServerResponse, what: Route, effect: Effect.Effect<A, ConnectError>, onSuccess: (value: A) => void) => {
  const fiber = runFork(effect)
  const onClose = () => {
    if (!response.writableEnded) fiber.unsafeInterruptAsFork(fiber.id())
  }
  response.once("close", onClose)
  fiber.addObserver((exit) => {
    response.off("close", onClose)
    if (Exit.isSuccess(exit)) return onSuccess(exit.value)
    const failure = Cause.failureOption(exit.cause)
    if (Option.isSome(failure)) return refuse(runFork, request, response, what, failure.value)
    if (response.destroyed || Cause.isInterruptedOnly(exit.cause)) return
    answerError(response, what, new ConnectError("internal", `the ${what} request could not be handled`))
    runFork(Effect.logError(`${what} failed`, exit.cause))
  })
}

/** BidiAppend: the append's answer. */
const bidiAppend = (transport: TransportService, runFork: RunFork, request: IncomingMessage, response: ServerResponse) =>
  readNodeBody(request, transport.options.bidiAppendMaxBytes, (body) => {
    if (body instanceof ConnectError) return refuse(runFork, request, response, "BidiAppend", body)
    serve(runFork, request, response, "BidiAppend", transport.bidiAppend(body, parentLinkOf(request.headers)), (bytes) =>
      answer(response, 200, "application/proto", bytes))
  })

/**
 * RunSSE: the turn's frames, written to Node's response by the turn's sink as they come (the
 * first, a heartbeat or the backlog, at once: it sends the headers). The sink is detached when
 * the connection closes; the turn goes on for the next reader.
 */
const runSse = (transport: TransportService, runFork: RunFork, request: IncomingMessage, response: ServerResponse) =>
  readNodeBody(request, transport.options.runSseMaxBytes, (body) => {
    if (body instanceof ConnectError) return refuse(runFork, request, response, "RunSSE", body)
    const sink: FrameSink = {
      write: (frames) => {
        if (!response.writableEnded && !response.destroyed) response.write(joinFrames(frames))
      },
      end: () => {
        if (!response.writableEnded && !response.destroyed) response.end()
      }
    }
    const attached = Effect.flatMap(transport.runSse(body, parentLinkOf(request.headers)), (attach) =>
      Effect.suspend(() => {
        response.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", "connect-protocol-version": "1" })
        return attach(sink)
      }))
    serve(runFork, request, response, "RunSSE", attached, (detach) => {
      if (response.destroyed) return detach()
      response.once("close", detach)
    })
  })

/** The front's handler: BidiAppend and RunSSE by POST. */
export const makeFront = (transport: TransportService, runFork: RunFork): FrontHandler => (request, response) => {
  if (request.method !== "POST") return false
  const url = request.url ?? ""
  const query = url.indexOf("?")
  const path = query === -1 ? url : url.slice(0, query)
  if (path === BIDI_APPEND_PATH) bidiAppend(transport, runFork, request, response)
  else if (path === RUN_SSE_PATH) runSse(transport, runFork, request, response)
  else return false
  return true
}

/** Installs the door and the agent front on the server's `HttpFront`, when it has one, until the scope closes. */
export const layer: Layer.Layer<never, never, Transport | Door> = Layer.scopedDiscard(Effect.gen(function*() {
  const front = yield* Effect.serviceOption(HttpFront)
  if (Option.isNone(front)) return
  const transport = yield* Transport
  const door = yield* Door
  // A request's fiber is urgent, as on the Effect server (`internal/Scheduler.ts`).
  const runFork = yield* Effect.withSchedulingPriority(FiberSet.makeRuntime<never>(), URGENT)
  const server = front.value
  server.door = (request, response) => door.http1(request, response)
  server.front = makeFront(transport, runFork)
  yield* Effect.addFinalizer(() => Effect.sync(() => {
    server.front = undefined
    server.door = undefined
  }))
}))
