/**
 * The router's model table beyond one provider per model: aliases (Cursor's own model ids, and
 * `*` for any other) resolve to configured models; a model's fallback targets are tried in
 * order while nothing has come from the one before, and never once something has; prices turn a
 * call's usage into USD by the target that answered.
 */
import { NodeHttpClient } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Redacted, Stream } from "effect"
import type { AssistantMessage, FailedAttempt, ResponseEvent } from "../../src/Llm.js"
import { Llm } from "../../src/Llm.js"
import * as Router from "../../src/llm/Router.js"
import * as Fake from "../support/FakeProvider.js"

const provider = (id: string, baseUrl: string): Router.ProviderConfig => ({ id, api: "openai-chat", baseUrl, apiKey: Redacted.make("k"), headers: {}, extraBody: {}, compat: {} })

const retry = { maxRetries: 1, initialDelayMs: 1, maxDelayMs: 2, maxRetryAfterMs: 10, jitter: 0, idleTimeoutMs: 2_000 }

const configOn = (baseUrl: string): Router.RouterConfig => ({
  providers: [provider("first", baseUrl), provider("second", baseUrl)],
  models: [{
    id: "m",
    provider: "first",
    upstreamModel: "first-model",
    price: { input: 2, output: 8, cacheRead: 0.5 },
    fallback: [{ provider: "second", upstreamModel: "second-model", price: { input: 1, output: 4 } }]
  }, { id: "other", provider: "second", upstreamModel: "other-model" }],
  aliases: { "cursor-auto": "m", "*": "other" },
  retry
})

const request = { systemPrompt: "s", messages: [{ role: "user" as const, content: [{ type: "text" as const, text: "hi" }] }], tools: [] }

/**
 * The call's events as they came, and how it ended; with `fastPath`, as the runner asks for
 * them (`onEvents`: the answer's events come to the callback, the stream only ends or fails).
 */
const run = (config: Router.RouterConfig, model: string, fastPath = false) =>
  Effect.gen(function*() {
    const llm = yield* Llm
    const seen: Array<ResponseEvent> = []
    const options = { model, callId: "conv-1/t1/c1", ...(fastPath ? { onEvents: (events: ReadonlyArray<ResponseEvent>) => void seen.push(...events) } : {}) }
    const ended = yield* Effect.either(Stream.runForEach(llm.stream(request, options), (event) => Effect.sync(() => seen.push(event))))
    return ended._tag === "Right" ? { _tag: "Right" as const, right: seen } : { _tag: "Left" as const, left: ended.left, seen }
  }).pipe(Effect.provide(Router.layer(config).pipe(Layer.provide(NodeHttpClient.dispatcherLayer))))

const modelsAsked = (fake: Fake.FakeProvider) => fake.requests.map((r) => (JSON.parse(r.body) as { model: string }).model)
const doneOf = (events: ReadonlyArray<ResponseEvent>) => events.find((e): e is Extract<ResponseEvent, { _tag: "Done" }> => e._tag === "Done")

describe("aliases", () => {
  it("a configured id, an alias, and `*` for any other id each name a configured model", () => {
    const config = configOn("http://127.0.0.1:1/v1")
    expect(Router.modelOf(config, "m")?.id).toBe("m")
    expect(Router.modelOf(config, "cursor-auto")?.id).toBe("m")
    expect(Router.modelOf(config, "claude-4.5-sonnet-thinking")?.id).toBe("other")
    expect(Router.modelOf({ ...config, aliases: {} }, "claude-4.5-sonnet-thinking")).toBeUndefined()
    // A request that names no model (Cursor's Auto may send none) goes to the default model, or the first.
    expect(Router.modelOf(config, "")?.id).toBe("m")
    expect(Router.modelOf({ ...config, defaultModel: "other" }, "")?.id).toBe("other")
    expect(Router.resolveTargets(config, "cursor-auto").map((t) => `${t.settings.provider}/${t.settings.model}`)).toEqual(["first/first-model", "second/second-model"])
  })

  it.scopedLive("a call for an alias goes to its model's provider", () =>
    Effect.gen(function*() {
      const fake = yield* Fake.make
      fake.enqueue(Fake.sse(Fake.openAiChat.text("hello")))
      const result = yield* run(configOn(fake.baseUrl), "cursor-auto")
      expect(result._tag).toBe("Right")
      expect(modelsAsked(fake)).toEqual(["first-model"])
    }))
})

