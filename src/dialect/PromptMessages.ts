/**
 * A chat history only the client holds, read back: the prompt messages a checkpoint names
 * (`root_prompt_messages_json`: blob ids of AI-SDK JSON messages, the shape `Checkpoint.ts`
 * writes, or the JSON itself inline) translated into the loop's neutral messages, for a
 * conversation this server does not hold (a chat moved onto it, or one whose client started a
 * new conversation id with its own checkpoint).
 *
 * The rules (docs/protocol.md, "Long sessions"):
 * - system (and developer) messages before the first other message are the client's system
 *   prompt, joined by a blank line; one later in the history becomes a user message in its place;
 * - user: text and images (`image` as base64 or a data URL, a `file` of an image type); a file
 *   of another type becomes a line saying so;
 * - assistant: text and tool calls (`tool-call` with `args` or `input`; OpenAI's `tool_calls`);
 *   reasoning is left out (no provider signature to replay it with);
 * - tool: each `tool-result` (`result`, or AI SDK 5's `output`) is a tool result; OpenAI's
 *   `{role: "tool", tool_call_id, content}` too;
 * - content as a plain string is one text part; parts of an unknown type are left out (noted);
 * - a tool call the history never answers gets a result saying it did not run, and a result that
 *   answers no call is left out, so every provider takes the history;
 * - a blob the client did not give back, that does not match its id, or is not a message this
 *   server can read fails the import (`Left`, a readable reason): never a silent fresh start.
 */
import { Either } from "effect"
import { ErrorDetails_Error } from "../gen/aiserver/v1/aiserver_pb.js"
import type { AssistantContent, AssistantMessage, Message, ToolCall, ToolResultMessage, UserContent } from "../Llm.js"
import { emptyUsage } from "../Llm.js"
import type { ImportedHistory, Input } from "../Loop.js"
import { sha256Bytes } from "../internal/Sha256.js"
import { bytesToHex } from "./Bytes.js"
import { EndStream } from "./EndStream.js"

/** What an imported assistant message says it came from: no provider of this server's. */
export const IMPORTED_API = "cursor-client"

/** The result an imported tool call the history never answers gets. */
export const UNANSWERED_RESULT = "Not executed: this tool call has no result in the history the chat was moved with."

const BLOB_ID_BYTES = 32

/** The checkpoint's entries that are blob ids to read back (hex, each once); the others are inline JSON. */
export const promptBlobIdsOf = (entries: ReadonlyArray<Uint8Array>): ReadonlyArray<Uint8Array> => {
  const seen = new Set<string>()
  return entries.filter((entry) => {
    if (entry.length !== BLOB_ID_BYTES) return false
    const hex = bytesToHex(entry)
    if (seen.has(hex)) return false
    seen.add(hex)
    return true
  })
}

/** The imported history, and what was left out of it (to log). */
export interface Imported {
  readonly history: ImportedHistory
  readonly notes: ReadonlyArray<string>
}

/**
 * The history `entries` name, from the blobs read back (`fetched`, by hex id). Left: why it
 * cannot be imported, as the user reads it.
 */
export const importHistory = (entries: ReadonlyArray<Uint8Array>, fetched: ReadonlyMap<string, Uint8Array>): Either.Either<Imported, string> => {
  const notes: Array<string> = []
  const translated: Array<Message | { readonly system: string }> = []
  const decoder = new TextDecoder("utf-8", { fatal: true })
  for (const [index, entry] of entries.entries()) {
    const which = `prompt message ${index + 1} of ${entries.length}`
    let text: string
    try {
      if (entry.length === BLOB_ID_BYTES) {
        const hex = bytesToHex(entry)
        const data = fetched.get(hex)
        if (data === undefined) return Either.left(`${which} (blob ${hex.slice(0, 12)}…) was not given back by the client`)
        if (sha256Bytes(data) !== hex) return Either.left(`${which} (blob ${hex.slice(0, 12)}…) does not match its id`)
        text = decoder.decode(data)
      } else {
        text = decoder.decode(entry)
      }
    } catch {
      return Either.left(`${which} is not UTF-8 text`)
    }
    let json: unknown
    try {
      json = JSON.parse(text)
    } catch {
      return Either.left(`${which} is not JSON`)
    }
    const message = messagesOf(json, (note) => notes.push(`${which}: ${note}`))
    if (Either.isLeft(message)) return Either.left(`${which} ${message.left}`)
    translated.push(...message.right)
  }
  const leading: Array<string> = []
  let at = 0
  for (; at < translated.length; at++) {
    const item = translated[at]!
    if (!("system" in item)) break
    if (item.system !== "") leading.push(item.system)
  }
  const messages = translated.slice(at).map((item): Message =>
    "system" in item ? { role: "user", content: [{ type: "text", text: item.system }] } : item
  )
  return Either.right({
    history: { messages: pairToolCalls(messages, notes), ...(leading.length > 0 ? { systemPrompt: leading.join("\n\n") } : {}) },
    notes
  })
}

