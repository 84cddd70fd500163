/**
 * OpenAI Chat Completions, the wire API also spoken by DeepSeek, Kimi/Moonshot, Qwen/DashScope,
 * GLM, Groq, OpenRouter, vLLM and Ollama (llm-providers.md §2.1).
 *
 * Tool calls are keyed by their `index` (not their id, and not assumed to start at 0), reasoning
 * arrives as `reasoning_content` or `reasoning`, usage is taken from wherever the vendor puts it,
 * cached tokens are counted once, and errors are read in-band, from `event: error`, and from
 * status codes. The compat table captures what differs between vendors on the request side.
 */
import { Either, Redacted, Schema } from "effect"
import type { AssistantMessage, LlmError, RequestMessages, ResponseEvent, StopReason, Usage } from "../Llm.js"
import { canonicalJson } from "../Llm.js"
import { type Adapter, type BodyParts, type CallSettings, makeAdapter, openHead } from "./Adapter.js"
import {
  Assembler,
  classifyStreamError,
  contentText,
  decodeJson,
  decoderFor,
  type Group,
  layoutHistory,
  llmError,
  type Machine,
  malformed,
  openAiToolCallId,
  pushPart,
  type StreamMeta,
  transformForReplay
} from "./Common.js"
import type { SseEvent } from "./Sse.js"

export const api = "openai-chat"

// =============================================================================
// Compatibility table
// =============================================================================

export interface OpenAiChatCompat {
  /** Which field carries the output limit. */
  readonly maxTokensField: "max_completion_tokens" | "max_tokens"
  /** Whether `stream_options.include_usage` is accepted. */
  readonly includeUsage: boolean
  /** When earlier reasoning is sent back (DeepSeek thinking mode requires it on tool-call turns). */
  readonly replayReasoning: "toolCallTurns" | "always" | "never"
  /** Whether `reasoning_effort` is understood. */
  readonly reasoningEffort: boolean
}

const defaultCompat: OpenAiChatCompat = {
  maxTokensField: "max_completion_tokens",
  includeUsage: true,
  replayReasoning: "toolCallTurns",
  reasoningEffort: true
}

/** Per-vendor defaults, picked by the base URL's host; configuration can override any field. */
export const compatTable: ReadonlyArray<{ readonly vendor: string; readonly host: RegExp; readonly compat: Partial<OpenAiChatCompat> }> = [
  { vendor: "openai", host: /(^|\.)openai\.com$/, compat: {} },
  { vendor: "deepseek", host: /deepseek\.com$/, compat: { maxTokensField: "max_tokens", reasoningEffort: false } },
  { vendor: "moonshot", host: /moonshot\.(ai|cn)$/, compat: { maxTokensField: "max_tokens", reasoningEffort: false } },
  { vendor: "qwen", host: /dashscope.*\.aliyuncs\.com$/, compat: { maxTokensField: "max_tokens", reasoningEffort: false } },
  { vendor: "glm", host: /(bigmodel\.cn|z\.ai)$/, compat: { maxTokensField: "max_tokens", reasoningEffort: false } },
  { vendor: "groq", host: /groq\.com$/, compat: { maxTokensField: "max_completion_tokens", replayReasoning: "never" } },
  { vendor: "openrouter", host: /openrouter\.ai$/, compat: {} },
  { vendor: "ollama", host: /^(localhost|127\.0\.0\.1):11434$/, compat: { maxTokensField: "max_tokens", includeUsage: true, reasoningEffort: false } }
]

export const resolveCompat = (baseUrl: string, overrides: Readonly<Record<string, unknown>>): OpenAiChatCompat => {
  let host = ""
  try {
    host = new URL(baseUrl).host
  } catch {
    host = ""
  }
  const vendor = compatTable.find((entry) => entry.host.test(host))
  const merged: Record<string, unknown> = { ...defaultCompat, ...vendor?.compat }
  for (const key of Object.keys(defaultCompat)) if (overrides[key] !== undefined) merged[key] = overrides[key]
  return merged as unknown as OpenAiChatCompat
}

// =============================================================================
// Wire schema (lenient: unknown fields and vendor extras are ignored)
// =============================================================================

const OptNum = Schema.optional(Schema.NullOr(Schema.Number))
const OptStr = Schema.optional(Schema.NullOr(Schema.String))

export const ChatUsage = Schema.Struct({
  prompt_tokens: OptNum,
  completion_tokens: OptNum,
  prompt_tokens_details: Schema.optional(Schema.NullOr(Schema.Struct({ cached_tokens: OptNum }))),
  completion_tokens_details: Schema.optional(Schema.NullOr(Schema.Struct({ reasoning_tokens: OptNum }))),
  prompt_cache_hit_tokens: OptNum
})

export const ChatToolCallDelta = Schema.Struct({
  index: Schema.optional(Schema.Number),
  id: OptStr,
  function: Schema.optional(Schema.NullOr(Schema.Struct({ name: OptStr, arguments: OptStr })))
})

