/**
 * The operator's lines for a model call that did not go through at once: one info line per
 * retry (provider, upstream model, the attempt that failed, its error, the delay) and one
 * warning per fallback (from which target to which, and why), each annotated with the
 * conversation and the call id the runner gave the call.
 */
import { NodeHttpClient } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, HashMap, Layer, Logger, LogLevel, Redacted, Stream } from "effect"
import { Llm } from "../../src/Llm.js"
import * as Router from "../../src/llm/Router.js"
import * as Fake from "../support/FakeProvider.js"

interface Line {
  readonly level: string
  readonly message: string
  readonly annotations: Record<string, unknown>
}

const provider = (id: string, baseUrl: string): Router.ProviderConfig => ({ id, api: "openai-chat", baseUrl, apiKey: Redacted.make("k"), headers: {}, extraBody: {}, compat: {} })

const configOn = (baseUrl: string): Router.RouterConfig => ({
  providers: [provider("first", baseUrl), provider("second", baseUrl)],
  models: [{ id: "m", provider: "first", upstreamModel: "first-model", fallback: [{ provider: "second", upstreamModel: "second-model" }] }],
  retry: { maxRetries: 2, initialDelayMs: 3, maxDelayMs: 10, maxRetryAfterMs: 1_000, jitter: 0, idleTimeoutMs: 2_000 }
})

const request = { systemPrompt: "s", messages: [{ role: "user" as const, content: [{ type: "text" as const, text: "hi" }] }], tools: [] }

/** Runs one call for model `m` as call `conv-7/t2/c3`; the log lines it wrote, and whether it answered. */
const call = (config: Router.RouterConfig) =>
  Effect.gen(function*() {
    const lines: Array<Line> = []
    const capture = Logger.make(({ annotations, logLevel, message }) =>
      void lines.push({
        level: logLevel.label,
        message: Array.isArray(message) ? message.join(" ") : String(message),
        annotations: Object.fromEntries(HashMap.toEntries(annotations))
      })
    )
    const llm = yield* Llm
    const ended = yield* Stream.runDrain(llm.stream(request, { model: "m", callId: "conv-7/t2/c3" })).pipe(
      Effect.either,
      Effect.provide(Logger.replace(Logger.defaultLogger, capture)),
      Logger.withMinimumLogLevel(LogLevel.Debug)
    )
    return { lines, answered: ended._tag === "Right" }
  }).pipe(Effect.provide(Router.layer(config).pipe(Layer.provide(NodeHttpClient.dispatcherLayer))))

describe("model call log lines", () => {
  it.scopedLive("a 503 then an answer: one info line for the retry, with the provider, the attempt, the error, the delay and the call", () =>
    Effect.gen(function*() {
      const fake = yield* Fake.make
      fake.enqueue(Fake.status(503, { error: { message: "busy right now" } }), Fake.sse(Fake.openAiChat.text("ok")))
      const { answered, lines } = yield* call(configOn(fake.baseUrl))
      assert.isTrue(answered)
      const retries = lines.filter((line) => line.annotations["attempt"] !== undefined)
      assert.strictEqual(retries.length, 1, JSON.stringify(lines))
      const [retry] = retries
      assert.strictEqual(retry!.level, "INFO")
      assert.include(retry!.message, "first attempt 1 failed")
      assert.include(retry!.message, "retrying in 3 ms")
      assert.deepInclude(retry!.annotations, {
        conversationId: "conv-7",
        callId: "conv-7/t2/c3",
        model: "m",
        upstreamModel: "first-model",
        provider: "first",
        attempt: 1,
        maxRetries: 2,
        reason: "providerError",
        status: 503,
        delayMs: 3
      })
      assert.include(String(retry!.annotations["error"]), "busy right now")
      assert.isFalse(lines.some((line) => line.annotations["from"] !== undefined), "no fallback")
    }))

  it.scopedLive("a 401 on the first target (not retried): one warning for the fallback, from which target to which and why", () =>
    Effect.gen(function*() {
      const fake = yield* Fake.make
      fake.enqueue(Fake.status(401, { error: { message: "bad key" } }), Fake.sse(Fake.openAiChat.text("from the second")))
      const { answered, lines } = yield* call(configOn(fake.baseUrl))
      assert.isTrue(answered)
      assert.isFalse(lines.some((line) => line.annotations["attempt"] !== undefined), "a 401 is not retried")
      const fallbacks = lines.filter((line) => line.annotations["from"] !== undefined)
      assert.strictEqual(fallbacks.length, 1, JSON.stringify(lines))
      const [fallback] = fallbacks
      assert.strictEqual(fallback!.level, "WARN")
      assert.include(fallback!.message, "falling back to second/second-model")
      assert.deepInclude(fallback!.annotations, {
        conversationId: "conv-7",
        callId: "conv-7/t2/c3",
        model: "m",
        from: "first/first-model",
        to: "second/second-model",
        fallback: 1,
        reason: "auth",
        status: 401
      })
    }))

  it.scopedLive("retries spent on the first target, then a fallback: a line per retry, then the fallback's", () =>
    Effect.gen(function*() {
      const fake = yield* Fake.make
      fake.enqueue(
        Fake.status(500, { error: { message: "boom" } }),
        Fake.status(500, { error: { message: "boom" } }),
        Fake.status(500, { error: { message: "boom" } }),
        Fake.sse(Fake.openAiChat.text("second"))
      )
      const { answered, lines } = yield* call(configOn(fake.baseUrl))
      assert.isTrue(answered)
      const relevant = lines.filter((line) => line.annotations["attempt"] !== undefined || line.annotations["from"] !== undefined)
      assert.deepStrictEqual(
        relevant.map((line) => [line.annotations["attempt"] ?? "fallback", line.annotations["delayMs"] ?? line.annotations["to"]]),
        [[1, 3], [2, 6], ["fallback", "second/second-model"]]
      )
    }))
})
