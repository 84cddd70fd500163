/**
 * Prompt caching on the request side (llm-providers.md §3): OpenAI's `prompt_cache_key` sits in
 * the body's head, only where the vendor takes it, and Anthropic's `cache_control` breakpoints
 * move with the history so every turn reads the cache the turn before wrote.
 */
import { describe, expect, it } from "@effect/vitest"
import { Redacted } from "effect"
import type { AssistantMessage, Message, RequestMessages } from "../../src/Llm.js"
import { emptyUsage } from "../../src/Llm.js"
import { type Adapter, bodyOf, type CallSettings } from "../../src/llm/Adapter.js"
import * as Anthropic from "../../src/llm/Anthropic.js"
import * as OpenAiChat from "../../src/llm/OpenAiChat.js"
import * as OpenAiResponses from "../../src/llm/OpenAiResponses.js"

const settings = (overrides: Partial<CallSettings> = {}): CallSettings => ({
  provider: "p",
  baseUrl: "https://api.openai.com/v1",
  apiKey: Redacted.make("sk-test"),
  headers: {},
  extraBody: {},
  compat: {},
  model: "m",
  maxOutputTokens: 1000,
  thinking: undefined,
  promptCacheKey: "conv-42",
  ...overrides
})

const user = (text: string): Message => ({ role: "user", content: [{ type: "text", text }] })
const assistant = (content: AssistantMessage["content"], api: string): AssistantMessage => ({
  role: "assistant",
  content,
  api,
  provider: "p",
  model: "m",
  usage: emptyUsage,
  stopReason: content.some((block) => block.type === "toolCall") ? "toolUse" : "stop"
})
const result = (id: string, text: string): Message => ({ role: "toolResult", toolCallId: id, toolName: "read", content: [{ type: "text", text }], isError: false })

/** An agent conversation of `turns` model calls: each answers with two tool calls, whose results come back. */
const conversation = (turns: number, api: string): Array<Array<Message>> => {
  const requests: Array<Array<Message>> = []
  const history: Array<Message> = [user("Fix the bug.")]
  for (let turn = 0; turn < turns; turn++) {
    requests.push([...history])
    history.push(
      assistant([
        { type: "text", text: `Step ${turn}.` },
        { type: "toolCall", id: `call_${turn}a`, name: "read", arguments: `{"path":"a${turn}.ts"}` },
        { type: "toolCall", id: `call_${turn}b`, name: "read", arguments: `{"path":"b${turn}.ts"}` }
      ], api),
      result(`call_${turn}a`, `contents of a${turn}`),
      result(`call_${turn}b`, `contents of b${turn}`)
    )
  }
  return requests
}

const request = (messages: ReadonlyArray<Message>): RequestMessages => ({
  systemPrompt: "You are a coding agent.",
  messages,
  tools: [
    { name: "read", description: "Read a file", parameters: { type: "object", properties: { path: { type: "string" } } } },
    { name: "grep", description: "Search", parameters: { type: "object", properties: { q: { type: "string" } } } }
  ]
})

const cacheKeyOf = (adapter: Adapter, overrides: Partial<CallSettings>) =>
  (JSON.parse(bodyOf(adapter.buildBody(request([user("hi")]), settings(overrides)))) as { prompt_cache_key?: string }).prompt_cache_key

