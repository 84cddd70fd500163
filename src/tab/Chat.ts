/**
 * Tab on a chat model, for providers with no fill-in-the-middle endpoint (Anthropic, Gemini,
 * OpenAI's Responses): the FIM prompt as an edit request (the file with a cursor marker, the
 * context above it, "reply with the code to insert"), through the same `Llm` adapters the
 * agent uses, its text streamed as `FimEvent`s with a code fence around the answer taken off.
 */
import { Effect, Stream } from "effect"
import type { LlmError, RequestMessages, ResponseEvent } from "../Llm.js"
import type { Llm } from "../Llm.js"
import type { Context } from "effect"
import { FimError, FimEvent } from "../Tab.js"
import type { FimPrompt } from "../Tab.js"

export const CURSOR_MARK = "<|CURSOR|>"

const INSTRUCTION = [
  "You are a code completion engine inside an editor.",
  `The user's file is given with the cursor marked as ${CURSOR_MARK}.`,
  "Reply with only the code to insert at the cursor: no explanation, no code fence, nothing that is already after the cursor.",
  "Complete the current statement or block; a few lines at most. Reply with nothing when nothing fits."
].join(" ")

/** The edit request of a FIM prompt. */
export const chatRequest = (prompt: FimPrompt): RequestMessages => ({
  systemPrompt: INSTRUCTION,
  messages: [{
    role: "user",
    content: [{
      type: "text",
      text: `${prompt.context}${prompt.path === "" ? "" : `File: ${prompt.path}${prompt.languageId === "" ? "" : ` (${prompt.languageId})`}\n`}\n${prompt.prefix}${CURSOR_MARK}${prompt.suffix}`
    }]
  }],
  tools: []
})

/**
 * Takes a code fence off a chat answer as it streams: an opening ```` ```lang ```` line is held
 * until it is whole and dropped, a closing fence line and what follows it are dropped.
 */
export const makeUnfence = () => {
  let phase: "head" | "plain" | "fenced" | "closed" = "head"
  let held = ""
  /** `held` begins a line (else it begins with the line break before its line). */
  let atLineStart = true
  /** The body of a fenced answer, up to a closing fence; a line (and the break before it) that may still become one is held. */
  const body = (delta: string, end: boolean): string => {
    held += delta
    const fence = held.search(atLineStart ? /(^|\n)```/ : /\n```/)
    if (fence >= 0) {
      phase = "closed"
      return held.slice(0, fence)
    }
    const lineBreak = held.lastIndexOf("\n")
    const tail = held.slice(lineBreak + 1)
    const mayOpen = !end && (lineBreak >= 0 || atLineStart) && tail.length < 3 && "```".startsWith(tail)
    const keepFrom = mayOpen ? Math.max(lineBreak, 0) : held.length
    const out = held.slice(0, keepFrom)
    held = held.slice(keepFrom)
    atLineStart = held === "" ? out === "" ? atLineStart : out.endsWith("\n") : !held.startsWith("\n")
    return out
  }
  return (delta: string, end: boolean): string => {
    if (phase === "closed") return ""
    if (phase === "plain") return delta
    if (phase === "fenced") return body(delta, end)
    held += delta
    const start = held.trimStart()
    const undecided = !end && !held.includes("\n") && (start.length < 3 ? "```".startsWith(start) : start.startsWith("```"))
    if (undecided) return ""
    const text = held
    held = ""
    if (!start.startsWith("```")) {
      phase = "plain"
      return text
    }
    phase = "fenced"
    const newline = text.indexOf("\n")
    return newline < 0 ? "" : body(text.slice(newline + 1), end)
  }
}

const fimErrorOf = (error: LlmError): FimError =>
  new FimError({
    kind: error.reason === "idleTimeout" ? "timeout" : error.reason === "network" ? "network" : "http",
    message: error.message,
    ...(error.status === undefined ? {} : { status: error.status })
  })

/** One chat call for `prompt` on the Tab router's one model (`tab`), as FIM events. */
export const stream = (llm: Context.Tag.Service<Llm>, prompt: FimPrompt): Stream.Stream<FimEvent, FimError> =>
  Stream.suspend(() => {
    const unfence = makeUnfence()
    return llm.stream(chatRequest(prompt), { model: "tab", callId: "tab", maxOutputTokens: prompt.maxTokens }).pipe(
      Stream.mapError(fimErrorOf),
      Stream.mapConcatEffect((event: ResponseEvent) => {
        if (event._tag === "TextDelta") {
          const text = unfence(event.delta, false)
          return Effect.succeed(text === "" ? [] : [FimEvent.Text({ text })])
        }
        if (event._tag === "Done") {
          const rest = unfence("", true)
          const usage = event.message.usage
          return Effect.succeed([
            ...(rest === "" ? [] : [FimEvent.Text({ text: rest })]),
            FimEvent.Done({ inputTokens: usage.input + usage.cacheRead + usage.cacheWrite, outputTokens: usage.output, reason: event.reason === "length" ? "length" : "stop" })
          ])
        }
        if (event._tag === "Error") return Effect.fail(new FimError({ kind: "http", message: event.message }))
        return Effect.succeed([])
      })
    )
  })
