/**
 * The console's Tab page as pure functions: the percentiles of the first-suggestion samples,
 * the rows (the configured model first, even before a request), the acceptance rate and the
 * escaping of names (the HTTP behaviour is `test/e2e/ConsoleTab.test.ts`).
 */
import { assert, describe, it } from "@effect/vitest"
import { Redacted } from "effect"
import { linksOf } from "../../src/console/Pages.js"
import { percentile, tabPage, tabView } from "../../src/console/TabPage.js"
import type { TabSettings } from "../../src/tab/Service.js"
import { TabStats } from "../../src/tab/Stats.js"

const settings = (model: string): TabSettings => ({
  model: `local/${model}`,
  api: "llamacpp-infill",
  chat: undefined,
  target: { provider: "local", api: "llamacpp-infill", baseUrl: "http://127.0.0.1:8080", apiKey: Redacted.make("sk-secret"), headers: {}, model, timeoutMs: 1000 },
  limits: { maxLines: 8, maxTokens: 64, prefixChars: 100, suffixChars: 100, contextChars: 0 },
  price: { input: 0.1, output: 0.2 },
  shareMs: 1000,
  files: { maxFiles: 1, maxBytes: 1, maxFileBytes: 1 }
})

describe("Console Tab page", () => {
  it("percentile: nearest rank, null without samples", () => {
    assert.isNull(percentile([], 0.5))
    assert.strictEqual(percentile([40], 0.9), 40)
    const values = [10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
    assert.strictEqual(percentile(values, 0.5), 50)
    assert.strictEqual(percentile(values, 0.9), 90)
    assert.strictEqual(percentile([...values].reverse(), 0.9), 90)
  })

  it("rows: the configured model first (even with nothing counted), figures from the stats, the acceptance rate", () => {
    const stats = new TabStats()
    stats.request("old/model", "r0")
    for (const id of ["r1", "r2", "r3", "r4"]) stats.request("local/coder", id)
    stats.usage("local/coder", 120, 8, 0.25)
    stats.outcome("local/coder", "reused")
    for (const ms of [30, 10, 20]) stats.firstSuggestion("local/coder", ms)
    stats.fate("r1", "accept")
    stats.fate("r2", "partial")
    stats.fate("r3", "reject")
    stats.fate("r4", "reject")
    const view = tabView(settings("coder"), stats.snapshot())
    assert.deepStrictEqual(view.models.map((row) => row.model), ["local/coder", "old/model"])
    const row = view.models[0]!
    assert.strictEqual(row.requests, 4)
    assert.strictEqual(row.calls, 1)
    assert.strictEqual(row.reused, 1)
    assert.strictEqual(row.firstSuggestionP50Ms, 20)
    assert.strictEqual(row.firstSuggestionP90Ms, 30)
    assert.strictEqual(row.acceptanceRate, 0.5)
    const html = tabPage(view, linksOf(undefined), "nonce")
    assert.include(html, "50% <span class=\"muted\">(2 of 4)</span>")
    assert.include(html, "1 accepted &middot; 1 partly &middot; 2 rejected")
    assert.include(html, "llamacpp-infill")
    assert.include(html, "in use")

    const fresh = tabView(settings("fresh"), [])
    assert.deepStrictEqual(fresh.models.map((row) => [row.model, row.requests, row.acceptanceRate]), [["local/fresh", 0, null]])
  })

  it("off: no setup, the rows the stats still hold; names are escaped; no key", () => {
    const stats = new TabStats()
    stats.request("p/<script>x</script>", undefined)
    const off = tabPage(tabView(undefined, stats.snapshot()), linksOf(undefined), "nonce")
    assert.include(off, "Tab is off")
    assert.include(off, "p/&lt;script&gt;x&lt;/script&gt;")
    assert.notInclude(off, "<script>x")
    const on = tabPage(tabView(settings("<b>m</b>"), []), linksOf(undefined), "nonce")
    assert.include(on, "<code>&lt;b&gt;m&lt;/b&gt;</code>")
    assert.notInclude(on, "sk-secret")
  })
})
