/**
 * The front door: Node's HTTP/1.1 server with one `request` listener, which also takes the
 * requests the proxy and the TLS listener hand on, and the HTTP/2 streams of both HTTP/2
 * listeners (`Run.ts`, after the door's check). Each request goes through it once: answered
 * 503 while the server is not accepting, checked by the door (`Door.ts`), then sent to one
 * place in the protocol its content type names (`front/Protocol.ts`: Connect, gRPC, gRPC-Web):
 * an agent call (RunSSE, BidiAppend, `Run`) to its wire (`front/Agent.ts`), a side RPC to its
 * procedure (`front/Rpc.ts`), anything else to the Effect app that `HttpLayerRouter.serve`
 * serves through this listener's `HttpServer` (`layerServer`). docs/architecture.md, "The front
 * door", says why and how errors are answered.
 */
import * as HttpServer from "@effect/platform/HttpServer"
import type * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServerError from "@effect/platform/HttpServerError"
import { ConfigError } from "../Config.js"
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
import type { CallKind, ErrorOptions, NodeRequest, NodeResponse, Protocol } from "./front/Protocol.js"
import * as Rpc from "./front/Rpc.js"
import { RUN_NEEDS_HTTP2, RUN_PATH } from "./front/Run.js"
import type { RpcRoute } from "./front/Rpc.js"
import { Transport } from "./Service.js"

/** A Node request listener. */
export type NodeHandler = (request: Http.IncomingMessage, response: Http.ServerResponse) => void

/** A request listener for HTTP/1.1 and HTTP/2's compatibility API alike. */
export type FrontHandler = (request: NodeRequest, response: NodeResponse) => void

/** Capture mode at the door (`capture/Tap.ts`): while `on`, a call's protocol is wrapped to record it. */
export interface CaptureTap {
  readonly on: boolean
  readonly agent: (call: Agent.AgentCall, protocol: Protocol, request: NodeRequest, response: NodeResponse) => Protocol
  readonly rpc: (path: string, protocol: Protocol, request: NodeRequest) => Protocol
}

const STARTING = new ConnectError("unavailable", "the server is starting or stopping; try again in a moment")
const NO_APP = new ConnectError("unavailable", "this listener is not serving this request yet (or any more); try again in a moment")

/** A content type none of the protocols serves: 415, as Connect and gRPC ask. */
const notServed = (contentType: string | undefined) =>
  new ConnectError("unimplemented", `${JSON.stringify(contentType ?? "")} is not a form served here (Connect: application/proto, application/json, application/connect+proto; gRPC: application/grpc; gRPC-Web: application/grpc-web+proto, application/grpc-web-text)`)

/** The path of a request, its query aside. */
const pathOf = (url: string) => {
  const query = url.indexOf("?")
  return query === -1 ? url : url.slice(0, query)
}

/** `/package.Service/Method`: a procedure's path (a dotted service name: the app's own routes have none). */
const PROCEDURE_PATH = /^\/\w+(\.\w+)+\/\w+$/
/** The RPC protocols' media types (not OTLP's protobuf, which is the app's). */
const RPC_TYPE = /^\s*application\/(proto|json|connect\+|grpc)/i

