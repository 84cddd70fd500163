/**
 * The Chat Completions chunk as the vendors send it, read leniently: the schema, the usage
 * conventions (who counts reasoning and cached tokens where), the finish reasons, typed content
 * parts, and OpenRouter's `reasoning_details`, kept as the thinking block's signature.
 */
import { Schema } from "effect"
import type { StopReason, Usage } from "../../Llm.js"
import { canonicalJson } from "../../Llm.js"

const OptNum = Schema.optional(Schema.NullOr(Schema.Number))
const OptStr = Schema.optional(Schema.NullOr(Schema.String))

export const ChatUsage = Schema.Struct({
  prompt_tokens: OptNum,
  completion_tokens: OptNum,
  total_tokens: OptNum,
  prompt_tokens_details: Schema.optional(Schema.NullOr(Schema.Struct({ cached_tokens: OptNum, cache_write_tokens: OptNum }))),
  completion_tokens_details: Schema.optional(Schema.NullOr(Schema.Struct({ reasoning_tokens: OptNum }))),
  prompt_cache_hit_tokens: OptNum,
  prompt_cache_miss_tokens: OptNum,
  cached_tokens: OptNum
})
export type ChatUsage = typeof ChatUsage.Type

export const ChatToolCallDelta = Schema.Struct({
  index: Schema.optional(Schema.NullOr(Schema.Number)),
  id: OptStr,
  function: Schema.optional(Schema.NullOr(Schema.Struct({ name: OptStr, arguments: OptStr })))
})

export const ChatChoice = Schema.Struct({
  index: Schema.optional(Schema.NullOr(Schema.Number)),
  delta: Schema.optional(Schema.NullOr(Schema.Struct({
    // A string, or (Mistral) an array of typed chunks; read by `contentParts`.
    content: Schema.optional(Schema.Unknown),
    reasoning_content: OptStr,
    reasoning: OptStr,
    reasoning_details: Schema.optional(Schema.Unknown),
    refusal: OptStr,
    tool_calls: Schema.optional(Schema.NullOr(Schema.Array(ChatToolCallDelta)))
  }))),
  finish_reason: OptStr,
  usage: Schema.optional(Schema.NullOr(ChatUsage))
})

export const ChatChunk = Schema.Struct({
  id: OptStr,
  model: OptStr,
  choices: Schema.optional(Schema.NullOr(Schema.Array(ChatChoice))),
  usage: Schema.optional(Schema.NullOr(ChatUsage)),
  // Groq puts the usage of a stream under `x_groq`.
  x_groq: Schema.optional(Schema.NullOr(Schema.Struct({ usage: Schema.optional(Schema.NullOr(ChatUsage)) }))),
  error: Schema.optional(Schema.Unknown)
})
export type ChatChunk = typeof ChatChunk.Type

// =============================================================================
// Usage
// =============================================================================

/**
 * The neutral usage of a Chat usage object, whatever the vendor's convention:
 * - cached input: `prompt_tokens_details.cached_tokens` (OpenAI and most), DeepSeek's
 *   `prompt_cache_hit_tokens` and Moonshot's top-level `cached_tokens` are the same hits told
 *   several ways, so the largest is taken, once; OpenRouter's `cache_write_tokens` is a write;
 * - reasoning: OpenAI and DeepSeek count it inside `completion_tokens` (total = prompt +
 *   completion); xAI outside (total = prompt + completion + reasoning), so it is added there.
 */
export const mapUsage = (usage: ChatUsage): Usage => {
  const hit = usage.prompt_cache_hit_tokens ?? 0
  const prompt = usage.prompt_tokens ?? hit + (usage.prompt_cache_miss_tokens ?? 0)
  const cached = Math.max(usage.prompt_tokens_details?.cached_tokens ?? 0, hit, usage.cached_tokens ?? 0)
  const cacheWrite = usage.prompt_tokens_details?.cache_write_tokens ?? 0
  const completion = usage.completion_tokens ?? 0
  const reasoning = usage.completion_tokens_details?.reasoning_tokens ?? 0
  const total = usage.total_tokens
  // Only the total tells the conventions apart (a recorded OpenRouter stream has reasoning above
  // completion with total = prompt + completion), so without one nothing is added.
  const reasoningOutside = reasoning > 0 && typeof total === "number" && total === prompt + completion + reasoning
  return {
    input: Math.max(0, prompt - cached - cacheWrite),
    output: completion + (reasoningOutside ? reasoning : 0),
    cacheRead: cached,
    cacheWrite,
    reasoning
  }
}

// =============================================================================
// Finish reasons
// =============================================================================

export type Finish = { readonly stop: StopReason } | { readonly error: string; readonly retryable: boolean }

