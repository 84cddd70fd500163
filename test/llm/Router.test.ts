import { NodeHttpClient } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer, Redacted, Schema, Stream } from "effect"
import { Llm } from "../../src/Llm.js"
import * as Router from "../../src/llm/Router.js"
import * as Fake from "../support/FakeProvider.js"

describe("Router configuration", () => {
  it.effect("decodes from plain JSON: the key becomes Redacted, optional maps default to empty", () =>
    Effect.gen(function*() {
      const config = yield* Schema.decodeUnknown(Router.RouterConfig)({
        providers: [{ id: "ds", api: "openai-chat", baseUrl: "https://api.deepseek.com/v1", apiKey: "sk-secret" }],
        models: [{ id: "deepseek", provider: "ds", upstreamModel: "deepseek-chat", maxOutputTokens: 8192, thinking: { effort: "high" } }]
      })
      const provider = config.providers[0]!
      expect(Redacted.value(provider.apiKey)).toBe("sk-secret")
      expect(String(provider.apiKey)).not.toContain("sk-secret")
      expect(provider.headers).toEqual({})
      const resolved = Router.resolveModel(config, "deepseek")
      expect(resolved?.adapter.api).toBe("openai-chat")
      expect(resolved?.settings).toMatchObject({ provider: "ds", model: "deepseek-chat", maxOutputTokens: 8192, thinking: { effort: "high" } })
      expect(Router.resolveModel(config, "deepseek", 100)?.settings.maxOutputTokens).toBe(100)
      expect(Router.resolveModel(config, "other")).toBeUndefined()
    }))

  it.effect("rejects an unknown api kind", () =>
    Effect.gen(function*() {
      const result = yield* Effect.either(Schema.decodeUnknown(Router.RouterConfig)({
        providers: [{ id: "x", api: "cohere", baseUrl: "http://x", apiKey: "k" }],
        models: []
      }))
      expect(result._tag).toBe("Left")
    }))

  it.scopedLive("a model whose provider is missing fails with notConfigured; the openai-responses adapter is routed by api", () =>
    Effect.gen(function*() {
      const fake = yield* Fake.make
      fake.enqueue(Fake.sse(Fake.openAiResponses.text("Hi there")))
      const config: Router.RouterConfig = {
        providers: [{ id: "oa", api: "openai-responses", baseUrl: fake.baseUrl, apiKey: Redacted.make("k"), headers: {}, extraBody: {}, compat: {} }],
        models: [{ id: "gpt", provider: "oa", upstreamModel: "gpt-5" }, { id: "orphan", provider: "missing", upstreamModel: "m" }]
      }
      // Built in the test's scope: the dispatcher (its connection pool) lives as long as the test.
      const llm = Context.get(yield* Layer.build(Router.layer(config).pipe(Layer.provide(NodeHttpClient.dispatcherLayer))), Llm)
      const orphan = yield* Effect.either(Stream.runDrain(llm.stream({ systemPrompt: "", messages: [], tools: [] }, { model: "orphan", callId: "c" })))
      expect(orphan._tag === "Left" && orphan.left.reason).toBe("notConfigured")
      const events = yield* Stream.runCollect(llm.stream({ systemPrompt: "s", messages: [{ role: "user", content: [{ type: "text", text: "hi" }] }], tools: [] }, { model: "gpt", callId: "c" }))
      const done = [...events].at(-1)
      expect(done?._tag === "Done" && done.message).toMatchObject({ api: "openai-responses", provider: "oa", model: "gpt-5", stopReason: "stop" })
      expect(JSON.parse(fake.requests[0]!.body)).toMatchObject({ model: "gpt-5", store: false, instructions: "s" })
    }))
})

describe("Router.withoutImages", () => {
  it("turns each image of a user message or tool result into the same line of text, for a model that takes none; a request without images is returned as it is", () => {
    const image = { type: "image" as const, data: "iVBORw0KGgo=", mimeType: "image/png" }
    const request = {
      systemPrompt: "s",
      tools: [],
      messages: [
        { role: "user" as const, content: [image, { type: "text" as const, text: "what is this?" }] },
        { role: "toolResult" as const, toolCallId: "c", toolName: "Read", content: [{ type: "text" as const, text: "x" }, image], isError: false }
      ]
    }
    const sent = Router.withoutImages(request, "deepseek-chat")
    const note = { type: "text", text: "[An image was attached here; the model deepseek-chat does not accept images.]" }
    expect(sent.messages[0]!.content).toEqual([note, { type: "text", text: "what is this?" }])
    expect(sent.messages[1]!.content).toEqual([{ type: "text", text: "x" }, note])
    // Deterministic: the same request gives the same bytes, so prefixes stay stable.
    expect(JSON.stringify(Router.withoutImages(request, "deepseek-chat"))).toEqual(JSON.stringify(sent))
    const plain = { systemPrompt: "s", tools: [], messages: [{ role: "user" as const, content: [{ type: "text" as const, text: "hi" }] }] }
    expect(Router.withoutImages(plain, "m")).toBe(plain)
  })
})
