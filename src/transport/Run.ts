/**
 * The HTTP/2 listeners: cleartext h2c with prior knowledge (the CLI, tests) and TLS with ALPN
 * `h2` for the IDE. Every stream, once the door let it through, goes to the front door's
 * `route` (`Front.ts`): `Run` (`front/Run.ts`), the other agent calls and the side RPCs, in
 * whichever of Connect, gRPC and gRPC-Web it speaks. Served by Node's `http2` module directly:
 * Effect's platform-node HTTP server speaks HTTP/1.1 only. A client that speaks HTTP/1.1 to the
 * h2c port gets a readable error, not a hang; on the TLS port it is handed to the HTTP/1.1 door.
 */
import { Context, Effect, Layer, Option } from "effect"
import type * as Http from "node:http"
import * as Http2 from "node:http2"
import * as Net from "node:net"
import type * as Tls from "node:tls"
import { ConfigError } from "../Config.js"
import { CURSOR_TLS, Door, type Listener, PLAIN } from "./Door.js"
import { HttpFront } from "./Front.js"
import type { FrontHandler, NodeHandler } from "./Front.js"
import { capConnections, type ConnectionLimits, defaultConnectionLimits, http2Settings } from "./Limits.js"

export { RUN_PATH } from "./front/Run.js"

export interface Http2Options {
  readonly host: string
  /** h2c with prior knowledge; undefined: off. 0: an ephemeral port. */
  readonly cleartextPort: number | undefined
  /** TLS with ALPN h2; undefined: off. */
  readonly tls: { readonly port: number; readonly cert: string | Buffer; readonly key: string | Buffer } | undefined
  /**
   * Where the TLS listener hands an HTTP/1.1 request (the front door's `handle`, marked as come
   * through TLS). Without it, a readable error.
   */
  readonly http1?: NodeHandler | undefined
  /** Connection bounds; the defaults otherwise. */
  readonly limits?: ConnectionLimits | undefined
}

/** The bound listeners (ports as bound, for ephemeral ones). */
export class Http2Endpoints extends Context.Tag("cursor-byok/transport/Http2Endpoints")<Http2Endpoints, {
  readonly cleartextPort: number | undefined
  readonly tlsPort: number | undefined
}>() {}

const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")


/** What an HTTP/1.1 client gets on an HTTP/2 port: a Connect error it can read. */
const http1RefusalBody = (port: string) =>
  JSON.stringify({
    code: "unimplemented",
    message: `this port (${port}) serves HTTP/2 only (agent.v1.AgentService/Run and the rest); use HTTP/2, or RunSSE + BidiAppend on the HTTP/1.1 port`
  })

const http1Refusal = (port: string) => {
  const body = http1RefusalBody(port)
  return `HTTP/1.1 505 HTTP Version Not Supported\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`
}

/** The door's check of a stream (true: go on), or none (tests of the transport alone). */
type Gate = (stream: Http2.ServerHttp2Stream, headers: Http2.IncomingHttpHeaders) => boolean

type StreamListener = (stream: Http2.ServerHttp2Stream, headers: Http2.IncomingHttpHeaders, flags: number, rawHeaders: Array<string>) => void

/**
 * Every stream of `server` goes to the front door's `route` once the door let it through, as
 * Node's compatibility request and response (`Run` among the agent calls, the side RPCs, the
 * app's routes). Node makes those objects in the stream listener a `request` listener installs:
 * that one is taken off the server and called after the door's check.
 */
const routeStreams = (server: Http2.Http2Server | Http2.Http2SecureServer, gate: Gate, route: FrontHandler, http1: NodeHandler | undefined) => {
  server.on("request", (request: Http.IncomingMessage | Http2.Http2ServerRequest, response: Http.ServerResponse | Http2.Http2ServerResponse) =>
    request.httpVersionMajor === 2 || http1 === undefined
      ? route(request, response)
      : http1(request as Http.IncomingMessage, response as Http.ServerResponse))
  const compat = server.listeners("stream")[0] as StreamListener
  server.removeAllListeners("stream")
  server.on("stream", (stream: Http2.ServerHttp2Stream, headers: Http2.IncomingHttpHeaders, flags: number, rawHeaders: Array<string>) => {
    stream.on("error", () => undefined)
    if (gate(stream, headers)) compat(stream, headers, flags, rawHeaders)
  })
}

