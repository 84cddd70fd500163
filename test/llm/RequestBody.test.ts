/**
 * Request bodies: deterministic bytes, the prefix property that keeps provider prompt caches warm,
 * and the replay rules for history produced by the same or another model (llm-providers.md §1.6).
 */
import { describe, expect, it } from "@effect/vitest"
import type { AssistantContent, AssistantMessage, Message } from "../../src/Llm.js"
import { emptyUsage } from "../../src/Llm.js"
import { bodyOf, type CallSettings } from "../../src/llm/Adapter.js"
import { adapters } from "../../src/llm/Router.js"
import { apis, history, requestOf, settingsFor } from "../support/Histories.js"

describe("request bodies", () => {
  for (const api of apis) {
    const adapter = adapters[api]

    it.prop(`${api}: the history bytes for n messages are a prefix of those for n+1, and every body is JSON`, [history], ([messages]) => {
      const settings = settingsFor(adapter)
      let previous = adapter.buildBody(requestOf([]), settings)
      for (let n = 1; n <= messages.length; n++) {
        const next = adapter.buildBody(requestOf(messages.slice(0, n)), settings)
        expect(next.head).toBe(previous.head)
        expect(next.history.startsWith(previous.history)).toBe(true)
        expect(bodyOf(next).startsWith(previous.head + previous.history)).toBe(true)
        JSON.parse(bodyOf(next))
        previous = next
      }
    }, { fastCheck: { numRuns: 60 } })

    it(`${api}: the same request gives the same bytes, whatever order the tool schema's keys were built in`, () => {
      const a = adapter.prepare(requestOf([]), settingsFor(adapter))
      const b = adapter.prepare(
        { ...requestOf([]), tools: requestOf([]).tools.map((tool) => keysReversed(tool) as typeof tool) },
        settingsFor(adapter)
      )
      expect(a.body).toBe(b.body)
      expect(a.body).not.toContain("sk-test")
    })
  }
})

/** The same value with every object's keys in the reverse order (another list object too). */
function keysReversed(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(keysReversed)
  if (typeof value !== "object" || value === null) return value
  return Object.fromEntries(Object.entries(value).reverse().map(([key, member]) => [key, keysReversed(member)]))
}

// -----------------------------------------------------------------------------
// Replay rules
// -----------------------------------------------------------------------------

const assistant = (from: { api: string; provider: string; model: string }, content: Array<AssistantContent>): AssistantMessage => ({
  role: "assistant",
  content,
  ...from,
  usage: emptyUsage,
  stopReason: content.some((block) => block.type === "toolCall") ? "toolUse" : "stop"
})
const user = (value: string): Message => ({ role: "user", content: [{ type: "text", text: value }] })
const result = (id: string, name: string): Message => ({ role: "toolResult", toolCallId: id, toolName: name, content: [{ type: "text", text: "42" }], isError: false })
const body = (api: (typeof apis)[number], messages: Array<Message>, overrides: Partial<CallSettings> = {}) =>
  JSON.parse(bodyOf(adapters[api].buildBody(requestOf(messages), settingsFor(adapters[api], overrides))))

