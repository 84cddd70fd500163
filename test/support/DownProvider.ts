/**
 * A model whose primary provider is down, for the console's failure tests: `fake-model` is sent
 * first to `down-openai` (a loopback port nothing listens on: every attempt is refused), with
 * `fake-openai` (the fake provider) as its fallback, which answers. With the harness's retry
 * settings (two retries) each call makes three failed attempts before the fallback answers.
 */
import { Effect } from "effect"
import * as AppHarness from "./AppHarness.js"
import { freePort } from "./ChildServer.js"
import { answer } from "./ConsoleSession.js"
import type { CursorClient } from "./CursorClient.js"
import * as FakeProvider from "./FakeProvider.js"
import { assertCleanOk } from "./Transcripts.js"

export const DOWN = "down-openai"
export const DOWN_UPSTREAM = "primary-upstream"
export const FALLBACK_TARGET = "fake-openai/fake-upstream"
/** Failed attempts per call: the first attempt and the harness's two retries. */
export const FAILED_PER_CALL = AppHarness.testRetry.maxRetries + 1

/** The harness with `fake-model` on a refusing primary and the fake provider as its fallback. */
export const makeApp = Effect.gen(function*() {
  const provider = yield* FakeProvider.make
  const port = yield* Effect.promise(() => freePort())
  const base = AppHarness.fileConfigJson(provider.baseUrl)
  const providers = [...(base["providers"] as ReadonlyArray<unknown>), {
    id: DOWN,
    api: "openai-chat",
    baseUrl: `http://127.0.0.1:${port}/v1`,
    apiKeyEnv: AppHarness.API_KEY_ENV
  }]
  const models = [
    {
      id: "fake-model",
      provider: DOWN,
      upstreamModel: DOWN_UPSTREAM,
      contextWindow: 100000,
      price: { input: 2, output: 8, cacheRead: 0.5 },
      fallback: [{ provider: "fake-openai", upstreamModel: "fake-upstream" }]
    },
    { id: "fake-claude", provider: "fake-anthropic", upstreamModel: "claude-fake", contextWindow: 200000, maxOutputTokens: 4096 }
  ]
  return yield* AppHarness.make({ provider, config: { providers, models } })
})

export const CONVERSATION = "conv-primary-down"

/** Two turns on `CONVERSATION`, each answered by the fallback after the primary refused. */
export const twoTurns = (app: AppHarness.AppHarness, client: CursorClient) =>
  Effect.gen(function*() {
    app.provider.enqueue(answer("The fallback answered.", 900, 0), answer("The fallback again.", 1100, 800))
    const one = yield* Effect.promise(() => client.run({ conversationId: CONVERSATION, text: "Is the primary up?" }))
    assertCleanOk(one)
    const checkpoint = one.checkpoints[one.checkpoints.length - 1]
    const two = yield* Effect.promise(() =>
      client.run({ conversationId: CONVERSATION, text: "And now?", ...(checkpoint === undefined ? {} : { conversationState: checkpoint }) })
    )
    assertCleanOk(two)
  })
