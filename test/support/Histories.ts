/**
 * What the request-body tests build from: call settings per adapter, generated histories (turns
 * of a user message, an answer from one of several models, results for some of its calls), and
 * a request around a history.
 */
import { FastCheck, Redacted } from "effect"
import type { AssistantContent, AssistantMessage, Message, RequestMessages } from "../../src/Llm.js"
import { emptyUsage } from "../../src/Llm.js"
import type { Adapter, CallSettings } from "../../src/llm/Adapter.js"

export const settingsFor = (adapter: Adapter, overrides: Partial<CallSettings> = {}): CallSettings => ({
  provider: "p1",
  baseUrl: adapter.api === "openai-chat" ? "https://api.deepseek.com/v1" : "https://example.test/v1",
  apiKey: Redacted.make("sk-test"),
  headers: {},
  extraBody: {},
  compat: {},
  model: adapter.api === "gemini" ? "gemini-3-pro" : "model-a",
  maxOutputTokens: 1000,
  thinking: undefined,
  ...overrides
})

export const apis = ["openai-chat", "anthropic", "gemini", "openai-responses"] as const

// -----------------------------------------------------------------------------
// Generated histories
// -----------------------------------------------------------------------------

const text = FastCheck.fullUnicodeString({ maxLength: 12 })
const origin = FastCheck.constantFrom(
  ...apis.map((api) => ({ api, provider: "p1", model: api === "gemini" ? "gemini-3-pro" : "model-a" })),
  { api: "anthropic", provider: "other", model: "claude-z" },
  { api: "openai-chat", provider: "p1", model: "model-b" }
)
const assistantBlock: FastCheck.Arbitrary<AssistantContent> = FastCheck.oneof(
  FastCheck.record({ type: FastCheck.constant("text" as const), text }),
  FastCheck.record({ type: FastCheck.constant("text" as const), text, signature: FastCheck.constant("{\"id\":\"msg_9\",\"v\":1}") }),
  FastCheck.record({ type: FastCheck.constant("thinking" as const), thinking: text, signature: FastCheck.constantFrom("sig==", "reasoning_content") }),
  FastCheck.record({ type: FastCheck.constant("thinking" as const), thinking: FastCheck.constant(""), signature: FastCheck.constant("opaque"), redacted: FastCheck.constant(true) })
)
const toolCall = FastCheck.record({
  type: FastCheck.constant("toolCall" as const),
  id: FastCheck.stringMatching(/^[a-z0-9_|.]{1,50}$/),
  name: FastCheck.constantFrom("read", "grep", "list"),
  arguments: FastCheck.constantFrom("{}", "{\"path\":\"a.ts\"}", "{ \"n\" : 1.50 }")
})

/** One turn: a user message, an assistant answer, and results for some (not always all) of its calls. */
export const turn: FastCheck.Arbitrary<Array<Message>> = FastCheck.tuple(
  text,
  origin,
  FastCheck.array(assistantBlock, { maxLength: 3 }),
  FastCheck.uniqueArray(toolCall, { maxLength: 3, selector: (call) => call.id }),
  FastCheck.boolean()
).map(([userText, from, blocks, calls, answerAll]) => {
  const assistant: AssistantMessage = {
    role: "assistant",
    content: [...blocks, ...calls],
    ...from,
    usage: emptyUsage,
    stopReason: calls.length > 0 ? "toolUse" : "stop"
  }
  const answered = answerAll ? calls : calls.slice(0, 1)
  return [
    { role: "user", content: [{ type: "text", text: userText }] },
    assistant,
    ...answered.map((call): Message => ({
      role: "toolResult",
      toolCallId: call.id,
      toolName: call.name,
      content: [{ type: "text", text: `result of ${call.name}` }],
      isError: false
    }))
  ]
})

export const history = FastCheck.array(turn, { minLength: 1, maxLength: 5 }).map((turns) => turns.flat())

/** One tool list for every request, as the runner's catalogs are built once. */
const tools: RequestMessages["tools"] = [
  { name: "read", description: "Read a file", parameters: { type: "object", properties: { path: { type: "string" } } } },
  { name: "grep", description: "Search files", parameters: { type: "object", properties: { pattern: { type: "string" }, path: { type: "string" } }, required: ["pattern"] } }
]

export const requestOf = (messages: ReadonlyArray<Message>): RequestMessages => ({
  systemPrompt: "You are a test.",
  messages,
  tools
})
