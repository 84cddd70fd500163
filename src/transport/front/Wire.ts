/**
 * What every protocol of the front door is written on: Node's HTTP/1.1 request and response,
 * or HTTP/2's compatibility ones (the same calls), and the `Protocol` a call is served in
 * (`Protocol.ts` picks it). A refusal at the door is a Connect error as JSON (`writeError`).
 */
import type { IncomingMessage, ServerResponse } from "node:http"
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2"
import { errorAnswer } from "../Connect.js"
import type { ConnectError } from "../Connect.js"

export type NodeRequest = IncomingMessage | Http2ServerRequest
export type NodeResponse = ServerResponse | Http2ServerResponse

/** A unary call (one message each way), a server stream (one message in, frames out) or a bidi stream (`Run`). */
export type CallKind = "unary" | "stream" | "bidi"

export type Codec = "proto" | "json"

export interface Protocol {
  readonly name: "connect" | "grpc" | "grpc-web"
  /** How messages are encoded: binary protobuf, or JSON (`application/json`, `+json`). */
  readonly codec: Codec
  /**
   * Reads the request's body, at most `limit` bytes, and calls `done` once: a unary call's
   * message, a server stream's envelopes (`Connect.parseEnvelopes` reads them), or the error.
   */
  readonly read: (request: NodeRequest, limit: number, kind: CallKind, done: (body: Uint8Array | ConnectError) => void) => void
  /** A unary call's answer. */
  readonly answer: (response: NodeResponse, message: Uint8Array) => void
  /** A stream's response head, before its first frames. */
  readonly open: (response: NodeResponse) => void
  /** Frames of a stream as the turn's channel makes them (Connect envelopes; the last one end-stream ends the call). */
  readonly write: (response: NodeResponse, frames: ReadonlyArray<Uint8Array>) => void
  /** No more frames: the end-stream frame ended the call already, or a newer reader took the stream's output. */
  readonly end: (response: NodeResponse) => void
  /** Ends a stream that has begun with `error`. */
  readonly fail: (response: NodeResponse, error: ConnectError) => void
  /** A call refused or failed before its answer or its stream began. */
  readonly error: (response: NodeResponse, kind: CallKind, error: ConnectError) => void
  /** Told each message `Run` reads off its input stream (only a capturing protocol has it: `capture/Tap.ts`). */
  readonly inbound?: (payload: Uint8Array) => void
}

/** Writes bytes of a response's body (Node's two response types take the same arguments). */
export const send = (response: NodeResponse, bytes: Uint8Array | string): void => void (response as ServerResponse).write(bytes)

/** False once the response ended or its connection or stream is gone. */
export const writable = (response: NodeResponse): boolean =>
  !response.writableEnded && !("stream" in response ? response.stream.destroyed : response.destroyed)

/** Writes a whole answer, unless one was already written or the client is gone. */
export const writeAnswer = (response: NodeResponse, status: number, contentType: string, body: Uint8Array | string, headers: Record<string, string> = {}) => {
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
 * refusal at the door, and every error of a Connect unary call, is written so.
 */
export const writeError = (response: NodeResponse, error: ConnectError, options: ErrorOptions = {}) => {
  const { body, status } = errorAnswer(error, options.status)
  writeAnswer(response, status, "application/json", body, options.headers)
}

