/**
 * The CPU a model call's request body costs before it leaves, against the history's length:
 * each call sends the whole history, and the adapters remember what each message became
 * (`src/llm/common/HistoryParts.ts`), so the next call of a conversation serializes only what is
 * new.
 *
 * A synthetic agent session (each turn: a user message of 300 characters, three tool calls
 * whose results are 4 KB each, a closing answer of 800; a 12 KB system prompt and 20 tools) at
 * 100 and 800 messages. Per adapter, timed in this process:
 * - from nothing: the body of a call with no conversation (nothing remembered), as a
 *   conversation's first call after a restart;
 * - next call: the same conversation's next call, one tool round (two new messages) longer, as
 *   an agent's loop makes them.
 * The time covers `prepare` and the body's UTF-8 length (which flattens the string, as writing
 * it would). Median over the calls of each row.
 *
 *   node_modules/.bin/tsx bench/body.ts
 */
import { performance } from "node:perf_hooks"
import { pathToFileURL } from "node:url"
import type { AssistantMessage, Message, RequestMessages, ToolDefinition, ToolResultMessage } from "../src/Llm.js"
import { emptyUsage } from "../src/Llm.js"
import type { Adapter, CallSettings } from "../src/llm/Adapter.js"
import { adapters } from "../src/llm/Router.js"
import { settingsFor } from "../test/support/Histories.js"
import { median } from "./support/stats.js"

const LENGTHS = [100, 800] as const
const CALLS = 40
const WARMUP = 10

const textOf = (seed: number, length: number): string => {
  const words = ["const", "value", "return", "await", "function", "import", "export", "the", "file", "é", "\"quoted\"", "\n"]
  let state = (seed * 2654435761) >>> 0
  let out = ""
  while (out.length < length) {
    state = (state * 1103515245 + 12345) >>> 0
    out += words[state % words.length] + " "
  }
  return out.slice(0, length)
}

const modelOf = (adapter: Adapter) => adapter.api === "gemini" ? "gemini-3-pro" : "model-a"

/** One tool round of turn `turn`: the answer calling a tool, and the tool's result (new objects). */
const toolRound = (adapter: Adapter, turn: number, call: number): [AssistantMessage, ToolResultMessage] => {
  const id = `call_${turn}_${call}`
  return [
    {
      role: "assistant",
      api: adapter.api,
      provider: "p1",
      model: modelOf(adapter),
      usage: emptyUsage,
      stopReason: "toolUse",
      content: [{ type: "text", text: textOf(turn * 10 + call, 200) }, { type: "toolCall", id, name: "read_file", arguments: `{"path":"src/file${turn}.ts"}` }]
    },
    { role: "toolResult", toolCallId: id, toolName: "read_file", isError: false, content: [{ type: "text", text: textOf(turn * 100 + call, 4_000) }] }
  ]
}

const sessionOf = (adapter: Adapter, length: number): Array<Message> => {
  const messages: Array<Message> = []
  for (let turn = 0; messages.length < length; turn++) {
    messages.push({ role: "user", content: [{ type: "text", text: textOf(turn, 300) }] })
    for (let call = 0; call < 3; call++) messages.push(...toolRound(adapter, turn, call))
    messages.push({ role: "assistant", api: adapter.api, provider: "p1", model: modelOf(adapter), usage: emptyUsage, stopReason: "stop", content: [{ type: "text", text: textOf(turn, 800) }] })
  }
  return messages.slice(0, length)
}

const tools: ReadonlyArray<ToolDefinition> = Array.from({ length: 20 }, (_, i) => ({
  name: `tool_${i}`,
  description: textOf(1_000 + i, 400),
  parameters: { type: "object", properties: { path: { type: "string", description: textOf(2_000 + i, 100) } }, required: ["path"] }
}))
const systemPrompt = textOf(7, 12_000)

const settingsOf = (adapter: Adapter, promptCacheKey: string | undefined): CallSettings =>
  settingsFor(adapter, { baseUrl: "https://example.test/v1", maxOutputTokens: undefined, ...(promptCacheKey === undefined ? {} : { promptCacheKey }) })

const timeOne = (adapter: Adapter, request: RequestMessages, settings: CallSettings): { readonly ms: number; readonly bytes: number } => {
  const started = performance.now()
  const bytes = Buffer.byteLength(adapter.prepare(request, settings).body)
  return { ms: performance.now() - started, bytes }
}

export const run = () => {
  const rows: Array<string> = []
  let conversation = 0
  for (const adapter of Object.values(adapters)) {
    for (const length of LENGTHS) {
      const base = sessionOf(adapter, length)
      const request = (messages: ReadonlyArray<Message>): RequestMessages => ({ systemPrompt, tools, messages })
      const cold: Array<number> = []
      let bytes = 0
      for (let i = 0; i < WARMUP + CALLS; i++) {
        const timed = timeOne(adapter, request(base), settingsOf(adapter, undefined))
        bytes = timed.bytes
        if (i >= WARMUP) cold.push(timed.ms)
      }
      const key = `bench-${conversation++}`
      const messages = [...base]
      timeOne(adapter, request(messages), settingsOf(adapter, key))
      const warm: Array<number> = []
      for (let i = 0; i < WARMUP + CALLS; i++) {
        messages.push(...toolRound(adapter, 10_000 + i, 0))
        const timed = timeOne(adapter, request([...messages]), settingsOf(adapter, key))
        if (i >= WARMUP) warm.push(timed.ms)
      }
      rows.push(`| ${adapter.api} | ${length} | ${(bytes / 1024).toFixed(0)} KB | ${median(cold).toFixed(2)} ms | ${median(warm).toFixed(2)} ms |`)
    }
  }
  const markdown = [
    `A model call's request body: CPU to build it (\`prepare\` and its UTF-8 length), median over ${CALLS} calls, in this process (Node ${process.version}).`,
    "",
    "| wire API | history messages | body | from nothing | next call of the conversation |",
    "| --- | ---: | ---: | ---: | ---: |",
    ...rows
  ].join("\n")
  return { markdown }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  console.log(run().markdown)
}
