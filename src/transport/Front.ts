/**
 * THE BIDIAPPEND FRONT. BidiAppend is the server's most frequent request: a turn's run request,
 * one append per blob at its end, a heartbeat a second, each tool result. Through the Effect
 * HTTP server (`HttpLayerRouter`) a request costs ~250 µs of CPU before and after its handler
 * (a fiber with the server's context, the router, the request and response wrappers; measured
 * with a scratch load of heartbeat appends: ~550 µs of CPU per append in all, 43% of it in the
 * Effect runtime). Here Node's request goes to the transport directly: its body is read by
 * `readNodeBody`, `Transport.bidiAppend` runs in a fiber of the request's own (urgent, as every
 * request's: `internal/Scheduler.ts`), and the answer is written on Node's response. Every
 * other request, and a BidiAppend that comes while no front is installed, goes to the Effect
 * server as before, with the same answers: 200 with the response bytes, or a Connect error as
 * JSON with its HTTP status.
 *
 * Node's server emits each request once, to every `request` listener; a listener cannot take a
 * request from another. `FrontedServer` overrides `emit` for `request` events, so that the
 * front sees a request first and the Effect server's listener never sees one the front took.
 */
import { Cause, Context, Effect, Exit, FiberSet, Layer, Option } from "effect"
import type { Fiber } from "effect"
import type { IncomingMessage, ServerResponse } from "node:http"
import { Server as HttpServer } from "node:http"
import { URGENT } from "../internal/Scheduler.js"
import { Transport } from "../Transport.js"
import type { TransportService } from "../Transport.js"
import { readNodeBody } from "./Body.js"
import { ConnectError, httpStatusOf } from "./Connect.js"
import { parentLinkOf } from "./Subagents.js"

export const BIDI_APPEND_PATH = "/aiserver.v1.BidiService/BidiAppend"

/** Forks an effect in the front's fiber set (`FiberSet.makeRuntime`). */
type RunFork = <A, E>(effect: Effect.Effect<A, E, never>) => Fiber.RuntimeFiber<A, E>

/** Takes a request (and answers it) or returns false to leave it to the Effect server. */
export type FrontHandler = (request: IncomingMessage, response: ServerResponse) => boolean

/** A Node HTTP server whose `request` events go through its front first, when one is installed. */
export class FrontedServer extends HttpServer {
  front: FrontHandler | undefined = undefined

  override emit(event: string | symbol, ...args: Array<any>): boolean {
    if (event === "request" && this.front !== undefined && this.front(args[0] as IncomingMessage, args[1] as ServerResponse)) return true
    return super.emit(event as string, ...args)
  }
}

/** The server's front, where the transport installs its BidiAppend handler (absent: every request goes the Effect way). */
export class HttpFront extends Context.Tag("cursor-byok/HttpFront")<HttpFront, FrontedServer>() {}

const answer = (response: ServerResponse, status: number, contentType: string, body: Uint8Array | string) => {
  if (response.headersSent || response.writableEnded || response.destroyed) return
  response.writeHead(status, { "content-type": contentType, "content-length": typeof body === "string" ? Buffer.byteLength(body) : body.byteLength })
  response.end(body)
}

/** A refused append: its Connect error as JSON with its HTTP status, and a warning in the log (as the Effect route did). */
const refuse = (runFork: RunFork, request: IncomingMessage, response: ServerResponse, error: ConnectError) => {
  answer(response, httpStatusOf(error.code), "application/json", JSON.stringify(error.toJson()))
  runFork(Effect.logWarning(`BidiAppend refused: ${error.code}: ${error.message}`).pipe(
    Effect.annotateLogs({ requestId: headerOf(request, "x-request-id") })
  ))
}

const headerOf = (request: IncomingMessage, name: string): string => {
  const value = request.headers[name]
  return typeof value === "string" ? value : ""
}

/** The front's handler: BidiAppend by POST, through `transport.bidiAppend`. */
export const makeFront = (transport: TransportService, runFork: RunFork): FrontHandler => (request, response) => {
  if (request.method !== "POST") return false
  const url = request.url ?? ""
  const query = url.indexOf("?")
  if ((query === -1 ? url : url.slice(0, query)) !== BIDI_APPEND_PATH) return false
  readNodeBody(request, transport.options.bidiAppendMaxBytes, (body) => {
    if (body instanceof ConnectError) return refuse(runFork, request, response, body)
    const fiber = runFork(transport.bidiAppend(body, parentLinkOf(request.headers)))
    // The client went away: stop this append's work (what it handed on goes on).
    const onClose = () => {
      if (!response.writableEnded) fiber.unsafeInterruptAsFork(fiber.id())
    }
    response.once("close", onClose)
    fiber.addObserver((exit) => {
      response.off("close", onClose)
      if (Exit.isSuccess(exit)) return answer(response, 200, "application/proto", exit.value)
      const failure = Cause.failureOption(exit.cause)
      if (Option.isSome(failure)) return refuse(runFork, request, response, failure.value)
      if (response.destroyed || Cause.isInterruptedOnly(exit.cause)) return
      answer(response, 500, "application/json", JSON.stringify(new ConnectError("internal", "the append could not be handled").toJson()))
      runFork(Effect.logError("BidiAppend failed", exit.cause))
    })
  })
  return true
}

/** Installs the BidiAppend front on the server's `HttpFront`, when it has one, until the scope closes. */
export const layer: Layer.Layer<never, never, Transport> = Layer.scopedDiscard(Effect.gen(function*() {
  const front = yield* Effect.serviceOption(HttpFront)
  if (Option.isNone(front)) return
  const transport = yield* Transport
  // An append's fiber is urgent, as every request's (`internal/Scheduler.ts`).
  const runFork = yield* Effect.withSchedulingPriority(FiberSet.makeRuntime<never>(), URGENT)
  const server = front.value
  server.front = makeFront(transport, runFork)
  yield* Effect.addFinalizer(() => Effect.sync(() => {
    server.front = undefined
  }))
}))
