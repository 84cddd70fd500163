/**
 * The Responses API as servers other than OpenAI's send it: ids that rotate per event (GitHub
 * Copilot), event types we do not read in any shape, null where an object is expected.
 */
import { describe, expect, it } from "@effect/vitest"
import * as OpenAiResponses from "../../src/llm/OpenAiResponses.js"
import { chunkSizes, doneOf, replay } from "./replay.js"

const meta = { api: "openai-responses", provider: "test", model: "gpt-r" }
/** Named events, as the Responses API sends them (`event:` equals the JSON `type`). */
const stream = (...events: Array<string>) =>
  events.map((data) => `event: ${(JSON.parse(data) as { type: string }).type}\ndata: ${data}\n\n`).join("")
const run = (body: string, chunkSize?: number) => replay(OpenAiResponses.makeMachine, meta, body, chunkSize)

const created = `{"type":"response.created","sequence_number":0,"response":{"id":"resp_c","model":"gpt-5-mini","status":"in_progress"}}`
const completed = `{"type":"response.completed","response":{"id":"resp_c","status":"completed","usage":{"input_tokens":30,"input_tokens_details":{"cached_tokens":10},"output_tokens":12,"output_tokens_details":{"reasoning_tokens":4},"total_tokens":42}}}`

describe("Responses: blocks are keyed by output_index", () => {
  // GitHub Copilot's Responses endpoint gives each event of one output item a new item_id.
  const copilot = stream(
    created,
    `{"type":"response.output_item.added","output_index":0,"item":{"id":"rs_1a","type":"reasoning","summary":[]}}`,
    `{"type":"response.reasoning_summary_text.delta","item_id":"rs_1b","output_index":0,"summary_index":0,"delta":"Look"}`,
    `{"type":"response.reasoning_summary_text.delta","item_id":"rs_1c","output_index":0,"summary_index":0,"delta":" first."}`,
    `{"type":"response.output_item.done","output_index":0,"item":{"id":"rs_1d","type":"reasoning","summary":[{"type":"summary_text","text":"Look first."}],"encrypted_content":"ENC"}}`,
    `{"type":"response.output_item.added","output_index":1,"item":{"id":"msg_2a","type":"message","role":"assistant","content":[]}}`,
    `{"type":"response.content_part.added","item_id":"msg_2b","output_index":1,"content_index":0,"part":{"type":"output_text","text":""}}`,
    `{"type":"response.output_text.delta","item_id":"msg_2c","output_index":1,"content_index":0,"delta":"Hel"}`,
    `{"type":"response.output_text.delta","item_id":"msg_2d","output_index":1,"content_index":0,"delta":"lo"}`,
    `{"type":"response.output_text.done","item_id":"msg_2e","output_index":1,"content_index":0,"text":"Hello"}`,
    `{"type":"response.output_item.done","output_index":1,"item":{"id":"msg_2f","type":"message","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Hello","annotations":[]}]}}`,
    `{"type":"response.output_item.added","output_index":2,"item":{"id":"fc_3a","type":"function_call","call_id":"call_1","name":"read","arguments":""}}`,
    `{"type":"response.function_call_arguments.delta","item_id":"fc_3b","output_index":2,"delta":"{\\"path\\":"}`,
    `{"type":"response.function_call_arguments.delta","item_id":"fc_3c","output_index":2,"delta":"\\"a\\"}"}`,
    `{"type":"response.function_call_arguments.done","item_id":"fc_3d","output_index":2,"arguments":"{\\"path\\":\\"a\\"}"}`,
    `{"type":"response.output_item.done","output_index":2,"item":{"id":"fc_3e","type":"function_call","call_id":"call_1","name":"read","arguments":"{\\"path\\":\\"a\\"}","status":"completed"}}`,
    completed
  )

  it("GitHub Copilot: rotating item_ids give one block per item; the text is committed once; argument deltas are kept", () => {
    for (const size of chunkSizes) {
      const result = run(copilot, size)
      const done = doneOf(result)
      expect(done.reason).toBe("toolUse")
      expect(done.message.content).toEqual([
        { type: "thinking", thinking: "Look first.", signature: expect.stringContaining("\"encrypted_content\":\"ENC\"") },
        { type: "text", text: "Hello", signature: "{\"id\":\"msg_2f\",\"v\":1}" },
        { type: "toolCall", id: "call_1|fc_3a", name: "read", arguments: "{\"path\":\"a\"}" }
      ])
      expect(result.events.filter((event) => event._tag === "TextStart")).toHaveLength(1)
      expect(result.events.flatMap((event) => (event._tag === "TextDelta" ? [event.delta] : [])).join("")).toBe("Hello")
      expect(done.message.usage).toEqual({ input: 20, output: 12, cacheRead: 10, cacheWrite: 0, reasoning: 4 })
    }
  })

  it("without output_index, item ids still key the blocks (interleaved calls)", () => {
    const body = stream(
      created,
      `{"type":"response.output_item.added","item":{"id":"fc_1","type":"function_call","call_id":"call_1","name":"read","arguments":""}}`,
      `{"type":"response.output_item.added","item":{"id":"fc_2","type":"function_call","call_id":"call_2","name":"list","arguments":""}}`,
      `{"type":"response.function_call_arguments.delta","item_id":"fc_2","delta":"{}"}`,
      `{"type":"response.function_call_arguments.delta","item_id":"fc_1","delta":"{\\"path\\":\\"b\\"}"}`,
      `{"type":"response.output_item.done","item":{"id":"fc_1","type":"function_call","call_id":"call_1","name":"read","arguments":"{\\"path\\":\\"b\\"}"}}`,
      `{"type":"response.output_item.done","item":{"id":"fc_2","type":"function_call","call_id":"call_2","name":"list","arguments":"{}"}}`,
      completed
    )
    expect(doneOf(run(body)).message.content).toEqual([
      { type: "toolCall", id: "call_1|fc_1", name: "read", arguments: "{\"path\":\"b\"}" },
      { type: "toolCall", id: "call_2|fc_2", name: "list", arguments: "{}" }
    ])
  })

  it("what the done item holds beyond the streamed deltas is added, once", () => {
    const body = stream(
      created,
      `{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"delta":"Hel"}`,
      `{"type":"response.output_item.done","output_index":0,"item":{"id":"msg_1","type":"message","content":[{"type":"output_text","text":"Hello"}]}}`,
      completed
    )
    const result = run(body)
    expect(doneOf(result).message.content).toEqual([{ type: "text", text: "Hello", signature: "{\"id\":\"msg_1\",\"v\":1}" }])
    expect(result.events.flatMap((event) => (event._tag === "TextDelta" ? [event.delta] : []))).toEqual(["Hel", "lo"])
  })
})

