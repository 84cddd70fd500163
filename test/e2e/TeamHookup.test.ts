/**
 * The developer's side of a team's server: this machine's cursor-byok keeps its proxy (and CA),
 * `proxy.upstreamServer` names the team's server and `proxy.upstreamToken` the developer's
 * token. Cursor's agent traffic, through the proxy, reaches the team's server with that token in
 * place of Cursor's own credentials; the turn is the developer's there, and nothing of it is
 * kept here. A wrong token is refused readably, end to end.
 */
import { NodeContext } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Option, Redacted } from "effect"
import * as UsersCli from "../../src/cli/Users.js"
import * as Store from "../../src/Store.js"
import { Users } from "../../src/Users.js"
import * as AppHarness from "../support/AppHarness.js"
import { CursorClient } from "../support/CursorClient.js"
import * as FakeProvider from "../support/FakeProvider.js"
import * as HookupHarness from "../support/HookupHarness.js"
import * as Ca from "../../src/hookup/Ca.js"
import * as Team from "../../src/hookup/Team.js"
import * as Config from "../../src/Config.js"
import { readFileSync, statSync, writeFileSync } from "node:fs"
import { proxyAgent } from "../support/ProxyClient.js"
import { assertCleanOk, endCode, tempDirectory } from "../support/Transcripts.js"

/** The developer's own server, its proxy pointed at `url` with `token`. */
const developerServer = (url: string, token: string) =>
  Effect.gen(function*() {
    const provider = yield* FakeProvider.make
    const dir = yield* tempDirectory("cursor-byok-dev-")
    const base = yield* HookupHarness.configOn({ providerUrl: provider.baseUrl, dir })
    const config = { ...base, proxy: { ...base.proxy, upstreamServer: { url, token: Redacted.make(token) } } }
    const ports = yield* HookupHarness.serveConfig(config)
    const ca = yield* Ca.load(config.home).pipe(Effect.provide(NodeContext.layer), Effect.orDie)
    return { ...ports, ca, provider, database: config.database }
  })

const throughProxy = (developer: { readonly proxyPort: number; readonly ca: Ca.Authority }) =>
  Effect.acquireRelease(
    Effect.sync(() => new CursorClient({ baseUrl: "https://api2.cursor.sh", agent: proxyAgent(developer.proxyPort, [developer.ca.certPem]), turnTimeoutMs: 20_000 })),
    (client) => Effect.sync(() => client.close())
  )

describe("a developer's hookup pointed at a team's server", () => {
  it.scoped("the agent's turn reaches the team's server as the developer's; a wrong token is refused in Cursor's words", () =>
    Effect.gen(function*() {
      const dir = yield* tempDirectory("cursor-byok-team-")
      const database = `${dir}/team.sqlite`
      const token = yield* Effect.gen(function*() {
        return (yield* (yield* Users).add({ name: "carol" })).token
      }).pipe(Effect.provide(Layer.fresh(UsersCli.layerOn(database))), Effect.scoped, Effect.orDie)
      const team = yield* AppHarness.make({ database })

      const developer = yield* developerServer(team.baseUrl, token)
      const client = yield* throughProxy(developer)
      team.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.text("Hello from the team")))
      const transcript = yield* Effect.promise(() => client.run({ conversationId: "conv-carol", text: "hi" }))
      assertCleanOk(transcript)
      // The team's provider answered, with the team's key; the developer's own provider saw nothing.
      assert.strictEqual(team.provider.requests.length, 1)
      assert.strictEqual(developer.provider.requests.length, 0)
      const history = yield* AppHarness.messagesOf(team, "conv-carol")
      assert.deepStrictEqual(history.map((m) => m.role), ["user", "assistant"])
      const owner = yield* Effect.gen(function*() {
        return yield* (yield* Users).ownerOf("conv-carol")
      }).pipe(Effect.provide(Layer.fresh(UsersCli.layerOn(database))), Effect.scoped, Effect.orDie)
      assert.isTrue(Option.isSome(owner))
      // Nothing of the turn on this machine.
      const local = yield* Effect.gen(function*() {
        return yield* (yield* Store.Store).load("conv-carol")
      }).pipe(Effect.provide(Layer.fresh(Store.layer(developer.database))), Effect.scoped, Effect.orDie)
      assert.isTrue(Option.isNone(local))

      // A developer whose token is not the team's: Cursor reads why.
      const stranger = yield* developerServer(team.baseUrl, "byok_u_not-issued")
      const strangerClient = yield* throughProxy(stranger)
      const refused = yield* Effect.promise(() => strangerClient.run({ conversationId: "conv-stranger", text: "hi" }))
      assert.notStrictEqual(endCode(refused), "Ok")
      assert.include(JSON.stringify(refused.end ?? refused.problems), "not one of this server's users")
    }), { timeout: 60_000 })

  it.scoped("setup --server --token: the token is tried first, then the configuration file points the proxy at the team's server (kept private)", () =>
    Effect.gen(function*() {
      const dir = yield* tempDirectory("cursor-byok-setup-team-")
      const database = `${dir}/team.sqlite`
      const token = yield* Effect.gen(function*() {
        return (yield* (yield* Users).add({ name: "dave" })).token
      }).pipe(Effect.provide(Layer.fresh(UsersCli.layerOn(database))), Effect.scoped, Effect.orDie)
      const team = yield* AppHarness.make({ database })
      const configPath = `${dir}/byok.config.json`
      writeFileSync(configPath, `{\n  "port": 9000\n}\n`)
      const point = (server: string, given: string) => Team.pointAtTeam({ server, token: given, configPath }).pipe(Effect.provide(NodeContext.layer))

      const wrong = yield* Effect.flip(point(team.baseUrl, "byok_u_not-issued"))
      assert.include(wrong.message, "refused the token (401")
      const nowhere = yield* Effect.flip(point("http://127.0.0.1:1", token))
      assert.include(nowhere.message, "cannot reach http://127.0.0.1:1")
      const path = yield* Effect.flip(point(`${team.baseUrl}/v1`, token))
      assert.include(path.message, "without a path")
      assert.strictEqual(readFileSync(configPath, "utf8"), `{\n  "port": 9000\n}\n`, "nothing written before the token works")

      const pointed = yield* point(team.baseUrl, token)
      assert.strictEqual(pointed.server, team.baseUrl)
      assert.strictEqual(statSync(configPath).mode & 0o777, 0o600)
      const config = yield* Config.loadFrom({ path: configPath, explicit: true, env: {} }).pipe(Effect.provide(NodeContext.layer), Effect.orDie)
      assert.strictEqual(config.port, 9000)
      assert.strictEqual(config.proxy.upstreamServer?.url, team.baseUrl)
      assert.strictEqual(config.proxy.upstreamServer?.token === undefined ? undefined : Redacted.value(config.proxy.upstreamServer.token), token)
    }), { timeout: 60_000 })
})
