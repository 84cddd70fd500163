/**
 * `doctor` against a real server (every listener, the proxy checked by a real CONNECT + TLS),
 * real files and a fake provider: all green on a healthy setup, and on a broken one (server
 * down, CA missing, settings not applied) exactly the checks that are broken fail. The OS's
 * trust store is the one thing stubbed (its probes), so no test changes the machine.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { rmSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import * as Ca from "../../src/hookup/Ca.js"
import * as CursorSettings from "../../src/hookup/CursorSettings.js"
import * as Doctor from "../../src/hookup/Doctor.js"
import { desiredFor } from "../../src/hookup/Setup.js"
import type * as Trust from "../../src/hookup/Trust.js"
import * as Config from "../../src/Config.js"
import type { ServerConfig } from "../../src/Config.js"
import * as AppHarness from "../support/AppHarness.js"
import { freePort } from "../support/ChildServer.js"
import * as FakeProvider from "../support/FakeProvider.js"
import * as HookupHarness from "../support/HookupHarness.js"
import { tempDirectory } from "../support/Transcripts.js"

const oneModel = {
  models: [{ id: "fake-model", provider: "fake-openai", upstreamModel: "fake-upstream", contextWindow: 100000 }]
}

/** A Linux system bundle that holds `pem` (or not). */
const bundleProbes = (pem: string | undefined): Trust.Probes => ({
  readFile: (path) => Effect.succeed(path === "/etc/ssl/certs/ca-certificates.crt" ? pem ?? "" : undefined),
  exitCode: () => Effect.succeed(undefined)
})

const statusOf = (results: ReadonlyArray<Doctor.Check>) => Object.fromEntries(results.map((r) => [r.name, r.status]))

const applySettings = (config: ServerConfig, path: string, agent: CursorSettings.AgentPath = "http1") =>
  CursorSettings.setup(path, CursorSettings.defaultJournalPath(path), desiredFor(config, agent)).pipe(Effect.provide(NodeContext.layer), Effect.orDie)

const runChecks = (config: ServerConfig, settingsPath: string, probes: Trust.Probes) =>
  Doctor.checks({ config, settingsPath, probes, platform: "linux" }).pipe(Effect.provide(NodeContext.layer))

describe("doctor", () => {
  it.scopedLive("a healthy setup passes every check, the model with its time to first token", () =>
    Effect.gen(function*() {
      const server = yield* HookupHarness.make(oneModel)
      const settingsPath = `${server.dir}/settings.json`
      writeFileSync(settingsPath, "{\n  // mine\n  \"editor.fontSize\": 13\n}\n")
      yield* applySettings(server.config, settingsPath)
      server.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.text("OK")))
      const results = yield* runChecks(server.config, settingsPath, bundleProbes(server.ca.certPem))
      assert.deepStrictEqual(statusOf(results), {
        "configuration": "ok",
        "server reachable": "ok",
        "CA valid and name-constrained": "ok",
        "proxy listening": "ok",
        "CA trusted by this OS": "ok",
        "Cursor settings applied": "ok",
        "Cursor agent path": "ok",
        "HTTP/2 listener (Run)": "ok",
        "model fake-model": "ok"
      }, Doctor.format(results))
      assert.match(results.find((r) => r.name === "model fake-model")!.detail, /^first token \d+ ms/)
      assert.match(results.find((r) => r.name === "Cursor agent path")!.detail, /^HTTP\/1\.1: the agent on RunSSE \+ BidiAppend through the proxy/)
      assert.strictEqual(server.provider.requests.length, 1)
    }))

  it.scopedLive("server down, settings not applied, CA untrusted, a model failing: those checks fail, with their fixes", () =>
    Effect.gen(function*() {
      const provider = yield* FakeProvider.make
      const dir = yield* tempDirectory("cursor-byok-doctor-")
      const config = yield* HookupHarness.configOn({ providerUrl: provider.baseUrl, dir, overrides: oneModel })
      yield* Ca.ensure(config.home).pipe(Effect.provide(NodeContext.layer), Effect.orDie)
      provider.enqueue(FakeProvider.status(401, { error: { message: "bad key" } }))
      const results = yield* runChecks(config, `${dir}/settings.json`, bundleProbes(undefined))
      // The server not running is one line: the proxy and the TLS listener it serves are not checked.
      assert.deepStrictEqual(statusOf(results), {
        "configuration": "ok",
        "server reachable": "FAIL",
        "CA valid and name-constrained": "ok",
        "CA trusted by this OS": "FAIL",
        "Cursor settings applied": "FAIL",
        "Cursor agent path": "ok",
        "model fake-model": "FAIL"
      }, Doctor.format(results))
      const fixOf = (name: string) => results.find((r) => r.name === name)!.fix
      assert.include(results.find((r) => r.name === "server reachable")!.detail, "the server is not running")
      assert.include(fixOf("server reachable"), "cursor-byok serve")
      assert.include(fixOf("model fake-model"), "the key")
      assert.include(fixOf("Cursor settings applied"), "cursor-byok setup")
      assert.include(fixOf("CA trusted by this OS"), "setup --trust")
    }))

  it.scopedLive("a missing CA is named as such (and the proxy cannot be checked without it)", () =>
    Effect.gen(function*() {
      const server = yield* HookupHarness.make({ models: [] })
      rmSync(join(server.config.home, "ca.pem"))
      rmSync(join(server.config.home, "ca-key.pem"))
      const results = yield* runChecks(server.config, `${server.dir}/settings.json`, bundleProbes(undefined))
      const ca = results.find((r) => r.name === "CA valid and name-constrained")!
      assert.strictEqual(ca.status, "FAIL")
      assert.include(ca.detail, "no CA at")
      assert.include(ca.fix, "cursor-byok setup")
      assert.strictEqual(statusOf(results)["proxy listening"], "FAIL")
      assert.notProperty(statusOf(results), "CA trusted by this OS")
    }))
})

