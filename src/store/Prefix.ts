/**
 * Prefix diagnostics: whether each model call of a conversation sent a byte extension of the
 * previous call's request (so the provider's prefix cache could serve it), and, where it did
 * not, why: an intended segment boundary (a compaction, a rewind, a fork), a summary call
 * (the conversation's prefix plus an instruction), or a break (the system prompt or the tools
 * changed) with the first byte that differs. Pure: it reads call records and, for a break, the
 * two rebuilt requests.
 *
 * A request is compared in the order providers read it: the system prompt, the tools, then
 * the messages, each canonically serialized (`requestBytes`).
 */
import { canonicalJson, serializeMessage } from "../Llm.js"
import type { RequestMessages } from "../Llm.js"

/** What the diagnostics need of a model call (see `Store.callsOf`). */
export interface CallShape {
  readonly callId: string
  readonly turnId: string
  readonly systemPromptHash: string
  readonly toolsHash: string
  readonly segmentStart: number
  readonly messageCount: number
  /** A summary call: its messages are the segment plus an instruction, stored whole. */
  readonly detached: boolean
}

/** How a segment began, as the store recorded it (`Store.segments`). */
export interface BoundaryShape {
  readonly start: number
  readonly kind: string
}

export type PrefixStatus =
  | { readonly _tag: "First" }
  /** Same prompt and tools, the same segment, more messages: the cache can serve the previous request. */
  | { readonly _tag: "Extends"; readonly addedMessages: number }
  /** A summary call: the previous request's prefix plus an instruction (an overflow's summary elides output: not a prefix). */
  | { readonly _tag: "Summary" }
  /** A new segment began between the two calls: an intended break. */
  | { readonly _tag: "Boundary"; readonly kind: string; readonly segmentStart: number }
  /** An unintended break: the first part that differs (and, once measured, the byte). */
  | { readonly _tag: "Break"; readonly part: "systemPrompt" | "tools" | "history"; readonly firstDifferingByte?: number; readonly where?: string }

/**
 * Each call's status against the previous answer call (summary calls are compared with it but
 * do not become the reference: the next answer extends the conversation, not the summary).
 */
export const prefixStatuses = (
  calls: ReadonlyArray<CallShape>,
  boundaries: ReadonlyArray<BoundaryShape>
): ReadonlyArray<PrefixStatus> => {
  let previous: CallShape | undefined
  return calls.map((call): PrefixStatus => {
    const before = previous
    if (!call.detached) previous = call
    if (before === undefined) return call.detached ? { _tag: "Summary" } : { _tag: "First" }
    if (call.segmentStart !== before.segmentStart) {
      const boundary = boundaries.find((b) => b.start === call.segmentStart)
      return { _tag: "Boundary", kind: boundary?.kind ?? "unknown", segmentStart: call.segmentStart }
    }
    if (call.systemPromptHash !== before.systemPromptHash) return { _tag: "Break", part: "systemPrompt" }
    if (call.toolsHash !== before.toolsHash) return { _tag: "Break", part: "tools" }
    if (call.detached) return { _tag: "Summary" }
    if (call.messageCount <= before.messageCount) return { _tag: "Break", part: "history" }
    return { _tag: "Extends", addedMessages: call.messageCount - before.messageCount }
  })
}

/** A request as providers read it: system prompt, tools, then each message, canonically serialized. */
export const requestBytes = (request: RequestMessages): ReadonlyArray<{ readonly where: string; readonly text: string }> => [
  { where: "the system prompt", text: canonicalJson(request.systemPrompt) },
  { where: "the tools", text: canonicalJson(request.tools) },
  ...request.messages.map((message, index) => ({ where: `message ${index}`, text: serializeMessage(message) }))
]

/**
 * The first byte at which `next` stops extending `previous` (a UTF-8 offset in the concatenation
 * of `requestBytes`), and the part it falls in; undefined when `next` extends `previous`.
 */
export const firstDifference = (
  previous: RequestMessages,
  next: RequestMessages
): { readonly byte: number; readonly where: string } | undefined => {
  const a = requestBytes(previous)
  const b = requestBytes(next)
  let offset = 0
  for (let part = 0; part < a.length; part++) {
    const left = a[part]!.text
    const right = b[part]?.text
    if (right === left) {
      offset += Buffer.byteLength(left, "utf8")
      continue
    }
    const other = right ?? ""
    let at = 0
    while (at < left.length && at < other.length && left.charCodeAt(at) === other.charCodeAt(at)) at++
    return {
      byte: offset + Buffer.byteLength(left.slice(0, at), "utf8"),
      where: right === undefined ? `${a[part]!.where} (missing from the next request)` : b[part]!.where
    }
  }
  return undefined
}
