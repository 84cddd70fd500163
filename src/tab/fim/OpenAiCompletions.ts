/**
 * The OpenAI legacy Completions wire with `suffix` (vLLM, Ollama's `/v1/completions`,
 * DeepSeek's `/beta`): `prompt` before the cursor, `suffix` after it, text deltas in
 * `choices[0].text`.
 */
import { makeChoiceDecoder, promptSuffixBody, type FimWire } from "./Wire.js"

export const wire: FimWire = {
  path: "/completions",
  body: (target, prompt) => ({ ...promptSuffixBody(target, prompt), stream_options: { include_usage: true } }),
  makeDecoder: (provider) => makeChoiceDecoder(provider, (choice) => choice["text"])
}