describe("doctor's Cursor agent path", () => {
  /** A configuration on free ports with nothing listening (`overrides` on top), and its settings path. */
  const setting = (overrides: Record<string, unknown>) =>
    Effect.gen(function*() {
      const dir = yield* tempDirectory("cursor-byok-doctor-path-")
      const config = yield* HookupHarness.configOn({ providerUrl: "http://127.0.0.1:9", dir, overrides: { models: [], ...overrides } })
      return { config, settingsPath: `${dir}/settings.json` }
    })
  const pathCheck = (config: ServerConfig, settingsPath: string) =>
    Effect.map(runChecks(config, settingsPath, bundleProbes(undefined)), (results) => ({
      applied: results.find((r) => r.name === "Cursor settings applied")!,
      path: results.find((r) => r.name === "Cursor agent path")!
    }))

  it.scopedLive("setup's default: HTTP/1.1, RunSSE + BidiAppend through the proxy, with the TLS listener on too", () =>
    Effect.gen(function*() {
      const { config, settingsPath } = yield* setting({})
      yield* applySettings(config, settingsPath)
      const { applied, path } = yield* pathCheck(config, settingsPath)
      assert.strictEqual(applied.status, "ok", applied.detail)
      assert.strictEqual(path.status, "ok", path.detail)
      assert.strictEqual(path.detail, `HTTP/1.1: the agent on RunSSE + BidiAppend through the proxy (http://127.0.0.1:${config.proxy.port}); cursor.general.disableHttp2 true`)
    }))

  it.scopedLive("setup --http2: HTTP/2, Run on the TLS listener", () =>
    Effect.gen(function*() {
      const { config, settingsPath } = yield* setting({})
      yield* applySettings(config, settingsPath, "http2")
      const { applied, path } = yield* pathCheck(config, settingsPath)
      assert.strictEqual(applied.status, "ok", applied.detail)
      assert.strictEqual(path.status, "ok", path.detail)
      assert.match(path.detail, new RegExp(`^HTTP/2: the agent on Run at the TLS listener \\(https://127\\.0\\.0\\.1:${config.http2.tls!.port}\\); cursor\\.general\\.disableHttp2 false`))
    }))

  it.scopedLive("HTTP/2 selected (the switch absent or false) without the TLS listener fails, with setup as the fix", () =>
    Effect.gen(function*() {
      const { config, settingsPath } = yield* setting({ http2: { cleartextPort: null, tls: null } })
      for (const text of ["{\n  \"http.proxy\": \"x\"\n}\n", "{ \"cursor.general.disableHttp2\": false }\n"]) {
        writeFileSync(settingsPath, text)
        const { path } = yield* pathCheck(config, settingsPath)
        assert.strictEqual(path.status, "FAIL", path.detail)
        assert.match(path.detail, /^HTTP\/2: .*http2\.tls is null.*ignores http\.proxy/)
        assert.include(path.fix, "`cursor-byok setup`")
      }
      yield* applySettings(config, settingsPath)
      assert.strictEqual((yield* pathCheck(config, settingsPath)).path.status, "ok")
    }))

  it.scopedLive("HTTP/1.1 selected with the proxy off fails, naming proxy.port", () =>
    Effect.gen(function*() {
      const { config, settingsPath } = yield* setting({ proxy: { port: null } })
      yield* applySettings(config, settingsPath)
      const { path } = yield* pathCheck(config, settingsPath)
      assert.strictEqual(path.status, "FAIL", path.detail)
      assert.include(path.detail, "the proxy is off")
      assert.include(path.fix, "proxy.port")
    }))
})

