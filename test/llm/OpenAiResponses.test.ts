import { describe, expect, it } from "@effect/vitest"
import * as OpenAiResponses from "../../src/llm/OpenAiResponses.js"
import { chunkSizes, doneOf, fixture, replay } from "./replay.js"

const meta = { api: "openai-responses", provider: "test", model: "gpt-r" }
const run = (name: string, chunkSize?: number) => replay(OpenAiResponses.makeMachine, meta, fixture("openai-responses", name), chunkSize)

describe("OpenAiResponses state machine", () => {
  it("text: output_text deltas, unknown keepalive ignored, usage from response.completed", () => {
    for (const size of chunkSizes) {
      const result = run("text.sse", size)
      expect(result.events).toEqual([
        { _tag: "Start", model: "gpt-r", responseId: "resp_1" },
        { _tag: "TextStart", index: 0 },
        { _tag: "TextDelta", index: 0, delta: "Hello" },
        { _tag: "TextDelta", index: 0, delta: " world" },
        { _tag: "TextEnd", index: 0 },
        {
          _tag: "Done",
          reason: "stop",
          message: {
            role: "assistant",
            content: [{ type: "text", text: "Hello world", signature: "{\"id\":\"msg_1\",\"v\":1}" }],
            api: "openai-responses",
            provider: "test",
            model: "gpt-r",
            responseId: "resp_1",
            usage: { input: 60, output: 9, cacheRead: 40, cacheWrite: 0, reasoning: 0 },
            stopReason: "stop"
          }
        }
      ])
    }
  })

  it("reasoning summaries stream as thinking; the whole encrypted item becomes the signature", () => {
    const result = run("thinking.sse")
    expect(result.events.slice(0, 6)).toEqual([
      { _tag: "Start", model: "gpt-r", responseId: "resp_2" },
      { _tag: "ThinkingStart", index: 0 },
      { _tag: "ThinkingDelta", index: 0, delta: "Plan A." },
      { _tag: "ThinkingDelta", index: 0, delta: "\n\n" },
      { _tag: "ThinkingDelta", index: 0, delta: "Plan B." },
      expect.objectContaining({ _tag: "ThinkingEnd", index: 0 })
    ])
    const done = doneOf(result)
    const thinking = done.message.content[0]
    expect(thinking?.type === "thinking" && JSON.parse(thinking.signature ?? "{}")).toMatchObject({ type: "reasoning", id: "rs_1", encrypted_content: "ENC123" })
    expect(done.message.usage).toEqual({ input: 10, output: 50, cacheRead: 0, cacheWrite: 0, reasoning: 45 })
  })

  it("parallel function calls: arguments per item_id, ids are call_id|item_id, reason toolUse", () => {
    const result = run("parallel-tools.sse", 13)
    expect(result.events.slice(1, -1)).toEqual([
      { _tag: "ToolCallStart", index: 0, id: "call_1|fc_1", name: "read" },
      { _tag: "ToolCallStart", index: 1, id: "call_2|fc_2", name: "list" },
      { _tag: "ToolCallDelta", index: 0, delta: "{\"path\":" },
      { _tag: "ToolCallDelta", index: 1, delta: "{}" },
      { _tag: "ToolCallDelta", index: 0, delta: "\"a.ts\"}" },
      { _tag: "ToolCallEnd", index: 0, toolCall: { type: "toolCall", id: "call_1|fc_1", name: "read", arguments: "{\"path\":\"a.ts\"}" } },
      { _tag: "ToolCallEnd", index: 1, toolCall: { type: "toolCall", id: "call_2|fc_2", name: "list", arguments: "{}" } }
    ])
    expect(doneOf(result).reason).toBe("toolUse")
  })

  it("response.incomplete with max_output_tokens is a length stop", () => {
    const done = doneOf(run("length.sse"))
    expect(done.reason).toBe("length")
    expect(done.message.content).toEqual([{ type: "text", text: "Cut sh" }])
  })

  it("an error event (fields under `error`) ends the stream before response.failed", () => {
    const result = run("midstream-error.sse")
    expect(result.events.map((event) => event._tag)).toEqual(["Start", "TextStart", "TextDelta"])
    expect(result.error?.reason).toBe("providerError")
    expect(result.error?.message).toContain("The server had an error")
  })

  it("malformed JSON is a malformedStream error", () => {
    expect(run("malformed.sse").error?.reason).toBe("malformedStream")
  })

  it("a stream cut off before response.completed is an error", () => {
    const result = run("cut-off.sse")
    expect(result.events.map((event) => event._tag)).toEqual(["Start", "TextStart", "TextDelta"])
    expect(result.error?.reason).toBe("network")
  })
})
