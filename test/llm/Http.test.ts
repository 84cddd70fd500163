/**
 * The HTTP shells end to end against the loopback fake provider: routing, retries before the
 * first event with identical bytes, no retry after it, fail-fast on long Retry-After, typed
 * errors, and the idle timeout. Small configured delays keep it fast; nothing asserts a duration.
 */
import { NodeHttpClient } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Effect, Either, Layer, Redacted, Stream } from "effect"
import { Llm, type RequestMessages, type ResponseEvent } from "../../src/Llm.js"
import { llmError } from "../../src/llm/Common.js"
import * as Http from "../../src/llm/Http.js"
import * as Router from "../../src/llm/Router.js"
import * as Fake from "../support/FakeProvider.js"

const retry = { maxRetries: 3, initialDelayMs: 1, maxDelayMs: 5, maxRetryAfterMs: 1_000, jitter: 0.2, idleTimeoutMs: 400 }

const configFor = (provider: Fake.FakeProvider, overrides: Partial<typeof retry> = {}): Router.RouterConfig => ({
  providers: [
    { id: "chat", api: "openai-chat", baseUrl: provider.baseUrl, apiKey: Redacted.make("sk-chat"), headers: { "x-extra": "1" }, extraBody: { temperature: 0 }, compat: {} },
    { id: "claude", api: "anthropic", baseUrl: provider.baseUrl, apiKey: Redacted.make("sk-ant"), headers: {}, extraBody: {}, compat: {} },
    { id: "google", api: "gemini", baseUrl: `${provider.url}/v1beta`, apiKey: Redacted.make("g-key"), headers: {}, extraBody: {}, compat: {} },
    { id: "resp", api: "openai-responses", baseUrl: provider.baseUrl, apiKey: Redacted.make("sk-resp"), headers: {}, extraBody: {}, compat: {} }
  ],
  models: [
    { id: "chat-model", provider: "chat", upstreamModel: "up-chat" },
    { id: "claude-model", provider: "claude", upstreamModel: "up-claude", maxOutputTokens: 100 },
    { id: "gemini-model", provider: "google", upstreamModel: "up-gemini" },
    { id: "resp-model", provider: "resp", upstreamModel: "up-resp" }
  ],
  retry: { ...retry, ...overrides }
})

const request: RequestMessages = {
  systemPrompt: "Be brief.",
  messages: [{ role: "user", content: [{ type: "text", text: "Hi" }] }],
  tools: []
}

/** Runs one call through the router layer; returns the events seen and how the stream ended. */
const call = (provider: Fake.FakeProvider, model: string, overrides: Partial<typeof retry> = {}) =>
  Effect.gen(function*() {
    const llm = yield* Llm
    const events: Array<ResponseEvent> = []
    const outcome = yield* llm.stream(request, { model, callId: "call-1" }).pipe(
      Stream.tap((event) => Effect.sync(() => events.push(event))),
      Stream.runDrain,
      Effect.either
    )
    return { events, error: Either.isLeft(outcome) ? outcome.left : undefined }
  }).pipe(Effect.provide(Router.layer(configFor(provider, overrides)).pipe(Layer.provide(NodeHttpClient.dispatcherLayer))))

const tags = (events: ReadonlyArray<ResponseEvent>) => events.map((event) => event._tag)

