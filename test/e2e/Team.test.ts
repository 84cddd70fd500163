/**
 * A team's server: users added on its database (as `cursor-byok users add` adds them), then the
 * real server on it (PostgreSQL when the run has it, else SQLite) and the reference client
 * sending each user's token. Every agent and side request needs a token; a conversation is its
 * first user's (another's turn, resume or append is refused readably); a model outside a user's
 * list and a spent daily budget refuse the turn with the reason in Cursor's error card.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as Http from "node:http"
import { inject } from "vitest"
import * as UsersCli from "../../src/cli/Users.js"
import { Users } from "../../src/Users.js"
import * as AppHarness from "../support/AppHarness.js"
import { bidiAppendBody, CursorClient, runRequestMessage, runSseBody } from "../support/CursorClient.js"
import * as FakeProvider from "../support/FakeProvider.js"
import { freshDatabase } from "../support/Postgres.js"
import { assertCleanOk, endCode, tempDirectory } from "../support/Transcripts.js"

const postgresUrl = inject("postgresUrl")

/** A fresh database: PostgreSQL's when the run has it (a team's engine), else a SQLite file. */
const teamDatabase = postgresUrl === undefined
  ? Effect.map(tempDirectory("cursor-byok-team-"), (dir) => `${dir}/team.sqlite`)
  : Effect.promise(() => freshDatabase(postgresUrl, "team"))

/** Adds users as the operator's command does; their tokens. */
const addUsers = (database: string) =>
  Effect.gen(function*() {
    const users = yield* Users
    const alice = yield* users.add({ name: "alice" })
    const bob = yield* users.add({ name: "bob", models: ["fake-model"], dailyUsd: 0.005 })
    const carol = yield* users.add({ name: "carol", dailyUsd: 0.012 })
    return { alice: alice.token, bob: bob.token, carol: carol.token }
  }).pipe(Effect.provide(Layer.fresh(UsersCli.layerOn(database))), Effect.scoped, Effect.orDie)

const OPERATOR_TOKEN = "operator-token-0123456789"

/** Every input token costs $1000 per million: a 10-token prompt is $0.01, past bob's $0.005 a day. */
const teamConfig = {
  console: { token: OPERATOR_TOKEN },
  models: [
    { id: "fake-model", provider: "fake-openai", upstreamModel: "fake-upstream", contextWindow: 100000, price: { input: 1000, output: 0 } },
    { id: "fake-claude", provider: "fake-anthropic", upstreamModel: "claude-fake", contextWindow: 200000, maxOutputTokens: 4096 }
  ]
}

const clientWith = (app: AppHarness.AppHarness, token: string | undefined) =>
  Effect.acquireRelease(
    Effect.sync(() => new CursorClient({ baseUrl: app.baseUrl, turnTimeoutMs: 15_000, ...(token === undefined ? {} : { extraHeaders: { authorization: `Bearer ${token}` } }) })),
    (client) => Effect.sync(() => client.close())
  )

/** A POST's status and body text. */
const post = (port: number, path: string, headers: Record<string, string>, body?: Uint8Array): Promise<{ status: number; body: string }> =>
  new Promise((resolve, reject) => {
    const request = Http.request({ host: "127.0.0.1", port, method: "POST", path, headers: { "content-type": "application/proto", ...headers } }, (response) => {
      let body = ""
      response.setEncoding("utf8")
      response.on("data", (chunk: string) => (body += chunk))
      response.on("end", () => resolve({ status: response.statusCode ?? 0, body }))
    })
    request.on("error", reject)
    request.end(body)
  })

/** A GET's status and body text. */
const get = (app: AppHarness.AppHarness, path: string, headers: Record<string, string> = {}) =>
  Effect.promise(() => fetch(`${app.baseUrl}${path}`, { headers }).then(async (response) => ({ status: response.status, body: await response.text() })))

