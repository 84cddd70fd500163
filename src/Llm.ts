/**
 * The neutral LLM contract: the messages of a conversation, the request sent to a model, the
 * events a model stream produces, and the `Llm` service that turns one into the other.
 *
 * Every provider adapter (src/llm/*) translates its wire format into these types and nothing
 * more; the loop, the store and the dialect only ever see these types. Messages carry no
 * wall-clock time and no random ids, so a replayed history serializes to the same bytes.
 */
import { Context, Schema } from "effect"
import type { Effect, Stream } from "effect"
import { sha256 } from "./internal/Sha256.js"

// =============================================================================
// Content blocks
// =============================================================================

/** Provider-specific fields kept verbatim and replayed to the same provider (e.g. Gemini `thoughtSignature`). */
export const ProviderExtras = Schema.Record({ key: Schema.String, value: Schema.Unknown })
export type ProviderExtras = typeof ProviderExtras.Type

export const TextContent = Schema.Struct({
  type: Schema.Literal("text"),
  text: Schema.String,
  /** Opaque provider state attached to a text block (Gemini part signature, Responses message id). */
  signature: Schema.optional(Schema.String)
})
export type TextContent = typeof TextContent.Type

export const ImageContent = Schema.Struct({
  type: Schema.Literal("image"),
  /** Base64 of the image bytes. */
  data: Schema.String,
  mimeType: Schema.String
})
export type ImageContent = typeof ImageContent.Type

export const ThinkingContent = Schema.Struct({
  type: Schema.Literal("thinking"),
  thinking: Schema.String,
  /** Anthropic signature, Gemini thoughtSignature, Responses reasoning item, or the Chat field name. */
  signature: Schema.optional(Schema.String),
  /** True when the provider returned the thinking encrypted (Anthropic `redacted_thinking`). */
  redacted: Schema.optional(Schema.Boolean)
})
export type ThinkingContent = typeof ThinkingContent.Type

export const ToolCall = Schema.Struct({
  type: Schema.Literal("toolCall"),
  id: Schema.String,
  name: Schema.String,
  /** The arguments exactly as the model produced them: JSON text (`{}` when it sent none). */
  arguments: Schema.String,
  extras: Schema.optional(ProviderExtras)
})
export type ToolCall = typeof ToolCall.Type

export const UserContent = Schema.Union(TextContent, ImageContent)
export type UserContent = typeof UserContent.Type

export const AssistantContent = Schema.Union(TextContent, ThinkingContent, ToolCall)
export type AssistantContent = typeof AssistantContent.Type

// =============================================================================
// Messages
// =============================================================================

export const StopReason = Schema.Literal("stop", "length", "toolUse")
export type StopReason = typeof StopReason.Type

const TokenCount = Schema.Int.pipe(Schema.nonNegative())

/**
 * Token usage of one call. `input` counts input tokens that were neither read from nor written
 * to the cache; `output` includes `reasoning`.
 */
export const Usage = Schema.Struct({
  input: TokenCount,
  output: TokenCount,
  cacheRead: TokenCount,
  cacheWrite: TokenCount,
  reasoning: TokenCount
})
export type Usage = typeof Usage.Type

export const emptyUsage: Usage = { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, reasoning: 0 }

export const addUsage = (a: Usage, b: Usage): Usage => ({
  input: a.input + b.input,
  output: a.output + b.output,
  cacheRead: a.cacheRead + b.cacheRead,
  cacheWrite: a.cacheWrite + b.cacheWrite,
  reasoning: a.reasoning + b.reasoning
})

export const UserMessage = Schema.Struct({
  role: Schema.Literal("user"),
  content: Schema.Array(UserContent)
})
export type UserMessage = typeof UserMessage.Type

export const AssistantMessage = Schema.Struct({
  role: Schema.Literal("assistant"),
  content: Schema.Array(AssistantContent),
  /** The wire API that produced it (`openai-chat`, `anthropic`, `gemini`, `openai-responses`). */
  api: Schema.String,
  /** The provider configuration it came from (`deepseek`, `openrouter`, ...). */
  provider: Schema.String,
  /** The upstream model id. */
  model: Schema.String,
  responseId: Schema.optional(Schema.String),
  usage: Usage,
  stopReason: StopReason
})
export type AssistantMessage = typeof AssistantMessage.Type