describe("HTTP shell via the router", () => {
  it.scopedLive("openai-chat: streams a text answer; the request carries the key, extra headers and body fields", () =>
    Effect.gen(function*() {
      const provider = yield* Fake.make
      provider.enqueue(Fake.sse(Fake.openAiChat.text("Hello there")))
      const { events, error } = yield* call(provider, "chat-model")
      expect(error).toBeUndefined()
      expect(tags(events)).toEqual(["Start", "TextStart", "TextDelta", "TextDelta", "TextDelta", "TextEnd", "Done"])
      const done = events.at(-1)
      expect(done?._tag === "Done" && done.message.content).toEqual([{ type: "text", text: "Hello there" }])
      const [recorded] = provider.requests
      expect(recorded?.path).toBe("/v1/chat/completions")
      expect(recorded?.headers["authorization"]).toBe("Bearer sk-chat")
      expect(recorded?.headers["x-extra"]).toBe("1")
      const body = JSON.parse(recorded?.body ?? "{}")
      expect(body).toMatchObject({ model: "up-chat", stream: true, temperature: 0, stream_options: { include_usage: true } })
      expect(body.messages).toEqual([{ role: "system", content: "Be brief." }, { role: "user", content: "Hi" }])
    }))

  it.scopedLive("retries 429 (Retry-After), 503 and a dropped connection before the first event, with identical bytes", () =>
    Effect.gen(function*() {
      const provider = yield* Fake.make
      provider.enqueue(
        Fake.status(429, { error: { message: "Rate limit", type: "requests", code: "rate_limit_exceeded" } }, { "retry-after": "0" }),
        Fake.status(503, { error: { message: "unavailable" } }),
        Fake.drop,
        Fake.sse(Fake.openAiChat.text("ok"))
      )
      const { events, error } = yield* call(provider, "chat-model")
      expect(error).toBeUndefined()
      expect(events.at(-1)?._tag).toBe("Done")
      expect(provider.requests).toHaveLength(4)
      expect(new Set(provider.requests.map((recorded) => recorded.body)).size).toBe(1)
    }))

  it.scopedLive("a connection dropped after the first bytes but before any content is retried", () =>
    Effect.gen(function*() {
      const provider = yield* Fake.make
      provider.enqueue(Fake.sse([Fake.openAiChat.chunk({ role: "assistant", content: "" })], { end: "drop" }), Fake.sse(Fake.openAiChat.text("fine")))
      const { events, error } = yield* call(provider, "chat-model")
      expect(error).toBeUndefined()
      expect(tags(events).filter((tag) => tag === "Start")).toHaveLength(1)
      expect(provider.requests).toHaveLength(2)
    }))

  it.scopedLive("no retry once content was emitted: a drop mid-answer ends the stream with a network error", () =>
    Effect.gen(function*() {
      const provider = yield* Fake.make
      provider.enqueue(Fake.sse([Fake.openAiChat.chunk({ content: "Half" })], { end: "drop" }), Fake.sse(Fake.openAiChat.text("unused")))
      const { events, error } = yield* call(provider, "chat-model")
      expect(tags(events)).toEqual(["Start", "TextStart", "TextDelta"])
      expect(error?.reason).toBe("network")
      expect(provider.requests).toHaveLength(1)
      expect(provider.pending()).toBe(1)
    }))

  it.scopedLive("anthropic: overloaded_error right after message_start is retried; after content it is not", () =>
    Effect.gen(function*() {
      const provider = yield* Fake.make
      provider.enqueue(
        Fake.sse([Fake.anthropic.start(), Fake.anthropic.error("overloaded_error", "Overloaded")]),
        Fake.status(529, { type: "error", error: { type: "overloaded_error", message: "Overloaded" } }),
        Fake.sse(Fake.anthropic.text("Hello"))
      )
      const first = yield* call(provider, "claude-model")
      expect(first.error).toBeUndefined()
      expect(first.events.at(-1)?._tag).toBe("Done")
      expect(provider.requests).toHaveLength(3)
      expect(provider.requests[0]?.path).toBe("/v1/messages")
      expect(provider.requests[0]?.headers["x-api-key"]).toBe("sk-ant")
      expect(provider.requests[0]?.headers["anthropic-version"]).toBe("2023-06-01")
      expect(JSON.parse(provider.requests[0]?.body ?? "{}").max_tokens).toBe(100)

      const text = Fake.anthropic.text("Hello")
      provider.enqueue(Fake.sse([...text.slice(0, 3), Fake.anthropic.error("overloaded_error", "Overloaded")]), Fake.sse(text))
      const second = yield* call(provider, "claude-model")
      expect(second.error?.reason).toBe("overloaded")
      expect(tags(second.events)).toEqual(["Start", "TextStart", "TextDelta"])
      expect(provider.requests).toHaveLength(4)
    }))

  it.scopedLive("gemini: 429 with RetryInfo is retried, on the streamGenerateContent?alt=sse URL with the key header", () =>
    Effect.gen(function*() {
      const provider = yield* Fake.make
      provider.enqueue(
        Fake.status(429, { error: { code: 429, message: "Quota", status: "RESOURCE_EXHAUSTED", details: [{ "@type": "type.googleapis.com/google.rpc.RetryInfo", retryDelay: "0.01s" }] } }),
        Fake.sse(Fake.gemini.text("Paris"))
      )
      const { events, error } = yield* call(provider, "gemini-model")
      expect(error).toBeUndefined()
      expect(events.at(-1)?._tag).toBe("Done")
      expect(provider.requests.map((recorded) => recorded.path)).toEqual([
        "/v1beta/models/up-gemini:streamGenerateContent?alt=sse",
        "/v1beta/models/up-gemini:streamGenerateContent?alt=sse"
      ])
      expect(provider.requests[0]?.headers["x-goog-api-key"]).toBe("g-key")
      expect(provider.requests[0]?.body).toBe(provider.requests[1]?.body)
    }))

  it.scopedLive("a server delay above the cap fails fast and names the delay", () =>
    Effect.gen(function*() {
      const provider = yield* Fake.make
      provider.enqueue(Fake.status(429, { error: { message: "Rate limit" } }, { "retry-after": "3600" }))
      const { error } = yield* call(provider, "chat-model")
      expect(error?.reason).toBe("rateLimited")
      expect(error?.retryable).toBe(false)
      expect(error?.message).toContain("3600000 ms")
      expect(provider.requests).toHaveLength(1)
    }))

  it.scopedLive("typed errors without retries: 401 auth, 400 overflow, 400 bad request with the provider's message, 429 insufficient_quota", () =>
    Effect.gen(function*() {
      const provider = yield* Fake.make
      provider.enqueue(
        Fake.status(401, { error: { message: "Incorrect API key", type: "invalid_request_error" } }),
        Fake.status(400, { type: "error", error: { type: "invalid_request_error", message: "prompt is too long: 210000 tokens > 200000 maximum" } }),
        Fake.status(400, { error: { message: "Unknown parameter: 'foo'", type: "invalid_request_error" } }),
        Fake.status(429, { error: { message: "You exceeded your current quota", type: "insufficient_quota", code: "insufficient_quota" } })
      )
      const auth = yield* call(provider, "chat-model")
      const overflow = yield* call(provider, "claude-model")
      const bad = yield* call(provider, "chat-model")
      const quota = yield* call(provider, "chat-model")
      expect([auth.error?.reason, overflow.error?.reason, bad.error?.reason, quota.error?.reason]).toEqual(["auth", "contextOverflow", "badRequest", "rateLimited"])
      expect(bad.error?.message).toContain("Unknown parameter: 'foo'")
      expect(bad.error?.status).toBe(400)
      expect(auth.error?.message).not.toContain("sk-chat")
      expect(provider.requests).toHaveLength(4)
    }))

  it.scopedLive("retries stop after maxRetries with the last error", () =>
    Effect.gen(function*() {
      const provider = yield* Fake.make
      provider.setFallback(() => Fake.status(500, { error: { message: "boom" } }))
      const { error } = yield* call(provider, "resp-model", { maxRetries: 2 })
      expect(error?.reason).toBe("providerError")
      expect(error?.retryable).toBe(true)
      expect(provider.requests).toHaveLength(3)
      expect(provider.requests[0]?.path).toBe("/v1/responses")
    }))

  it.scopedLive("the idle timeout ends a stream that goes silent after content", () =>
    Effect.gen(function*() {
      const provider = yield* Fake.make
      provider.enqueue(Fake.sse([Fake.openAiChat.chunk({ content: "Hel" })], { end: "stall" }))
      const { events, error } = yield* call(provider, "chat-model", { idleTimeoutMs: 300 })
      expect(tags(events)).toEqual(["Start", "TextStart", "TextDelta"])
      expect(error?.reason).toBe("idleTimeout")
      expect(provider.requests).toHaveLength(1)
    }))

  it.scopedLive("a provider that never answers times out and is retried (the retry then succeeds)", () =>
    Effect.gen(function*() {
      const provider = yield* Fake.make
      provider.enqueue(Fake.stall, Fake.sse(Fake.openAiChat.text("late")))
      const { events, error } = yield* call(provider, "chat-model", { idleTimeoutMs: 300 })
      expect(error).toBeUndefined()
      expect(events.at(-1)?._tag).toBe("Done")
      expect(provider.requests).toHaveLength(2)
    }))

  it.scopedLive("an unknown model fails with notConfigured", () =>
    Effect.gen(function*() {
      const provider = yield* Fake.make
      const { error } = yield* call(provider, "nope")
      expect(error?.reason).toBe("notConfigured")
      expect(error?.message).toBe("no provider configured for model nope")
      expect(provider.requests).toHaveLength(0)
    }))

  it.scopedLive("the stream pauses between steps without losing events (chunks arrive over time)", () =>
    Effect.gen(function*() {
      const provider = yield* Fake.make
      const steps = Fake.openAiChat.text("abcdef", 3).flatMap((step) => [step, { delayMs: 5 }])
      provider.enqueue(Fake.sse(steps))
      const { events, error } = yield* call(provider, "chat-model")
      expect(error).toBeUndefined()
      const done = events.at(-1)
      expect(done?._tag === "Done" && done.message.content).toEqual([{ type: "text", text: "abcdef" }])
      expect(Chunk.size(Chunk.fromIterable(events))).toBe(7)
    }))
})

