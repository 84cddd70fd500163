/**
 * OpenAI Chat Completions, the wire API also spoken by DeepSeek, Kimi/Moonshot, Qwen/DashScope,
 * GLM, Groq, OpenRouter, vLLM and Ollama (llm-providers.md §2.1).
 *
 * Tool calls are keyed by their `index` (not assumed to start at 0; by id only where a vendor
 * sends no index or reuses one), reasoning arrives as `reasoning_content`, `reasoning` or typed
 * content chunks, OpenRouter's `reasoning_details` ride on the thinking block's signature, usage
 * is taken from wherever the vendor puts it,
 * cached tokens are counted once, and errors are read in-band, from `event: error`, and from
 * status codes. The compat table captures what differs between vendors on the request side;
 * `openAiChat/Wire.ts` what differs on the response side (usage conventions, typed content), and
 * `openAiChat/Blocks.ts` which block each delta belongs to.
 */
import { Either, Redacted } from "effect"
import type { AssistantMessage, LlmError, Message, RequestMessages, ResponseEvent } from "../Llm.js"
import { canonicalJson } from "../Llm.js"
import { type Adapter, type BodyParts, type CallSettings, makeAdapter, openHead, toolsOnWire } from "./Adapter.js"
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
import { itemsOf, memoFor, type MessageParts, pushHistory } from "./common/HistoryParts.js"
import { ChatBlocks } from "./openAiChat/Blocks.js"
import { ChatChunk, contentParts, decodeReasoningSignature, type Finish, mapFinishReason, mapUsage } from "./openAiChat/Wire.js"
import type { SseEvent } from "./Sse.js"

export { ChatChoice, ChatChunk, ChatToolCallDelta, ChatUsage, mapFinishReason, mapUsage } from "./openAiChat/Wire.js"

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
  /** Whether the top-level `prompt_cache_key` is accepted (OpenAI's own API; other vendors may reject unknown fields). */
  readonly promptCacheKey: boolean
}

const defaultCompat: OpenAiChatCompat = {
  maxTokensField: "max_completion_tokens",
  includeUsage: true,
  replayReasoning: "toolCallTurns",
  reasoningEffort: true,
  promptCacheKey: false
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
  const merged: Record<string, unknown> = { ...defaultCompat, promptCacheKey: host === "api.openai.com", ...vendor?.compat }
  for (const key of Object.keys(defaultCompat)) if (overrides[key] !== undefined) merged[key] = overrides[key]
  return merged as unknown as OpenAiChatCompat
}

const decodeChunk = decoderFor(ChatChunk)

// =============================================================================
// State machine
// =============================================================================

