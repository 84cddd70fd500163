/**
 * History as segments, the pure part: the model sees the current segment of a conversation's
 * journal (which itself is append-only forever). A compaction opens a new segment of
 * [a summary, a verbatim tail]; a rewind one of the messages the client kept; a fork one of the
 * stored messages a new chat names; an import one of the messages only the client held. This module
 * holds the records the loop commits for that, and the pure choices it makes: where the
 * verbatim tail begins, what the summary call asks, what the new segment's first message says,
 * and how many tokens a request is likely to be.
 */
import { Schema } from "effect"
import type { AssistantMessage, Message, ToolDefinition, UserMessage } from "../Llm.js"

// =============================================================================
// Records
// =============================================================================

export const SegmentKind = Schema.Literal("origin", "compaction", "rewind", "fork", "import")
export type SegmentKind = typeof SegmentKind.Type

/** How the current segment began. Its messages are the conversation's `messages`. */
export const Segment = Schema.Struct({
  /** Journal position of the segment's first message (the journal's length when it opened). */
  start: Schema.Int,
  kind: SegmentKind,
  /** The turn that opened it (empty for the origin). */
  turnId: Schema.String,
  /** The model call that wrote the summary (compaction only). */
  summaryCallId: Schema.optional(Schema.String),
  /** The conversation a fork was seeded from (fork only). */
  source: Schema.optional(Schema.String),
  /** Messages of the previous segment it does not carry verbatim (summarized or discarded). */
  replaced: Schema.Int,
  /** Messages of the previous segment it carries verbatim (compaction: the tail after the summary). */
  kept: Schema.Int
})
export type Segment = typeof Segment.Type

export const originSegment: Segment = { start: 0, kind: "origin", turnId: "", replaced: 0, kept: 0 }

export const CompactionTrigger = Schema.Literal("manual", "auto", "overflow")
export type CompactionTrigger = typeof CompactionTrigger.Type

/** A summary call in flight: the segment's messages before `cut` are summarized, the rest kept. */
export const CompactionRun = Schema.Struct({
  callId: Schema.String,
  trigger: CompactionTrigger,
  cut: Schema.Int,
  maxOutputTokens: Schema.Int
})
export type CompactionRun = typeof CompactionRun.Type

/**
 * What the last committed answer says the segment costs: `tokens` (its prompt plus its output,
 * as the provider counted them) covered the segment's first `messages` messages.
 */
export const ContextSize = Schema.Struct({ messages: Schema.Int, tokens: Schema.Int })
export type ContextSize = typeof ContextSize.Type

export const unknownContextSize: ContextSize = { messages: 0, tokens: 0 }

/**
 * What the client says it holds of the history: the ids it knows the segment's messages by, in
 * order. For a conversation the server does not know yet (a forked chat), `seed` is what the
 * runner found stored under those ids, and where; for one whose history only the client holds
 * (a chat moved onto this server), `imported` is that history as the client gave it back.
 */
export interface ClientHistory {
  readonly promptIds: ReadonlyArray<string>
  readonly seed?: { readonly conversationId: string; readonly messages: ReadonlyArray<Message> }
  readonly imported?: ImportedHistory
}

/**
 * A history read back from the client (its prompt messages, translated): the messages, and the
 * system prompt its leading system messages gave, which replaces the one the server builds.
 */
export interface ImportedHistory {
  readonly messages: ReadonlyArray<Message>
  readonly systemPrompt?: string
}

/** The knobs of compaction (the loop's policy carries them). */
export interface CompactionPolicy {
  /** The model's context window in tokens, if known: without it there is no automatic compaction. */
  readonly contextWindowOf: (model: string) => number | undefined
  /** Whether to compact before a model call whose estimated prompt passes `threshold`. */
  readonly auto: boolean
  /** Share of the context window at which a request is compacted first (room is left for the answer). */
  readonly threshold: number
  /** Share of the context window the verbatim tail may take. */
  readonly tailShare: number
  /** The summary call's output limit. */
  readonly summaryMaxTokens: number
  /** Tool results longer than this (characters) before the tail are elided when the history overflowed. */
  readonly elideToolResultChars: number
}

export const defaultCompactionPolicy: CompactionPolicy = {
  contextWindowOf: () => undefined,
  auto: true,
  threshold: 0.8,
  tailShare: 0.15,
  summaryMaxTokens: 4096,
  elideToolResultChars: 2048
}

