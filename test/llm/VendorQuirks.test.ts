/**
 * Chat Completions as the vendors actually send it: small hand-written streams, one per
 * convention, each naming where the convention is documented or recorded. They pin the neutral
 * events and usage, so a vendor's quirk never reaches the loop.
 */
import { describe, expect, it } from "@effect/vitest"
import { Redacted } from "effect"
import type { AssistantMessage } from "../../src/Llm.js"
import { emptyUsage } from "../../src/Llm.js"
import type { CallSettings } from "../../src/llm/Adapter.js"
import * as OpenAiChat from "../../src/llm/OpenAiChat.js"
import { chunkSizes, doneOf, replay } from "./replay.js"

const meta = { api: "openai-chat", provider: "test", model: "m" }
/** One SSE event per data line, then `[DONE]`. */
const stream = (...lines: Array<string>) => lines.map((line) => `data: ${line}\n\n`).join("") + "data: [DONE]\n\n"
const run = (body: string, chunkSize?: number) => replay(OpenAiChat.makeMachine, meta, body, chunkSize)

describe("Chat usage conventions", () => {
  // xAI: reasoning_tokens are reported apart from completion_tokens and counted in total_tokens
  // (Google Cloud's Grok partner-model docs, "Reasoning": "reasoning_tokens ... separate from completion_tokens").
  it("xAI Grok: reasoning outside completion_tokens (total = prompt + completion + reasoning) is added to output", () => {
    const body = stream(
      `{"id":"x1","model":"grok-4","choices":[{"index":0,"delta":{"role":"assistant","reasoning_content":"Thinking"}}]}`,
      `{"id":"x1","model":"grok-4","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}]}`,
      `{"id":"x1","model":"grok-4","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":20,"total_tokens":45,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":15}}}`
    )
    expect(doneOf(run(body)).message.usage).toEqual({ input: 6, output: 35, cacheRead: 4, cacheWrite: 0, reasoning: 15 })
  })

  it("OpenAI: reasoning inside completion_tokens (total = prompt + completion) is not added again", () => {
    const usage = OpenAiChat.mapUsage({ prompt_tokens: 10, completion_tokens: 20, total_tokens: 30, completion_tokens_details: { reasoning_tokens: 15 } })
    expect(usage).toEqual({ input: 10, output: 20, cacheRead: 0, cacheWrite: 0, reasoning: 15 })
    // Without a total the conventions cannot be told apart, and nothing is added.
    expect(OpenAiChat.mapUsage({ prompt_tokens: 10, completion_tokens: 5, completion_tokens_details: { reasoning_tokens: 8 } }).output).toBe(5)
  })

  // DeepSeek: prompt_cache_hit_tokens + prompt_cache_miss_tokens = prompt_tokens (llm-providers.md §3, fixture deepseek-tool-call).
  it("DeepSeek: hit and miss counts alone still give input and cache reads, counted once", () => {
    expect(OpenAiChat.mapUsage({ prompt_cache_hit_tokens: 320, prompt_cache_miss_tokens: 19, completion_tokens: 83 }))
      .toEqual({ input: 19, output: 83, cacheRead: 320, cacheWrite: 0, reasoning: 0 })
    expect(OpenAiChat.mapUsage({ prompt_tokens: 339, prompt_cache_hit_tokens: 320, prompt_cache_miss_tokens: 19, prompt_tokens_details: { cached_tokens: 320 }, completion_tokens: 83 }).cacheRead).toBe(320)
  })

  // Moonshot/Kimi: `cached_tokens` at the top of usage (llm-providers.md §3 "Kimi / Qwen ... cached_tokens").
  it("Moonshot: a top-level cached_tokens is a cache read", () => {
    const body = stream(
      `{"id":"k1","model":"kimi-k2","choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop","usage":{"prompt_tokens":100,"completion_tokens":3,"total_tokens":103,"cached_tokens":64}}]}`
    )
    expect(doneOf(run(body)).message.usage).toEqual({ input: 36, output: 3, cacheRead: 64, cacheWrite: 0, reasoning: 0 })
  })

  // OpenRouter: usage carries `cost` (a number) and `prompt_tokens_details.cache_write_tokens`
  // (openrouter.ai/docs/use-cases/usage-accounting); Perplexity sends `cost` as an object.
  it("OpenRouter: cache_write_tokens are cache writes; cost (number or object) is ignored", () => {
    const body = stream(
      `{"id":"gen-1","model":"anthropic/claude","provider":"Anthropic","choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop","native_finish_reason":"end_turn"}]}`,
      `{"id":"gen-1","choices":[],"usage":{"prompt_tokens":194,"completion_tokens":2,"total_tokens":196,"cost":0.95,"is_byok":false,"cost_details":{"upstream_inference_cost":19},"prompt_tokens_details":{"cached_tokens":50,"cache_write_tokens":100,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}`
    )
    expect(doneOf(run(body)).message.usage).toEqual({ input: 44, output: 2, cacheRead: 50, cacheWrite: 100, reasoning: 0 })
    const perplexity = stream(
      `{"id":"p1","model":"sonar","citations":["https://a.test"],"choices":[{"index":0,"delta":{"content":"ok"},"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6,"search_context_size":"low","cost":{"total_cost":0.005}}}`
    )
    expect(doneOf(run(perplexity)).message.content).toEqual([{ type: "text", text: "ok" }])
  })

  // Groq: the usage of a stream sits under `x_groq.usage` (recorded: fixture groq-event-error-midstream.2.sse).
  it("Groq: usage under x_groq.usage is read", () => {
    const body = stream(
      `{"id":"g1","model":"openai/gpt-oss-120b","choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning":"Hm"}}],"x_groq":{"id":"req_1"}}`,
      `{"id":"g1","model":"openai/gpt-oss-120b","choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}],"x_groq":{"id":"req_1","usage":{"queue_time":0.004,"prompt_tokens":304,"prompt_time":0.01,"completion_tokens":49,"completion_time":0.1,"total_tokens":353,"total_time":0.12,"completion_tokens_details":{"reasoning_tokens":23}}}}`
    )
    expect(doneOf(run(body)).message.usage).toEqual({ input: 304, output: 49, cacheRead: 0, cacheWrite: 0, reasoning: 23 })
  })
})

