/**
 * Google Gemini `streamGenerateContent?alt=sse` (llm-providers.md §2.4): text and `thought`
 * parts, whole `functionCall` parts (and Vertex's streamed `partialArgs`), `thoughtSignature`
 * kept on the block it arrived with and replayed to the same model, repeated `usageMetadata`
 * (the last one wins), and `finishReason` mapping. Gemini has no terminal event, so the answer
 * is complete at end of stream once a `finishReason` was seen.
 */
import { Either, Redacted, Schema } from "effect"
import type { AssistantMessage, LlmError, Message, RequestMessages, ResponseEvent, StopReason, Usage, UserContent } from "../Llm.js"
import { canonicalJson } from "../Llm.js"
import { type Adapter, type BodyParts, type CallSettings, makeAdapter, openHead, toolsOnWire } from "./Adapter.js"
import {
  Assembler,
  classifyStreamError,
  contentText,
  decodeJson,
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

export const api = "gemini"

/** Prefix of ids we invent for calls Gemini sent without one; such ids are never sent back. */
export const generatedIdPrefix = "gemini_call_"

/** Documented sentinel for Gemini 3 calls that have no signature of their own (from another model). */
export const skipSignatureSentinel = "skip_thought_signature_validator"

// =============================================================================
// Wire schema
// =============================================================================

const OptNum = Schema.optional(Schema.NullOr(Schema.Number))

export const GeminiPartialArg = Schema.Struct({
  jsonPath: Schema.String,
  stringValue: Schema.optional(Schema.String),
  numberValue: Schema.optional(Schema.Number),
  boolValue: Schema.optional(Schema.Boolean),
  nullValue: Schema.optional(Schema.Unknown),
  willContinue: Schema.optional(Schema.Boolean)
})

// Optional fields also accept null, read as absent: a null where an object is expected is not a broken stream.
const Opt = <A, I>(schema: Schema.Schema<A, I>) => Schema.optional(Schema.NullOr(schema))

export const GeminiPart = Schema.Struct({
  text: Opt(Schema.String),
  thought: Opt(Schema.Boolean),
  thoughtSignature: Opt(Schema.String),
  functionCall: Opt(Schema.Struct({
    name: Opt(Schema.String),
    id: Opt(Schema.String),
    args: Opt(Schema.Record({ key: Schema.String, value: Schema.Unknown })),
    partialArgs: Opt(Schema.Array(GeminiPartialArg)),
    willContinue: Opt(Schema.Boolean)
  }))
})

export const GeminiChunk = Schema.Struct({
  candidates: Opt(Schema.Array(Schema.Struct({
    content: Opt(Schema.Struct({ parts: Opt(Schema.Array(GeminiPart)) })),
    finishReason: Opt(Schema.String)
  }))),
  usageMetadata: Opt(Schema.Struct({
    promptTokenCount: OptNum,
    candidatesTokenCount: OptNum,
    thoughtsTokenCount: OptNum,
    cachedContentTokenCount: OptNum,
    toolUsePromptTokenCount: OptNum
  })),
  modelVersion: Opt(Schema.String),
  responseId: Opt(Schema.String),
  promptFeedback: Opt(Schema.Struct({ blockReason: Opt(Schema.String) })),
  error: Schema.optional(Schema.Unknown)
})
export type GeminiChunk = typeof GeminiChunk.Type

const decodeChunk = decoderFor(GeminiChunk)

export const mapUsage = (usage: NonNullable<GeminiChunk["usageMetadata"]>): Usage => {
  const cached = usage.cachedContentTokenCount ?? 0
  const thoughts = usage.thoughtsTokenCount ?? 0
  return {
    // promptTokenCount already contains the cached tokens: count them once.
    input: Math.max(0, (usage.promptTokenCount ?? 0) + (usage.toolUsePromptTokenCount ?? 0) - cached),
    output: (usage.candidatesTokenCount ?? 0) + thoughts,
    cacheRead: cached,
    cacheWrite: 0,
    reasoning: thoughts
  }
}

type Finish = { readonly stop: StopReason } | { readonly error: string }

export const mapFinishReason = (reason: string): Finish => {
  switch (reason) {
    case "STOP":
      return { stop: "stop" }
    case "MAX_TOKENS":
      return { stop: "length" }
    case "FINISH_REASON_UNSPECIFIED":
      return { stop: "stop" }
    default:
      return { error: `the response ended with finishReason ${reason}` }
  }
}

// =============================================================================
// State machine
// =============================================================================

/** Sets a value at a Vertex `jsonPath` such as `$.a.b[0]`; strings continue when streamed in pieces. */
const setAtPath = (root: Record<string, unknown>, path: string, value: unknown, append: boolean): void => {
  const segments: Array<string | number> = []
  const pattern = /\.([^.[\]]+)|\[(\d+)\]|\['([^']*)'\]/g
  let match: RegExpExecArray | null
  while ((match = pattern.exec(path)) !== null) segments.push(match[2] !== undefined ? Number(match[2]) : (match[1] ?? match[3] ?? ""))
  if (segments.length === 0) return
  let node: Record<string | number, unknown> = root
  for (let i = 0; i < segments.length - 1; i++) {
    const key = segments[i]!
    const next = segments[i + 1]!
    if (node[key] === undefined || typeof node[key] !== "object" || node[key] === null) node[key] = typeof next === "number" ? [] : {}
    node = node[key] as Record<string | number, unknown>
  }
  const last = segments[segments.length - 1]!
  node[last] = append && typeof node[last] === "string" && typeof value === "string" ? node[last] + value : value
}

