/**
 * A unary request's body, bounded: read whole, gzip undone, and refused with
 * `resource_exhausted` past the limit (a declared length past it at once; otherwise the rest
 * is read and dropped, so the client gets the error rather than a reset, up to a far bound
 * past which the request is cut off). `readBody` reads an Effect HTTP request (RunSSE, the side
 * RPCs, and BidiAppend when no front takes it), whatever server it came from (Node's, or a
 * web handler's); `readNodeBody` reads Node's request itself, for the BidiAppend front
 * (`Front.ts`), without a fiber or a stream per body.
 */
import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import { Effect, Stream } from "effect"
import type { IncomingMessage } from "node:http"
import { ConnectError, decodeUnaryBody } from "./Connect.js"

/** How much of an oversized body is read and dropped before the connection is cut instead. */
const DRAIN_LIMIT = 64 * 1024 * 1024

/**
 * Reads `request`'s body up to `limit` bytes (after gzip) and calls `done` once, with the bytes
 * or the Connect error to answer with. Plain stream events: no fiber, no stream per body.
 */
export const readNodeBody = (request: IncomingMessage, limit: number, done: (body: Uint8Array | ConnectError) => void): void => {
  const declared = Number(request.headers["content-length"] ?? Number.NaN)
  if (Number.isFinite(declared) && declared > limit) {
    return done(new ConnectError("resource_exhausted", `request body of ${declared} bytes exceeds the limit of ${limit}`))
  }
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
    if (size <= limit) chunks.push(chunk)
    else if (size > limit + DRAIN_LIMIT) {
      finish(new ConnectError("resource_exhausted", `request body exceeds the limit of ${limit} bytes`))
      request.destroy()
    }
  }
  const onEnd = () => {
    if (size > limit) return finish(new ConnectError("resource_exhausted", `request body of ${size} bytes exceeds the limit of ${limit}`))
    // A copy, also of a single chunk: a view would keep the socket's read buffer alive with it.
    const whole = Buffer.concat(chunks, size)
    finish(decodeUnaryBody(new Uint8Array(whole.buffer, whole.byteOffset, whole.byteLength), request.headers["content-encoding"], limit))
  }
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
    const declared = Number(request.headers["content-length"] ?? Number.NaN)
    if (Number.isFinite(declared) && declared > limit) {
      return yield* Effect.fail(new ConnectError("resource_exhausted", `request body of ${declared} bytes exceeds the limit of ${limit}`))
    }
    if (Number.isFinite(declared)) {
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
    // Past the limit the rest is read and dropped, so the client gets the error rather than a
    // reset connection; a body far past it (abuse) is cut off.
    yield* request.stream.pipe(
      Stream.mapError(() => new ConnectError("invalid_argument", "the request body could not be read")),
      Stream.runForEach((chunk) => {
        size += chunk.length
        if (size > limit + DRAIN_LIMIT) return Effect.fail(new ConnectError("resource_exhausted", `request body exceeds the limit of ${limit} bytes`))
        if (size <= limit) chunks.push(chunk)
        return Effect.void
      })
    )
    if (size > limit) return yield* Effect.fail(new ConnectError("resource_exhausted", `request body of ${size} bytes exceeds the limit of ${limit}`))
    const body = Buffer.concat(chunks)
    const decoded = decodeUnaryBody(new Uint8Array(body.buffer, body.byteOffset, body.byteLength), request.headers["content-encoding"], limit)
    return decoded instanceof ConnectError ? yield* Effect.fail(decoded) : decoded
  })