describe("retry delays", () => {
  const settings = { maxRetries: 5, initialDelayMs: 100, maxDelayMs: 500, maxRetryAfterMs: 10_000, jitter: 0, idleTimeoutMs: 1_000 }
  const error = (retryAfterMs?: number) =>
    llmError("providerError", "boom", { retryable: true, ...(retryAfterMs !== undefined ? { retryAfterMs } : {}) })

  it.effect("grow exponentially up to the cap", () =>
    Effect.gen(function*() {
      const delays = yield* Effect.forEach([0, 1, 2, 3, 4], (retry) => Http.retryDelay(error(), retry, settings))
      expect(delays).toEqual([100, 200, 400, 500, 500])
    }))

  it.effect("stay within the jitter band", () =>
    Effect.gen(function*() {
      const delays = yield* Effect.forEach(Array.from({ length: 50 }, (_, i) => i % 3), (retry) => Http.retryDelay(error(), retry, { ...settings, jitter: 0.2 }))
      delays.forEach((delay, i) => {
        const base = [100, 200, 400][i % 3]!
        expect(delay).toBeGreaterThanOrEqual(base * 0.8)
        expect(delay).toBeLessThanOrEqual(base * 1.2)
      })
    }))

  it.effect("use the server's delay when it gives one, and refuse one above the cap", () =>
    Effect.gen(function*() {
      expect(yield* Http.retryDelay(error(3_000), 0, settings)).toBe(3_000)
      const refused = yield* Effect.flip(Http.retryDelay(error(20_000), 0, settings))
      expect(refused.retryable).toBe(false)
      expect(refused.message).toContain("20000 ms")
    }))
})
