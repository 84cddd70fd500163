/**
 * The end of a turn's stream: the UTF-8 JSON payload of the Connect end-stream frame, `{}` or an
 * error with Cursor's `aiserver.v1.ErrorDetails`. Its texts are redacted of the configuration's
 * secrets as they are encoded (`internal/Secrets.ts`; the model-call errors were at their source).
 */
import { create, fromBinary, toBinary } from "@bufbuild/protobuf"
import { Data, Either, Schema } from "effect"
import { ErrorDetails_Error, ErrorDetailsSchema } from "../gen/aiserver/v1/aiserver_pb.js"
import { redact } from "../internal/Secrets.js"
import { DialectError, fail, parse, utf8 } from "./Bytes.js"

/** Connect error codes a turn may end with. */
export const ConnectCode = Schema.Literal(
  "canceled",
  "unknown",
  "invalid_argument",
  "deadline_exceeded",
  "not_found",
  "permission_denied",
  "resource_exhausted",
  "failed_precondition",
  "aborted",
  "internal",
  "unavailable",
  "unimplemented"
)
export type ConnectCode = typeof ConnectCode.Type

/** Cursor's `aiserver.v1.ErrorDetails` as we fill it. */
export interface ErrorDetail {
  readonly error: ErrorDetails_Error
  readonly title: string
  readonly detail: string
  /** Always false for provider errors: true makes Cursor replay the request (a second provider call). */
  readonly isRetryable: boolean
}

export type EndStream = Data.TaggedEnum<{
  Ok: {}
  Error: { readonly code: ConnectCode; readonly message: string; readonly detail: ErrorDetail | undefined }
}>
export const EndStream = Data.taggedEnum<EndStream>()

/** A provider (or loop) failure as Cursor shows it: `unavailable` + PROVIDER_ERROR, not retryable. */
export const providerFailure = (message: string): EndStream =>
  EndStream.Error({
    code: "unavailable",
    message,
    detail: { error: ErrorDetails_Error.PROVIDER_ERROR, title: "Model provider error", detail: message, isRetryable: false }
  })

/** A cancel: Cursor handles `canceled` quietly. */
export const canceled = (reason: string): EndStream =>
  EndStream.Error({ code: "canceled", message: reason === "" ? "canceled" : reason, detail: undefined })

const toBase64 = (bytes: Uint8Array): string => Buffer.from(bytes).toString("base64").replace(/=+$/, "")

/** The end-stream payload (UTF-8 JSON) the transport frames with flag 0x02 as the last frame. */
export const encodeEndStream = (end: EndStream): Uint8Array => {
  if (end._tag === "Ok") return utf8.encode("{}")
  const details = end.detail === undefined ? [] : [{
    type: "aiserver.v1.ErrorDetails",
    value: toBase64(toBinary(ErrorDetailsSchema, create(ErrorDetailsSchema, {
      error: end.detail.error,
      details: { title: redact(end.detail.title), detail: redact(end.detail.detail), isRetryable: end.detail.isRetryable }
    })))
  }]
  return utf8.encode(JSON.stringify({ error: { code: end.code, message: redact(end.message), ...(details.length > 0 ? { details } : {}) } }))
}

const EndStreamJson = Schema.Struct({
  error: Schema.optional(Schema.Struct({
    code: ConnectCode,
    message: Schema.optionalWith(Schema.String, { default: () => "" }),
    details: Schema.optional(Schema.Array(Schema.Struct({ type: Schema.String, value: Schema.String })))
  }))
})

/** Parses an end-stream payload (the reference client and tests). */
export const decodeEndStream = (payload: Uint8Array): Either.Either<EndStream, DialectError> => {
  let json: unknown
  try {
    json = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(payload))
  } catch (error) {
    return fail("badJson", `end-stream payload is not JSON: ${error instanceof Error ? error.message : String(error)}`)
  }
  return Schema.decodeUnknownEither(EndStreamJson)(json).pipe(
    Either.mapLeft((error) => new DialectError({ reason: "badJson", message: `end-stream payload: ${error.message}` })),
    Either.flatMap((parsed): Either.Either<EndStream, DialectError> => {
      if (parsed.error === undefined) return Either.right(EndStream.Ok())
      const { code, details, message } = parsed.error
      const raw = details?.find((d) => d.type === "aiserver.v1.ErrorDetails")
      if (raw === undefined) return Either.right(EndStream.Error({ code, message, detail: undefined }))
      return Either.map(
        parse("ErrorDetails", () => fromBinary(ErrorDetailsSchema, Buffer.from(raw.value, "base64"))),
        (decoded) =>
          EndStream.Error({
            code,
            message,
            detail: {
              error: decoded.error,
              title: decoded.details?.title ?? "",
              detail: decoded.details?.detail ?? "",
              isRetryable: decoded.details?.isRetryable ?? false
            }
          })
      )
    })
  )
}
