/**
 * `doctor`'s Tab line against a loopback fake FIM provider: with a `tab` section, one FIM
 * request as Tab makes it, ok with its time to first token and the model; a 404, a refused
 * key and nothing listening each FAIL with the fix their cause calls for; no `tab`, no line.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Doctor from "../../src/hookup/Doctor.js"
import * as TabCheck from "../../src/hookup/doctor/Tab.js"
import type * as Trust from "../../src/hookup/Trust.js"
import * as AppHarness from "../support/AppHarness.js"
import { freePort } from "../support/ChildServer.js"
import * as FakeProvider from "../support/FakeProvider.js"
import * as HookupHarness from "../support/HookupHarness.js"
import { tempDirectory } from "../support/Transcripts.js"

const tab = { provider: "fake-openai", model: "coder-fim" }
const ROW = "Tab model fake-openai/coder-fim"

const noTrust: Trust.Probes = { readFile: () => Effect.succeed(undefined), exitCode: () => Effect.succeed(undefined) }

/** A configuration with no chat models (no other probe reaches the provider) and `overrides` on top. */
const configFor = (providerUrl: string, overrides: Record<string, unknown> = { tab }) =>
  Effect.gen(function*() {
    const dir = yield* tempDirectory("cursor-byok-doctor-tab-")
    return yield* HookupHarness.configOn({ providerUrl, dir, overrides: { models: [], ...overrides } })
  })

describe("doctor's Tab model", () => {
  it.scopedLive("answers: ok with its time to first token and the model, from one FIM request as Tab makes it", () =>
    Effect.gen(function*() {
      const provider = yield* FakeProvider.make
      const config = yield* configFor(provider.baseUrl)
      provider.enqueue(FakeProvider.sse(FakeProvider.fim.openAiCompletions(["a + b"])))
      const results = yield* Doctor.checks({ config, settingsPath: "/nonexistent/settings.json", probes: noTrust, platform: "linux" }).pipe(Effect.provide(NodeContext.layer))
      const row = results.find((r) => r.name === ROW)
      assert.isDefined(row, Doctor.format(results))
      assert.strictEqual(row!.status, "ok", row!.detail)
      assert.match(row!.detail, /^first token \d+ ms, coder-fim \(openai-completions, http:\/\/127\.0\.0\.1:\d+\/v1\/completions\)/)
      assert.include(row!.detail, "a + b")
      assert.strictEqual(provider.requests.length, 1)
      assert.strictEqual(provider.requests[0]!.path, "/v1/completions")
      const body = JSON.parse(provider.requests[0]!.body) as Record<string, unknown>
      assert.strictEqual(body["model"], "coder-fim")
      assert.strictEqual(body["prompt"], "def add(a, b):\n    return ")
      assert.strictEqual(body["suffix"], "\n")
      assert.strictEqual(body["stream"], true)
    }))

  it.scopedLive("a 404: FAIL with the provider's words, the fix naming the path, the model and tab.api", () =>
    Effect.gen(function*() {
      const provider = yield* FakeProvider.make
      const config = yield* configFor(provider.baseUrl)
      provider.enqueue(FakeProvider.status(404, { error: { message: "model coder-fim not found" } }))
      const [row] = yield* TabCheck.tabChecks(config)
      assert.strictEqual(row!.name, ROW)
      assert.strictEqual(row!.status, "FAIL", row!.detail)
      assert.include(row!.detail, "model coder-fim not found")
      assert.include(row!.detail, "HTTP 404")
      assert.include(row!.fix, "/v1/completions answered 404")
      assert.include(row!.fix, "tab.model \"coder-fim\"")
      assert.include(row!.fix, "tab.api (now openai-completions;")
      assert.include(Doctor.format([row!]), "fix: ")
    }))

  it.scopedLive("a refused key: FAIL, the fix names the key's variable", () =>
    Effect.gen(function*() {
      const provider = yield* FakeProvider.make
      const config = yield* configFor(provider.baseUrl)
      provider.enqueue(FakeProvider.status(401, { error: { message: "invalid api key" } }))
      const [row] = yield* TabCheck.tabChecks(config, { "fake-openai": AppHarness.API_KEY_ENV })
      assert.strictEqual(row!.status, "FAIL", row!.detail)
      assert.include(row!.fix, `the key: ${AppHarness.API_KEY_ENV} (provider fake-openai's apiKeyEnv) is refused`)
    }))

  it.scopedLive("nothing listening: FAIL, the fix asks whether the model server runs", () =>
    Effect.gen(function*() {
      const port = yield* Effect.promise(() => freePort())
      const config = yield* configFor(`http://127.0.0.1:${port}/v1`)
      const [row] = yield* TabCheck.tabChecks(config)
      assert.strictEqual(row!.status, "FAIL", row!.detail)
      assert.include(row!.fix, `nothing listens at http://127.0.0.1:${port}/v1/completions: is the model server (provider fake-openai) running?`)
    }))

  it.scopedLive("no tab section: no Tab line", () =>
    Effect.gen(function*() {
      const config = yield* configFor("http://127.0.0.1:9/v1", {})
      assert.deepStrictEqual(yield* TabCheck.tabChecks(config), [])
    }))
})
