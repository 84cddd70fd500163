/**
 * Replays every real provider recording in `../shared/llm-fixtures` (read in place, never copied)
 * through the matching adapter, and checks the final message against the recording itself: a
 * deliberately naive reading of the raw events (the "oracle") gives the concatenated text,
 * thinking and tool arguments, the stop reason and the usage as llm-providers.md maps them.
 * Per-file expectations from INDEX.md pin the cases each recording was chosen for.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { describe, expect, it } from "@effect/vitest"
import type { AssistantMessage, LlmError, ResponseEvent, StopReason, Usage } from "../../src/Llm.js"
import * as Anthropic from "../../src/llm/Anthropic.js"
import { classifyHttpError, type Machine, type StreamMeta } from "../../src/llm/Common.js"
import * as Gemini from "../../src/llm/Gemini.js"
import * as OpenAiChat from "../../src/llm/OpenAiChat.js"
import * as OpenAiResponses from "../../src/llm/OpenAiResponses.js"
import { replay } from "../llm/replay.js"

const root = fileURLToPath(new URL("../../../shared/llm-fixtures/", import.meta.url))
const available = existsSync(root)

type Folder = "openai-chat" | "anthropic" | "google" | "openai-responses"
const machines: Record<Folder, (meta: StreamMeta) => Machine> = {
  "openai-chat": OpenAiChat.makeMachine,
  anthropic: Anthropic.makeMachine,
  google: Gemini.makeMachine,
  "openai-responses": OpenAiResponses.makeMachine
}

/** What the oracle reads out of the raw events. */
interface Expected {
  text: string
  thinking: string
  tools: Array<{ name: string; args: string }>
  stop: StopReason | "error" | undefined
  usage: Usage | undefined
}

const emptyExpected = (): Expected => ({ text: "", thinking: "", tools: [], stop: undefined, usage: undefined })

/** The JSON payloads of a body, read the simplest possible way (independent of src/llm/Sse.ts). */
const payloads = (body: string): Array<{ name: string | undefined; json: any }> =>
  body.split(/\r\n\r\n|\n\n/).flatMap((block) => {
    const lines = block.split(/\r?\n/)
    const name = lines.find((line) => line.startsWith("event:"))?.slice(6).trim()
    const data = lines.filter((line) => line.startsWith("data:")).map((line) => line.slice(5).trimStart()).join("\n")
    if (data.length === 0 || data === "[DONE]") return []
    return [{ name, json: JSON.parse(data) }]
  })