describe("Responses: events to ignore", () => {
  it("an unknown event type is ignored whatever its shape (object delta, no item, null fields)", () => {
    const body = stream(
      created,
      `{"type":"response.shell_call_output_content.delta","item_id":"sh_1","output_index":0,"delta":{"stdout":"ok\\n","stderr":""}}`,
      `{"type":"keepalive","sequence_number":3}`,
      `{"type":"response.mcp_call.in_progress","output_index":0,"item":null,"delta":[1,2],"response":"not an object"}`,
      `{"type":"response.output_text.annotation.added","item_id":"msg_1","output_index":1,"annotation":{"type":"url_citation","url":"https://a.test"}}`,
      `{"type":"response.output_text.delta","item_id":"msg_1","output_index":1,"content_index":0,"delta":"ok","logprobs":[],"obfuscation":{"x":1}}`,
      `{"type":"response.output_item.added","output_index":2,"item":null}`,
      `{"type":"response.output_item.done","output_index":1,"item":{"id":"msg_1","type":"message","content":null}}`,
      completed
    )
    for (const size of chunkSizes) {
      const result = run(body, size)
      expect(result.error).toBeUndefined()
      expect(doneOf(result).message.content).toEqual([{ type: "text", text: "ok", signature: "{\"id\":\"msg_1\",\"v\":1}" }])
    }
  })

  it("a known event of the wrong shape, and data that is not JSON, are still malformed", () => {
    const wrong = stream(created, `{"type":"response.output_text.delta","item_id":"m","output_index":0,"delta":{"text":"x"}}`, completed)
    expect(run(wrong).error?.reason).toBe("malformedStream")
    expect(run(`event: response.created\ndata: {"type":\n\n`).error?.reason).toBe("malformedStream")
  })
})
