/**
 * The logger `Cli.logging` picks: pretty on a terminal, one logfmt line per entry elsewhere
 * (the pretty logger writes each annotation on its own line, one write each), JSON or either
 * of the others when asked, and a clear refusal of a format or level it does not know.
 */
import { assert, describe, it } from "@effect/vitest"
import { Console, Effect, Layer, Redacted } from "effect"
import * as Cli from "../src/Cli.js"
import * as Secrets from "../src/internal/Secrets.js"

/** What one entry (by default an annotated `turn stop`) writes through the console, call by call. */
const written = (layer: Layer.Layer<never>, entry: Effect.Effect<void> = Effect.logInfo("turn stop").pipe(
  Effect.annotateLogs({ conversationId: "c 1", durationMs: 75, outcome: "stop" })
)) =>
  Effect.gen(function*() {
    const calls: Array<string> = []
    const record = (...args: ReadonlyArray<unknown>) => {
      calls.push(args.map((arg) => (arg instanceof Error ? `${arg.stack}` : typeof arg === "object" ? JSON.stringify(arg) : String(arg))).join(" "))
    }
    const current = yield* Effect.console
    const console: Console.Console = {
      ...current,
      unsafe: { ...current.unsafe, log: record, info: record, error: record, group: () => {}, groupEnd: () => {} }
    }
    yield* entry.pipe(Effect.provide(layer), Effect.withConsole(console))
    return calls
  })

const layerOf = (env: Record<string, string>, terminal: boolean) => {
  const layer = Cli.logging(env, terminal)
  if (typeof layer === "string") throw new Error(layer)
  return layer
}

describe("Cli.logging", () => {
  it.effect("writes one logfmt line per entry when stdout is not a terminal", () =>
    Effect.gen(function*() {
      const calls = yield* written(layerOf({}, false))
      assert.strictEqual(calls.length, 1)
      assert.match(calls[0]!, /level=INFO .*message="turn stop"/)
      assert.include(calls[0]!, `conversationId="c 1"`)
      assert.include(calls[0]!, "durationMs=75")
    }))

  it.effect("is the pretty logger on a terminal: a line per annotation", () =>
    Effect.gen(function*() {
      const calls = yield* written(layerOf({}, true))
      assert.isAbove(calls.length, 3)
      assert.include(calls[0]!, "turn stop")
    }))

  // One entry a test: a logger layer provided in a fiber stays in that fiber's loggers afterwards.
  it.effect("takes the pretty format it is given off a terminal", () =>
    Effect.gen(function*() {
      assert.isAbove((yield* written(layerOf({ BYOK_LOG_FORMAT: "pretty" }, false))).length, 3)
    }))

  it.effect("takes the JSON format it is given: one object per entry", () =>
    Effect.gen(function*() {
      const json = yield* written(layerOf({ BYOK_LOG_FORMAT: "json" }, true))
      assert.strictEqual(json.length, 1)
      assert.deepInclude(JSON.parse(json[0]!), { message: "turn stop", annotations: { conversationId: "c 1", durationMs: 75, outcome: "stop" } })
    }))

  it.effect("takes the logfmt format it is given on a terminal", () =>
    Effect.gen(function*() {
      assert.strictEqual((yield* written(layerOf({ BYOK_LOG_FORMAT: "logfmt" }, true))).length, 1)
    }))

  it.effect("writes no registered secret in any format: message, cause (a failure and a defect) and annotations", () =>
    Effect.gen(function*() {
      const key = "sk-log-test-0123456789abcdef"
      const owner = {}
      const provider = { id: "openai", api: "openai-chat" as const, baseUrl: "http://x/v1", apiKey: Redacted.make(key), headers: {}, extraBody: {}, compat: {} }
      Secrets.register(owner, () => ({ router: { providers: [provider] } }))
      try {
        const entry = Effect.logError(`refused: ${key}`, { body: `Incorrect API key provided: ${key}` }).pipe(
          Effect.annotateLogs({ error: `provided: ${key}`, masked: "sk-log-te***...***cdef" }),
          Effect.withLogSpan("call")
        )
        const failed = Effect.fail(new Error(`401: ${key}`)).pipe(Effect.tapErrorCause((cause) => Effect.logWarning("call failed", cause)), Effect.ignore)
        const died = Effect.die(new TypeError(`bad header ${key}`)).pipe(Effect.tapDefect((cause) => Effect.logError("defect", cause)), Effect.catchAllDefect(() => Effect.void))
        for (const [format, terminal] of [["pretty", true], ["logfmt", false], ["json", false]] as const) {
          const layer = layerOf({ BYOK_LOG_FORMAT: format }, terminal)
          const text = [...(yield* written(layer, entry)), ...(yield* written(layer, failed)), ...(yield* written(layer, died))].join("\n")
          assert.notInclude(text, key, format)
          assert.notInclude(text, "sk-log-te***", format)
          assert.include(text, "Incorrect API key provided: [key of provider openai]", format)
          assert.include(text, "401: [key of provider openai]", format)
          assert.include(text, "TypeError: bad header [key of provider openai]", format)
        }
      } finally {
        Secrets.unregister(owner)
      }
    }))

  it("refuses a format or a level it does not know, naming what it takes", () => {
    assert.strictEqual(Cli.logging({ BYOK_LOG_FORMAT: "xml" }, false), "BYOK_LOG_FORMAT must be one of pretty, logfmt, json, got xml")
    assert.match(String(Cli.logging({ BYOK_LOG_LEVEL: "loud" }, false)), /^BYOK_LOG_LEVEL must be one of .*got loud$/)
  })
})