/** Listens on `port`; resolves with the bound port. */
const listen = (server: Net.Server, host: string, port: number, what: string) =>
  Effect.async<number, ConfigError>((resume) => {
    server.once("error", (error: NodeJS.ErrnoException) =>
      resume(Effect.fail(new ConfigError({
        message: error.code === "EADDRINUSE"
          ? `the ${what} port ${host}:${port} is in use: choose another (${what === "h2c" ? "http2.cleartextPort or BYOK_H2C_PORT, or off" : "http2.tls.port or BYOK_TLS_PORT"})`
          : `the ${what} listener could not listen on ${host}:${port}: ${error.message}`
      }))))
    server.listen({ port, host, backlog: 4096 }, () => resume(Effect.succeed((server.address() as Net.AddressInfo).port)))
  })

const close = (server: Net.Server, sessions: Set<Http2.ServerHttp2Session>) =>
  Effect.async<void>((resume) => {
    for (const session of sessions) session.destroy()
    server.close(() => resume(Effect.void))
  })

const trackSessions = (server: Http2.Http2Server | Http2.Http2SecureServer) => {
  const sessions = new Set<Http2.ServerHttp2Session>()
  server.on("session", (session: Http2.ServerHttp2Session) => {
    sessions.add(session)
    session.on("close", () => sessions.delete(session))
    session.on("error", () => undefined)
  })
  return sessions
}

/** The HTTP/2 listeners, their streams sent to the front door (`HttpFront`) until the scope closes. */
export const layer = (options: Http2Options): Layer.Layer<Http2Endpoints, ConfigError, HttpFront> =>
  Layer.scoped(Http2Endpoints, Effect.gen(function*() {
    const front = yield* HttpFront
    const door = Option.getOrUndefined(yield* Effect.serviceOption(Door))
    const gateOf = (listener: Listener): Gate => door === undefined ? () => true : (stream, headers) => door.http2(stream, headers, listener) !== false
    const limits = options.limits ?? defaultConnectionLimits
    let cleartextPort: number | undefined
    let tlsPort: number | undefined

    if (options.cleartextPort !== undefined) {
      const h2 = Http2.createServer({ settings: http2Settings(limits) })
      h2.setTimeout(limits.idleTimeoutMs)
      const sessions = trackSessions(h2)
      routeStreams(h2, gateOf(PLAIN), front.route, undefined)
      // Prior knowledge: HTTP/2 starts with its preface; anything else is an HTTP/1.1 client, refused readably.
      const server = capConnections(Net.createServer((socket) => {
        socket.on("error", () => undefined)
        // A client that sends nothing is not kept.
        socket.setTimeout(limits.headersTimeoutMs, () => socket.destroy())
        socket.once("data", (first: Buffer) => {
          socket.setTimeout(0)
          socket.pause()
          socket.unshift(first)
          const head = first.subarray(0, Math.min(first.length, PREFACE.length))
          // The HTTP/2 session takes the bytes read so far from the socket's buffer (resuming it here would lose them).
          if (head.equals(PREFACE.subarray(0, head.length))) {
            h2.emit("connection", socket)
          } else {
            socket.resume()
            socket.end(http1Refusal(String(cleartextPort)))
          }
        })
      }), limits.maxConnections)
      cleartextPort = yield* listen(server, options.host, options.cleartextPort, "h2c")
      yield* Effect.addFinalizer(() => close(server, sessions))
    }

    if (options.tls !== undefined) {
      // HTTP/1.1 is allowed in the handshake to be handed to the HTTP/1.1 door (or refused
      // readably: a client offering only http/1.1 would otherwise get a bare TLS alert).
      const h2 = Http2.createSecureServer({
        cert: options.tls.cert,
        key: options.tls.key,
        allowHTTP1: true,
        settings: http2Settings(limits),
        handshakeTimeout: limits.headersTimeoutMs
      })
      // Past the cap a connection is closed before TLS (no readable answer can go before the handshake).
      h2.maxConnections = limits.maxConnections
      h2.setTimeout(limits.idleTimeoutMs)
      const sessions = trackSessions(h2)
      const http1: NodeHandler = options.http1 ?? ((_, response) => {
        const body = http1RefusalBody(String(tlsPort))
        response.writeHead(505, { "content-type": "application/json", connection: "close" })
        response.end(body)
      })
      routeStreams(h2, gateOf(CURSOR_TLS), front.route, http1)
      h2.on("unknownProtocol", (socket: Tls.TLSSocket) => socket.end(http1Refusal(String(tlsPort))))
      tlsPort = yield* listen(h2, options.host, options.tls.port, "TLS")
      yield* Effect.addFinalizer(() => close(h2, sessions))
    }
    return { cleartextPort, tlsPort }
  }))
