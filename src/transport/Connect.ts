/**
 * Connect protocol framing: the 5-byte envelopes of streaming bodies, the end-stream frame
 * that carries a stream's outcome, Connect error codes with their HTTP statuses, and the one
 * answer every error and refusal of an RPC route gets (`errorAnswer`).
 *
 * Hand-written rather than taken from @connectrpc/connect-node because the server routes each
 * request itself (`transport/Front.ts`) and serves the rest on Effect's HTTP server; the
 * framing itself is small, and a test checks it against the official Connect client.
 */
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Schema } from "effect"
import { gunzipSync } from "node:zlib"

export const FLAG_COMPRESSED = 0x01
export const FLAG_END_STREAM = 0x02

export type ConnectCode =
  | "canceled"
  | "unknown"
  | "invalid_argument"
  | "deadline_exceeded"
  | "not_found"
  | "already_exists"
  | "permission_denied"
  | "resource_exhausted"
  | "failed_precondition"
  | "aborted"
  | "out_of_range"
  | "unimplemented"
  | "internal"
  | "unavailable"
  | "data_loss"
  | "unauthenticated"

/** HTTP status of a unary Connect error (the Connect protocol's table). */
export const httpStatusOf = (code: ConnectCode): number => {
  switch (code) {
    case "canceled": return 499
    case "invalid_argument":
    case "failed_precondition":
    case "out_of_range": return 400
    case "deadline_exceeded": return 504
    case "not_found": return 404
    case "already_exists":
    case "aborted": return 409
    case "permission_denied": return 403
    case "resource_exhausted": return 429
    case "unimplemented": return 501
    case "unavailable": return 503
    case "unauthenticated": return 401
    case "unknown":
    case "internal":
    case "data_loss": return 500
  }
}

export interface ErrorDetail {
  /** Fully qualified protobuf type name, e.g. `aiserver.v1.ErrorDetails`. */
  readonly type: string
  readonly value: Uint8Array
}

const ConnectCodeSchema = Schema.Literal(
  "canceled", "unknown", "invalid_argument", "deadline_exceeded", "not_found", "already_exists", "permission_denied",
  "resource_exhausted", "failed_precondition", "aborted", "out_of_range", "unimplemented", "internal", "unavailable",
  "data_loss", "unauthenticated"
)

/** Whether `code` is one of Connect's codes. */
export const isConnectCode: (code: unknown) => code is ConnectCode = Schema.is(ConnectCodeSchema)

/** A Connect error as it travels: code, message, optional typed details. */
export class ConnectError extends Schema.TaggedError<ConnectError>("cursor-byok/ConnectError")("ConnectError", {
  code: ConnectCodeSchema,
  message: Schema.String,
  details: Schema.Array(Schema.Struct({ type: Schema.String, value: Schema.Uint8ArrayFromSelf }))
}) {
  constructor(code: ConnectCode, message: string, details: ReadonlyArray<ErrorDetail> = []) {
    super({ code, message, details })
  }
  toJson(): { code: ConnectCode; message: string; details?: Array<{ type: string; value: string }> } {
    return this.details.length === 0
      ? { code: this.code, message: this.message }
      : { code: this.code, message: this.message, details: this.details.map((d) => ({ type: d.type, value: base64NoPad(d.value) })) }
  }
}

/**
 * A Connect error as its JSON says it (a unary answer's body, or an end-stream's `error`):
 * `{ code, message, details: [{ type, value (base64) }] }`; a code it does not know is `fallback`,
 * or undefined without one.
 */
export const connectErrorOfJson = (error: { code?: unknown; message?: unknown; details?: unknown }, fallback?: ConnectCode): ConnectError | undefined => {
  const code = isConnectCode(error.code) ? error.code : fallback
  if (code === undefined) return undefined
  const details = Array.isArray(error.details)
    ? error.details.flatMap((d: { type?: unknown; value?: unknown }) =>
      typeof d?.type === "string" && typeof d.value === "string" ? [{ type: d.type, value: new Uint8Array(Buffer.from(d.value, "base64")) }] : [])
    : []
  return new ConnectError(code, typeof error.message === "string" ? error.message : "", details)
}

/** An error as a unary answer: the HTTP status and the JSON body. */
export interface ErrorAnswer {
  readonly status: number
  readonly body: string
}

/**
 * A Connect error as the server answers it outside a stream: JSON `{code, message}` with the
 * Connect table's status, or the one a refusal names (415 for a content type the server does
 * not take, as the Connect protocol asks). Every refusal and every RPC route's error is this.
 */
export const errorAnswer = (error: ConnectError, status: number = httpStatusOf(error.code)): ErrorAnswer => ({
  status,
  body: JSON.stringify(error.toJson())
})