const oracles: Record<Folder, (body: string) => Expected> = {
  "openai-chat": (body) => {
    const out = emptyExpected()
    const calls = new Map<number, { name: string; args: string }>()
    for (const { name, json } of payloads(body)) {
      if (name === "error" || json.error) out.stop = "error"
      const usage = json.usage ?? json.choices?.[0]?.usage
      if (usage) {
        const cached = usage.prompt_tokens_details?.cached_tokens ?? usage.prompt_cache_hit_tokens ?? 0
        out.usage = { input: usage.prompt_tokens - cached, output: usage.completion_tokens, cacheRead: cached, cacheWrite: 0, reasoning: usage.completion_tokens_details?.reasoning_tokens ?? 0 }
      }
      const choice = json.choices?.[0]
      if (!choice) continue
      const delta = choice.delta ?? {}
      out.text += delta.content ?? ""
      out.thinking += delta.reasoning_content ?? delta.reasoning ?? ""
      for (const call of delta.tool_calls ?? []) {
        const entry = calls.get(call.index) ?? { name: "", args: "" }
        entry.name ||= call.function?.name ?? ""
        entry.args += call.function?.arguments ?? ""
        calls.set(call.index, entry)
      }
      if (choice.finish_reason && out.stop !== "error") {
        out.stop = { stop: "stop", length: "length", tool_calls: "toolUse" }[choice.finish_reason as string] as StopReason
      }
    }
    out.tools = [...calls.values()]
    if (out.stop === "stop" && out.tools.length > 0) out.stop = "toolUse"
    return out
  },
  anthropic: (body) => {
    const out = emptyExpected()
    const tools = new Map<number, { name: string; args: string }>()
    let usage: any = {}
    for (const { json } of payloads(body)) {
      if (json.type === "message_start") usage = { ...json.message.usage }
      if (json.type === "message_delta") {
        for (const [key, value] of Object.entries(json.usage ?? {})) if (value !== null) usage[key] = value
        out.stop = { end_turn: "stop", max_tokens: "length", tool_use: "toolUse", stop_sequence: "stop" }[json.delta.stop_reason as string] as StopReason
      }
      if (json.type === "content_block_start" && json.content_block.type === "tool_use") tools.set(json.index, { name: json.content_block.name, args: "" })
      if (json.type === "content_block_delta") {
        if (json.delta.type === "text_delta") out.text += json.delta.text
        if (json.delta.type === "thinking_delta") out.thinking += json.delta.thinking
        if (json.delta.type === "input_json_delta") tools.get(json.index)!.args += json.delta.partial_json
      }
      if (json.type === "error") out.stop = "error"
    }
    out.tools = [...tools.values()].map((tool) => ({ ...tool, args: tool.args || "{}" }))
    out.usage = { input: usage.input_tokens, output: usage.output_tokens, cacheRead: usage.cache_read_input_tokens ?? 0, cacheWrite: usage.cache_creation_input_tokens ?? 0, reasoning: 0 }
    return out
  },
  google: (body) => {
    const out = emptyExpected()
    let meta: any
    for (const { json } of payloads(body)) {
      if (json.usageMetadata?.promptTokenCount !== undefined) meta = json.usageMetadata
      const candidate = json.candidates?.[0]
      for (const part of candidate?.content?.parts ?? []) {
        if (typeof part.text === "string") {
          if (part.thought) out.thinking += part.text
          else out.text += part.text
        }
        if (part.functionCall?.name) out.tools.push({ name: part.functionCall.name, args: JSON.stringify(part.functionCall.args ?? {}) })
        // Vertex streamed arguments: only flat `$.key` string paths occur in the recording.
        for (const arg of part.functionCall?.partialArgs ?? []) {
          const last = out.tools[out.tools.length - 1]!
          const args = JSON.parse(last.args)
          const key = arg.jsonPath.replace(/^\$\./, "")
          args[key] = (args[key] ?? "") + (arg.stringValue ?? "")
          last.args = JSON.stringify(args)
        }
      }
      if (candidate?.finishReason) out.stop = { STOP: "stop", MAX_TOKENS: "length" }[candidate.finishReason as string] as StopReason ?? "error"
    }
    if (out.stop === "stop" && out.tools.length > 0) out.stop = "toolUse"
    const cached = meta.cachedContentTokenCount ?? 0
    const thoughts = meta.thoughtsTokenCount ?? 0
    out.usage = { input: meta.promptTokenCount - cached, output: meta.candidatesTokenCount + thoughts, cacheRead: cached, cacheWrite: 0, reasoning: thoughts }
    return out
  },
  "openai-responses": (body) => {
    const out = emptyExpected()
    const args = new Map<string, { name: string; args: string }>()
    for (const { json } of payloads(body)) {
      if (json.type === "response.output_item.added" && json.item.type === "function_call") args.set(json.item.id, { name: json.item.name, args: "" })
      if (json.type === "response.function_call_arguments.delta") args.get(json.item_id)!.args += json.delta
      if (json.type === "response.output_text.delta") out.text += json.delta
      if (json.type === "response.reasoning_summary_text.delta") out.thinking += json.delta
      if (json.type === "response.completed") {
        const usage = json.response.usage
        const cached = usage.input_tokens_details?.cached_tokens ?? 0
        out.usage = { input: usage.input_tokens - cached, output: usage.output_tokens, cacheRead: cached, cacheWrite: 0, reasoning: usage.output_tokens_details?.reasoning_tokens ?? 0 }
        out.stop = "stop"
      }
      if (json.type === "error" || json.type === "response.failed") out.stop = "error"
    }
    out.tools = [...args.values()]
    if (out.stop === "stop" && out.tools.length > 0) out.stop = "toolUse"
    return out
  }
}