export const makeMachine = (meta: StreamMeta): Machine => {
  const assembler = new Assembler(meta)
  let finished = false
  let finish: Finish | undefined
  let current: { kind: "text" | "thinking"; index: number; signed: boolean } | undefined
  let pendingCall: { index: number; args: Record<string, unknown> } | undefined
  let callCount = 0
  const usedIds = new Set<string>()

  const closeCurrent = (out: Array<ResponseEvent>) => {
    if (current !== undefined) assembler.end(out, current.index)
    current = undefined
  }
  const closePendingCall = (out: Array<ResponseEvent>): LlmError | undefined => {
    if (pendingCall === undefined) return undefined
    const { index, args } = pendingCall
    pendingCall = undefined
    assembler.toolCallDelta(out, index, JSON.stringify(args))
    return assembler.end(out, index)
  }

  const onPart = (part: typeof GeminiPart.Type, out: Array<ResponseEvent>): LlmError | undefined => {
    const call = part.functionCall
    const thoughtSignature = part.thoughtSignature ?? undefined
    if (call !== undefined && call !== null) {
      if (call.name === undefined || call.name === null) {
        if (pendingCall !== undefined && call.partialArgs) {
          for (const arg of call.partialArgs) {
            const value = arg.stringValue ?? arg.numberValue ?? arg.boolValue ?? null
            setAtPath(pendingCall.args, arg.jsonPath, value, arg.stringValue !== undefined)
          }
        }
        // An empty `functionCall: {}` ends a streamed call.
        return call.willContinue === true ? undefined : closePendingCall(out)
      }
      closeCurrent(out)
      const error = closePendingCall(out)
      if (error !== undefined) return error
      // Ids are often missing, and may repeat: a call's id must name it alone (its result is matched by it).
      const id = call.id && !usedIds.has(call.id) ? call.id : `${generatedIdPrefix}${callCount}`
      usedIds.add(id)
      callCount++
      const index = assembler.startToolCall(out, id, call.name, thoughtSignature !== undefined ? { thoughtSignature } : undefined)
      if (call.willContinue === true) {
        pendingCall = { index, args: { ...call.args } }
        return undefined
      }
      // Whole calls come in one part: one delta with the arguments as JSON, then the end.
      assembler.toolCallDelta(out, index, JSON.stringify(call.args ?? {}))
      return assembler.end(out, index)
    }
    const text = part.text
    if (text === undefined || text === null) return undefined
    const kind = part.thought === true ? "thinking" : "text"
    const signature = thoughtSignature
    if (text.length === 0 && signature === undefined) return undefined
    const error = closePendingCall(out)
    if (error !== undefined) return error
    // A new block when the kind changes, or when the open block already holds a signature of its own.
    if (current === undefined || current.kind !== kind || (signature !== undefined && current.signed)) {
      closeCurrent(out)
      const index = kind === "thinking" ? assembler.startThinking(out) : assembler.startText(out)
      current = { kind, index, signed: false }
    }
    if (kind === "thinking") assembler.thinkingDelta(out, current.index, text)
    else assembler.textDelta(out, current.index, text)
    if (signature !== undefined) {
      assembler.setSignature(current.index, signature)
      current.signed = true
    }
    return undefined
  }

  const onChunk = (chunk: GeminiChunk, out: Array<ResponseEvent>): LlmError | undefined => {
    if (chunk.error !== undefined && chunk.error !== null) return classifyStreamError(meta.provider, chunk, "error in stream")
    // A chunk with nothing in it does not take the Start (and its ids) from the first real one.
    if (!assembler.started && (chunk.candidates ?? []).length === 0 && !chunk.usageMetadata && !chunk.promptFeedback) return undefined
    assembler.start(out, chunk.modelVersion || undefined, chunk.responseId || undefined)
    if (chunk.usageMetadata) assembler.usage = mapUsage(chunk.usageMetadata)
    const candidate = chunk.candidates?.[0]
    if (candidate === undefined) {
      const blocked = chunk.promptFeedback?.blockReason
      if (blocked) return llmError("providerError", `${meta.provider}: the prompt was blocked (${blocked})`, { provider: meta.provider })
      return undefined
    }
    for (const part of candidate.content?.parts ?? []) {
      const error = onPart(part, out)
      if (error !== undefined) return error
    }
    if (candidate.finishReason) finish = mapFinishReason(candidate.finishReason)
    return undefined
  }

  return {
    finished: () => finished,
    push: (event: SseEvent, out) => {
      if (finished || event.data.length === 0) return undefined
      const decoded = decodeJson(decodeChunk, event.data, `${meta.provider} chunk`)
      const error = Either.isLeft(decoded) ? decoded.left : onChunk(decoded.right, out)
      if (error !== undefined) finished = true
      return error
    },
    end: (out) => {
      if (finished) return undefined
      finished = true
      if (finish === undefined) {
        return llmError("network", `${meta.provider}: stream ended without a finishReason`, { retryable: true, provider: meta.provider })
      }
      if ("error" in finish) return llmError("providerError", `${meta.provider}: ${finish.error}`, { provider: meta.provider })
      const error = closePendingCall(out)
      if (error !== undefined) return error
      assembler.start(out)
      return assembler.finish(out, finish.stop)
    }
  }
}

