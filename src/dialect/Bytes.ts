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

const HEX = /^[0-9a-fA-F]*$/

/** Strict hex: an odd length or a non-hex character is an error, never a silent truncation. */
export const hexToBytes = (hex: string): Either.Either<Uint8Array, DialectError> => {
  if (hex.length % 2 !== 0) return fail("badHex", `hex data has odd length ${hex.length}`)
  if (!HEX.test(hex)) return fail("badHex", "hex data contains a non-hex character")
  const bytes = new Uint8Array(hex.length / 2)
  for (let i = 0; i < bytes.length; i++) bytes[i] = parseInt(hex.slice(i * 2, i * 2 + 2), 16)
  return Either.right(bytes)
}

export const bytesToHex = (bytes: Uint8Array): string => {
  let out = ""
  for (const byte of bytes) out += byte.toString(16).padStart(2, "0")
  return out
}

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
