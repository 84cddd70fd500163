/**
 * Cursor's HTTP/2 agent transport: `agent.v1.AgentService/Run`, Connect bidi streaming
 * (`application/connect+proto`, envelopes both ways, gzip accepted). The client's messages on
 * the request stream go to the turn session in order (`Transport.runMessage`, numbered by their
 * place on the stream); the session's frames (heartbeats, the turn, its end-stream with
 * `ErrorDetails`) are the response. So a turn behaves here as on RunSSE + BidiAppend.
 *
 * - The client half-closing its side is the end of its input, not a cancel: the turn goes on and
 *   its output still flows.
 * - A reset stream or a dropped connection is a disconnect, not a cancel (the turn runs on; a
 *   later request with `resume_action` re-attaches, see `Resume.ts`).
 *
 * Served by Node's `http2` module directly: Effect's platform-node HTTP server speaks HTTP/1.1
 * only. Two listeners: cleartext h2c with prior knowledge (the CLI, tests), and TLS with ALPN
 * `h2` for the IDE. A client that speaks HTTP/1.1 to either gets a Connect error, not a hang.
 */
import { Cause, Context, Deferred, Effect, Exit, Fiber, FiberSet, Layer, Option, Stream } from "effect"
import { randomUUID } from "node:crypto"
import type * as Http from "node:http"
import * as Http2 from "node:http2"
import * as Net from "node:net"
import type * as Tls from "node:tls"
import { ConfigError } from "../Config.js"
import * as Dialect from "../Dialect.js"
import { joinFrames, Transport } from "./Service.js"
import type { TransportService } from "./Service.js"
import { ConnectError, endStreamFrame, FLAG_END_STREAM, httpStatusOf, splitEnvelopes } from "./Connect.js"
import { CURSOR_TLS, Door, type Listener, PLAIN } from "./Door.js"
import { capConnections, type ConnectionLimits, defaultConnectionLimits, http2Settings } from "./Limits.js"
import { parentLinkOf } from "./Subagents.js"
import { URGENT } from "../internal/Scheduler.js"

export const RUN_PATH = "/agent.v1.AgentService/Run"

export interface Http2Options {
  readonly host: string
  /** h2c with prior knowledge; undefined: off. 0: an ephemeral port. */
  readonly cleartextPort: number | undefined
  /** TLS with ALPN h2; undefined: off. */
  readonly tls: { readonly port: number; readonly cert: string | Buffer; readonly key: string | Buffer } | undefined
  /**
   * What the TLS listener does with everything but `Run` (HTTP/1.1 requests, other HTTP/2
   * procedures): hand it on (to the HTTP/1.1 server, so the agent URL serves RunSSE, BidiAppend
   * and the side RPCs too). Without it, a readable Connect error.
   */
  readonly others?: {
    readonly http1: (request: Http.IncomingMessage, response: Http.ServerResponse) => void
    readonly http2: (stream: Http2.ServerHttp2Stream, headers: Http2.IncomingHttpHeaders) => void
  } | undefined
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
    message: `this port (${port}) serves agent.v1.AgentService/Run over HTTP/2 only; use HTTP/2, or RunSSE + BidiAppend on the HTTP/1.1 port`
  })

const http1Refusal = (port: string) => {
  const body = http1RefusalBody(port)
  return `HTTP/1.1 505 HTTP Version Not Supported\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`
}

/** A unary-style Connect error answer on a stream that has not responded yet. */
const refuse = (stream: Http2.ServerHttp2Stream, error: ConnectError) => {
  if (stream.destroyed || stream.headersSent) return
  stream.respond({ ":status": httpStatusOf(error.code), "content-type": "application/json" })
  stream.end(JSON.stringify(error.toJson()))
}

/**
 * Splits the request stream into client messages (`Connect.splitEnvelopes`, each at most
 * `maxBytes`). Fails with a Connect error on an oversized or undecodable envelope (the stream
 * then ends with it).
 */
