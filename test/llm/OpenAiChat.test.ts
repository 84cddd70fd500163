import { describe, expect, it } from "@effect/vitest"
import * as OpenAiChat from "../../src/llm/OpenAiChat.js"
import { chunkSizes, doneOf, fixture, replay } from "./replay.js"

const meta = { api: "openai-chat", provider: "test", model: "gpt-x" }
const run = (name: string, chunkSize?: number) => replay(OpenAiChat.makeMachine, meta, fixture("openai-chat", name), chunkSize)

describe("OpenAiChat state machine", () => {
  it("text: comment lines are skipped, usage comes from the trailing choices:[] chunk, cached tokens counted once", () => {
    for (const size of chunkSizes) {
      const result = run("text.sse", size)
      expect(result.error).toBeUndefined()
      expect(result.events).toEqual([
        { _tag: "Start", model: "gpt-x", responseId: "c1" },
        { _tag: "TextStart", index: 0 },
        { _tag: "TextDelta", index: 0, delta: "Hel" },
        { _tag: "TextDelta", index: 0, delta: "lo ✓" },
        { _tag: "TextEnd", index: 0 },
        {
          _tag: "Done",
          reason: "stop",
          message: {
            role: "assistant",
            content: [{ type: "text", text: "Hello ✓" }],
            api: "openai-chat",
            provider: "test",
            model: "gpt-x",
            responseId: "c1",
            usage: { input: 40, output: 5, cacheRead: 60, cacheWrite: 0, reasoning: 0 },
            stopReason: "stop"
          }
        }
      ])
    }
  })

  it("thinking: reasoning_content becomes a thinking block signed with its field name; DeepSeek hit tokens counted once", () => {
    const result = run("thinking.sse", 5)
    expect(result.events.map((event) => event._tag)).toEqual([
      "Start", "ThinkingStart", "ThinkingDelta", "ThinkingDelta", "ThinkingEnd", "TextStart", "TextDelta", "TextEnd", "Done"
    ])
    expect(result.events[4]).toEqual({ _tag: "ThinkingEnd", index: 0, signature: "reasoning_content" })
    const done = doneOf(result)
    expect(done.message.content).toEqual([
      { type: "thinking", thinking: "Let me think.", signature: "reasoning_content" },
      { type: "text", text: "Answer" }
    ])
    expect(done.message.usage).toEqual({ input: 18, output: 20, cacheRead: 32, cacheWrite: 0, reasoning: 12 })
  })

  it("parallel tool calls are keyed by index (starting at 1, interleaved), usage read from choices[0].usage", () => {
    for (const size of chunkSizes) {
      const result = run("parallel-tools.sse", size)
      expect(result.events).toEqual([
        { _tag: "Start", model: "m", responseId: "c3" },
        { _tag: "ToolCallStart", index: 0, id: "call_a", name: "read" },
        { _tag: "ToolCallStart", index: 1, id: "call_b", name: "grep" },
        { _tag: "ToolCallDelta", index: 1, delta: "{\"q\":" },
        { _tag: "ToolCallDelta", index: 0, delta: "{\"path\":\"a.ts\"}" },
        { _tag: "ToolCallDelta", index: 1, delta: "\"x\"}" },
        { _tag: "ToolCallEnd", index: 0, toolCall: { type: "toolCall", id: "call_a", name: "read", arguments: "{\"path\":\"a.ts\"}" } },
        { _tag: "ToolCallEnd", index: 1, toolCall: { type: "toolCall", id: "call_b", name: "grep", arguments: "{\"q\":\"x\"}" } },
        {
          _tag: "Done",
          reason: "toolUse",
          message: {
            role: "assistant",
            content: [
              { type: "toolCall", id: "call_a", name: "read", arguments: "{\"path\":\"a.ts\"}" },
              { type: "toolCall", id: "call_b", name: "grep", arguments: "{\"q\":\"x\"}" }
            ],
            api: "openai-chat",
            provider: "test",
            model: "gpt-x",
            responseId: "c3",
            usage: { input: 10, output: 7, cacheRead: 0, cacheWrite: 0, reasoning: 0 },
            stopReason: "toolUse"
          }
        }
      ])
    }
  })

  it("a length stop maps to length with the partial text", () => {
    const done = doneOf(run("length.sse"))
    expect(done.reason).toBe("length")
    expect(done.message.content).toEqual([{ type: "text", text: "Once upon" }])
    expect(done.message.usage).toEqual({ input: 3, output: 2, cacheRead: 0, cacheWrite: 0, reasoning: 0 })
  })

  it("a named `event: error` mid-stream ends the stream with a typed error after the text already emitted", () => {
    const result = run("midstream-error.sse")
    expect(result.events).toEqual([
      { _tag: "Start", model: "m", responseId: "c5" },
      { _tag: "TextStart", index: 0 },
      { _tag: "TextDelta", index: 0, delta: "Par" }
    ])
    expect(result.error?.reason).toBe("overloaded")
    expect(result.error?.retryable).toBe(true)
    expect(result.error?.message).toContain("The server is overloaded")
  })

  it("malformed JSON in a data line is a malformedStream error, never a silent skip", () => {
    const result = run("malformed.sse")
    expect(result.events.map((event) => event._tag)).toEqual(["Start", "TextStart", "TextDelta"])
    expect(result.error?.reason).toBe("malformedStream")
  })

  it("a stream cut off without a finish_reason is an error, not a Done", () => {
    const result = run("cut-off.sse")
    expect(result.events.map((event) => event._tag)).toEqual(["Start", "TextStart", "TextDelta"])
    expect(result.error?.reason).toBe("network")
    expect(result.error?.message).toContain("ended before")
  })

  it("tool arguments that are not valid JSON at the end of the call are reported", () => {
    const result = run("bad-tool-json.sse")
    expect(result.events.some((event) => event._tag === "Done")).toBe(false)
    expect(result.error?.reason).toBe("malformedStream")
    expect(result.error?.message).toContain("call_z")
  })

  it("an in-band error object next to choices is an error", () => {
    const body = `data: {"id":"x","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"length"}]}\n\ndata: {"id":"x","error":{"code":400,"message":"Token limit reached"},"choices":[]}\n\ndata: [DONE]\n\n`
    const result = replay(OpenAiChat.makeMachine, meta, body)
    expect(result.error?.reason).toBe("badRequest")
    expect(result.error?.message).toContain("Token limit reached")
  })

  it("finish_reason content_filter is an error; insufficient_system_resource is a retryable one", () => {
    const make = (reason: string) => `data: {"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"${reason}"}]}\n\ndata: [DONE]\n\n`
    expect(replay(OpenAiChat.makeMachine, meta, make("content_filter")).error?.retryable).toBe(false)
    expect(replay(OpenAiChat.makeMachine, meta, make("insufficient_system_resource")).error?.retryable).toBe(true)
  })
})

describe("OpenAiChat compat table", () => {
  it("picks vendor defaults by host and lets configuration override them", () => {
    expect(OpenAiChat.resolveCompat("https://api.deepseek.com/v1", {}).maxTokensField).toBe("max_tokens")
    expect(OpenAiChat.resolveCompat("https://api.openai.com/v1", {}).maxTokensField).toBe("max_completion_tokens")
    expect(OpenAiChat.resolveCompat("https://api.groq.com/openai/v1", {}).replayReasoning).toBe("never")
    expect(OpenAiChat.resolveCompat("https://api.deepseek.com/v1", { replayReasoning: "never" }).replayReasoning).toBe("never")
    expect(OpenAiChat.resolveCompat("http://localhost:8000/v1", { includeUsage: false }).includeUsage).toBe(false)
  })
})