/** Tail budget when the model's window is unknown (a manual compaction). */
const DEFAULT_TAIL_TOKENS = 16_000

// =============================================================================
// Token estimates
// =============================================================================

const CHARS_PER_TOKEN = 4
/** What providers bill for a typical image, roughly. */
const IMAGE_TOKENS = 1_600
/** Per-message framing (role, separators). */
const MESSAGE_TOKENS = 4

const messageTokensMemo = new WeakMap<Message, number>()

/** An estimate of a message's tokens: characters over four, a flat cost per image. Memoized per message object. */
export const messageTokens = (message: Message): number => {
  const known = messageTokensMemo.get(message)
  if (known !== undefined) return known
  let chars = 0
  let images = 0
  for (const block of message.content) {
    switch (block.type) {
      case "text":
        chars += block.text.length
        break
      case "image":
        images++
        break
      case "thinking":
        chars += block.thinking.length + (block.signature?.length ?? 0)
        break
      case "toolCall":
        chars += block.name.length + block.arguments.length
        break
    }
  }
  const tokens = MESSAGE_TOKENS + Math.ceil(chars / CHARS_PER_TOKEN) + images * IMAGE_TOKENS
  messageTokensMemo.set(message, tokens)
  return tokens
}

const toolsTokensMemo = new WeakMap<ReadonlyArray<ToolDefinition>, number>()
const toolsTokens = (tools: ReadonlyArray<ToolDefinition>): number => {
  const known = toolsTokensMemo.get(tools)
  if (known !== undefined) return known
  const tokens = Math.ceil(JSON.stringify(tools).length / CHARS_PER_TOKEN)
  toolsTokensMemo.set(tools, tokens)
  return tokens
}

/** Whether the last answer's count covers a prefix of `messages` (a new segment starts uncounted). */
const isCounted = (messages: ReadonlyArray<Message>, known: ContextSize): boolean => known.tokens > 0 && known.messages <= messages.length

const messagesTokens = (messages: ReadonlyArray<Message>, from: number): number => {
  let tokens = 0
  for (let index = from; index < messages.length; index++) tokens += messageTokens(messages[index]!)
  return tokens
}

/**
 * The estimated size of a request: the last answer's counted tokens plus an estimate of what
 * was appended since; without a count, an estimate of everything (prompt, tools, messages).
 */
export const estimateTokens = (
  request: { readonly systemPrompt: string; readonly tools: ReadonlyArray<ToolDefinition>; readonly messages: ReadonlyArray<Message> },
  known: ContextSize
): number => {
  const counted = isCounted(request.messages, known)
  const head = counted ? known.tokens : Math.ceil(request.systemPrompt.length / CHARS_PER_TOKEN) + toolsTokens(request.tools)
  return head + messagesTokens(request.messages, counted ? known.messages : 0)
}

/**
 * How much of the context window the segment takes now: the last answer's count plus an
 * estimate of what followed it (the system prompt and tools are not counted without an answer).
 */
export const contextTokensOf = (state: { readonly messages: ReadonlyArray<Message>; readonly context: ContextSize }): number => {
  const counted = isCounted(state.messages, state.context)
  return (counted ? state.context.tokens : 0) + messagesTokens(state.messages, counted ? state.context.messages : 0)
}

/** What an answer says the request and its output came to. */
export const countedSize = (message: AssistantMessage, messages: number): ContextSize => {
  const usage = message.usage
  return { messages, tokens: usage.input + usage.cacheRead + usage.cacheWrite + usage.output }
}

// =============================================================================
// The cut: where the verbatim tail begins
// =============================================================================

/** The tail's budget in tokens for a model. */
export const tailBudget = (policy: CompactionPolicy, model: string): number => {
  const window = policy.contextWindowOf(model)
  return window === undefined ? DEFAULT_TAIL_TOKENS : Math.floor(window * policy.tailShare)
}

/**
 * Where the verbatim tail begins: as many of the latest messages as fit `budget`, moved
 * forward past tool results so that no result is kept without the call it answers (a call and
 * its result stay on one side; thinking stays inside its message, with its signature).
 * `messages.length` when nothing fits.
 */
export const chooseCut = (messages: ReadonlyArray<Message>, budget: number): number => {
  let cut = messages.length
  let tokens = 0
  for (let index = messages.length - 1; index >= 0; index--) {
    tokens += messageTokens(messages[index]!)
    if (tokens > budget) break
    cut = index
  }
  while (cut < messages.length && messages[cut]!.role === "toolResult") cut++
  return cut
}

