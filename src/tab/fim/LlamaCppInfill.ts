/**
 * llama.cpp server's `/infill` wire: the model's own FIM tokens wrap `input_prefix` and
 * `input_suffix`, the context goes in `input_extra`. Events are `{content, stop}`; the last
 * has `stop: true` with the token counts; there is no `[DONE]` (one is accepted).
 */
import { FimError, FimEvent } from "../../Tab.js"
import { count, decodeError, inStreamError, isObject, parseEvent, stopField, type FimDecoder, type FimWire } from "./Wire.js"

const makeDecoder = (provider: string): FimDecoder => {
  let answered = false
  let finished = false
  const done = (out: Array<FimEvent>, inputTokens: number, outputTokens: number, reason: "stop" | "length"): undefined => {
    finished = true
    out.push(FimEvent.Done({ inputTokens, outputTokens, reason }))
  }
  return {
    push: (data, out) => {
      if (data === "[DONE]") return done(out, 0, 0, "stop")
      const json = parseEvent(provider, data)
      if (json instanceof FimError) return json
      const failure = inStreamError(provider, json)
      if (failure !== undefined) return failure
      answered = true
      const content = json["content"]
      if (typeof content === "string" && content.length > 0) out.push(FimEvent.Text({ text: content }))
      if (json["stop"] !== true) return undefined
      // `timings.prompt_n` counts only the tokens not served from the prompt cache: second choice.
      const timings = isObject(json["timings"]) ? json["timings"] : {}
      const inputTokens = count(json["tokens_evaluated"]) ?? count(timings["prompt_n"]) ?? 0
      const outputTokens = count(json["tokens_predicted"]) ?? count(timings["predicted_n"]) ?? 0
      const length = json["stop_type"] === "limit" || json["stopped_limit"] === true
      return done(out, inputTokens, outputTokens, length ? "length" : "stop")
    },
    // A body that ends without `stop: true` still answered what it sent.
    end: (out) => {
      if (!answered) return decodeError(provider, "the stream ended without any event")
      return done(out, 0, 0, "stop")
    },
    finished: () => finished
  }
}

export const wire: FimWire = {
  path: "/infill",
  body: (target, prompt) => ({
    // llama-server ignores it; a proxy in front of several (llama-swap) routes by it.
    ...(target.model !== "" ? { model: target.model } : {}),
    input_prefix: prompt.prefix,
    input_suffix: prompt.suffix,
    ...(prompt.context !== "" ? { input_extra: [{ filename: "context", text: prompt.context }] } : {}),
    prompt: "",
    n_predict: prompt.maxTokens,
    temperature: target.temperature ?? 0,
    ...stopField(prompt.stop),
    stream: true,
    cache_prompt: true
  }),
  makeDecoder
}
