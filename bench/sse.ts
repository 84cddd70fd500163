/**
 * Adapter decode throughput: deltas per second through SSE decoding plus each adapter's state
 * machine, on a large generated stream shaped like the recordings (same event framing, padding
 * fields and usage chunks), fed in 16 KiB network-sized chunks. Prints a markdown table of
 * medians over several runs.
 *
 *   node_modules/.bin/tsx bench/sse.ts [deltas] [runs]
 *
 * `run` is exported so a bench index can include this table.
 */
import { pathToFileURL } from "node:url"
import { Console, Effect } from "effect"
import type { ResponseEvent } from "../src/Llm.js"
import * as Anthropic from "../src/llm/Anthropic.js"
import type { Machine, StreamMeta } from "../src/llm/Common.js"
import * as Gemini from "../src/llm/Gemini.js"
import * as OpenAiChat from "../src/llm/OpenAiChat.js"
import * as OpenAiResponses from "../src/llm/OpenAiResponses.js"
import { makeSseDecoder } from "../src/llm/Sse.js"

const words = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "é", "✓", "\n", "code", "`x`"]
const piece = (i: number): string => `${words[i % words.length]} `

/** Streams with `deltas` text deltas (a tenth of them thinking, plus one tool call), per wire shape. */
const generators: Record<string, (deltas: number) => string> = {
  "openai-chat": (deltas) => {
    const out: Array<string> = []
    const chunk = (delta: object, finish: string | null = null) =>
      `data: ${JSON.stringify({ id: "chatcmpl-bench", object: "chat.completion.chunk", created: 1754693439, model: "gpt-bench", system_fingerprint: "fp_07871e2ad8", choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], usage: null, obfuscation: "3Y6yaTIP" })}\n\n`
    const thinking = Math.floor(deltas / 10)
    for (let i = 0; i < thinking; i++) out.push(chunk({ reasoning_content: piece(i) }))
    for (let i = thinking; i < deltas - 2; i++) out.push(chunk({ content: piece(i) }))
    out.push(chunk({ tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "read", arguments: "{\"path\":" } }] }))
    out.push(chunk({ tool_calls: [{ index: 0, function: { arguments: "\"a.ts\"}" } }] }))
    out.push(chunk({}, "tool_calls"))
    out.push(`data: ${JSON.stringify({ id: "chatcmpl-bench", choices: [], usage: { prompt_tokens: 1000, completion_tokens: deltas, prompt_tokens_details: { cached_tokens: 500 } } })}\n\ndata: [DONE]\n\n`)
    return out.join("")
  },
  anthropic: (deltas) => {
    const event = (data: { type: string }) => `event: ${data.type}\ndata: ${JSON.stringify(data)}\n\n`
    const out = [event({ type: "message_start", message: { id: "msg_bench", model: "claude-bench", usage: { input_tokens: 10, output_tokens: 1 } } } as { type: string })]
    const thinking = Math.floor(deltas / 10)
    out.push(event({ type: "content_block_start", index: 0, content_block: { type: "thinking", thinking: "", signature: "" } } as { type: string }))
    for (let i = 0; i < thinking; i++) out.push(event({ type: "content_block_delta", index: 0, delta: { type: "thinking_delta", thinking: piece(i) } } as { type: string }))
    out.push(event({ type: "content_block_delta", index: 0, delta: { type: "signature_delta", signature: "c2ln" } } as { type: string }))
    out.push(event({ type: "content_block_stop", index: 0 } as { type: string }))
    out.push(event({ type: "content_block_start", index: 1, content_block: { type: "text", text: "" } } as { type: string }))
    for (let i = thinking; i < deltas - 2; i++) out.push(event({ type: "content_block_delta", index: 1, delta: { type: "text_delta", text: piece(i) } } as { type: string }))
    out.push(event({ type: "content_block_stop", index: 1 } as { type: string }))
    out.push(event({ type: "content_block_start", index: 2, content_block: { type: "tool_use", id: "toolu_1", name: "read", input: {} } } as { type: string }))
    out.push(event({ type: "content_block_delta", index: 2, delta: { type: "input_json_delta", partial_json: "{\"path\":" } } as { type: string }))
    out.push(event({ type: "content_block_delta", index: 2, delta: { type: "input_json_delta", partial_json: "\"a.ts\"}" } } as { type: string }))
    out.push(event({ type: "content_block_stop", index: 2 } as { type: string }))
    out.push(event({ type: "message_delta", delta: { stop_reason: "tool_use" }, usage: { output_tokens: deltas } } as { type: string }))
    out.push(event({ type: "message_stop" }))
    return out.join("")
  },
  gemini: (deltas) => {
    const chunk = (parts: Array<object>, finishReason?: string) =>
      `data: ${JSON.stringify({ candidates: [{ content: { role: "model", parts }, ...(finishReason ? { finishReason } : {}), index: 0 }], usageMetadata: { promptTokenCount: 100, candidatesTokenCount: 5, totalTokenCount: 105 }, modelVersion: "gemini-bench", responseId: "bench" })}\r\n\r\n`
    const out: Array<string> = []
    const thinking = Math.floor(deltas / 10)
    for (let i = 0; i < thinking; i++) out.push(chunk([{ text: piece(i), thought: true }]))
    for (let i = thinking; i < deltas - 1; i++) out.push(chunk([{ text: piece(i) }]))
    out.push(chunk([{ functionCall: { name: "read", args: { path: "a.ts" } }, thoughtSignature: "c2ln" }], "STOP"))
    return out.join("")
  },
  "openai-responses": (deltas) => {
    let sequence = 0
    const event = (data: Record<string, unknown>) => `event: ${data["type"]}\ndata: ${JSON.stringify({ ...data, sequence_number: sequence++ })}\n\n`
    const out = [event({ type: "response.created", response: { id: "resp_bench", model: "gpt-bench", status: "in_progress" } })]
    const thinking = Math.floor(deltas / 10)
    out.push(event({ type: "response.output_item.added", output_index: 0, item: { id: "rs_1", type: "reasoning", summary: [] } }))
    for (let i = 0; i < thinking; i++) out.push(event({ type: "response.reasoning_summary_text.delta", item_id: "rs_1", output_index: 0, summary_index: 0, delta: piece(i), obfuscation: "abc" }))
    out.push(event({ type: "response.output_item.done", output_index: 0, item: { id: "rs_1", type: "reasoning", summary: [], encrypted_content: "gAAAA" } }))
    out.push(event({ type: "response.output_item.added", output_index: 1, item: { id: "msg_1", type: "message", content: [] } }))
    for (let i = thinking; i < deltas - 2; i++) out.push(event({ type: "response.output_text.delta", item_id: "msg_1", output_index: 1, content_index: 0, delta: piece(i), obfuscation: "abc" }))
    out.push(event({ type: "response.output_item.done", output_index: 1, item: { id: "msg_1", type: "message", content: [] } }))
    out.push(event({ type: "response.output_item.added", output_index: 2, item: { id: "fc_1", type: "function_call", call_id: "call_1", name: "read", arguments: "" } }))
    out.push(event({ type: "response.function_call_arguments.delta", item_id: "fc_1", output_index: 2, delta: "{\"path\":" }))
    out.push(event({ type: "response.function_call_arguments.delta", item_id: "fc_1", output_index: 2, delta: "\"a.ts\"}" }))
    out.push(event({ type: "response.output_item.done", output_index: 2, item: { id: "fc_1", type: "function_call", call_id: "call_1", name: "read", arguments: "{\"path\":\"a.ts\"}" } }))
    out.push(event({ type: "response.completed", response: { id: "resp_bench", usage: { input_tokens: 100, output_tokens: deltas } } }))
    return out.join("")
  }
}

