/**
 * The bytes of a streamed text or thinking delta, written directly. A model's answer is mostly
 * these two messages, one per network read: through protobuf-es each is a `create` of the
 * nested messages and a reflective `toBinary` (~4 µs a frame in a hot loop, ~5% of the busy
 * time of 50 paced streams in a CPU profile). Their wire form is three nested length-delimited
 * fields around the UTF-8 text, so it is written here in one buffer; every other message still
 * goes through protobuf-es, and `test/dialect/DeltaBytes.test.ts` checks these bytes against
 * `toBinary` of the same message for arbitrary text.
 *
 *   AgentServerMessage { interaction_update = 1 { text_delta = 1 { text = 1 } } }
 *   AgentServerMessage { interaction_update = 1 { thinking_delta = 4 { text = 1, thinking_style = 2 (DEFAULT) } } }
 */
import { ThinkingStyle } from "../gen/agent/v1/agent_pb.js"
import type { ResponseEvent } from "../Llm.js"
import type { TurnCorrelation } from "./Correlation.js"

/** Field 1, length-delimited. */
const TAG_1_LEN = 0x0a
/** Field 4, length-delimited. */
const TAG_4_LEN = 0x22
/** Field 2, varint. */
const TAG_2_VARINT = 0x10

const varintSize = (n: number): number => (n < 0x80 ? 1 : n < 0x4000 ? 2 : n < 0x200000 ? 3 : n < 0x10000000 ? 4 : 5)

const writeVarint = (out: Buffer, at: number, n: number): number => {
  while (n >= 0x80) {
    out[at++] = (n & 0x7f) | 0x80
    n >>>= 7
  }
  out[at++] = n
  return at
}

/**
 * The serialized `AgentServerMessage` of a text delta (`thinking` false) or a thinking delta
 * with the default style, as `toBinary` writes it. Text that is not well-formed UTF-16 (a lone
 * surrogate) is written as U+FFFD, as protobuf-es's encoder writes it.
 */
export const deltaMessageBytes = (text: string, thinking: boolean): Uint8Array => {
  const textBytes = Buffer.byteLength(text, "utf8")
  // The innermost message: text (field 1), and for thinking the style (field 2, a one-byte varint).
  // An empty text is not written (proto3's default), as protobuf-es leaves it out.
  const inner = (textBytes === 0 ? 0 : 1 + varintSize(textBytes) + textBytes) + (thinking ? 2 : 0)
  const update = 1 + varintSize(inner) + inner
  const total = 1 + varintSize(update) + update
  const out = Buffer.allocUnsafe(total)
  let at = 0
  out[at++] = TAG_1_LEN
  at = writeVarint(out, at, update)
  out[at++] = thinking ? TAG_4_LEN : TAG_1_LEN
  at = writeVarint(out, at, inner)
  if (textBytes > 0) {
    out[at++] = TAG_1_LEN
    at = writeVarint(out, at, textBytes)
    at += out.write(text, at, "utf8")
  }
  if (thinking) {
    out[at++] = TAG_2_VARINT
    out[at++] = ThinkingStyle.DEFAULT
  }
  return out
}

/**
 * A model event's message bytes when it is a non-empty text or thinking delta of the model call
 * the correlation is on (so encoding it changes no correlation); undefined otherwise, and
 * `encodeResponseEvent` encodes it.
 */
export const deltaBytesOf = (correlation: TurnCorrelation, callId: string, event: ResponseEvent): Uint8Array | undefined => {
  if (correlation.modelCallId !== callId) return undefined
  if (event._tag === "TextDelta") return event.delta === "" ? undefined : deltaMessageBytes(event.delta, false)
  if (event._tag === "ThinkingDelta") return event.delta === "" ? undefined : deltaMessageBytes(event.delta, true)
  return undefined
}
