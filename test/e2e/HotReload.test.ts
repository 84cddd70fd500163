/**
 * Hot reload end to end on the real server, its configuration in a file on disk read as `serve`
 * reads it and watched: a model added to the file is listed to Cursor and answers without a
 * restart; a broken edit (a typo'd api, invalid JSON) is refused with its readable line, the
 * list stays and the old models keep working; a turn in flight while the file changes keeps the
 * target it started with, and the next turn takes the new one.
 */
import { create, fromBinary, toBinary } from "@bufbuild/protobuf"
import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect, Fiber, HashMap, Logger, LogLevel } from "effect"
import { writeFileSync } from "node:fs"
import { AvailableModelsRequestSchema, AvailableModelsResponseSchema } from "../../src/gen/aiserver/v1/aiserver_pb.js"
import * as AppHarness from "../support/AppHarness.js"
import * as FakeProvider from "../support/FakeProvider.js"
import { assertCleanOk, clientFor } from "../support/Transcripts.js"

const MODEL_A = { id: "model-a", provider: "fake-openai", upstreamModel: "upstream-a", contextWindow: 100000 }
const MODEL_B = { id: "model-b", provider: "fake-openai", upstreamModel: "upstream-b", contextWindow: 50000 }

interface Line {
  readonly level: string
  readonly message: string
  readonly annotations: Record<string, unknown>
}

const capturing = () => {
  const lines: Array<Line> = []
  const logger = Logger.make(({ annotations, logLevel, message }) =>
    void lines.push({
      level: logLevel.label,
      message: Array.isArray(message) ? message.join(" ") : String(message),
      annotations: Object.fromEntries(HashMap.toEntries(annotations))
    })
  )
  return { lines, logger }
}

/** The model ids Cursor's AvailableModels call lists. */
const listed = (app: AppHarness.AppHarness) =>
  Effect.promise(async () => {
    const response = await fetch(`${app.baseUrl}/aiserver.v1.AiService/AvailableModels`, {
      method: "POST",
      headers: { "content-type": "application/proto" },
      body: toBinary(AvailableModelsRequestSchema, create(AvailableModelsRequestSchema, {}))
    })
    return fromBinary(AvailableModelsResponseSchema, new Uint8Array(await response.arrayBuffer())).modelNames
  })

/** Polls `check` every 50 ms until it holds; fails after `within` (a bound, not an expected duration). */
const eventually = <A>(what: string, read: Effect.Effect<A>, check: (a: A) => boolean, within: Duration.DurationInput = "10 seconds") => {
  const poll: Effect.Effect<A> = Effect.flatMap(read, (a) => (check(a) ? Effect.succeed(a) : Effect.zipRight(Effect.sleep("50 millis"), poll)))
  return poll.pipe(Effect.timeoutFail({ duration: within, onTimeout: () => new Error(`timed out waiting until ${what}`) }), Effect.orDie)
}

const reloads = (app: AppHarness.AppHarness, outcome: "applied" | "refused") =>
  Effect.promise(async () => {
    const text = await (await fetch(`${app.baseUrl}/metrics`)).text()
    const line = text.split("\n").find((l) => l.startsWith(`byok_config_reloads_total{outcome="${outcome}"}`))
    return line === undefined ? 0 : Number(line.split(" ")[1])
  })

const upstreamModels = (provider: FakeProvider.FakeProvider) => provider.requests.map((r) => (JSON.parse(r.body) as { model: string }).model)

