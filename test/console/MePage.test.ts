/**
 * A user's own page, rendered from a view: their models, limits and spend marked as the users
 * page marks them, their conversations without links, escaped; the pointer pages for the
 * operator and one person's server; the page's links keep a token only when the query brought it.
 */
import { assert, describe, it } from "@effect/vitest"
import { passedByTheDoor } from "../../src/console/Access.js"
import { ME_CONVERSATIONS, mePage, notAUserPage } from "../../src/console/MePage.js"
import { linksOf } from "../../src/console/Pages.js"
import { emptyUsage } from "../../src/Llm.js"
import type { ConversationInsight } from "../../src/Store.js"

const links = linksOf(undefined)
const bob = { userId: "user_bob", name: "bob", models: ["gpt-5", "claude"], dailyUsd: 1, monthlyUsd: 10 }

const conversation = (conversationId: string, title: string, lastActivityMs: number): ConversationInsight => ({
  conversationId,
  status: "idle",
  title,
  model: "gpt-5",
  turns: 2,
  messageCount: 4,
  calls: 2,
  usage: emptyUsage,
  costUsd: 0.25,
  startedAtMs: lastActivityMs - 60_000,
  lastActivityMs
})

describe("a user's own page", () => {
  it("their models, spend against limits marked as on the users page, their conversations listed without links", () => {
    const page = mePage({
      user: bob,
      spend: { todayUsd: 1.2, monthUsd: 8.5 },
      conversations: [conversation("conv-bob-2", "<b>fix the build</b>", Date.UTC(2026, 11, 2, 10)), conversation("conv-bob-1", "", Date.UTC(2026, 11, 1))]
    }, links, "nonce")
    assert.include(page, `data-user="bob"`)
    assert.include(page, "gpt-5, claude")
    assert.match(page, /data-col="today" data-state="reached"[^>]*>\$1\.20/)
    assert.include(page, "limit reached")
    assert.match(page, /data-col="month" data-state="near"[^>]*>\$8\.50/)
    assert.include(page, "over 80%")
    assert.include(page, "$1.00 a day, $10.00 a month")
    // Newest first as given, titles escaped, ids shown; no conversation page is linked (they are the operator's).
    assert.isBelow(page.indexOf(`data-conversation="conv-bob-2"`), page.indexOf(`data-conversation="conv-bob-1"`))
    assert.include(page, "&lt;b&gt;fix the build&lt;/b&gt;")
    assert.include(page, "<code>conv-bob-1</code>")
    assert.include(page, "(no user message)")
    assert.include(page, "2026-12-02 10:00:00")
    assert.notInclude(page, "/console/conversations/")
    // None of the operator's pages is offered: they would answer 403.
    assert.notInclude(page, "/console/users")
    assert.notInclude(page, "/console/calls")
  })

  it("no limit and no conversation said so; the list's cap named when reached", () => {
    const free = mePage({ user: { ...bob, models: undefined, dailyUsd: undefined, monthlyUsd: undefined }, spend: { todayUsd: 0, monthUsd: 0 }, conversations: [] }, links, "nonce")
    assert.include(free, "every model")
    assert.include(free, "no day limit, no month limit")
    assert.match(free, /data-col="today" data-state="ok"/)
    assert.include(free, "No conversation yet.")
    const many = Array.from({ length: ME_CONVERSATIONS }, (_, i) => conversation(`conv-${i}`, `chat ${i}`, Date.UTC(2026, 11, 1) - i))
    assert.include(mePage({ user: bob, spend: { todayUsd: 0, monthUsd: 0 }, conversations: many }, links, "nonce"), `the last ${ME_CONVERSATIONS}`)
  })

  it("the operator is pointed at the users page; one person's server says it has no users and links to the console", () => {
    const operator = notAUserPage(true, linksOf("op-token"), "nonce")
    assert.include(operator, "A user&#39;s page")
    assert.include(operator, `href="/console/users?token=op-token"`)
    const single = notAUserPage(false, links, "nonce")
    assert.include(single, "There are no users on this server")
    assert.include(single, `href="/console"`)
  })

  it("the page's links keep the user's token only when it came in the query", () => {
    const base = { remoteAddress: "10.0.0.9", hostHeader: "byok.example.com", authorization: undefined, queryToken: "byok_u_bob" }
    assert.deepStrictEqual(passedByTheDoor(base), { _tag: "Allowed", loopbackClient: false, linkToken: "byok_u_bob" })
    assert.strictEqual(passedByTheDoor({ ...base, authorization: "Bearer byok_u_bob" }).linkToken, undefined)
    assert.strictEqual(passedByTheDoor({ ...base, tokenHeader: "byok_u_bob" }).linkToken, undefined)
    const page = mePage({ user: bob, spend: { todayUsd: 0, monthUsd: 0 }, conversations: [] }, linksOf("byok_u_bob"), "nonce")
    assert.include(page, `href="/console/me?token=byok_u_bob"`)
  })
})
