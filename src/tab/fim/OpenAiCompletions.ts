/**
 * The OpenAI legacy Completions wire with `suffix` (vLLM, Ollama's `/v1/completions`,
 * DeepSeek's `/beta`): `prompt` before the cursor, `suffix` after it, text deltas in
 * `choices[0].text`.
 */
import { makeChoiceDecoder, stopField, type FimWire } from "./Wire.js"

export const wire: FimWire = {
  path: "/completions",
  body: (target, prompt) => ({
    model: target.model,
    prompt: prompt.context + prompt.prefix,
    suffix: prompt.suffix,
    max_tokens: prompt.maxTokens,
    temperature: target.temperature ?? 0,
    ...stopField(prompt.stop),
    stream: true,
    stream_options: { include_usage: true }
  }),
  makeDecoder: (provider) => makeChoiceDecoder(provider, (choice) => choice["text"])
}
