/**
 * How an agent call travels on HTTP/1.1, whatever it asks: how its request body is read and
 * how its answer, its stream of frames and its errors are written. Connect is the one served;
 * gRPC and gRPC-Web (the same paths; `application/grpc`, `application/grpc-web+proto`;
 * enveloped messages both ways; the outcome in trailers) are each a `Protocol` that
 * `protocolOf` picks from the content type (docs/architecture.md, "The front door").
 */
import type { IncomingMessage, ServerResponse } from "node:http"
import { readNodeBody } from "../Body.js"
import { ConnectError, endStreamFrame, errorAnswer } from "../Connect.js"
import { joinFrames } from "../Service.js"

/** A unary call (one message each way) or a server stream (one message in, frames out). */
export type CallKind = "unary" | "stream"

export interface Protocol {
  readonly name: string
  /** Reads the request's body, at most `limit` bytes, and calls `done` once with the call's bytes or the error to answer. */
  readonly read: (request: IncomingMessage, limit: number, done: (body: Uint8Array | ConnectError) => void) => void
  /** A unary call's answer. */
  readonly answer: (response: ServerResponse, message: Uint8Array) => void
  /** A stream's response head, before its first frames. */
  readonly open: (response: ServerResponse) => void
  /** Frames of a stream, as the turn's channel makes them (Connect envelopes, the last one end-stream). */
  readonly write: (response: ServerResponse, frames: ReadonlyArray<Uint8Array>) => void
  /** The end of a stream whose frames said how it ended. */
  readonly end: (response: ServerResponse) => void
  /** A call refused or failed before its answer or its stream began. */
  readonly error: (response: ServerResponse, kind: CallKind, error: ConnectError) => void
}

const writable = (response: ServerResponse) => !response.writableEnded && !response.destroyed

/** Writes a whole answer, unless one was already written or the client is gone. */
export const writeAnswer = (response: ServerResponse, status: number, contentType: string, body: Uint8Array | string, headers: Record<string, string> = {}) => {
  if (response.headersSent || !writable(response)) return
  response.writeHead(status, { "content-type": contentType, "content-length": typeof body === "string" ? Buffer.byteLength(body) : body.byteLength, ...headers })
  response.end(body)
}

export interface ErrorOptions {
  /** The HTTP status, when not the Connect table's for the code (a refusal's 415). */
  readonly status?: number
  readonly headers?: Record<string, string>
}

/**
 * A Connect error as JSON with its status, or the one given (`Connect.errorAnswer`): every
 * refusal on the HTTP/1.1 listener, and every error of a unary agent call, is written so.
 */
export const writeError = (response: ServerResponse, error: ConnectError, options: ErrorOptions = {}) => {
  const { body, status } = errorAnswer(error, options.status)
  writeAnswer(response, status, "application/json", body, options.headers)
}

/**
 * Connect: a unary call's body is the message (gzip undone by `Content-Encoding`), its answer
 * `application/proto`, its error JSON with the error's HTTP status; a server stream answers 200
 * with envelopes (RunSSE's `text/event-stream`, as Cursor's client takes it), and an error
 * before it began is a stream of one end-stream frame.
 */
export const connect: Protocol = {
  name: "connect",
  read: readNodeBody,
  answer: (response, message) => writeAnswer(response, 200, "application/proto", message),
  open: (response) => {
    response.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", "connect-protocol-version": "1" })
  },
  write: (response, frames) => {
    if (writable(response)) response.write(joinFrames(frames))
  },
  end: (response) => {
    if (writable(response)) response.end()
  },
  error: (response, kind, error) =>
    kind === "stream" ? writeAnswer(response, 200, "application/connect+proto", endStreamFrame(error)) : writeError(response, error)
}

/** `application/grpc`, `application/grpc+proto`, `application/grpc-web+proto`... in any case. */
const GRPC_MEDIA_TYPE = /^\s*application\/grpc/i

/**
 * The protocol of a request by its content type. The door let only RPC media types through
 * (`Policy.ts`); of those, gRPC's and gRPC-Web's are not served yet (undefined), and the rest
 * are Connect's.
 */
export const protocolOf = (contentType: string | undefined): Protocol | undefined =>
  contentType !== undefined && GRPC_MEDIA_TYPE.test(contentType) ? undefined : connect