const clientMessages = (stream: Http2.ServerHttp2Stream, maxBytes: number) =>
  // Not destroyed at the end of the input: the response side lives on after a half-close.
  Stream.fromAsyncIterable(stream.iterator({ destroyOnReturn: false }) as AsyncIterable<Buffer>, () => new ConnectError("canceled", "the client reset the stream")).pipe(
    Stream.mapAccumEffect(new Uint8Array(0), (pending: Uint8Array, chunk: Buffer) => {
      const split = splitEnvelopes(pending.length === 0 ? chunk : Buffer.concat([pending, chunk]), maxBytes)
      return split instanceof ConnectError ? Effect.fail(split) : Effect.succeed([split.rest, split.envelopes] as const)
    }),
    Stream.flattenIterables
  )

/** One `Run` call: input and output bound to the request's session. */
const serveRun = (transport: TransportService, stream: Http2.ServerHttp2Stream, headers: Http2.IncomingHttpHeaders) =>
  Effect.gen(function*() {
    const contentType = String(headers["content-type"] ?? "")
    if (!contentType.startsWith("application/connect+proto")) {
      return refuse(stream, new ConnectError("invalid_argument", `Run takes application/connect+proto, not ${contentType === "" ? "no content type" : contentType}`))
    }
    const encoding = String(headers["connect-content-encoding"] ?? "identity").toLowerCase()
    if (encoding !== "identity" && encoding !== "gzip") {
      return refuse(stream, new ConnectError("unimplemented", `connect-content-encoding ${encoding} is not supported (gzip and identity are)`))
    }
    const header = headers["x-request-id"]
    const requestId = typeof header === "string" && header !== "" ? header : randomUUID()
    stream.respond({ ":status": 200, "content-type": "application/connect+proto", "connect-accept-encoding": "gzip" })

    // The turn's frames go to the stream in the writer's own call; the stream buffers what its
    // flow-control window cannot take yet (node:http2 hands them to the socket at the end of the
    // event-loop iteration). The output ends with the end-stream frame.
    const outputEnded = yield* Deferred.make<void>()
    const attach = yield* transport.runOutput(requestId, parentLinkOf(headers))
    const detach = yield* attach({
      write: (frames) => {
        if (!stream.destroyed && !stream.writableEnded) stream.write(joinFrames(frames))
      },
      end: () => {
        if (!stream.destroyed && !stream.writableEnded) stream.end()
        Deferred.unsafeDone(outputEnded, Exit.void)
      }
    })
    stream.once("close", detach)
    const stopOutput = Effect.sync(detach)
    /** Ends the call with `error` (the session is not ended: a later request may resume its turn). */
    const endWith = (error: ConnectError) =>
      Effect.gen(function*() {
        yield* stopOutput
        yield* Effect.logWarning(`Run ${requestId} ended: ${error.code}: ${error.message}`)
        if (!stream.destroyed && !stream.writableEnded) stream.end(endStreamFrame(error))
      })

    let seqno = 0
    const input = clientMessages(stream, transport.options.bidiAppendMaxBytes).pipe(
      Stream.runForEach(({ flags, payload }) => {
        if ((flags & FLAG_END_STREAM) !== 0) return Effect.void
        const decoded = Dialect.decodeClientMessage(payload)
        const message = decoded._tag === "Right" ? decoded.right : Dialect.ClientMessage.Unknown({ where: "undecodable Run message", fields: [] })
        const at = seqno++
        return Effect.zipRight(
          decoded._tag === "Left" ? Effect.logWarning(`transport: Run message ${at} of ${requestId} dropped: ${decoded.left.message}`) : Effect.void,
          transport.runMessage(requestId, at, message)
        )
      })
    )
    const ended = yield* Effect.exit(input)
    if (Exit.isFailure(ended)) {
      const error = Option.getOrUndefined(Cause.failureOption(ended.cause))
      // A reset stream is a disconnect: the writer stops, the turn runs on.
      if (stream.destroyed || error === undefined || error.code === "canceled") return yield* stopOutput
      return yield* endWith(error)
    }
    // Half-closed: the end of the client's input, not a cancel. A stream that sent nothing to run is told so.
    // Node ends the request body of a reset stream before it reports the reset: look once more.
    yield* Effect.async<void>((resume) => void setImmediate(() => resume(Effect.void)))
    if (stream.destroyed || stream.aborted || (stream.rstCode ?? 0) !== 0) return yield* stopOutput
    const nothingToRun = yield* transport.runInputEnded(requestId)
    if (seqno === 0 || nothingToRun) return yield* endWith(new ConnectError("invalid_argument", "the Run stream ended without a run request"))
    yield* Deferred.await(outputEnded)
  }).pipe(
    Effect.onInterrupt(() => Effect.sync(() => stream.destroyed || stream.close())),
    Effect.annotateLogs({ wire: "Run" })
  )

