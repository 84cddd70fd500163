import { describe, expect, it } from "@effect/vitest"
import { classifyHttpError } from "../../src/llm/Common.js"
import * as Gemini from "../../src/llm/Gemini.js"
import { chunkSizes, doneOf, fixture, replay } from "./replay.js"

const meta = { api: "gemini", provider: "test", model: "gemini-x" }
const run = (name: string, chunkSize?: number) => replay(Gemini.makeMachine, meta, fixture("gemini", name), chunkSize)

describe("Gemini state machine", () => {
  it("text over CRLF framing: the last usageMetadata wins and cached tokens are not counted as input", () => {
    for (const size of chunkSizes) {
      const result = run("text.sse", size)
      expect(result.events).toEqual([
        { _tag: "Start", model: "gemini-x", responseId: "r1" },
        { _tag: "TextStart", index: 0 },
        { _tag: "TextDelta", index: 0, delta: "The capital" },
        { _tag: "TextDelta", index: 0, delta: " is Paris." },
        { _tag: "TextEnd", index: 0 },
        {
          _tag: "Done",
          reason: "stop",
          message: {
            role: "assistant",
            content: [{ type: "text", text: "The capital is Paris." }],
            api: "gemini",
            provider: "test",
            model: "gemini-x",
            responseId: "r1",
            usage: { input: 10, output: 6, cacheRead: 30, cacheWrite: 0, reasoning: 0 },
            stopReason: "stop"
          }
        }
      ])
    }
  })

  it("thought parts are thinking; a signature on an empty final part stays on the text block", () => {
    const result = run("thinking.sse", 11)
    expect(result.events.slice(0, -1)).toEqual([
      { _tag: "Start", model: "gemini-x", responseId: "r2" },
      { _tag: "ThinkingStart", index: 0 },
      { _tag: "ThinkingDelta", index: 0, delta: "Considering" },
      { _tag: "ThinkingDelta", index: 0, delta: " options." },
      { _tag: "ThinkingEnd", index: 0 },
      { _tag: "TextStart", index: 1 },
      { _tag: "TextDelta", index: 1, delta: "Three." },
      { _tag: "TextEnd", index: 1 }
    ])
    const done = doneOf(result)
    expect(done.message.content).toEqual([
      { type: "thinking", thinking: "Considering options." },
      { type: "text", text: "Three.", signature: "c2lnLWc=" }
    ])
    expect(done.message.usage).toEqual({ input: 9, output: 23, cacheRead: 0, cacheWrite: 0, reasoning: 20 })
  })

  it("whole functionCall parts: start, one delta, end; thoughtSignature kept in extras; STOP with calls is toolUse", () => {
    const result = run("parallel-tools.sse")
    expect(result.events.slice(1, -1)).toEqual([
      { _tag: "ToolCallStart", index: 0, id: "gemini_call_0", name: "read" },
      { _tag: "ToolCallDelta", index: 0, delta: "{\"path\":\"a.ts\"}" },
      {
        _tag: "ToolCallEnd",
        index: 0,
        toolCall: { type: "toolCall", id: "gemini_call_0", name: "read", arguments: "{\"path\":\"a.ts\"}", extras: { thoughtSignature: "c2lnLTE=" } }
      },
      { _tag: "ToolCallStart", index: 1, id: "gemini_call_1", name: "list" },
      { _tag: "ToolCallDelta", index: 1, delta: "{}" },
      { _tag: "ToolCallEnd", index: 1, toolCall: { type: "toolCall", id: "gemini_call_1", name: "list", arguments: "{}" } }
    ])
    expect(doneOf(result).reason).toBe("toolUse")
  })

  it("MAX_TOKENS maps to length", () => {
    const done = doneOf(run("length.sse"))
    expect(done.reason).toBe("length")
    expect(done.message.content).toEqual([{ type: "text", text: "Long answ" }])
  })

  it("an error object mid-stream ends with a typed error", () => {
    const result = run("midstream-error.sse")
    expect(result.events.map((event) => event._tag)).toEqual(["Start", "TextStart", "TextDelta"])
    expect(result.error?.reason).toBe("providerError")
    expect(result.error?.retryable).toBe(true)
  })

  it("malformed JSON is a malformedStream error", () => {
    const result = run("malformed.sse")
    expect(result.error?.reason).toBe("malformedStream")
  })

  it("a stream that ends without a finishReason is an error", () => {
    const result = run("cut-off.sse")
    expect(result.events.map((event) => event._tag)).toEqual(["Start", "TextStart", "TextDelta"])
    expect(result.error?.reason).toBe("network")
  })

  it("finishReason SAFETY is an error", () => {
    expect(run("safety.sse").error?.reason).toBe("providerError")
  })

  it("a 429 RESOURCE_EXHAUSTED body is rateLimited with RetryInfo's delay", () => {
    const body = new TextDecoder().decode(fixture("gemini", "429.json"))
    expect(classifyHttpError("gemini", 429, {}, body, 0)).toMatchObject({ reason: "rateLimited", retryable: true, status: 429, retryAfterMs: 50 })
  })
})