describe("doctor's models", () => {
  /** A configuration (nothing listening but the fake provider) with `providers` and `models` of the test's own. */
  const configWith = (providerUrl: string, overrides: Record<string, unknown>) =>
    Effect.gen(function*() {
      const dir = yield* tempDirectory("cursor-byok-doctor-models-")
      const config = yield* HookupHarness.configOn({ providerUrl, dir, overrides: { retry: { ...AppHarness.testRetry, idleTimeoutMs: 300 }, ...overrides } })
      return { config, settingsPath: `${dir}/settings.json` }
    })
  const provider = (id: string, baseUrl: string) => ({ id, api: "openai-chat", baseUrl, apiKeyEnv: AppHarness.API_KEY_ENV })
  const model = (id: string, providerId: string, upstreamModel: string, fallback?: ReadonlyArray<Record<string, unknown>>) => ({
    id,
    provider: providerId,
    upstreamModel,
    contextWindow: 100000,
    ...(fallback === undefined ? {} : { fallback })
  })
  const modelResults = (config: ServerConfig, settingsPath: string, keyVariables?: Readonly<Record<string, string>>) =>
    Doctor.checks({ config, settingsPath, probes: bundleProbes(undefined), platform: "linux", ...(keyVariables === undefined ? {} : { keyVariables }) }).pipe(
      Effect.provide(NodeContext.layer),
      Effect.map((results) => Object.fromEntries(results.map((r) => [r.name, r])))
    )

  it.scopedLive("a model that answers only through its fallback is a warning naming the failed target and why", () =>
    Effect.gen(function*() {
      const fake = yield* FakeProvider.make
      fake.setFallback(() => FakeProvider.sse(FakeProvider.openAiChat.text("OK")))
      const refusedPort = yield* Effect.promise(() => freePort())
      const down = `http://127.0.0.1:${refusedPort}/v1`
      const { config, settingsPath } = yield* configWith(fake.baseUrl, {
        providers: [provider("down", down), provider("fake-openai", fake.baseUrl)],
        models: [model("fake-model", "down", "primary-model", [{ provider: "fake-openai", upstreamModel: "fake-upstream" }])]
      })
      const results = yield* modelResults(config, settingsPath)
      const line = results["model fake-model"]!
      assert.strictEqual(line.status, "WARN", Doctor.format(Object.values(results)))
      assert.match(line.detail, /^answers only through its fallback fake-openai\/fake-upstream: down\/primary-model: .*ECONNREFUSED/)
      assert.include(line.fix, `nothing listens at ${down}: is provider down running? Check the port`)
      assert.strictEqual(fake.requests.length, 1)
    }))

  it.scopedLive("each failure's fix follows its cause: host name, nothing listening, timeout, the key, the upstream model name", () =>
    Effect.gen(function*() {
      const fake = yield* FakeProvider.make
      fake.setFallback((request) => {
        const asked = (JSON.parse(request.body) as { model: string }).model
        return asked === "stalls"
          ? FakeProvider.stall
          : asked === "refused-key"
          ? FakeProvider.status(401, { error: { message: "Incorrect API key provided" } })
          : asked === "forbidden"
          ? FakeProvider.status(403, { error: { message: "not allowed" } })
          : FakeProvider.status(404, { error: { message: `The model \`${asked}\` does not exist`, code: "model_not_found" } })
      })
      const refusedPort = yield* Effect.promise(() => freePort())
      const { config, settingsPath } = yield* configWith(fake.baseUrl, {
        providers: [
          provider("fake-openai", fake.baseUrl),
          provider("nowhere", "http://no-such-host.invalid/v1"),
          provider("down", `http://127.0.0.1:${refusedPort}/v1`)
        ],
        models: [
          model("dns", "nowhere", "m"),
          model("refused", "down", "m"),
          model("slow", "fake-openai", "stalls"),
          model("key", "fake-openai", "refused-key"),
          model("forbidden", "fake-openai", "forbidden"),
          model("typo", "fake-openai", "gpt-5o")
        ]
      })
      const results = yield* modelResults(config, settingsPath, { "fake-openai": AppHarness.API_KEY_ENV })
      const table = Doctor.format(Object.values(results))
      for (const name of ["dns", "refused", "slow", "key", "forbidden", "typo"]) assert.strictEqual(results[`model ${name}`]!.status, "FAIL", table)
      assert.match(results["model dns"]!.fix, /^the host name in provider nowhere's baseUrl \(http:\/\/no-such-host\.invalid\/v1\) does not resolve/, table)
      assert.match(results["model refused"]!.fix, /^nothing listens at http:\/\/127\.0\.0\.1:\d+\/v1: is provider down running\?/, table)
      assert.match(results["model slow"]!.fix, /did not answer in time/, table)
      assert.match(results["model key"]!.fix, new RegExp(`^the key: ${AppHarness.API_KEY_ENV} \\(provider fake-openai's apiKeyEnv\\) is refused`), table)
      assert.match(results["model forbidden"]!.fix, /^the key: /, table)
      assert.match(results["model typo"]!.fix, /^the upstream model name: "gpt-5o" is not a model provider fake-openai serves/, table)
      assert.include(results["model typo"]!.detail, "does not exist")
    }))

  it.scopedLive("no models fails the configuration line; a key variable not set fails, named", () =>
    Effect.gen(function*() {
      const none = yield* configWith("http://127.0.0.1:9/v1", { models: [] })
      const empty = yield* modelResults(none.config, none.settingsPath)
      assert.strictEqual(empty["configuration"]!.status, "FAIL")
      assert.include(empty["configuration"]!.detail, "0 models")
      const fake = yield* FakeProvider.make
      fake.setFallback(() => FakeProvider.status(401, { error: { message: "no key" } }))
      const dir = yield* tempDirectory("cursor-byok-doctor-keys-")
      const file = Schema.decodeUnknownSync(Config.FileConfig)(AppHarness.fileConfigJson(fake.baseUrl, {
        home: `${dir}/home`,
        providers: [{ id: "fake-openai", api: "openai-chat", baseUrl: fake.baseUrl, apiKeyEnv: "BYOK_TEST_UNSET_KEY" }],
        models: [model("fake-model", "fake-openai", "fake-upstream")]
      }))
      const config = Config.resolve(file, {})
      const results = yield* modelResults(config, `${dir}/settings.json`, { "fake-openai": "BYOK_TEST_UNSET_KEY" })
      assert.strictEqual(results["provider keys"]!.status, "FAIL")
      assert.include(results["provider keys"]!.detail, "BYOK_TEST_UNSET_KEY (fake-openai) is not set")
      assert.include(results["provider keys"]!.fix, "BYOK_TEST_UNSET_KEY")
      // With the key set, the line is ok.
      const keyed = yield* modelResults(Config.resolve(file, { BYOK_TEST_UNSET_KEY: "sk-x" }), `${dir}/settings.json`, { "fake-openai": "BYOK_TEST_UNSET_KEY" })
      assert.strictEqual(keyed["provider keys"]!.status, "ok")
    }))
})
