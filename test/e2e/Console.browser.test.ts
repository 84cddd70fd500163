/**
 * The web console in a real headless Chromium (Debian's `chromium`, driven by `playwright-core`;
 * `.ci/run` installs it): after a scripted session with the fake provider, the overview lists
 * the conversation with its tokens and cost, its page shows each model call's tokens, cost and
 * prefix status with the deliberately broken system prompt at the right byte, and the running
 * panel shows a slow turn while it streams and drops it once it ended, without a reload.
 * Screenshots go to `test-artifacts/console/`.
 *
 * Without Chromium the test fails and says how to install it (CI always has it).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { existsSync, mkdirSync } from "node:fs"
import { join } from "node:path"
import { chromium } from "playwright-core"
import type { Browser, Page } from "playwright-core"
import { cacheShare } from "../../src/console/Charts.js"
import { formatCompact, formatInt, formatShare, formatUsd } from "../../src/console/Html.js"
import * as AppHarness from "../support/AppHarness.js"
import { consoleConfig, CONVERSATION, expectedBreakByte, scriptSession, TITLE } from "../support/ConsoleSession.js"
import * as FakeProvider from "../support/FakeProvider.js"
import { assertCleanOk, clientFor } from "../support/Transcripts.js"

const CHROMIUM = process.env["BYOK_CHROMIUM"] ?? "/usr/bin/chromium"
const ARTIFACTS = join(process.cwd(), "test-artifacts", "console")
/** Bounded waits for what the page shows (never a duration asserted). */
const WAIT_MS = 10_000

const launch = Effect.acquireRelease(
  Effect.promise(async (): Promise<Browser> => {
    if (!existsSync(CHROMIUM)) {
      throw new Error(
        `Chromium is not installed at ${CHROMIUM}: the console's browser test needs it. Install Debian's package ` +
          "(apt-get update && apt-get install -y --no-install-recommends chromium), as .ci/run does, or set BYOK_CHROMIUM to a Chromium binary."
      )
    }
    return chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"] })
  }),
  (browser) => Effect.promise(() => browser.close())
)

const shot = (page: Page, name: string) =>
  Effect.promise(async () => {
    mkdirSync(ARTIFACTS, { recursive: true })
    await page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: true })
  })

const text = (page: Page, selector: string) => Effect.promise(() => page.locator(selector).innerText())

describe("Console in Chromium", () => {
  it.scopedLive("lists the conversation, opens it, shows each call's tokens, cost and prefix status with the break at its byte, and follows a streaming turn live", () =>
    Effect.gen(function*() {
      const browser = yield* launch
      const app = yield* AppHarness.make({ config: consoleConfig() })
      const client = yield* clientFor(app, { turnTimeoutMs: 20_000 })
      yield* scriptSession(app, client)
      const page = yield* Effect.acquireRelease(
        Effect.promise(() => browser.newPage({ viewport: { width: 1360, height: 900 } })),
        (p) => Effect.promise(() => p.close())
      )
      // A script error on the page fails the test.
      const pageErrors: Array<string> = []
      page.on("pageerror", (error) => pageErrors.push(error.message))

      // The overview: the conversation, its title, tokens, cost and cache-read share.
      yield* Effect.promise(() => page.goto(`${app.baseUrl}/console`))
      const listed = (yield* app.store.conversations(10, CONVERSATION).pipe(Effect.orDie))[0]!
      const row = `tr[data-conversation="${CONVERSATION}"]`
      const rowText = yield* text(page, row)
      assert.include(rowText, TITLE)
      const u = listed.usage
      assert.include(rowText, formatCompact(u.input + u.cacheRead + u.cacheWrite + u.output))
      assert.include(rowText, formatUsd(listed.costUsd))
      assert.include(rowText, formatShare(cacheShare(u)))
      assert.isAbove(listed.costUsd, 0)
      assert.isAbove(yield* Effect.promise(() => page.locator("#chart-tokens rect").count()), 0)
      yield* shot(page, "overview")

      // Its page, through the link: each call with its tokens, cost and prefix status.
      yield* Effect.promise(() => Promise.all([page.waitForURL(/\/console\/conversations\//), page.locator(`${row} a`).click()]))
      const calls = yield* app.store.callsOf(CONVERSATION).pipe(Effect.orDie)
      assert.strictEqual(yield* Effect.promise(() => page.locator("tr[data-call]").count()), calls.length)
      for (const call of calls) {
        const callRow = `tr[data-call="${call.callId}"]`
        assert.strictEqual(yield* text(page, `${callRow} td[data-col="input"]`), formatInt(call.usage!.input))
        assert.strictEqual(yield* text(page, `${callRow} td[data-col="cache-read"]`), formatInt(call.usage!.cacheRead))
        assert.strictEqual(yield* text(page, `${callRow} td[data-col="output"]`), formatInt(call.usage!.output))
        assert.strictEqual(yield* text(page, `${callRow} td[data-col="cost"]`), formatUsd(call.costUsd))
      }
      const prefixes = yield* Effect.promise(() => page.locator("tr[data-call] [data-prefix]").evaluateAll((nodes) => nodes.map((n) => n.getAttribute("data-prefix"))))
      assert.deepStrictEqual(prefixes, ["First", "Extends", "Break"])
      const byte = expectedBreakByte(app, 1, 2)
      const breakText = yield* text(page, `tr[data-call="${calls[2]!.callId}"] [data-prefix="Break"]`)
      assert.include(breakText, "break in the system prompt")
      assert.include(breakText, `first differing byte ${byte.toLocaleString("en-US")}`)
      assert.include(breakText, "in the system prompt")
      // Messages stay hidden until asked for.
      assert.notInclude(yield* Effect.promise(() => page.content()), "Tests run with vitest.")
      yield* shot(page, "conversation")

      // A slow turn: the running panel (polled by the page's script) shows it, then drops it.
      yield* Effect.promise(() => page.goto(`${app.baseUrl}/console`))
      assert.strictEqual(yield* Effect.promise(() => page.locator("#running").getAttribute("data-count")), "0")
      app.provider.enqueue(FakeProvider.sse(FakeProvider.openAiChat.pacedText(Array.from({ length: 12 }, (_, i) => `part ${i} `), 300)))
      const slow = yield* Effect.fork(Effect.promise(() => client.run({ conversationId: "conv-console-live", text: "Stream slowly, please" })))
      yield* Effect.promise(() => page.locator("#running[data-count=\"1\"]").waitFor({ state: "attached", timeout: WAIT_MS }))
      assert.include(yield* text(page, "#running-rows"), "conv-console-live")
      assert.include(yield* text(page, "#running-rows"), "fake-model")
      yield* shot(page, "running")
      assertCleanOk(yield* Fiber.join(slow))
      yield* Effect.promise(() => page.locator("#running[data-count=\"0\"]").waitFor({ state: "attached", timeout: WAIT_MS }))
      assert.include(yield* text(page, "#running-rows"), "No turn is running.")
      assert.deepStrictEqual(pageErrors, [])
    }), 60_000)
})
