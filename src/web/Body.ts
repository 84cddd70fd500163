/**
 * Reading a response body under a byte cap: the stream is read chunk by chunk and dropped once
 * past the cap, so a huge or endless body costs at most the cap (and the time limit).
 */
import type * as HttpClientResponse from "@effect/platform/HttpClientResponse"
import { Effect, Stream } from "effect"

export interface Body {
  readonly bytes: Uint8Array
  /** More was there than the cap (read past it, or announced by content-length). */
  readonly truncated: boolean
}

/** At most `cap` bytes of the body; reading stops (and the connection is dropped) once past it. */
export const readCapped = <E>(
  response: HttpClientResponse.HttpClientResponse,
  cap: number,
  onError: (cause: unknown) => E
): Effect.Effect<Body, E> =>
  Effect.suspend(() => {
    const declared = Number(response.headers["content-length"] ?? Number.NaN)
    const parts: Array<Uint8Array> = []
    let size = 0
    let truncated = Number.isFinite(declared) && declared > cap
    return Stream.runForEachWhile(response.stream, (chunk) =>
      Effect.sync(() => {
        const room = cap - size
        if (chunk.length > room) {
          parts.push(chunk.subarray(0, room))
          size = cap
          truncated = true
          return false
        }
        parts.push(chunk)
        size += chunk.length
        // A body announced as larger than the cap is not read one byte past it.
        return !(truncated && size === cap)
      })).pipe(
        Effect.mapError((error) => onError("cause" in error && error.cause !== undefined ? error.cause : error)),
        Effect.map(() => ({ bytes: Buffer.concat(parts, size), truncated }))
      )
  })
