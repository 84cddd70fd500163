/**
 * The logger `Cli.logging` picks: pretty on a terminal, one logfmt line per entry elsewhere
 * (the pretty logger writes each annotation on its own line, one write each), JSON or either
 * of the others when asked, and a clear refusal of a format or level it does not know.
 */
import { assert, describe, it } from "@effect/vitest"
import { Console, Effect, Layer } from "effect"
import * as Cli from "../src/Cli.js"

/** What one annotated entry writes through the console, call by call. */
const written = (layer: Layer.Layer<never>) =>
  Effect.gen(function*() {
    const calls: Array<string> = []
    const record = (...args: ReadonlyArray<unknown>) => {
      calls.push(args.map(String).join(" "))
    }
    const current = yield* Effect.console
    const console: Console.Console = {
      ...current,
      unsafe: { ...current.unsafe, log: record, info: record, group: () => {}, groupEnd: () => {} }
    }
    yield* Effect.logInfo("turn stop").pipe(
      Effect.annotateLogs({ conversationId: "c 1", durationMs: 75, outcome: "stop" }),
      Effect.provide(layer),
      Effect.withConsole(console)
    )
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

  it("refuses a format or a level it does not know, naming what it takes", () => {
    assert.strictEqual(Cli.logging({ BYOK_LOG_FORMAT: "xml" }, false), "BYOK_LOG_FORMAT must be one of pretty, logfmt, json, got xml")
    assert.match(String(Cli.logging({ BYOK_LOG_LEVEL: "loud" }, false)), /^BYOK_LOG_LEVEL must be one of .*got loud$/)
  })
})
