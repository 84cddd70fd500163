/**
 * A unary request's body, bounded: read whole when its length is declared, streamed otherwise,
 * gzip undone, and refused with `resource_exhausted` past the limit (the rest read and dropped,
 * so the client gets the error rather than a reset). Shared by BidiAppend, RunSSE and the side
 * RPCs' sinks.
 */
import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import { Effect, Stream } from "effect"
import { ConnectError, decodeUnaryBody } from "./Connect.js"

/** How much of an oversized body is read and dropped before the connection is cut instead. */
const DRAIN_LIMIT = 64 * 1024 * 1024

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
