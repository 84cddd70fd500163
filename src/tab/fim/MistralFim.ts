/**
 * Mistral's FIM wire (Codestral, `/v1/fim/completions`): `prompt` and `suffix` in, chat-like
 * chunks out (`choices[0].delta.content`), `usage` on the last chunk, `[DONE]` at the end.
 */
import { isObject, makeChoiceDecoder, promptSuffixBody, type FimWire } from "./Wire.js"

export const wire: FimWire = {
  path: "/fim/completions",
  body: promptSuffixBody,
  makeDecoder: (provider) =>
    makeChoiceDecoder(provider, (choice) => {
      const delta = choice["delta"]
      return isObject(delta) ? delta["content"] : undefined
    })
}