const makers: Record<string, (meta: StreamMeta) => Machine> = {
  "openai-chat": OpenAiChat.makeMachine,
  anthropic: Anthropic.makeMachine,
  gemini: Gemini.makeMachine,
  "openai-responses": OpenAiResponses.makeMachine
}

/** Decodes one body in 16 KiB chunks; returns the number of delta events and the elapsed ms. */
const decodeOnce = (api: string, bytes: Uint8Array): { deltas: number; ms: number } => {
  const started = performance.now()
  const machine = makers[api]!({ api, provider: "bench", model: "bench" })
  const decoder = makeSseDecoder()
  let deltas = 0
  let done = false
  const out: Array<ResponseEvent> = []
  for (let offset = 0; offset < bytes.length; offset += 16_384) {
    for (const event of decoder.feedBytes(bytes.subarray(offset, offset + 16_384))) {
      const error = machine.push(event, out)
      if (error !== undefined) throw error
    }
    for (const event of out) {
      if (event._tag === "TextDelta" || event._tag === "ThinkingDelta" || event._tag === "ToolCallDelta") deltas++
      else if (event._tag === "Done") done = true
    }
    out.length = 0
  }
  if (!done) {
    machine.end(out)
    done = out.some((event) => event._tag === "Done")
  }
  if (!done) throw new Error(`${api}: the generated stream did not finish`)
  return { deltas, ms: performance.now() - started }
}

const median = (values: ReadonlyArray<number>): number => {
  const sorted = [...values].sort((a, b) => a - b)
  const middle = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2
}

export interface SseBenchRow {
  readonly api: string
  readonly deltas: number
  readonly megabytes: number
  readonly medianMs: number
  readonly deltasPerSecond: number
  readonly megabytesPerSecond: number
}

/** Measures every adapter (`runs` timed runs after one warm-up) and returns the rows and the markdown table. */
export const run = Effect.fn("bench.sse")(function*(options?: { readonly deltas?: number; readonly runs?: number }) {
  const deltas = options?.deltas ?? 50_000
  const runs = options?.runs ?? 7
  const rows: Array<SseBenchRow> = []
  for (const api of Object.keys(generators)) {
    const bytes = new TextEncoder().encode(generators[api]!(deltas))
    decodeOnce(api, bytes)
    const times: Array<number> = []
    let counted = 0
    for (let i = 0; i < runs; i++) {
      const result = yield* Effect.sync(() => decodeOnce(api, bytes))
      times.push(result.ms)
      counted = result.deltas
    }
    const ms = median(times)
    rows.push({
      api,
      deltas: counted,
      megabytes: bytes.length / 1_048_576,
      medianMs: ms,
      deltasPerSecond: counted / (ms / 1000),
      megabytesPerSecond: bytes.length / 1_048_576 / (ms / 1000)
    })
  }
  const markdown = [
    `SSE decode + adapter state machine, ${runs} runs, median (Node ${process.version})`,
    "",
    "| adapter | deltas | stream MiB | median ms | deltas/s | MiB/s |",
    "| --- | ---: | ---: | ---: | ---: | ---: |",
    ...rows.map((row) =>
      `| ${row.api} | ${row.deltas} | ${row.megabytes.toFixed(1)} | ${row.medianMs.toFixed(1)} | ${Math.round(row.deltasPerSecond).toLocaleString("en-US")} | ${row.megabytesPerSecond.toFixed(1)} |`
    )
  ].join("\n")
  return { rows, markdown }
})

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const deltas = Number(process.argv[2] ?? 50_000)
  const runs = Number(process.argv[3] ?? 7)
  Effect.runPromise(run({ deltas, runs }).pipe(Effect.flatMap(({ markdown }) => Console.log(markdown)))).catch((error) => {
    console.error(error)
    process.exitCode = 1
  })
}
