/**
 * The console's failure views in a real headless Chromium (as `Console.browser.test.ts`): a
 * model whose primary provider refuses every connection while its fallback answers. The
 * overview counts the failed attempts on the model and on the provider though no call failed,
 * a recent error links to the call, whose page lists each failed attempt and the fallback's
 * answer, with the request folded to what the call added; the call log filters to the calls
 * with failed attempts. At 420 px wide no page is wider than the window (the tables scroll in
 * their own boxes). Screenshots at 1280 and 420 px go to `BYOK_SHOTS` or a temp folder.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { existsSync, mkdirSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { chromium } from "playwright-core"
import type { Browser, Page } from "playwright-core"
import * as Down from "../support/DownProvider.js"
import { clientFor } from "../support/Transcripts.js"

const CHROMIUM = process.env["BYOK_CHROMIUM"] ?? "/usr/bin/chromium"
const SHOTS = process.env["BYOK_SHOTS"] ?? join(tmpdir(), "cursor-byok-console-shots")
const WAIT_MS = 10_000

const launch = Effect.acquireRelease(
  Effect.promise(async (): Promise<Browser> => {
    if (!existsSync(CHROMIUM)) {
      throw new Error(`Chromium is not installed at ${CHROMIUM}: install Debian's chromium (see Console.browser.test.ts) or set BYOK_CHROMIUM.`)
    }
    return chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"] })
  }),
  (browser) => Effect.promise(() => browser.close())
)

const shot = (page: Page, name: string) =>
  Effect.promise(async () => {
    mkdirSync(SHOTS, { recursive: true })
    await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true })
  })

const text = (page: Page, selector: string) => Effect.promise(() => page.locator(selector).first().innerText())
const count = (page: Page, selector: string) => Effect.promise(() => page.locator(selector).count())
const goto = (page: Page, url: string) => Effect.promise(() => page.goto(url))

/** How much wider than the window the page is (0: nothing sticks out; a wide table scrolls in its own box). Page code as text: the tests compile without the DOM's types. */
const overflow = (page: Page) => Effect.promise(() => page.evaluate<number>("document.documentElement.scrollWidth - window.innerWidth"))

/** The elements that stick out of the window outside any scrolling box (for the failure's message). */
const sticking = (page: Page) =>
  Effect.promise(() =>
    page.evaluate<string>(`(() => {
      const out = []
      for (const element of document.querySelectorAll("body *")) {
        const right = Math.round(element.getBoundingClientRect().right)
        if (right <= window.innerWidth + 1) continue
        let scrolls = false
        for (let up = element.parentElement; up !== null && !scrolls; up = up.parentElement) scrolls = ["auto", "scroll"].includes(getComputedStyle(up).overflowX)
        if (!scrolls) out.push(element.tagName.toLowerCase() + (element.id === "" ? "" : "#" + element.id) + " (" + right + " px)")
      }
      return out.slice(0, 12).join(", ")
    })()`)
  )

