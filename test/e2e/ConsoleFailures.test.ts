/**
 * What the console shows of failures, over plain HTTP (the browser test is
 * `ConsoleFailures.browser.test.ts`): a model whose primary provider refuses every connection
 * and whose fallback answers. The store records each failed attempt (target, network error,
 * time) with its call; the overview counts them per model and per provider though every call
 * was answered; the call's page lists them in order with the answering fallback last; the call
 * log filters by model, provider, outcome and time and pages; statuses read in words.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as AppHarness from "../support/AppHarness.js"
import { answer, get } from "../support/ConsoleSession.js"
import * as Down from "../support/DownProvider.js"
import * as FakeProvider from "../support/FakeProvider.js"
import { assertCleanOk, clientFor } from "../support/Transcripts.js"

const callPath = (id: string) => `/console/calls/${encodeURIComponent(id)}`

/** The text of an HTML fragment's cells, tags dropped (for asserting what a row reads). */
const textOf = (markup: string) => markup.replace(/<[^>]+>/g, " ").replace(/&middot;/g, "·").replace(/\s+/g, " ").trim()

const rowOf = (body: string, attribute: string) => {
  const at = body.indexOf(attribute)
  assert.isAtLeast(at, 0, `no row ${attribute}`)
  return body.slice(at, body.indexOf("</tr>", at))
}

