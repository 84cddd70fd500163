import { describe, expect, it } from "@effect/vitest"
import * as Anthropic from "../../src/llm/Anthropic.js"
import { chunkSizes, doneOf, fixture, replay } from "./replay.js"

const meta = { api: "anthropic", provider: "test", model: "claude-x" }
const run = (name: string, chunkSize?: number) => replay(Anthropic.makeMachine, meta, fixture("anthropic", name), chunkSize)

describe("Anthropic state machine", () => {
  it("text: padded JSON and ping are accepted; cumulative message_delta usage overwrites, cache read/write kept apart", () => {
    for (const size of chunkSizes) {
      const result = run("text.sse", size)
      expect(result.events).toEqual([
        { _tag: "Start", model: "claude-x", responseId: "msg_1" },
        { _tag: "TextStart", index: 0 },
        { _tag: "TextDelta", index: 0, delta: "Hi " },
        { _tag: "TextDelta", index: 0, delta: "there" },
        { _tag: "TextEnd", index: 0 },
        {
          _tag: "Done",
          reason: "stop",
          message: {
            role: "assistant",
            content: [{ type: "text", text: "Hi there" }],
            api: "anthropic",
            provider: "test",
            model: "claude-x",
            responseId: "msg_1",
            usage: { input: 10, output: 12, cacheRead: 1000, cacheWrite: 200, reasoning: 0 },
            stopReason: "stop"
          }
        }
      ])
    }
  })

  it("thinking keeps its signature_delta; redacted_thinking keeps its data as a redacted signature", () => {
    const result = run("thinking.sse", 9)
    expect(result.events).toEqual([
      { _tag: "Start", model: "claude-x", responseId: "msg_2" },
      { _tag: "ThinkingStart", index: 0 },
      { _tag: "ThinkingDelta", index: 0, delta: "Hmm, " },
      { _tag: "ThinkingDelta", index: 0, delta: "ok." },
      { _tag: "ThinkingEnd", index: 0, signature: "c2lnLTE=" },
      { _tag: "ThinkingStart", index: 1 },
      { _tag: "ThinkingEnd", index: 1, signature: "ZW5jcnlwdGVk", redacted: true },
      { _tag: "TextStart", index: 2 },
      { _tag: "TextDelta", index: 2, delta: "Done." },
      { _tag: "TextEnd", index: 2 },
      result.events[10]!
    ])
    expect(doneOf(result).message.content).toEqual([
      { type: "thinking", thinking: "Hmm, ok.", signature: "c2lnLTE=" },
      { type: "thinking", thinking: "", signature: "ZW5jcnlwdGVk", redacted: true },
      { type: "text", text: "Done." }
    ])
  })

  it("parallel tool_use blocks: split input_json_delta is concatenated, an empty one becomes {}", () => {
    for (const size of chunkSizes) {
      const result = run("parallel-tools.sse", size)
      expect(result.events.slice(1, -1)).toEqual([
        { _tag: "ToolCallStart", index: 0, id: "toolu_a", name: "read" },
        { _tag: "ToolCallDelta", index: 0, delta: "{\"path\":" },
        { _tag: "ToolCallDelta", index: 0, delta: "\"a.ts\"}" },
        { _tag: "ToolCallEnd", index: 0, toolCall: { type: "toolCall", id: "toolu_a", name: "read", arguments: "{\"path\":\"a.ts\"}" } },
        { _tag: "ToolCallStart", index: 1, id: "toolu_b", name: "list" },
        { _tag: "ToolCallEnd", index: 1, toolCall: { type: "toolCall", id: "toolu_b", name: "list", arguments: "{}" } }
      ])
      const done = doneOf(result)
      expect(done.reason).toBe("toolUse")
      expect(done.message.usage).toEqual({ input: 20, output: 40, cacheRead: 0, cacheWrite: 0, reasoning: 0 })
    }
  })

  it("max_tokens maps to length", () => {
    const done = doneOf(run("length.sse"))
    expect(done.reason).toBe("length")
    expect(done.message.content).toEqual([{ type: "text", text: "A very long" }])
  })

  it("a mid-stream overloaded_error ends with a retryable overloaded error", () => {
    const result = run("midstream-error.sse")
    expect(result.events.map((event) => event._tag)).toEqual(["Start", "TextStart", "TextDelta"])
    expect(result.error?.reason).toBe("overloaded")
    expect(result.error?.retryable).toBe(true)
  })

  it("malformed JSON is a malformedStream error", () => {
    const result = run("malformed.sse")
    expect(result.events.map((event) => event._tag)).toEqual(["Start", "TextStart"])
    expect(result.error?.reason).toBe("malformedStream")
  })

  it("a stream cut off before message_stop is an error", () => {
    const result = run("cut-off.sse")
    expect(result.events.map((event) => event._tag)).toEqual(["Start", "TextStart", "TextDelta"])
    expect(result.error?.reason).toBe("network")
  })

  it("stop_reason refusal is an error", () => {
    const body = [
      `event: message_start\ndata: {"type":"message_start","message":{"id":"m","usage":{"input_tokens":1}}}\n\n`,
      `event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"refusal"}}\n\n`,
      `event: message_stop\ndata: {"type":"message_stop"}\n\n`
    ].join("")
    expect(replay(Anthropic.makeMachine, meta, body).error?.reason).toBe("providerError")
  })

  it("an overloaded_error right after message_start leaves only Start emitted (the shell may retry it)", () => {
    const result = run("overloaded-before-content.sse")
    expect(result.events).toEqual([{ _tag: "Start", model: "claude-x", responseId: "msg_8" }])
    expect(result.error).toMatchObject({ reason: "overloaded", retryable: true })
  })
})