describe("replay rules", () => {
  const signed: Array<AssistantContent> = [
    { type: "thinking", thinking: "plan", signature: "SIG" },
    { type: "thinking", thinking: "", signature: "REDACTED", redacted: true },
    { type: "text", text: "ok" },
    { type: "toolCall", id: "toolu_1", name: "read", arguments: "{\"path\":\"a\"}" }
  ]

  it("anthropic: same model keeps thinking, signatures and redacted blocks verbatim", () => {
    const json = body("anthropic", [user("hi"), assistant({ api: "anthropic", provider: "p1", model: "model-a" }, signed), result("toolu_1", "read")])
    expect(json.messages[1].content).toEqual([
      { type: "thinking", thinking: "plan", signature: "SIG" },
      { type: "redacted_thinking", data: "REDACTED" },
      { type: "text", text: "ok" },
      { type: "tool_use", id: "toolu_1", name: "read", input: { path: "a" } }
    ])
  })

  it("anthropic: from another model, thinking becomes text and signatures/redacted blocks are dropped", () => {
    const json = body("anthropic", [user("hi"), assistant({ api: "anthropic", provider: "p1", model: "other" }, signed), result("toolu_1", "read")])
    expect(json.messages[1].content).toEqual([
      { type: "text", text: "plan" },
      { type: "text", text: "ok" },
      { type: "tool_use", id: "toolu_1", name: "read", input: { path: "a" } }
    ])
  })

  it("anthropic: all results of a turn share one user message; cache breakpoints on system, last tool and the newest user block", () => {
    const json = body("anthropic", [
      user("hi"),
      assistant({ api: "anthropic", provider: "p1", model: "model-a" }, [
        { type: "toolCall", id: "a", name: "read", arguments: "{}" },
        { type: "toolCall", id: "b|x", name: "read", arguments: "{}" }
      ]),
      result("a", "read"),
      result("b|x", "read")
    ])
    expect(json.system[0].cache_control).toEqual({ type: "ephemeral" })
    expect(json.tools.at(-1).cache_control).toEqual({ type: "ephemeral" })
    expect(json.messages).toHaveLength(3)
    expect(json.messages[2].content.map((block: { tool_use_id: string }) => block.tool_use_id)).toEqual(["a", "b_x"])
    expect(json.messages[2].content[1].cache_control).toEqual({ type: "ephemeral" })
    expect(json.messages[2].content[0].cache_control).toBeUndefined()
  })

  it("a tool call without a result gets a synthetic error result before the next user message", () => {
    const json = body("openai-chat", [
      user("hi"),
      assistant({ api: "openai-chat", provider: "p1", model: "model-a" }, [{ type: "toolCall", id: "c1", name: "read", arguments: "{}" }]),
      user("never mind")
    ])
    expect(json.messages.map((message: { role: string }) => message.role)).toEqual(["system", "user", "assistant", "tool", "user"])
    expect(json.messages[3]).toEqual({ role: "tool", tool_call_id: "c1", content: "No result provided" })
  })

  it("openai-chat: reasoning_content goes back on tool-call turns only (DeepSeek), never when the compat flag says so", () => {
    const from = { api: "openai-chat", provider: "p1", model: "model-a" }
    const messages = [
      user("a"),
      assistant(from, [{ type: "thinking", thinking: "why", signature: "reasoning_content" }, { type: "toolCall", id: "c1", name: "read", arguments: "{\"path\":\"a\"}" }]),
      result("c1", "read"),
      assistant(from, [{ type: "thinking", thinking: "so", signature: "reasoning_content" }, { type: "text", text: "done" }]),
      user("b")
    ]
    const json = body("openai-chat", messages)
    expect(json.messages[2]).toEqual({
      role: "assistant",
      content: null,
      reasoning_content: "why",
      tool_calls: [{ id: "c1", type: "function", function: { name: "read", arguments: "{\"path\":\"a\"}" } }]
    })
    expect(json.messages[4]).toEqual({ role: "assistant", content: "done" })
    expect(json.max_tokens).toBe(1000)
    expect(body("openai-chat", messages, { compat: { replayReasoning: "never" } }).messages[2].reasoning_content).toBeUndefined()
  })

  it("openai-chat: tool arguments are sent back as the exact text the model produced", () => {
    const raw = "{ \"n\" : 1.50 }"
    const json = body("openai-chat", [user("a"), assistant({ api: "x", provider: "y", model: "z" }, [{ type: "toolCall", id: "c1", name: "read", arguments: raw }])])
    expect(json.messages[2].tool_calls[0].function.arguments).toBe(raw)
  })

  it("gemini: thoughtSignature replays on its own part for the same model; another model's calls get the Gemini 3 sentinel", () => {
    const call: AssistantContent = { type: "toolCall", id: "gemini_call_0", name: "read", arguments: "{}", extras: { thoughtSignature: "TS" } }
    const same = body("gemini", [user("a"), assistant({ api: "gemini", provider: "p1", model: "gemini-3-pro" }, [{ type: "text", text: "t", signature: "S1" }, call]), result("gemini_call_0", "read")])
    expect(same.contents[1]).toEqual({ role: "model", parts: [{ text: "t", thoughtSignature: "S1" }, { functionCall: { name: "read", args: {} }, thoughtSignature: "TS" }] })
    expect(same.contents[2]).toEqual({ role: "user", parts: [{ functionResponse: { name: "read", response: { output: "42" } } }] })
    const other = body("gemini", [user("a"), assistant({ api: "anthropic", provider: "p1", model: "x" }, [{ type: "toolCall", id: "toolu_9", name: "read", arguments: "{}" }])])
    expect(other.contents[1].parts[0]).toEqual({ functionCall: { name: "read", args: {}, id: "toolu_9" }, thoughtSignature: "skip_thought_signature_validator" })
  })

  it("openai-responses: store:false, encrypted reasoning items replayed verbatim before their follower, call ids split", () => {
    const item = JSON.stringify({ type: "reasoning", id: "rs_1", summary: [], encrypted_content: "ENC" })
    const from = { api: "openai-responses", provider: "p1", model: "model-a" }
    const json = body("openai-responses", [
      user("a"),
      assistant(from, [{ type: "thinking", thinking: "", signature: item }, { type: "toolCall", id: "call_1|fc_1", name: "read", arguments: "{}" }]),
      result("call_1|fc_1", "read")
    ])
    expect(json.store).toBe(false)
    expect(json.include).toEqual(["reasoning.encrypted_content"])
    expect(json.input.slice(1)).toEqual([
      { type: "reasoning", id: "rs_1", summary: [], encrypted_content: "ENC" },
      { type: "function_call", call_id: "call_1", id: "fc_1", name: "read", arguments: "{}" },
      { type: "function_call_output", call_id: "call_1", output: "42" }
    ])
    const other = body("openai-responses", [user("a"), assistant({ ...from, model: "other" }, [{ type: "thinking", thinking: "", signature: item }, { type: "toolCall", id: "call_1|fc_1", name: "read", arguments: "{}" }])])
    expect(other.input.slice(1)).toEqual([{ type: "function_call", call_id: "call_1", name: "read", arguments: "{}" }])
  })
})