/**
 * For a compaction the user asked for when everything fits the tail: keep the last exchange
 * (from the latest user message after the first), else the last message that is not a tool
 * result. 0 when there is nothing to summarize.
 */
export const manualCut = (messages: ReadonlyArray<Message>): number => {
  for (let index = messages.length - 1; index > 0; index--) if (messages[index]!.role === "user") return index
  for (let index = messages.length - 1; index > 0; index--) if (messages[index]!.role !== "toolResult") return index
  return 0
}

// =============================================================================
// The summary call and the new segment
// =============================================================================

const SUMMARY_INSTRUCTION = [
  "Stop the task here and write a summary of this whole conversation so far. The conversation will continue from your summary and its most recent messages only: everything else will be gone, so the summary must carry all that is needed to go on. Do not call any tools; answer with the summary alone.",
  "",
  "Cover, in this order:",
  "1. The user's requests and intent, quoting their exact words where they matter.",
  "2. What was done: files read, created or changed (with their paths), commands run and what they showed, decisions taken and why.",
  "3. Errors met and how they were resolved.",
  "4. Facts needed to continue: names, paths, signatures, snippets of code, configuration values.",
  "5. Where the work stands now, what remains to do, and the very next step."
].join("\n")

/** The user message that asks for the summary, appended to the conversation's own prefix. */
export const summaryInstruction = (instructions: string): UserMessage => ({
  role: "user",
  content: [{
    type: "text",
    text: instructions.trim() === ""
      ? SUMMARY_INSTRUCTION
      : `${SUMMARY_INSTRUCTION}\n\nThe user adds these instructions for the summary: ${instructions.trim()}`
  }]
})

/** The summary an answer holds: its text blocks, trimmed (thinking and tool calls are not part of it). */
export const summaryTextOf = (message: AssistantMessage): string =>
  message.content.flatMap((block) => (block.type === "text" ? [block.text] : [])).join("").trim()

export const SUMMARY_OPEN = "<conversation_summary>"
export const SUMMARY_CLOSE = "</conversation_summary>"

const SUMMARY_HEADER = `${SUMMARY_OPEN}\nThe earlier part of this conversation was summarized to free context. The summary:\n\n`
const REQUEST_HEADER = "\n\nThe request you are working on now, as I wrote it:\n\n"

/**
 * The new segment's first message: the summary, as the user's context; and, when the cut
 * passed the message that opened the running turn, that request word for word.
 */
export const summaryMessage = (summary: string, request?: string): UserMessage => ({
  role: "user",
  content: [{
    type: "text",
    text: `${SUMMARY_HEADER}${summary}\n${SUMMARY_CLOSE}${request === undefined ? "" : `${REQUEST_HEADER}${request}`}`
  }]
})

/** The summary a segment's first message holds, if that message is one. */
export const summaryOfMessage = (message: Message | undefined): string | undefined => {
  if (message === undefined || message.role !== "user") return undefined
  const block = message.content[0]
  if (block === undefined || block.type !== "text" || !block.text.startsWith(SUMMARY_HEADER)) return undefined
  const end = block.text.lastIndexOf(`\n${SUMMARY_CLOSE}`, block.text.includes(REQUEST_HEADER) ? block.text.indexOf(REQUEST_HEADER) : undefined)
  return end < SUMMARY_HEADER.length ? undefined : block.text.slice(SUMMARY_HEADER.length, end)
}

/**
 * The history a summary call sends after the provider refused it as too long: tool results
 * before the tail longer than `limit` characters, and images there, are replaced by a line
 * saying so. The same messages otherwise, so the result stays a valid history.
 */
export const elideStale = (messages: ReadonlyArray<Message>, cut: number, limit: number): ReadonlyArray<Message> =>
  messages.map((message, index) => {
    if (index >= cut || message.role === "assistant") return message
    if (message.role === "toolResult") {
      const chars = message.content.reduce((sum, block) => sum + (block.type === "text" ? block.text.length : 0), 0)
      const hasImage = message.content.some((block) => block.type === "image")
      if (chars <= limit && !hasImage) return message
      return { ...message, content: [{ type: "text" as const, text: `[${chars} characters of tool output elided to fit the context window]` }] }
    }
    if (!message.content.some((block) => block.type === "image")) return message
    return {
      ...message,
      content: message.content.map((block) => (block.type === "image" ? { type: "text" as const, text: "[image elided to fit the context window]" } : block))
    }
  })