describe("prompt_cache_key", () => {
  it("Chat sends it on api.openai.com only, unless compat says otherwise", () => {
    expect(cacheKeyOf(OpenAiChat.adapter, {})).toBe("conv-42")
    expect(cacheKeyOf(OpenAiChat.adapter, { baseUrl: "https://api.deepseek.com/v1" })).toBeUndefined()
    expect(cacheKeyOf(OpenAiChat.adapter, { baseUrl: "https://openrouter.ai/api/v1" })).toBeUndefined()
    expect(cacheKeyOf(OpenAiChat.adapter, { baseUrl: "https://my-proxy.test/v1", compat: { promptCacheKey: true } })).toBe("conv-42")
    expect(cacheKeyOf(OpenAiChat.adapter, { compat: { promptCacheKey: false } })).toBeUndefined()
    expect(cacheKeyOf(OpenAiChat.adapter, { promptCacheKey: undefined })).toBeUndefined()
  })

  it("Responses sends it by default; compat promptCacheKey: false turns it off", () => {
    expect(cacheKeyOf(OpenAiResponses.adapter, { baseUrl: "https://api.githubcopilot.com" })).toBe("conv-42")
    expect(cacheKeyOf(OpenAiResponses.adapter, { compat: { promptCacheKey: false } })).toBeUndefined()
    expect(cacheKeyOf(OpenAiResponses.adapter, { promptCacheKey: undefined })).toBeUndefined()
  })

  for (const [adapter, api] of [[OpenAiChat.adapter, "openai-chat"], [OpenAiResponses.adapter, "openai-responses"]] as const) {
    it(`${api}: the key is in the head, so head + history stay a byte prefix of the next call's body`, () => {
      const bodies = conversation(4, api).map((messages) => adapter.buildBody(request(messages), settings()))
      for (let n = 0; n + 1 < bodies.length; n++) {
        const [previous, next] = [bodies[n]!, bodies[n + 1]!]
        expect(previous.head).toContain(`"prompt_cache_key":"conv-42"`)
        expect(next.head).toBe(previous.head)
        expect(bodyOf(next).startsWith(previous.head + previous.history)).toBe(true)
      }
    })
  }
})

describe("Anthropic cache_control breakpoints", () => {
  const marker = `"cache_control":{"type":"ephemeral"}`
  const positions = (body: string): Array<number> => {
    const found: Array<number> = []
    for (let at = body.indexOf(marker); at >= 0; at = body.indexOf(marker, at + 1)) found.push(at)
    return found
  }
  const bodies = conversation(6, "anthropic").map((messages) => bodyOf(Anthropic.buildBody(request(messages), settings({ baseUrl: "https://api.anthropic.com/v1" }))))

  it("three breakpoints, never more than Anthropic's four: the last tool, the system prompt, the newest user block", () => {
    for (const body of bodies) {
      expect(positions(body)).toHaveLength(3)
      const json = JSON.parse(body) as { tools: Array<Record<string, unknown>>; system: Array<Record<string, unknown>>; messages: Array<{ role: string; content: Array<Record<string, unknown>> }> }
      expect(json.tools.map((tool) => tool["cache_control"] !== undefined)).toEqual([false, true])
      expect(json.system[0]!["cache_control"]).toEqual({ type: "ephemeral" })
      const marked = json.messages.flatMap((message, m) => message.content.flatMap((block, b) => (block["cache_control"] ? [[m, b]] : [])))
      const last = json.messages.length - 1
      expect(json.messages[last]!.role).toBe("user")
      expect(marked).toEqual([[last, json.messages[last]!.content.length - 1]])
    }
  })

  it("each turn's body keeps, byte for byte, everything up to the previous turn's moving breakpoint, and moves it forward", () => {
    for (let n = 0; n + 1 < bodies.length; n++) {
      const [previous, next] = [bodies[n]!, bodies[n + 1]!]
      const previousMoving = positions(previous).at(-1)!
      const nextMoving = positions(next).at(-1)!
      // The cache entry turn n wrote ends at its breakpoint block; turn n+1 has the same bytes up to there.
      const upToBreakpoint = previous.slice(0, previousMoving).replace(/,$/, "")
      expect(next.startsWith(upToBreakpoint)).toBe(true)
      // The fixed breakpoints stay where they were; the moving one is later, on the newest block.
      expect(positions(next).slice(0, 2)).toEqual(positions(previous).slice(0, 2))
      expect(nextMoving).toBeGreaterThan(previousMoving)
    }
  })

  it("compat cacheControl: false sends no breakpoint", () => {
    const body = bodyOf(Anthropic.buildBody(request(conversation(2, "anthropic")[1]!), settings({ compat: { cacheControl: false } })))
    expect(positions(body)).toHaveLength(0)
  })
})
