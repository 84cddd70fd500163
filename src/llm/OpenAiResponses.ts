/**
 * OpenAI Responses (llm-providers.md §2.2): `output_text`, `function_call` argument deltas,
 * reasoning summaries, encrypted reasoning items kept whole (as the thinking signature) and
 * replayed with `store: false`, usage from `response.completed`, and `error` / `response.failed`.
 *
 * Tool-call ids are `call_id|item_id`, so a replay to the same model can restore both.
 */
import { Either, Redacted, Schema } from "effect"
import type { AssistantMessage, LlmError, Message, RequestMessages, ResponseEvent, Usage, UserContent } from "../Llm.js"
import { canonicalJson } from "../Llm.js"
import { type Adapter, type BodyParts, type CallSettings, makeAdapter, openHead, toolsOnWire } from "./Adapter.js"
import {
  Assembler,
  classifyStreamError,
  contentText,
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
import { itemsOf, memoFor, type MessageParts, pushHistory } from "./common/HistoryParts.js"
import type { SseEvent } from "./Sse.js"

export const api = "openai-responses"

// =============================================================================
// Wire schema
// =============================================================================

const OptNum = Schema.optional(Schema.NullOr(Schema.Number))
const OptStr = Schema.optional(Schema.NullOr(Schema.String))

export const ResponsesUsage = Schema.Struct({
  input_tokens: OptNum,
  output_tokens: OptNum,
  input_tokens_details: Schema.optional(Schema.NullOr(Schema.Struct({ cached_tokens: OptNum }))),
  output_tokens_details: Schema.optional(Schema.NullOr(Schema.Struct({ reasoning_tokens: OptNum })))
})

export const ResponsesItem = Schema.Struct({
  id: OptStr,
  type: Schema.String,
  call_id: OptStr,
  name: OptStr,
  arguments: OptStr,
  content: Schema.optional(Schema.NullOr(Schema.Array(Schema.Struct({ type: Schema.String, text: OptStr, refusal: OptStr }))))
})

export const ResponsesEvent = Schema.Struct({
  type: Schema.String,
  item_id: OptStr,
  output_index: OptNum,
  summary_index: OptNum,
  delta: OptStr,
  arguments: OptStr,
  item: Schema.optional(Schema.NullOr(Schema.Record({ key: Schema.String, value: Schema.Unknown }))),
  response: Schema.optional(Schema.NullOr(Schema.Struct({
    id: OptStr,
    model: OptStr,
    usage: Schema.optional(Schema.NullOr(ResponsesUsage)),
    error: Schema.optional(Schema.Unknown),
    incomplete_details: Schema.optional(Schema.NullOr(Schema.Struct({ reason: OptStr })))
  }))),
  error: Schema.optional(Schema.Unknown),
  code: OptStr,
  message: OptStr
})
export type ResponsesEvent = typeof ResponsesEvent.Type

/** The event types this adapter reads; any other (keepalive, shell or MCP output, ...) is ignored whatever its shape. */
const knownEvents: ReadonlySet<string> = new Set([
  "response.created",
  "response.in_progress",
  "response.output_item.added",
  "response.output_text.delta",
  "response.refusal.delta",
  "response.reasoning_summary_text.delta",
  "response.reasoning_text.delta",
  "response.function_call_arguments.delta",
  "response.output_item.done",
  "response.completed",
  "response.incomplete",
  "response.failed",
  "response.cancelled",
  "error"
])

const decodeEvent = decoderFor(ResponsesEvent)
const decodeItem = decoderFor(ResponsesItem)

export const mapUsage = (usage: typeof ResponsesUsage.Type): Usage => {
  const cached = usage.input_tokens_details?.cached_tokens ?? 0
  return {
    input: Math.max(0, (usage.input_tokens ?? 0) - cached),
    output: usage.output_tokens ?? 0,
    cacheRead: cached,
    cacheWrite: 0,
    reasoning: usage.output_tokens_details?.reasoning_tokens ?? 0
  }
}

// =============================================================================
// State machine
// =============================================================================

type Where = { readonly outputIndex: number | null | undefined; readonly itemId: string | null | undefined }

export const makeMachine = (meta: StreamMeta): Machine => {
  const assembler = new Assembler(meta)
  let finished = false
  // Output item -> content index, by `output_index` ("o1") and by item id ("id:msg_1"). GitHub
  // Copilot gives every event of an item a new item_id, so the output index is asked first.
  const blocks = new Map<string, number>()
  const summaryIndex = new Map<number, number>()

  const find = ({ outputIndex, itemId }: Where): number | undefined =>
    (typeof outputIndex === "number" ? blocks.get(`o${outputIndex}`) : undefined) ?? (itemId ? blocks.get(`id:${itemId}`) : undefined)
  const register = ({ outputIndex, itemId }: Where, index: number): number => {
    if (typeof outputIndex === "number") blocks.set(`o${outputIndex}`, index)
    if (itemId) blocks.set(`id:${itemId}`, index)
    return index
  }
  const blockFor = (out: Array<ResponseEvent>, where: Where, kind: "text" | "thinking"): number =>
    find(where) ?? register(where, kind === "text" ? assembler.startText(out) : assembler.startThinking(out))

  /** What the done item holds beyond what was streamed (deltas lost or never sent); nothing if they differ. */
  const missingSuffix = (streamed: string, complete: string): string =>
    complete.length > streamed.length && complete.startsWith(streamed) ? complete.slice(streamed.length) : ""

  const startCall = (out: Array<ResponseEvent>, where: Where, item: typeof ResponsesItem.Type): number => {
    const itemId = item.id ?? undefined
    const callId = item.call_id ?? itemId ?? `call_${where.outputIndex ?? blocks.size}`
    return register(where, assembler.startToolCall(out, itemId ? `${callId}|${itemId}` : callId, item.name ?? ""))
  }

  const onItemAdded = (where: Where, raw: Record<string, unknown>, out: Array<ResponseEvent>): void => {
    const decoded = decodeItem(raw)
    if (Either.isLeft(decoded)) return
    const item = decoded.right
    if (item.type === "function_call" && find(where) === undefined) startCall(out, where, item)
  }

  const onItemDone = (where: Where, raw: Record<string, unknown>, out: Array<ResponseEvent>): LlmError | undefined => {
    const decoded = decodeItem(raw)
    if (Either.isLeft(decoded)) return undefined
    const item = decoded.right
    const itemId = item.id ?? ""
    switch (item.type) {
      case "reasoning": {
        // The whole item (with encrypted_content) is what must go back, so it is the signature.
        const index = blockFor(out, where, "thinking")
        assembler.setSignature(index, canonicalJson(raw))
        return assembler.end(out, index)
      }
      case "message": {
        const text = (item.content ?? []).map((part) => part.text ?? part.refusal ?? "").join("")
        const index = blockFor(out, where, "text")
        const block = assembler.blocks[index]
        if (block?.kind === "text") assembler.textDelta(out, index, missingSuffix(block.text, text))
        assembler.setSignature(index, canonicalJson({ v: 1, id: itemId }))
        return assembler.end(out, index)
      }
      case "function_call": {
        const index = find(where) ?? startCall(out, where, item)
        const block = assembler.blocks[index]
        if (block?.kind === "toolCall" && item.arguments) assembler.toolCallDelta(out, index, missingSuffix(block.args, item.arguments))
        return assembler.end(out, index)
      }
      default:
        return undefined
    }
  }

  const onEvent = (event: ResponsesEvent, out: Array<ResponseEvent>): LlmError | undefined => {
    const where: Where = { outputIndex: event.output_index, itemId: event.item_id ?? (event.item?.["id"] as string | undefined) }
    switch (event.type) {
      case "response.created":
      case "response.in_progress":
        assembler.start(out, event.response?.model ?? undefined, event.response?.id ?? undefined)
        return undefined
      case "response.output_item.added":
        assembler.start(out)
        if (event.item) onItemAdded(where, event.item, out)
        return undefined
      case "response.output_text.delta":
      case "response.refusal.delta":
        assembler.start(out)
        if (event.delta) assembler.textDelta(out, blockFor(out, where, "text"), event.delta)
        return undefined
      case "response.reasoning_summary_text.delta":
      case "response.reasoning_text.delta": {
        assembler.start(out)
        if (!event.delta) return undefined
        const index = blockFor(out, where, "thinking")
        const part = event.summary_index ?? 0
        const previous = summaryIndex.get(index)
        // Summary parts are separate paragraphs.
        if (previous !== undefined && previous !== part) assembler.thinkingDelta(out, index, "\n\n")
        summaryIndex.set(index, part)
        assembler.thinkingDelta(out, index, event.delta)
        return undefined
      }
      case "response.function_call_arguments.delta": {
        const index = find(where)
        if (index !== undefined && event.delta) assembler.toolCallDelta(out, index, event.delta)
        return undefined
      }
      case "response.output_item.done":
        return event.item ? onItemDone(where, event.item, out) : undefined
      case "response.completed": {
        finished = true
        if (event.response?.usage) assembler.usage = mapUsage(event.response.usage)
        assembler.start(out)
        return assembler.finish(out, "stop")
      }
      case "response.incomplete": {
        finished = true
        if (event.response?.usage) assembler.usage = mapUsage(event.response.usage)
        const reason = event.response?.incomplete_details?.reason ?? "unknown"
        if (reason === "max_output_tokens") {
          assembler.start(out)
          return assembler.finish(out, "length")
        }
        return llmError("providerError", `${meta.provider}: the response is incomplete (${reason})`, { provider: meta.provider })
      }
      case "response.failed":
      case "response.cancelled":
        finished = true
        return classifyStreamError(meta.provider, { error: event.response?.error ?? { message: event.type } }, event.type)
      case "error":
        finished = true
        // The recorded shape nests the fields under `error`; older docs put them at the top level.
        return classifyStreamError(meta.provider, event.error !== undefined ? { error: event.error } : { error: { code: event.code, message: event.message } }, "error event")
      default:
        return undefined
    }
  }

  return {
    finished: () => finished,
    push: (event: SseEvent, out) => {
      if (finished || event.data.length === 0) return undefined
      const decoded = decodeKnownEvent(decodeEvent, knownEvents, event.data, `${meta.provider} event`)
      const error = Either.isLeft(decoded) ? decoded.left : decoded.right === undefined ? undefined : onEvent(decoded.right, out)
      if (error !== undefined) finished = true
      return error
    },
    end: () => {
      if (finished) return undefined
      finished = true
      return llmError("network", `${meta.provider}: stream ended before response.completed`, { retryable: true, provider: meta.provider })
    }
  }
}

// =============================================================================
// Request body
// =============================================================================

const inputPart = (block: UserContent): Record<string, unknown> =>
  block.type === "text" ? { type: "input_text", text: block.text } : { type: "input_image", image_url: `data:${block.mimeType};base64,${block.data}` }

/** `call_id|item_id` -> its parts (ids from other APIs have no item id). */
const splitId = (id: string): { callId: string; itemId: string | undefined } => {
  const bar = id.indexOf("|")
  return bar < 0 ? { callId: id, itemId: undefined } : { callId: id.slice(0, bar), itemId: id.slice(bar + 1) }
}

const parseSignature = (signature: string | undefined): Record<string, unknown> | undefined => {
  if (signature === undefined) return undefined
  try {
    const value: unknown = JSON.parse(signature)
    return value !== null && typeof value === "object" && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined
  } catch {
    return undefined
  }
}

const assistantItems = (message: AssistantMessage, same: boolean): Array<string> => {
  const items: Array<string> = []
  for (const block of message.content) {
    switch (block.type) {
      case "thinking": {
        const item = same ? parseSignature(block.signature) : undefined
        if (item !== undefined && item["type"] === "reasoning") items.push(canonicalJson(item))
        else if (block.thinking.length > 0) items.push(canonicalJson({ type: "message", role: "assistant", content: [{ type: "output_text", text: block.thinking, annotations: [] }], status: "completed" }))
        break
      }
      case "text": {
        if (block.text.length === 0) break
        const id = same ? parseSignature(block.signature)?.["id"] : undefined
        items.push(canonicalJson({
          type: "message",
          role: "assistant",
          content: [{ type: "output_text", text: block.text, annotations: [] }],
          status: "completed",
          id: typeof id === "string" && id.length > 0 ? id : undefined
        }))
        break
      }
      case "toolCall": {
        const { callId, itemId } = splitId(block.id)
        items.push(canonicalJson({ type: "function_call", call_id: callId, name: block.name, arguments: block.arguments, id: same ? itemId : undefined }))
      }
    }
  }
  return items
}

export const buildBody = (request: RequestMessages, settings: CallSettings): BodyParts => {
  const target = { api, provider: settings.provider, model: settings.model, normalizeToolCallId: (id: string) => id }
  const fields: Record<string, unknown> = {
    ...settings.extraBody,
    model: settings.model,
    stream: true,
    // Stateless: earlier reasoning travels in the request (encrypted), never by reference.
    store: false,
    include: ["reasoning.encrypted_content"]
  }
  if (request.systemPrompt.length > 0) fields["instructions"] = request.systemPrompt
  if (settings.maxOutputTokens !== undefined) fields["max_output_tokens"] = settings.maxOutputTokens
  if (settings.thinking?.effort !== undefined) fields["reasoning"] = { effort: settings.thinking.effort, summary: "auto" }
  // In the head: the same for every call of a conversation, so the body stays a prefix of the next.
  // compat `promptCacheKey: false` for a Responses server that rejects the field.
  if (settings.compat["promptCacheKey"] !== false && settings.promptCacheKey !== undefined) fields["prompt_cache_key"] = settings.promptCacheKey
  if (request.tools.length > 0) {
    fields["tools"] = toolsOnWire(request.tools, api, (tools) =>
      tools.map((tool) => ({ type: "function", name: tool.name, description: tool.description, parameters: tool.parameters, strict: false })))
  }
  delete fields["input"]
  const groups: Array<Group> = []
  const memo = memoFor(api, settings)
  const partOf = (message: Message): MessageParts => {
    switch (message.role) {
      case "user":
        return itemsOf([canonicalJson({ role: "user", content: message.content.map(inputPart) })])
      case "toolResult":
        return itemsOf([canonicalJson({ type: "function_call_output", call_id: splitId(message.toolCallId).callId, output: contentText(message.content) })])
      case "assistant":
        return itemsOf(assistantItems(message, isSameModel(message, target)))
    }
  }
  pushHistory(groups, memo, transformForReplay(request.messages, target), partOf)
  const { history, tail } = layoutHistory(groups, "")
  return { head: openHead(fields, "input"), history, tail: tail + "]}" }
}

export const adapter: Adapter = makeAdapter({
  api,
  buildBody,
  makeMachine,
  path: () => "responses",
  headers: (settings) => ({ ...settings.headers, authorization: `Bearer ${Redacted.value(settings.apiKey)}` })
})