/** The door's check of a stream (true: go on), or none (tests of the transport alone). */
type Gate = (stream: Http2.ServerHttp2Stream, headers: Http2.IncomingHttpHeaders) => boolean

const onStream = (
  transport: TransportService,
  runFork: <A, E>(effect: Effect.Effect<A, E, never>) => Fiber.RuntimeFiber<A, E>,
  gate: Gate,
  others?: (stream: Http2.ServerHttp2Stream, headers: Http2.IncomingHttpHeaders) => void
) =>
  (stream: Http2.ServerHttp2Stream, headers: Http2.IncomingHttpHeaders) => {
    stream.on("error", () => undefined)
    if (!gate(stream, headers)) return
    // Handed on after the check: the mark says where it came in (the door took the client's off).
    if (headers[":path"] !== RUN_PATH && others !== undefined) return others(stream, headers)
    if (headers[":path"] !== RUN_PATH || headers[":method"] !== "POST") {
      return refuse(stream, new ConnectError("unimplemented", `${headers[":method"]} ${headers[":path"]} is not served on the HTTP/2 port (only ${RUN_PATH})`))
    }
    const fiber = runFork(serveRun(transport, stream, headers))
    // The client went away: stop this call's work (the session and its turn go on).
    stream.on("close", () => runFork(Fiber.interrupt(fiber)))
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

/** The HTTP/2 listeners, serving `Run` until the scope closes. */
export const layer = (options: Http2Options): Layer.Layer<Http2Endpoints, ConfigError, Transport> =>
  Layer.scoped(Http2Endpoints, Effect.gen(function*() {
    const transport = yield* Transport
    const door = Option.getOrUndefined(yield* Effect.serviceOption(Door))
    const gateOf = (listener: Listener): Gate => door === undefined ? () => true : (stream, headers) => door.http2(stream, headers, listener)
    const limits = options.limits ?? defaultConnectionLimits
    // A `Run` stream's fiber is urgent, as an HTTP/1.1 request's (`internal/Scheduler.ts`).
    const runFork = yield* Effect.withSchedulingPriority(FiberSet.makeRuntime<never>(), URGENT)
    let cleartextPort: number | undefined
    let tlsPort: number | undefined

    if (options.cleartextPort !== undefined) {
      const h2 = Http2.createServer({ settings: http2Settings(limits) })
      h2.setTimeout(limits.idleTimeoutMs)
      const sessions = trackSessions(h2)
      h2.on("stream", onStream(transport, runFork, gateOf(PLAIN)))
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
      // HTTP/1.1 is allowed in the handshake only to be refused readably (a client offering only
      // http/1.1 would otherwise get a bare TLS alert). The 'request' listener would also set up
      // Node's compatibility layer on every HTTP/2 stream: that one is removed, ours stays.
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
      const others = options.others
      h2.on("request", (request: Http.IncomingMessage, response: Http.ServerResponse) => {
        if (request.httpVersionMajor === 2) return
        if (others !== undefined) return others.http1(request, response)
        const body = http1RefusalBody(String(tlsPort))
        response.writeHead(505, { "content-type": "application/json", connection: "close" })
        response.end(body)
      })
      h2.removeAllListeners("stream")
      h2.on("stream", onStream(transport, runFork, gateOf(CURSOR_TLS), others?.http2))
      h2.on("unknownProtocol", (socket: Tls.TLSSocket) => socket.end(http1Refusal(String(tlsPort))))
      tlsPort = yield* listen(h2, options.host, options.tls.port, "TLS")
      yield* Effect.addFinalizer(() => close(h2, sessions))
    }
    return { cleartextPort, tlsPort }
  }))