describe("Chat content and shapes", () => {
  // Mistral Magistral streams `delta.content` as typed chunks (Mistral's OpenAPI ThinkChunk/TextChunk;
  // spring-ai PR 5020, braintrust-sdk-javascript issue 1857).
  it("Mistral Magistral: thinking chunks become thinking deltas and text chunks text deltas", () => {
    const body = stream(
      `{"id":"ms1","model":"magistral-medium-2509","choices":[{"index":0,"delta":{"role":"assistant","content":[{"type":"thinking","thinking":[{"type":"text","text":"Let me "}]}]},"finish_reason":null}]}`,
      `{"id":"ms1","model":"magistral-medium-2509","choices":[{"index":0,"delta":{"content":[{"type":"thinking","thinking":[{"type":"text","text":"see."}]}]},"finish_reason":null}]}`,
      `{"id":"ms1","model":"magistral-medium-2509","choices":[{"index":0,"delta":{"content":[{"type":"text","text":"The answer"}]},"finish_reason":null}]}`,
      `{"id":"ms1","model":"magistral-medium-2509","choices":[{"index":0,"delta":{"content":" is 4."},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"total_tokens":29,"completion_tokens":20}}`
    )
    for (const size of chunkSizes) {
      const result = run(body, size)
      expect(result.events).toEqual([
        { _tag: "Start", model: "magistral-medium-2509", responseId: "ms1" },
        { _tag: "ThinkingStart", index: 0 },
        { _tag: "ThinkingDelta", index: 0, delta: "Let me " },
        { _tag: "ThinkingDelta", index: 0, delta: "see." },
        { _tag: "ThinkingEnd", index: 0, signature: "content" },
        { _tag: "TextStart", index: 1 },
        { _tag: "TextDelta", index: 1, delta: "The answer" },
        { _tag: "TextDelta", index: 1, delta: " is 4." },
        { _tag: "TextEnd", index: 1 },
        expect.objectContaining({ _tag: "Done", reason: "stop" })
      ])
    }
    expect(doneOf(run(body)).message.content).toEqual([
      { type: "thinking", thinking: "Let me see.", signature: "content" },
      { type: "text", text: "The answer is 4." }
    ])
  })

  it("content arrays of plain text parts are text, and unknown part types carry nothing", () => {
    const body = stream(
      `{"id":"c","choices":[{"index":0,"delta":{"content":[{"type":"text","text":"a"},{"type":"reference","reference_ids":[1]},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"b"}]},"finish_reason":"stop"}]}`
    )
    expect(doneOf(run(body)).message.content).toEqual([{ type: "text", text: "ab" }])
  })

  // Azure OpenAI opens with a prompt-filter chunk: `choices: []`, empty id and model
  // (recorded in llama-stack's Azure test recordings; Microsoft Q&A "empty choices array").
  it("Azure: the content-filter chunks (empty choices, empty id) neither fail nor take the Start", () => {
    const body = stream(
      `{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}}}]}`,
      `{"choices":[{"content_filter_results":{},"delta":{"content":"","refusal":null,"role":"assistant"},"finish_reason":null,"index":0,"logprobs":null}],"created":1757499916,"id":"chatcmpl-A","model":"gpt-5-mini-2025-08-07","object":"chat.completion.chunk","usage":null}`,
      `{"choices":[{"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}},"delta":{"content":"Rome"},"finish_reason":null,"index":0}],"id":"chatcmpl-A","model":"gpt-5-mini-2025-08-07"}`,
      `{"choices":[{"content_filter_offsets":{"check_offset":0,"start_offset":0,"end_offset":4},"content_filter_results":{},"finish_reason":null,"index":0}],"id":"","model":""}`,
      `{"choices":[{"delta":{},"finish_reason":"stop","index":0}],"id":"chatcmpl-A","model":"gpt-5-mini-2025-08-07"}`
    )
    const result = run(body)
    expect(result.events[0]).toEqual({ _tag: "Start", model: "gpt-5-mini-2025-08-07", responseId: "chatcmpl-A" })
    expect(doneOf(result).message).toMatchObject({ content: [{ type: "text", text: "Rome" }], responseId: "chatcmpl-A" })
  })

  it("null where an object is expected, and unknown fields of any shape, are ignored", () => {
    const body = stream(
      `{"id":"n","model":"local","choices":null,"usage":null,"x_groq":null,"service_tier":{"tier":1},"system_fingerprint":null}`,
      `{"id":"n","model":"local","choices":[{"index":0,"delta":null,"logprobs":{"content":[]}}]}`,
      `{"id":"n","model":"local","choices":[{"index":null,"delta":{"content":"ok","role":null,"tool_calls":null,"reasoning_content":null,"reasoning":null,"reasoning_details":null,"function_call":null,"audio":{"id":"a"}},"finish_reason":null,"stop_reason":null}]}`,
      `{"id":"n","model":"local","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"read","arguments":null}}]}}]}`,
      `{"id":"n","model":"local","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":null,"function":{"name":null,"arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2,"prompt_tokens_details":null,"completion_tokens_details":null}}`
    )
    const done = doneOf(run(body))
    expect(done.message.content).toEqual([{ type: "text", text: "ok" }, { type: "toolCall", id: "c1", name: "read", arguments: "{}" }])
    expect(done.message.usage).toEqual({ input: 1, output: 1, cacheRead: 0, cacheWrite: 0, reasoning: 0 })
  })
})