// =============================================================================
// Request body
// =============================================================================

const userPart = (block: UserContent): string =>
  block.type === "text" ? canonicalJson({ text: block.text }) : canonicalJson({ inlineData: { mimeType: block.mimeType, data: block.data } })

const parseArguments = (text: string): unknown => {
  try {
    const parsed: unknown = JSON.parse(text)
    return parsed !== null && typeof parsed === "object" && !Array.isArray(parsed) ? parsed : {}
  } catch {
    return {}
  }
}

const wireId = (id: string): string | undefined => (id.startsWith(generatedIdPrefix) ? undefined : id)

const modelParts = (message: AssistantMessage, same: boolean, gemini3: boolean): Array<string> => {
  const parts: Array<string> = []
  for (const block of message.content) {
    switch (block.type) {
      case "text":
        if (block.text.length > 0 || block.signature !== undefined) {
          parts.push(canonicalJson({ text: block.text, thoughtSignature: same ? block.signature : undefined }))
        }
        break
      case "thinking":
        // Cross-model thinking was already turned into text by the replay transform.
        if (same) parts.push(canonicalJson({ text: block.thinking, thought: true, thoughtSignature: block.signature }))
        break
      case "toolCall": {
        const signature = block.extras?.["thoughtSignature"]
        parts.push(canonicalJson({
          functionCall: { name: block.name, args: parseArguments(block.arguments), id: wireId(block.id) },
          thoughtSignature: typeof signature === "string" ? signature : gemini3 ? skipSignatureSentinel : undefined
        }))
      }
    }
  }
  return parts
}

export const buildBody = (request: RequestMessages, settings: CallSettings): BodyParts => {
  const target = { api, provider: settings.provider, model: settings.model, normalizeToolCallId: (id: string) => id }
  const gemini3 = /gemini-3/.test(settings.model)
  const generationConfig: Record<string, unknown> = {}
  if (settings.maxOutputTokens !== undefined) generationConfig["maxOutputTokens"] = settings.maxOutputTokens
  if (settings.thinking !== undefined) {
    generationConfig["thinkingConfig"] = {
      includeThoughts: true,
      ...(settings.thinking.budgetTokens !== undefined ? { thinkingBudget: settings.thinking.budgetTokens } : {}),
      ...(settings.thinking.budgetTokens === undefined && settings.thinking.effort !== undefined
        ? { thinkingLevel: settings.thinking.effort === "minimal" || settings.thinking.effort === "low" ? "low" : "high" }
        : {})
    }
  }
  const fields: Record<string, unknown> = { ...settings.extraBody }
  if (Object.keys(generationConfig).length > 0) {
    fields["generationConfig"] = { ...(fields["generationConfig"] as Record<string, unknown> | undefined), ...generationConfig }
  }
  if (request.systemPrompt.length > 0) fields["systemInstruction"] = { parts: [{ text: request.systemPrompt }] }
  if (request.tools.length > 0) {
    fields["tools"] = toolsOnWire(request.tools, api, (tools) => [{
      functionDeclarations: tools.map((tool) => ({ name: tool.name, description: tool.description, parametersJsonSchema: tool.parameters }))
    }])
  }
  delete fields["contents"]

  const groups: Array<Group> = []
  // All function responses of a turn (and a user text after them) share one content.
  const memo = memoFor(api, settings)
  const partOf = (message: Message): MessageParts => {
    switch (message.role) {
      case "user":
        return groupOf("parts", "user", message.content.map(userPart))
      case "toolResult": {
        const text = contentText(message.content)
        return groupOf("parts", "user", [canonicalJson({
          functionResponse: { name: message.toolName, id: wireId(message.toolCallId), response: message.isError ? { error: text } : { output: text } }
        })])
      }
      case "assistant":
        return groupOf("parts", "model", modelParts(message, isSameModel(message, target), gemini3))
    }
  }
  pushHistory(groups, memo, transformForReplay(request.messages, target), partOf)
  const { history, tail } = layoutHistory(groups, "")
  return { head: openHead(fields, "contents"), history, tail: tail + "]}" }
}

export const adapter: Adapter = makeAdapter({
  api,
  buildBody,
  makeMachine,
  path: (settings) => `models/${encodeURIComponent(settings.model)}:streamGenerateContent?alt=sse`,
  headers: (settings) => ({ ...settings.headers, "x-goog-api-key": Redacted.value(settings.apiKey) })
})
