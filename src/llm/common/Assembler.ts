/**
 * The message assembler the four adapters share: it turns "block started / delta / ended" into
 * indexed `ResponseEvent`s and builds the final assistant message alongside. Each block's
 * `index` is its position in the final `content`; nothing is shared by reference with emitted
 * events.
 */
import {
  type AssistantContent,
  type AssistantMessage,
  emptyUsage,
  type LlmError,
  type ResponseEvent,
  type StopReason,
  type ToolCall,
  type Usage
} from "../../Llm.js"
import { excerpt, malformed } from "./Errors.js"

type OpenBlock =
  | { kind: "text"; text: string; signature: string | undefined; open: boolean }
  | { kind: "thinking"; text: string; signature: string | undefined; redacted: boolean; open: boolean }
  | { kind: "toolCall"; id: string; name: string; args: string; extras: Record<string, unknown> | undefined; open: boolean }

type ToolCallBlock = Extract<OpenBlock, { kind: "toolCall" }>


/** Who the stream is for; stamped on the final message so replay can tell "same model" apart. */
export interface StreamMeta {
  readonly api: string
  readonly provider: string
  readonly model: string
}

/** Builds the assistant message while emitting events. */
export class Assembler {
  readonly blocks: Array<OpenBlock> = []
  usage: Usage = emptyUsage
  responseId: string | undefined
  started = false

  constructor(readonly meta: StreamMeta) {}

  start(out: Array<ResponseEvent>, model?: string, responseId?: string): void {
    if (this.started) return
    this.started = true
    if (responseId !== undefined) this.responseId = responseId
    out.push({
      _tag: "Start",
      ...(model !== undefined ? { model } : {}),
      ...(responseId !== undefined ? { responseId } : {})
    })
  }

  startText(out: Array<ResponseEvent>, signature?: string): number {
    const index = this.blocks.length
    this.blocks.push({ kind: "text", text: "", signature, open: true })
    out.push({ _tag: "TextStart", index })
    return index
  }

  textDelta(out: Array<ResponseEvent>, index: number, delta: string): void {
    const block = this.blocks[index]
    if (block === undefined || block.kind !== "text" || delta.length === 0) return
    block.text += delta
    out.push({ _tag: "TextDelta", index, delta })
  }

  startThinking(out: Array<ResponseEvent>): number {
    const index = this.blocks.length
    this.blocks.push({ kind: "thinking", text: "", signature: undefined, redacted: false, open: true })
    out.push({ _tag: "ThinkingStart", index })
    return index
  }

  thinkingDelta(out: Array<ResponseEvent>, index: number, delta: string): void {
    const block = this.blocks[index]
    if (block === undefined || block.kind !== "thinking" || delta.length === 0) return
    block.text += delta
    out.push({ _tag: "ThinkingDelta", index, delta })
  }

  setSignature(index: number, signature: string): void {
    const block = this.blocks[index]
    if (block !== undefined && (block.kind === "thinking" || block.kind === "text")) block.signature = signature
  }

  setRedacted(index: number): void {
    const block = this.blocks[index]
    if (block !== undefined && block.kind === "thinking") block.redacted = true
  }

  startToolCall(out: Array<ResponseEvent>, id: string, name: string, extras?: Record<string, unknown>): number {
    const index = this.blocks.length
    this.blocks.push({ kind: "toolCall", id, name, args: "", extras, open: true })
    out.push({ _tag: "ToolCallStart", index, id, name })
    return index
  }

  toolCallDelta(out: Array<ResponseEvent>, index: number, delta: string): void {
    const block = this.blocks[index]
    if (block === undefined || block.kind !== "toolCall" || delta.length === 0) return
    block.args += delta
    out.push({ _tag: "ToolCallDelta", index, delta })
  }

  setToolExtras(index: number, extras: Record<string, unknown>): void {
    const block = this.blocks[index]
    if (block !== undefined && block.kind === "toolCall") block.extras = { ...block.extras, ...extras }
  }

  hasToolCalls(): boolean {
    return this.blocks.some((block) => block.kind === "toolCall")
  }

  /** Ends one block; a tool call whose arguments are not a JSON object fails the stream. */
  end(out: Array<ResponseEvent>, index: number): LlmError | undefined {
    const block = this.blocks[index]
    if (block === undefined || !block.open) return undefined
    block.open = false
    if (block.kind === "toolCall") {
      const error = settleArguments(block)
      if (error !== undefined) return error
    }
    out.push(endEventOf(block, index))
    return undefined
  }

  endAll(out: Array<ResponseEvent>): LlmError | undefined {
    for (let index = 0; index < this.blocks.length; index++) {
      const error = this.end(out, index)
      if (error !== undefined) return error
    }
    return undefined
  }

  message(stopReason: StopReason): AssistantMessage {
    return {
      role: "assistant",
      content: this.blocks.map(contentOf),
      api: this.meta.api,
      provider: this.meta.provider,
      model: this.meta.model,
      ...(this.responseId !== undefined ? { responseId: this.responseId } : {}),
      usage: this.usage,
      stopReason
    }
  }

  /** Closes every block and emits `Done`; `stop` becomes `toolUse` when tool calls were streamed. */
  finish(out: Array<ResponseEvent>, reason: StopReason): LlmError | undefined {
    const error = this.endAll(out)
    if (error !== undefined) return error
    const final: StopReason = reason === "stop" && this.hasToolCalls() ? "toolUse" : reason
    out.push({ _tag: "Done", reason: final, message: this.message(final) })
    return undefined
  }
}

/** Empty arguments become `{}`; anything but a JSON object is malformed. */
const settleArguments = (block: ToolCallBlock): LlmError | undefined => {
  if (block.args.trim().length === 0) block.args = "{}"
  let parsed: unknown
  try {
    parsed = JSON.parse(block.args)
  } catch {
    return malformed(`tool call ${block.name} (${block.id}) arguments are not valid JSON: ${excerpt(block.args, 200)}`)
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
    return malformed(`tool call ${block.name} (${block.id}) arguments are not a JSON object`)
  }
  return undefined
}

/** The event that closes a block (a tool call's arguments settled first). */
const endEventOf = (block: OpenBlock, index: number): ResponseEvent => {
  switch (block.kind) {
    case "text":
      return { _tag: "TextEnd", index }
    case "thinking":
      return {
        _tag: "ThinkingEnd",
        index,
        ...(block.signature !== undefined ? { signature: block.signature } : {}),
        ...(block.redacted ? { redacted: true } : {})
      }
    case "toolCall":
      return { _tag: "ToolCallEnd", index, toolCall: toolCallOf(block) }
  }
}

/** A block as the final message holds it. */
const contentOf = (block: OpenBlock): AssistantContent => {
  switch (block.kind) {
    case "text":
      return { type: "text", text: block.text, ...(block.signature !== undefined ? { signature: block.signature } : {}) }
    case "thinking":
      return {
        type: "thinking",
        thinking: block.text,
        ...(block.signature !== undefined ? { signature: block.signature } : {}),
        ...(block.redacted ? { redacted: true } : {})
      }
    case "toolCall":
      return toolCallOf(block)
  }
}

const toolCallOf = (block: ToolCallBlock): ToolCall => ({
  type: "toolCall",
  id: block.id,
  name: block.name,
  arguments: block.args,
  ...(block.extras !== undefined ? { extras: { ...block.extras } } : {})
})
