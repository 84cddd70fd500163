/**
 * The front door of the HTTP/1.1 listener: Node's server with one `request` listener, which
 * also takes the requests the proxy and the TLS listener hand on. Each request goes through it
 * once: answered 503 while the server is not accepting, checked by the door (`Door.ts`), then
 * sent to one place: an agent call (RunSSE, BidiAppend) to its wire (`front/Agent.ts`) in its
 * protocol (`front/Protocol.ts`), anything else to the Effect app that `HttpLayerRouter.serve`
 * serves through this listener's `HttpServer` (`layerServer`). docs/architecture.md, "The front
 * door", says why and how errors are answered.
 */
import * as HttpServer from "@effect/platform/HttpServer"
import type * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServerError from "@effect/platform/HttpServerError"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { Cause, Context, Effect, FiberSet, Layer, Option } from "effect"
import * as Http from "node:http"
import type * as Net from "node:net"
import { URGENT } from "../internal/Scheduler.js"
import { ConnectError, errorResponse } from "./Connect.js"
import { Door } from "./Door.js"
import type { DoorService } from "./Door.js"
import * as Agent from "./front/Agent.js"
import { protocolOf, writeError } from "./front/Protocol.js"
import type { ErrorOptions } from "./front/Protocol.js"
import { Transport } from "./Service.js"

/** A Node request listener. */
export type NodeHandler = (request: Http.IncomingMessage, response: Http.ServerResponse) => void

const STARTING = new ConnectError("unavailable", "the server is starting or stopping; try again in a moment")
const NO_APP = new ConnectError("unavailable", "this listener is not serving this request yet (or any more); try again in a moment")

/** An agent call in a protocol `protocolOf` does not serve (gRPC, gRPC-Web): 415, as Connect and gRPC ask. */
const notServed = (call: Agent.AgentCall) =>
  new ConnectError("unimplemented", `${call} is served over Connect (application/proto, application/connect+proto); gRPC and gRPC-Web are not served yet`)

/** Answers a request the front door refuses, its body drained unread so the connection can serve the next. */
const refuse = (request: Http.IncomingMessage, response: Http.ServerResponse, error: ConnectError, options: ErrorOptions = {}) => {
  writeError(response, error, options)
  request.resume()
}

/**
 * A listener's front door. What it sends requests to is installed when the server is built
 * (the door and the agent wire by `layer`, the app by `layerServer`'s `serve`), after the
 * listener is bound: until then, and while `accepting` is false, a request is answered 503.
 */
export class FrontDoor {
  /** False until every listener is bound, and again once the server stops. */
  accepting = true
  /** The request policy (none: every request passes, for tests of the transport alone). */
  door: DoorService | undefined = undefined
  /** The agent calls' wire (none: their paths are the app's like any other). */
  agent: Agent.AgentWire | undefined = undefined
  /** The Effect app: every request that is not an agent call. */
  app: NodeHandler | undefined = undefined
  readonly server: Http.Server

  constructor(options: Http.ServerOptions = {}) {
    this.server = Http.createServer(options, this.handle)
  }

  /** The listener's one request listener; the proxy and the TLS listener call it for the requests they hand on. */
  readonly handle: NodeHandler = (request, response) => {
    if (!this.accepting) return refuse(request, response, STARTING, { headers: { "retry-after": "1" } })
    if (this.door !== undefined && !this.door.http1(request, response)) return
    this.route(request, response)
  }

  /** Sends a request the door let through to the one place that serves it. */
  readonly route: NodeHandler = (request, response) => {
    const agent = this.agent
    const call = agent === undefined ? undefined : Agent.agentCallOf(request.method, request.url ?? "")
    if (agent !== undefined && call !== undefined) {
      const protocol = protocolOf(request.headers["content-type"])
      if (protocol === undefined) return refuse(request, response, notServed(call), { status: 415 })
      return agent(call, protocol, request, response)
    }
    if (this.app !== undefined) return this.app(request, response)
    refuse(request, response, NO_APP, { headers: { "retry-after": "1" } })
  }
}

/** The HTTP/1.1 listener's front door, where the transport installs the door and the agent wire. */
export class HttpFront extends Context.Tag("cursor-byok/HttpFront")<HttpFront, FrontDoor>() {}

