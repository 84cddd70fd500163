/**
 * gRPC and gRPC-Web on the paths Connect serves. Both send every message in an envelope (a
 * unary call's one message too), compressed as `grpc-encoding` says; a stream's frames are the
 * turn's Connect envelopes as they are, and its outcome, which Connect sends as an end-stream
 * frame, goes as gRPC's status trailers (`Status.ts`) or, in gRPC-Web, as a trailer frame
 * (flag 0x80, the trailers as HTTP/1 header lines). gRPC-Web's text form is the same bytes in
 * base64, both ways. An error before anything was sent is a trailers-only answer.
 */
import { readNodeBody } from "../Body.js"
import { ConnectError, envelope, FLAG_END_STREAM, parseEnvelopes } from "../Connect.js"
import { joinFrames } from "../Service.js"
import type { CallKind, Codec, NodeRequest, NodeResponse, Protocol } from "./Wire.js"
import { send, writable } from "./Wire.js"
import { outcomeOfEndStream, trailersOf } from "./Status.js"

const TRAILER_FLAG = 0x80

const isHttp1 = (response: NodeResponse) => !("stream" in response)

/** The request's message compression, when it is one this server reads (identity, gzip). */
const encodingError = (request: NodeRequest): ConnectError | undefined => {
  const value = request.headers["grpc-encoding"]
  const encoding = (typeof value === "string" ? value : "identity").trim().toLowerCase()
  return encoding === "identity" || encoding === "gzip" || encoding === ""
    ? undefined
    : new ConnectError("unimplemented", `grpc-encoding ${encoding} is not supported (gzip and identity are)`)
}

/** gRPC-Web text: base64, possibly in several padded pieces (as a proxy encodes chunk by chunk). */
const fromBase64Pieces = (text: Uint8Array): Uint8Array => {
  const pieces = Buffer.from(text).toString("latin1").replace(/\s+/g, "").match(/[A-Za-z0-9+/]*={0,2}/g) ?? []
  return new Uint8Array(Buffer.concat(pieces.filter((piece) => piece !== "").map((piece) => Buffer.from(piece, "base64"))))
}

/** A unary call's one message out of its envelopes (inflated), or the error to answer. */
const oneMessage = (body: Uint8Array, limit: number): Uint8Array | ConnectError => {
  const envelopes = parseEnvelopes(body, limit)
  if (envelopes instanceof ConnectError) return envelopes
  const data = envelopes.filter((e) => (e.flags & TRAILER_FLAG) === 0)
  if (data.length !== 1) return new ConnectError("invalid_argument", `a unary call takes one enveloped message, not ${data.length}`)
  return data[0]!.payload
}

/** A trailer frame of gRPC-Web: flag 0x80, then `name: value\r\n` lines. */
const trailerFrame = (trailers: Record<string, string>): Uint8Array =>
  envelope(TRAILER_FLAG, Buffer.from(Object.entries(trailers).map(([name, value]) => `${name}: ${value}\r\n`).join(""), "latin1"))

interface Flavour {
  readonly name: "grpc" | "grpc-web"
  readonly contentType: string
  readonly text: boolean
}

const encodeOut = (flavour: Flavour, bytes: Uint8Array): Uint8Array | string =>
  flavour.text ? Buffer.from(bytes).toString("base64") : bytes

const headOf = (flavour: Flavour, response: NodeResponse, extra: Record<string, string> = {}) => {
  const headers: Record<string, string> = { "content-type": flavour.contentType, "grpc-accept-encoding": "gzip", ...extra }
  // HTTP/1.1 sends trailers only when they were announced (and the body is chunked).
  if (flavour.name === "grpc" && isHttp1(response)) headers["trailer"] = "grpc-status, grpc-message, grpc-status-details-bin"
  return headers
}

/** Ends a call that has begun, with the outcome's trailers after `data` (undefined outcome: success). */
const close = (flavour: Flavour, response: NodeResponse, data: Uint8Array | undefined, outcome: ConnectError | undefined) => {
  if (!writable(response)) return
  const trailers = trailersOf(outcome)
  if (flavour.name === "grpc") {
    response.addTrailers(trailers)
    return data === undefined || data.length === 0 ? response.end() : response.end(data)
  }
  const tail = trailerFrame(trailers)
  response.end(encodeOut(flavour, data === undefined ? tail : joinFrames([data, tail])))
}

const makeProtocol = (flavour: Flavour, codec: Codec): Protocol => {
  /** A call that failed before anything was sent: gRPC's trailers-only answer; gRPC-Web's trailer frame as the whole body. */
  const error = (response: NodeResponse, _kind: CallKind, failure: ConnectError) => {
    if (response.headersSent || !writable(response)) return
    if (flavour.name === "grpc") {
      response.writeHead(200, headOf(flavour, response, trailersOf(failure)))
      return response.end()
    }
    response.writeHead(200, headOf(flavour, response))
    close(flavour, response, undefined, failure)
  }
  return {
    name: flavour.name,
    codec,
    read: (request, limit, kind, done) => {
      const refused = encodingError(request)
      if (refused !== undefined) return done(refused)
      readNodeBody(request, flavour.text ? Math.ceil(limit / 3) * 4 + 4 : limit, (body) => {
        if (body instanceof ConnectError) return done(body)
        const bytes = flavour.text ? fromBase64Pieces(body) : body
        done(kind === "unary" ? oneMessage(bytes, limit) : bytes)
      })
    },
    answer: (response, message) => {
      if (response.headersSent || !writable(response)) return
      response.writeHead(200, headOf(flavour, response))
      close(flavour, response, envelope(0, message), undefined)
    },
    open: (response) => {
      response.writeHead(200, headOf(flavour, response))
    },
    write: (response, frames) => {
      if (!writable(response)) return
      const last = frames[frames.length - 1]!
      if ((last[0]! & FLAG_END_STREAM) === 0) return send(response, encodeOut(flavour, joinFrames(frames)))
      const data = frames.length > 1 ? joinFrames(frames.slice(0, -1)) : undefined
      close(flavour, response, data, outcomeOfEndStream(last.subarray(5)))
    },
    // Ended without the channel's outcome: a newer request took this turn's output.
    end: (response) => close(flavour, response, undefined, new ConnectError("aborted", "a newer request took over this turn's output")),
    fail: (response, failure) => close(flavour, response, undefined, failure),
    error
  }
}

const GRPC_PROTO = makeProtocol({ name: "grpc", contentType: "application/grpc+proto", text: false }, "proto")
const GRPC_JSON = makeProtocol({ name: "grpc", contentType: "application/grpc+json", text: false }, "json")
const GRPC_WEB_PROTO = makeProtocol({ name: "grpc-web", contentType: "application/grpc-web+proto", text: false }, "proto")
const GRPC_WEB_JSON = makeProtocol({ name: "grpc-web", contentType: "application/grpc-web+json", text: false }, "json")

export const grpc = (codec: Codec): Protocol => codec === "json" ? GRPC_JSON : GRPC_PROTO
export const grpcWeb = (codec: Codec): Protocol => codec === "json" ? GRPC_WEB_JSON : GRPC_WEB_PROTO
export const grpcWebText: Protocol = makeProtocol({ name: "grpc-web", contentType: "application/grpc-web-text+proto", text: true }, "proto")
