/**
 * `agent.v1.AgentService/Run` on an HTTP/2 stream: a bidi stream in any of the three protocols
 * (envelopes both ways; gzip accepted). The client's messages go to the turn session in order
 * (`Transport.runMessage`, numbered by their place on the stream); the session's frames
 * (heartbeats, the turn, its outcome) are the response. So a turn behaves here as on RunSSE +
 * BidiAppend.
 *
 * - The client half-closing its side is the end of its input, not a cancel: the turn goes on and
 *   its output still flows.
 * - A reset stream or a dropped connection is a disconnect, not a cancel (the turn runs on; a
 *   later request with `resume_action` re-attaches, see `Resume.ts`).
 */
import { Cause, Deferred, Effect, Exit, Option, Stream } from "effect"
import { randomUUID } from "node:crypto"
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2"
import * as Dialect from "../../Dialect.js"
import { clientVersionOf, sinkFor } from "../../Drift.js"
import { ConnectError, FLAG_END_STREAM, splitEnvelopes } from "../Connect.js"
import type { TransportService } from "../Service.js"
import { parentLinkOf } from "../Subagents.js"
import type { Protocol } from "./Wire.js"
import { callerOf } from "../Door.js"

/** The path of `Run`. */
export const RUN_PATH = "/agent.v1.AgentService/Run"

/** Why a request for `Run` on HTTP/1.1 is refused: it is a bidi stream. */
export const RUN_NEEDS_HTTP2 = new ConnectError(
  "unimplemented",
  `${RUN_PATH} is a bidi stream and needs HTTP/2: use the h2c or TLS port, or RunSSE + BidiAppend on HTTP/1.1`
)

const TEXT = /^\s*application\/grpc-web-text/i
const CONNECT_STREAM = /^\s*application\/connect\+proto/i

/**
 * Splits the request body into client messages (`Connect.splitEnvelopes`, each at most
 * `maxBytes`). Fails with a Connect error on an oversized or undecodable envelope (the stream
 * then ends with it).
 */
const clientMessages = (request: Http2ServerRequest, maxBytes: number) =>
  // Not destroyed at the end of the input: the response side lives on after a half-close.
  Stream.fromAsyncIterable(request.iterator({ destroyOnReturn: false }) as AsyncIterable<Buffer>, () => new ConnectError("canceled", "the client reset the stream")).pipe(
    Stream.mapAccumEffect(new Uint8Array(0), (pending: Uint8Array, chunk: Buffer) => {
      const split = splitEnvelopes(pending.length === 0 ? chunk : Buffer.concat([pending, chunk]), maxBytes)
      return split instanceof ConnectError ? Effect.fail(split) : Effect.succeed([split.rest, split.envelopes] as const)
    }),
    Stream.flattenIterables
  )

const header = (request: Http2ServerRequest, name: string): string => {
  const value = request.headers[name]
  return typeof value === "string" ? value : ""
}

/** What a request asks that this wire does not take, before anything is sent. */
const refusalOf = (request: Http2ServerRequest, protocol: Protocol): ConnectError | undefined => {
  const contentType = header(request, "content-type")
  if (protocol.codec !== "proto" || (protocol.name === "connect" && !CONNECT_STREAM.test(contentType))) {
    return new ConnectError("invalid_argument", `Run takes application/connect+proto, application/grpc or application/grpc-web+proto, not ${contentType === "" ? "no content type" : contentType}`)
  }
  if (TEXT.test(contentType)) return new ConnectError("unimplemented", "Run does not take gRPC-Web's text form (its input is a stream)")
  const encoding = (header(request, "connect-content-encoding") || header(request, "grpc-encoding") || "identity").toLowerCase()
  return encoding === "identity" || encoding === "gzip"
    ? undefined
    : new ConnectError("unimplemented", `message encoding ${encoding} is not supported (gzip and identity are)`)
}

/** One `Run` call: input and output bound to the request's session. */
export const serveRun = (transport: TransportService, protocol: Protocol, request: Http2ServerRequest, response: Http2ServerResponse) =>
  Effect.gen(function*() {
    const stream = request.stream
    const refused = refusalOf(request, protocol)
    if (refused !== undefined) return protocol.error(response, "bidi", refused)
    const requestId = header(request, "x-request-id") || randomUUID()
    protocol.open(response)

    // The turn's frames go to the stream in the writer's own call; the stream buffers what its
    // flow-control window cannot take yet. The output ends with the call's outcome.
    const outputEnded = yield* Deferred.make<void>()
    const attach = yield* transport.runOutput(requestId, parentLinkOf(request.headers), callerOf(request))
    const detach = yield* attach({
      write: (frames) => protocol.write(response, frames),
      end: () => {
        protocol.end(response)
        Deferred.unsafeDone(outputEnded, Exit.void)
      }
    })
    response.once("close", detach)
    const stopOutput = Effect.sync(detach)
    /** Ends the call with `error` (the session is not ended: a later request may resume its turn). */
    const endWith = (error: ConnectError) =>
      Effect.gen(function*() {
        yield* stopOutput
        yield* Effect.logWarning(`Run ${requestId} ended: ${error.code}: ${error.message}`)
        protocol.fail(response, error)
      })

    let seqno = 0
    const unknownSink = sinkFor(clientVersionOf(request.headers))
    const input = clientMessages(request, transport.options.bidiAppendMaxBytes).pipe(
      Stream.runForEach(({ flags, payload }) => {
        if ((flags & FLAG_END_STREAM) !== 0 || (flags & 0x80) !== 0) return Effect.void
        protocol.inbound?.(payload)
        const decoded = Dialect.decodeClientMessage(payload, unknownSink)
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
    Effect.onInterrupt(() => Effect.sync(() => request.stream.destroyed || request.stream.close())),
    Effect.annotateLogs({ wire: "Run" })
  )