/** A turn's start with the history read back from the client, for the loop to continue from (an `import` segment). */
export const withImportedHistory = (input: Input, history: ImportedHistory): Input =>
  input._tag === "Start" || input._tag === "Summarize"
    ? { ...input, clientHistory: { promptIds: input.clientHistory?.promptIds ?? [], imported: history } }
    : input

/** How a turn whose history the client did not give back ends: the reason, as the user reads it; nothing ran. */
export const historyNotGiven = (reason: string): EndStream => {
  const message = `This chat's history could not be read back from the editor (${reason}), so the message was not sent to the model. Start a new chat, or try again.`
  return EndStream.Error({
    code: "failed_precondition",
    message,
    detail: { error: ErrorDetails_Error.CUSTOM_MESSAGE, title: "The chat's history is missing", detail: message, isRetryable: false }
  })
}

type Translated = ReadonlyArray<Message | { readonly system: string }>
type Note = (note: string) => void

const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === "object" && value !== null && !Array.isArray(value)
const stringOr = (value: unknown, fallback: string): string => (typeof value === "string" ? value : fallback)

/** A prompt message's JSON as neutral messages (a tool message may hold several results). */
const messagesOf = (json: unknown, note: Note): Either.Either<Translated, string> => {
  if (!isRecord(json) || typeof json.role !== "string") return Either.left("is not a message (no role)")
  const parts = partsOf(json.content)
  switch (json.role) {
    case "system":
    case "developer":
      return Either.right([{ system: parts.flatMap((part) => (part.type === "text" && typeof part.text === "string" ? [part.text] : [])).join("\n") }])
    case "user": {
      const content = parts.flatMap((part) => userContentOf(part, note))
      return Either.right(content.length === 0 ? [] : [{ role: "user", content }])
    }
    case "assistant":
      return Either.right(assistantOf(json, parts, note))
    case "tool":
      return Either.right(toolResultsOf(json, parts, note))
    default:
      return Either.left(`has a role this server does not know: ${JSON.stringify(json.role).slice(0, 40)}`)
  }
}

/** Content as parts: a plain string is one text part. */
const partsOf = (content: unknown): ReadonlyArray<Record<string, unknown>> =>
  typeof content === "string" ? [{ type: "text", text: content }] : Array.isArray(content) ? content.filter(isRecord) : []

const mediaTypeOf = (part: Record<string, unknown>): string => stringOr(part.mediaType, stringOr(part.mimeType, ""))

/** An image as base64 and its type: a data URL gives both. */
const imageOf = (data: unknown, mediaType: string): UserContent | undefined => {
  if (typeof data !== "string" || data === "") return undefined
  const url = /^data:([^;,]+);base64,(.*)$/s.exec(data)
  if (url !== null) return { type: "image", data: url[2]!, mimeType: url[1]! }
  if (/^https?:/.test(data)) return { type: "text", text: `[an image at ${data}]` }
  return { type: "image", data, mimeType: mediaType === "" ? "image/png" : mediaType }
}

const userContentOf = (part: Record<string, unknown>, note: Note): ReadonlyArray<UserContent> => {
  switch (part.type) {
    case "text":
      return typeof part.text === "string" && part.text !== "" ? [{ type: "text", text: part.text }] : []
    case "image": {
      const image = imageOf(part.image ?? part.data, mediaTypeOf(part))
      return image === undefined ? [] : [image]
    }
    case "file": {
      const mediaType = mediaTypeOf(part)
      if (mediaType.startsWith("image/")) {
        const image = imageOf(part.data, mediaType)
        return image === undefined ? [] : [image]
      }
      const name = stringOr(part.filename, "")
      return [{ type: "text", text: `[a file${name === "" ? "" : ` ${name}`}${mediaType === "" ? "" : ` (${mediaType})`} was attached here]` }]
    }
    default:
      note(`a part of type ${String(part.type)} was left out`)
      return []
  }
}

/** Tool call arguments as JSON text: an object is serialized, a string kept, nothing is `{}`. */
const argumentsOf = (args: unknown): string => (typeof args === "string" ? (args === "" ? "{}" : args) : args === undefined ? "{}" : JSON.stringify(args))