/** `errorAnswer` as an Effect response, for the routes of the Effect app (the side RPCs, the app's own failures). */
export const errorResponse = (error: ConnectError): HttpServerResponse.HttpServerResponse => {
  const answer = errorAnswer(error)
  return HttpServerResponse.text(answer.body, { status: answer.status, contentType: "application/json" })
}

const base64NoPad = (bytes: Uint8Array): string => Buffer.from(bytes).toString("base64").replace(/=+$/, "")

/** One envelope: flags, 4-byte big-endian length, payload. */
export const envelope = (flags: number, payload: Uint8Array): Uint8Array => {
  const out = new Uint8Array(5 + payload.length)
  out[0] = flags
  new DataView(out.buffer).setUint32(1, payload.length)
  out.set(payload, 5)
  return out
}

const encoder = new TextEncoder()

/** The end-stream frame: `{}` on success, `{"error":{...}}` on failure. */
export const endStreamFrame = (error?: ConnectError): Uint8Array =>
  envelope(FLAG_END_STREAM, encoder.encode(JSON.stringify(error === undefined ? {} : { error: error.toJson() })))

export interface Envelope {
  readonly flags: number
  readonly payload: Uint8Array
}

export interface Split {
  /** The complete envelopes, in order, inflated. */
  readonly envelopes: ReadonlyArray<Envelope>
  /** The bytes after them: the start of an envelope still to come (empty when none). */
  readonly rest: Uint8Array
}

/**
 * Takes the complete envelopes off the front of `bytes` (inflating gzip payloads), leaving an
 * incomplete tail in `rest`: for a stream read chunk by chunk. An envelope over `maxPayload`, or
 * a compressed payload that does not inflate within it, is a Connect error, never a throw.
 */
export const splitEnvelopes = (bytes: Uint8Array, maxPayload: number): Split | ConnectError => {
  const envelopes: Array<Envelope> = []
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  let offset = 0
  while (bytes.length - offset >= 5) {
    const flags = bytes[offset]!
    const length = view.getUint32(offset + 1)
    if (length > maxPayload) return new ConnectError("resource_exhausted", `envelope of ${length} bytes exceeds the limit of ${maxPayload}`)
    if (bytes.length - offset - 5 < length) break
    let payload = bytes.subarray(offset + 5, offset + 5 + length)
    if ((flags & FLAG_COMPRESSED) !== 0) {
      try {
        payload = new Uint8Array(gunzipSync(payload, { maxOutputLength: maxPayload }))
      } catch (cause) {
        return new ConnectError("invalid_argument", `compressed envelope does not inflate: ${String((cause as Error).message ?? cause)}`)
      }
    }
    envelopes.push({ flags, payload })
    offset += 5 + length
  }
  return { envelopes, rest: bytes.subarray(offset) }
}

/**
 * Splits a complete streaming request body into envelopes, inflating gzip payloads. Any
 * truncation or a bad compressed payload is an `invalid_argument` error, never a throw.
 */
export const parseEnvelopes = (body: Uint8Array, maxPayload: number): ReadonlyArray<Envelope> | ConnectError => {
  const split = splitEnvelopes(body, maxPayload)
  if (split instanceof ConnectError) return split
  const { rest } = split
  if (rest.length === 0) return split.envelopes
  const at = body.length - rest.length
  return rest.length < 5
    ? new ConnectError("invalid_argument", `truncated envelope header at byte ${at}`)
    : new ConnectError("invalid_argument", `envelope at byte ${at} declares ${new DataView(rest.buffer, rest.byteOffset, rest.byteLength).getUint32(1)} bytes, ${rest.length - 5} present`)
}

/** Inflates a unary body sent with `Content-Encoding: gzip`; identity bodies pass through. */
export const decodeUnaryBody = (
  body: Uint8Array,
  contentEncoding: string | undefined,
  maxBytes: number
): Uint8Array | ConnectError => {
  const encoding = (contentEncoding ?? "identity").trim().toLowerCase()
  if (encoding === "identity" || encoding === "") return body
  if (encoding !== "gzip") return new ConnectError("unimplemented", `content-encoding ${encoding} is not supported (gzip and identity are)`)
  try {
    return new Uint8Array(gunzipSync(body, { maxOutputLength: maxBytes }))
  } catch (cause) {
    const message = String((cause as Error).message ?? cause)
    return /maxOutputLength|Cannot create a Buffer larger/i.test(message)
      ? new ConnectError("resource_exhausted", `gzip body inflates past the limit of ${maxBytes} bytes`)
      : new ConnectError("invalid_argument", `gzip body does not inflate: ${message}`)
  }
}