/** A `.chunks.txt` (one data payload per line) as the SSE body it was cut from. */
const fromChunks = (folder: Folder, text: string): string =>
  text.split("\n").filter((line) => line.trim().length > 0).map((line) => {
    const named = folder === "anthropic" || folder === "openai-responses"
    return (named ? `event: ${JSON.parse(line).type}\n` : "") + `data: ${line}\n\n`
  }).join("")

/** The Responses agent-loop recording holds several responses back to back: one body each. */
const splitResponses = (body: string): Array<string> =>
  body.split(/(?<=event: response\.completed\ndata: [^\n]*\n\n)/).filter((part) => part.trim().length > 0)

interface Recording {
  readonly folder: Folder
  readonly file: string
  readonly body: string
}

const recordings = (): Array<Recording> => {
  if (!available) return []
  const out: Array<Recording> = []
  for (const folder of Object.keys(machines) as Array<Folder>) {
    for (const file of readdirSync(root + folder).sort()) {
      const raw = readFileSync(root + folder + "/" + file, "utf8")
      if (file.endsWith(".sse")) out.push({ folder, file, body: raw })
      else if (file.endsWith(".chunks.txt")) {
        const body = fromChunks(folder, raw)
        const parts = folder === "openai-responses" ? splitResponses(body) : [body]
        parts.forEach((part, i) => out.push({ folder, file: parts.length > 1 ? `${file}#${i + 1}` : file, body: part }))
      }
    }
  }
  return out
}

const joined = (message: AssistantMessage, type: "text" | "thinking") =>
  message.content.map((block) => (block.type === "text" && type === "text" ? block.text : block.type === "thinking" && type === "thinking" ? block.thinking : "")).join("")

/** Per-file facts from INDEX.md, on top of the oracle comparison. */
type Done = Extract<ResponseEvent, { _tag: "Done" }>

const pinned: Record<string, (done: Done | undefined, error: LlmError | undefined) => void> = {
  "openai-gpt4o-parallel-tools.1.sse": (done) => {
    expect(done!.message.content.map((block) => block.type === "toolCall" && block.name)).toEqual(["get_country", "get_product_name"])
    expect(done!.reason).toBe("toolUse")
  },
  "deepseek-tool-call.chunks.txt": (done) => {
    expect(done!.message.usage).toEqual({ input: 19, output: 83, cacheRead: 320, cacheWrite: 0, reasoning: 39 })
    expect(done!.message.content[0]).toMatchObject({ type: "thinking", signature: "reasoning_content" })
  },
  "deepseek-text-length.chunks.txt": (done) => expect(done!.reason).toBe("length"),
  "compat-tool-index-starts-at-1.sse": (done) => {
    const call = done!.message.content.find((block) => block.type === "toolCall")
    expect(call).toMatchObject({ name: "read_file" })
  },
  "openrouter-length-then-inband-error.1.sse": (done, error) => {
    expect(done).toBeUndefined()
    expect(error?.message).toContain("Token limit reached")
  },
  "groq-event-error-midstream.1.sse": (done, error) => {
    expect(done).toBeUndefined()
    expect(error?.reason).toBe("badRequest")
  },
  "responses-error-then-failed.chunks.txt": (done, error) => {
    expect(done).toBeUndefined()
    expect(error).toMatchObject({ reason: "rateLimited", retryable: false })
  },
  "anthropic-text-then-tool-no-args.chunks.txt": (done) => expect(done!.message.content.at(-1)).toMatchObject({ type: "toolCall", arguments: "{}" }),
  "anthropic-thinking-signature.1.sse": (done) => expect((done!.message.content[0] as { signature?: string }).signature?.length).toBeGreaterThan(20),
  "anthropic-redacted-thinking.1.sse": (done) => {
    expect(done!.message.content.filter((block) => block.type === "thinking" && block.redacted)).toHaveLength(2)
  },
  "gemini-text-crlf.1.sse": (done) => expect(done!.message.content).toHaveLength(1),
  "gemini3-text-signature-on-empty-part.chunks.txt": (done) => expect((done!.message.content.at(-1) as { signature?: string }).signature).toBeDefined(),
  "gemini3-tool-call.chunks.txt": (done) => expect((done!.message.content.at(-1) as { extras?: object }).extras).toHaveProperty("thoughtSignature"),
  "gemini3-functioncall-thoughtsig-roundtrip.1.sse": (done) => {
    expect(done!.reason).toBe("toolUse")
    expect((done!.message.content[0] as { extras?: object }).extras).toHaveProperty("thoughtSignature")
  },
  "vertex-gemini3-thought-parts-partialargs.chunks.txt": (done) => {
    expect(done!.message.content.filter((block) => block.type === "toolCall").map((block) => block.type === "toolCall" && block.arguments)).toEqual([
      "{}", "{\"id\":\"A\"}", "{\"id\":\"B\"}", "{\"id\":\"C\"}"
    ])
  },
  "responses-streaming-usage.1.sse": (done) => expect(done!.message.content[0]).toMatchObject({ type: "thinking" })
}

