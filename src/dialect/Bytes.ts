/**
 * The bytes under the dialect: the error for client bytes we cannot act on, strict hex,
 * protobuf parsing that fails with that error, and the small byte helpers the decoders and
 * encoders share.
 */
import { Either, Schema } from "effect"

export const DialectErrorReason = Schema.Literal("badHex", "badProtobuf", "badJson", "missingField", "unknownCase")
export type DialectErrorReason = typeof DialectErrorReason.Type

/** Bytes from the client that are not a message we can act on. Never a crash, never a state change. */
export class DialectError extends Schema.TaggedError<DialectError>("cursor-byok/DialectError")("DialectError", {
  reason: DialectErrorReason,
  message: Schema.String
}) {}

export const fail = (reason: DialectErrorReason, message: string) => Either.left(new DialectError({ reason, message }))

/**
 * Strict hex: an odd length or a non-hex character is an error, never a silent truncation.
 * Decoded natively (a run request is a BidiAppend's hex `data`; parsing it two characters at a
 * time took ~85 ns a byte): Node's hex decoder stops at the first pair that is not hex, so a
 * shorter result names a bad character. The bytes are a copy of their own (a small `Buffer`
 * lives in a shared pool).
 */
export const hexToBytes = (hex: string): Either.Either<Uint8Array, DialectError> => {
  if (hex.length % 2 !== 0) return fail("badHex", `hex data has odd length ${hex.length}`)
  const decoded = Buffer.from(hex, "hex")
  if (decoded.length * 2 !== hex.length) return fail("badHex", "hex data contains a non-hex character")
  return Either.right(new Uint8Array(decoded))
}

export const bytesToHex = (bytes: Uint8Array): string => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("hex")

export const parse = <A>(what: string, decode: () => A): Either.Either<A, DialectError> => {
  try {
    return Either.right(decode())
  } catch (error) {
    return fail("badProtobuf", `${what} is not valid protobuf: ${error instanceof Error ? error.message : String(error)}`)
  }
}

export const unknownFields = (message: { readonly $unknown?: ReadonlyArray<{ readonly no: number }> | undefined }): Array<number> =>
  (message.$unknown ?? []).map((field) => field.no)

export const sameBytes = (a: Uint8Array, b: Uint8Array): boolean => a.length === b.length && a.every((byte, i) => byte === b[i])

export const utf8 = new TextEncoder()
