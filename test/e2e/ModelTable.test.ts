/**
 * The model table end to end on the real server: a run request naming one of Cursor's own model
 * ids reaches the configured model through an alias; a committed call's cost (cache reads at
 * their price) is stored with the call, summed per turn and conversation, and exported in
 * `/metrics`; a broken table stops the server with the field named.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import * as Config from "../../src/Config.js"
import * as AppHarness from "../support/AppHarness.js"
import { CursorClient } from "../support/CursorClient.js"
import * as FakeProvider from "../support/FakeProvider.js"
import { assertCleanOk } from "../support/Transcripts.js"

const PRICED = {
  models: [{
    id: "fake-model",
    provider: "fake-openai",
    upstreamModel: "fake-upstream",
    contextWindow: 100000,
    price: { input: 2, output: 8, cacheRead: 0.5 }
  }],
  aliases: { "claude-4.5-sonnet-thinking": "fake-model" }
}

/** A text answer whose usage says 800 of its 1,000 prompt tokens came from the cache. */
const cachedAnswer = (text: string) => [
  FakeProvider.openAiChat.chunk({ role: "assistant", content: "" }),
  FakeProvider.openAiChat.chunk({ content: text }),
  FakeProvider.openAiChat.chunk({}, "stop"),
  FakeProvider.event({ id: "chatcmpl-fake", model: "fake-upstream", choices: [], usage: { prompt_tokens: 1000, completion_tokens: 100, prompt_tokens_details: { cached_tokens: 800 } } }),
  "data: [DONE]\n\n"
]

describe("the model table on the real server", () => {
  it.scopedLive("an alias in the run request reaches its model; the call's cost is stored, summed and in /metrics", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: PRICED })
      app.provider.enqueue(FakeProvider.sse(cachedAnswer("first")), FakeProvider.sse(cachedAnswer("second")))
      const client = yield* Effect.acquireRelease(Effect.sync(() => new CursorClient({ baseUrl: app.baseUrl })), (c) => Effect.sync(() => c.close()))
      for (const text of ["one", "two"]) {
        const transcript = yield* Effect.promise(() => client.run({ conversationId: "conv-cost", text, model: "claude-4.5-sonnet-thinking" }))
        assertCleanOk(transcript)
      }
      assert.deepStrictEqual(app.provider.requests.map((r) => (JSON.parse(r.body) as { model: string }).model), ["fake-upstream", "fake-upstream"])
      // (200 uncached input × 2 + 100 output × 8 + 800 cache reads × 0.5) per million tokens.
      const perCall = (200 * 2 + 100 * 8 + 800 * 0.5) / 1_000_000
      const costs = yield* app.store.costs("conv-cost")
      assert.strictEqual(costs.calls, 2)
      assert.strictEqual(costs.pricedCalls, 2)
      assert.strictEqual(costs.turns.length, 2)
      assert.closeTo(costs.usd, 2 * perCall, 1e-12)
      assert.closeTo(costs.turns[0]!.usd, perCall, 1e-12)
      const metrics = yield* Effect.promise(async () => (await fetch(`${app.baseUrl}/metrics`)).text())
      const line = metrics.split("\n").find((l) => l.startsWith("byok_cost_usd_total{model=\"fake-model\"}"))
      assert.isDefined(line, metrics)
      assert.isAtLeast(Number(line!.split(" ")[1]), 2 * perCall - 1e-12)
    }))

  it("a broken model table stops the server and names the field", () => {
    const problem = (overrides: Record<string, unknown>) => {
      const file = Schema.decodeUnknownSync(Config.FileConfig)({ ...AppHarness.fileConfigJson("http://127.0.0.1:1/v1"), ...overrides })
      const config = Config.resolve(file, {})
      return Effect.runSync(Effect.flip(Config.validate(config, {}))).message
    }
    const models = (AppHarness.fileConfigJson("http://127.0.0.1:1/v1")["models"] as Array<Record<string, unknown>>)
    assert.include(problem({ aliases: { auto: "no-such-model" } }), `aliases.auto: names model "no-such-model", which is not configured`)
    assert.include(problem({ aliases: { "fake-model": "fake-claude" } }), `aliases["fake-model"]: fake-model is a configured model id`)
    assert.include(problem({ aliases: { a: "fake-model", b: "a" } }), "it is an alias")
    assert.include(
      problem({ models: [{ ...models[0], fallback: [{ provider: "nowhere", upstreamModel: "x" }] }] }),
      `models[0].fallback[0].provider: names provider "nowhere", which is not configured`
    )
    assert.include(
      problem({ models: [{ ...models[0], fallback: [{ provider: "fake-anthropic", upstreamModel: "x" }, { provider: "fake-anthropic", upstreamModel: "x" }] }] }),
      "repeats fake-anthropic/x: a fallback loop"
    )
    assert.include(
      problem({ models: [{ ...models[0], fallback: [{ provider: "fake-openai", upstreamModel: "fake-upstream" }] }] }),
      "a fallback loop"
    )
    const negative = Effect.runSync(Effect.flip(Config.decodeFile("byok.config.json", JSON.stringify({ models: [{ ...models[0], price: { input: -1, output: 1 } }] }))))
    assert.include(negative.message, "price")
    assert.include(negative.message, "input")
  })
})