describe("Chat tool-call ids", () => {
  // Ollama: tool-call deltas without `index` (ollama/ollama#7881), and later every call with
  // index 0 but its own id (ollama/ollama#15457, vercel/ai#14277).
  it("Ollama: calls without an index are told apart by id", () => {
    const body = stream(
      `{"id":"o","model":"qwen3","choices":[{"index":0,"delta":{"role":"assistant","content":"","tool_calls":[{"id":"call_a","type":"function","function":{"name":"read","arguments":"{\\"path\\":\\"a\\"}"}}]},"finish_reason":null}]}`,
      `{"id":"o","model":"qwen3","choices":[{"index":0,"delta":{"role":"assistant","content":"","tool_calls":[{"id":"call_b","type":"function","function":{"name":"read","arguments":"{\\"path\\":\\"b\\"}"}}]},"finish_reason":"tool_calls"}]}`
    )
    expect(doneOf(run(body)).message.content).toEqual([
      { type: "toolCall", id: "call_a", name: "read", arguments: "{\"path\":\"a\"}" },
      { type: "toolCall", id: "call_b", name: "read", arguments: "{\"path\":\"b\"}" }
    ])
  })

  it("Ollama: a new id and name on an index whose call is complete starts the next call; fragments of one call still join", () => {
    const body = stream(
      `{"id":"o","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","function":{"name":"write","arguments":"{\\"f\\":"}}]}}]}`,
      `{"id":"o","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","function":{"name":"write","arguments":"\\"x\\"}"}}]}}]}`,
      `{"id":"o","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_b","function":{"name":"grep","arguments":"{\\"q\\":\\"y\\"}"}}]}}]}`,
      `{"id":"o","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`
    )
    for (const size of chunkSizes) {
      expect(doneOf(run(body, size)).message.content).toEqual([
        { type: "toolCall", id: "call_a", name: "write", arguments: "{\"f\":\"x\"}" },
        { type: "toolCall", id: "call_b", name: "grep", arguments: "{\"q\":\"y\"}" }
      ])
    }
  })
})

// -----------------------------------------------------------------------------
// OpenRouter reasoning_details
// -----------------------------------------------------------------------------

const settings = (overrides: Partial<CallSettings> = {}): CallSettings => ({
  provider: "test",
  baseUrl: "https://openrouter.ai/api/v1",
  apiKey: Redacted.make("sk-test"),
  headers: {},
  extraBody: {},
  compat: {},
  model: "m",
  maxOutputTokens: undefined,
  thinking: undefined,
  ...overrides
})

