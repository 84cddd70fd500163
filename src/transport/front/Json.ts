/**
 * An agent call in a JSON codec: the call's protocol, its messages turned into the binary ones
 * the transport reads and its answers back into JSON (`Dialect.agentJson`), envelope by envelope
 * for a stream. The end-stream frame is JSON already and passes as it is.
 */
import { ConnectError, envelope, FLAG_END_STREAM, parseEnvelopes } from "../Connect.js"
import type { Protocol } from "./Wire.js"

export interface JsonForms {
  /** A request message from JSON to binary, or why it is not one. */
  readonly request: (json: Uint8Array) => Uint8Array | string
  /** An answer (a unary call's, or a stream's message) from binary to JSON. */
  readonly answer: (binary: Uint8Array) => Uint8Array
}

const invalid = (reason: string) => new ConnectError("invalid_argument", reason)

/** The request envelopes of a stream, each message in binary. */
const streamRequest = (forms: JsonForms, body: Uint8Array, limit: number): Uint8Array | ConnectError => {
  const envelopes = parseEnvelopes(body, limit)
  if (envelopes instanceof ConnectError) return envelopes
  const out: Array<Uint8Array> = []
  for (const { flags, payload } of envelopes) {
    const binary = (flags & FLAG_END_STREAM) !== 0 ? payload : forms.request(payload)
    if (typeof binary === "string") return invalid(binary)
    out.push(envelope(flags & ~0x01, binary))
  }
  return Buffer.concat(out)
}

/** `protocol` for a call whose messages are JSON on the wire. */
export const inJson = (protocol: Protocol, forms: JsonForms): Protocol => ({
  ...protocol,
  read: (request, limit, kind, done) =>
    protocol.read(request, limit, kind, (body) => {
      if (body instanceof ConnectError) return done(body)
      if (kind !== "unary") return done(streamRequest(forms, body, limit))
      const binary = forms.request(body)
      done(typeof binary === "string" ? invalid(binary) : binary)
    }),
  answer: (response, message) => protocol.answer(response, forms.answer(message)),
  write: (response, frames) =>
    protocol.write(response, frames.map((frame) => (frame[0]! & FLAG_END_STREAM) !== 0 ? frame : envelope(frame[0]!, forms.answer(frame.subarray(5)))))
})