export const ToolResultMessage = Schema.Struct({
  role: Schema.Literal("toolResult"),
  toolCallId: Schema.String,
  /** Kept beside the id because some providers (Gemini) answer a call by name. */
  toolName: Schema.String,
  content: Schema.Array(UserContent),
  isError: Schema.Boolean
})
export type ToolResultMessage = typeof ToolResultMessage.Type

export const Message = Schema.Union(UserMessage, AssistantMessage, ToolResultMessage)
export type Message = typeof Message.Type

export const ToolDefinition = Schema.Struct({
  name: Schema.String,
  description: Schema.String,
  /** JSON Schema of the arguments object. */
  parameters: Schema.Record({ key: Schema.String, value: Schema.Unknown })
})
export type ToolDefinition = typeof ToolDefinition.Type

/**
 * One complete model request. Only `messages` is history (append-only); the system prompt and
 * the tool list are rebuilt for each request.
 */
export const RequestMessages = Schema.Struct({
  systemPrompt: Schema.String,
  messages: Schema.Array(Message),
  tools: Schema.Array(ToolDefinition)
})
export type RequestMessages = typeof RequestMessages.Type

/** The tool calls of an assistant message, in content order. */
export const toolCallsOf = (message: AssistantMessage): ReadonlyArray<ToolCall> =>
  message.content.filter((block): block is ToolCall => block.type === "toolCall")

// =============================================================================
// Stream events
// =============================================================================

const ContentIndex = Schema.Int.pipe(Schema.nonNegative())

/**
 * What a model stream produces. `index` is the position of the block in the final message's
 * `content`. The only assistant message that may ever be committed is the one in `Done`.
 */
export const Start = Schema.TaggedStruct("Start", {
  model: Schema.optional(Schema.String),
  responseId: Schema.optional(Schema.String),
  /** How many attempts the target took to open this stream, when more than one (retries before the first event). */
  attempts: Schema.optional(Schema.Int),
  /**
   * Set by the router when what answers is not the model the client named: the configured model
   * an alias or `*` named, or the fallback target (`provider/upstream model`) that took the call.
   */
  routedModel: Schema.optional(Schema.String)
})
export const TextStart = Schema.TaggedStruct("TextStart", { index: ContentIndex })
export const TextDelta = Schema.TaggedStruct("TextDelta", { index: ContentIndex, delta: Schema.String })
export const TextEnd = Schema.TaggedStruct("TextEnd", { index: ContentIndex })
export const ThinkingStart = Schema.TaggedStruct("ThinkingStart", { index: ContentIndex })
export const ThinkingDelta = Schema.TaggedStruct("ThinkingDelta", { index: ContentIndex, delta: Schema.String })
export const ThinkingEnd = Schema.TaggedStruct("ThinkingEnd", {
  index: ContentIndex,
  signature: Schema.optional(Schema.String),
  redacted: Schema.optional(Schema.Boolean)
})
export const ToolCallStart = Schema.TaggedStruct("ToolCallStart", {
  index: ContentIndex,
  id: Schema.String,
  name: Schema.String
})
export const ToolCallDelta = Schema.TaggedStruct("ToolCallDelta", { index: ContentIndex, delta: Schema.String })
export const ToolCallEnd = Schema.TaggedStruct("ToolCallEnd", { index: ContentIndex, toolCall: ToolCall })
export const Done = Schema.TaggedStruct("Done", { reason: StopReason, message: AssistantMessage })
export const ErrorEvent = Schema.TaggedStruct("Error", {
  reason: Schema.Literal("error", "aborted"),
  message: Schema.String,
  retryable: Schema.Boolean,
  /** Set when the provider refused the request as longer than the model's context window. */
  code: Schema.optional(Schema.Literal("contextOverflow"))
})

