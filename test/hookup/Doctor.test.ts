/**
 * `doctor` against a real server (every listener, the proxy checked by a real CONNECT + TLS),
 * real files and a fake provider: all green on a healthy setup, and on a broken one (server
 * down, CA missing, settings not applied) exactly the checks that are broken fail. The OS's
 * trust store is the one thing stubbed (its probes), so no test changes the machine.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { writeFileSync } from "node:fs"
import * as Ca from "../../src/hookup/Ca.js"
import * as CursorSettings from "../../src/hookup/CursorSettings.js"
import * as Doctor from "../../src/hookup/Doctor.js"
import { desiredFor } from "../../src/hookup/Setup.js"
import type * as Trust from "../../src/hookup/Trust.js"
import type { ServerConfig } from "../../src/Config.js"
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
      assert.deepStrictEqual(statusOf(results), {
        "configuration": "ok",
        "server reachable": "FAIL",
        "CA valid and name-constrained": "ok",
        "proxy listening": "FAIL",
        "CA trusted by this OS": "FAIL",
        "Cursor settings applied": "FAIL",
        "Cursor agent path": "ok",
        "HTTP/2 listener (Run)": "FAIL",
        "model fake-model": "FAIL"
      }, Doctor.format(results))
      const fixOf = (name: string) => results.find((r) => r.name === name)!.fix
      assert.include(fixOf("server reachable"), "cursor-byok serve")
      assert.include(fixOf("Cursor settings applied"), "cursor-byok setup")
      assert.include(fixOf("CA trusted by this OS"), "setup --trust")
    }))

  it.scopedLive("a missing CA is named as such (and the proxy cannot be checked without it)", () =>
    Effect.gen(function*() {
      const provider = yield* FakeProvider.make
      const dir = yield* tempDirectory("cursor-byok-doctor-")
      const config = yield* HookupHarness.configOn({ providerUrl: provider.baseUrl, dir, overrides: { models: [] } })
      const results = yield* runChecks(config, `${dir}/settings.json`, bundleProbes(undefined))
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
