/**
 * What the four adapters share: the state-machine interface, the message assembler that turns
 * "block started / delta / ended" into indexed `ResponseEvent`s and the final message
 * (`common/Assembler.ts`), the prefix-stable body layout, and the cross-provider replay rules
 * (llm-providers.md §1.6). Typed error constructors and HTTP error classification live in
 * `common/Errors.ts`; both are re-exported here.
 */
import { Either, Schema } from "effect"
import type { ParseResult } from "effect"
import type { AssistantContent, AssistantMessage, LlmError, Message, ResponseEvent, ToolCall, ToolResultMessage } from "../Llm.js"
import { sha256 } from "../internal/Sha256.js"
import { excerpt, malformed } from "./common/Errors.js"
import * as FastDecode from "./common/FastDecode.js"
import type { SseEvent } from "./Sse.js"

export { Assembler } from "./common/Assembler.js"
export type { StreamMeta } from "./common/Assembler.js"
export {
  classifyHttpError,
  classifyStreamError,
  errorFields,
  llmError,
  malformed,
  readableBody,
  retryAfterFromHeaders,
  retryDelayFromGeminiBody
} from "./common/Errors.js"

// =============================================================================
// State machine
// =============================================================================


/**
 * A pure adapter state machine: SSE events in, `ResponseEvent`s out (appended to `out`). A
 * returned `LlmError` ends the stream with that error. After `finished()` is true, input is ignored.
 */
export interface Machine {
  readonly push: (event: SseEvent, out: Array<ResponseEvent>) => LlmError | undefined
  /** End of input without a terminal event. */
  readonly end: (out: Array<ResponseEvent>) => LlmError | undefined
  readonly finished: () => boolean
}


/** Parses SSE `data` as JSON and decodes it with a lenient schema (unknown fields are ignored). */
export const decodeJson = <A>(
  decode: (u: unknown) => Either.Either<A, ParseResult.ParseError>,
  data: string,
  what: string
): Either.Either<A, LlmError> => {
  let json: unknown
  try {
    json = JSON.parse(data)
  } catch {
    return Either.left(malformed(`${what}: data is not valid JSON: ${excerpt(data, 200)}`))
  }
  return Either.mapLeft(decode(json), (error) => malformed(`${what}: unexpected shape: ${excerpt(error.message, 300)}`))
}

/**
 * For wire APIs whose events name their `type` (Responses, Anthropic): only the types the
 * adapter reads are decoded (a known type of the wrong shape is malformed); any other event is
 * ignored whatever its shape (`Right(undefined)`), since vendors add event types at will.
 * Data that is not JSON is malformed either way.
 */
export const decodeKnownEvent = <A>(
  decode: (u: unknown) => Either.Either<A, ParseResult.ParseError>,
  known: ReadonlySet<string>,
  data: string,
  what: string
): Either.Either<A | undefined, LlmError> => {
  let json: unknown
  try {
    json = JSON.parse(data)
  } catch {
    return Either.left(malformed(`${what}: data is not valid JSON: ${excerpt(data, 200)}`))
  }
  const type = json !== null && typeof json === "object" ? (json as { type?: unknown }).type : undefined
  if (typeof type !== "string" || !known.has(type)) return Either.right(undefined)
  return Either.mapLeft(decode(json), (error) => malformed(`${what} ${type}: unexpected shape: ${excerpt(error.message, 300)}`))
}

/**
 * A wire schema's decoder: the compiled one (`common/FastDecode.ts`) where the schema's AST
 * allows it, with the Schema's own decoding for what it refuses (the error says why).
 */
export const decoderFor = <A, I>(schema: Schema.Schema<A, I>): (u: unknown) => Either.Either<A, ParseResult.ParseError> => {
  const decode = Schema.decodeUnknownEither(schema, { onExcessProperty: "ignore" })
  const fast = FastDecode.compile(schema.ast)
  if (fast === undefined) return decode
  return (u) => {
    const out = fast(u)
    return out === FastDecode.REFUSED ? decode(u) : Either.right(out as A)
  }
}

// =============================================================================
// Prefix-stable body layout
// =============================================================================

/**
 * One serialized history entry: `open` + parts joined by "," + `close`. Consecutive messages
 * may merge into one group (Anthropic tool results, Gemini function responses).
 */
export interface Group {
  readonly open: string
  readonly parts: Array<string>
  readonly close: string
  /** Messages of the same merge key join the previous group. */
  readonly mergeKey: string | undefined
}

/**
 * Lays a history out as `history` + `tail` such that `history(n)` is a byte prefix of
 * `history(n+1)`: the last part is left open (its final `}` moves into the tail), so an appended
 * part, a merged part or a moving cache marker (`lastPartSuffix`, placed as the last key of the
 * last part) only ever adds bytes after it.
 */