export const ChatChoice = Schema.Struct({
  index: Schema.optional(Schema.Number),
  delta: Schema.optional(Schema.NullOr(Schema.Struct({
    content: OptStr,
    reasoning_content: OptStr,
    reasoning: OptStr,
    refusal: OptStr,
    tool_calls: Schema.optional(Schema.NullOr(Schema.Array(ChatToolCallDelta)))
  }))),
  finish_reason: OptStr,
  usage: Schema.optional(Schema.NullOr(ChatUsage))
})

export const ChatChunk = Schema.Struct({
  id: Schema.optional(Schema.String),
  model: Schema.optional(Schema.String),
  choices: Schema.optional(Schema.NullOr(Schema.Array(ChatChoice))),
  usage: Schema.optional(Schema.NullOr(ChatUsage)),
  error: Schema.optional(Schema.Unknown)
})
export type ChatChunk = typeof ChatChunk.Type

const decodeChunk = decoderFor(ChatChunk)

export const mapUsage = (usage: typeof ChatUsage.Type): Usage => {
  const prompt = usage.prompt_tokens ?? 0
  // DeepSeek reports the hit both ways; count it once.
  const cached = usage.prompt_tokens_details?.cached_tokens ?? usage.prompt_cache_hit_tokens ?? 0
  return {
    input: Math.max(0, prompt - cached),
    output: usage.completion_tokens ?? 0,
    cacheRead: cached,
    cacheWrite: 0,
    reasoning: usage.completion_tokens_details?.reasoning_tokens ?? 0
  }
}

type Finish = { readonly stop: StopReason } | { readonly error: string; readonly retryable: boolean }

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
// State machine
// =============================================================================

export const makeMachine = (meta: StreamMeta): Machine => {
  const assembler = new Assembler(meta)
  let finished = false
  let textIndex: number | undefined
  let thinkingIndex: number | undefined
  const toolIndexes = new Map<number, number>()
  let finish: Finish | undefined

  const closeText = (out: Array<ResponseEvent>) => {
    if (textIndex !== undefined) assembler.end(out, textIndex)
    textIndex = undefined
  }
  const closeThinking = (out: Array<ResponseEvent>) => {
    if (thinkingIndex !== undefined) assembler.end(out, thinkingIndex)
    thinkingIndex = undefined
  }

  const complete = (out: Array<ResponseEvent>): LlmError | undefined => {
    finished = true
    if (finish === undefined) return malformed(`${meta.provider}: stream ended without a finish_reason`)
    if ("error" in finish) return llmError("providerError", `${meta.provider}: ${finish.error}`, { retryable: finish.retryable, provider: meta.provider })
    assembler.start(out)
    return assembler.finish(out, finish.stop)
  }

  const onChunk = (chunk: ChatChunk, out: Array<ResponseEvent>): LlmError | undefined => {
    if (chunk.error !== undefined && chunk.error !== null) {
      finished = true
      return classifyStreamError(meta.provider, chunk, "error in stream")
    }
    assembler.start(out, chunk.model, chunk.id)
    if (chunk.usage) assembler.usage = mapUsage(chunk.usage)
    const choice = chunk.choices?.find((candidate) => (candidate.index ?? 0) === 0)
    if (choice === undefined) return undefined
    if (choice.usage) assembler.usage = mapUsage(choice.usage)
    const delta = choice.delta
    if (delta) {
      const reasoningField = typeof delta.reasoning_content === "string" ? "reasoning_content" : typeof delta.reasoning === "string" ? "reasoning" : undefined
      const reasoning = reasoningField === "reasoning_content" ? delta.reasoning_content : reasoningField === "reasoning" ? delta.reasoning : undefined
      if (reasoningField !== undefined && typeof reasoning === "string" && reasoning.length > 0) {
        if (thinkingIndex === undefined) {
          closeText(out)
          thinkingIndex = assembler.startThinking(out)
          // Remember which field it came in, so it can be sent back under the same name.
          assembler.setSignature(thinkingIndex, reasoningField)
        }
        assembler.thinkingDelta(out, thinkingIndex, reasoning)
      }
      const text = typeof delta.content === "string" && delta.content.length > 0 ? delta.content : typeof delta.refusal === "string" ? delta.refusal : undefined
      if (text !== undefined && text.length > 0) {
        if (textIndex === undefined) {
          closeThinking(out)
          textIndex = assembler.startText(out)
        }
        assembler.textDelta(out, textIndex, text)
      }
      if (delta.tool_calls) {
        for (const call of delta.tool_calls) {
          const wireIndex = call.index ?? 0
          let blockIndex = toolIndexes.get(wireIndex)
          if (blockIndex === undefined) {
            closeThinking(out)
            closeText(out)
            const id = call.id ?? `call_${wireIndex}`
            blockIndex = assembler.startToolCall(out, id, call.function?.name ?? "")
            toolIndexes.set(wireIndex, blockIndex)
          }
          const fragment = call.function?.arguments
          if (typeof fragment === "string") assembler.toolCallDelta(out, blockIndex, fragment)
        }
      }
    }
    if (typeof choice.finish_reason === "string" && choice.finish_reason.length > 0) finish = mapFinishReason(choice.finish_reason)
    return undefined
  }

  return {
    finished: () => finished,
    push: (event: SseEvent, out) => {
      if (finished) return undefined
      if (event.event === "error") {
        finished = true
        let body: unknown = event.data
        try {
          body = JSON.parse(event.data)
        } catch {
          body = { error: { message: event.data } }
        }
        return classifyStreamError(meta.provider, body, "error event")
      }
      const data = event.data.trim()
      if (data === "[DONE]") return complete(out)
      if (data.length === 0) return undefined
      const decoded = decodeJson(decodeChunk, data, `${meta.provider} chunk`)
      if (Either.isLeft(decoded)) {
        finished = true
        return decoded.left
      }
      const error = onChunk(decoded.right, out)
      if (error !== undefined) finished = true
      return error
    },
    end: (out) => {
      if (finished) return undefined
      // Some servers omit `[DONE]`; a finish_reason is enough to call the answer complete.
      if (finish !== undefined) return complete(out)
      finished = true
      return llmError("network", `${meta.provider}: stream ended before the response finished`, { retryable: true, provider: meta.provider })
    }
  }
}