/**
 * Installs the door and the agent wire on the server's `HttpFront`; when the scope closes the
 * wire goes (its transport with it) and the door stays: a stopping server is no less guarded.
 */
export const layer: Layer.Layer<never, never, Transport | Door | HttpFront> = Layer.scopedDiscard(Effect.gen(function*() {
  const front = yield* HttpFront
  const transport = yield* Transport
  const door = yield* Door
  // A request's fiber is urgent, as the Effect app's (`internal/Scheduler.ts`).
  const runFork = yield* Effect.withSchedulingPriority(FiberSet.makeRuntime<never>(), URGENT)
  front.door = door
  front.agent = Agent.make(transport, runFork)
  yield* Effect.addFinalizer(() => Effect.sync(() => void (front.agent = undefined)))
}))

/** The Connect error of a failure the app's routes left that says what went wrong: no route, a body that could not be read. */
const errorOfFailure = (failure: unknown): ConnectError | undefined => {
  if (!HttpServerError.isServerError(failure)) return undefined
  if (failure._tag === "RouteNotFound") return new ConnectError("not_found", `no route for ${failure.request.method} ${failure.request.url}`)
  if (failure._tag === "RequestError") return new ConnectError("invalid_argument", `the request could not be read: ${failure.reason}`)
  return undefined
}

/**
 * A failure the app's routes did not answer is a Connect error too: `not_found` with no route,
 * `invalid_argument` for a body that could not be read, otherwise `internal` (logged); a client
 * gone away gets no answer at all.
 */
const answeringFailures = <E, R>(app: HttpApp.Default<E, R>): HttpApp.Default<never, R> =>
  Effect.catchAllCause(app, (cause) => {
    if (Cause.isInterruptedOnly(cause)) return Effect.failCause(cause as Cause.Cause<never>)
    const known = Option.flatMap(Cause.failureOption(cause), (failure) => Option.fromNullable(errorOfFailure(failure)))
    return Option.isSome(known)
      ? Effect.succeed(errorResponse(known.value))
      : Effect.as(Effect.logError("the request could not be handled", cause), errorResponse(new ConnectError("internal", "the request could not be handled")))
  })

const listen = (server: Http.Server, options: Net.ListenOptions) =>
  Effect.async<void, HttpServerError.ServeError>((resume) => {
    const onError = (cause: Error) => resume(Effect.fail(new HttpServerError.ServeError({ cause })))
    server.on("error", onError)
    server.listen(options, () => {
      server.off("error", onError)
      resume(Effect.void)
    })
  })

const close = (server: Http.Server) =>
  Effect.async<void>((resume) => {
    if (!server.listening) return resume(Effect.void)
    server.close((error) => resume(error === undefined ? Effect.void : Effect.die(error)))
  })

/**
 * Effect's `HttpServer` on a front door: binds its listener (closed with the scope), and
 * `serve` makes the app one Node handler (`NodeHttpServer.makeHandler`) that the door sends
 * every request but the agent calls to. The app is the only one: a second `serve` replaces it.
 */
const makeServer = (front: FrontDoor, options: Net.ListenOptions) =>
  Effect.gen(function*() {
    yield* Effect.acquireRelease(listen(front.server, options), () => close(front.server))
    const address = front.server.address()!
    return HttpServer.make({
      address: typeof address === "string"
        ? { _tag: "UnixAddress", path: address }
        : { _tag: "TcpAddress", hostname: address.address === "::" ? "0.0.0.0" : address.address, port: address.port },
      serve: (app, middleware) =>
        Effect.gen(function*() {
          const handled = answeringFailures(app)
          const handler = yield* (middleware === undefined ? NodeHttpServer.makeHandler(handled) : NodeHttpServer.makeHandler(handled, middleware))
          front.app = handler
          yield* Effect.addFinalizer(() => Effect.sync(() => {
            if (front.app === handler) front.app = undefined
          }))
        })
    })
  })

/** The HTTP/1.1 listener on `front`, listening, as Effect's `HttpServer` (with the platform services Node's gives), and the front door as `HttpFront`. */
export const layerServer = (front: FrontDoor, options: Net.ListenOptions) =>
  Layer.mergeAll(Layer.scoped(HttpServer.HttpServer, makeServer(front, options)), NodeHttpServer.layerContext, Layer.succeed(HttpFront, front))
