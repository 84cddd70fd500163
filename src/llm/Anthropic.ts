/**
 * Anthropic Messages (llm-providers.md §2.3): text, thinking with `signature_delta`,
 * `redacted_thinking`, `tool_use` with `input_json_delta` (no arguments become `{}`), cumulative
 * `message_delta` usage and stop reasons, `ping`, and `error` events such as `overloaded_error`.
 *
 * Request bodies carry three cache breakpoints: fixed ones on the system prompt and the last
 * tool, and a moving one written as the last key of the newest user-side block, so everything
 * before it is byte-identical from one turn to the next.
 */
import { Either, Redacted, Schema } from "effect"
import type { AssistantMessage, LlmError, Message, RequestMessages, ResponseEvent, StopReason, Usage, UserContent } from "../Llm.js"
import { canonicalJson } from "../Llm.js"
import { type Adapter, type BodyParts, type CallSettings, makeAdapter, openHead, toolsOnWire } from "./Adapter.js"
import {
  anthropicToolCallId,
  Assembler,
  classifyStreamError,
  decodeKnownEvent,
  decoderFor,
  type Group,
  isSameModel,
  layoutHistory,
  llmError,
  type Machine,
  type StreamMeta,
  transformForReplay
} from "./Common.js"
import { groupOf, memoFor, type MessageParts, pushHistory } from "./common/HistoryParts.js"
import type { SseEvent } from "./Sse.js"

export const api = "anthropic"

// =============================================================================
// Wire schema
// =============================================================================

const OptNum = Schema.optional(Schema.NullOr(Schema.Number))
const OptStr = Schema.optional(Schema.NullOr(Schema.String))

export const AnthropicUsage = Schema.Struct({
  input_tokens: OptNum,
  output_tokens: OptNum,
  cache_creation_input_tokens: OptNum,
  cache_read_input_tokens: OptNum
})

export const AnthropicEvent = Schema.Struct({
  type: Schema.String,
  index: Schema.optional(Schema.NullOr(Schema.Number)),
  message: Schema.optional(Schema.NullOr(Schema.Struct({ id: OptStr, model: OptStr, usage: Schema.optional(Schema.NullOr(AnthropicUsage)) }))),
  content_block: Schema.optional(Schema.NullOr(Schema.Struct({
    type: Schema.String,
    text: OptStr,
    thinking: OptStr,
    signature: OptStr,
    data: OptStr,
    id: OptStr,
    name: OptStr
  }))),
  delta: Schema.optional(Schema.NullOr(Schema.Struct({
    type: OptStr,
    text: OptStr,
    partial_json: OptStr,
    thinking: OptStr,
    signature: OptStr,
    stop_reason: OptStr
  }))),
  usage: Schema.optional(Schema.NullOr(AnthropicUsage)),
  error: Schema.optional(Schema.Unknown)
})
export type AnthropicEvent = typeof AnthropicEvent.Type

const decodeEvent = decoderFor(AnthropicEvent)

/** The event types this adapter reads; `ping` and any future type are ignored whatever their shape. */
const knownEvents: ReadonlySet<string> = new Set([
  "message_start",
  "content_block_start",
  "content_block_delta",
  "content_block_stop",
  "message_delta",
  "message_stop",
  "error"
])

/** `message_delta` usage is cumulative: a present field replaces the earlier value. */
const mergeUsage = (usage: Usage, wire: typeof AnthropicUsage.Type): Usage => ({
  input: wire.input_tokens ?? usage.input,
  output: wire.output_tokens ?? usage.output,
  cacheRead: wire.cache_read_input_tokens ?? usage.cacheRead,
  cacheWrite: wire.cache_creation_input_tokens ?? usage.cacheWrite,
  reasoning: usage.reasoning
})

type Stop = { readonly stop: StopReason } | { readonly error: string }

export const mapStopReason = (reason: string): Stop => {
  switch (reason) {
    case "end_turn":
    case "stop_sequence":
    case "pause_turn":
      return { stop: "stop" }
    case "max_tokens":
    case "model_context_window_exceeded":
      return { stop: "length" }
    case "tool_use":
      return { stop: "toolUse" }
    case "refusal":
      return { error: "the model refused to answer (stop_reason refusal)" }
    default:
      return { stop: "stop" }
  }
}

// =============================================================================
// State machine
// =============================================================================