describe("Console: failures", () => {
  it.scopedLive("a primary that refuses, a fallback that answers: attempts recorded, counted per model and provider, listed on the call's page", () =>
    Effect.gen(function*() {
      const app = yield* Down.makeApp
      const client = yield* clientFor(app, { turnTimeoutMs: 20_000 })
      yield* Down.twoTurns(app, client)

      const calls = yield* app.store.callsOf(Down.CONVERSATION).pipe(Effect.orDie)
      assert.strictEqual(calls.length, 2)
      const attempts = yield* app.store.attemptsOf({ conversationId: Down.CONVERSATION }).pipe(Effect.orDie)
      assert.strictEqual(attempts.length, 2 * Down.FAILED_PER_CALL)
      for (const call of calls) {
        assert.strictEqual(call.status, "committed")
        assert.strictEqual(call.target, Down.FALLBACK_TARGET)
        const own = yield* app.store.attemptsOf({ callId: call.callId }).pipe(Effect.orDie)
        assert.deepStrictEqual(own.map((a) => [a.seq, a.provider, a.upstreamModel, a.attempt, a.status, a.reason]), [
          [0, Down.DOWN, Down.DOWN_UPSTREAM, 1, null, "network"],
          [1, Down.DOWN, Down.DOWN_UPSTREAM, 2, null, "network"],
          [2, Down.DOWN, Down.DOWN_UPSTREAM, 3, null, "network"]
        ])
        for (const a of own) {
          assert.match(a.error, /connection failed/)
          assert.isAtLeast(a.failedAtMs, a.startedAtMs)
          assert.isAtLeast(a.startedAtMs, call.createdAtMs)
        }
      }

      // The overview: no call failed, but six attempts did, on the model and on its primary provider.
      const overview = (yield* get(app, "/console")).body
      const model = rowOf(overview, `<tr data-model="fake-model"`)
      assert.include(model, `data-col="failed-calls">0<`)
      assert.include(model, `data-col="failed-attempts">${2 * Down.FAILED_PER_CALL}<`)
      const rate = `${2 * Down.FAILED_PER_CALL} of ${2 * Down.FAILED_PER_CALL + 2}`
      assert.include(textOf(model), rate)
      assert.include(textOf(model), "network error")
      assert.notInclude(textOf(model), "none")
      const down = rowOf(overview, `<tr data-provider="${Down.DOWN}"`)
      assert.include(down, `data-col="failed-attempts">${2 * Down.FAILED_PER_CALL}<`)
      assert.include(textOf(down), "connection failed")
      const fallback = rowOf(overview, `<tr data-provider="fake-openai"`)
      assert.include(fallback, `data-col="failed-attempts">0<`)
      assert.include(textOf(fallback), "none")

      // The call's page: three refused attempts on the primary, then the fallback's answer.
      const page = yield* get(app, callPath(calls[0]!.callId))
      assert.strictEqual(page.status, 200)
      const outcomes = [...page.body.matchAll(/data-outcome="([a-z]+)"/g)].map((m) => m[1])
      assert.deepStrictEqual(outcomes, ["failed", "failed", "failed", "answered"])
      assert.include(page.body, `<code>${Down.DOWN}/${Down.DOWN_UPSTREAM}</code>`)
      assert.include(textOf(page.body), `${Down.FAILED_PER_CALL} failed`)
      assert.include(textOf(page.body), "answered")
      assert.notInclude(page.body, "committed<")
      // The conversation's page: the call's attempts column and a link to its page; its id and start.
      const conversation = (yield* get(app, `/console/conversations/${Down.CONVERSATION}`)).body
      assert.include(conversation, `href="${callPath(calls[0]!.callId)}"`)
      assert.include(textOf(rowOf(conversation, `<tr data-call="${calls[0]!.callId}"`)), `${Down.FAILED_PER_CALL} failed`)
      assert.match(textOf(conversation), new RegExp(`Conversation ${Down.CONVERSATION} · started \\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d UTC`))
      assert.notInclude(conversation, ">waitingLlm<")
      assert.strictEqual((yield* get(app, callPath("no-such-call"))).status, 404)
    }))

  it.scopedLive("a call's page shows the request it sent, the history it shared with the previous call folded, and its answer, to a loopback client that asks", () =>
    Effect.gen(function*() {
      const app = yield* Down.makeApp
      const client = yield* clientFor(app, { turnTimeoutMs: 20_000 })
      yield* Down.twoTurns(app, client)
      const calls = yield* app.store.callsOf(Down.CONVERSATION).pipe(Effect.orDie)
      const hidden = (yield* get(app, callPath(calls[1]!.callId))).body
      assert.notInclude(hidden, "And now?")
      assert.include(hidden, `id="show-request"`)
      assert.include(hidden, "is not kept")
      const shown = (yield* get(app, `${callPath(calls[1]!.callId)}?messages=1`)).body
      const history = shown.slice(shown.indexOf(`<details id="history">`), shown.indexOf("</details>", shown.indexOf(`<details id="history">`)))
      assert.include(history, "the previous request sent too")
      assert.include(history, "Is the primary up?")
      assert.include(history, "1 message the previous request sent too")
      // What it added: the previous call's answer and the new user message.
      const added = shown.slice(shown.indexOf(`<div id="added">`), shown.indexOf(`<section id="answer">`))
      assert.include(shown, "Added by this call (2)")
      assert.include(added, "The fallback answered.")
      assert.include(added, "And now?")
      assert.notInclude(added, "Is the primary up?")
      assert.include(shown.slice(shown.indexOf(`<section id="answer">`)), "The fallback again.")
    }))

  it.scopedLive("the call log: every conversation's calls, filtered by model, provider, outcome and time, paged", () =>
    Effect.gen(function*() {
      const app = yield* AppHarness.make({ config: { retry: { ...AppHarness.testRetry, maxRetries: 0 } } })
      const client = yield* clientFor(app, { turnTimeoutMs: 20_000 })
      // One failed call (a 400 is not retried), one retried... no: retries are off; one answered per conversation.
      app.provider.enqueue(FakeProvider.status(400, { error: { message: "bad things" } }))
      const failed = yield* Effect.promise(() => client.run({ conversationId: "conv-log-failed", text: "fail" }))
      assert.notStrictEqual(failed.end?._tag, "Ok")
      for (let i = 0; i < 52; i++) {
        app.provider.enqueue(answer(`answer ${i}`, 100, 0))
        assertCleanOk(yield* Effect.promise(() => client.run({ conversationId: `conv-log-${i}`, text: `hello ${i}` })))
      }
      const all = (yield* get(app, "/console/calls")).body
      assert.include(all, `data-total="53"`)
      assert.strictEqual(all.match(/<tr data-call=/g)?.length, 50)
      assert.include(textOf(all), "1–50 of 53")
      const second = (yield* get(app, "/console/calls?page=2")).body
      assert.strictEqual(second.match(/<tr data-call=/g)?.length, 3)
      assert.include(second, `data-status="failed"`)
      assert.include(second, `id="newer"`)
      const onlyFailed = (yield* get(app, "/console/calls?outcome=failed")).body
      assert.include(onlyFailed, `data-total="1"`)
      assert.include(onlyFailed, "conv-log-failed")
      assert.include(textOf(onlyFailed), "bad things")
      assert.include((yield* get(app, "/console/calls?outcome=answered")).body, `data-total="52"`)
      assert.include((yield* get(app, "/console/calls?outcome=failed&model=fake-claude")).body, `data-total="0"`)
      assert.include((yield* get(app, "/console/calls?provider=fake-openai&outcome=answered")).body, `data-total="52"`)
      assert.include((yield* get(app, "/console/calls?provider=fake-anthropic")).body, `data-total="0"`)
      assert.include((yield* get(app, "/console/calls?range=1h")).body, `data-total="53"`)
      assert.include((yield* get(app, "/console/calls?conversation=conv-log-7")).body, `data-total="1"`)
      // The filters are links keeping the others.
      assert.include(onlyFailed, `href="/console/calls?outcome=failed&amp;range=1h"`)
    }), 90_000)
})