export const mapFinishReason = (reason: string): Finish => {
  switch (reason) {
    case "stop":
    case "end_turn":
      return { stop: "stop" }
    case "length":
    case "model_context_window_exceeded":
      return { stop: "length" }
    case "tool_calls":
    case "function_call":
      return { stop: "toolUse" }
    case "content_filter":
      return { error: "the response was blocked by the provider's content filter", retryable: false }
    case "insufficient_system_resource":
      return { error: "the provider ran out of resources (insufficient_system_resource)", retryable: true }
    default:
      return { stop: "stop" }
  }
}

// =============================================================================
// Content parts
// =============================================================================

export interface ContentPiece {
  readonly kind: "text" | "thinking"
  readonly text: string
}

const textOf = (value: unknown): string => {
  if (typeof value === "string") return value
  if (!Array.isArray(value)) return ""
  let text = ""
  for (const item of value) {
    if (typeof item === "string") text += item
    else if (item !== null && typeof item === "object" && typeof (item as { text?: unknown }).text === "string") text += (item as { text: string }).text
  }
  return text
}

/**
 * `delta.content` as text and thinking pieces, in order: a plain string, or an array of typed
 * chunks (Mistral's Magistral: `{type:"thinking", thinking:[{type:"text", text}]}` and
 * `{type:"text", text}`). Chunks of other types (references, images) carry no text for us.
 */
export const contentParts = (content: unknown): ReadonlyArray<ContentPiece> => {
  if (typeof content === "string") return content.length > 0 ? [{ kind: "text", text: content }] : []
  if (!Array.isArray(content)) return []
  const pieces: Array<ContentPiece> = []
  for (const part of content) {
    if (part === null || typeof part !== "object") continue
    const { type, text, thinking } = part as { type?: unknown; text?: unknown; thinking?: unknown }
    if (type === "thinking") {
      const value = textOf(thinking)
      if (value.length > 0) pieces.push({ kind: "thinking", text: value })
    } else if ((type === "text" || type === undefined) && typeof text === "string" && text.length > 0) {
      pieces.push({ kind: "text", text })
    }
  }
  return pieces
}

// =============================================================================
// Reasoning details (OpenRouter)
// =============================================================================

export type ReasoningDetail = Record<string, unknown>

/**
 * Adds streamed `reasoning_details` entries to those already seen. Pieces of one entry share
 * its `index` and `type`: their `text`/`summary` are joined, any other field (signature, data,
 * id, format) takes its latest non-null value, so the result is the entry the whole message
 * would have carried. Returns whether anything was added.
 */
export const mergeReasoningDetails = (into: Array<ReasoningDetail>, incoming: unknown): boolean => {
  if (!Array.isArray(incoming)) return false
  let changed = false
  for (const raw of incoming) {
    if (raw === null || typeof raw !== "object" || Array.isArray(raw)) continue
    const detail = raw as ReasoningDetail
    const last = into[into.length - 1]
    const samePiece = last !== undefined && typeof detail["index"] === "number" && last["index"] === detail["index"] && last["type"] === detail["type"]
    if (!samePiece) {
      into.push({ ...detail })
      changed = true
      continue
    }
    for (const [key, value] of Object.entries(detail)) {
      if (value === null || value === undefined) continue
      const previous = last[key]
      last[key] = (key === "text" || key === "summary") && typeof value === "string" && typeof previous === "string" ? previous + value : value
    }
    changed = true
  }
  return changed
}

/**
 * A Chat thinking block's signature: the name of the field its text came in (`reasoning_content`,
 * `reasoning`; `content` for typed content chunks), or, with reasoning details, both as JSON.
 */
export const encodeReasoningSignature = (field: string, details: ReadonlyArray<ReasoningDetail>): string =>
  details.length === 0 ? field : canonicalJson({ field, reasoning_details: details })

export const decodeReasoningSignature = (signature: string | undefined): { readonly field: string | undefined; readonly details: ReadonlyArray<ReasoningDetail> } => {
  if (signature === undefined) return { field: undefined, details: [] }
  if (/^[a-z_]+$/.test(signature)) return { field: signature, details: [] }
  try {
    const parsed = JSON.parse(signature) as { field?: unknown; reasoning_details?: unknown }
    const field = typeof parsed.field === "string" && /^[a-z_]+$/.test(parsed.field) ? parsed.field : undefined
    const details = Array.isArray(parsed.reasoning_details)
      ? parsed.reasoning_details.filter((detail): detail is ReasoningDetail => detail !== null && typeof detail === "object" && !Array.isArray(detail))
      : []
    return { field, details }
  } catch {
    return { field: undefined, details: [] }
  }
}
