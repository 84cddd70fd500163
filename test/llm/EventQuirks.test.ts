/**
 * Anthropic and Gemini streams with what the adapters must let pass: event types and block
 * kinds they do not read (in any shape), null where an object is expected, ids that repeat.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Anthropic from "../../src/llm/Anthropic.js"
import * as Gemini from "../../src/llm/Gemini.js"
import { chunkSizes, doneOf, replay } from "./replay.js"

/** Named events (`event:` equals the JSON `type`), as Anthropic sends them. */
const named = (...events: Array<string>) =>
  events.map((data) => `event: ${(JSON.parse(data) as { type: string }).type}\ndata: ${data}\n\n`).join("")
const dataOnly = (...chunks: Array<string>) => chunks.map((data) => `data: ${data}\r\n\r\n`).join("")

describe("Anthropic: events to ignore", () => {
  // llm-providers.md §5.3: a schema that fails on a new event type fails the stream; ignore any type not read.
  const body = named(
    `{"type":"message_start","message":{"id":"msg_q","type":"message","role":"assistant","model":"claude-x","content":[],"stop_reason":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":null,"cache_read_input_tokens":100,"output_tokens":1,"server_tool_use":null}}}`,
    `{"type":"ping"}`,
    `{"type":"message_annotation","index":"not a number","delta":"a string where an object would be"}`,
    `{"type":"content_block_start","index":0,"content_block":{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}}`,
    `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\\"query\\":\\"x\\"}"}}`,
    `{"type":"content_block_stop","index":0}`,
    `{"type":"content_block_start","index":1,"content_block":{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[{"type":"web_search_result","url":"https://a.test","title":"A"}]}}`,
    `{"type":"content_block_stop","index":1}`,
    `{"type":"content_block_start","index":2,"content_block":{"type":"text","text":"","citations":null}}`,
    `{"type":"content_block_delta","index":2,"delta":{"type":"citations_delta","citation":{"type":"web_search_result_location","url":"https://a.test","cited_text":"x"}}}`,
    `{"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"Found it."}}`,
    `{"type":"content_block_delta","index":2,"delta":null}`,
    `{"type":"content_block_stop","index":2}`,
    `{"type":"content_block_start","index":3,"content_block":null}`,
    `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":9,"input_tokens":null}}`,
    `{"type":"message_stop","amazon-bedrock-invocationMetrics":{"inputTokenCount":12}}`
  )

  it("unknown event types, server-tool blocks, citations and nulls pass; only the model's own text is kept", () => {
    for (const size of chunkSizes) {
      const result = replay(Anthropic.makeMachine, { api: "anthropic", provider: "test", model: "claude-x" }, body, size)
      const done = doneOf(result)
      expect(done.message.content).toEqual([{ type: "text", text: "Found it." }])
      expect(done.message.usage).toEqual({ input: 12, output: 9, cacheRead: 100, cacheWrite: 0, reasoning: 0 })
    }
  })

  it("a known event of the wrong shape is still malformed", () => {
    const wrong = named(`{"type":"message_start","message":"not an object"}`)
    expect(replay(Anthropic.makeMachine, { api: "anthropic", provider: "test", model: "claude-x" }, wrong).error?.reason).toBe("malformedStream")
  })
})

describe("Gemini: shapes to let pass", () => {
  const meta = { api: "gemini", provider: "test", model: "gemini-3-pro" }

  // llm-providers.md §2.4: function-call ids are often missing; pi-ai also replaces duplicates.
  it("a repeated function-call id is replaced, so each result can be matched to its call", () => {
    const body = dataOnly(
      `{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"read","args":{"path":"a"},"id":"fc_1"},"thoughtSignature":"c2ln"}]}}],"modelVersion":"gemini-3-pro"}`,
      `{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"read","args":{"path":"b"},"id":"fc_1"}}]}}],"modelVersion":"gemini-3-pro"}`,
      `{"candidates":[{"content":{"role":"model","parts":[{"text":""}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":20,"candidatesTokenCount":10,"totalTokenCount":30}}`
    )
    const ids = doneOf(replay(Gemini.makeMachine, meta, body)).message.content.map((block) => block.type === "toolCall" && block.id)
    expect(ids).toEqual(["fc_1", `${Gemini.generatedIdPrefix}1`])
  })

  it("null where an object is expected, and parts of kinds not read (code execution, inline data), are ignored", () => {
    const body = dataOnly(
      `{"candidates":null,"usageMetadata":null,"promptFeedback":null,"modelVersion":null,"responseId":null}`,
      `{"candidates":[{"content":null,"finishReason":null,"safetyRatings":null}],"responseId":"r1"}`,
      `{"candidates":[{"content":{"role":"model","parts":null}}]}`,
      `{"candidates":[{"content":{"role":"model","parts":[{"executableCode":{"language":"PYTHON","code":"print(1)"}},{"codeExecutionResult":{"outcome":"OUTCOME_OK","output":"1"}},{"inlineData":{"mimeType":"image/png","data":"AAAA"}},{"text":null,"functionCall":null,"thought":null,"thoughtSignature":null},{"text":"One."}]}}]}`,
      `{"candidates":[{"content":{"role":"model","parts":[{"text":""}]},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":2,"thoughtsTokenCount":null,"cachedContentTokenCount":null}}`
    )
    for (const size of chunkSizes) {
      const result = replay(Gemini.makeMachine, meta, body, size)
      const done = doneOf(result)
      expect(result.events[0]).toEqual({ _tag: "Start", responseId: "r1" })
      expect(done.message.content).toEqual([{ type: "text", text: "One." }])
      expect(done.message.usage).toEqual({ input: 5, output: 2, cacheRead: 0, cacheWrite: 0, reasoning: 0 })
    }
  })
})