/** Answers a request the front door refuses, its body drained unread so the connection can serve the next. */
const refuse = (request: NodeRequest, response: NodeResponse, error: ConnectError, options: ErrorOptions = {}) => {
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
  /** How long a stop waits for the requests in flight before it closes their connections. */
  drainMs = 5_000
  /** True once the server has accepted requests: a start that failed has nothing to drain. */
  started = false
  /** The request policy (none: every request passes, for tests of the transport alone). */
  door: DoorService | undefined = undefined
  /** The agent calls' wire (none: their paths are the app's like any other). */
  agent: Agent.AgentWire | undefined = undefined
  /** The side RPCs by path, and their wire (none: their paths are the app's like any other). */
  rpcs: ReadonlyMap<string, RpcRoute> = new Map()
  rpc: Rpc.RpcWire | undefined = undefined
  /** Capture mode (none: never captures). */
  capture: CaptureTap | undefined = undefined
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

  /** Sends a request the door let through to the one place that serves it (an HTTP/2 stream comes here once checked). */
  readonly route: FrontHandler = (request, response) => {
    const url = request.url ?? ""
    const agent = this.agent
    const call = agent === undefined ? undefined : Agent.agentCallOf(request.method, url, "stream" in response)
    if (agent !== undefined && call !== undefined) {
      return this.rpcIn(Agent.KIND[call], request, response, (protocol) => {
        const capture = this.capture
        agent(call, capture !== undefined && capture.on ? capture.agent(call, protocol, request, response) : protocol, request, response)
      })
    }
    const rpc = this.rpc
    if (rpc !== undefined && request.method === "POST") {
      const path = pathOf(url)
      const route = this.rpcs.get(path)
      if (route !== undefined) {
        // A server stream answers `application/connect+proto` in Connect (the `bidi` form), as Connect clients read one.
        return this.rpcIn(route.stream === undefined ? "unary" : "bidi", request, response, (protocol) => {
          const capture = this.capture
          rpc(route, path, capture !== undefined && capture.on ? capture.rpc(path, protocol, request) : protocol, request, response)
        })
      }
      // A procedure this server does not have, asked in an RPC protocol: said so in that protocol.
      if (PROCEDURE_PATH.test(path) && RPC_TYPE.test(request.headers["content-type"] ?? "")) {
        return this.rpcIn("unary", request, response, (protocol) => {
          request.resume()
          protocol.error(response, "unary", path === RUN_PATH ? RUN_NEEDS_HTTP2 : new ConnectError("unimplemented", `POST ${path} is not implemented by this server`))
        })
      }
    }
    if (this.app !== undefined) return this.app(request as Http.IncomingMessage, response as Http.ServerResponse)
    refuse(request, response, NO_APP, { headers: { "retry-after": "1" } })
  }

  /** Serves an RPC in its request's protocol, or refuses a content type none serves with 415. */
  private rpcIn(kind: CallKind, request: NodeRequest, response: NodeResponse, served: (protocol: NonNullable<ReturnType<typeof protocolOf>>) => void) {
    const protocol = protocolOf(request.headers["content-type"], kind)
    return protocol === undefined ? refuse(request, response, notServed(request.headers["content-type"]), { status: 415 }) : served(protocol)
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
  // Several instances on one database: each request's calls served where its session is (`cluster/Routing.ts`).
  const router = yield* Effect.serviceOption(Agent.AgentRouter)
  front.door = door
  front.agent = Agent.make(transport, runFork, Option.getOrUndefined(router))
  yield* Effect.addFinalizer(() => Effect.sync(() => void (front.agent = undefined)))
}))

/** Installs the side RPCs on the server's `HttpFront`, served in every protocol until the scope closes. */
export const layerRpcs = (routes: ReadonlyMap<string, RpcRoute>): Layer.Layer<never, never, HttpFront> => Layer.scopedDiscard(Effect.gen(function*() {
  const front = yield* HttpFront
  const runFork = yield* Effect.withSchedulingPriority(FiberSet.makeRuntime<never>(), URGENT)
  front.rpcs = routes
  front.rpc = Rpc.make(runFork)
  yield* Effect.addFinalizer(() => Effect.sync(() => {
    front.rpc = undefined
    front.rpcs = new Map()
  }))
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

/** Why the main port could not be listened on, and what to do: one line. */
const listenFailure = (options: Net.ListenOptions, cause: NodeJS.ErrnoException): ConfigError => {
  const where = `${options.host ?? "0.0.0.0"}:${options.port ?? 0}`
  return new ConfigError({
    message: cause.code === "EADDRINUSE"
      ? `the main port ${where} is in use (another program, or another cursor-byok): stop it, or choose another port (\`port\` or BYOK_PORT)`
      : cause.code === "EACCES"
      ? `the main port ${where} needs privileges this user does not have: choose a port above 1023 (\`port\` or BYOK_PORT)`
      : cause.code === "EADDRNOTAVAIL"
      ? `the address ${options.host} is not one of this machine's: set \`host\` (BYOK_HOST) to one of its addresses, 127.0.0.1 by default`
      : `the main listener could not listen on ${where}: ${cause.message}`
  })
}

const listen = (server: Http.Server, options: Net.ListenOptions) =>
  Effect.async<void, ConfigError>((resume) => {
    const onError = (cause: NodeJS.ErrnoException) => resume(Effect.fail(listenFailure(options, cause)))
    server.once("error", onError)
    server.listen(options, () => {
      server.off("error", onError)
      resume(Effect.void)
    })
  })

/**
 * Closes the listener: no new connection, idle ones closed at once, and the requests in flight
 * given `drainMs` to finish (a turn's commit, an append's answer; open streams were ended with a
 * retryable error by the transport first), then every connection closed, whatever the clients
 * do: a stop, or a start that failed, is never held up by a client.
 */
const close = (server: Http.Server, drainMs: number) =>
  Effect.async<void>((resume) => {
    if (!server.listening) {
      server.closeAllConnections()
      return resume(Effect.void)
    }
    const deadline = setTimeout(() => server.closeAllConnections(), drainMs)
    server.close(() => {
      clearTimeout(deadline)
      resume(Effect.void)
    })
    server.closeIdleConnections()
  })

/**
 * Effect's `HttpServer` on a front door: binds its listener (closed with the scope), and
 * `serve` makes the app one Node handler (`NodeHttpServer.makeHandler`) that the door sends
 * every request but the agent calls to. The app is the only one: a second `serve` replaces it.
 */
const makeServer = (front: FrontDoor, options: Net.ListenOptions) =>
  Effect.gen(function*() {
    yield* Effect.acquireRelease(listen(front.server, options), () => close(front.server, front.started ? front.drainMs : 0))
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