const bodyJson = (messages: ReadonlyArray<AssistantMessage | { role: "user"; content: Array<{ type: "text"; text: string }> }>, overrides: Partial<CallSettings> = {}) => {
  const parts = OpenAiChat.buildBody({ systemPrompt: "", messages, tools: [] }, settings(overrides))
  return JSON.parse(parts.head + parts.history + parts.tail) as { messages: Array<Record<string, unknown>>; prompt_cache_key?: string }
}

describe("OpenRouter reasoning_details", () => {
  // Recorded: pieces of one detail share its `index` (fixture openrouter-length-then-inband-error);
  // types reasoning.text / .summary / .encrypted (openrouter.ai/docs ReasoningDetail).
  const body = stream(
    `{"id":"gen-2","model":"anthropic/claude-sonnet-4","choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning":"Check ","reasoning_details":[{"type":"reasoning.text","text":"Check ","index":0,"format":"anthropic-claude-v1"}]}}]}`,
    `{"id":"gen-2","model":"anthropic/claude-sonnet-4","choices":[{"index":0,"delta":{"content":"","reasoning":"the file.","reasoning_details":[{"type":"reasoning.text","text":"the file.","signature":null,"index":0,"format":"anthropic-claude-v1"}]}}]}`,
    `{"id":"gen-2","model":"anthropic/claude-sonnet-4","choices":[{"index":0,"delta":{"content":"","reasoning":null,"reasoning_details":[{"type":"reasoning.text","signature":"sig-1","index":0,"format":"anthropic-claude-v1"}]}}]}`,
    `{"id":"gen-2","model":"anthropic/claude-sonnet-4","choices":[{"index":0,"delta":{"content":null,"tool_calls":[{"index":0,"id":"toolu_1","type":"function","function":{"name":"read","arguments":"{}"}}]}}]}`,
    `{"id":"gen-2","model":"anthropic/claude-sonnet-4","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`
  )
  const expectedDetails = [{ type: "reasoning.text", text: "Check the file.", signature: "sig-1", index: 0, format: "anthropic-claude-v1" }]

  it("streamed details are merged by index and kept as the thinking block's signature", () => {
    for (const size of chunkSizes) {
      const done = doneOf(run(body, size))
      const thinking = done.message.content[0]
      expect(thinking).toMatchObject({ type: "thinking", thinking: "Check the file." })
      expect(JSON.parse((thinking as { signature: string }).signature)).toEqual({ field: "reasoning", reasoning_details: expectedDetails })
    }
  })

  it("they go back verbatim on the same model's tool-call turn, beside the reasoning text", () => {
    const message = doneOf(run(body)).message
    const sent = bodyJson([{ role: "user", content: [{ type: "text", text: "hi" }] }, message])
    expect(sent.messages[1]).toMatchObject({ role: "assistant", reasoning: "Check the file.", reasoning_details: expectedDetails })
    expect(bodyJson([message], { compat: { replayReasoning: "never" } }).messages[0]!["reasoning_details"]).toBeUndefined()
    // Another model never sees them.
    expect(bodyJson([{ ...message, model: "other" }]).messages[0]!["reasoning_details"]).toBeUndefined()
  })

  it("encrypted details alone (no reasoning text) still make a thinking block that carries them", () => {
    const encrypted = stream(
      `{"id":"gen-3","model":"openai/o3","choices":[{"index":0,"delta":{"content":"","reasoning_details":[{"type":"reasoning.encrypted","data":"gAAAA==","id":"rs_1","index":0,"format":"openai-responses-v1"}]}}]}`,
      `{"id":"gen-3","model":"openai/o3","choices":[{"index":0,"delta":{"content":"Done"},"finish_reason":"stop"}]}`
    )
    const message = doneOf(run(encrypted)).message
    expect(message.content.map((block) => block.type)).toEqual(["thinking", "text"])
    const sent = bodyJson([message], { compat: { replayReasoning: "always" } })
    expect(sent.messages[0]).toMatchObject({ content: "Done", reasoning_details: [{ type: "reasoning.encrypted", data: "gAAAA==", id: "rs_1", index: 0, format: "openai-responses-v1" }] })
  })

  it("Mistral's typed thinking is not sent back as a field", () => {
    const message: AssistantMessage = {
      role: "assistant",
      content: [{ type: "thinking", thinking: "hm", signature: "content" }, { type: "toolCall", id: "c", name: "read", arguments: "{}" }],
      api: "openai-chat",
      provider: "test",
      model: "m",
      usage: emptyUsage,
      stopReason: "toolUse"
    }
    const sent = bodyJson([message], { baseUrl: "https://api.mistral.ai/v1" })
    expect(Object.keys(sent.messages[0]!).sort()).toEqual(["content", "role", "tool_calls"])
  })
})