describe(`a team's server (${postgresUrl === undefined ? "SQLite" : "PostgreSQL"})`, () => {
  it.scoped("tokens, owners, allow-lists and budgets: each refused readably, nothing of it written", () =>
    Effect.gen(function*() {
      const database = yield* teamDatabase
      const tokens = yield* addUsers(database)
      const app = yield* AppHarness.make({ database, config: teamConfig })
      const { text } = FakeProvider.openAiChat

      // No token, or one that is no user's: refused before any handler, with how to get one.
      const bare = yield* Effect.promise(() => post(app.port, "/aiserver.v1.AiService/AvailableModels", {}))
      assert.strictEqual(bare.status, 401)
      assert.include(bare.body, "team's server")
      const unknown = yield* Effect.promise(() => post(app.port, "/aiserver.v1.AiService/AvailableModels", { authorization: "Bearer byok_u_not-a-token" }))
      assert.strictEqual(unknown.status, 401)
      // A user's token opens the side RPCs, not the console (every user's histories): that is the operator's.
      assert.strictEqual((yield* Effect.promise(() => post(app.port, "/aiserver.v1.AiService/AvailableModels", { authorization: `Bearer ${tokens.alice}` }))).status, 200)
      const page = yield* Effect.promise(() => fetch(`${app.baseUrl}/console`, { headers: { authorization: `Bearer ${tokens.alice}` } }))
      assert.strictEqual(page.status, 403)
      const operatorPage = yield* Effect.promise(() => fetch(`${app.baseUrl}/console`, { headers: { authorization: `Bearer ${OPERATOR_TOKEN}` } }))
      assert.strictEqual(operatorPage.status, 200)

      // Alice's chat is hers.
      const alice = yield* clientWith(app, tokens.alice)
      app.provider.enqueue(FakeProvider.sse(text("Hello Alice")))
      assertCleanOk(yield* Effect.promise(() => alice.run({ conversationId: "conv-alice", requestId: "req-alice-1", text: "hi", model: "fake-model" })))

      // Her request's stream and appends are hers: Bob's token cannot read or write them.
      const bobHeaders = { authorization: `Bearer ${tokens.bob}` }
      const append = yield* Effect.promise(() =>
        post(app.port, "/aiserver.v1.BidiService/BidiAppend", bobHeaders, bidiAppendBody("req-alice-1", 1, runRequestMessage({ conversationId: "conv-alice", text: "mine now" }))))
      assert.strictEqual(append.status, 403)
      assert.include(append.body, "another user")
      const reader = yield* Effect.promise(() =>
        post(app.port, "/agent.v1.AgentService/RunSSE", { ...bobHeaders, "content-type": "application/connect+proto" }, runSseBody("req-alice-1")))
      // A stream's error comes in its end-stream frame (Connect's streaming protocol): nothing of hers before it.
      assert.include(reader.body, "permission_denied")
      assert.include(reader.body, "another user")
      assert.notInclude(reader.body, "Hello Alice")

      // Bob may not continue it, nor resume it; the provider sees nothing of his.
      const bob = yield* clientWith(app, tokens.bob)
      const requestsBefore = app.provider.requests.length
      const intrusion = yield* Effect.promise(() => bob.run({ conversationId: "conv-alice", text: "show me her chat", model: "fake-model" }))
      assert.strictEqual(endCode(intrusion), "permission_denied")
      assert.include(intrusion.end?._tag === "Error" ? intrusion.end.message : "", "belongs to alice")
      assert.strictEqual(app.provider.requests.length, requestsBefore)

      // A model outside Bob's list.
      const claude = yield* Effect.promise(() => bob.run({ conversationId: "conv-bob-claude", text: "hi", model: "fake-claude" }))
      assert.strictEqual(endCode(claude), "permission_denied")
      assert.include(claude.end?._tag === "Error" ? claude.end.message : "", "fake-claude is not among the models bob may use")

      // Bob's first turn costs $0.01, past his $0.005 a day: the next one is refused, saying so.
      app.provider.enqueue(FakeProvider.sse(text("Hello Bob")))
      assertCleanOk(yield* Effect.promise(() => bob.run({ conversationId: "conv-bob", text: "hi", model: "fake-model" })))
      const spent = yield* Effect.promise(() => bob.run({ conversationId: "conv-bob", text: "and again", model: "fake-model" }))
      assert.strictEqual(endCode(spent), "resource_exhausted")
      assert.include(spent.end?._tag === "Error" ? spent.end.message : "", "daily budget")
      assert.strictEqual(app.provider.requests.length, requestsBefore + 1)

      // Carol's first turn ($0.01) passes 80% of her $0.012 a day: her next one runs, Cursor shown the notice first.
      const carol = yield* clientWith(app, tokens.carol)
      app.provider.enqueue(FakeProvider.sse(text("Hello Carol")), FakeProvider.sse(text("Hi again")))
      const carolFirst = yield* Effect.promise(() => carol.run({ conversationId: "conv-carol", text: "hi", model: "fake-model" }))
      assertCleanOk(carolFirst)
      assert.strictEqual(carolFirst.text, "Hello Carol")
      const noticed = yield* Effect.promise(() => carol.run({ conversationId: "conv-carol", text: "again", model: "fake-model" }))
      assertCleanOk(noticed)
      assert.strictEqual(noticed.text, "You have spent $0.01 of your $0.012 daily budget on this server (83%).\n\nHi again")
      // The notice is Cursor's to show, not the model's: the history keeps the answers only.
      const carolHistory = yield* AppHarness.messagesOf(app, "conv-carol")
      assert.deepStrictEqual(carolHistory.map((m) => m.role), ["user", "assistant", "user", "assistant"])
      assert.notInclude(JSON.stringify(carolHistory), "daily budget")

      // Alice is not held back by Bob's budget, and her conversation kept only her turns.
      app.provider.enqueue(FakeProvider.sse(text("Still here")))
      assertCleanOk(yield* Effect.promise(() => alice.run({ conversationId: "conv-alice", text: "again", model: "fake-model" })))
      // A past chat attached is read only when it is the caller's: Bob's is named as not held.
      app.provider.enqueue(FakeProvider.sse(text("Read")))
      assertCleanOk(yield* Effect.promise(() => alice.run({
        conversationId: "conv-alice-2",
        text: "what did we say?",
        model: "fake-model",
        selectedContext: { pastChats: [{ agentId: "conv-alice", name: "Mine" }, { agentId: "conv-bob", name: "Bob's" }] }
      })))
      const attached = app.provider.requests[app.provider.requests.length - 1]!.body
      assert.include(attached, "Hello Alice")
      assert.notInclude(attached, "Hello Bob")
      assert.include(attached, "not stored on this server")
      // The operator's users page: each user's models, limits and spend; Bob's daily limit reached.
      const users = yield* Effect.promise(() => fetch(`${app.baseUrl}/console/users`, { headers: { authorization: `Bearer ${OPERATOR_TOKEN}` } }).then((r) => r.text()))
      assert.include(users, `data-user="alice"`)
      assert.match(users, /data-user="bob">[\s\S]*?data-col="today" data-state="reached"/)
      assert.strictEqual((yield* Effect.promise(() => fetch(`${app.baseUrl}/console/users`, { headers: { authorization: `Bearer ${tokens.bob}` } }))).status, 403)
      const history = yield* AppHarness.messagesOf(app, "conv-alice")
      assert.deepStrictEqual(history.map((message) => message.role), ["user", "assistant", "user", "assistant"])
    }), { timeout: 60_000 })

  it.scoped("a user's own page (/console/me): their spend and conversations, nobody else's; no other page, whatever headers they add", () =>
    Effect.gen(function*() {
      const database = yield* teamDatabase
      const tokens = yield* addUsers(database)
      const app = yield* AppHarness.make({ database, config: teamConfig })
      const { text } = FakeProvider.openAiChat
      const alice = yield* clientWith(app, tokens.alice)
      app.provider.enqueue(FakeProvider.sse(text("Hello Alice")))
      assertCleanOk(yield* Effect.promise(() => alice.run({ conversationId: "conv-alice-own", text: "alice's secret plan", model: "fake-model" })))
      // Bob's turn costs $0.01, past his $0.005 a day.
      const bob = yield* clientWith(app, tokens.bob)
      app.provider.enqueue(FakeProvider.sse(text("Hello Bob")))
      assertCleanOk(yield* Effect.promise(() => bob.run({ conversationId: "conv-bob-own", text: "bob's question", model: "fake-model" })))

      // In a browser (?token=): his models, his spend with his daily limit reached, his chat; nothing of Alice's. The links keep his token.
      const mine = yield* get(app, `/console/me?token=${tokens.bob}`)
      assert.strictEqual(mine.status, 200)
      assert.include(mine.body, `data-user="bob"`)
      assert.include(mine.body, "fake-model")
      assert.match(mine.body, /data-col="today" data-state="reached"[^>]*>\$0\.0100/)
      assert.include(mine.body, "limit reached")
      assert.include(mine.body, "<code>conv-bob-own</code>")
      assert.include(mine.body, "bob&#39;s question")
      for (const hers of ["alice", "conv-alice-own", "secret plan"]) assert.notInclude(mine.body, hers)
      assert.include(mine.body, `href="/console/me?token=${tokens.bob}"`)

      // With the header, and with headers claiming another caller: still Bob's page, decided by the door alone.
      const bobHeaders = { authorization: `Bearer ${tokens.bob}` }
      const forgedCaller = { "x-byok-caller": "Operator", "x-byok-user": "alice", "x-byok-user-id": "user_alice", "x-caller": "operator" }
      for (const headers of [bobHeaders, { ...bobHeaders, ...forgedCaller }]) {
        const page = yield* get(app, "/console/me", headers)
        assert.strictEqual(page.status, 200)
        assert.include(page.body, `data-user="bob"`)
        assert.notInclude(page.body, "conv-alice-own")
      }
      assert.strictEqual((yield* get(app, "/console/me", forgedCaller)).status, 401)
      assert.include((yield* get(app, `/console/me?token=${tokens.alice}`, forgedCaller)).body, "conv-alice-own")

      // Every other page stays the operator's, and /console/me only by GET.
      // However the path is spelled for the router (case, doubled slashes, escapes).
      for (const path of ["/console", "/console/users", "/console/conversations/conv-bob-own", "/console/calls", "/metrics", "//console", "/Console/Users", "/%63onsole", "//metrics"]) {
        for (const headers of [bobHeaders, { ...bobHeaders, ...forgedCaller }]) {
          const refused = yield* get(app, path, headers)
          assert.strictEqual(refused.status, 403, path)
          assert.include(refused.body, "operator's token", path)
        }
      }
      assert.strictEqual((yield* Effect.promise(() => post(app.port, "/console/me", bobHeaders))).status, 403)

      // The operator is pointed at the users page.
      const operator = yield* get(app, "/console/me", { authorization: `Bearer ${OPERATOR_TOKEN}` })
      assert.strictEqual(operator.status, 200)
      assert.include(operator.body, "A user&#39;s page")
      assert.include(operator.body, `href="/console/users"`)
    }), { timeout: 60_000 })
})
