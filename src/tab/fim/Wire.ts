/**
 * What a FIM wire is to the shell (`fim/Http.ts`): the path it posts to, the body it sends and
 * a decoder of its SSE events into `FimEvent`s. Decoders are plain synchronous objects (one
 * `JSON.parse` per event, no Schema on the hot path), fed from undici's `data` callback.
 * Also the pieces the wires share: JSON reading, in-stream errors, and the decoder of the two
 * OpenAI-shaped wires (`choices[0]`, `usage`, `[DONE]` last).
 */
import type { FimTarget } from "../../Tab.js"
import { FimError, FimEvent, type FimPrompt } from "../../Tab.js"
import { excerpt } from "../../llm/common/Errors.js"

export interface FimWire {
  /** Appended to the target's base URL: `/completions`, `/fim/completions`, `/infill`. */
  readonly path: string
  readonly body: (target: FimTarget, prompt: FimPrompt) => Record<string, unknown>
  readonly makeDecoder: (provider: string) => FimDecoder
}

export interface FimDecoder {
  /** One SSE event's `data`: appends what it says to `out`; a returned error ends the call. */
  readonly push: (data: string, out: Array<FimEvent>) => FimError | undefined
  /** The body ended before the final event: the `Done` the wire allows here, or an error. */
  readonly end: (out: Array<FimEvent>) => FimError | undefined
  /** The final event is decoded (`Done` is out): what follows is ignored. */
  readonly finished: () => boolean
}

export type Json = Record<string, unknown>

export const isObject = (value: unknown): value is Json => typeof value === "object" && value !== null && !Array.isArray(value)

/** A token count, when the value is one. */
export const count = (value: unknown): number | undefined =>
  typeof value === "number" && Number.isFinite(value) && value >= 0 ? value : undefined

/** `{ stop }` when there are stop sequences: an empty list is left out (some servers refuse `[]`). */
export const stopField = (stop: ReadonlyArray<string>): Json => (stop.length > 0 ? { stop: [...stop] } : {})

/** The body the OpenAI-style FIM wires share: the text before the cursor as `prompt`, the rest as `suffix`, streamed. */
export const promptSuffixBody = (target: FimTarget, prompt: FimPrompt): Json => ({
  model: target.model,
  prompt: prompt.context + prompt.prefix,
  suffix: prompt.suffix,
  max_tokens: prompt.maxTokens,
  temperature: target.temperature ?? 0,
  ...stopField(prompt.stop),
  stream: true
})

export const decodeError = (provider: string, message: string): FimError =>
  new FimError({ kind: "decode", message: `${provider}: ${message}` })

/** An event's data as a JSON object, or the decode error saying what came instead. */
export const parseEvent = (provider: string, data: string): Json | FimError => {
  let json: unknown
  try {
    json = JSON.parse(data)
  } catch {
    return decodeError(provider, `a stream event is not valid JSON: ${excerpt(data, 200)}`)
  }
  return isObject(json) ? json : decodeError(provider, `a stream event is not a JSON object: ${excerpt(data, 200)}`)
}

/** The error a provider reports inside a 200 stream (`{error:{message}}`, Ollama's `{error:"..."}`), if the event is one. */
export const inStreamError = (provider: string, json: Json): FimError | undefined => {
  const error = json["error"]
  if (error === undefined || error === null) return undefined
  const message = typeof error === "string" ? error : isObject(error) && typeof error["message"] === "string" ? error["message"] : JSON.stringify(error)
  return new FimError({ kind: "http", message: `${provider}: the stream reported an error: ${excerpt(message, 300)}` })
}

/**
 * The decoder of the OpenAI-shaped wires: a delta in `choices[0]` (read by `textOf`), a
 * `finish_reason`, `usage` on any chunk (often a last one with empty `choices`), `[DONE]` last.
 */
export const makeChoiceDecoder = (provider: string, textOf: (choice: Json) => unknown): FimDecoder => {
  let inputTokens = 0
  let outputTokens = 0
  let reason: "stop" | "length" = "stop"
  let answered = false
  let finished = false
  const done = (out: Array<FimEvent>): undefined => {
    finished = true
    out.push(FimEvent.Done({ inputTokens, outputTokens, reason }))
  }
  return {
    push: (data, out) => {
      if (data === "[DONE]") return done(out)
      const json = parseEvent(provider, data)
      if (json instanceof FimError) return json
      const failure = inStreamError(provider, json)
      if (failure !== undefined) return failure
      answered = true
      const usage = json["usage"]
      if (isObject(usage)) {
        inputTokens = count(usage["prompt_tokens"]) ?? inputTokens
        outputTokens = count(usage["completion_tokens"]) ?? outputTokens
      }
      const choices = json["choices"]
      const choice = Array.isArray(choices) ? choices[0] : undefined
      if (isObject(choice)) {
        const text = textOf(choice)
        if (typeof text === "string" && text.length > 0) out.push(FimEvent.Text({ text }))
        if (choice["finish_reason"] === "length") reason = "length"
      }
      return undefined
    },
    // Lenient: some OpenAI-compatible servers close the stream without `[DONE]`; what they
    // answered stands. A body with no event at all is no answer.
    end: (out) => {
      if (!answered) return decodeError(provider, "the stream ended without any event")
      return done(out)
    },
    finished: () => finished
  }
}