describe.each([["on the stream", false], ["through the fast path callback", true]] as const)("ordered fallback, events %s", (_, fastPath) => {
  it.scopedLive("the first target answers 503 before any byte (retries spent): the second answers, and the answer says which target it was", () =>
    Effect.gen(function*() {
      const fake = yield* Fake.make
      fake.enqueue(Fake.status(503, { error: { message: "overloaded" } }), Fake.status(503, { error: { message: "overloaded" } }), Fake.sse(Fake.openAiChat.text("from the second")))
      const result = yield* run(configOn(fake.baseUrl), "m", fastPath)
      expect(result._tag).toBe("Right")
      expect(modelsAsked(fake)).toEqual(["first-model", "first-model", "second-model"])
      const events = result._tag === "Right" ? result.right : []
      const done = doneOf(events)
      expect(done?.message).toMatchObject({ provider: "second", model: "second-model" })
      // One Start reaches the caller, before the content.
      expect(events.filter((e) => e._tag === "Start")).toHaveLength(1)
      expect(events[0]?._tag).toBe("Start")
    }))

  it.scopedLive("a bad key on the first target (401, not retried) also falls back", () =>
    Effect.gen(function*() {
      const fake = yield* Fake.make
      fake.enqueue(Fake.status(401, { error: { message: "bad key" } }), Fake.sse(Fake.openAiChat.text("ok")))
      const result = yield* run(configOn(fake.baseUrl), "m", fastPath)
      expect(result._tag).toBe("Right")
      expect(modelsAsked(fake)).toEqual(["first-model", "second-model"])
    }))

  it.scopedLive("the first target drops after its first bytes: a readable error, no switch to the second", () =>
    Effect.gen(function*() {
      const fake = yield* Fake.make
      const partial = Fake.openAiChat.text("this answer is cut off", 4).slice(0, 3)
      fake.enqueue(Fake.sse(partial, { end: "drop" }), Fake.sse(Fake.openAiChat.text("must not be asked")))
      const result = yield* run(configOn(fake.baseUrl), "m", fastPath)
      expect(result._tag).toBe("Left")
      expect(result._tag === "Left" && result.left.message).toContain("connection failed")
      expect(result._tag === "Left" && result.seen.some((e) => e._tag === "TextDelta")).toBe(true)
      expect(modelsAsked(fake)).toEqual(["first-model"])
    }))

  it.scopedLive("a retried attempt's answer says how many attempts it took", () =>
    Effect.gen(function*() {
      const fake = yield* Fake.make
      fake.enqueue(Fake.status(503, { error: { message: "overloaded" } }), Fake.sse(Fake.openAiChat.text("second try")))
      const result = yield* run(configOn(fake.baseUrl), "m", fastPath)
      expect(result._tag).toBe("Right")
      const events = result._tag === "Right" ? result.right : []
      expect(events[0]).toMatchObject({ _tag: "Start", attempts: 2 })
      expect(events.filter((e) => e._tag === "TextDelta").map((e) => e._tag === "TextDelta" ? e.delta : "").join("")).toBe("second try")
      expect(modelsAsked(fake)).toEqual(["first-model", "first-model"])
    }))

  it.scopedLive("every target failing ends with the last target's error", () =>
    Effect.gen(function*() {
      const fake = yield* Fake.make
      fake.enqueue(Fake.status(401, { error: { message: "bad key one" } }), Fake.status(401, { error: { message: "bad key two" } }))
      const result = yield* run(configOn(fake.baseUrl), "m", fastPath)
      expect(result._tag === "Left" && result.left.message).toContain("bad key two")
      expect(modelsAsked(fake)).toEqual(["first-model", "second-model"])
    }))
})