export const makeMachine = (meta: StreamMeta): Machine => {
  const assembler = new Assembler(meta)
  const blocks = new ChatBlocks(assembler)
  let finished = false
  let finish: Finish | undefined

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
    const usage = chunk.usage ?? chunk.x_groq?.usage
    // Azure opens with a prompt-filter chunk (`choices: []`, empty id and model): nothing to start on yet.
    if (!assembler.started && (chunk.choices ?? []).length === 0 && !usage) return undefined
    assembler.start(out, chunk.model || undefined, chunk.id || undefined)
    if (usage) assembler.usage = mapUsage(usage)
    const choice = chunk.choices?.find((candidate) => (candidate.index ?? 0) === 0)
    if (choice === undefined) return undefined
    if (choice.usage) assembler.usage = mapUsage(choice.usage)
    const delta = choice.delta
    if (delta) {
      const reasoningField = typeof delta.reasoning_content === "string" ? "reasoning_content" : typeof delta.reasoning === "string" ? "reasoning" : undefined
      const reasoning = reasoningField === "reasoning_content" ? delta.reasoning_content : reasoningField === "reasoning" ? delta.reasoning : undefined
      if (reasoningField !== undefined && typeof reasoning === "string" && reasoning.length > 0) blocks.thinking(out, reasoningField, reasoning)
      for (const piece of contentParts(delta.content)) {
        if (piece.kind === "thinking") blocks.thinking(out, "content", piece.text)
        else blocks.text(out, piece.text)
      }
      if (delta.reasoning_details !== undefined && delta.reasoning_details !== null) {
        blocks.reasoningDetails(out, reasoningField ?? "reasoning", delta.reasoning_details)
      }
      if (typeof delta.refusal === "string" && delta.refusal.length > 0) blocks.text(out, delta.refusal)
      for (const call of delta.tool_calls ?? []) blocks.toolCall(out, call)
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
  const reasoningDetails: Array<unknown> = []
  const toolCalls: Array<unknown> = []
  for (const block of message.content) {
    if (block.type === "text") text += block.text
    else if (block.type === "thinking") {
      const source = sameModel ? decodeReasoningSignature(block.signature) : { field: undefined, details: [] }
      // Thinking that came as typed content chunks (Mistral) has no field to go back in.
      if (source.field === "content") continue
      reasoning += block.thinking
      if (source.field !== undefined) reasoningField = source.field
      reasoningDetails.push(...source.details)
    } else toolCalls.push({ id: block.id, type: "function", function: { name: block.name, arguments: block.arguments } })
  }
  const item: Record<string, unknown> = { role: "assistant", content: toolCalls.length > 0 && text.length === 0 ? null : text }
  if (toolCalls.length > 0) item["tool_calls"] = toolCalls
  const replay = compat.replayReasoning === "always" || (compat.replayReasoning === "toolCallTurns" && toolCalls.length > 0)
  if (replay && reasoning.length > 0) item[reasoningField ?? "reasoning_content"] = reasoning
  // OpenRouter keeps a reasoning model's chain (signatures, encrypted blocks) only if they come back verbatim.
  if (replay && reasoningDetails.length > 0) item["reasoning_details"] = reasoningDetails
  return item
}

export const buildBody = (request: RequestMessages, settings: CallSettings): BodyParts => {
  const compat = resolveCompat(settings.baseUrl, settings.compat)
  const target = { api, provider: settings.provider, model: settings.model, normalizeToolCallId: openAiToolCallId }
  const fields: Record<string, unknown> = { ...settings.extraBody, model: settings.model, stream: true }
  if (compat.includeUsage) fields["stream_options"] = { include_usage: true }
  if (settings.maxOutputTokens !== undefined) fields[compat.maxTokensField] = settings.maxOutputTokens
  if (compat.reasoningEffort && settings.thinking?.effort !== undefined) fields["reasoning_effort"] = settings.thinking.effort
  // In the head: the same for every call of a conversation, so the body stays a prefix of the next.
  if (compat.promptCacheKey && settings.promptCacheKey !== undefined) fields["prompt_cache_key"] = settings.promptCacheKey
  if (request.tools.length > 0) {
    fields["tools"] = toolsOnWire(request.tools, api, (tools) =>
      tools.map((tool) => ({
        type: "function",
        function: { name: tool.name, description: tool.description, parameters: tool.parameters }
      })))
  }
  delete fields["messages"]
  const groups: Array<Group> = []
  const memo = memoFor(api, settings)
  if (request.systemPrompt.length > 0) pushPart(groups, "", "", undefined, memo.systemOf(request.systemPrompt, (content) => canonicalJson({ role: "system", content })))
  const partOf = (message: Message): MessageParts => {
    switch (message.role) {
      case "user":
        return itemsOf([canonicalJson({ role: "user", content: userContent(message.content) })])
      case "assistant": {
        const same = message.api === api && message.provider === settings.provider && message.model === settings.model
        return itemsOf([canonicalJson(assistantItem(message, compat, same))])
      }
      case "toolResult":
        return itemsOf([canonicalJson({ role: "tool", tool_call_id: message.toolCallId, content: contentText(message.content) })])
    }
  }
  pushHistory(groups, memo, transformForReplay(request.messages, target), partOf)
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
