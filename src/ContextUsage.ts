/**
 * What the client's context usage panel shows (`AgentService/GetPromptContextUsage`): the
 * conversation's last model request taken apart (the system prompt, the rules in it, the tools,
 * the user's and the assistant's messages, the tool results), each part's size estimated from its
 * characters and, when the provider counted the request, scaled so the parts add up to its count.
 *
 * `breakdownOf` is pure; `make` reads the request back from the store. Nothing here fails: a
 * conversation this server never ran, or a store error, gives no snapshot (logged).
 */
import { Effect, Option } from "effect"
import type { Message, RequestMessages, ToolDefinition, Usage } from "./Llm.js"
import { Store } from "./Store.js"

/** One node of the panel's tree: a category (no parent) or a part of one. */
export interface UsageNode {
  readonly id: string
  readonly parentId: string | undefined
  readonly kind: "category" | "rule" | "tool" | "toolResult"
  readonly label: string
  readonly categoryId: string
  readonly estimatedTokens: number
  readonly characterCount: number
}

const CHARS_PER_TOKEN = 4

/** A rule as `Prompt.buildPrompt` writes it into the system prompt. */
const RULE = /<rule(?: path="([^"]*)")?>\n[\s\S]*?\n<\/rule>/g

const textOf = (message: Message): string => {
  switch (message.role) {
    case "user":
    case "toolResult":
      return message.content.map((block) => (block.type === "text" ? block.text : "")).join("")
    case "assistant":
      return message.content.map((block) =>
        block.type === "text" ? block.text : block.type === "thinking" ? block.thinking : `${block.name}${block.arguments}`
      ).join("")
  }
}

interface Part {
  readonly id: string
  readonly kind: UsageNode["kind"]
  readonly label: string
  readonly chars: number
}

interface Category {
  readonly id: string
  readonly label: string
  readonly own: number
  readonly parts: ReadonlyArray<Part>
}

const toolChars = (tool: ToolDefinition): number => JSON.stringify(tool).length

const categoriesOf = (request: RequestMessages): ReadonlyArray<Category> => {
  const rules = [...request.systemPrompt.matchAll(RULE)].map((match, index): Part => ({
    id: `rules/${index}`,
    kind: "rule",
    label: match[1] === undefined || match[1] === "" ? "User rule" : match[1],
    chars: match[0].length
  }))
  const ruleChars = rules.reduce((sum, rule) => sum + rule.chars, 0)
  const tools = request.tools.map((tool, index): Part => ({ id: `tools/${index}`, kind: "tool", label: tool.name, chars: toolChars(tool) }))
  const sum = (role: Message["role"]) => request.messages.reduce((total, message) => total + (message.role === role ? textOf(message).length : 0), 0)
  const results = request.messages.flatMap((message, index): Array<Part> =>
    message.role === "toolResult" ? [{ id: `toolResults/${index}`, kind: "toolResult", label: message.toolName, chars: textOf(message).length }] : []
  )
  return [
    { id: "systemPrompt", label: "System prompt", own: request.systemPrompt.length - ruleChars, parts: [] },
    { id: "rules", label: "Rules", own: 0, parts: rules },
    { id: "tools", label: "Tools", own: 0, parts: tools },
    { id: "userMessages", label: "User messages", own: sum("user"), parts: [] },
    { id: "assistantMessages", label: "Assistant messages", own: sum("assistant"), parts: [] },
    { id: "toolResults", label: "Tool results", own: 0, parts: results }
  ]
}

/**
 * The request's parts as the panel's nodes: each category, then its parts. Tokens are the
 * characters over four, scaled to `countedTokens` (what the provider counted of the request)
 * when it is known.
 */
export const breakdownOf = (request: RequestMessages, countedTokens: number | undefined): ReadonlyArray<UsageNode> => {
  const categories = categoriesOf(request)
  const totalChars = categories.reduce((sum, c) => sum + c.own + c.parts.reduce((s, p) => s + p.chars, 0), 0)
  const estimated = Math.ceil(totalChars / CHARS_PER_TOKEN)
  const scale = countedTokens !== undefined && countedTokens > 0 && estimated > 0 ? countedTokens / estimated : 1
  const tokens = (chars: number) => Math.round((chars / CHARS_PER_TOKEN) * scale)
  return categories.flatMap((category): Array<UsageNode> => {
    const chars = category.own + category.parts.reduce((sum, part) => sum + part.chars, 0)
    return [
      { id: category.id, parentId: undefined, kind: "category", label: category.label, categoryId: category.id, estimatedTokens: tokens(chars), characterCount: chars },
      ...category.parts.map((part): UsageNode => ({
        id: part.id,
        parentId: category.id,
        kind: part.kind,
        label: part.label,
        categoryId: category.id,
        estimatedTokens: tokens(part.chars),
        characterCount: part.chars
      }))
    ]
  })
}

/** What the provider counted of a request: its input, cached or not. */
export const countedInput = (usage: Usage | null): number | undefined =>
  usage === null ? undefined : usage.input + usage.cacheRead + usage.cacheWrite

export interface ContextUsage {
  /** The breakdown of the conversation's last model request; none when it has none here. */
  readonly snapshotOf: (conversationId: string) => Effect.Effect<ReadonlyArray<UsageNode> | undefined>
}

/** The service over the store: the last model call of the conversation, its exact request read back. */
export const make: Effect.Effect<ContextUsage, never, Store> = Effect.gen(function*() {
  const store = yield* Store
  return {
    snapshotOf: (conversationId) =>
      Effect.gen(function*() {
        if (conversationId === "") return undefined
        const calls = yield* store.callsOf(conversationId)
        const last = calls.at(-1)
        if (last === undefined) return undefined
        const loaded = yield* store.loadLlmCall(last.callId)
        if (Option.isNone(loaded)) return undefined
        return breakdownOf(loaded.value.request, countedInput(loaded.value.usage))
      }).pipe(
        Effect.catchAll((error) =>
          Effect.as(Effect.logWarning(`context usage of conversation ${conversationId}: ${String(error)}`), undefined)
        )
      )
  }
})