export const layoutHistory = (
  groups: ReadonlyArray<Group>,
  lastPartSuffix: string
): { readonly history: string; readonly tail: string } => {
  let history = ""
  let tail = ""
  for (let g = 0; g < groups.length; g++) {
    const group = groups[g]!
    if (g > 0) history += ","
    history += group.open
    const lastGroup = g === groups.length - 1
    for (let p = 0; p < group.parts.length; p++) {
      if (p > 0) history += ","
      const part = group.parts[p]!
      if (lastGroup && p === group.parts.length - 1) {
        history += part.slice(0, -1)
        tail = lastPartSuffix + "}"
      } else {
        history += part
      }
    }
    if (lastGroup) tail += group.close
    else history += group.close
  }
  return { history, tail }
}

/** Appends a part, merging into the previous group when the merge key matches. */
export const pushPart = (groups: Array<Group>, open: string, close: string, mergeKey: string | undefined, part: string): void => {
  const last = groups[groups.length - 1]
  if (mergeKey !== undefined && last !== undefined && last.mergeKey === mergeKey) {
    last.parts.push(part)
    return
  }
  groups.push({ open, parts: [part], close, mergeKey })
}

/**
 * Appends one wire message made of `parts` (none: nothing). Messages sharing a `mergeKey`
 * join the previous group: Anthropic and Gemini want a turn's tool results and the user text
 * after them as one user message.
 */
export const pushMessage = (
  groups: Array<Group>,
  open: string,
  close: string,
  mergeKey: string | undefined,
  parts: ReadonlyArray<string>
): void => {
  const [first, ...rest] = parts
  if (first === undefined) return
  pushPart(groups, open, close, mergeKey, first)
  groups[groups.length - 1]!.parts.push(...rest)
}

// =============================================================================
// Replay across providers (llm-providers.md §1.6)
// =============================================================================

export interface ReplayTarget {
  readonly api: string
  readonly provider: string
  readonly model: string
  /** Rewrites a tool-call id the target would reject; must be a pure function of the id. */
  readonly normalizeToolCallId: (id: string) => string
}

export const isSameModel = (message: AssistantMessage, target: ReplayTarget): boolean =>
  message.api === target.api && message.provider === target.provider && message.model === target.model

/** Anthropic accepts `[A-Za-z0-9_-]{1,64}`. */
export const anthropicToolCallId = (id: string): string => {
  if (/^[A-Za-z0-9_-]{1,64}$/.test(id)) return id
  const cleaned = id.replace(/[^A-Za-z0-9_-]/g, "_")
  return cleaned.length > 0 && cleaned.length <= 64 ? cleaned : `toolu_${sha256(id).slice(0, 40)}`
}

/** OpenAI accepts at most 40 characters. */
export const openAiToolCallId = (id: string): string => (id.length > 0 && id.length <= 40 ? id : `call_${sha256(id).slice(0, 32)}`)

/**
 * The history as the target should see it: assistant messages from another model lose their
 * signatures and provider extras, their thinking becomes plain text (redacted thinking is
 * dropped), and tool ids are normalized (with the matching results); tool calls left without a
 * result get a synthetic error result before the next user or assistant message. Every rule is
 * a function of one message and the target, so an appended message never changes earlier output.
 */
export const transformForReplay = (messages: ReadonlyArray<Message>, target: ReplayTarget): Array<Message> => {
  const out: Array<Message> = []
  let unanswered: Array<ToolCall> = []
  const flushUnanswered = () => {
    for (const call of unanswered) {
      const synthetic: ToolResultMessage = {
        role: "toolResult",
        toolCallId: call.id,
        toolName: call.name,
        content: [{ type: "text", text: "No result provided" }],
        isError: true
      }
      out.push(synthetic)
    }
    unanswered = []
  }
  for (const message of messages) {
    switch (message.role) {
      case "user":
        flushUnanswered()
        out.push(message)
        break
      case "toolResult": {
        const id = target.normalizeToolCallId(message.toolCallId)
        unanswered = unanswered.filter((call) => call.id !== id)
        out.push(id === message.toolCallId ? message : { ...message, toolCallId: id })
        break
      }
      case "assistant": {
        flushUnanswered()
        const same = isSameModel(message, target)
        const content: Array<AssistantContent> = []
        let changed = !same
        for (const block of message.content) {
          if (block.type === "toolCall") {
            const id = target.normalizeToolCallId(block.id)
            const call: ToolCall = same
              ? (id === block.id ? block : { ...block, id })
              : { type: "toolCall", id, name: block.name, arguments: block.arguments }
            if (call !== block) changed = true
            content.push(call)
            unanswered.push(call)
          } else if (same) {
            content.push(block)
          } else if (block.type === "thinking") {
            if (!block.redacted && block.thinking.trim().length > 0) content.push({ type: "text", text: block.thinking })
          } else {
            content.push({ type: "text", text: block.text })
          }
        }
        // The message itself when nothing changed: adapters remember what a message object became (`HistoryParts.ts`).
        out.push(changed ? { ...message, content } : message)
        break
      }
    }
  }
  return out
}

/** The text of user/tool-result content, images described in place (for APIs that take text only). */
export const contentText = (content: ReadonlyArray<{ readonly type: string; readonly text?: string }>): string =>
  content.map((block) => (block.type === "text" ? block.text ?? "" : "[image]")).join("\n")