describe.skipIf(!available)("recorded provider streams (../shared/llm-fixtures)", () => {
  const all = recordings()

  it("finds the recordings listed in INDEX.md", () => {
    expect(all.length).toBeGreaterThanOrEqual(24)
  })

  for (const recording of all) {
    it(`${recording.folder}/${recording.file}: final message matches the recording`, () => {
      const meta = { api: recording.folder, provider: "recorded", model: "recorded-model" }
      const expected = oracles[recording.folder](recording.body)
      // Cut into small odd pieces: the result must not depend on network chunking.
      for (const chunkSize of [undefined, 17]) {
        const result = replay(machines[recording.folder], meta, recording.body, chunkSize)
        const last = result.events.at(-1)
        const done = last?._tag === "Done" ? last : undefined
        pinned[recording.file]?.(done, result.error)
        if (expected.stop === "error") {
          expect(done).toBeUndefined()
          expect(result.error).toBeDefined()
          continue
        }
        expect(result.error).toBeUndefined()
        expect(done).toBeDefined()
        const message = done!.message
        expect(done!.reason).toBe(expected.stop)
        expect(message.stopReason).toBe(expected.stop)
        expect(joined(message, "text")).toBe(expected.text)
        if (recording.folder !== "openai-responses") expect(joined(message, "thinking")).toBe(expected.thinking)
        else expect(joined(message, "thinking").replace(/\n\n/g, "")).toBe(expected.thinking.replace(/\n\n/g, ""))
        const calls = message.content.flatMap((block) => (block.type === "toolCall" ? [block] : []))
        expect(calls.map((call) => call.name)).toEqual(expected.tools.map((tool) => tool.name))
        calls.forEach((call, i) => expect(JSON.parse(call.arguments)).toEqual(JSON.parse(expected.tools[i]!.args)))
        if (expected.usage !== undefined) expect(message.usage).toEqual(expected.usage)
        // Every delta event adds up to the final content.
        const fromDeltas = result.events.flatMap((event) => (event._tag === "TextDelta" ? [event.delta] : [])).join("")
        expect(fromDeltas).toBe(expected.text)
      }
    })
  }

  it("google/gemini-429-retry-info.json: a 429 is rateLimited, retryable, with RetryInfo's delay", () => {
    const body = readFileSync(root + "google/gemini-429-retry-info.json", "utf8")
    const error = classifyHttpError("google", JSON.parse(body).error.code, {}, body, 0)
    expect(error).toMatchObject({ reason: "rateLimited", retryable: true, status: 429, retryAfterMs: 34_400 })
  })
})
