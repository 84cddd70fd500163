/**
 * How an RPC travels, whatever it asks: the three protocols a Connect server answers on the
 * same paths, picked by the request's content type (`protocolOf`). Each says how a request's
 * body becomes its message (a unary call's) or its envelopes (a stream's), and how the answer,
 * a stream's frames (made by the turn's channel as Connect envelopes, the last one end-stream)
 * and the errors are written: Connect here, gRPC and gRPC-Web in `Grpc.ts`, on Node's
 * response of either HTTP version (`Wire.ts`).
 */
import { readNodeBody } from "../Body.js"
import { endStreamFrame } from "../Connect.js"
import { joinFrames } from "../Service.js"
import { grpc, grpcWeb, grpcWebText } from "./Grpc.js"
import { send, writable, writeAnswer, writeError } from "./Wire.js"
import type { CallKind, Codec, Protocol } from "./Wire.js"

export { send, writable, writeAnswer, writeError } from "./Wire.js"
export type { CallKind, Codec, ErrorOptions, NodeRequest, NodeResponse, Protocol } from "./Wire.js"

const CONNECT_STREAM_JSON = /^\s*application\/connect\+json/i

/**
 * Connect: a unary call's body is the message (gzip undone by `Content-Encoding`), its answer
 * `application/proto` (or JSON), its error JSON with the error's HTTP status; a stream's body is
 * envelopes, its answer 200 with envelopes (RunSSE's `text/event-stream`, as Cursor's client
 * takes it; `Run`'s `application/connect+proto`), its outcome the end-stream frame, and an
 * error before it began a stream of that one frame (a bidi call's: JSON, as a unary call's).
 */
const connectOf = (codec: Codec, streamType: string): Protocol => ({
  name: "connect",
  codec,
  read: (request, limit, _kind, done) => readNodeBody(request, limit, done),
  answer: (response, message) => writeAnswer(response, 200, codec === "json" ? "application/json" : "application/proto", message),
  open: (response) => {
    response.writeHead(200, { "content-type": streamType, "cache-control": "no-cache", "connect-protocol-version": "1", "connect-accept-encoding": "gzip" })
  },
  write: (response, frames) => {
    if (writable(response)) send(response, joinFrames(frames))
  },
  end: (response) => {
    if (writable(response)) response.end()
  },
  fail: (response, error) => {
    if (writable(response)) response.end(endStreamFrame(error))
  },
  // A server stream's error is its end-stream frame (as Cursor's RunSSE client reads it); a bidi
  // call refused before it began is answered as a unary one, which any client can read.
  error: (response, kind, error) =>
    kind === "stream" ? writeAnswer(response, 200, codec === "json" ? "application/connect+json" : "application/connect+proto", endStreamFrame(error)) : writeError(response, error)
})

/** Connect with binary messages; its streams answer as Cursor's RunSSE client reads them. */
export const connect: Protocol = connectOf("proto", "text/event-stream")
const connectJson = connectOf("json", "application/connect+json")
/** `Run`'s Connect stream. */
export const connectBidi: Protocol = connectOf("proto", "application/connect+proto")

const GRPC_WEB_TEXT = /^\s*application\/grpc-web-text/i
const GRPC_WEB = /^\s*application\/grpc-web/i
const GRPC = /^\s*application\/grpc/i
const JSON_SUFFIX = /^\s*application\/[\w.-]+\+json\s*(;|$)/i

/**
 * The protocol of a request by its content type (the door let only RPC media types through,
 * `Policy.ts`): gRPC-Web (binary or base64 text), gRPC, else Connect (JSON for `application/json`
 * and `+json`). Undefined: a form no protocol here serves (gRPC-Web text with JSON).
 */
export const protocolOf = (contentType: string | undefined, kind: CallKind = "unary"): Protocol | undefined => {
  const type = contentType ?? ""
  const json = JSON_SUFFIX.test(type) || /^\s*application\/json\s*(;|$)/i.test(type)
  if (GRPC_WEB_TEXT.test(type)) return json ? undefined : grpcWebText
  if (GRPC_WEB.test(type)) return grpcWeb(json ? "json" : "proto")
  if (GRPC.test(type)) return grpc(json ? "json" : "proto")
  if (json || CONNECT_STREAM_JSON.test(type)) return connectJson
  return kind === "bidi" ? connectBidi : connect
}