export const ResponseEvent = Schema.Union(
  Start,
  TextStart,
  TextDelta,
  TextEnd,
  ThinkingStart,
  ThinkingDelta,
  ThinkingEnd,
  ToolCallStart,
  ToolCallDelta,
  ToolCallEnd,
  Done,
  ErrorEvent
)
export type ResponseEvent = typeof ResponseEvent.Type

/**
 * Adjacent deltas of the same kind and block joined into one (their texts concatenated):
 * the same content in fewer events. Used for events that arrived together (one network read),
 * so nothing is held back; any other event ends a run.
 */
export const coalesceDeltas = (events: ReadonlyArray<ResponseEvent>): ReadonlyArray<ResponseEvent> => {
  if (events.length < 2) return events
  const out: Array<ResponseEvent> = []
  for (const event of events) {
    const previous = out[out.length - 1]
    if (
      previous !== undefined &&
      (event._tag === "TextDelta" || event._tag === "ThinkingDelta" || event._tag === "ToolCallDelta") &&
      previous._tag === event._tag &&
      previous.index === event.index
    ) {
      out[out.length - 1] = { ...previous, delta: previous.delta + event.delta }
    } else {
      out.push(event)
    }
  }
  return out
}

// =============================================================================
// Errors
// =============================================================================

export const LlmErrorReason = Schema.Literal(
  "auth",
  "rateLimited",
  "overloaded",
  "contextOverflow",
  "badRequest",
  "network",
  "idleTimeout",
  "malformedStream",
  "providerError",
  "notConfigured",
  "aborted"
)
export type LlmErrorReason = typeof LlmErrorReason.Type

/** A failed model call, classified so the runner can decide on retries and the user can read why. */
export class LlmError extends Schema.TaggedError<LlmError>("cursor-byok/LlmError")("LlmError", {
  reason: LlmErrorReason,
  message: Schema.String,
  retryable: Schema.Boolean,
  provider: Schema.optional(Schema.String),
  status: Schema.optional(Schema.Number),
  retryAfterMs: Schema.optional(Schema.Number)
}) {}

// =============================================================================
// The service
// =============================================================================

export interface StreamOptions {
  /** The model id as configured (the router maps it to a provider and an upstream model). */
  readonly model: string
  /** The loop's call id: stable across retries, usable as a provider cache/session key. */
  readonly callId: string
  readonly maxOutputTokens?: number
  /**
   * The delta fast path: the call's events may be handed to this callback instead of the
   * stream, in order, as they come off the network (in the network read's own call): from the
   * answer's first content on (with the `Start` before it), once no retry or fallback can
   * replace the answer; the stream then carries only its end or its failure. An adapter may
   * also ignore it and emit everything on the stream (test doubles do).
   */
  readonly onEvents?: (events: ReadonlyArray<ResponseEvent>) => void
  /**
   * Each attempt that failed before answering (a retry or a fallback follows, or the call fails
   * with it), reported by the HTTP layer where it retries, with the target the router chose.
   * Awaited before the next attempt; an attempt that answers reports nothing.
   */
  readonly onAttemptFailed?: (attempt: FailedAttempt) => Effect.Effect<void>
}

/** An attempt of a model call that failed before answering (`StreamOptions.onAttemptFailed`). */
export interface FailedAttempt {
  /** The target tried: a provider id and the upstream model asked for. */
  readonly provider: string
  readonly upstreamModel: string
  /** 1 for the target's first attempt, 2 for its first retry... */
  readonly attempt: number
  /** The HTTP status the provider answered; undefined for a network error or a timeout. */
  readonly status?: number
  readonly reason: LlmError["reason"]
  readonly message: string
  readonly startedAtMs: number
  readonly failedAtMs: number
}

/**
 * Streams one model call. The stream emits `Start` first and ends after `Done`, or fails with
 * an `LlmError` (adapters may also end with an `Error` event). Retries, if any, happen inside,
 * before the first event is emitted, with the exact same request.
 */