// =============================================================================
// Request body
// =============================================================================

const userContent = (content: ReadonlyArray<{ readonly type: string }>): unknown => {
  const blocks = content as ReadonlyArray<{ type: "text"; text: string } | { type: "image"; data: string; mimeType: string }>
  if (blocks.every((block) => block.type === "text")) return blocks.map((block) => (block as { text: string }).text).join("\n")
  return blocks.map((block) =>
    block.type === "text"
      ? { type: "text", text: block.text }
      : { type: "image_url", image_url: { url: `data:${block.mimeType};base64,${block.data}` } }
  )
}

const assistantItem = (message: AssistantMessage, compat: OpenAiChatCompat, sameModel: boolean): Record<string, unknown> => {
  let text = ""
  let reasoning = ""
  let reasoningField: string | undefined
  const toolCalls: Array<unknown> = []
  for (const block of message.content) {
    if (block.type === "text") text += block.text
    else if (block.type === "thinking") {
      reasoning += block.thinking
      if (sameModel && block.signature !== undefined && /^[a-z_]+$/.test(block.signature)) reasoningField = block.signature
    } else toolCalls.push({ id: block.id, type: "function", function: { name: block.name, arguments: block.arguments } })
  }
  const item: Record<string, unknown> = { role: "assistant", content: toolCalls.length > 0 && text.length === 0 ? null : text }
  if (toolCalls.length > 0) item["tool_calls"] = toolCalls
  const replay = compat.replayReasoning === "always" || (compat.replayReasoning === "toolCallTurns" && toolCalls.length > 0)
  if (replay && reasoning.length > 0) item[reasoningField ?? "reasoning_content"] = reasoning
  return item
}

export const buildBody = (request: RequestMessages, settings: CallSettings): BodyParts => {
  const compat = resolveCompat(settings.baseUrl, settings.compat)
  const target = { api, provider: settings.provider, model: settings.model, normalizeToolCallId: openAiToolCallId }
  const fields: Record<string, unknown> = { ...settings.extraBody, model: settings.model, stream: true }
  if (compat.includeUsage) fields["stream_options"] = { include_usage: true }
  if (settings.maxOutputTokens !== undefined) fields[compat.maxTokensField] = settings.maxOutputTokens
  if (compat.reasoningEffort && settings.thinking?.effort !== undefined) fields["reasoning_effort"] = settings.thinking.effort
  if (request.tools.length > 0) {
    fields["tools"] = request.tools.map((tool) => ({
      type: "function",
      function: { name: tool.name, description: tool.description, parameters: tool.parameters }
    }))
  }
  delete fields["messages"]
  const groups: Array<Group> = []
  if (request.systemPrompt.length > 0) pushPart(groups, "", "", undefined, canonicalJson({ role: "system", content: request.systemPrompt }))
  for (const message of transformForReplay(request.messages, target)) {
    switch (message.role) {
      case "user":
        pushPart(groups, "", "", undefined, canonicalJson({ role: "user", content: userContent(message.content) }))
        break
      case "assistant": {
        const same = message.api === api && message.provider === settings.provider && message.model === settings.model
        pushPart(groups, "", "", undefined, canonicalJson(assistantItem(message, compat, same)))
        break
      }
      case "toolResult":
        pushPart(groups, "", "", undefined, canonicalJson({ role: "tool", tool_call_id: message.toolCallId, content: contentText(message.content) }))
    }
  }
  const { history, tail } = layoutHistory(groups, "")
  return { head: openHead(fields, "messages"), history, tail: tail + "]}" }
}

export const adapter: Adapter = makeAdapter({
  api,
  buildBody,
  makeMachine,
  path: () => "chat/completions",
  headers: (settings) => ({ ...settings.headers, authorization: `Bearer ${Redacted.value(settings.apiKey)}` })
})