describe("Console in Chromium: failures", () => {
  it.scopedLive("a primary that is down: the overview counts its failed attempts, the call's page lists them, the log filters them; readable at 420 px", () =>
    Effect.gen(function*() {
      const browser = yield* launch
      const app = yield* Down.makeApp
      const client = yield* clientFor(app, { turnTimeoutMs: 20_000 })
      yield* Down.twoTurns(app, client)
      const calls = yield* app.store.callsOf(Down.CONVERSATION).pipe(Effect.orDie)
      const failed = 2 * Down.FAILED_PER_CALL
      const page = yield* Effect.acquireRelease(
        Effect.promise(() => browser.newPage({ viewport: { width: 1280, height: 900 } })),
        (p) => Effect.promise(() => p.close())
      )
      const pageErrors: Array<string> = []
      page.on("pageerror", (error) => pageErrors.push(error.message))

      // The overview: no call failed, yet the model and its primary show the failed attempts.
      yield* goto(page, `${app.baseUrl}/console`)
      const model = `tr[data-model="fake-model"]`
      assert.strictEqual(yield* text(page, `${model} td[data-col="failed-calls"]`), "0")
      assert.strictEqual(yield* text(page, `${model} td[data-col="failed-attempts"]`), String(failed))
      assert.include(yield* text(page, `${model} td[data-col="error-rate"]`), `${failed} of ${failed + 2}`)
      assert.include(yield* text(page, `${model} td[data-col="errors"]`), "network error")
      assert.strictEqual(yield* text(page, `tr[data-provider="${Down.DOWN}"] td[data-col="failed-attempts"]`), String(failed))
      assert.strictEqual(yield* text(page, `tr[data-provider="fake-openai"] td[data-col="failed-attempts"]`), "0")
      // The tab's icon is an inline SVG.
      assert.match((yield* Effect.promise(() => page.locator(`link[rel="icon"]`).getAttribute("href"))) ?? "", /^data:image\/svg\+xml,/)
      yield* shot(page, "overview-1280")

      // A recent error links to its call: the attempts in order, the fallback's answer last.
      yield* Effect.promise(() => Promise.all([page.waitForURL(/\/console\/calls\//, { timeout: WAIT_MS }), page.locator(`${model} td[data-col="errors"] a`).first().click()]))
      assert.strictEqual(yield* count(page, `tr[data-outcome="failed"]`), Down.FAILED_PER_CALL)
      assert.strictEqual(yield* count(page, `tr[data-outcome="answered"]`), 1)
      const firstAttempt = yield* text(page, `tr[data-attempt="1"]`)
      assert.include(firstAttempt, `${Down.DOWN}/${Down.DOWN_UPSTREAM}`)
      assert.include(firstAttempt, "network error")
      assert.include(firstAttempt, "connection failed")
      assert.include(yield* text(page, `tr[data-outcome="answered"]`), Down.FALLBACK_TARGET)
      assert.include(yield* text(page, "#call-status"), "answered")
      yield* shot(page, "call-1280")

      // The second call's request: the shared history folded, what it added shown, and the answer.
      yield* goto(page, `${app.baseUrl}/console/calls/${encodeURIComponent(calls[1]!.callId)}`)
      yield* Effect.promise(() => Promise.all([page.waitForURL(/messages=1/, { timeout: WAIT_MS }), page.locator("#show-request").click()]))
      assert.isNull(yield* Effect.promise(() => page.locator("#history").getAttribute("open")))
      assert.isFalse(yield* Effect.promise(() => page.locator("#history .message").first().isVisible()))
      assert.include(yield* text(page, "#added"), "And now?")
      assert.include(yield* text(page, "#answer"), "The fallback again.")
      yield* Effect.promise(() => page.locator("#history > summary").click())
      assert.include(yield* text(page, "#history"), "Is the primary up?")
      yield* shot(page, "request-1280")

      // The call log, filtered to the calls with failed attempts (through its link).
      yield* goto(page, `${app.baseUrl}/console/calls`)
      yield* Effect.promise(() => Promise.all([page.waitForURL(/outcome=retried/, { timeout: WAIT_MS }), page.locator(`a[data-filter="outcome"][data-value="retried"]`).click()]))
      assert.strictEqual(yield* Effect.promise(() => page.locator("#calls").getAttribute("data-total")), "2")
      assert.strictEqual(yield* text(page, `tr[data-call="${calls[0]!.callId}"] td[data-col="failed-attempts"]`), String(Down.FAILED_PER_CALL))
      yield* shot(page, "log-1280")

      // 420 px: nothing sticks out of the window on any page.
      yield* Effect.promise(() => page.setViewportSize({ width: 420, height: 900 }))
      const narrow = [
        ["overview-420", "/console"],
        ["conversation-420", `/console/conversations/${Down.CONVERSATION}`],
        ["call-420", `/console/calls/${encodeURIComponent(calls[0]!.callId)}`],
        ["log-420", "/console/calls"],
        ["tab-420", "/console/tab"]
      ] as const
      for (const [name, path] of narrow) {
        yield* goto(page, `${app.baseUrl}${path}`)
        assert.strictEqual(yield* overflow(page), 0, `${path} is wider than 420 px: ${yield* sticking(page)}`)
        yield* shot(page, name)
      }
      assert.deepStrictEqual(pageErrors, [])
    }), 60_000)
})
