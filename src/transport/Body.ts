/**
 * A unary request's body, bounded: read whole, gzip undone, and refused with
 * `resource_exhausted` past the limit (a declared length past it at once; otherwise the rest
 * is read and dropped, so the client gets the error rather than a reset, up to a far bound
 * past which the request is cut off). `readBody` reads an Effect HTTP request (the side RPCs),
 * whatever server it came from (Node's, or a web handler's); `readNodeBody` reads Node's
 * request itself, for the agent wire (`front/Agent.ts`), without a fiber or a stream per body.
 */
import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import { Effect, Stream } from "effect"
import type { IncomingMessage } from "node:http"
import type { Http2ServerRequest } from "node:http2"
import { ConnectError, decodeUnaryBody } from "./Connect.js"

/** How much of an oversized body is read and dropped before the connection is cut instead. */
const DRAIN_LIMIT = 64 * 1024 * 1024

/** The body's declared length (NaN without a `content-length`). */
const declaredLength = (headers: { readonly [name: string]: unknown }): number => Number(headers["content-length"] ?? Number.NaN)

/** A body whose declared length is past the limit: refused before it is read. */
const declaredPastLimit = (headers: { readonly [name: string]: unknown }, limit: number): ConnectError | undefined => {
  const declared = declaredLength(headers)
  return Number.isFinite(declared) && declared > limit
    ? new ConnectError("resource_exhausted", `request body of ${declared} bytes exceeds the limit of ${limit}`)
    : undefined
}

/** Past the limit the rest is read and dropped (the client gets the error, not a reset); this far past it, the body is cut off. */
const cutOff = (size: number, limit: number): ConnectError | undefined =>
  size > limit + DRAIN_LIMIT ? new ConnectError("resource_exhausted", `request body exceeds the limit of ${limit} bytes`) : undefined

/** The chunks kept (those within the limit) of a body of `size` bytes, joined and gzip undone, or the error to answer. */
const wholeBody = (chunks: ReadonlyArray<Uint8Array>, size: number, limit: number, contentEncoding: string | undefined): Uint8Array | ConnectError => {
  if (size > limit) return new ConnectError("resource_exhausted", `request body of ${size} bytes exceeds the limit of ${limit}`)
  // A copy, also of a single chunk: a view would keep the socket's read buffer alive with it.
  const whole = Buffer.concat(chunks, size)
  return decodeUnaryBody(new Uint8Array(whole.buffer, whole.byteOffset, whole.byteLength), contentEncoding, limit)
}

/**
 * Reads `request`'s body up to `limit` bytes (after gzip) and calls `done` once, with the bytes
 * or the Connect error to answer with. Plain stream events: no fiber, no stream per body.
 */
export const readNodeBody = (request: IncomingMessage | Http2ServerRequest, limit: number, done: (body: Uint8Array | ConnectError) => void): void => {
  const refused = declaredPastLimit(request.headers, limit)
  if (refused !== undefined) return done(refused)
  const chunks: Array<Buffer> = []
  let size = 0
  let finished = false
  const finish = (body: Uint8Array | ConnectError) => {
    if (finished) return
    finished = true
    request.off("data", onData)
    request.off("end", onEnd)
    request.off("error", onError)
    request.off("close", onClose)
    done(body)
  }
  const onData = (chunk: Buffer) => {
    size += chunk.length
    if (size <= limit) return void chunks.push(chunk)
    const cut = cutOff(size, limit)
    if (cut !== undefined) {
      finish(cut)
      request.destroy()
    }
  }
  const onEnd = () => finish(wholeBody(chunks, size, limit, request.headers["content-encoding"]))
  const onError = () => finish(new ConnectError("invalid_argument", "the request body could not be read"))
  // Closed before its end: the client went away mid-body.
  const onClose = () => finish(new ConnectError("invalid_argument", "the request body ended early"))
  request.on("data", onData)
  request.on("end", onEnd)
  request.on("error", onError)
  request.on("close", onClose)
}

/** Reads a request body up to `limit` bytes (after gzip), or fails with `resource_exhausted`. */
export const readBody = (request: HttpServerRequest.HttpServerRequest, limit: number) =>
  Effect.gen(function*() {
    const refused = declaredPastLimit(request.headers, limit)
    if (refused !== undefined) return yield* Effect.fail(refused)
    if (Number.isFinite(declaredLength(request.headers))) {
      // The HTTP parser frames the body by its declared length (within the limit, checked
      // above): read it in one go, which costs far less than a body stream.
      const bytes = yield* request.arrayBuffer.pipe(
        Effect.mapError(() => new ConnectError("invalid_argument", "the request body could not be read"))
      )
      const whole = decodeUnaryBody(new Uint8Array(bytes), request.headers["content-encoding"], limit)
      return whole instanceof ConnectError ? yield* Effect.fail(whole) : whole
    }
    const chunks: Array<Uint8Array> = []
    let size = 0
    yield* request.stream.pipe(
      Stream.mapError(() => new ConnectError("invalid_argument", "the request body could not be read")),
      Stream.runForEach((chunk) => {
        size += chunk.length
        if (size <= limit) chunks.push(chunk)
        const cut = cutOff(size, limit)
        return cut === undefined ? Effect.void : Effect.fail(cut)
      })
    )
    const decoded = wholeBody(chunks, size, limit, request.headers["content-encoding"])
    return decoded instanceof ConnectError ? yield* Effect.fail(decoded) : decoded
  })
