/**
 * Mistral's FIM wire (Codestral, `/v1/fim/completions`): `prompt` and `suffix` in, chat-like
 * chunks out (`choices[0].delta.content`), `usage` on the last chunk, `[DONE]` at the end.
 */
import { isObject, makeChoiceDecoder, stopField, type FimWire } from "./Wire.js"

export const wire: FimWire = {
  path: "/fim/completions",
  body: (target, prompt) => ({
    model: target.model,
    prompt: prompt.context + prompt.prefix,
    suffix: prompt.suffix,
    max_tokens: prompt.maxTokens,
    temperature: target.temperature ?? 0,
    ...stopField(prompt.stop),
    stream: true
  }),
  makeDecoder: (provider) =>
    makeChoiceDecoder(provider, (choice) => {
      const delta = choice["delta"]
      return isObject(delta) ? delta["content"] : undefined
    })
}
