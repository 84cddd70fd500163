/**
 * What a reload applies and what waits for a restart (`Changes.ts`), and how the live
 * configuration takes a reload (`Live.ts`): a valid change swaps the running configuration and
 * says what changed; a change of the listeners or the database is logged as needing a restart
 * and keeps the running values; a refused change keeps the running configuration and is logged
 * once however many times the same broken file is seen.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, HashMap, Logger, LogLevel, Metric, Redacted, Schema } from "effect"
import * as Config from "../../src/Config.js"
import type { ServerConfig } from "../../src/Config.js"
import * as Changes from "../../src/config/Changes.js"
import * as Live from "../../src/config/Live.js"
import * as Metrics from "../../src/Metrics.js"

const env = { KEY_A: "a-key", KEY_B: "b-key" }

const configOf = (file: Record<string, unknown>, environment: Record<string, string> = env): ServerConfig =>
  Config.resolve(Schema.decodeUnknownSync(Config.FileConfig)(file), environment)

const base = {
  providers: [
    { id: "p1", api: "openai-chat", baseUrl: "http://127.0.0.1:1/v1", apiKeyEnv: "KEY_A" },
    { id: "p2", api: "anthropic", baseUrl: "http://127.0.0.1:2/v1", apiKeyEnv: "KEY_B" }
  ],
  models: [
    { id: "a", provider: "p1", upstreamModel: "up-a" },
    { id: "b", provider: "p2", upstreamModel: "up-b", price: { input: 1, output: 2 } }
  ]
}

describe("what a reload changes", () => {
  it("models and providers added, removed and changed; other live keys; restart-only keys", () => {
    const running = configOf(base)
    const next = configOf({
      ...base,
      port: 9999,
      database: "./elsewhere.sqlite",
      limits: { appendWindow: 10 },
      aliases: { "*": "a" },
      providers: [{ ...base.providers[0], headers: { "x-extra": "1" } }, base.providers[1]],
      models: [{ ...base.models[1], price: { input: 3, output: 4 } }, { id: "c", provider: "p1", upstreamModel: "up-c" }]
    })
    const changes = Changes.changesBetween(running, next)
    assert.deepStrictEqual(changes.models, { added: ["c"], removed: ["a"], changed: ["b"] })
    assert.deepStrictEqual(changes.providers, { added: [], removed: [], changed: ["p1"] })
    // The default model was the first model, which went.
    assert.deepStrictEqual(changes.settings, ["aliases", "limits", "defaultModel"])
    assert.deepStrictEqual(changes.needsRestart, ["port", "database"])
    assert.strictEqual(Changes.describe(changes), "models added: c; models removed: a; models changed: b; providers changed: p1; aliases, limits, defaultModel changed")
    const applied = Changes.applicable(running, next)
    assert.strictEqual(applied.port, running.port)
    assert.strictEqual(applied.database, running.database)
    assert.strictEqual(applied.limits.appendWindow, 10)
    assert.deepStrictEqual(applied.models.map((m) => m.id), ["b", "c"])
  })

  it("the same file again, key order aside, changes nothing; a provider's key value counts without being shown", () => {
    const running = configOf(base)
    const reordered = configOf({ models: base.models, providers: base.providers.map((p) => ({ apiKeyEnv: p.apiKeyEnv, baseUrl: p.baseUrl, api: p.api, id: p.id })) })
    assert.isTrue(Changes.appliesNothing(Changes.changesBetween(running, reordered)))
    const rekeyed = configOf(base, { ...env, KEY_A: "another" })
    const changes = Changes.changesBetween(running, rekeyed)
    assert.deepStrictEqual(changes.providers.changed, ["p1"])
    assert.notInclude(Changes.describe(changes), "another")
    assert.notInclude(Changes.describe(changes), Redacted.value(running.router.providers[0]!.apiKey))
  })
})

describe("the live configuration", () => {
  it.live("applies a valid change, keeps the running one on a refusal (logged once), and logs restart-only changes", () =>
    Effect.gen(function*() {
      const lines: Array<{ level: string; message: string; annotations: Record<string, unknown> }> = []
      const capture = Logger.make(({ annotations, logLevel, message }) =>
        void lines.push({
          level: logLevel.label,
          message: Array.isArray(message) ? message.join(" ") : String(message),
          annotations: Object.fromEntries(HashMap.toEntries(annotations))
        })
      )
      const running = configOf(base)
      const script: Array<Effect.Effect<ServerConfig, Config.ConfigError>> = [
        Effect.succeed(configOf({ ...base, models: [...base.models, { id: "c", provider: "p1", upstreamModel: "up-c" }] })),
        Effect.fail(new Config.ConfigError({ message: "byok.config.json: models[2].provider: is missing" })),
        Effect.fail(new Config.ConfigError({ message: "byok.config.json: models[2].provider: is missing" })),
        Effect.succeed(configOf({ ...base, models: [...base.models, { id: "c", provider: "p1", upstreamModel: "up-c" }], port: 1234 }))
      ]
      const applied = Metric.tagged(Metrics.configReloads, "outcome", "applied")
      const refused = Metric.tagged(Metrics.configReloads, "outcome", "refused")
      const before = { applied: (yield* Metric.value(applied)).count, refused: (yield* Metric.value(refused)).count }
      const live = yield* Live.make(running, { path: "byok.config.json", load: Effect.suspend(() => script.shift()!) })
      const outcomes = yield* Effect.forEach([1, 2, 3, 4], () => live.reload).pipe(
        Effect.provide(Logger.replace(Logger.defaultLogger, capture)),
        Logger.withMinimumLogLevel(LogLevel.Debug)
      )
      assert.deepStrictEqual(outcomes.map((o) => o._tag), ["Applied", "Refused", "Refused", "Unchanged"])
      assert.deepStrictEqual(live.current().models.map((m) => m.id), ["a", "b", "c"])
      assert.deepStrictEqual((yield* live.get).models.map((m) => m.id), ["a", "b", "c"])
      assert.strictEqual(live.current().port, running.port)

      const info = lines.filter((line) => line.level === "INFO")
      assert.deepStrictEqual(info.map((line) => line.message), ["configuration reloaded from byok.config.json: models added: c"])
      assert.deepStrictEqual(info[0]!.annotations["modelsAdded"], ["c"])
      const errors = lines.filter((line) => line.level === "ERROR")
      assert.strictEqual(errors.length, 1, "the same refusal is logged once")
      assert.include(errors[0]!.message, "the running configuration stays")
      assert.include(errors[0]!.message, "models[2].provider: is missing")
      const warnings = lines.filter((line) => line.level === "WARN")
      assert.deepStrictEqual(warnings.map((line) => line.message), [
        "byok.config.json: port changed; this needs a restart (the running values stay until then)"
      ])
      assert.strictEqual((yield* Metric.value(applied)).count - before.applied, 1)
      assert.strictEqual((yield* Metric.value(refused)).count - before.refused, 2)
    }))

  it.live("a refusal with several problems is one error entry per problem (a logfmt or JSON line each)", () =>
    Effect.gen(function*() {
      const messages: Array<string> = []
      const capture = Logger.make(({ logLevel, message }) => {
        if (logLevel.label === "ERROR") messages.push(Array.isArray(message) ? message.join(" ") : String(message))
      })
      const problems = "byok.config.json: port: expected a number between 0 and 65535, got -1\nbyok.config.json: defaultModel: names model \"z\", which is not configured: name one of models[].id (a, b)"
      const live = yield* Live.make(configOf(base), { path: "byok.config.json", load: Effect.fail(new Config.ConfigError({ message: problems })) })
      yield* live.reload.pipe(Effect.provide(Logger.replace(Logger.defaultLogger, capture)))
      assert.deepStrictEqual(messages, problems.split("\n").map((line) => `configuration change refused, the running configuration stays: ${line}`))
    }))
})