export const makeMachine = (meta: StreamMeta): Machine => {
  const assembler = new Assembler(meta)
  const blocks = new Map<number, number>()
  let stop: Stop | undefined
  let finished = false

  const onEvent = (event: AnthropicEvent, out: Array<ResponseEvent>): LlmError | undefined => {
    switch (event.type) {
      case "message_start": {
        const message = event.message
        if (message?.usage) assembler.usage = mergeUsage(assembler.usage, message.usage)
        assembler.start(out, message?.model ?? undefined, message?.id ?? undefined)
        return undefined
      }
      case "content_block_start": {
        assembler.start(out)
        const block = event.content_block
        const wireIndex = event.index ?? 0
        if (block === undefined || block === null) return undefined
        switch (block.type) {
          case "text": {
            const index = assembler.startText(out)
            blocks.set(wireIndex, index)
            if (block.text) assembler.textDelta(out, index, block.text)
            return undefined
          }
          case "thinking": {
            const index = assembler.startThinking(out)
            blocks.set(wireIndex, index)
            if (block.thinking) assembler.thinkingDelta(out, index, block.thinking)
            if (block.signature) assembler.setSignature(index, block.signature)
            return undefined
          }
          case "redacted_thinking": {
            const index = assembler.startThinking(out)
            blocks.set(wireIndex, index)
            assembler.setRedacted(index)
            if (block.data) assembler.setSignature(index, block.data)
            return undefined
          }
          case "tool_use": {
            const index = assembler.startToolCall(out, block.id ?? `toolu_${wireIndex}`, block.name ?? "")
            blocks.set(wireIndex, index)
            return undefined
          }
          default:
            // Server-tool blocks and future kinds are not ours to replay.
            return undefined
        }
      }
      case "content_block_delta": {
        const index = blocks.get(event.index ?? 0)
        const delta = event.delta
        if (index === undefined || delta === undefined || delta === null) return undefined
        switch (delta.type) {
          case "text_delta":
            if (delta.text) assembler.textDelta(out, index, delta.text)
            return undefined
          case "thinking_delta":
            if (delta.thinking) assembler.thinkingDelta(out, index, delta.thinking)
            return undefined
          case "signature_delta":
            if (delta.signature) assembler.setSignature(index, delta.signature)
            return undefined
          case "input_json_delta":
            if (delta.partial_json) assembler.toolCallDelta(out, index, delta.partial_json)
            return undefined
          default:
            return undefined
        }
      }
      case "content_block_stop": {
        const index = blocks.get(event.index ?? 0)
        return index === undefined ? undefined : assembler.end(out, index)
      }
      case "message_delta": {
        if (event.usage) assembler.usage = mergeUsage(assembler.usage, event.usage)
        if (event.delta?.stop_reason) stop = mapStopReason(event.delta.stop_reason)
        return undefined
      }
      case "message_stop": {
        finished = true
        if (stop === undefined) return llmError("malformedStream", `${meta.provider}: message_stop without a stop_reason`)
        if ("error" in stop) return llmError("providerError", `${meta.provider}: ${stop.error}`, { provider: meta.provider })
        assembler.start(out)
        return assembler.finish(out, stop.stop)
      }
      case "error":
        finished = true
        return classifyStreamError(meta.provider, event, "error event")
      default:
        // `ping` and unknown future events.
        return undefined
    }
  }

  return {
    finished: () => finished,
    push: (event: SseEvent, out) => {
      if (finished) return undefined
      if (event.data.length === 0) return undefined
      const decoded = decodeKnownEvent(decodeEvent, knownEvents, event.data, `${meta.provider} event`)
      if (Either.isLeft(decoded)) {
        finished = true
        return decoded.left
      }
      if (decoded.right === undefined) return undefined
      const error = onEvent(decoded.right, out)
      if (error !== undefined) finished = true
      return error
    },
    end: () => {
      if (finished) return undefined
      finished = true
      return llmError("network", `${meta.provider}: stream ended before message_stop`, { retryable: true, provider: meta.provider })
    }
  }
}

// =============================================================================
// Request body
// =============================================================================

const cacheMarker = { type: "ephemeral" }
const cacheMarkerSuffix = `,"cache_control":${canonicalJson(cacheMarker)}`

const userBlock = (block: UserContent): string =>
  block.type === "text"
    ? canonicalJson({ type: "text", text: block.text })
    : canonicalJson({ type: "image", source: { type: "base64", media_type: block.mimeType, data: block.data } })

