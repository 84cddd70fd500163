/**
 * A fill-in-the-middle call to the user's own completion model: one `FimPrompt` in, a stream
 * of `FimEvent`s out (text deltas, then one `Done`), failing with a `FimError` a user can act
 * on. Three streaming wires cover the servers people run: OpenAI Completions with `suffix`
 * (vLLM, Ollama, DeepSeek beta), Mistral's `/fim/completions` (Codestral) and llama.cpp's
 * `/infill`. Each wire is a file in `fim/`; the HTTP shell is `fim/Http.ts`.
 */
import { Effect, Mailbox, Redacted, Stream } from "effect"
import type * as Undici from "undici"
import { FimError, type FimApi, type FimEvent, type FimPrompt, type FimTarget } from "../Tab.js"
import { open, start } from "./fim/Http.js"
import type { FimCall } from "./fim/Http.js"
import { wire as llamaCppInfill } from "./fim/LlamaCppInfill.js"
import { wire as mistralFim } from "./fim/MistralFim.js"
import { wire as openAiCompletions } from "./fim/OpenAiCompletions.js"
import type { FimWire } from "./fim/Wire.js"

export type { FimApi, FimTarget } from "../Tab.js"

const wires: Readonly<Record<FimApi, FimWire>> = {
  "openai-completions": openAiCompletions,
  "mistral-fim": mistralFim,
  "llamacpp-infill": llamaCppInfill
}

/** `Authorization` when there is a key, then the target's own headers (names lower-cased, theirs win). */
const headersOf = (target: FimTarget): Record<string, string> => {
  const headers: Record<string, string> = { "content-type": "application/json", accept: "text/event-stream" }
  const key = Redacted.value(target.apiKey)
  if (key !== "") headers["authorization"] = `Bearer ${key}`
  for (const [name, value] of Object.entries(target.headers)) headers[name.toLowerCase()] = value
  return headers
}

/** The exact request a call sends (the key in clear, in `authorization`): pure, for tests and the doctor. */
export const requestOf = (target: FimTarget, prompt: FimPrompt): { url: string; headers: Record<string, string>; body: string } => {
  const wire = wires[target.api]
  return {
    url: target.baseUrl.replace(/\/+$/, "") + wire.path,
    headers: headersOf(target),
    body: JSON.stringify(wire.body(target, prompt))
  }
}

const configError = (target: FimTarget, message: string) => new FimError({ kind: "config", message: `${target.provider}: ${message}` })

/** The prepared call of `prompt` to `target`: its wire, URL, headers and body, or a config error. */
const callOf = (target: FimTarget, prompt: FimPrompt): FimCall | FimError => {
  const wire = wires[target.api] as FimWire | undefined
  if (wire === undefined) return configError(target, `unknown tab.api "${String(target.api)}" (openai-completions, mistral-fim or llamacpp-infill)`)
  const request = requestOf(target, prompt)
  let url: URL
  try {
    url = new URL(request.url)
  } catch {
    return configError(target, `the base URL "${target.baseUrl}" is not a URL`)
  }
  return { target, url, headers: request.headers, body: request.body, decoder: wire.makeDecoder(target.provider) }
}

/**
 * One FIM call as a stream of `FimEvent` (`Text` deltas, then exactly one `Done`), failing
 * with `FimError`. Interrupting the stream's consumer aborts the HTTP request at once (the
 * provider sees the connection closed).
 */
export const stream = (dispatcher: Undici.Dispatcher, target: FimTarget, prompt: FimPrompt): Stream.Stream<FimEvent, FimError> =>
  Stream.unwrapScoped(Effect.suspend(() => {
    const call = callOf(target, prompt)
    return call instanceof FimError ? Effect.fail(call) : Effect.map(open(dispatcher, call), Mailbox.toStream)
  }))

/**
 * One FIM call with its events handed to `onEvents` in the network read that brought them
 * (the Tab service's path: no stream, no fiber, from the request to the provider and back);
 * succeeds at the call's end, fails with its `FimError`; interrupting it aborts the request.
 */
export const run = (
  dispatcher: Undici.Dispatcher,
  target: FimTarget,
  prompt: FimPrompt,
  onEvents: (events: ReadonlyArray<FimEvent>) => void,
  /** Told how to abort the request at once, in the caller's own call (a supersede need not wait for the fiber's interruption). */
  onAbort?: (abort: () => void) => void
): Effect.Effect<void, FimError> =>
  Effect.async<void, FimError>((resume) => {
    const call = callOf(target, prompt)
    if (call instanceof FimError) return resume(Effect.fail(call))
    let ended: FimError | "ok" | undefined
    let handle: ReturnType<typeof start> | undefined = undefined
    handle = start(dispatcher, call, {
      events: onEvents,
      done: (error) => {
        if (ended !== undefined) return
        ended = error ?? "ok"
        // Closed at its end: drained when whole, so the connection serves the next call.
        handle?.close()
        resume(error === undefined ? Effect.void : Effect.fail(error))
      }
    })
    // Ended within `start` (a request undici refused at once): closed now that the handle exists.
    if (ended !== undefined) handle?.close()
    else onAbort?.(() => {
      if (ended !== undefined) return
      ended = "ok"
      handle?.close()
    })
    return Effect.sync(() => {
      if (ended !== undefined) return
      ended = "ok"
      handle?.close()
    })
  })