const assistantOf = (json: Record<string, unknown>, parts: ReadonlyArray<Record<string, unknown>>, note: Note): Translated => {
  const content: Array<AssistantContent> = []
  for (const part of parts) {
    switch (part.type) {
      case "text":
        if (typeof part.text === "string" && part.text !== "") content.push({ type: "text", text: part.text })
        break
      case "reasoning":
      case "redacted-reasoning":
        break
      case "tool-call":
        content.push({ type: "toolCall", id: stringOr(part.toolCallId, ""), name: stringOr(part.toolName, ""), arguments: argumentsOf(part.args ?? part.input) })
        break
      default:
        note(`a part of type ${String(part.type)} was left out`)
    }
  }
  // OpenAI's shape: `tool_calls` beside the content.
  for (const call of Array.isArray(json.tool_calls) ? json.tool_calls.filter(isRecord) : []) {
    const fn = isRecord(call.function) ? call.function : {}
    content.push({ type: "toolCall", id: stringOr(call.id, ""), name: stringOr(fn.name, ""), arguments: argumentsOf(fn.arguments) })
  }
  if (content.length === 0) return []
  const message: AssistantMessage = {
    role: "assistant",
    content,
    api: IMPORTED_API,
    provider: IMPORTED_API,
    model: "",
    usage: emptyUsage,
    stopReason: content.some((block) => block.type === "toolCall") ? "toolUse" : "stop"
  }
  return [message]
}

/** A tool result's output as text (AI SDK 4's `result`, AI SDK 5's typed `output`), and whether it is an error. */
const outputOf = (part: Record<string, unknown>): { readonly content: ReadonlyArray<UserContent>; readonly isError: boolean } => {
  const flagged = part.isError === true
  const output = part.output
  if (isRecord(output) && typeof output.type === "string") {
    const isError = flagged || output.type.startsWith("error")
    if (output.type === "content" && Array.isArray(output.value)) {
      const content = output.value.filter(isRecord).flatMap((item): ReadonlyArray<UserContent> =>
        item.type === "text" && typeof item.text === "string"
          ? [{ type: "text", text: item.text }]
          : item.type === "media" ? [imageOf(item.data, mediaTypeOf(item)) ?? { type: "text", text: "[media]" }] : []
      )
      return { content, isError }
    }
    return { content: [{ type: "text", text: typeof output.value === "string" ? output.value : JSON.stringify(output.value ?? null) }], isError }
  }
  const result = part.result ?? output
  return { content: [{ type: "text", text: typeof result === "string" ? result : JSON.stringify(result ?? null) }], isError: flagged }
}

const toolResultsOf = (json: Record<string, unknown>, parts: ReadonlyArray<Record<string, unknown>>, note: Note): Translated => {
  // OpenAI's shape: one result, its text the content.
  if (typeof json.tool_call_id === "string") {
    const text = parts.flatMap((part) => (typeof part.text === "string" ? [part.text] : [])).join("\n")
    return [{ role: "toolResult", toolCallId: json.tool_call_id, toolName: stringOr(json.name, ""), content: [{ type: "text", text }], isError: false }]
  }
  return parts.flatMap((part): ReadonlyArray<ToolResultMessage> => {
    if (part.type !== "tool-result") {
      note(`a part of type ${String(part.type)} was left out`)
      return []
    }
    const { content, isError } = outputOf(part)
    return [{ role: "toolResult", toolCallId: stringOr(part.toolCallId, ""), toolName: stringOr(part.toolName, ""), content, isError }]
  })
}

/**
 * Every tool call answered right after its message, and every result after its call: a call the
 * history never answers gets `UNANSWERED_RESULT` (before the next message that is not a
 * result), a result that answers no open call is left out, and a result without a tool name
 * takes its call's.
 */
const pairToolCalls = (messages: ReadonlyArray<Message>, notes: Array<string>): ReadonlyArray<Message> => {
  const out: Array<Message> = []
  let open: Array<ToolCall> = []
  const closeOpen = () => {
    for (const call of open) {
      out.push({ role: "toolResult", toolCallId: call.id, toolName: call.name, content: [{ type: "text", text: UNANSWERED_RESULT }], isError: true })
    }
    open = []
  }
  for (const message of messages) {
    if (message.role === "toolResult") {
      const call = open.find((candidate) => candidate.id === message.toolCallId)
      if (call === undefined) {
        notes.push(`a tool result for ${message.toolCallId || "no call id"} answers no tool call before it and was left out`)
        continue
      }
      open = open.filter((candidate) => candidate !== call)
      out.push(message.toolName === "" ? { ...message, toolName: call.name } : message)
      continue
    }
    closeOpen()
    out.push(message)
    if (message.role === "assistant") open = message.content.filter((block): block is ToolCall => block.type === "toolCall")
  }
  closeOpen()
  return out
}

/** A turn the server's users policy refused (`users/Admit.ts`): the stream ends with why, in Cursor's error card. */
export const turnRefused = (refusal: { readonly kind: "model" | "owner" | "budget"; readonly title: string; readonly message: string }): EndStream =>
  EndStream.Error({
    code: refusal.kind === "budget" ? "resource_exhausted" : "permission_denied",
    message: refusal.message,
    detail: { error: ErrorDetails_Error.CUSTOM_MESSAGE, title: refusal.title, detail: refusal.message, isRetryable: false }
  })