const parseArguments = (text: string): unknown => {
  try {
    const parsed: unknown = JSON.parse(text)
    return parsed !== null && typeof parsed === "object" && !Array.isArray(parsed) ? parsed : {}
  } catch {
    return {}
  }
}

const assistantBlocks = (message: AssistantMessage, same: boolean): Array<string> => {
  const parts: Array<string> = []
  for (const block of message.content) {
    switch (block.type) {
      case "text":
        // The API rejects empty text blocks.
        if (block.text.length > 0) parts.push(canonicalJson({ type: "text", text: block.text }))
        break
      case "thinking":
        if (same && block.redacted && block.signature !== undefined) {
          parts.push(canonicalJson({ type: "redacted_thinking", data: block.signature }))
        } else if (same && block.signature !== undefined && block.signature.length > 0) {
          parts.push(canonicalJson({ type: "thinking", thinking: block.thinking, signature: block.signature }))
        } else if (!block.redacted && block.thinking.length > 0) {
          // Unsigned thinking (an interrupted turn) cannot be verified; it goes back as text.
          parts.push(canonicalJson({ type: "text", text: block.thinking }))
        }
        break
      case "toolCall":
        parts.push(canonicalJson({ type: "tool_use", id: block.id, name: block.name, input: parseArguments(block.arguments) }))
    }
  }
  return parts
}

/** Thinking budgets for the neutral effort knob when no explicit budget is configured. */
const effortBudget = { minimal: 1_024, low: 2_048, medium: 8_192, high: 16_384 } as const

export const buildBody = (request: RequestMessages, settings: CallSettings): BodyParts => {
  const target = { api, provider: settings.provider, model: settings.model, normalizeToolCallId: anthropicToolCallId }
  const useCache = settings.compat["cacheControl"] !== false
  const budget = settings.thinking?.budgetTokens ?? (settings.thinking?.effort !== undefined ? effortBudget[settings.thinking.effort] : undefined)
  const maxTokens = settings.maxOutputTokens ?? 16_384
  const fields: Record<string, unknown> = {
    ...settings.extraBody,
    model: settings.model,
    // The API rejects a thinking budget that is not below max_tokens.
    max_tokens: budget !== undefined && budget >= maxTokens ? budget + 4_096 : maxTokens,
    stream: true
  }
  if (request.systemPrompt.length > 0) {
    fields["system"] = [{ type: "text", text: request.systemPrompt, ...(useCache ? { cache_control: cacheMarker } : {}) }]
  }
  if (request.tools.length > 0) {
    fields["tools"] = toolsOnWire(request.tools, `${api}/${useCache ? "cached" : "uncached"}`, (tools) =>
      tools.map((tool, i) => ({
        name: tool.name,
        description: tool.description,
        input_schema: tool.parameters,
        ...(useCache && i === tools.length - 1 ? { cache_control: cacheMarker } : {})
      })))
  }
  if (budget !== undefined) fields["thinking"] = { type: "enabled", budget_tokens: budget }
  delete fields["messages"]

  const groups: Array<Group> = []
  // Consecutive user-side messages (all tool results of a turn, then a user text) form one message.
  const memo = memoFor(api, settings)
  const partOf = (message: Message): MessageParts => {
    switch (message.role) {
      case "user":
        return groupOf("content", "user", message.content.map(userBlock))
      case "toolResult":
        return groupOf("content", "user", [canonicalJson({
          type: "tool_result",
          tool_use_id: message.toolCallId,
          content: message.content.map((block) =>
            block.type === "text" ? { type: "text", text: block.text } : { type: "image", source: { type: "base64", media_type: block.mimeType, data: block.data } }
          ),
          is_error: message.isError
        })])
      case "assistant":
        return groupOf("content", "assistant", assistantBlocks(message, isSameModel(message, target)))
    }
  }
  pushHistory(groups, memo, transformForReplay(request.messages, target), partOf)
  const lastGroup = groups[groups.length - 1]
  const suffix = useCache && lastGroup?.mergeKey === "user" ? cacheMarkerSuffix : ""
  const { history, tail } = layoutHistory(groups, suffix)
  return { head: openHead(fields, "messages"), history, tail: tail + "]}" }
}

export const adapter: Adapter = makeAdapter({
  api,
  buildBody,
  makeMachine,
  path: () => "messages",
  headers: (settings) => ({ "anthropic-version": "2023-06-01", ...settings.headers, "x-api-key": Redacted.value(settings.apiKey) })
})
