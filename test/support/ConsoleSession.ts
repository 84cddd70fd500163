/**
 * A scripted session for the console's tests (and the README's screenshot): the real server
 * with a priced model, two conversations on the fake provider: one of three turns whose third
 * changes the custom system prompt (a prefix break in the system prompt), one short; and a slow
 * turn to watch while it streams.
 */
import { assert } from "@effect/vitest"
import { Effect } from "effect"
import type { ConversationStateStructure } from "../../src/gen/agent/v1/agent_pb.js"
import * as AppHarness from "./AppHarness.js"
import type { CursorClient, Transcript } from "./CursorClient.js"
import * as FakeProvider from "./FakeProvider.js"
import { assertCleanOk } from "./Transcripts.js"

const { chunk } = FakeProvider.openAiChat
const DONE = "data: [DONE]\n\n"

/** Top-level configuration for the console's harness: `fake-model` priced, so calls have a cost. */
export const consoleConfig = (overrides: Record<string, unknown> = {}): Record<string, unknown> => ({
  models: [
    { id: "fake-model", provider: "fake-openai", upstreamModel: "fake-upstream", contextWindow: 100000, price: { input: 2, output: 8, cacheRead: 0.5 } },
    { id: "fake-claude", provider: "fake-anthropic", upstreamModel: "claude-fake", contextWindow: 200000, maxOutputTokens: 4096 }
  ],
  ...overrides
})

/** An OpenAI Chat text answer with usage: `prompt` tokens of which `cached` were read from the cache. */
export const answer = (text: string, prompt: number, cached: number, completion = 12) =>
  FakeProvider.sse([
    chunk({ role: "assistant", content: "" }),
    chunk({ content: text }),
    chunk({}, "stop"),
    FakeProvider.event({
      id: "chatcmpl-fake",
      model: "fake-model",
      choices: [],
      usage: { prompt_tokens: prompt, completion_tokens: completion, prompt_tokens_details: { cached_tokens: cached } }
    }),
    DONE
  ])

export const lastCheckpoint = (transcript: Transcript): ConversationStateStructure => {
  const checkpoint = transcript.checkpoints[transcript.checkpoints.length - 1]
  assert.isDefined(checkpoint, "the turn published no checkpoint")
  return checkpoint!
}

export const CONVERSATION = "conv-console-main"
export const OTHER = "conv-console-other"
export const TITLE = "How is this project built and tested?"
export const PROMPT_A = "Answer briefly."
export const PROMPT_B = "Answer briefly, in French."

/** Three turns on `CONVERSATION` (the third with another custom prompt) and one on `OTHER`. */
export const scriptSession = (app: AppHarness.AppHarness, client: CursorClient) =>
  Effect.gen(function*() {
    app.provider.enqueue(
      answer("It is bundled with esbuild.", 1200, 0),
      answer("Tests run with vitest.", 1400, 1100),
      answer("Le serveur est en TypeScript.", 1600, 0),
      answer("Hello!", 300, 0)
    )
    const one = yield* Effect.promise(() => client.run({ conversationId: CONVERSATION, text: TITLE, customSystemPrompt: PROMPT_A }))
    assertCleanOk(one)
    const two = yield* Effect.promise(() =>
      client.run({ conversationId: CONVERSATION, text: "And the tests?", customSystemPrompt: PROMPT_A, conversationState: lastCheckpoint(one) })
    )
    assertCleanOk(two)
    const three = yield* Effect.promise(() =>
      client.run({ conversationId: CONVERSATION, text: "In which language is it written?", customSystemPrompt: PROMPT_B, conversationState: lastCheckpoint(two) })
    )
    assertCleanOk(three)
    const other = yield* Effect.promise(() => client.run({ conversationId: OTHER, text: "Say hello" }))
    assertCleanOk(other)
    return { three }
  })

/** The first differing UTF-8 byte of two system prompts, computed from what the provider received (JSON-quoted, as requests compare them). */
export const expectedBreakByte = (app: AppHarness.AppHarness, before: number, after: number): number => {
  const systemOf = (index: number) => {
    const body = JSON.parse(app.provider.requests[index]!.body) as { readonly messages: ReadonlyArray<{ readonly role: string; readonly content: string }> }
    const system = body.messages.find((m) => m.role === "system")
    assert.isDefined(system, "no system message in the request")
    return JSON.stringify(system!.content)
  }
  const a = systemOf(before)
  const b = systemOf(after)
  let at = 0
  while (at < a.length && at < b.length && a.charCodeAt(at) === b.charCodeAt(at)) at++
  assert.isBelow(at, Math.min(a.length, b.length), "the two system prompts do not differ")
  return Buffer.byteLength(a.slice(0, at), "utf8")
}

/** GET a console path on the app (loopback), with optional headers; the status and the body. */
export const get = (app: AppHarness.AppHarness, path: string, headers: Record<string, string> = {}) =>
  Effect.promise(async () => {
    const response = await fetch(`${app.baseUrl}${path}`, { headers })
    return { status: response.status, body: await response.text(), headers: response.headers }
  })