export class Llm extends Context.Tag("cursor-byok/Llm")<Llm, {
  readonly stream: (request: RequestMessages, options: StreamOptions) => Stream.Stream<ResponseEvent, LlmError>
}>() {}

// =============================================================================
// Canonical serialization and hashes
// =============================================================================

/**
 * JSON with object keys in code-point order at every depth and `undefined` members left out:
 * equal values give byte-identical text, whatever order their keys were built in.
 */
export const canonicalJson = (value: unknown): string => {
  if (value === null || typeof value !== "object") {
    if (value === undefined || typeof value === "function" || typeof value === "symbol") return "null"
    if (typeof value === "bigint") return value.toString()
    return JSON.stringify(value)
  }
  if (Array.isArray(value)) {
    let out = "["
    for (let i = 0; i < value.length; i++) {
      if (i > 0) out += ","
      out += canonicalJson(value[i])
    }
    return out + "]"
  }
  if (value instanceof Uint8Array) return canonicalJson(Array.from(value))
  const record = value as Record<string, unknown>
  const keys = Object.keys(record).sort()
  let out = "{"
  let first = true
  for (const key of keys) {
    const member = record[key]
    if (member === undefined || typeof member === "function" || typeof member === "symbol") continue
    if (!first) out += ","
    first = false
    out += JSON.stringify(key) + ":" + canonicalJson(member)
  }
  return out + "}"
}

/** The canonical bytes (as text) of one message. */
export const serializeMessage = (message: Message): string => canonicalJson(message)

/** SHA-256 of a message's canonical serialization. */
export const messageHash = (message: Message): string => sha256(serializeMessage(message))

/** The hash of an empty history. */
export const emptyMessagesHash: string = sha256("cursor-byok/messages/v1")

/** Extends a history hash by one message: O(size of that message), whatever the history length. */
export const extendMessagesHash = (previous: string, nextMessageHash: string): string =>
  sha256(previous + nextMessageHash)

/** A stable hash of an ordered message sequence (a hash chain over the messages' hashes). */
export const messagesHash = (messages: ReadonlyArray<Message>): string => {
  let hash = emptyMessagesHash
  for (const message of messages) hash = extendMessagesHash(hash, messageHash(message))
  return hash
}

// The prompt and the tool list of a model call are hashed by the runner (the request hash) and
// twice by the store (checking that hash, naming the stored prompt and tools): several KB of
// canonical JSON and SHA-256 each time, ~0.3 ms per call, measured. Both hashes are memoized:
// the prompt by its text (a few recent ones), the tool list by identity (the native catalogs
// are built once, `Tools.toolCatalog`). Pure all the same: equal input, equal hash.
const promptHashes = new Map<string, string>()
const toolsHashes = new WeakMap<ReadonlyArray<ToolDefinition>, string>()

/** Content address of the system prompt. */
export const systemPromptHash = (systemPrompt: string): string => {
  const known = promptHashes.get(systemPrompt)
  if (known !== undefined) return known
  const hash = sha256(canonicalJson(systemPrompt))
  if (promptHashes.size >= 64) promptHashes.clear()
  promptHashes.set(systemPrompt, hash)
  return hash
}

/** Content address of a tool list (treated as immutable). */
export const toolsHash = (tools: ReadonlyArray<ToolDefinition>): string => {
  const known = toolsHashes.get(tools)
  if (known !== undefined) return known
  const hash = sha256(canonicalJson(tools))
  toolsHashes.set(tools, hash)
  return hash
}

/**
 * The hash of an exact request: it names the model and every byte of the prompt, the tools and
 * the history, while costing O(1) given the history's `messagesHash`.
 */
export const requestHash = (
  model: string,
  parts: { readonly systemPrompt: string; readonly tools: ReadonlyArray<ToolDefinition> },
  historyHash: string,
  messageCount: number
): string =>
  sha256(canonicalJson({
    model,
    systemPrompt: systemPromptHash(parts.systemPrompt),
    tools: toolsHash(parts.tools),
    messages: historyHash,
    messageCount
  }))