describe("hot reload of the configuration file", () => {
  it.scopedLive("a model added to the file is listed and answers without a restart; a broken edit is refused and the old models keep working", () =>
    Effect.gen(function*() {
      const { lines, logger } = capturing()
      const app = yield* AppHarness.make({ watchConfig: true, config: { models: [MODEL_A] }, logger, logLevel: LogLevel.Info })
      const client = yield* clientFor(app)
      assert.deepStrictEqual(yield* listed(app), ["model-a"])

      // A model added (the file replaced by a rename, as editors save).
      yield* app.writeConfig({ models: [MODEL_A, MODEL_B] })
      yield* eventually("model-b is listed", listed(app), (names) => names.includes("model-b"))
      assert.deepStrictEqual(yield* listed(app), ["model-a", "model-b"])
      const applied = lines.find((line) => line.message.startsWith("configuration reloaded"))
      assert.isDefined(applied, JSON.stringify(lines))
      assert.include(applied!.message, "models added: model-b")
      assert.strictEqual(yield* reloads(app, "applied"), 1)

      app.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.text("B answers")))
      const onB = yield* Effect.promise(() => client.run({ conversationId: "conv-b", text: "hello B", model: "model-b" }))
      assertCleanOk(onB)
      assert.strictEqual(onB.text, "B answers")
      assert.deepStrictEqual(upstreamModels(app.provider), ["upstream-b"])

      // A typo'd api: refused with the readable line; the list stays and model-a still answers.
      const typo = AppHarness.fileConfigJson(app.provider.baseUrl, { models: [MODEL_A] })
      const providers = typo["providers"] as Array<Record<string, unknown>>
      yield* app.writeConfig({ models: [MODEL_A], providers: [{ ...providers[0], api: "openai-chatt" }, ...providers.slice(1)] })
      const refusal = yield* eventually(
        "the refusal is logged",
        Effect.sync(() => lines.filter((line) => line.message.includes("refused"))),
        (found) => found.length > 0
      )
      assert.strictEqual(refusal[0]!.level, "ERROR")
      assert.include(refusal[0]!.message, `providers[0].api: expected one of "openai-chat", "anthropic", "gemini", "openai-responses", got "openai-chatt"`)
      assert.strictEqual(yield* reloads(app, "refused"), 1)
      assert.deepStrictEqual(yield* listed(app), ["model-a", "model-b"])
      app.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.text("A still answers")))
      const onA = yield* Effect.promise(() => client.run({ conversationId: "conv-a", text: "hello A", model: "model-a" }))
      assertCleanOk(onA)
      assert.strictEqual(onA.text, "A still answers")
      assert.deepStrictEqual(upstreamModels(app.provider), ["upstream-b", "upstream-a"])

      // Invalid JSON, written in place this time: refused too, with where the text breaks; nothing changes.
      writeFileSync(app.configPath!, `{ "models": [`)
      const broken = yield* eventually(
        "the invalid JSON is refused",
        Effect.sync(() => lines.filter((line) => line.message.includes("not valid JSON"))),
        (found) => found.length > 0
      )
      assert.include(broken[0]!.message, `${app.configPath}: not valid JSON`)
      assert.deepStrictEqual(yield* listed(app), ["model-a", "model-b"])
      assert.strictEqual(yield* reloads(app, "applied"), 1)
      // Each refusal was logged once.
      assert.strictEqual(lines.filter((line) => line.message.includes("openai-chatt")).length, 1)
      assert.strictEqual(lines.filter((line) => line.message.includes("not valid JSON")).length, 1)
    }))

  it.scopedLive("a turn in flight while the file changes keeps its target; the next turn takes the new one", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ watchConfig: true, config: { models: [MODEL_A] } })
      const client = yield* clientFor(app)
      // A model streaming slowly: about 2 s from the first piece to the last.
      app.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.pacedText(["one ", "two ", "three ", "four"], 500)))
      const turn = yield* Effect.fork(Effect.promise(() => client.run({ conversationId: "conv-slow", text: "go", model: "model-a" })))
      yield* eventually("the call reached the provider", Effect.sync(() => app.provider.requests.length), (n) => n === 1)

      yield* app.writeConfig({ models: [{ ...MODEL_A, upstreamModel: "upstream-a2", contextWindow: 64000 }] })
      yield* eventually("the reload applied", Effect.sync(() => app.live.current().router.models[0]?.upstreamModel), (model) => model === "upstream-a2")
      assert.isTrue((yield* Fiber.poll(turn))._tag === "None", "the turn was still in flight when the reload applied")

      const slow = yield* Fiber.join(turn)
      assertCleanOk(slow)
      assert.strictEqual(slow.text, "one two three four")
      assert.deepStrictEqual(upstreamModels(app.provider), ["upstream-a"])

      app.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.text("new target")))
      const next = yield* Effect.promise(() => client.run({ conversationId: "conv-slow", text: "again", model: "model-a" }))
      assertCleanOk(next)
      assert.deepStrictEqual(upstreamModels(app.provider), ["upstream-a", "upstream-a2"])
    }))
})
