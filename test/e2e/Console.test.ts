/**
 * The web console over plain HTTP (the browser test is `Console.browser.test.ts`), on the live
 * clock (calls are stamped with real times, and retries sleep): what a model
 * call records for it (first delta, attempts, the target that answered), the pages' contents
 * and escaping, the token rule on a non-loopback host, messages hidden unless revealed from
 * loopback, and no key in any page.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as AppHarness from "../support/AppHarness.js"
import { answer, consoleConfig, CONVERSATION, expectedBreakByte, get, OTHER, scriptSession, TITLE } from "../support/ConsoleSession.js"
import * as FakeProvider from "../support/FakeProvider.js"
import { assertCleanOk, clientFor } from "../support/Transcripts.js"

const TOKEN = "console-token-0123456789"
const path = (id: string) => `/console/conversations/${encodeURIComponent(id)}`

describe("Console over HTTP", () => {
  it.scopedLive("a scripted session: the store records first delta, attempts and target; the overview lists both conversations; the conversation page shows each call and the break at its byte", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: consoleConfig() })
      const client = yield* clientFor(app, { turnTimeoutMs: 15_000 })
      yield* scriptSession(app, client)

      const calls = yield* app.store.callsOf(CONVERSATION).pipe(Effect.orDie)
      assert.strictEqual(calls.length, 3)
      for (const call of calls) {
        assert.strictEqual(call.status, "committed")
        assert.strictEqual(call.attempts, 1)
        assert.isNotNull(call.firstDeltaMs)
        assert.isAtLeast(call.firstDeltaMs!, 0)
        assert.match(call.target ?? "", /^fake-openai\//)
        assert.isAbove(call.requestChars, 0)
        assert.isAbove(call.costUsd ?? 0, 0)
      }
      assert.isAbove(calls[1]!.requestChars, calls[0]!.requestChars)

      const overview = yield* get(app, "/console")
      assert.strictEqual(overview.status, 200)
      // The charts count the calls of the last hours (the live clock stamped them).
      assert.match(overview.body, /<title>[^<]*: 4 calls;/)
      assert.include(overview.headers.get("content-type") ?? "", "text/html")
      assert.include(overview.body, TITLE)
      assert.include(overview.body, `data-conversation="${CONVERSATION}"`)
      assert.include(overview.body, `data-conversation="${OTHER}"`)
      assert.include(overview.body, "fake-model")
      assert.include(overview.body, "chart-tokens")

      const page = yield* get(app, path(CONVERSATION))
      assert.strictEqual(page.status, 200)
      assert.strictEqual(page.body.match(/<tr data-call=/g)?.length, 3)
      assert.include(page.body, `data-prefix="First"`)
      assert.include(page.body, `data-prefix="Extends"`)
      const byte = expectedBreakByte(app, 1, 2)
      assert.include(page.body, `data-prefix="Break" data-part="systemPrompt" data-byte="${byte}"`)
      assert.include(page.body, `break in the system prompt: first differing byte ${byte.toLocaleString("en-US")}`)

      const missing = yield* get(app, path("no-such-conversation"))
      assert.strictEqual(missing.status, 404)
      // GET only: nothing else is routed.
      const posted = yield* Effect.promise(() => fetch(`${app.baseUrl}/console`, { method: "POST" }))
      assert.strictEqual(posted.status, 404)
    }))

  it.scopedLive("a retried call records its attempts", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: consoleConfig() })
      const client = yield* clientFor(app, { turnTimeoutMs: 15_000 })
      app.provider.enqueue(FakeProvider.status(503, { error: { message: "busy" } }), answer("after a retry", 100, 0))
      assertCleanOk(yield* Effect.promise(() => client.run({ conversationId: "conv-retry", text: "hello" })))
      const calls = yield* app.store.callsOf("conv-retry").pipe(Effect.orDie)
      assert.strictEqual(calls[0]?.attempts, 2)
    }))

  it.scopedLive("every value is escaped: a first message with <script> is text, in the list and on its page", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: consoleConfig() })
      const client = yield* clientFor(app, { turnTimeoutMs: 15_000 })
      app.provider.enqueue(answer("ok", 100, 0))
      const id = "conv-<b>x</b>\"'"
      assertCleanOk(yield* Effect.promise(() => client.run({ conversationId: id, text: "<script>alert('x')</script> & <img src=x onerror=alert(1)>" })))
      const overview = (yield* get(app, "/console")).body
      const page = (yield* get(app, path(id))).body
      for (const body of [overview, page]) {
        assert.notInclude(body, "<script>alert")
        assert.notInclude(body, "<img src=x")
        assert.notInclude(body, "<b>x</b>")
        assert.include(body, "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &lt;img src=x onerror=alert(1)&gt;")
      }
      // The only scripts are the console's own: one on the overview, none on a conversation's page.
      assert.strictEqual(overview.match(/<script/g)?.length, 1)
      assert.strictEqual(page.match(/<script/g)?.length ?? 0, 0)
      const headers = (yield* get(app, path(id))).headers
      assert.match(headers.get("content-security-policy") ?? "", /script-src 'nonce-[^']+'/)
    }))

  it.scopedLive("messages are hidden by default and shown with ?messages=1 to a loopback client; no page shows a key", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: consoleConfig() })
      const client = yield* clientFor(app, { turnTimeoutMs: 15_000 })
      yield* scriptSession(app, client)
      const hidden = yield* get(app, path(CONVERSATION))
      assert.notInclude(hidden.body, "Tests run with vitest.")
      assert.notInclude(hidden.body, "Answer briefly")
      assert.include(hidden.body, `id="show-messages"`)
      const shown = yield* get(app, `${path(CONVERSATION)}?messages=1`)
      assert.include(shown.body, "Tests run with vitest.")
      assert.include(shown.body, "And the tests?")
      for (const page of ["/console", "/console?range=14d", path(CONVERSATION), `${path(CONVERSATION)}?messages=1`, path(OTHER), "/console/api/running"]) {
        const { body, status } = yield* get(app, page)
        assert.strictEqual(status, 200, page)
        assert.notInclude(body, AppHarness.API_KEY, page)
        assert.notInclude(body, AppHarness.API_KEY_ENV, page)
      }
    }))

  it.scopedLive("a non-loopback host without a token: 403 saying how to set one", () =>
    Effect.gen(function*() {
      // The harness still listens on loopback; the configured host is what the rule reads.
      const app = yield* AppHarness.make({ config: consoleConfig({ host: "0.0.0.0" }) })
      for (const page of ["/console", path("x"), "/console/api/running", `/console?token=${TOKEN}`]) {
        const { body, status } = yield* get(app, page)
        assert.strictEqual(status, 403, page)
        assert.include(body, "console.token")
        assert.include(body, "BYOK_CONSOLE_TOKEN")
      }
    }))

  it.scopedLive("a non-loopback host with a token: 401 without it or with a wrong one; the query or a bearer header opens every page, and links carry the query token", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: consoleConfig({ host: "0.0.0.0", console: { token: TOKEN } }) })
      // Off loopback the agent's requests need the token too (here as a reverse proxy would add it).
      const client = yield* clientFor(app, { turnTimeoutMs: 15_000, extraHeaders: { "x-byok-token": TOKEN } })
      yield* scriptSession(app, client)
      for (const page of ["/console", path(CONVERSATION), "/console/api/running"]) {
        assert.strictEqual((yield* get(app, page)).status, 401, page)
        assert.strictEqual((yield* get(app, `${page}?token=wrong-token-0123456789`)).status, 401, page)
        assert.strictEqual((yield* get(app, page, { authorization: "Bearer wrong" })).status, 401, page)
        assert.strictEqual((yield* get(app, page, { authorization: `Bearer ${TOKEN}` })).status, 200, page)
      }
      const withQuery = yield* get(app, `/console?token=${TOKEN}`)
      assert.strictEqual(withQuery.status, 200)
      assert.include(withQuery.body, `${path(CONVERSATION)}?token=${TOKEN}`)
      // Messages from a loopback client, with the token.
      const shown = yield* get(app, `${path(CONVERSATION)}?messages=1&token=${TOKEN}`)
      assert.include(shown.body, "Tests run with vitest.")
    }))

  it.scopedLive("a loopback host refuses a Host header that is not loopback (a rebound DNS name)", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: consoleConfig() })
      const status = yield* Effect.promise(() =>
        new Promise<number>((resolve, reject) => {
          import("node:http").then(({ request }) => {
            const req = request({ host: "127.0.0.1", port: app.port, path: "/console", headers: { host: `evil.example:${app.port}` } }, (res) => {
              res.resume()
              resolve(res.statusCode ?? 0)
            })
            req.on("error", reject)
            req.end()
          }, reject)
        })
      )
      assert.strictEqual(status, 403)
    }))
})