describe.each([["on the stream", false], ["through the fast path callback", true]] as const)("failed attempts reported, events %s", (_, fastPath) => {
  /** The call with `onAttemptFailed`: what it reported, and how the call ended. */
  const reported = (config: Router.RouterConfig) =>
    Effect.gen(function*() {
      const llm = yield* Llm
      const attempts: Array<FailedAttempt> = []
      const options = {
        model: "m",
        callId: "conv-1/t1/c1",
        onAttemptFailed: (attempt: FailedAttempt) => Effect.sync(() => void attempts.push(attempt)),
        ...(fastPath ? { onEvents: () => {} } : {})
      }
      const ended = yield* Effect.either(Stream.runDrain(llm.stream(request, options)))
      return { attempts, ended }
    }).pipe(Effect.provide(Router.layer(config).pipe(Layer.provide(NodeHttpClient.dispatcherLayer))))

  it.scopedLive("each attempt that failed before answering, with its target, status and error, in order; the answer reports none", () =>
    Effect.gen(function*() {
      const fake = yield* Fake.make
      fake.enqueue(Fake.status(503, { error: { message: "overloaded" } }), Fake.status(401, { error: { message: "bad key" } }), Fake.sse(Fake.openAiChat.text("from the second")))
      const { attempts, ended } = yield* reported(configOn(fake.baseUrl))
      expect(ended._tag).toBe("Right")
      expect(attempts.map((a) => [a.provider, a.upstreamModel, a.attempt, a.status, a.reason])).toEqual([
        ["first", "first-model", 1, 503, "overloaded"],
        ["first", "first-model", 2, 401, "auth"]
      ])
      expect(attempts[0]!.message).toContain("overloaded")
      for (const a of attempts) expect(a.failedAtMs).toBeGreaterThanOrEqual(a.startedAtMs)
    }))

  it.scopedLive("a refused connection reports a network error without a status; every target failing reports each attempt", () =>
    Effect.gen(function*() {
      const fake = yield* Fake.make
      fake.enqueue(Fake.status(400, { error: { message: "no" } }))
      const config = configOn(fake.baseUrl)
      const { attempts, ended } = yield* reported({ ...config, providers: [provider("first", "http://127.0.0.1:1/v1"), config.providers[1]!] })
      expect(ended._tag).toBe("Left")
      expect(attempts.map((a) => [a.provider, a.attempt, a.status, a.reason])).toEqual([
        ["first", 1, undefined, "network"],
        ["first", 2, undefined, "network"],
        ["second", 1, 400, "badRequest"]
      ])
    }))
})

describe("prices", () => {
  const answer = (provider: string, model: string): AssistantMessage => ({
    role: "assistant",
    content: [],
    api: "openai-chat",
    provider,
    model,
    usage: { input: 1_000_000, output: 500_000, cacheRead: 2_000_000, cacheWrite: 0, reasoning: 0 },
    stopReason: "stop"
  })

  it("a call costs its usage at the price of the target that answered (cache reads at their own price, else the input price)", () => {
    const config = configOn("http://127.0.0.1:1/v1")
    const first = Router.priceOf(config, "cursor-auto", answer("first", "first-model"))!
    expect(Router.costOf(first, answer("first", "first-model").usage)).toBeCloseTo(1 * 2 + 0.5 * 8 + 2 * 0.5, 10)
    const second = Router.priceOf(config, "m", answer("second", "second-model"))!
    expect(Router.costOf(second, answer("second", "second-model").usage)).toBeCloseTo(1 * 1 + 0.5 * 4 + 2 * 1, 10)
    expect(Router.priceOf(config, "other", answer("second", "other-model"))).toBeUndefined()
  })

  it.scopedLive("the router sends OpenAI Responses the conversation's prompt-cache key, the same on every call", () =>
    Effect.gen(function*() {
      const fake = yield* Fake.make
      fake.enqueue(Fake.sse(Fake.openAiResponses.text("one")), Fake.sse(Fake.openAiResponses.text("two")))
      const config: Router.RouterConfig = {
        providers: [{ ...provider("oa", fake.baseUrl), api: "openai-responses" }],
        models: [{ id: "gpt", provider: "oa", upstreamModel: "gpt-5" }]
      }
      const calls = ["conv-9/t1/c1", "conv-9/t2/c1"]
      yield* Effect.gen(function*() {
        const llm = yield* Llm
        for (const callId of calls) yield* Stream.runDrain(llm.stream(request, { model: "gpt", callId }))
      }).pipe(Effect.provide(Router.layer(config).pipe(Layer.provide(NodeHttpClient.dispatcherLayer))))
      const keys = fake.requests.map((r) => (JSON.parse(r.body) as { prompt_cache_key?: string }).prompt_cache_key)
      expect(keys).toEqual([Router.promptCacheKeyOf(calls[0]!), Router.promptCacheKeyOf(calls[0]!)])
    }))

  it("the prompt-cache key is the same for every call of a conversation", () => {
    expect(Router.promptCacheKeyOf("conv-1/t1/c1")).toBe(Router.promptCacheKeyOf("conv-1/t7/c3"))
    expect(Router.promptCacheKeyOf("conv-1/t1/c1")).not.toBe(Router.promptCacheKeyOf("conv-2/t1/c1"))
  })
})
