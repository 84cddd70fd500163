/**
 * The open blocks of a Chat Completions answer. The wire has no block events: a text or
 * thinking block opens with its first delta and closes when another kind starts, and tool calls
 * come as fragments keyed by their `index`. This keeps which block each delta belongs to, on top
 * of the shared `Assembler`.
 */
import type { ResponseEvent } from "../../Llm.js"
import type { Assembler } from "../Common.js"
import { type ChatToolCallDelta, encodeReasoningSignature, mergeReasoningDetails, type ReasoningDetail } from "./Wire.js"

const isCompleteJson = (text: string): boolean => {
  try {
    JSON.parse(text)
    return true
  } catch {
    return false
  }
}

export class ChatBlocks {
  private textIndex: number | undefined
  private thinkingIndex: number | undefined
  private lastThinkingIndex: number | undefined
  /** Per thinking block: the field its text came in and the reasoning details that arrived with it. */
  private readonly thinkingSources = new Map<number, { readonly field: string; readonly details: Array<ReasoningDetail> }>()
  /** Tool calls by wire `index` ("i0") or, when a vendor sends none, by id ("id:call_1"). */
  private readonly toolKeys = new Map<string, number>()
  private lastToolIndex: number | undefined

  constructor(private readonly assembler: Assembler) {}

  text(out: Array<ResponseEvent>, delta: string): void {
    if (this.textIndex === undefined) {
      this.closeThinking(out)
      this.textIndex = this.assembler.startText(out)
    }
    this.assembler.textDelta(out, this.textIndex, delta)
  }

  /** Thinking text that came in `field` (`reasoning_content`, `reasoning`, or typed `content`). */
  thinking(out: Array<ResponseEvent>, field: string, delta: string): void {
    this.assembler.thinkingDelta(out, this.openThinking(out, field), delta)
  }

  /**
   * OpenRouter's `reasoning_details` belong to the open thinking block, else the last one (its
   * ThinkingEnd has gone out, the Done message carries them); alone (encrypted only), they open
   * one in `field`.
   */
  reasoningDetails(out: Array<ResponseEvent>, field: string, details: unknown): void {
    const target = this.thinkingIndex ?? this.lastThinkingIndex ?? this.openThinking(out, field)
    const source = this.thinkingSources.get(target)
    if (source !== undefined && mergeReasoningDetails(source.details, details)) {
      this.assembler.setSignature(target, encodeReasoningSignature(source.field, source.details))
    }
  }

  /** One fragment of a tool call: its arguments go to its block, started when it is the call's first. */
  toolCall(out: Array<ResponseEvent>, call: typeof ChatToolCallDelta.Type): void {
    const blockIndex = this.toolBlockFor(out, call)
    const fragment = call.function?.arguments
    if (typeof fragment === "string") this.assembler.toolCallDelta(out, blockIndex, fragment)
  }

  private closeText(out: Array<ResponseEvent>): void {
    if (this.textIndex !== undefined) this.assembler.end(out, this.textIndex)
    this.textIndex = undefined
  }

  private closeThinking(out: Array<ResponseEvent>): void {
    if (this.thinkingIndex !== undefined) this.assembler.end(out, this.thinkingIndex)
    this.thinkingIndex = undefined
  }

  private openThinking(out: Array<ResponseEvent>, field: string): number {
    if (this.thinkingIndex !== undefined) return this.thinkingIndex
    this.closeText(out)
    const index = this.assembler.startThinking(out)
    this.thinkingIndex = index
    this.lastThinkingIndex = index
    this.thinkingSources.set(index, { field, details: [] })
    // Remember which field it came in, so it can be sent back under the same name.
    this.assembler.setSignature(index, field)
    return index
  }

  private toolBlockFor(out: Array<ResponseEvent>, call: typeof ChatToolCallDelta.Type): number {
    const id = typeof call.id === "string" && call.id.length > 0 ? call.id : undefined
    const name = typeof call.function?.name === "string" && call.function.name.length > 0 ? call.function.name : undefined
    const wireIndex = typeof call.index === "number" ? call.index : undefined
    const key = wireIndex !== undefined ? `i${wireIndex}` : id !== undefined ? `id:${id}` : undefined
    let blockIndex = key !== undefined ? this.toolKeys.get(key) : this.lastToolIndex
    if (blockIndex !== undefined && wireIndex !== undefined && id !== undefined && name !== undefined) {
      // Ollama gives every call of a response index 0: a new id and name on an index whose call
      // already holds complete arguments starts the next call.
      const block = this.assembler.blocks[blockIndex]
      if (block?.kind === "toolCall" && block.id !== id && isCompleteJson(block.args)) blockIndex = undefined
    }
    if (blockIndex === undefined) {
      this.closeThinking(out)
      this.closeText(out)
      blockIndex = this.assembler.startToolCall(out, id ?? `call_${wireIndex ?? this.toolKeys.size}`, name ?? "")
      if (key !== undefined) this.toolKeys.set(key, blockIndex)
    }
    this.lastToolIndex = blockIndex
    return blockIndex
  }
}
